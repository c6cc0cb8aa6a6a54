//! Scratch model (issue 41 design, not the crate's code): the owner of a shard publishes
//! registers and cancels through a single-producer log, with no lock and no RMW; the lock
//! holder (driver turn, foreign thread, owner's slow path) is the log's one consumer.
//! Checked: no expiry missed (the Dekker pair owner push/fence/load armed vs driver store
//! armed/fence/load tail), a foreign cancel of an entry whose insert is still in the log,
//! nothing woken twice, no entry left behind, key reuse only after the cancel is applied,
//! and the runtime's end vs a fast-path register (the second Dekker pair: push/fence/load
//! mode vs switch mode/fence/sweep), and an owner that exits while another claims the shard.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering::*};
use loom::sync::Mutex;

pub const CAP: usize = 4;
pub const KEYS: usize = 4;
/// "armed = None": every insert must notify.
pub const NONE: u64 = u64::MAX;

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Insert { key: usize, tick: u64 },
    Cancel { key: usize },
}

pub struct Wheel {
    /// Each key's deadline tick while in the wheel.
    pub entries: [Option<u64>; KEYS],
    pub fired: [bool; KEYS],
    pub armed: u64,
    pub wakes: [usize; KEYS],
}

pub struct Shard {
    slots: [UnsafeCell<Option<Op>>; CAP],
    head: AtomicUsize,
    tail: AtomicUsize,
    pub wheel: Mutex<Wheel>,
    /// `wheel.armed`, readable without the lock: written only under it.
    armed_hint: AtomicU64,
    /// The earliest tick anyone asked the driver for (its alarm).
    pub notified: AtomicU64,
    /// Set by the driver when it fires a key (with its wake); read by the owner's poll
    /// with no lock. Cleared by the drain that applies a new insert of the key.
    fired_bits: [loom::sync::atomic::AtomicBool; KEYS],
    /// The driver's mode: `TOKIO`, then `STOPPED` when the runtime goes, then `FALLBACK`
    /// when a thread takes over (`ensure_driver`).
    mode: loom::sync::atomic::AtomicU8,
    /// Whether `ensure_driver` started the fallback driver thread.
    pub fallback_started: loom::sync::atomic::AtomicBool,
    /// The owning thread's id; 0: none. Only the owner stores its own id (by a claim's
    /// CAS from 0) and only it clears it (`orphan`), so `owner == my id` is a plain load.
    owner: AtomicU64,
}

pub const TOKIO: u8 = 1;
pub const STOPPED: u8 = 3;
pub const FALLBACK: u8 = 4;

fn do_fence() {
    #[cfg(not(feature = "no-fence"))]
    fence(SeqCst);
}

impl Shard {
    pub fn new() -> Self {
        Shard {
            slots: std::array::from_fn(|_| UnsafeCell::new(None)),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            wheel: Mutex::new(Wheel {
                entries: [None; KEYS],
                fired: [false; KEYS],
                armed: NONE,
                wakes: [0; KEYS],
            }),
            armed_hint: AtomicU64::new(NONE),
            notified: AtomicU64::new(NONE),
            fired_bits: std::array::from_fn(|_| loom::sync::atomic::AtomicBool::new(false)),
            mode: loom::sync::atomic::AtomicU8::new(TOKIO),
            fallback_started: loom::sync::atomic::AtomicBool::new(false),
            owner: AtomicU64::new(0),
        }
    }

    /// Thread `id` takes the shard if nobody owns it. Acquire: it then sees the last
    /// owner's `tail` and the drain of its `orphan`.
    pub fn claim(&self, id: u64) -> bool {
        self.owner.compare_exchange(0, id, Acquire, Relaxed).is_ok()
    }

    /// Thread `id` registers `key` at `tick`: the owner's fast path if it owns the shard,
    /// otherwise today's locked insert (a foreign thread, or one whose claim failed).
    pub fn register_as(&self, id: u64, key: usize, tick: u64) {
        if self.owner.load(Relaxed) == id {
            self.owner_register(key, tick);
            return;
        }
        let mut wheel = self.wheel.lock().unwrap();
        self.drain(&mut wheel);
        wheel.entries[key] = Some(tick);
        wheel.fired[key] = false;
        self.lower_armed(&mut wheel, tick);
    }

