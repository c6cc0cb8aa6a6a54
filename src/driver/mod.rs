//! The driver: the wheel behind a lock, a clock, and the loop that fires timers.
//!
//! [`Shared`] is what a timer handle and every `Sleep` point at. The driver, a task on a
//! tokio runtime ([`task`]) or a thread of its own ([`thread`]), calls [`Shared::turn`]
//! whenever the next non-empty bucket expires or an insert asks it to, and waits
//! otherwise. Both kinds run the same turn; they differ only in how they wait.
//!
//! # Ground rules
//!
//! All mutable state is in [`State`], behind one `Mutex`. The contract:
//!
//! 1. Every field of `State` is read and written with the lock held. Outside it are only
//!    [`Shared::stopped`], a copy of "the task driver is gone" that the current-timer
//!    lookup reads without locking; the clock's own atomics (its source, which changes
//!    once from tokio's to real when the task driver stops, and a manual clock's offset),
//!    which every reader may see a moment late with no harm since both only move
//!    forward; and `manual_advance`, which serialises `Timer::advance` and is never
//!    taken with the state lock held.
//! 2. No user code runs with the lock held, except `Waker::clone` when a `Sleep` stores a
//!    new waker. Wakers are woken, and *dropped*, only after the lock is released: dropping
//!    a waker can drop a task that owns a `Sleep`, whose `Drop` takes this lock.
//! 3. A timer's entry belongs to its `Sleep`. The driver may move it to the ready list and
//!    take its waker, but only the `Sleep` removes it (on completion, reset or drop), so
//!    a `Sleep`'s key never names another `Sleep`'s entry.
//! 4. `armed` is the tick the driver will next wake at on its own (`None`: it waits for a
//!    notification only). It is set at the end of every turn. An insert that queues a
//!    bucket expiring before `armed` lowers `armed` and wakes the driver through
//!    `driver_waker`; every other insert leaves the driver alone. Both happen under the
//!    lock, so an insert either sees the `armed` of the last turn and wakes the driver,
//!    or happens before that turn computes `next_expiration`: no expiry is missed.
//! 5. A panic from a waker is caught and counted; the turn goes on with the next one.
//!    The lock is never poisoned by user code (rule 2), and is taken poison-tolerant
//!    anyway.

pub(crate) mod clock;
mod task;
mod thread;

use crate::wheel::{Placed, Wheel};
use clock::Clock;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, PoisonError};
use std::task::{Poll, Waker};
use tokio::time::Instant;

// Under `--cfg tickless_loom` the lock and the flag are loom's, so the loom tests below
// explore every interleaving of the real protocol.
#[cfg(tickless_loom)]
use loom::sync::{
    atomic::{AtomicBool, Ordering},
    Mutex, MutexGuard,
};
#[cfg(not(tickless_loom))]
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Mutex, MutexGuard,
};

pub(crate) use task::spawn_task;
pub(crate) use thread::spawn_thread;

/// Wakers woken per lock release while a turn fires timers.
const WAKE_BATCH: usize = 128;

/// Which driver runs a timer now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Running {
    /// Not started yet (a builder is still setting it up).
    Nothing,
    /// A task on a tokio runtime.
    Task,
    /// A thread of its own.
    Thread,
    /// The runtime whose task drove it has shut down; a thread takes over on next use.
    Stopped,
    /// No driver: a manual clock, moved and fired by [`Shared::advance_manual`].
    Manual,
}

/// Counts of what the driver and the wheel have done, and what they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) wakeups: u64,
    pub(crate) buckets_flushed: u64,
    pub(crate) entries_fired: u64,
    pub(crate) entries_demoted: u64,
    pub(crate) waker_panics: u64,
    pub(crate) registered: usize,
    pub(crate) levels: usize,
}

pub(crate) struct State {
    /// Each timer's waker; [`Waker::noop`] until its first poll. A plain `Waker` (not an
    /// `Option`) gives the slab entry a niche, so an entry is 32 bytes, not 40.
    wheel: Wheel<Waker>,
    armed: Option<u64>,
    driver_waker: Option<Waker>,
    running: Running,
    wakeups: u64,
    waker_panics: u64,
}

