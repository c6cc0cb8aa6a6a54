//! Callbacks: closures that run when their deadline comes, with a handle that cancels
//! them: Netty's `HashedWheelTimer.newTimeout` and Kafka's `SystemTimer.add`, on the same
//! wheel, driver and clock as every [`Sleep`](crate::Sleep).
//!
//! # How
//!
//! A callback is a wheel entry whose waker runs it: the waker is made from an `Arc` of a
//! cell that holds only the closure and its state, so a pending callback costs its entry
//! (32 bytes) and a 24-byte cell (a 32-byte allocation), closure captures aside. The
//! shard marks callback entries, so the driver takes them out of the wheel itself when
//! they fire, runs the due ones of a pass in deadline order after every shard has been
//! turned, and leaves them alone when a runtime's shutdown wakes every `Sleep`.
//!
//! Exactly once: the cell's lock decides between the driver running the closure and
//! [`Scheduled::cancel`] dropping it; whoever takes the closure out wins, and the loser
//! sees it gone. `cancel` also unlinks the entry at once, O(1), if the driver has not
//! taken it; it checks that the entry at its key is still its own (by the waker's data
//! pointer), since a key the driver freed may already belong to another timer.

use crate::driver::shard::Shard;
use crate::sync::{lock, Mutex};
use crate::time::error::Error;
use crate::{Builder, Timer};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// A scheduled callback: what [`Timer::schedule`] returns.
///
/// [`cancel`](Self::cancel) it, or ask whether it has run. Dropping the handle does
/// *not* cancel the callback: it still runs at its deadline (Netty's and Kafka's choice,
/// and what fire-and-forget scheduling needs; a [`Sleep`](crate::Sleep), which is a
/// future, cancels on drop instead).
///
/// # Examples
///
/// A request timeout that is cancelled when the response arrives in time:
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let timer = tickless::Timer::builder().manual_clock().build().unwrap();
/// let timed_out = Arc::new(AtomicBool::new(false));
/// let flag = timed_out.clone();
/// let request_timeout = timer
///     .schedule(Duration::from_secs(5), move || flag.store(true, Ordering::SeqCst))
///     .unwrap();
/// assert_eq!(request_timeout.deadline() - timer.now(), Duration::from_secs(5));
///
/// timer.advance(Duration::from_secs(1));
/// // The response came: the timeout must not run.
/// assert!(request_timeout.cancel());
/// assert!(request_timeout.is_cancelled() && !request_timeout.has_fired());
///
/// timer.advance(Duration::from_secs(10));
/// assert!(!timed_out.load(Ordering::SeqCst));
/// assert_eq!(timer.pending(), 0);
/// ```
#[must_use = "dropping the handle does not cancel the callback; keep it to cancel, or use `let _ =`"]
pub struct Scheduled {
    shard: Arc<Shard>,
    key: usize,
    /// Nanoseconds from the clock's origin, as a `Sleep` keeps its deadline.
    deadline: i64,
    cell: Arc<dyn Cancel>,
}

impl Scheduled {
    /// Cancels the callback: `true` if this prevented it from running, `false` if it has
    /// already run, is running, or was cancelled before. Even when it races the driver,
    /// exactly one of "ran" and "cancelled" happens. The closure is dropped here, and
    /// its wheel entry unlinked in O(1).
    pub fn cancel(&self) -> bool {
        if !self.cell.cancel() {
            return false;
        }
        let data = Arc::as_ptr(&self.cell).cast::<()>();
        self.shard.remove_run(self.key, data);
        true
    }

    /// Whether [`cancel`](Self::cancel) prevented the callback from running.
    pub fn is_cancelled(&self) -> bool {
        self.cell.state() == Outcome::Cancelled
    }

    /// Whether the callback has run, or is running now (Netty's `isExpired`).
    pub fn has_fired(&self) -> bool {
        matches!(self.cell.state(), Outcome::Running | Outcome::Ran)
    }

    /// The instant the callback was scheduled for (it runs at or after it).
    pub fn deadline(&self) -> Instant {
        self.shard.core.clock.instant_at_offset(self.deadline)
    }
}

impl fmt::Debug for Scheduled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduled")
            .field("deadline", &self.deadline())
            .field("state", &self.cell.state())
            .finish()
    }
}

/// Where a callback stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Pending,
    Running,
    Ran,
    Cancelled,
}

/// A callback's state, behind its lock: the closure, until it runs or is cancelled.
enum State<F> {
    Pending(F),
    Running,
    Ran,
    Cancelled,
}

/// What the wheel entry's waker points at.
struct Cell<F> {
    state: Mutex<State<F>>,
}

impl<F: FnOnce()> Cell<F> {
    /// Runs the closure if nothing has taken it: the driver's side of the race.
    fn run(&self) {
        let f = {
            let mut state = lock(&self.state);
            match std::mem::replace(&mut *state, State::Running) {
                State::Pending(f) => f,
                other => {
                    *state = other;
                    return;
                }
            }
        };
        // `Ran` even if the closure panics (the driver catches and counts it).
        struct Ran<'a, F>(&'a Mutex<State<F>>);
        impl<F> Drop for Ran<'_, F> {
            fn drop(&mut self) {
                *lock(self.0) = State::Ran;
            }
        }
        let _ran = Ran(&self.state);
        f();
    }
}

