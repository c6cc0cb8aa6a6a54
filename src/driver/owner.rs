//! A shard's owner: the one thread that registers and cancels timers there without
//! taking its lock.
//!
//! The first thread to register on a shard nobody owns claims it (under the lock, once
//! per thread and shard), and from then on registers and cancels by writing to the
//! shard's **log**, a single-producer ring of ops (inserts and cancels), instead of
//! locking. Whoever takes the shard's lock next applies the log first ([`Shard::lock`]
//! drains it before it hands out the guard), so every locked path (the turn, a poll, a
//! cancel, a reset, a run entry, a snapshot, the runtime's end, an orphaning) sees the
//! owner's ops, in order, before anything else. Polls and resets, the owner's included,
//! stay locked: a key's ops are always applied before anything looks at the key.
//!
//! - **Keys.** The owner needs a key before its insert is applied, so it keeps a reserve
//!   of placeholder entries (unlinked, due never; see [`Wheel::placeholder`]), taken in
//!   batches under the lock at the claim and whenever a locked register finds the reserve
//!   empty. A key goes back to the reserve only under the lock, after the log was drained:
//!   when the owner's locked cancel (or a poll or reset that ends the timer) finds it
//!   marked as the owner's, or when a drain applies the owner's cancel of it (the key then
//!   waits, a placeholder, in the shard's `returned` until the owner's next refill). So no
//!   key is handed out again before its last op was applied. Any other key (a timer of
//!   the owner's dropped on another thread, a foreign timer the owner drops) is freed to
//!   the slab by whoever applies its cancel.
//! - **Cancels.** The owner's cancel needs no fence (it never needs the driver earlier).
//!   A turn that fires the timer before a drain applies the cancel wakes its waker once,
//!   spuriously, as tokio's timer may on a cancel from another thread; the drain hands
//!   the waker to its guard, which drops it after the unlock (it may be the last handle of
//!   a task whose future holds a timer here, whose drop locks the shard).
//! - **Ground rule 4 without the lock.** The lock holder publishes the shard's `armed`
//!   and the wheel's time as hints when they change. The owner writes its insert, then
//!   `fence(SeqCst)`, then reads the hints: if a lower bound of its bucket's expiration is
//!   below `armed`, or its deadline has come, it takes the lock, whose drain places the
//!   insert and tells it whether the timer is already due (then it completes at once,
//!   and needs no turn), or else notifies as a locked insert would. The turn, after it
//!   sets `armed` and unlocks, does `fence(SeqCst)` and looks at the log again: either the
//!   owner read the new `armed`, or the turn sees the insert. Every drain outside the
//!   turn applies rule 4 itself (the insert may have read an `armed` that the turn raised
//!   past it, and the turn may find the log already drained). The same fence pair orders
//!   the insert against the runtime's end: `runtime_gone` switches the mode, fences, then
//!   sweeps (its locks drain); the owner, after its fence, reads the mode.
//! - **Orphans.** When the owner's thread exits, a thread-local's destructor locks each
//!   shard it owns (draining its log), frees its reserve and its returned keys, forgets
//!   which live keys were its own, and lets the shard go (`owner = 0`, release); what its
//!   drain must tell the driver it only asks for ([`Drain::AskOnly`]): no turn runs in a
//!   destructor. The next thread to register there claims it (acquire), so the log's
//!   slots pass from one owner to the next in order.

use super::shard::{Bits, Registered, Shard, ShardGuard, ShardState};
use crate::sync::{fence, thread_local, AtomicU64, Ordering, UnsafeCell};
use crate::wheel::{Placed, Wheel};
use std::cell::{Cell, RefCell};
use std::sync::{Arc, OnceLock, Weak};
use std::task::Waker;

/// Slots of a shard's log: an owner that registers this many timers with no lock taken in
/// between takes the lock (which drains it) for the next.
#[cfg(not(tickless_loom))]
const LOG_SLOTS: u64 = 64;
#[cfg(tickless_loom)]
const LOG_SLOTS: u64 = 2;

/// Placeholder keys taken at once for an owner's reserve.
#[cfg(not(tickless_loom))]
const RESERVE_BATCH: usize = 16;
#[cfg(tickless_loom)]
const RESERVE_BATCH: usize = 4;

