//! tokio::time's free functions, and the `DelayQueue` constructors, on the current timer.
//!
//! The futures themselves are the `time` layer's and know nothing of which timer is
//! current: these find it (this thread's shard of it, for the hot path) and hand it down.

use super::current::{current_now, current_shard};
use crate::time::delay_queue::DelayQueue;
use crate::time::{Delay, Interval, Sleep, Timeout};
use crate::Timer;
use std::future::IntoFuture;
use std::time::Duration;
use tokio::time::Instant;

/// Waits until `duration` has elapsed on the [current timer](Timer::current).
///
/// Same meaning as `tokio::time::sleep`: the future completes no earlier than `duration`
/// from now, and within one tick (1 ms by default) plus the driver's latency after it. A
/// zero duration completes on the first poll. Deadlines are kept to the nanosecond up to
/// about 292 years away and saturate there, so `Duration::MAX` sleeps forever without
/// panicking.
///
/// Nothing is registered until the first poll that returns `Pending`; dropping the future
/// cancels it in O(1).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// tickless::sleep(Duration::from_millis(10)).await;
/// # }
/// ```
///
/// Outside a tokio runtime it runs on the process-wide timer and its driver thread:
///
/// ```
/// futures::executor::block_on(tickless::sleep(std::time::Duration::from_millis(1)));
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    // This thread's shard of the current timer, found without cloning the timer's handle
    // (a reference count every worker thread would share).
    Sleep::after(current_shard(), duration)
}

/// Waits until `deadline` on the [current timer](Timer::current).
///
/// Same meaning as `tokio::time::sleep_until`; see [`sleep`].
///
/// ```
/// use tickless::Instant;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let deadline = Instant::now() + Duration::from_millis(10);
/// tickless::sleep_until(deadline).await;
/// assert!(Instant::now() >= deadline);
/// # }
/// ```
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep::new(current_shard(), deadline)
}

/// Requires `future` to complete within `duration`, on the [current timer](Timer::current).
///
/// Same meaning as `tokio::time::timeout`: the output is `Ok` with the future's output if
/// it completes first, `Err(Elapsed)` once the deadline has come. The inner future is
/// polled first, so a future that is ready on its first poll wins even against a zero
/// duration. Dropping the `Timeout` drops the future and cancels the timer in O(1).
///
/// The call reads the clock and nothing more: the timer is found, and the deadline
/// registered, only if the future returns `Pending` (on the timer current where that
/// poll runs). A future that is ready at once costs one clock read and its own poll.
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
    // The one clock read tokio makes too; the timer is found at the first wait, if any.
    Timeout::new(future.into_future(), Delay::after(current_now(), duration))
}

/// Requires `future` to complete before `deadline`, on the [current timer](Timer::current).
///
/// Same meaning as `tokio::time::timeout_at`; see [`timeout`]. Nothing is read or
/// registered until the future first returns `Pending`.
///
/// # Examples
///
/// One deadline shared by every step of a request:
///
/// ```
/// use std::time::Duration;
/// use tickless::Instant;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let deadline = Instant::now() + Duration::from_millis(100);
/// let lookup = tickless::timeout_at(deadline, tickless::sleep(Duration::from_millis(60)));
/// assert!(lookup.await.is_ok());
/// let fetch = tickless::timeout_at(deadline, tickless::sleep(Duration::from_millis(60)));
/// assert!(fetch.await.is_err(), "only 40 ms were left");
/// assert!(Instant::now() >= deadline);
/// # }
/// ```
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout::new(future.into_future(), Delay::until(deadline))
}

/// An [`Interval`] whose first tick completes at once, then every `period`, on the
/// [current timer](Timer::current). Same meaning as `tokio::time::interval`.
///
/// # Panics
///
/// If `period` is zero, as tokio does. [`Timer::try_interval`] returns an error instead.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut interval = tickless::interval(Duration::from_millis(10));
/// let first = interval.tick().await; // at once
/// let second = interval.tick().await; // 10 ms later
/// assert_eq!(second - first, Duration::from_millis(10));
/// # }
/// ```
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    Timer::current().interval(period)
}

/// An [`Interval`] whose first tick completes at `start`, then every `period`, on the
/// [current timer](Timer::current). Same meaning as `tokio::time::interval_at`.
///
/// # Panics
///
/// If `period` is zero, as tokio does. [`Timer::try_interval_at`] returns an error instead.
///
/// # Examples
///
/// A poll every 5 s that starts 5 s from now, not at once:
///
/// ```
/// use std::time::Duration;
/// use tickless::Instant;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let period = Duration::from_secs(5);
/// let start = Instant::now() + period;
/// let mut poll = tickless::interval_at(start, period);
/// assert_eq!(poll.tick().await, start);
/// assert_eq!(poll.tick().await, start + period);
/// # }
/// ```
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    Timer::current().interval_at(start, period)
}

impl<T> DelayQueue<T> {
    /// An empty queue on the [current timer](Timer::current).
    pub fn new() -> DelayQueue<T> {
        DelayQueue::on_shard(current_shard(), 0)
    }

    /// An empty queue with room for `capacity` items, on the current timer.
    pub fn with_capacity(capacity: usize) -> DelayQueue<T> {
        DelayQueue::on_shard(current_shard(), capacity)
    }

    /// An empty queue with room for `capacity` items, on `timer`: its tick, its wheel
    /// size and its driver.
    ///
    /// # Examples
    ///
    /// On a [manual clock](crate::Builder::manual_clock), a test moves time itself and
    /// needs no runtime:
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// use std::time::Duration;
    /// use tickless::{DelayQueue, Timer};
    ///
    /// let timer = Timer::builder().manual_clock().build()?;
    /// let mut sessions = DelayQueue::with_timer(timer.clone(), 16);
    /// sessions.insert("session 7", Duration::from_secs(30 * 60));
    ///
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(sessions.poll_expired(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(30 * 60));
    /// let Poll::Ready(Some(expired)) = sessions.poll_expired(&mut cx) else {
    ///     panic!("due after 30 minutes");
    /// };
    /// assert_eq!(expired.into_inner(), "session 7");
    /// # Ok::<(), tickless::BuildError>(())
    /// ```
    pub fn with_timer(timer: Timer, capacity: usize) -> DelayQueue<T> {
        DelayQueue::on_shard(timer.shard().clone(), capacity)
    }
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        DelayQueue::new()
    }
}
