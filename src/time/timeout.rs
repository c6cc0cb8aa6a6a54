//! `Timeout`: a future with a deadline.

use super::error::Elapsed;
use super::sleep::Sleep;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

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
