//! One shard of a timer: a wheel behind its own lock. A timer has several, and a timer
//! registered on a thread goes to that thread's shard, so threads that do not share
//! timers do not share a lock. Everything here runs with the shard's lock held for a few
//! instructions and hands back what must be dropped or woken, to be done after unlocking
//! (ground rule 2 in [`driver`](super)).

use super::sync::{lock, Mutex, MutexGuard};
use super::Core;
use crate::wheel::{Placed, Wheel};
use std::sync::Arc;
use std::task::{Poll, Waker};

/// One wheel of a timer, and what a registration on it needs: the shared [`Core`].
///
/// Aligned to two cache lines so that two shards' locks never share one.
#[repr(align(128))]
pub(crate) struct Shard {
    pub(crate) core: Arc<Core>,
    state: Mutex<ShardState>,
}

pub(crate) struct ShardState {
    /// Each timer's waker; [`Waker::noop`] until it has one. A plain `Waker` (not an
    /// `Option`) gives the slab entry a niche, so an entry is 32 bytes, not 40.
    pub(crate) wheel: Wheel<Waker>,
    /// The tick before which an insert here must notify the driver (ground rule 4):
    /// `None` notifies on any queued bucket, `Some(0)` never (a manual clock).
    pub(crate) armed: Option<u64>,
}

/// Where a registration went.
pub(crate) enum Registered {
    /// In the wheel, under this key.
    Pending(usize),
    /// Its deadline had come; nothing is held.
    Elapsed,
}

impl Shard {
    pub(crate) fn new(core: Arc<Core>, wheel_size: usize, armed: Option<u64>) -> Self {
        Shard {
            core,
            state: Mutex::new(ShardState {
                wheel: Wheel::new(wheel_size),
                armed,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ShardState> {
        lock(&self.state)
    }

    /// Registers a timer due at `deadline_tick` that wakes `waker`, and notifies the
    /// driver if its bucket expires before the driver would wake on its own.
    pub(crate) fn register(self: &Arc<Self>, deadline_tick: u64, waker: Waker) -> Registered {
        let mut state = self.lock();
        let (key, placed) = state.wheel.insert(deadline_tick, waker);
        match placed {
            Placed::Ready => {
                let waker = state.wheel.try_remove(key);
                drop(state);
                self.core.release(waker);
                Registered::Elapsed
            }
            Placed::Pending { queued } => {
                let notify = state.notify_for(queued);
                drop(state);
                if let Some(tick) = notify {
                    self.core.wake_for(tick);
                }
                // After the insert: if the runtime went before it, its sweep did not wake
                // this timer, but the sweep's unlock made the stop visible here.
                self.core.ensure_driver();
                Registered::Pending(key)
            }
        }
    }

    /// `Ready` (and the entry is gone) once the timer has fired; otherwise makes sure
    /// `waker` is the one it will wake. The only user code run under the lock is
    /// `Waker::clone`, and it runs before anything is written.
    pub(crate) fn poll(&self, key: usize, waker: &Waker) -> Poll<()> {
        self.core.ensure_driver();
        let mut state = self.lock();
        if state.wheel.has_fired(key) {
            let old = state.wheel.try_remove(key);
            drop(state);
            self.core.release(old);
            return Poll::Ready(());
        }
        let stored = state
            .wheel
            .get_mut(key)
            .expect("a registered timer's key is held");
        if stored.will_wake(waker) {
            return Poll::Pending;
        }
        let old = std::mem::replace(stored, waker.clone());
        drop(state);
        self.core.release(Some(old));
        Poll::Pending
    }

    /// Whether a registered timer has fired. Starts the fallback driver if needed, so a
    /// caller that only ever asks this still sees the timer fire.
    pub(crate) fn fired(&self, key: usize) -> bool {
        self.core.ensure_driver();
        self.lock().wheel.has_fired(key)
    }

    /// Forgets a registered timer, handing back its waker to be dropped unlocked. O(1).
    #[must_use = "the waker is dropped by the caller, after the lock"]
    pub(crate) fn cancel(&self, key: usize) -> Option<Waker> {
        self.lock().wheel.try_remove(key)
    }

    /// Moves a registered timer to `deadline_tick`, keeping its waker. `Err` with the
    /// waker when that deadline has already come: the entry is then gone, and the caller
    /// records that before it wakes the waker (a waker may panic).
    pub(crate) fn reset(self: &Arc<Self>, key: usize, deadline_tick: u64) -> Result<(), Waker> {
        let mut state = self.lock();
        match state.wheel.reset(key, deadline_tick) {
            Placed::Ready => {
                let waker = state.wheel.try_remove(key);
                Err(waker.expect("a registered timer's key is held"))
            }
            Placed::Pending { queued } => {
                let notify = state.notify_for(queued);
                drop(state);
                if let Some(tick) = notify {
                    self.core.wake_for(tick);
                }
                self.core.ensure_driver();
                Ok(())
            }
        }
    }
}

impl ShardState {
    /// The tick to notify the driver for, if a bucket just queued at `queued` expires
    /// before the driver would wake on its own (ground rule 4); lowers `armed` to it.
    fn notify_for(&mut self, queued: Option<u64>) -> Option<u64> {
        let expiration = queued?;
        if self.armed.is_some_and(|armed| armed <= expiration) {
            return None;
        }
        self.armed = Some(expiration);
        Some(expiration)
    }
}
