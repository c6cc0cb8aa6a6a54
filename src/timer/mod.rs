//! The `Timer` handle: configuration, which driver runs, and the current timer.

mod current;

pub use current::EnterGuard;

use crate::driver::{
    self,
    clock::{Clock, Source},
    Shared,
};
use crate::time::error::ZeroPeriod;
use crate::time::{Interval, Sleep, Timeout};
use std::fmt;
use std::future::IntoFuture;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// The largest wheel size [`Builder::wheel_size`] accepts.
pub const MAX_WHEEL_SIZE: usize = 1 << 16;

/// A handle to one timing wheel and its driver. Cheap to clone; every clone is the same
/// timer.
///
/// Most code never names a `Timer`: [`sleep`](crate::sleep) and friends use the
/// [current](Timer::current) one. Build your own to choose the tick, the wheel size or the
/// driver, or to keep some timers apart from the others.
///
/// The timer lives while any handle or any [`Sleep`] of it does (a default timer is also
/// held by the list of defaults, until its runtime shuts down); its driver ends when it is
/// gone.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let timer = tickless::Timer::new();
/// timer.sleep(Duration::from_millis(5)).await;
/// let slow = timer.timeout(Duration::from_millis(5), std::future::pending::<()>()).await;
/// assert!(slow.is_err());
/// # }
/// ```
#[derive(Clone)]
pub struct Timer {
    pub(crate) shared: Arc<Shared>,
}

impl Timer {
    /// A timer with the defaults: a 1 ms tick, 64 buckets per level, and a driver task on
    /// the current tokio runtime, or a driver thread when called outside one (or inside a
    /// runtime built without `enable_time`).
    ///
    /// # Panics
    ///
    /// Only if the operating system refuses to start a driver thread.
    pub fn new() -> Timer {
        match Builder::new().build() {
            Ok(timer) => timer,
            Err(error) => panic!("tickless: {error}"),
        }
    }

    /// A builder to choose the tick, the wheel size and the driver.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// The timer that [`sleep`](crate::sleep), [`timeout`](crate::timeout) and the other
    /// free functions use on this thread now. In order:
    ///
    /// 1. the timer most recently [entered](Timer::enter) on this thread, if its guard
    ///    is alive;
    /// 2. inside a tokio runtime: that runtime's default timer for this thread, made on
    ///    first use with [`Timer::new`]'s settings and a driver task on that runtime (so a
    ///    paused tokio clock drives it). A runtime's default is sharded by thread (up to
    ///    twice the available parallelism): worker threads mostly get different timers,
    ///    so they do not contend for one lock. A `Sleep` keeps the timer it was made
    ///    with wherever it is polled or dropped, and [`Timer::stats`] counts one shard;
    /// 3. outside any runtime: a process-wide default timer with a driver thread, made on
    ///    first use.
    pub fn current() -> Timer {
        current::current()
    }

    /// Makes this timer the current one on this thread until the guard is dropped.
    /// Guards nest; drop them in reverse order of creation.
    ///
    /// ```
    /// let timer = tickless::Timer::builder().tick(std::time::Duration::from_micros(100)).build().unwrap();
    /// let _guard = timer.enter();
    /// assert!(tickless::Timer::current().same_timer(&timer));
    /// ```
    pub fn enter(&self) -> EnterGuard {
        current::enter(self.clone())
    }

    /// Whether two handles are the same timer.
    pub fn same_timer(&self, other: &Timer) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The current instant on this timer's clock: tokio's `Instant::now()` for a task
    /// driver (read in its runtime, so a paused clock counts), the real clock for a thread
    /// driver, and for a [manual clock](Builder::manual_clock), where
    /// [`advance`](Self::advance) has put it.
    pub fn now(&self) -> Instant {
        self.shared.clock.now()
    }