impl<F: FnOnce() + Send + 'static> Wake for Cell<F> {
    fn wake(self: Arc<Self>) {
        self.run();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.run();
    }
}

/// The cell as the handle sees it, whatever its closure's type.
trait Cancel: Send + Sync {
    /// Takes the closure out and drops it, if it is still there.
    fn cancel(&self) -> bool;
    fn state(&self) -> Outcome;
}

impl<F: Send> Cancel for Cell<F> {
    fn cancel(&self) -> bool {
        let taken = {
            let mut state = lock(&self.state);
            match std::mem::replace(&mut *state, State::Cancelled) {
                State::Pending(f) => Some(f),
                other => {
                    *state = other;
                    None
                }
            }
        };
        // Dropped unlocked: dropping the captures may run any code.
        taken.is_some()
    }

    fn state(&self) -> Outcome {
        match *lock(&self.state) {
            State::Pending(_) => Outcome::Pending,
            State::Running => Outcome::Running,
            State::Ran => Outcome::Ran,
            State::Cancelled => Outcome::Cancelled,
        }
    }
}

/// Callbacks (Netty's `newTimeout`, Kafka's `SystemTimer.add`).
///
/// # Where callbacks run
///
/// A callback scheduled with [`schedule`](Self::schedule) or
/// [`schedule_at`](Self::schedule_at) runs on the timer's driver, with no lock held, after
/// the driver has turned every shard: inside tokio's own timer processing for a timer
/// driven by tokio, on the driver thread for [`Driver::Thread`](crate::Driver::Thread),
/// and inside [`advance`](Self::advance) for a manual clock. The callbacks due in one pass
/// run one after another, in deadline order (by tick; callbacks due in the same tick in
/// no particular order). That suits short work (completing a request, setting a flag,
/// sending on a channel); for anything longer, [`spawn_after`](Self::spawn_after) and
/// [`spawn_at`](Self::spawn_at) spawn a future on a tokio runtime when the deadline comes
/// (Kafka's task executor), and can be cancelled until then.
///
/// A callback that panics is caught and counted in
/// [`Stats::callback_panics`](crate::Stats::callback_panics); the others run, and the
/// driver goes on.
///
/// # Lifetime
///
/// A pending callback keeps its timer alive, as a spawned task keeps its runtime: it runs
/// at its deadline even if every handle to the timer is gone. When the tokio runtime that
/// drives a timer shuts down, its pending callbacks run at their deadlines on a driver
/// thread that takes over at once. A [manual clock](crate::Builder::manual_clock) moves
/// only by its handle's `advance`, so its callbacks do not keep it alive: once its last
/// handle and a callback's own [`Scheduled`] handle are gone, the callback is dropped
/// unrun.
///
/// # Never early
///
/// A callback runs when its deadline has passed on the timer's clock, rounded up to the
/// tick, like a `Sleep`; deadlines past about 292 years saturate there.
impl Timer {
    /// Runs `f` once `delay` has passed, unless it is cancelled first.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let timer = tickless::Timer::builder().manual_clock().build().unwrap();
    /// let ran = Arc::new(AtomicBool::new(false));
    /// let flag = ran.clone();
    /// let scheduled = timer
    ///     .schedule(Duration::from_secs(5), move || flag.store(true, Ordering::SeqCst))
    ///     .unwrap();
    /// assert_eq!(timer.pending(), 1);
    /// timer.advance(Duration::from_secs(5));
    /// assert!(ran.load(Ordering::SeqCst) && scheduled.has_fired());
    /// assert!(!scheduled.cancel(), "too late");
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_at_capacity`] when [`Builder::max_pending`](crate::Builder::max_pending)
    /// callbacks are already pending.
    pub fn schedule<F>(&self, delay: Duration, f: F) -> Result<Scheduled, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        let nanos = i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX);
        let deadline = self.core().clock.now_offset().saturating_add(nanos);
        let cell = Arc::new(Cell {
            state: Mutex::new(State::Pending(f)),
        });
        self.schedule_cell(deadline, Waker::from(cell.clone()), cell)
    }

    /// Runs `f` at `deadline`, unless it is cancelled first. A deadline that has passed
    /// runs on the driver's next turn (for a manual clock, the next `advance`).
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    pub fn schedule_at<F>(&self, deadline: Instant, f: F) -> Result<Scheduled, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        let deadline = self.core().clock.offset(deadline);
        let cell = Arc::new(Cell {
            state: Mutex::new(State::Pending(f)),
        });
        self.schedule_cell(deadline, Waker::from(cell.clone()), cell)
    }

    /// Spawns `future` on the tokio runtime current now, once `delay` has passed, unless
    /// it is cancelled before then (Kafka's task executor). The future runs as a task of
    /// its own, so it may take as long as it likes; cancelling after it was spawned
    /// returns `false` and does not stop it.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::channel::oneshot;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timer = tickless::Timer::current();
    /// let (done_tx, done_rx) = oneshot::channel();
    /// let _reminder = timer
    ///     .spawn_after(Duration::from_secs(60), async move {
    ///         // Anything async: a request, a database write...
    ///         tickless::sleep(Duration::from_millis(10)).await;
    ///         done_tx.send("reminder sent").unwrap();
    ///     })
    ///     .unwrap();
    /// assert_eq!(done_rx.await, Ok("reminder sent"));
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid`] when no tokio runtime is current; otherwise as
    /// [`schedule`](Self::schedule). If that runtime has shut down by the deadline, tokio
    /// drops the task unrun, as it does any task spawned then.
    pub fn spawn_after<Fut>(&self, delay: Duration, future: Fut) -> Result<Scheduled, Error>
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handle = Handle::try_current().map_err(|_| Error::invalid())?;
        self.schedule(delay, move || drop(handle.spawn(future)))
    }

    /// Spawns `future` on the tokio runtime current now, at `deadline`, unless it is
    /// cancelled before then. See [`spawn_after`](Self::spawn_after).
    ///
    /// # Errors
    ///
    /// As [`spawn_after`](Self::spawn_after).
    pub fn spawn_at<Fut>(&self, deadline: Instant, future: Fut) -> Result<Scheduled, Error>
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handle = Handle::try_current().map_err(|_| Error::invalid())?;
        self.schedule_at(deadline, move || drop(handle.spawn(future)))
    }

    /// Callbacks scheduled on this timer that have neither been taken by the driver to
    /// run nor been cancelled: an exact count (it sums every shard, under each shard's
    /// lock).
    pub fn pending(&self) -> usize {
        self.core().pending_runs()
    }

    /// The part of scheduling that does not depend on the closure's type: `waker` runs
    /// the callback, `cell` cancels it.
    fn schedule_cell(
        &self,
        deadline: i64,
        waker: Waker,
        cell: Arc<dyn Cancel>,
    ) -> Result<Scheduled, Error> {
        self.core().reserve_run().map_err(Error::at_capacity_of)?;
        let shard = self.shard().clone();
        let tick = shard.core.clock.nanos_tick(i128::from(deadline));
        let key = shard.insert_run(tick, waker);
        Ok(Scheduled {
            shard,
            key,
            deadline,
            cell,
        })
    }
}

