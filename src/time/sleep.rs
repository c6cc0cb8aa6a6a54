//! `Sleep`: a future that completes at a deadline.

use crate::driver::Registered;
use crate::Timer;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

// `Sleep::state` is one of these four, or below them all, the key of its wheel entry.

/// Not in the wheel; the first poll reads the clock and completes at once if the deadline
/// has passed (made by `sleep_until`, or reset).
const UNREGISTERED: usize = usize::MAX;
/// Completed; not in the wheel.
const ELAPSED: usize = usize::MAX - 1;
/// Not in the wheel; made by `sleep(d)` with `d > 0`, so the deadline was ahead when it was
/// made. The first poll skips the clock read (a third of the cost of register + cancel)
/// and lets the wheel judge: a deadline that passed meanwhile fires on the driver's next
/// turn, never early.
const FRESH: usize = usize::MAX - 2;
/// Not in the wheel; made by `sleep(Duration::ZERO)`: the first poll completes it.
const DUE: usize = usize::MAX - 3;

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
    // The handle moves into the `Sleep`: `Timer::current().sleep(..)` would clone it and
    // drop the original, two atomic operations on a reference count for nothing.
    Sleep::after(Timer::current(), duration)
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
    Sleep::new(Timer::current(), deadline)
}

/// Future returned by [`sleep`] and [`sleep_until`].
///
/// Unlike tokio's, a `Sleep` is [`Unpin`] (its registration is a slab key, not an intrusive
/// node), so it can be stored and polled in a `select!` loop without `pin!`. It is 24
/// bytes on 64-bit targets. Calling [`reset`](Sleep::reset) on an unpinned `Sleep` takes
/// `Pin::new(&mut sleep)`.
///
/// If the tokio runtime driving its timer shuts down while it waits, it is not lost: its
/// next poll starts a driver thread for that timer, and it completes at its deadline on
/// the real clock.
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Sleep {
    timer: Timer,
    /// The deadline in nanoseconds from the timer clock's origin (see
    /// [`Clock::offset`](crate::driver::clock::Clock::offset)): 8 bytes, not an
    /// `Instant`'s 16, so a `Sleep` is 24 bytes and a boxed one fits a 32-byte allocation.
    deadline: i64,
    /// [`UNREGISTERED`], [`ELAPSED`], or the key of this sleep's entry in the wheel.
    state: usize,
}

impl Sleep {
    /// A sleep until `deadline`, which the first poll compares with the clock.
    pub(crate) fn new(timer: Timer, deadline: Instant) -> Sleep {
        Sleep {
            deadline: timer.shared.clock.offset(deadline),
            timer,
            state: UNREGISTERED,
        }
    }

    /// A sleep `duration` from now on `timer`. The clock is read here, so the first poll
    /// needs no clock read.
    pub(crate) fn after(timer: Timer, duration: Duration) -> Sleep {
        let nanos = i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX);
        Sleep {
            deadline: timer.shared.clock.now_offset().saturating_add(nanos),
            timer,
            state: if duration.is_zero() { DUE } else { FRESH },
        }
    }

    /// Sets the deadline of a completed (or never polled) sleep without registering it:
    /// the next poll does, or completes at once if the deadline has passed. For
    /// `Interval`, whose next tick is polled right away (tokio does the same).
    pub(crate) fn reset_unregistered(&mut self, deadline: Instant) {
        if let Some(key) = self.key() {
            self.timer.shared.cancel(key);
        }
        self.deadline = self.timer.shared.clock.offset(deadline);
        self.state = UNREGISTERED;
    }

    /// The current instant on this sleep's timer.
    pub(crate) fn now(&self) -> Instant {
        self.timer.shared.clock.now()
    }

    /// The wheel key, if this sleep is registered.
    fn key(&self) -> Option<usize> {
        (self.state < DUE).then_some(self.state)
    }

    /// The instant at which this future completes.
    pub fn deadline(&self) -> Instant {
        self.timer.shared.clock.instant_at_offset(self.deadline)
    }

    /// Whether the deadline has been reached: the driver fired this timer, or a poll saw
    /// the deadline pass. A `Sleep` that was never polled reports `false`, as in tokio.
    pub fn is_elapsed(&self) -> bool {
        match self.key() {
            Some(key) => self.timer.shared.has_fired(key),
            None => self.state == ELAPSED,
        }
    }

    /// Moves the deadline, before or after completion, keeping the registration and the
    /// waker: a task waiting on this `Sleep` is woken at the new deadline, or at once if
    /// it has already passed. After completion, the `Sleep` is pending again until the new
    /// deadline. As in tokio, a reset registers the timer even if it was never polled, so
    /// [`is_elapsed`](Self::is_elapsed) turns `true` when the new deadline passes.
    ///
    /// ```
    /// use std::pin::Pin;
    /// use tickless::Instant;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut sleep = tickless::sleep(Duration::from_secs(3600));
    /// Pin::new(&mut sleep).reset(Instant::now() + Duration::from_millis(1));
    /// sleep.await;
    /// # }
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        let this = self.get_mut();
        let shared = &this.timer.shared;
        this.deadline = shared.clock.offset(deadline);
        match this.key() {
            None => {
                let tick = shared.clock.offset_tick(this.deadline);
                this.state = match shared.register(tick, None) {
                    Registered::Pending(key) => key,
                    Registered::Elapsed => ELAPSED,
                };
            }
            Some(key) => {
                if this.deadline <= shared.clock.now_offset() {
                    // Fire now: cancel, and wake the waiting task so it polls and completes.
                    if !shared.reset(key, 0) {
                        this.state = ELAPSED;
                    }
                } else if !shared.reset(key, shared.clock.offset_tick(this.deadline)) {
                    this.state = ELAPSED;
                }
            }
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let shared = &this.timer.shared;
        let poll = match this.state {
            ELAPSED => return Poll::Ready(()),
            DUE => Poll::Ready(()),
            UNREGISTERED if this.deadline <= shared.clock.now_offset() => Poll::Ready(()),
            UNREGISTERED | FRESH => {
                let tick = shared.clock.offset_tick(this.deadline);
                match shared.register(tick, Some(cx.waker())) {
                    Registered::Pending(key) => {
                        this.state = key;
                        Poll::Pending
                    }
                    Registered::Elapsed => Poll::Ready(()),
                }
            }
            key => shared.poll_registered(key, cx.waker()),
        };
        if poll.is_ready() {
            this.state = ELAPSED;
        }
        poll
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key() {
            self.timer.shared.cancel(key);
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .field("registered", &self.key().is_some())
            .field("elapsed", &(self.state == ELAPSED))
            .finish()
    }
}