    /// Moves this timer's [manual clock](Builder::manual_clock) forward by `duration` and
    /// fires every timer now due. When it returns, each fired timer's waker has been
    /// woken; the woken tasks run when their executor gets to them.
    ///
    /// Works the same on any runtime flavour and any executor: unlike tokio's paused
    /// clock, a manual clock is not tied to a current-thread runtime.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickless::Timer;
    ///
    /// let timer = Timer::builder().manual_clock().build().unwrap();
    /// let mut sleep = timer.sleep(Duration::from_secs(3600));
    /// let waker = std::task::Waker::noop();
    /// let mut cx = std::task::Context::from_waker(waker);
    /// assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(3600));
    /// assert!(sleep.is_elapsed());
    /// # use std::future::Future;
    /// ```
    ///
    /// # Panics
    ///
    /// If this timer's clock is not manual: only a manual clock can be moved.
    #[track_caller]
    pub fn advance(&self, duration: Duration) {
        let to = driver::clock::deadline_after(self.now(), duration);
        self.advance_to(to);
    }

    /// Moves this timer's [manual clock](Builder::manual_clock) forward to `instant` (an
    /// earlier instant leaves it where it is) and fires every timer now due, as
    /// [`advance`](Self::advance) does.
    ///
    /// # Panics
    ///
    /// If this timer's clock is not manual.
    #[track_caller]
    pub fn advance_to(&self, instant: Instant) {
        assert!(
            self.shared.advance_manual(instant),
            "Timer::advance needs a manual clock: build the timer with Timer::builder().manual_clock(), \
             or move tokio's clock with tokio::time::advance under a paused runtime"
        );
    }

    /// The tick: the resolution of this timer's deadlines (1 ms by default, 1 ns with a
    /// manual clock).
    pub fn tick(&self) -> Duration {
        self.shared.clock.tick()
    }

    /// A future that completes `duration` from now on this timer.
    /// See [`sleep`](crate::sleep).
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::after(self.clone(), duration)
    }

    /// A future that completes at `deadline` on this timer.
    /// See [`sleep_until`](crate::sleep_until).
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::new(self.clone(), deadline)
    }

    /// Requires `future` to complete within `duration` on this timer.
    /// See [`timeout`](crate::timeout).
    pub fn timeout<F: IntoFuture>(&self, duration: Duration, future: F) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep(duration))
    }

    /// Requires `future` to complete before `deadline` on this timer.
    /// See [`timeout_at`](crate::timeout_at).
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep_until(deadline))
    }

    /// An interval ticking at once, then every `period`, on this timer.
    /// See [`interval`](crate::interval).
    ///
    /// # Panics
    ///
    /// If `period` is zero; [`try_interval`](Self::try_interval) returns an error instead.
    #[track_caller]
    pub fn interval(&self, period: Duration) -> Interval {
        self.interval_at(self.now(), period)
    }

    /// An interval ticking at `start`, then every `period`, on this timer.
    /// See [`interval_at`](crate::interval_at).
    ///
    /// # Panics
    ///
    /// If `period` is zero; [`try_interval_at`](Self::try_interval_at) returns an error
    /// instead.
    #[track_caller]
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        match self.try_interval_at(start, period) {
            Ok(interval) => interval,
            Err(_) => panic!(
                "`period` must be non-zero: pass a positive Duration, or use \
                 Timer::try_interval to handle a zero period as an error"
            ),
        }
    }

    /// [`interval`](Self::interval), with an error instead of a panic for a zero period.
    pub fn try_interval(&self, period: Duration) -> Result<Interval, ZeroPeriod> {
        self.try_interval_at(self.now(), period)
    }

    /// [`interval_at`](Self::interval_at), with an error instead of a panic for a zero
    /// period.
    pub fn try_interval_at(
        &self,
        start: Instant,
        period: Duration,
    ) -> Result<Interval, ZeroPeriod> {
        if period.is_zero() {
            return Err(ZeroPeriod::new());
        }
        Ok(Interval::new(self.sleep_until(start), period))
    }

    /// What this timer's driver and wheel have done so far, and what they hold.
    pub fn stats(&self) -> Stats {
        let s = self.shared.snapshot();
        Stats {
            driver_wakeups: s.wakeups,
            buckets_flushed: s.buckets_flushed,
            entries_fired: s.entries_fired,
            entries_demoted: s.entries_demoted,
            waker_panics: s.waker_panics,
            registered: s.registered,
            levels: s.levels,
        }
    }
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("tick", &self.tick())
            .finish_non_exhaustive()
    }
}

