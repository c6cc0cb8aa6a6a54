//! Errors of the time futures.

use std::fmt;
use std::io;

/// The error returned by [`Timeout`](crate::Timeout) when its deadline came first.
///
/// Converts into [`std::io::Error`] of kind [`TimedOut`](io::ErrorKind::TimedOut).
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
