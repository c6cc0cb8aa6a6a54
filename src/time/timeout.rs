//! `Timeout`: a future with a deadline.
//!
//! A timeout made by the free functions ([`timeout`](crate::timeout),
//! [`timeout_at`](crate::timeout_at)) is *lazy*: the call reads the clock once (as tokio's
//! does; `timeout_at` not even that) and nothing more. Which timer is current, its shard,
//! its lock and a wheel entry are left to the first poll at which the inner future is
//! still pending, so a future that is ready at once (a cache hit, a buffered read) costs
//! one clock read and its own poll. The deadline is the one read at the call, so a timeout
//! is never later than tokio's, and never early. That first wait is the one place where
//! the `time` layer asks the `timer` layer which timer is current.

use super::error::Elapsed;
use super::sleep::Sleep;
use crate::driver::clock::{instant_at_process_nanos, process_nanos};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

pin_project! {
    /// Future returned by [`timeout`] and [`timeout_at`].
    ///
    /// `Unpin` whenever `F` is: the deadline is an (always `Unpin`) [`Sleep`], or, until
    /// the inner future first returns `Pending`, just an instant. It is 24 bytes plus the
    /// inner future's size (padded): `Timeout<Ready<()>>` is 32 bytes.
    ///
    /// # Examples
    ///
    /// Waiting at most 100 ms for a reply, and telling a late reply from a lost one:
    ///
    /// ```
    /// use futures::channel::oneshot;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (reply_tx, reply_rx) = oneshot::channel::<String>();
    /// // ... reply_tx went to a responder that never answers ...
    /// let outcome = match tickless::timeout(Duration::from_millis(100), reply_rx).await {
    ///     Ok(Ok(reply)) => reply,
    ///     Ok(Err(oneshot::Canceled)) => "the responder went away".to_string(),
    ///     Err(elapsed) => format!("no reply: {elapsed}"),
    /// };
    /// assert_eq!(outcome, "no reply: deadline has elapsed");
    /// # drop(reply_tx);
    /// # }
    /// ```
    ///
    /// The wrapped future can be taken back, for instance to wait longer after logging:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let slow = tickless::sleep(Duration::from_millis(300));
    /// let mut first_try = tickless::timeout(Duration::from_millis(100), slow);
    /// assert!((&mut first_try).await.is_err());
    /// let slow = first_try.into_inner(); // the timer is cancelled, the sleep kept
    /// assert!(tickless::timeout(Duration::from_millis(500), slow).await.is_ok());
    /// # }
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        value: F,
        delay: Delay,
    }
}

/// A timeout's deadline: not yet on any timer, or its [`Sleep`]. 24 bytes: an unbound
/// deadline fits beside the niche of the `Sleep`'s shard pointer, which an `Instant` and
/// a flag (24 bytes with padding) would not.
pub(crate) enum Delay {
    /// Not on a timer yet: the deadline, in nanoseconds from the process's origin (see
    /// [`process_nanos`]), so that binding it to a timer at the first wait is integer
    /// arithmetic, not a round trip through `Instant`. `ahead`: made by
    /// `timeout(d)` with `d > 0`, so the deadline was ahead of the clock at the call and
    /// the first wait lets the wheel judge, as [`Sleep::after`] does; otherwise (made by
    /// `timeout_at` or `timeout(Duration::ZERO)`) the first wait compares it with the
    /// clock, as [`Sleep::new`] does.
    Unbound { deadline: i64, ahead: bool },
    /// On a timer (made by a `Timer` handle, or bound at the first wait).
    Bound(Sleep),
}

impl Delay {
    /// A deadline `duration` after `now`, on no timer yet, made by `timeout(duration)`;
    /// see [`Delay::Unbound`].
    pub(crate) fn after(now: Instant, duration: Duration) -> Delay {
        let nanos = i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX);
        Delay::Unbound {
            deadline: process_nanos(now).saturating_add(nanos),
            ahead: !duration.is_zero(),
        }
    }

    /// A deadline on no timer yet, made by `timeout_at(deadline)`; see [`Delay::Unbound`].
    pub(crate) fn until(deadline: Instant) -> Delay {
        Delay::Unbound {
            deadline: process_nanos(deadline),
            ahead: false,
        }
    }
}

impl<F> Timeout<F> {
    pub(crate) fn new(value: F, delay: Delay) -> Self {
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
        this.delay.poll(cx).map(|()| Err(Elapsed::new()))
    }
}

impl Delay {
    /// Polls the deadline, binding it to this thread's shard of the current timer first if
    /// it is not on one yet. Not generic, so one copy serves every `Timeout<F>`.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let (deadline, ahead) = match self {
            Delay::Bound(sleep) => return Pin::new(sleep).poll(cx),
            Delay::Unbound { deadline, ahead } => (*deadline, *ahead),
        };
        let shard = crate::timer::current::current_shard();
        let offset = shard.core.clock.offset_of_process_nanos(deadline);
        let mut sleep = Sleep::at_offset(shard, offset, ahead);
        // A `Sleep` is `Unpin` (its entry is a slab key): it may move in after the poll.
        let poll = Pin::new(&mut sleep).poll(cx);
        *self = Delay::Bound(sleep);
        poll
    }
}

impl<F: fmt::Debug> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Timeout");
        debug.field("value", &self.value);
        match &self.delay {
            Delay::Unbound { deadline, .. } => debug
                .field("deadline", &instant_at_process_nanos(*deadline))
                .field("registered", &false),
            Delay::Bound(sleep) => debug.field("delay", sleep),
        };
        debug.finish()
    }
}