/// Counters from [`Timer::stats`].
///
/// The driver wakes once per non-empty bucket expiry plus once per notification (an
/// insert that needed an earlier wakeup), never per tick; `driver_wakeups` proves it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Turns the driver has run: each wakeup of its task or thread, or each
    /// [`Timer::advance`] of a manual clock.
    pub driver_wakeups: u64,
    /// Non-empty buckets whose expiry came and whose entries were fired or moved down.
    pub buckets_flushed: u64,
    /// Timers whose deadline came.
    pub entries_fired: u64,
    /// Timers moved from a flushed bucket to a lower, finer level.
    pub entries_demoted: u64,
    /// Wakers that panicked when woken (the panic is caught; the driver goes on).
    pub waker_panics: u64,
    /// Timers held now: registered `Sleep`s, fired or not, that have not completed.
    pub registered: usize,
    /// Levels the wheel has grown so far.
    pub levels: usize,
}

/// Which driver advances a timer's wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Driver {
    /// A task on the current tokio runtime, waiting with tokio's timer: a paused tokio
    /// clock drives the wheel. Needs a runtime with time enabled.
    Task,
    /// A thread of its own, parking until the next expiry: works under any executor, on
    /// the real clock, even when called from a paused runtime (whose instants therefore do
    /// not match it: build deadlines from [`Timer::now`]).
    Thread,
}

/// Builds a [`Timer`] with chosen settings.
///
/// ```
/// use std::time::Duration;
/// use tickless::{Driver, Timer};
///
/// let timer = Timer::builder()
///     .tick(Duration::from_micros(250))
///     .wheel_size(256)
///     .driver(Driver::Thread)
///     .build()?;
/// # Ok::<(), tickless::BuildError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    /// `None`: 1 ms, or 1 ns with a manual clock.
    tick: Option<Duration>,
    wheel_size: usize,
    driver: Option<Driver>,
    manual_clock: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// The defaults: 1 ms tick, 64 buckets per level, driver chosen at build time.
    pub fn new() -> Builder {
        Builder {
            tick: None,
            wheel_size: 64,
            driver: None,
            manual_clock: false,
        }
    }

    /// A manual clock: the timer's time starts at tokio's now and moves only when
    /// [`Timer::advance`] or [`Timer::advance_to`] is called, which fire what has come
    /// due before returning. Its tick defaults to 1 ns, so "due" is exact; with a coarser
    /// [`tick`](Self::tick), deadlines round up to it as on any clock. Such a timer has no
    /// driver, needs no runtime, and works the
    /// same on a multi-thread runtime, under `block_on`, or across plain threads:
    /// deterministic virtual time where tokio's paused clock cannot go. Cannot be combined
    /// with [`driver`](Self::driver).
    pub fn manual_clock(mut self) -> Builder {
        self.manual_clock = true;
        self
    }

    /// The width of a level-0 bucket: deadlines are rounded up to it. Must not be zero.
    /// A task driver waits with tokio's timer, whose own resolution is 1 ms; ticks below
    /// that pay off with [`Driver::Thread`].
    pub fn tick(mut self, tick: Duration) -> Builder {
        self.tick = Some(tick);
        self
    }

    /// Buckets per level: a power of two from 2 to [`MAX_WHEEL_SIZE`].
    pub fn wheel_size(mut self, wheel_size: usize) -> Builder {
        self.wheel_size = wheel_size;
        self
    }

    /// Which driver to run. Without this call: [`Driver::Task`] inside a tokio runtime
    /// with time enabled, [`Driver::Thread`] anywhere else.
    pub fn driver(mut self, driver: Driver) -> Builder {
        self.driver = Some(driver);
        self
    }

    /// Checks the settings and starts the driver.
    ///
    /// # Errors
    ///
    /// A zero tick, a wheel size that is not a power of two from 2 to [`MAX_WHEEL_SIZE`],
    /// [`Driver::Task`] outside a tokio runtime or in one without time enabled, or a
    /// driver thread the operating system would not start.
    pub fn build(self) -> Result<Timer, BuildError> {
        let default_tick = if self.manual_clock {
            Duration::from_nanos(1)
        } else {
            Duration::from_millis(1)
        };
        let tick = self.tick.unwrap_or(default_tick);
        if tick.is_zero() {
            return Err(BuildError(ErrorKind::ZeroTick));
        }
        if !(2..=MAX_WHEEL_SIZE).contains(&self.wheel_size) || !self.wheel_size.is_power_of_two() {
            return Err(BuildError(ErrorKind::WheelSize(self.wheel_size)));
        }
        if self.manual_clock {
            if let Some(driver) = self.driver {
                return Err(BuildError(ErrorKind::ManualWithDriver(driver)));
            }
            let clock = Clock::new(tick, Source::Manual);
            let shared = Arc::new(Shared::new(clock, self.wheel_size));
            shared.set_running(driver::Running::Manual);
            return Ok(Timer { shared });
        }
        let runtime = Handle::try_current().ok();
        let driver = match (self.driver, &runtime) {
            (Some(Driver::Thread), _) => Driver::Thread,
            (Some(Driver::Task), None) => return Err(BuildError(ErrorKind::NoRuntime)),
            (Some(Driver::Task), Some(handle)) if !time_enabled(handle) => {
                return Err(BuildError(ErrorKind::TimeDisabled));
            }
            (None, Some(handle)) if time_enabled(handle) => Driver::Task,
            (Some(Driver::Task), Some(_)) => Driver::Task,
            (None, _) => Driver::Thread,
        };
        let source = match driver {
            Driver::Task => Source::Tokio,
            Driver::Thread => Source::Real,
        };
        let shared = Arc::new(Shared::new(Clock::new(tick, source), self.wheel_size));
        match (driver, runtime) {
            (Driver::Task, Some(handle)) => driver::spawn_task(&shared, &handle),
            _ => shared
                .start_thread()
                .map_err(|error| BuildError(ErrorKind::Thread(error.to_string())))?,
        }
        Ok(Timer { shared })
    }
}