/// The state one timer shares between its handles, its `Sleep`s and its driver.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) clock: Clock,
    /// Set once the task driver is gone (rule 1).
    stopped: AtomicBool,
    /// Serialises [`Shared::advance_manual`]; never taken with `state` held.
    manual_advance: std::sync::Mutex<()>,
}

/// What a registration found.
pub(crate) enum Registered {
    /// Waiting in the wheel under this key.
    Pending(usize),
    /// The deadline had already come; nothing is held.
    Elapsed,
}

impl Shared {
    pub(crate) fn new(clock: Clock, wheel_size: usize) -> Self {
        Shared {
            state: Mutex::new(State {
                wheel: Wheel::new(wheel_size),
                armed: None,
                driver_waker: None,
                running: Running::Nothing,
                wakeups: 0,
                waker_panics: 0,
            }),
            clock,
            stopped: AtomicBool::new(false),
            manual_advance: std::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_running(&self, running: Running) {
        self.lock().running = running;
    }

    /// Whether the task driver has gone with its runtime (read without the lock).
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Registers a timer due at `deadline_tick`, to wake `waker` (none yet: the first poll
    /// stores one).
    pub(crate) fn register(
        self: &Arc<Self>,
        deadline_tick: u64,
        waker: Option<&Waker>,
    ) -> Registered {
        let waker = waker.unwrap_or(Waker::noop()).clone();
        let mut state = self.lock();
        self.ensure_driver(&mut state);
        let (key, placed) = state.wheel.insert(deadline_tick, waker);
        match placed {
            Placed::Ready => {
                let waker = state.wheel.try_remove(key);
                drop(state);
                drop(waker);
                Registered::Elapsed
            }
            Placed::Pending { queued } => {
                let driver = state.driver_to_wake(queued);
                drop(state);
                if let Some(driver) = driver {
                    driver.wake();
                }
                Registered::Pending(key)
            }
        }
    }

    /// Polls a registered timer: `Ready` (and the entry is gone) once it has fired;
    /// otherwise makes sure `waker` is the one it will wake.
    pub(crate) fn poll_registered(self: &Arc<Self>, key: usize, waker: &Waker) -> Poll<()> {
        let mut state = self.lock();
        if state.wheel.has_fired(key) {
            let old = state.wheel.try_remove(key);
            drop(state);
            drop(old);
            return Poll::Ready(());
        }
        self.ensure_driver(&mut state);
        let stored = state
            .wheel
            .get_mut(key)
            .expect("a registered Sleep's key is held");
        if stored.will_wake(waker) {
            return Poll::Pending;
        }
        let old = std::mem::replace(stored, waker.clone());
        drop(state);
        drop(old);
        Poll::Pending
    }

    /// Whether a registered timer has fired. Starts the fallback driver if needed, so a
    /// caller that only ever asks this still sees the timer fire.
    pub(crate) fn has_fired(self: &Arc<Self>, key: usize) -> bool {
        let mut state = self.lock();
        self.ensure_driver(&mut state);
        state.wheel.has_fired(key)
    }

    /// Forgets a registered timer. O(1).
    pub(crate) fn cancel(&self, key: usize) {
        let old = self.lock().wheel.try_remove(key);
        drop(old);
    }

    /// Moves a registered timer to `deadline_tick`, keeping its waker. Returns `false` when
    /// that deadline has already come: the entry is then gone and its waker woken, so the
    /// task polls again and completes.
    pub(crate) fn reset(self: &Arc<Self>, key: usize, deadline_tick: u64) -> bool {
        let mut state = self.lock();
        self.ensure_driver(&mut state);
        match state.wheel.reset(key, deadline_tick) {
            Placed::Ready => {
                let waker = state.wheel.try_remove(key);
                drop(state);
                if let Some(waker) = waker {
                    waker.wake();
                }
                false
            }
            Placed::Pending { queued } => {
                let driver = state.driver_to_wake(queued);
                drop(state);
                if let Some(driver) = driver {
                    driver.wake();
                }
                true
            }
        }
    }

    /// One turn of the driver: advances the wheel to now, wakes every due timer in batches
    /// of [`WAKE_BATCH`] with the lock released, stores `driver_waker` for notifications,
    /// and returns the tick it should next wake at (`None`: only when notified).
    pub(crate) fn turn(&self, driver_waker: &Waker, batch: &mut Vec<Waker>) -> Option<u64> {
        self.turn_at(self.clock.now_tick(), driver_waker, batch)
    }

    /// [`turn`](Self::turn) at a given tick.
    fn turn_at(&self, now_tick: u64, driver_waker: &Waker, batch: &mut Vec<Waker>) -> Option<u64> {
        let mut state = self.lock();
        state.wakeups += 1;
        state.wheel.advance(now_tick);
        loop {
            while batch.len() < WAKE_BATCH {
                match state.wheel.pop_ready() {
                    Some((_, waker)) => batch.push(take(waker)),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            drop(state);
            let panics = wake_all(batch);
            state = self.lock();
            state.waker_panics += panics;
        }
        let next = state.wheel.next_expiration();
        state.armed = next;
        if !state
            .driver_waker
            .as_ref()
            .is_some_and(|w| w.will_wake(driver_waker))
        {
            // The old one is the driver's own waker: dropping it runs no user code.
            state.driver_waker = Some(driver_waker.clone());
        }
        next
    }

    /// Moves a manual clock to `instant` and fires everything due, waking the wakers, before
    /// it returns. Returns `false` if the clock is not manual. Calls are serialised.
    pub(crate) fn advance_manual(&self, instant: Instant) -> bool {
        // One advance at a time, so that none returns while another is still waking
        // timers it took from the ready list.
        let _one_at_a_time = self
            .manual_advance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !self.clock.advance_to(instant) {
            return false;
        }
        self.turn(Waker::noop(), &mut Vec::new());
        true
    }

    /// Called when the task driver's future is dropped (its runtime shut down, or the task
    /// was aborted). Registered timers are kept; every waiting task is woken so that its
    /// next poll starts a driver thread, and later uses start one too.
    pub(crate) fn task_driver_stopped(&self) {
        let mut state = self.lock();
        state.running = Running::Stopped;
        state.armed = None;
        // The runtime's (possibly paused) clock is gone with it.
        self.clock.use_real_clock();
        let old_driver = state.driver_waker.take();
        self.stopped.store(true, Ordering::Release);
        let mut wakers = Vec::new();
        state.wheel.for_each_value(|waker| wakers.push(take(waker)));
        drop(state);
        drop(old_driver);
        wake_all(&mut wakers);
    }

    /// Starts a driver thread if the task driver has stopped.
    fn ensure_driver(self: &Arc<Self>, state: &mut State) {
        if state.running != Running::Stopped {
            return;
        }
        // The stopped flag stays set: this timer now belongs to no runtime, so the
        // current-timer lookup must not hand it out as one's default.
        if let Err(error) = spawn_thread(self) {
            panic!("tickless: the runtime driving this timer has shut down, and no driver thread could be started to take over: {error}");
        }
        state.running = Running::Thread;
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let state = self.lock();
        let counters = state.wheel.counters();
        Snapshot {
            wakeups: state.wakeups,
            buckets_flushed: counters.buckets_flushed,
            entries_fired: counters.entries_fired,
            entries_demoted: counters.entries_demoted,
            waker_panics: state.waker_panics,
            registered: state.wheel.len(),
            levels: state.wheel.levels(),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Tell the driver (parked thread or idle task) that there is nothing left to drive.
        let driver = self.lock().driver_waker.take();
        if let Some(driver) = driver {
            driver.wake();
        }
    }
}

impl State {
    /// The driver's waker, taken, if a bucket just queued at `queued` expires before the
    /// driver would wake on its own (rule 4).
    fn driver_to_wake(&mut self, queued: Option<u64>) -> Option<Waker> {
        let expiration = queued?;
        if self.armed.is_some_and(|armed| armed <= expiration) {
            return None;
        }
        self.armed = Some(expiration);
        self.driver_waker.take()
    }
}

/// Takes a stored waker, leaving the no-op one (waking that one does nothing).
fn take(waker: &mut Waker) -> Waker {
    std::mem::replace(waker, Waker::noop().clone())
}

/// Wakes and empties `wakers`, catching panics; returns how many panicked.
fn wake_all(wakers: &mut Vec<Waker>) -> u64 {
    let mut panics = 0;
    for waker in wakers.drain(..) {
        if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
            panics += 1;
        }
    }
    panics
}

#[cfg(all(test, tickless_loom))]
mod loom_tests;
