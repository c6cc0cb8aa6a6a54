//! One shard of a timer: a wheel behind its own lock. A timer has several, and a timer
//! registered on a thread goes to that thread's shard, so threads that do not share
//! timers do not share a lock. Everything here runs with the shard's lock held for a few
//! instructions and hands back what must be dropped or woken, to be done after unlocking
//! (ground rule 2 in [`driver`](super)).

use super::owner::{Drain, Owner, Published};
use super::Core;
use crate::sync::{lock, Mutex, MutexGuard};
use crate::wheel::{Placed, Wheel};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::task::{Poll, Waker};

/// One wheel of a timer, and what a registration on it needs: the shared [`Core`].
///
/// Aligned to two cache lines so that two shards' locks never share one.
#[repr(align(128))]
pub(crate) struct Shard {
    pub(crate) core: Arc<Core>,
    state: Mutex<ShardState>,
    /// The thread that registers here without the lock, and its log (see [`owner`](super::owner)).
    pub(super) owner: Owner,
}

pub(crate) struct ShardState {
    /// Each timer's waker; [`Waker::noop`] until it has one. A plain `Waker` (not an
    /// `Option`) gives the slab entry a niche, so an entry is 32 bytes, not 40. A
    /// run entry's waker runs it (see "Two kinds of entry" in [`driver`](super)).
    pub(crate) wheel: Wheel<Waker>,
    /// The tick before which an insert here must notify the driver (ground rule 4):
    /// `None` notifies on any queued bucket, `Some(0)` never (a manual clock).
    pub(crate) armed: Option<u64>,
    /// Which keys hold run entries, one bit each: the driver removes those itself when
    /// they fire, and never wakes them early (a runtime's shutdown wakes every timer).
    runs: Bits,
    /// How many run entries this shard holds: what [`Timer::pending`](crate::Timer::pending)
    /// sums.
    pub(crate) run_count: usize,
    /// This shard, while it holds run entries and a driver can fire them: nobody polls a
    /// run entry, so pending ones keep their timer alive, as a spawned task keeps its
    /// runtime. (A manual clock's cannot: nothing but a handle can advance it.)
    keepalive: Option<Arc<Shard>>,
    /// Which keys are the owner's: placeholders of its reserve, and live timers it
    /// registered (see [`owner`](super::owner)).
    pub(super) owned: Bits,
    /// How many entries are placeholders, not timers.
    pub(super) placeholders: usize,
    /// Placeholder keys of the owner's cancels that drains applied, for its next refill.
    pub(super) returned: Vec<usize>,
    /// Whether the shard has an owner's log (from its first claim on).
    pub(super) logged: bool,
    /// The log's next slot to apply.
    pub(super) head: u64,
    /// The hints the owner reads, as last stored.
    pub(super) published: Published,
}