    /// The owner's thread exits: it drains its log under the lock, then lets go (Release:
    /// the next claim sees its last `tail` and the drain).
    pub fn orphan(&self, id: u64) {
        assert_eq!(self.owner.load(Relaxed), id, "only the owner orphans");
        let mut wheel = self.wheel.lock().unwrap();
        self.drain(&mut wheel);
        drop(wheel);
        self.owner.store(0, Release);
    }

    /// Lock holder only: applies what the owner published. An insert due before `armed`
    /// lowers it and notifies, as a locked insert does (ground rule 4): a turn may have
    /// raised `armed` after the owner read the hint, and another lock holder's drain (a
    /// foreign thread's, an orphaning owner's), not the turn's second look, may be the one
    /// that applies the insert; the turn's look then finds the log empty
    /// (`orphan_vs_turn_vs_a_new_owner` misses an expiry without this).
    pub fn drain(&self, wheel: &mut Wheel) {
        self.drain_with(wheel, true);
    }

    /// `drain`; the turn passes `notify: false`: it sets `armed` itself from everything
    /// it drained.
    fn drain_with(&self, wheel: &mut Wheel, notify: bool) {
        let head = self.head.load(Relaxed);
        let tail = self.tail.load(Acquire);
        for i in head..tail {
            // SAFETY: slot `i` was published by the owner's `tail` store (acquired above)
            // and is not written again until `head` passes it; only the lock holder reads.
            let op = self.slots[i % CAP].with_mut(|slot| unsafe { (*slot).take() });
            match op.expect("a published slot holds an op") {
                Op::Insert { key, tick } => {
                    assert!(
                        wheel.entries[key].is_none(),
                        "key {key} reused before its cancel was applied"
                    );
                    wheel.entries[key] = Some(tick);
                    wheel.fired[key] = false;
                    self.fired_bits[key].store(false, Relaxed);
                    if notify && cfg!(not(feature = "no-drain-notify")) {
                        self.lower_armed(wheel, tick);
                    }
                }
                Op::Cancel { key } => {
                    wheel.entries[key] = None;
                    self.fired_bits[key].store(false, Relaxed);
                }
            }
        }
        self.head.store(tail, Release);
    }

    /// Owner only: publishes `op`; `false` when the log is full (take the slow path).
    fn push(&self, op: Op) -> bool {
        let tail = self.tail.load(Relaxed);
        if tail - self.head.load(Acquire) == CAP {
            return false;
        }
        // SAFETY: the consumer has released this slot (`head` acquired above is past it)
        // and reads it only after the `tail` store below; only the owner writes.
        self.slots[tail % CAP].with_mut(|slot| unsafe { *slot = Some(op) });
        self.tail.store(tail + 1, Release);
        true
    }

    fn lower_armed(&self, wheel: &mut Wheel, tick: u64) {
        if tick < wheel.armed {
            wheel.armed = tick;
            self.armed_hint.store(tick, Relaxed);
            self.notified.fetch_min(tick, SeqCst);
        }
    }

    /// Owner: register `key` at `tick`. Fast: push, fence, look at armed.
    pub fn owner_register(&self, key: usize, tick: u64) {
        if self.push(Op::Insert { key, tick }) {
            do_fence();
            if tick >= self.armed_hint.load(Relaxed) {
                self.ensure_driver();
                return;
            }
            let mut wheel = self.wheel.lock().unwrap();
            self.drain(&mut wheel);
            self.lower_armed(&mut wheel, tick);
            drop(wheel);
            self.ensure_driver();
        } else {
            let mut wheel = self.wheel.lock().unwrap();
            self.drain(&mut wheel);
            wheel.entries[key] = Some(tick);
            wheel.fired[key] = false;
            self.lower_armed(&mut wheel, tick);
            drop(wheel);
            self.ensure_driver();
        }
    }