/// Most keys an owner keeps; the keys of more cancelled timers are freed.
const RESERVE_MAX: usize = 4 * RESERVE_BATCH;

/// An owner's operation, written to its log.
enum Op {
    /// A register: fill the placeholder at `key`.
    Insert { key: usize, tick: u64, waker: Waker },
    /// A cancel of the timer at `key`, which the owner no longer holds (see
    /// [`Shard::cancel_owned`]).
    Cancel { key: usize },
}

/// A shard's owner section: who owns it, its log, the hints it reads, its reserve.
pub(crate) struct Owner {
    /// The owning thread's id ([`thread_id`]); 0: none. Only the owner stores its own id
    /// and only it clears it, so `id == mine` is exact for the asking thread.
    id: AtomicU64,
    /// The next slot the owner writes (written by the owner only).
    tail: AtomicU64,
    /// The next slot a drain applies (written under the shard's lock only).
    head: AtomicU64,
    /// The shard's `armed` (`u64::MAX` for `None`), as last published under the lock.
    armed_hint: AtomicU64,
    /// The wheel's time, as last published under the lock.
    elapsed_hint: AtomicU64,
    /// The log's slots, made at the first claim (a shard nobody claims has none).
    slots: OnceLock<Box<[UnsafeCell<Option<Op>>]>>,
    /// The owner's placeholder keys: touched only by the owner's thread (a claim acquires
    /// what the last owner's orphaning released).
    reserve: UnsafeCell<Vec<usize>>,
}

// SAFETY: the cells are touched as the fields say: a log slot by the owner before it
// publishes it and by the lock holder after, the reserve by the owner's thread only.
#[allow(unsafe_code)]
unsafe impl Sync for Owner {}

impl Owner {
    pub(super) fn new() -> Self {
        Owner {
            id: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
            armed_hint: AtomicU64::new(u64::MAX),
            elapsed_hint: AtomicU64::new(0),
            slots: OnceLock::new(),
            reserve: UnsafeCell::new(Vec::new()),
        }
    }

    /// Whether the calling thread owns the shard.
    fn is_mine(&self) -> bool {
        self.id.load(Ordering::Relaxed) == thread_id()
    }

    /// The log's tail, when its slot there is free (a drain applied it). For the owner's
    /// thread only.
    fn free_slot(&self) -> Option<u64> {
        let tail = self.tail.load(Ordering::Relaxed);
        (tail - self.head.load(Ordering::Acquire) < LOG_SLOTS).then_some(tail)
    }

    /// Writes `op` to the slot at `tail` ([`free_slot`](Self::free_slot)'s) and publishes
    /// it. For the owner's thread only.
    fn push(&self, tail: u64, op: Op) {
        let slots = self
            .slots
            .get()
            .expect("a shard's log is made at its claim");
        let slot = &slots[(tail % LOG_SLOTS) as usize];
        // SAFETY: the slot is the owner's: the drain that last applied it stored a head
        // past it, which `free_slot`'s load acquired, and no drain reads it before the
        // store of the tail below.
        #[allow(unsafe_code)]
        slot.with_mut(|slot| unsafe { *slot = Some(op) });
        self.tail.store(tail + 1, Ordering::Release);
    }

    /// Runs `f` on the reserve. For the owner's thread only.
    fn reserve<R>(&self, f: impl FnOnce(&mut Vec<usize>) -> R) -> R {
        // SAFETY: only the owner's thread calls this (see the field).
        #[allow(unsafe_code)]
        self.reserve.with_mut(|reserve| f(unsafe { &mut *reserve }))
    }
}

/// What a lock's drain of the log does about the inserts it applies (ground rule 4).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Drain {
    /// The turn's: nothing, it sets `armed` from what it finds.
    Quiet,
    /// Every other lock holder's: as for a locked insert, and the guard tells the driver
    /// ([`Core::wake_for`](super::Core::wake_for)) after the unlock.
    Notify,
    /// The owner's slow path for its insert at this key: as `Notify`, except for that
    /// insert found already due, which the owner completes at once under this lock
    /// ([`Registered::Elapsed`]): no turn is needed for it.
    Completing(usize),
    /// The orphaning's, in a thread-local destructor: as `Notify`, but the guard only asks
    /// for a turn ([`Core::ask_for`](super::Core::ask_for)) and never runs one there,
    /// where a waker or callback would run with the thread half torn down and a panic
    /// escaping aborts the process.
    AskOnly,
}

