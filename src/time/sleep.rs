//! `Sleep`: a future that completes at a deadline.

use crate::driver::registration::{Registration, ELAPSED, IDLE, OWNER_A, OWNER_B};
use crate::driver::shard::Shard;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

// `Sleep`'s registration is `IDLE` (not in the wheel; the first poll reads the clock and
// completes at once if the deadline has passed: made by `sleep_until`), `ELAPSED`, one of
// these two, or registered.

/// Not in the wheel; made by `sleep(d)` with `d > 0`, so the deadline was ahead when it was
/// made. The first poll skips the clock read (a third of the cost of register + cancel)
/// and lets the wheel judge: a deadline that passed meanwhile fires on the driver's next
/// turn, never early.
const FRESH: usize = OWNER_A;
/// Not in the wheel; made by `sleep(Duration::ZERO)`: the first poll completes it.
const DUE: usize = OWNER_B;

/// Future returned by [`sleep`](crate::sleep) and [`sleep_until`](crate::sleep_until).
///
/// Unlike tokio's, a `Sleep` is [`Unpin`] (its registration is a slab key, not an intrusive
/// node), so it can be stored and polled in a `select!` loop without `pin!`. It is 24
/// bytes on 64-bit targets. [`set_deadline`](Sleep::set_deadline) moves the deadline of
/// an unpinned `Sleep`; [`reset`](Sleep::reset) is the same with tokio's `Pin` receiver.
///
/// If the tokio runtime driving its timer shuts down while it waits, it is not lost: its
/// next poll starts a driver thread for that timer, and it completes at its deadline on
/// the real clock.
///
/// # Examples
///
/// A batch that is sent when it holds 10 items or 50 ms after it was started, whichever
/// comes first: the `Sleep` is kept across loop turns and polled by reference.
///
/// ```
/// use futures::StreamExt;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let (tx, mut rx) = futures::channel::mpsc::unbounded::<u32>();
/// tx.unbounded_send(1).unwrap();
/// tx.unbounded_send(2).unwrap();
///
/// let mut batch = Vec::new();
/// let mut linger = tickless::sleep(Duration::from_millis(50));
/// loop {
///     tokio::select! {
///         Some(item) = rx.next() => {
///             batch.push(item);
///             if batch.len() == 10 {
///                 break;
///             }
///         }
///         () = &mut linger => break,
///     }
/// }
/// assert_eq!(batch, [1, 2]);
/// assert!(linger.is_elapsed());
/// # drop(tx);
/// # }
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Sleep {
    /// Its entry, on the shard of the thread that made it.
    registration: Registration,
    /// The deadline in nanoseconds from the timer clock's origin (see
    /// [`Clock::offset`](crate::driver::clock::Clock::offset)): 8 bytes, not an
    /// `Instant`'s 16, so a `Sleep` is 24 bytes and a boxed one fits a 32-byte allocation.
    deadline: i64,
}

impl Sleep {
    /// A sleep until `deadline`, which the first poll compares with the clock.
    pub(crate) fn new(shard: Arc<Shard>, deadline: Instant) -> Sleep {
        Sleep {
            deadline: shard.core.clock.offset(deadline),
            registration: Registration::new(shard, IDLE),
        }
    }