    /// After a register: starts the fallback driver if the runtime has gone (today's
    /// `Core::ensure_driver`, a load on the fast path). On the owner's fast path it comes
    /// after the push and its fence, which is what orders it against `runtime_gone`.
    pub fn ensure_driver(&self) {
        if self.mode.load(Acquire) == STOPPED
            && self
                .mode
                .compare_exchange(STOPPED, FALLBACK, AcqRel, Acquire)
                .is_ok()
        {
            self.fallback_started.store(true, SeqCst);
        }
    }

    /// The runtime went (today's `Core::runtime_gone`): the mode moves to `STOPPED`, then,
    /// after the fence, the sweep (which drains) wakes every registered timer, so that its
    /// next poll starts the fallback. Returns how many it woke.
    pub fn runtime_gone(&self) -> usize {
        if self
            .mode
            .compare_exchange(TOKIO, STOPPED, AcqRel, Acquire)
            .is_err()
        {
            return 0;
        }
        do_fence();
        let mut wheel = self.wheel.lock().unwrap();
        self.drain(&mut wheel);
        let mut woken = 0;
        for key in 0..KEYS {
            if wheel.entries[key].is_some() && !wheel.fired[key] {
                wheel.wakes[key] += 1;
                woken += 1;
            }
        }
        woken
    }

    /// Owner: cancel `key` (registered by this owner). No notify is ever needed.
    pub fn owner_cancel(&self, key: usize) {
        if !self.push(Op::Cancel { key }) {
            let mut wheel = self.wheel.lock().unwrap();
            self.drain(&mut wheel);
            wheel.entries[key] = None;
        }
    }

    /// Owner: whether `key` has fired, with no lock.
    pub fn owner_poll(&self, key: usize) -> bool {
        self.fired_bits[key].load(Acquire)
    }

    /// Owner: whether the log's consumer has applied everything up to log index `index`
    /// (so a key cancelled at `index` may be reused: its old fired mark is gone).
    pub fn applied(&self, index: usize) -> bool {
        self.head.load(Acquire) > index
    }

    /// Owner: the log index its next push takes.
    pub fn next_index(&self) -> usize {
        self.tail.load(Relaxed)
    }

    /// A thread that does not own the shard (a `Sleep` moved there): lock, drain, cancel.
    pub fn foreign_cancel(&self, key: usize) {
        let mut wheel = self.wheel.lock().unwrap();
        self.drain(&mut wheel);
        wheel.entries[key] = None;
    }

    /// The driver's turn at `now`: drain, fire what is due (wake once: the entry stays,
    /// marked fired, for its owner to remove), set armed; then the fence and a second look
    /// at the log. Returns the tick it will turn at next.
    pub fn turn(&self, now: u64) -> u64 {
        let mut next;
        {
            let mut wheel = self.wheel.lock().unwrap();
            self.drain_with(&mut wheel, false);
            next = NONE;
            for key in 0..KEYS {
                match wheel.entries[key] {
                    Some(tick) if tick <= now && !wheel.fired[key] => {
                        wheel.fired[key] = true;
                        self.fired_bits[key].store(true, Release);
                        wheel.wakes[key] += 1;
                    }
                    Some(tick) if !wheel.fired[key] => next = next.min(tick),
                    _ => {}
                }
            }
            wheel.armed = next;
            self.armed_hint.store(next, Relaxed);
        }
        do_fence();
        if self.tail.load(Relaxed) != self.head.load(Relaxed) {
            let mut wheel = self.wheel.lock().unwrap();
            self.drain_with(&mut wheel, false);
            for key in 0..KEYS {
                if let (Some(tick), false) = (wheel.entries[key], wheel.fired[key]) {
                    next = next.min(tick);
                }
            }
            wheel.armed = next;
            self.armed_hint.store(next, Relaxed);
        }
        next
    }
}