/// The hints as last published, kept under the lock so that only a change is stored.
pub(crate) struct Published {
    armed: u64,
    elapsed: u64,
}

impl Default for Published {
    fn default() -> Self {
        Published {
            armed: u64::MAX,
            elapsed: 0,
        }
    }
}

/// The next thread id; 0 is "nobody".
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[cfg(not(tickless_loom))]
thread_local! {
    static ID: Cell<u64> = const { Cell::new(0) };
}

// loom's `thread_local!` has no `const` form.
#[cfg(tickless_loom)]
thread_local! {
    static ID: Cell<u64> = Cell::new(0);
}

thread_local! {
    static OWNED: RefCell<Owned> = RefCell::new(Owned::default());
}

/// The calling thread's owner id: nonzero, unique, taken at its first use.
fn thread_id() -> u64 {
    ID.with(|id| match id.get() {
        0 => {
            let new = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            id.set(new);
            new
        }
        known => known,
    })
}

/// The shards a thread owns, orphaned when it exits.
#[derive(Default)]
struct Owned {
    id: u64,
    shards: Vec<Weak<Shard>>,
    /// The length at which dead entries are next pruned.
    prune_at: usize,
}

impl Drop for Owned {
    fn drop(&mut self) {
        for shard in self.shards.drain(..) {
            if let Some(shard) = shard.upgrade() {
                shard.orphan(self.id);
            }
        }
    }
}

/// Under loom: orphans the calling thread's shards now, as its exit does. A model that
/// must drive the orphaning's notice ([`Drain::AskOnly`]) calls this last on the owner's
/// thread: in loom's thread-local destructors [`Core::ask_for`](super::Core::ask_for)
/// cannot run (the token's `thread_id` asks `loom::thread::current()`, which panics there).
#[cfg(all(test, tickless_loom))]
pub(super) fn orphan_now() {
    drop(OWNED.with(|owned| std::mem::take(&mut *owned.borrow_mut())));
}

impl Shard {
    /// Under loom: stores a stale `armed` hint of 0, as an owner's read of `armed` from
    /// before a turn raised it leaves it, so that its next insert stays in the log.
    #[cfg(all(test, tickless_loom))]
    pub(super) fn stale_armed_hint(&self) {
        self.owner.armed_hint.store(0, Ordering::Relaxed);
    }

    /// The owner's register, through the log: `Err` with the waker when the calling thread
    /// is not the owner, or the locked path must do it (deadline come, log full, reserve
    /// empty).
    pub(super) fn register_owned(&self, tick: u64, waker: Waker) -> Result<Registered, Waker> {
        let owner = &self.owner;
        if !owner.is_mine() || tick <= owner.elapsed_hint.load(Ordering::Relaxed) {
            return Err(waker);
        }
        let Some(tail) = owner.free_slot() else {
            return Err(waker);
        };
        let Some(key) = owner.reserve(Vec::pop) else {
            return Err(waker);
        };
        owner.push(tail, Op::Insert { key, tick, waker });
        // One half of both pairs (see the module docs): with the turn's fence after it
        // publishes `armed`, and with `runtime_gone`'s after its mode switch.
        fence(Ordering::SeqCst);
        let elapsed = owner.elapsed_hint.load(Ordering::Relaxed);
        let due = tick <= elapsed;
        let shift = self.core.wheel_size.trailing_zeros();
        if due
            || Wheel::<Waker>::expiration_bound(shift, elapsed, tick)
                < owner.armed_hint.load(Ordering::Relaxed)
        {
            // The drain places the insert and notifies the driver if it must (rule 4),
            // except for this insert when it is due: completed here, it needs no turn.
            let mut state = self.lock_draining(Drain::Completing(key));
            if state.wheel.has_fired(key) {
                let waker = self.release_key(&mut state, key);
                drop(state);
                self.core.release(waker);
                return Ok(Registered::Elapsed);
            }
        }
        self.core.ensure_driver();
        Ok(Registered::Pending(key))
    }

