//! [`Builder`]: a timer's settings, which driver turns it, and why a configuration is
//! refused ([`BuildError`]).

use super::Timer;
use crate::driver::{
    self,
    clock::{Clock, Source},
    Core, Mode,
};
use std::fmt;
use std::time::Duration;
use tokio::runtime::Handle;

/// The largest wheel size [`Builder::wheel_size`] accepts.
pub const MAX_WHEEL_SIZE: usize = 1 << 16;

/// The most shards [`Builder::shards`] accepts.
pub const MAX_SHARDS: usize = 1024;

/// Which driver advances a timer's wheels.
///
/// # Examples
///
/// A timer for code that runs under another executor than tokio's:
///
/// ```
/// use std::time::Duration;
/// use tickless::{Driver, Timer};
///
/// let timer = Timer::builder().driver(Driver::Thread).build()?;
/// futures::executor::block_on(timer.sleep(Duration::from_millis(1)));
///
/// // `Driver::Tokio` needs a tokio runtime with time enabled.
/// let error = Timer::builder().driver(Driver::Tokio).build().unwrap_err();
/// assert!(error.is_no_runtime());
/// # Ok::<(), tickless::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Driver {
    /// Inside the current tokio runtime's own timer processing: tickless timers fire in
    /// the same pass as tokio's, and a paused tokio clock (`pause`, `advance`,
    /// `start_paused`) drives them. Needs a runtime with time enabled.
    Tokio,
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
    /// Set by `Builder::max_pending`, which is the callbacks' (`callback.rs`).
    pub(crate) max_pending: Option<usize>,
    wheel_size: usize,
    /// `None`: [`Timer::default_shards`].
    shards: Option<usize>,
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
            max_pending: None,
            wheel_size: 64,
            shards: None,
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
    ///
    /// # Examples
    ///
    /// A test of a session that expires after 30 minutes of idleness, on plain threads,
    /// in no time:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickless::Timer;
    ///
    /// let timer = Timer::builder().manual_clock().build()?;
    /// let start = timer.now();
    /// let idle = timer.sleep(Duration::from_secs(30 * 60));
    /// let session = std::thread::spawn(move || futures::executor::block_on(idle));
    ///
    /// timer.advance(Duration::from_secs(29 * 60));
    /// assert!(!session.is_finished());
    /// timer.advance(Duration::from_secs(60));
    /// session.join().unwrap();
    /// assert_eq!(timer.now() - start, Duration::from_secs(30 * 60));
    /// # Ok::<(), tickless::BuildError>(())
    /// ```
    pub fn manual_clock(mut self) -> Builder {
        self.manual_clock = true;
        self
    }

    /// The width of a level-0 bucket: deadlines are rounded up to it. Must not be zero.
    /// [`Driver::Tokio`] fires with tokio's timer, whose own resolution is 1 ms (the
    /// default tick is exactly tokio's milliseconds, so a deadline is rounded once); ticks
    /// below that pay off with [`Driver::Thread`].
    pub fn tick(mut self, tick: Duration) -> Builder {
        self.tick = Some(tick);
        self
    }

    /// Buckets per level: a power of two from 2 to [`MAX_WHEEL_SIZE`].
    pub fn wheel_size(mut self, wheel_size: usize) -> Builder {
        self.wheel_size = wheel_size;
        self
    }

    /// How many wheels (shards), each behind its own lock, the timer spreads its timers
    /// over by thread: from 1 to [`MAX_SHARDS`]. Without this call, twice the available
    /// parallelism, at most 64. One shard uses the least memory; more let more threads
    /// register and cancel at once without contending.
    pub fn shards(mut self, shards: usize) -> Builder {
        self.shards = Some(shards);
        self
    }

    /// Which driver to run. Without this call: [`Driver::Tokio`] inside a tokio runtime
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
    /// a number of shards outside 1 to [`MAX_SHARDS`], [`Driver::Tokio`] outside a tokio
    /// runtime or in one without time enabled, or a driver thread the operating system
    /// would not start.
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
        let shards = self.shards.unwrap_or_else(Timer::default_shards);
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(BuildError(ErrorKind::Shards(shards)));
        }
        if self.manual_clock {
            if let Some(driver) = self.driver {
                return Err(BuildError(ErrorKind::ManualWithDriver(driver)));
            }
            let clock = Clock::new(tick, Source::Manual);
            let (core, shards) = Core::new(clock, Mode::Manual, self.wheel_size, shards);
            return Ok(Timer::from_parts(core, shards, self.max_pending));
        }
        let runtime = Handle::try_current().ok();
        // Whether the runtime has time: `None` when that cannot be found out now (this
        // thread is unwinding). Asked for explicitly, it is assumed; by default, not.
        let time = |handle: &Handle| driver::runtime::time_enabled(handle);
        let tokio = match (self.driver, &runtime) {
            (Some(Driver::Thread), _) => None,
            (Some(Driver::Tokio), None) => return Err(BuildError(ErrorKind::NoRuntime)),
            (Some(Driver::Tokio), Some(handle)) if time(handle) == Some(false) => {
                return Err(BuildError(ErrorKind::TimeDisabled));
            }
            (Some(Driver::Tokio), Some(handle)) => Some(handle),
            (None, Some(handle)) if time(handle) == Some(true) => Some(handle),
            (None, _) => None,
        };
        let (core, shards) = match tokio {
            Some(handle) => driver::runtime::build(handle, tick, self.wheel_size, shards),
            None => {
                let clock = Clock::new(tick, Source::Real);
                let (core, shards) = Core::new(clock, Mode::Thread, self.wheel_size, shards);
                driver::spawn_thread(&core)
                    .map_err(|error| BuildError(ErrorKind::Thread(error.to_string())))?;
                (core, shards)
            }
        };
        Ok(Timer::from_parts(core, shards, self.max_pending))
    }
}

/// Why [`Builder::build`] refused a configuration.
///
/// # Examples
///
/// ```
/// let error = tickless::Timer::builder().wheel_size(100).build().unwrap_err();
/// assert!(error.is_invalid_wheel_size());
/// assert_eq!(
///     error.to_string(),
///     "invalid wheel_size 100: must be a power of two from 2 to 65536",
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(ErrorKind);

#[derive(Clone, Debug, PartialEq, Eq)]
enum ErrorKind {
    ZeroTick,
    WheelSize(usize),
    Shards(usize),
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

    /// The number of shards was not from 1 to [`MAX_SHARDS`].
    pub fn is_invalid_shards(&self) -> bool {
        matches!(self.0, ErrorKind::Shards(_))
    }

    /// [`Driver::Tokio`] was asked for outside a tokio runtime, or in one built without
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
            ErrorKind::Shards(shards) => write!(
                f,
                "invalid shards {shards}: must be from 1 to {MAX_SHARDS}"
            ),
            ErrorKind::NoRuntime => write!(
                f,
                "invalid driver Tokio: no tokio runtime is current; build inside one or use Driver::Thread"
            ),
            ErrorKind::TimeDisabled => write!(
                f,
                "invalid driver Tokio: the current tokio runtime has no time driver; call enable_time on its builder or use Driver::Thread"
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