/// One bit per slab key.
#[derive(Default)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn set(&mut self, key: usize) {
        let word = key / 64;
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (key % 64);
    }

    pub(super) fn clear(&mut self, key: usize) {
        if let Some(word) = self.0.get_mut(key / 64) {
            *word &= !(1 << (key % 64));
        }
    }

    pub(super) fn get(&self, key: usize) -> bool {
        self.0
            .get(key / 64)
            .is_some_and(|word| word & (1 << (key % 64)) != 0)
    }
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
                runs: Bits::default(),
                run_count: 0,
                keepalive: None,
                owned: Bits::default(),
                placeholders: 0,
                returned: Vec::new(),
                logged: false,
                head: 0,
                published: Published::default(),
            }),
            owner: Owner::new(),
        }
    }

    /// Takes the shard's lock and applies the owner's log (ground rule 4 included), so
    /// that the holder sees every timer registered here. What must happen after the
    /// unlock is done by the guard's drop (see [`ShardGuard`]).
    pub(crate) fn lock(&self) -> ShardGuard<'_> {
        self.lock_draining(Drain::Notify)
    }

    /// [`lock`](Self::lock) for the turn, which sets `armed` from what it finds: the
    /// drained inserts notify nobody.
    pub(super) fn lock_for_turn(&self) -> ShardGuard<'_> {
        self.lock_draining(Drain::Quiet)
    }

    /// Takes the lock, applies the owner's log as `drain` says, and keeps in the guard
    /// whether its notice may drive the driver here.
    pub(super) fn lock_draining(&self, drain: Drain) -> ShardGuard<'_> {
        let mut guard = ShardGuard {
            shard: self,
            state: ManuallyDrop::new(lock(&self.state)),
            notify: None,
            ask_only: matches!(drain, Drain::AskOnly),
            released: Vec::new(),
        };
        if guard.logged {
            self.drain(&mut guard, drain);
        }
        guard
    }

    /// Registers a timer due at `deadline_tick` that wakes `waker`, and notifies the
    /// driver if its bucket expires before the driver would wake on its own.
    pub(crate) fn register(self: &Arc<Self>, deadline_tick: u64, waker: Waker) -> Registered {
        let waker = match self.register_owned(deadline_tick, waker) {
            Ok(registered) => return registered,
            Err(waker) => waker,
        };
        let mut state = self.lock();
        self.claim_or_refill(&mut state);
        let (key, placed) = state.wheel.insert(deadline_tick, waker);
        match placed {
            Placed::Ready => {
                let waker = state.wheel.try_remove(key);
                drop(state);
                self.core.release(waker);
                Registered::Elapsed
            }
            Placed::Pending { queued } => {
                self.placed(state, queued);
                Registered::Pending(key)
            }
        }
    }

    /// `Ready` (and the entry is gone) once the timer has fired; otherwise makes sure
    /// `waker` is the one it will wake. The only user code run under the lock is
    /// `Waker::clone`, and it runs before anything is written.
    pub(crate) fn poll(&self, key: usize, waker: &Waker) -> Poll<()> {
        let mut state = self.lock();
        if state.wheel.has_fired(key) {
            let old = self.release_key(&mut state, key);
            drop(state);
            self.core.release(old);
            return Poll::Ready(());
        }
        let stored = state
            .wheel
            .get_mut(key)
            .expect("a registered timer's key is held");
        let old = (!stored.will_wake(waker)).then(|| std::mem::replace(stored, waker.clone()));
        drop(state);
        self.core.release(old);
        // After the waker is stored: if the runtime went before, its sweep woke the old
        // waker, not this one, but the sweep's unlock made the stop visible here.
        self.core.ensure_driver();
        Poll::Pending
    }

    /// Whether a registered timer has fired. Starts the fallback driver if needed, so a
    /// caller that only ever asks this still sees the timer fire.
    pub(crate) fn fired(&self, key: usize) -> bool {
        self.core.ensure_driver();
        self.lock().wheel.has_fired(key)
    }

    /// Forgets a registered timer, handing back its waker to be dropped unlocked. O(1).
    /// The owner's goes through its log, with no lock: then the drain that applies it
    /// drops the waker (see [`Shard::cancel_owned`]).
    #[must_use = "the waker is dropped by the caller, after the lock"]
    pub(crate) fn cancel(&self, key: usize) -> Option<Waker> {
        if self.cancel_owned(key) {
            return None;
        }
        self.release_key(&mut self.lock(), key)
    }

    /// Moves a registered timer to `deadline_tick`, keeping its waker. `Err` with the
    /// waker when that deadline has already come: the entry is then gone, and the caller
    /// records that before it wakes the waker (a waker may panic).
    pub(crate) fn reset(self: &Arc<Self>, key: usize, deadline_tick: u64) -> Result<(), Waker> {
        let mut state = self.lock();
        match state.wheel.reset(key, deadline_tick) {
            Placed::Ready => {
                let waker = self.release_key(&mut state, key);
                Err(waker.expect("a registered timer's key is held"))
            }
            Placed::Pending { queued } => {
                self.placed(state, queued);
                Ok(())
            }
        }
    }

    /// After an entry was placed in a bucket (`queued`: a bucket newly queued, and when it
    /// expires): tells the driver if it must turn earlier (ground rule 4), with the lock
    /// released. Then, if the runtime went before the insert, its sweep did not wake this
    /// timer, but the sweep's unlock made the stop visible here: start the fallback.
    fn placed(&self, mut state: ShardGuard<'_>, queued: Option<u64>) {
        if let Some(tick) = state.notify_for(queued) {
            state.notify_after(tick);
        }
        drop(state);
        self.core.ensure_driver();
    }
}

impl Shard {
    /// Inserts a run entry due at `deadline_tick`, whose `waker` runs it, and returns its
    /// key. One already due waits in the ready list, and the driver is told to turn.
    pub(crate) fn insert_run(self: &Arc<Self>, deadline_tick: u64, waker: Waker) -> usize {
        let mut state = self.lock();
        let (key, placed) = state.wheel.insert(deadline_tick, waker);
        state.runs.set(key);
        state.run_count += 1;
        if state.keepalive.is_none() && state.armed != Some(0) {
            state.keepalive = Some(self.clone());
        }
        let notify = match placed {
            Placed::Ready => Some(deadline_tick),
            Placed::Pending { queued } => state.notify_for(queued),
        };
        if let Some(tick) = notify {
            state.notify_after(tick);
        }
        drop(state);
        self.core.ensure_driver();
        key
    }

