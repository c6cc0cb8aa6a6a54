//! `Timeout`: a future with a deadline.

use super::error::Elapsed;
use super::sleep::Sleep;
use crate::timer::current::current_shard;
#[cfg(doc)]
use crate::Timer;
use pin_project_lite::pin_project;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Requires `future` to complete within `duration`, on the [current timer](Timer::current).
///
/// Same meaning as `tokio::time::timeout`: the output is `Ok` with the future's output if
/// it completes first, `Err(Elapsed)` once the deadline has come. The inner future is
/// polled first, so a future that is ready on its first poll wins even against a zero
/// duration. Dropping the `Timeout` drops the future and cancels the timer in O(1).
///
/// # Cancel safety
///
/// Cancelling a `Timeout` is exactly as safe as cancelling the future it wraps.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let fast = tickless::timeout(Duration::from_secs(1), async { 7 }).await;
/// assert_eq!(fast, Ok(7));
/// let slow = tickless::timeout(Duration::from_millis(1), std::future::pending::<()>()).await;
/// assert!(slow.is_err());
/// # }
/// ```
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout::new(
        future.into_future(),
        Sleep::after(current_shard(), duration),
    )
}

/// Requires `future` to complete before `deadline`, on the [current timer](Timer::current).
///
/// Same meaning as `tokio::time::timeout_at`; see [`timeout`].
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout::new(future.into_future(), Sleep::new(current_shard(), deadline))
}

pin_project! {
    /// Future returned by [`timeout`] and [`timeout_at`].
    ///
    /// `Unpin` whenever `F` is: the deadline is an (always `Unpin`) [`Sleep`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        value: F,
        delay: Sleep,
    }
}

impl<F> Timeout<F> {
    pub(crate) fn new(value: F, delay: Sleep) -> Self {
        Timeout { value, delay }
    }

    /// The wrapped future.
    pub fn get_ref(&self) -> &F {
        &self.value
    }

    /// The wrapped future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.value
    }

    /// The wrapped future; the timer is cancelled.
    pub fn into_inner(self) -> F {
        self.value
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.value.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        Pin::new(this.delay).poll(cx).map(|()| Err(Elapsed::new()))
    }
}