/// Whether `handle`'s runtime has its time driver enabled. tokio offers no query, and
/// creating a `Sleep` without one panics; this catches that panic. It is only reached on
/// the path that builds a timer, never per `Sleep`.
fn time_enabled(handle: &Handle) -> bool {
    let _enter = handle.enter();
    catch_unwind(AssertUnwindSafe(|| {
        drop(tokio::time::sleep(Duration::ZERO));
    }))
    .is_ok()
}

/// Why [`Builder::build`] refused a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(ErrorKind);

#[derive(Clone, Debug, PartialEq, Eq)]
enum ErrorKind {
    ZeroTick,
    WheelSize(usize),
    NoRuntime,
    TimeDisabled,
    Thread(String),
    ManualWithDriver(Driver),
}

impl BuildError {
    /// The tick was zero.
    pub fn is_invalid_tick(&self) -> bool {
        matches!(self.0, ErrorKind::ZeroTick)
    }

    /// The wheel size was not a power of two from 2 to [`MAX_WHEEL_SIZE`].
    pub fn is_invalid_wheel_size(&self) -> bool {
        matches!(self.0, ErrorKind::WheelSize(_))
    }

    /// [`Driver::Task`] was asked for outside a tokio runtime, or in one built without
    /// time enabled.
    pub fn is_no_runtime(&self) -> bool {
        matches!(self.0, ErrorKind::NoRuntime | ErrorKind::TimeDisabled)
    }

    /// A driver was asked for along with a manual clock, which has none.
    pub fn is_manual_with_driver(&self) -> bool {
        matches!(self.0, ErrorKind::ManualWithDriver(_))
    }

    /// The operating system would not start a driver thread.
    pub fn is_thread_spawn(&self) -> bool {
        matches!(self.0, ErrorKind::Thread(_))
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ErrorKind::ZeroTick => write!(f, "invalid tick 0ns: the tick must be positive"),
            ErrorKind::WheelSize(size) => write!(
                f,
                "invalid wheel_size {size}: must be a power of two from 2 to {MAX_WHEEL_SIZE}"
            ),
            ErrorKind::NoRuntime => write!(
                f,
                "invalid driver Task: no tokio runtime is current; build inside one or use Driver::Thread"
            ),
            ErrorKind::TimeDisabled => write!(
                f,
                "invalid driver Task: the current tokio runtime has no time driver; call enable_time on its builder or use Driver::Thread"
            ),
            ErrorKind::Thread(error) => write!(f, "failed to start the driver thread: {error}"),
            ErrorKind::ManualWithDriver(driver) => write!(
                f,
                "invalid driver {driver:?} with manual_clock: a manual clock has no driver; Timer::advance fires timers"
            ),
        }
    }
}

impl std::error::Error for BuildError {}