    /// The owner's cancel, through the log: `false` when the calling thread is not the
    /// owner or the log is full (the locked path must do it). Any key of this shard may
    /// go this way, the owner's or not: the caller held it and lets go of it here, and the
    /// drain that applies the cancel decides, under the lock, where the key goes (see
    /// [`drain`](Self::drain)). No fence: a cancel never needs the driver earlier. A turn
    /// that fires the timer before the drain wakes its waker once, spuriously.
    pub(super) fn cancel_owned(&self, key: usize) -> bool {
        let owner = &self.owner;
        if !owner.is_mine() {
            return false;
        }
        let Some(tail) = owner.free_slot() else {
            return false;
        };
        owner.push(tail, Op::Cancel { key });
        true
    }

    /// Under the lock, before a locked register: the calling thread claims the shard if
    /// nobody owns it, and the owner refills an empty reserve.
    pub(super) fn claim_or_refill(self: &Arc<Self>, state: &mut ShardState) {
        let owner = &self.owner;
        match owner.id.load(Ordering::Relaxed) {
            0 => {
                let me = thread_id();
                // A thread whose thread-locals are being destroyed could not orphan it.
                let claimed = OWNED.try_with(|owned| {
                    if owner
                        .id
                        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        return false;
                    }
                    let mut owned = owned.borrow_mut();
                    owned.id = me;
                    if owned.shards.len() >= owned.prune_at {
                        owned.shards.retain(|shard| shard.strong_count() > 0);
                        owned.prune_at = (2 * owned.shards.len()).max(16);
                    }
                    owned.shards.push(Arc::downgrade(self));
                    true
                });
                if matches!(claimed, Ok(true)) {
                    owner
                        .slots
                        .get_or_init(|| (0..LOG_SLOTS).map(|_| UnsafeCell::new(None)).collect());
                    state.logged = true;
                    self.refill(state);
                }
            }
            id if id == thread_id() && owner.reserve(|reserve| reserve.is_empty()) => {
                self.refill(state);
            }
            _ => {}
        }
    }

    /// Takes the keys of the owner's cancels that drains applied, and more placeholders
    /// up to a batch, into the owner's reserve. Owner, under the lock.
    fn refill(&self, state: &mut ShardState) {
        self.owner.reserve(|reserve| {
            while reserve.len() + state.returned.len() < RESERVE_BATCH {
                let key = state.wheel.placeholder(Waker::noop().clone());
                state.owned.set(key);
                state.placeholders += 1;
                reserve.push(key);
            }
            // Last, so that they are handed out first, while still in cache.
            reserve.append(&mut state.returned);
        });
    }

    /// Lets go of the timer at `key` (the caller has just made it `IDLE` or `ELAPSED`) and
    /// hands back its waker, to be dropped unlocked: its key goes back to the owner's
    /// reserve when it is the owner's and the caller is the owner, else to the slab.
    pub(super) fn release_key(&self, state: &mut ShardState, key: usize) -> Option<Waker> {
        if state.owned.get(key) {
            let kept = self.owner.is_mine()
                && self.owner.reserve(|reserve| {
                    let keep = reserve.len() < RESERVE_MAX;
                    if keep {
                        reserve.push(key);
                    }
                    keep
                });
            if kept {
                state.placeholders += 1;
                return Some(state.wheel.vacate(key, Waker::noop().clone()));
            }
            state.owned.clear(key);
        }
        state.wheel.try_remove(key)
    }

    /// Applies the owner's log, in order. Unless `drain` is the turn's (which sets `armed`
    /// from what it finds) each insert follows ground rule 4 as a locked one does: one
    /// already due, or queued before `armed`, has the guard tell the driver after the
    /// unlock (see [`Drain`]). Each cancel's waker is dropped by the guard after the
    /// unlock: it may be the last handle of a task whose future holds a timer here.
    pub(super) fn drain(&self, guard: &mut ShardGuard<'_>, drain: Drain) {
        let tail = self.owner.tail.load(Ordering::Acquire);
        let mut head = guard.head;
        if head == tail {
            return;
        }
        let slots = self
            .owner
            .slots
            .get()
            .expect("a shard's log is made at its claim");
        while head != tail {
            let slot = &slots[(head % LOG_SLOTS) as usize];
            // SAFETY: the owner wrote this slot before the store of the tail that the load
            // above acquired, and writes it again only after the store of the head past it
            // below, made once the op is taken out.
            #[allow(unsafe_code)]
            let op = slot
                .with_mut(|slot| unsafe { (*slot).take() })
                .expect("a published slot holds an op");
            // Past the slot before the op is applied: if applying it panics, the next lock
            // starts at the next slot, not at this one, emptied.
            head += 1;
            guard.head = head;
            self.owner.head.store(head, Ordering::Release);
            match op {
                Op::Insert { key, tick, waker } => {
                    let (placeholder, placed) = guard.wheel.fill(key, tick, waker);
                    drop(placeholder); // the no-op waker: no user code
                    guard.placeholders -= 1;
                    if drain != Drain::Quiet {
                        let tick = match placed {
                            Placed::Ready if drain == Drain::Completing(key) => None,
                            Placed::Ready => Some(tick),
                            Placed::Pending { queued } => guard.notify_for(queued),
                        };
                        if let Some(tick) = tick {
                            guard.notify_after(tick);
                        }
                    }
                }
                Op::Cancel { key } => {
                    let waker = Self::cancelled(guard, key);
                    guard.release_after(waker);
                }
            }
        }
    }

    /// Applies an owner's cancel (the lock held, the log applied up to it): the key of
    /// one of the owner's timers becomes a placeholder again and waits in
    /// `returned` for the owner's next locked refill, so that the owner hands it out
    /// again only once this cancel was applied; any other key is freed to the slab. Hands
    /// back the timer's waker, to be dropped unlocked (ground rule 2).
    fn cancelled(state: &mut ShardState, key: usize) -> Option<Waker> {
        if state.owned.get(key) {
            if state.returned.len() < RESERVE_MAX {
                state.returned.push(key);
                state.placeholders += 1;
                return Some(state.wheel.vacate(key, Waker::noop().clone()));
            }
            state.owned.clear(key);
        }
        state.wheel.try_remove(key)
    }

    /// Whether the owner has written inserts past `head`, the log's head when the turn
    /// last let go of the lock (the turn's second look, after its fence), whether or not
    /// another lock has applied them since.
    pub(super) fn log_moved_since(&self, head: u64) -> bool {
        self.owner.tail.load(Ordering::Acquire) != head
    }

    /// Stores the hints the owner reads, where they changed. Under the lock, on a shard
    /// that has a log.
    pub(super) fn publish(&self, state: &mut ShardState) {
        let armed = state.armed.unwrap_or(u64::MAX);
        if state.published.armed != armed {
            state.published.armed = armed;
            self.owner.armed_hint.store(armed, Ordering::Relaxed);
        }
        let elapsed = state.wheel.elapsed_tick();
        if state.published.elapsed != elapsed {
            state.published.elapsed = elapsed;
            self.owner.elapsed_hint.store(elapsed, Ordering::Relaxed);
        }
    }

    /// The owner's thread exits: its log applied, its reserve freed, its live keys made
    /// plain ones, the shard let go for the next thread to claim.
    fn orphan(&self, me: u64) {
        // In a thread-local destructor: the driver is asked to turn, never turned here.
        let mut state = self.lock_draining(Drain::AskOnly);
        if self.owner.id.load(Ordering::Relaxed) != me {
            return;
        }
        let returned = std::mem::take(&mut state.returned);
        for key in self
            .owner
            .reserve(std::mem::take)
            .into_iter()
            .chain(returned)
        {
            drop(state.wheel.try_remove(key)); // a placeholder's no-op waker
            state.placeholders -= 1;
        }
        debug_assert_eq!(state.placeholders, 0, "a placeholder outside the reserve");
        state.owned = Bits::default();
        self.owner.id.store(0, Ordering::Release);
    }
}

#[cfg(all(test, not(tickless_loom)))]
mod tests;