    /// Removes the run entry at `key` if it is still the one whose waker's data is `data`
    /// (the driver may have taken it, and the key gone to another entry); `true` if it did.
    pub(crate) fn remove_run(&self, key: usize, data: *const ()) -> bool {
        let mut state = self.lock();
        let ours = state.runs.get(key)
            && state
                .wheel
                .get(key)
                .is_some_and(|waker| std::ptr::eq(waker.data(), data));
        if !ours {
            return false;
        }
        let waker = state.wheel.try_remove(key);
        let keepalive = state.run_removed(key);
        drop(state);
        self.core.runs_removed(1);
        self.core.release(waker);
        drop(keepalive);
        true
    }
}

/// A shard's lock, held. It derefs to the shard's state; its drop releases the lock and
/// then, with no lock held (ground rule 2), tells the driver of an expiry that the holder
/// found earlier than the driver would turn on its own (ground rule 4).
pub(crate) struct ShardGuard<'a> {
    shard: &'a Shard,
    state: ManuallyDrop<MutexGuard<'a, ShardState>>,
    /// The tick to call [`Core::wake_for`] with after the unlock, if any.
    notify: Option<u64>,
    /// Call [`Core::ask_for`] instead, which never turns in the caller (a thread-local
    /// destructor: see [`Drain::AskOnly`]).
    ask_only: bool,
    /// Wakers the holder let go of (the drained cancels'), dropped after the unlock.
    released: Vec<Waker>,
}

impl ShardGuard<'_> {
    /// Asks for [`Core::wake_for`]`(tick)` once the lock is released.
    pub(crate) fn notify_after(&mut self, tick: u64) {
        self.notify = Some(self.notify.map_or(tick, |earlier| earlier.min(tick)));
    }

    /// Drops `waker` once the lock is released (ground rule 2).
    pub(super) fn release_after(&mut self, waker: Option<Waker>) {
        self.released.extend(waker);
    }
}

impl Deref for ShardGuard<'_> {
    type Target = ShardState;

    fn deref(&self) -> &ShardState {
        &self.state
    }
}

impl DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut ShardState {
        &mut self.state
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        if self.state.logged {
            self.shard.publish(&mut self.state);
        }
        // SAFETY: dropped once, here, and never used after.
        #[allow(unsafe_code)]
        unsafe {
            ManuallyDrop::drop(&mut self.state)
        };
        for waker in self.released.drain(..) {
            self.shard.core.release(Some(waker));
        }
        match self.notify {
            Some(tick) if self.ask_only => self.shard.core.ask_for(tick),
            Some(tick) => self.shard.core.wake_for(tick),
            None => {}
        }
    }
}

impl ShardState {
    /// Whether `key` holds a run entry.
    pub(crate) fn is_run(&self, key: usize) -> bool {
        self.runs.get(key)
    }

    /// Takes the waker of every timer (leaving the no-op one), to be woken unlocked: they
    /// poll again. Run entries are left alone: waking one runs it.
    pub(crate) fn take_timer_wakers(&mut self, into: &mut Vec<Waker>) {
        let runs = &self.runs;
        self.wheel.for_each(|key, waker| {
            if !runs.get(key) {
                into.push(std::mem::replace(waker, Waker::noop().clone()));
            }
        });
    }

    /// Forgets that `key` held a run entry (its entry is gone); hands back the shard's
    /// keepalive, to be dropped unlocked, when it was the last.
    #[must_use = "the keepalive is dropped by the caller, after the lock"]
    pub(crate) fn run_removed(&mut self, key: usize) -> Option<Arc<Shard>> {
        self.runs.clear(key);
        self.run_count -= 1;
        if self.run_count == 0 {
            self.keepalive.take()
        } else {
            None
        }
    }

    /// The tick to notify the driver for, if a bucket just queued at `queued` expires
    /// before the driver would wake on its own (ground rule 4); lowers `armed` to it.
    pub(super) fn notify_for(&mut self, queued: Option<u64>) -> Option<u64> {
        let expiration = queued?;
        if self.armed.is_some_and(|armed| armed <= expiration) {
            return None;
        }
        self.armed = Some(expiration);
        Some(expiration)
    }
}
