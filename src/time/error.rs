//! Errors of the time futures.

use std::fmt;
use std::io;

/// The error returned by [`Timeout`](crate::Timeout) when its deadline came first.
///
/// Converts into [`std::io::Error`] of kind [`TimedOut`](io::ErrorKind::TimedOut), as
/// tokio's does, and from tokio's `Elapsed`. It is a type of its own, not tokio's: an error
/// type's `From<tokio::time::error::Elapsed>` becomes `From<tickless::error::Elapsed>`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let elapsed = tickless::timeout(Duration::ZERO, std::future::pending::<()>())
///     .await
///     .unwrap_err();
/// assert_eq!(elapsed.to_string(), "deadline has elapsed");
/// assert_eq!(std::io::Error::from(elapsed).kind(), std::io::ErrorKind::TimedOut);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed(());

impl Elapsed {
    pub(crate) fn new() -> Self {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for io::Error {
    fn from(elapsed: Elapsed) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, elapsed)
    }
}

/// tokio's `Elapsed`, for an error path that now carries tickless's: code that receives
/// tokio's from a library still on `tokio::time` can `map_err(Elapsed::from)` into the
/// type its own `From` impls name. (The other way is not possible: tokio's has no public
/// constructor.)
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
///
/// let result = tokio::time::timeout(Duration::ZERO, std::future::pending::<()>()).await;
/// let elapsed = result.map_err(tickless::error::Elapsed::from).unwrap_err();
/// assert_eq!(elapsed.to_string(), "deadline has elapsed");
/// # }
/// ```
impl From<tokio::time::error::Elapsed> for Elapsed {
    fn from(_: tokio::time::error::Elapsed) -> Elapsed {
        Elapsed::new()
    }
}

/// The error returned by [`Timer::try_interval`](crate::Timer::try_interval) and
/// [`Timer::try_interval_at`](crate::Timer::try_interval_at) for a zero period.
///
/// ```
/// let error = tickless::Timer::new().try_interval(std::time::Duration::ZERO).unwrap_err();
/// assert_eq!(error.to_string(), "`period` must be non-zero");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroPeriod(());

impl ZeroPeriod {
    pub(crate) fn new() -> Self {
        ZeroPeriod(())
    }
}

impl fmt::Display for ZeroPeriod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`period` must be non-zero")
    }
}

impl std::error::Error for ZeroPeriod {}

/// Why a timer refused to schedule a callback ([`Timer::schedule`] and friends): the
/// meaning and predicates of `tokio::time::error::Error`.
///
/// - [`is_at_capacity`](Self::is_at_capacity): the timer's [`Builder::max_pending`]
///   callbacks are already pending.
/// - [`is_invalid`](Self::is_invalid): the call cannot be carried out as asked; today, a
///   `spawn_after` or `spawn_at` with no tokio runtime current to spawn on.
/// - [`is_shutdown`](Self::is_shutdown): the timer has shut down. tickless's timers outlive
///   their runtimes (a driver thread takes over), so no tickless call returns this; it is
///   here so that code matching on tokio's `Error` compiles unchanged.
///
/// ```
/// use std::time::Duration;
///
/// let timer = tickless::Timer::builder().manual_clock().max_pending(1).build().unwrap();
/// let _first = timer.schedule(Duration::from_secs(1), || {}).unwrap();
/// let error = timer.schedule(Duration::from_secs(1), || {}).unwrap_err();
/// assert!(error.is_at_capacity());
/// assert_eq!(error.to_string(), "timer is at capacity: 1 callbacks pending (max_pending)");
/// ```
///
/// [`Timer::schedule`]: crate::Timer::schedule
/// [`Builder::max_pending`]: crate::Builder::max_pending
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error(Kind);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Shutdown,
    AtCapacity(Option<usize>),
    Invalid,
}

impl Error {
    /// An error saying the timer has shut down.
    pub fn shutdown() -> Error {
        Error(Kind::Shutdown)
    }

    /// An error saying the timer is at capacity.
    pub fn at_capacity() -> Error {
        Error(Kind::AtCapacity(None))
    }

    /// An error saying the request cannot be carried out as asked.
    pub fn invalid() -> Error {
        Error(Kind::Invalid)
    }

    pub(crate) fn at_capacity_of(max: usize) -> Error {
        Error(Kind::AtCapacity(Some(max)))
    }

    /// Whether the timer has shut down.
    pub fn is_shutdown(&self) -> bool {
        matches!(self.0, Kind::Shutdown)
    }

    /// Whether the timer is at capacity.
    pub fn is_at_capacity(&self) -> bool {
        matches!(self.0, Kind::AtCapacity(_))
    }

    /// Whether the request could not be carried out as asked.
    pub fn is_invalid(&self) -> bool {
        matches!(self.0, Kind::Invalid)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Kind::Shutdown => f.write_str("timer is shut down"),
            Kind::AtCapacity(Some(max)) => write!(
                f,
                "timer is at capacity: {max} callbacks pending (max_pending)"
            ),
            Kind::AtCapacity(None) => f.write_str("timer is at capacity"),
            Kind::Invalid => f.write_str(
                "invalid request: spawn_after and spawn_at spawn on the tokio runtime current \
                 when they are called, and none is",
            ),
        }
    }
}

impl std::error::Error for Error {}