impl Default for Shard {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Owner registers (key 1, tick 5) while the driver turns at 0 and a foreign thread
    /// cancels key 0, which the owner registered earlier and whose insert may still be
    /// in the log. After all: key 1 is in the wheel and someone turns at or before 5;
    /// key 0 is gone; nothing was woken.
    #[test]
    fn owner_register_vs_turn_vs_foreign_cancel() {
        loom::model(|| {
            let shard = Arc::new(Shard::new());
            // The driver has turned once with nothing registered: armed = None.
            shard.turn(0);
            shard.owner_register(0, 3);
            // The turn below re-arms the alarm from what it sees: only notifies from now on
            // can lower it further.
            shard.notified.store(NONE, SeqCst);
            let owner = {
                let shard = shard.clone();
                thread::spawn(move || shard.owner_register(1, 5))
            };
            let driver = {
                let shard = shard.clone();
                thread::spawn(move || shard.turn(0))
            };
            let foreign = {
                let shard = shard.clone();
                thread::spawn(move || shard.foreign_cancel(0))
            };
            owner.join().unwrap();
            let driver_next = driver.join().unwrap();
            foreign.join().unwrap();
            let alarm = driver_next.min(shard.notified.load(SeqCst));
            let mut wheel = shard.wheel.lock().unwrap();
            shard.drain(&mut wheel);
            assert_eq!(wheel.entries[0], None, "the foreign cancel was lost");
            assert_eq!(wheel.entries[1], Some(5));
            assert!(
                alarm <= 5,
                "missed expiry: nobody turns by tick 5 (alarm {alarm})"
            );
            assert_eq!(wheel.wakes, [0; KEYS]);
        });
    }

    /// Owner registers key 0 at tick 1 and cancels it, then reuses key 0 at tick 9, while
    /// the driver turns at 1: the old entry is woken at most once, the new one never (it is
    /// not due), and the fired mark of the old entry never shows on the new one.
    #[test]
    fn owner_cancel_and_reuse_vs_fire() {
        loom::model(|| {
            let shard = Arc::new(Shard::new());
            shard.turn(0);
            shard.owner_register(0, 1);
            let driver = {
                let shard = shard.clone();
                thread::spawn(move || shard.turn(1))
            };
            shard.owner_cancel(0);
            shard.owner_register(0, 9);
            driver.join().unwrap();
            let mut wheel = shard.wheel.lock().unwrap();
            shard.drain(&mut wheel);
            assert_eq!(wheel.entries[0], Some(9));
            assert!(!wheel.fired[0], "the reused key shows the old entry's fire");
            assert!(wheel.wakes[0] <= 1);
        });
    }

    /// As above, but the owner polls the reused key at once (its tick, 9, is far): with
    /// immediate reuse it can read the old entry's fired mark, before the drain that
    /// applies the new insert clears it: early. This model must fail.
    #[test]
    #[should_panic(expected = "early")]
    fn reuse_before_ack_polls_the_old_fire() {
        loom::model(|| {
            let shard = Arc::new(Shard::new());
            shard.turn(0);
            shard.owner_register(3, 2);
            shard.owner_register(0, 1);
            let driver = {
                let shard = shard.clone();
                thread::spawn(move || shard.turn(1))
            };
            shard.owner_cancel(0);
            shard.owner_register(0, 9);
            assert!(
                !shard.owner_poll(0),
                "early: the reused key read the old fire"
            );
            driver.join().unwrap();
        });
    }

    /// The rule that fixes it: a key the owner cancelled is reused only once the consumer
    /// has applied that cancel; until then the owner takes another key.
    #[test]
    fn reuse_after_ack_never_polls_early() {
        loom::model(|| {
            let shard = Arc::new(Shard::new());
            shard.turn(0);
            shard.owner_register(3, 2);
            shard.owner_register(0, 1);
            let driver = {
                let shard = shard.clone();
                thread::spawn(move || shard.turn(1))
            };
            let cancel_at = shard.next_index();
            shard.owner_cancel(0);
            let key = if shard.applied(cancel_at) { 0 } else { 1 };
            shard.owner_register(key, 9);
            assert!(!shard.owner_poll(key), "early: the new entry read a fire");
            driver.join().unwrap();
            let mut wheel = shard.wheel.lock().unwrap();
            shard.drain(&mut wheel);
            assert_eq!(wheel.entries[key], Some(9));
            assert!(wheel.wakes[0] <= 1 && wheel.wakes[1] == 0);
        });
    }