    /// A sleep `duration` from now on `shard`'s timer. The clock is read here, so the
    /// first poll needs no clock read.
    pub(crate) fn after(shard: Arc<Shard>, duration: Duration) -> Sleep {
        let nanos = i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX);
        let state = if duration.is_zero() { DUE } else { FRESH };
        Sleep {
            deadline: shard.core.clock.now_offset().saturating_add(nanos),
            registration: Registration::new(shard, state),
        }
    }

    /// A sleep until `offset` on `shard`'s clock (see
    /// [`Clock::offset`](crate::driver::clock::Clock::offset)). `ahead`: the deadline was
    /// ahead of the clock when the caller read it, so the first poll needs no clock read
    /// (see `FRESH`); otherwise the first poll compares, as for [`new`](Self::new).
    pub(crate) fn at_offset(shard: Arc<Shard>, offset: i64, ahead: bool) -> Sleep {
        Sleep {
            deadline: offset,
            registration: Registration::new(shard, if ahead { FRESH } else { IDLE }),
        }
    }

    /// The instant at which this future completes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickless::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// let sleep = tickless::sleep_until(deadline);
    /// assert_eq!(sleep.deadline(), deadline);
    /// # }
    /// ```
    pub fn deadline(&self) -> Instant {
        self.registration.clock().instant_at_offset(self.deadline)
    }

    /// Whether the deadline has been reached: the driver fired this timer, or a poll saw
    /// the deadline pass. A `Sleep` that was never polled reports `false`, as in tokio.
    pub fn is_elapsed(&self) -> bool {
        self.registration.is_elapsed()
    }

    /// Moves the deadline, before or after completion, keeping the registration and the
    /// waker: tokio's `reset`, with the same `Pin` receiver so that code written for tokio
    /// compiles unchanged. It is [`set_deadline`](Self::set_deadline), which takes
    /// `&mut self`: use that on an unpinned `Sleep` rather than pinning it, as rustc
    /// suggests (`pin!` would move it into the pin).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickless::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut sleep = std::pin::pin!(tickless::sleep(Duration::from_secs(3600)));
    /// let deadline = Instant::now() + Duration::from_millis(1);
    /// sleep.as_mut().reset(deadline);
    /// sleep.await;
    /// assert!(Instant::now() >= deadline);
    /// # }
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.get_mut().set_deadline(deadline);
    }

    /// Moves the deadline of a `Sleep` that is not pinned: [`reset`](Self::reset) without
    /// the `Pin`, which tokio's `Sleep` needs (it is `!Unpin`) and this one does not.
    ///
    /// The registration and the waker are kept: a task waiting on this `Sleep` is woken at
    /// the new deadline, or at once if it has already passed. After completion, the
    /// `Sleep` is pending again until the new deadline. As in tokio, it registers the timer
    /// even if the `Sleep` was never polled, so [`is_elapsed`](Self::is_elapsed) turns
    /// `true` when the new deadline passes.
    ///
    /// # Examples
    ///
    /// A debounce: save 100 ms after the last edit, however many edits come in between.
    /// The `Sleep` lives across the loop's turns, unpinned, and each edit moves it.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use std::time::Duration;
    /// use tickless::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let quiet = Duration::from_millis(100);
    /// let (edits, mut edited) = futures::channel::mpsc::unbounded::<&str>();
    /// edits.unbounded_send("a").unwrap();
    /// edits.unbounded_send("b").unwrap();
    ///
    /// let mut save = tickless::sleep(quiet);
    /// let mut text = String::new();
    /// loop {
    ///     tokio::select! {
    ///         Some(edit) = edited.next() => {
    ///             text.push_str(edit);
    ///             save.set_deadline(Instant::now() + quiet);
    ///         }
    ///         () = &mut save => break,
    ///     }
    /// }
    /// assert_eq!(text, "ab");
    /// # drop(edits);
    /// # }
    /// ```
    pub fn set_deadline(&mut self, deadline: Instant) {
        let clock = self.registration.clock();
        self.deadline = clock.offset(deadline);
        let tick = clock.nanos_tick(i128::from(self.deadline));
        self.registration.reset(tick);
    }

    /// A `Sleep` with the deadline of tokio's `sleep`, on the
    /// [current timer](crate::Timer::current): for an API that now takes tickless's
    /// `Sleep` (a different type from tokio's) and a caller that holds tokio's.
    ///
    /// It is [`sleep_until(sleep.deadline())`](crate::sleep_until): the deadline is carried
    /// over exactly, the registration is not. tokio's sleep is left as it was; dropping it
    /// cancels it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let theirs = tokio::time::sleep(Duration::from_secs(5));
    /// let ours = tickless::Sleep::from_tokio(&theirs);
    /// assert_eq!(ours.deadline(), theirs.deadline());
    /// # }
    /// ```
    pub fn from_tokio(sleep: &tokio::time::Sleep) -> Sleep {
        crate::sleep_until(sleep.deadline())
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let registration = &mut this.registration;
        match registration.state() {
            ELAPSED => Poll::Ready(()),
            DUE => {
                registration.set_state(ELAPSED);
                Poll::Ready(())
            }
            IDLE if this.deadline <= registration.clock().now_offset() => {
                registration.set_state(ELAPSED);
                Poll::Ready(())
            }
            IDLE | FRESH => {
                let tick = registration.clock().nanos_tick(i128::from(this.deadline));
                registration.register(tick, Some(cx.waker()))
            }
            _ => registration.poll(cx.waker()),
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .field("registered", &self.registration.key().is_some())
            .field("elapsed", &(self.registration.state() == ELAPSED))
            .finish()
    }
}
