//! The `Timer` handle: configuration, which driver runs, and the current timer.

mod builder;
pub(crate) mod current;
mod free;

pub use builder::{BuildError, Builder, Driver, MAX_SHARDS, MAX_WHEEL_SIZE};
pub use current::EnterGuard;
pub use free::{interval, interval_at, sleep, sleep_until, timeout, timeout_at};

use crate::driver::{shard::Shard, Core};
use crate::time::error::ZeroPeriod;
use crate::time::{Delay, Interval, Sleep, Timeout};
use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const NOT_MANUAL: &str = "Timer::advance needs a manual clock: build the timer with \
    Timer::builder().manual_clock(), or move tokio's clock with tokio::time::advance under a \
    paused runtime";

/// A handle to one timer: its wheels and their driver. Cheap to clone; every clone is the
/// same timer, and meant to be shared: cloned into every task that uses it.
///
/// Most code never names a `Timer`: [`sleep`](crate::sleep) and friends use the
/// [current](Timer::current) one. Build your own to choose the tick, the wheel size or the
/// driver, or to keep some timers apart from the others.
///
/// A timer is sharded by thread: a [`Sleep`] is registered on the wheel of the thread that
/// makes it, each wheel behind its own lock, and one driver turns them all. So one timer
/// shared by every worker of a multi-thread runtime does not make them contend for one
/// lock ([`Builder::shards`] sets how many wheels).
///
/// The timer lives while any handle or any [`Sleep`] of it does (a runtime's default timer
/// is also held by the list of defaults, until its runtime shuts down); its driver ends
/// when it is gone.
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
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    shards: Box<[Arc<Shard>]>,
}