    /// The owner (thread 1) registers two timers on the fast path and exits (orphan)
    /// while thread 2 claims the shard, or fails to and registers under the lock, and the
    /// driver turns at 2 (firing key 3, which raises `armed`). Both owners write the log's
    /// slots: loom checks that the claim orders them (no data race on a slot); nothing is
    /// lost, nothing but key 3 woken, and someone turns by tick 5. Bounded at three
    /// preemptions: unbounded it runs for more than 14 minutes on this host.
    #[test]
    fn orphan_vs_turn_vs_a_new_owner() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let shard = Arc::new(Shard::new());
            shard.turn(0);
            shard.register_as(9, 3, 2); // armed = 2: the owners' registers take the fast path
            shard.notified.store(NONE, SeqCst);
            assert!(shard.claim(1), "nobody owned it");
            let first = {
                let shard = shard.clone();
                thread::spawn(move || {
                    shard.register_as(1, 0, 5);
                    shard.register_as(1, 1, 6);
                    shard.orphan(1);
                })
            };
            let second = {
                let shard = shard.clone();
                thread::spawn(move || {
                    shard.claim(2);
                    shard.register_as(2, 2, 7);
                })
            };
            let driver = {
                let shard = shard.clone();
                thread::spawn(move || shard.turn(2))
            };
            first.join().unwrap();
            second.join().unwrap();
            let driver_next = driver.join().unwrap();
            let alarm = driver_next.min(shard.notified.load(SeqCst));
            let mut wheel = shard.wheel.lock().unwrap();
            shard.drain(&mut wheel);
            assert_eq!(wheel.entries, [Some(5), Some(6), Some(7), Some(2)]);
            assert_eq!(wheel.wakes, [0, 0, 0, 1]);
            assert!(
                alarm <= 5,
                "missed expiry: nobody turns by tick 5 (alarm {alarm})"
            );
        });
    }

    /// The runtime goes while the owner registers on the fast path (its insert maybe still
    /// in the log): the sweep wakes the timer or the owner starts the fallback driver;
    /// never neither (the timer would sleep on a driver that is gone).
    #[test]
    fn runtime_gone_vs_owner_register_wakes_or_starts_the_fallback() {
        loom::model(|| {
            let shard = Arc::new(Shard::new());
            shard.owner_register(3, 2); // armed = 2: the register below takes the fast path
            let sweep = {
                let shard = shard.clone();
                thread::spawn(move || shard.runtime_gone())
            };
            shard.owner_register(1, 9);
            sweep.join().unwrap();
            let wheel = shard.wheel.lock().unwrap();
            assert!(
                wheel.wakes[1] == 1 || shard.fallback_started.load(SeqCst),
                "the timer sleeps on a driver that is gone"
            );
        });
    }

    /// The log fills (CAP ops) while the driver drains: the owner's slow path and the
    /// driver's drain are both consumers under the lock; nothing is lost or applied twice.
    #[test]
    fn full_log_slow_path_vs_turn() {
        loom::model(|| {
            let shard = Arc::new(Shard::new());
            shard.turn(0);
            shard.owner_register(0, 7);
            shard.owner_cancel(0);
            shard.owner_register(1, 7);
            shard.notified.store(NONE, SeqCst);
            let driver = {
                let shard = shard.clone();
                thread::spawn(move || shard.turn(0))
            };
            shard.owner_cancel(1);
            shard.owner_register(2, 8); // may find the log full
            let next = driver.join().unwrap();
            let alarm = next.min(shard.notified.load(SeqCst));
            let mut wheel = shard.wheel.lock().unwrap();
            shard.drain(&mut wheel);
            assert_eq!(wheel.entries, [None, None, Some(8), None]);
            assert!(alarm <= 8, "missed expiry (alarm {alarm})");
        });
    }
}