/// The callbacks' setting on a timer's builder.
impl Builder {
    /// The most callbacks that may be pending at once: past it, [`Timer::schedule`] and
    /// friends return an error for which
    /// [`is_at_capacity`](crate::error::Error::is_at_capacity) holds (Netty's
    /// `maxPendingTimeouts`). No limit without this call; `0` refuses every callback.
    /// `Sleep`s and other timers do not count; a purgatory's operations do (each waits
    /// for its expiry as a callback does).
    pub fn max_pending(mut self, max: usize) -> Builder {
        self.max_pending = Some(max);
        self
    }
}

/// Where an [expiry](Timer::expire_at) waits: its shard and its key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expiry {
    shard: u32,
    key: usize,
}

impl Timer {
    /// Wakes `waker` on the driver when `deadline` comes, as a callback: it counts in
    /// [`pending`](Self::pending) and keeps the timer alive, and is woken after the
    /// driver's pass, with no lock held. For the purgatories, whose entries are their own
    /// callbacks (no cell, no closure, no allocation) and decide exactly once themselves:
    /// [`cancel_expiry`](Self::cancel_expiry) only unlinks the entry.
    pub(crate) fn expire_at(&self, deadline: Instant, waker: Waker) -> Result<Expiry, Error> {
        self.core().reserve_run().map_err(Error::at_capacity_of)?;
        let index = self.shard_index();
        let shard = self.shard_at(index);
        let tick = shard
            .core
            .clock
            .nanos_tick(i128::from(shard.core.clock.offset(deadline)));
        Ok(Expiry {
            shard: index as u32,
            key: shard.insert_run(tick, waker),
        })
    }

    /// Unlinks `expiry` unless the driver has taken it (to wake it); `data` is its
    /// waker's data pointer, which tells its entry from one that reused the key.
    pub(crate) fn cancel_expiry(&self, expiry: Expiry, data: *const ()) -> bool {
        self.shard_at(expiry.shard as usize)
            .remove_run(expiry.key, data)
    }
}

/// Schedules `f` at `deadline_tick` on `shard` (the loom models, which build a shard by
/// hand).
#[cfg(all(test, tickless_loom))]
pub(crate) fn schedule_on<F>(shard: &Arc<Shard>, deadline_tick: u64, f: F) -> Scheduled
where
    F: FnOnce() + Send + 'static,
{
    let cell = Arc::new(Cell {
        state: Mutex::new(State::Pending(f)),
    });
    let key = shard.insert_run(deadline_tick, Waker::from(cell.clone()));
    Scheduled {
        shard: shard.clone(),
        key,
        deadline: deadline_tick as i64,
        cell,
    }
}