thread_local! {
    /// This thread's shard of every timer, modulo the timer's number of shards: threads
    /// are numbered in the order they first use a timer.
    static SHARD: usize = {
        static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
}

impl Timer {
    /// The number of shards a timer gets when the builder is not told: twice the available
    /// parallelism, at most 64, so that the few threads that run tasks are unlikely to
    /// share one. The purgatories shard their key indexes by the same rule.
    pub(crate) fn default_shards() -> usize {
        static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *COUNT.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            (2 * cores).min(64)
        })
    }

    /// The instant `timeout` from now on this timer's clock, saturated to a far but
    /// representable instant (so `Duration::MAX` is a valid timeout).
    pub(crate) fn deadline_after(&self, timeout: Duration) -> Instant {
        crate::driver::clock::deadline_after(self.now(), timeout)
    }

    fn from_parts(core: Arc<Core>, shards: Box<[Arc<Shard>]>, max_pending: Option<usize>) -> Timer {
        // Callbacks (and purgatory expiries) are the driver's run entries: their bound.
        if let Some(max) = max_pending {
            core.set_run_bound(max);
        }
        Timer {
            inner: Arc::new(Inner { core, shards }),
        }
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// This thread's shard.
    pub(crate) fn shard(&self) -> &Arc<Shard> {
        &self.inner.shards[self.shard_index()]
    }

    /// The index of this thread's shard.
    pub(crate) fn shard_index(&self) -> usize {
        match self.inner.shards.len() {
            1 => 0,
            shards => SHARD.with(|shard| *shard) % shards,
        }
    }

    /// The shard at `index` (from [`shard_index`](Self::shard_index)).
    pub(crate) fn shard_at(&self, index: usize) -> &Arc<Shard> {
        &self.inner.shards[index]
    }

    /// A timer with the defaults: a 1 ms tick, 64 buckets per level, driven inside the
    /// current tokio runtime, or by a driver thread when called outside one (or inside a
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
    /// 2. inside a tokio runtime with time enabled: that runtime's default timer, made on
    ///    first use with [`Timer::new`]'s settings and driven inside the runtime's own timer
    ///    processing (so a paused tokio clock drives it). One timer per runtime, sharded
    ///    by thread like every timer;
    /// 3. anywhere else (outside any runtime, or in one built without `enable_time`): a
    ///    process-wide default timer with a driver thread, made on first use.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickless::Timer;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // Inside a runtime: the runtime's default timer, the same on every call.
    /// let timer = Timer::current();
    /// assert!(timer.same_timer(&Timer::current()));
    ///
    /// // A timer entered on this thread comes first.
    /// let fine = Timer::builder().tick(std::time::Duration::from_micros(100)).build().unwrap();
    /// let guard = fine.enter();
    /// assert!(Timer::current().same_timer(&fine));
    /// drop(guard);
    /// assert!(Timer::current().same_timer(&timer));
    /// # }
    /// ```
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
        Arc::ptr_eq(self.core(), other.core())
    }

    /// The current instant on this timer's clock: tokio's `Instant::now()` for a timer
    /// driven by tokio (read in its runtime, so a paused clock counts), the real clock for
    /// a thread driver, and for a [manual clock](Builder::manual_clock), where
    /// [`advance`](Self::advance) has put it.
    pub fn now(&self) -> Instant {
        self.core().clock.now()
    }

    /// Moves this timer's [manual clock](Builder::manual_clock) forward by `duration` and
    /// fires every timer now due. When it returns, each fired timer's waker has been
    /// woken; the woken tasks run when their executor gets to them.
    ///
    /// Works the same on any runtime flavour and any executor: unlike tokio's paused
    /// clock, a manual clock is not tied to a current-thread runtime. Concurrent calls
    /// add up: the clock moves by the sum of their durations. A call made from inside a
    /// waker this timer is waking returns at once; what it makes due fires before the
    /// outer call returns. The clock stops 584 years from its start.
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
        assert!(self.core().advance_by(duration), "{NOT_MANUAL}");
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
        assert!(self.core().advance_to(instant), "{NOT_MANUAL}");
    }

    /// The tick: the resolution of this timer's deadlines (1 ms by default, 1 ns with a
    /// manual clock).
    pub fn tick(&self) -> Duration {
        self.core().clock.tick()
    }

    /// A future that completes `duration` from now on this timer.
    /// See [`sleep`](crate::sleep).
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::after(self.shard().clone(), duration)
    }

    /// A future that completes at `deadline` on this timer.
    /// See [`sleep_until`](crate::sleep_until).
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::new(self.shard().clone(), deadline)
    }

    /// Requires `future` to complete within `duration` on this timer.
    /// See [`timeout`](crate::timeout).
    pub fn timeout<F: IntoFuture>(&self, duration: Duration, future: F) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), Delay::Bound(self.sleep(duration)))
    }

    /// Requires `future` to complete before `deadline` on this timer.
    /// See [`timeout_at`](crate::timeout_at).
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<F::IntoFuture> {
        Timeout::new(
            future.into_future(),
            Delay::Bound(self.sleep_until(deadline)),
        )
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
        Ok(Interval::new(self.shard().clone(), start, period))
    }

    /// What this timer's driver and wheels have done so far, and what they hold: the sum
    /// over its shards.
    pub fn stats(&self) -> Stats {
        let s = self.core().snapshot();
        Stats {
            driver_wakeups: s.wakeups,
            buckets_flushed: s.buckets_flushed,
            entries_fired: s.entries_fired,
            entries_demoted: s.entries_demoted,
            waker_panics: s.waker_panics,
            callbacks_fired: s.runs_fired,
            callback_panics: s.run_panics,
            registered: s.registered,
            pending_callbacks: s.pending_runs,
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

/// Counters from [`Timer::stats`], summed over the timer's shards.
///
/// The driver turns once per non-empty bucket expiry plus once per notification (an
/// insert that needed an earlier wakeup), never per tick; `driver_wakeups` proves it.
///
/// # Examples
///
/// A thousand timers an hour away cost the driver a handful of turns, not 3.6 million
/// ticks:
///
/// ```
/// use std::time::Duration;
/// use tickless::Timer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let sleeps = (0..1000).map(|_| timer.sleep(Duration::from_secs(3600)));
/// futures::future::join_all(sleeps).await;
///
/// let stats = timer.stats();
/// assert_eq!(stats.entries_fired, 1000);
/// assert_eq!(stats.registered, 0);
/// assert!(stats.driver_wakeups < 10, "a handful of turns");
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Turns the driver has run: each time tokio's timer woke it, each wakeup of its
    /// thread, or each [`Timer::advance`] of a manual clock.
    pub driver_wakeups: u64,
    /// Non-empty buckets whose expiry came and whose entries were fired or moved down.
    pub buckets_flushed: u64,
    /// Timers whose deadline came.
    pub entries_fired: u64,
    /// Timers moved from a flushed bucket to a lower, finer level.
    pub entries_demoted: u64,
    /// Wakers that panicked when woken or dropped by tickless (the panic is caught; the
    /// driver goes on).
    pub waker_panics: u64,
    /// Callbacks whose deadline came and that the driver took to run (one cancelled at
    /// that very moment does not run).
    pub callbacks_fired: u64,
    /// Callbacks that panicked while running (caught; the others run, the driver goes on).
    pub callback_panics: u64,
    /// Timers held now: registered `Sleep`s (and `Interval`s, `DelayQueue`s), fired or
    /// not, that have not completed.
    pub registered: usize,
    /// Callbacks pending now, as [`Timer::pending`] counts them.
    pub pending_callbacks: usize,
    /// Levels the deepest shard's wheel has grown so far.
    pub levels: usize,
}
