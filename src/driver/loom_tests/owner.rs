//! The shard owner's log under loom (see [`owner`](crate::driver::owner)): its inserts,
//! applied by whoever locks next, against a turn, a foreign cancel, the runtime's end, the
//! owner's exit and a new owner. The model's main thread claims a shard at its first
//! register there; its later registers go through the log (2 slots under loom, a reserve
//! of 4 keys).
//!
//! Each model fails with one of these removed (checked by hand; see the issue 41 notes in
//! `benches/results/issue41-owner-shard.md`): the owner's or the turn's `fence(SeqCst)`,
//! the drain's ground rule 4, the wake of the fallback thread by a tokio turn that finds
//! the runtime gone (`service.rs`, `fire`: the two overlap models), the orphaning's
//! [`Drain::AskOnly`](crate::driver::owner::Drain::AskOnly) (the orphaning model).

use super::*;

/// A model explored with at most `bound` preemptions: a turn, the token and a log in
/// three threads are too many interleavings to explore whole within CI's time.
fn bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

/// A tokio-mode core with one shard that the calling thread owns, holding a timer at 3
/// (the first register, locked, claims the shard) and one at 100 (through the log), and a
/// first turn at 0 that arms the alarm at 3 and publishes that `armed`.
fn owned_core() -> (Arc<Core>, Arc<Shard>, LoomArc<AtomicU64>, [Registration; 2]) {
    let (core, shard, armed) = core(Mode::Tokio);
    let early = registered(&shard, 3, Waker::noop());
    let late = registered(&shard, 100, Waker::noop());
    core.alarm_went_off();
    assert_eq!(armed.load(Ordering::SeqCst), 3);
    (core, shard, armed, [early, late])
}

/// The owner registers a timer due at 10 through the log while the alarm's turn at 5
/// fires the timer at 3 (raising `armed` past 10) and a foreign thread drops a timer
/// whose insert is still in the log (its lock drains the log, the new insert too, maybe):
/// the turn sees the timer at 10 or the alarm moves to it.
#[test]
fn loom_owner_register_vs_turn_vs_foreign_cancel_of_an_entry_in_the_log() {
    bounded(2, || {
        let (core, shard, armed, _held) = owned_core();
        let moved = registered(&shard, 50, Waker::noop()); // in the log
        at(&core, 5);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.alarm_went_off())
        };
        let foreign = loom::thread::spawn(move || drop(moved));
        let inserted = registered(&shard, 10, Waker::noop());
        turner.join().unwrap();
        foreign.join().unwrap();
        let alarm = armed.load(Ordering::SeqCst);
        assert!(alarm <= 10, "a timer due at 10, the alarm at {alarm}");
        drop(inserted);
        assert_eq!(
            core.snapshot().registered,
            2,
            "the foreign cancel left its entry"
        );
    });
}

/// The owner fills the log (two inserts), registers a third under the lock (the log is
/// full: the lock drains it) and a fourth through the log, while the alarm's turn at 5
/// raises `armed` past them: every one is seen by the turn or moves the alarm.
#[test]
fn loom_a_full_log_takes_the_lock_and_no_insert_is_missed_by_the_turn() {
    bounded(2, || {
        let (core, shard, armed, _held) = owned_core();
        at(&core, 5);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.alarm_went_off())
        };
        let timers: Vec<Registration> = [20, 30, 40, 10]
            .into_iter()
            .map(|tick| registered(&shard, tick, Waker::noop()))
            .collect();
        turner.join().unwrap();
        let alarm = armed.load(Ordering::SeqCst);
        assert!(alarm <= 10, "a timer due at 10, the alarm at {alarm}");
        drop(timers);
        assert_eq!(core.snapshot().registered, 2);
    });
}

/// The runtime goes while the owner registers through the log: the timer is woken by the
/// sweep (whose lock drained it) or finds the fallback driver started.
#[test]
fn loom_the_runtime_going_as_the_owner_registers_through_the_log_leaves_none_asleep() {
    bounded(3, || {
        let (core, shard, _armed, _held) = owned_core();
        let (count, waker) = counter();
        let gone = {
            let core = core.clone();
            loom::thread::spawn(move || core.runtime_gone(None))
        };
        let timer = registered(&shard, 10, &waker);
        gone.join().unwrap();
        let woken = count.0.load(Ordering::SeqCst) == 1;
        let fallback = core.fallback_started.load(Ordering::SeqCst);
        assert!(
            woken || fallback,
            "registered through the log as the runtime went: neither woken nor driven"
        );
        drop(timer);
        assert_eq!(core.snapshot().registered, 2);
    });
}

/// An owner registers two timers (the first claims the shard, the second goes through the
/// log) and its thread exits (orphaning the shard) while a second thread registers there
/// (claiming it, or under the lock) and the alarm's turn at 3 fires a callback that had
/// the alarm at 3: the turn sees the timer due at 5, or someone moves the alarm to it.
/// Also: the log passes from the first owner to the next with no slot touched by both.
#[test]
fn loom_an_orphaned_shard_vs_a_turn_vs_a_new_owner_misses_no_expiry() {
    bounded(2, || {
        let (core, shard, armed) = core(Mode::Tokio);
        let callback = crate::callback::schedule_on(&shard, 3, || {});
        core.alarm_went_off();
        assert_eq!(armed.load(Ordering::SeqCst), 3);
        at(&core, 3);
        let owner = {
            let shard = shard.clone();
            loom::thread::spawn(move || {
                let first = registered(&shard, 10, Waker::noop());
                let second = registered(&shard, 5, Waker::noop());
                (first, second) // its thread-locals are dropped after: the orphaning
            })
        };
        let next = {
            let shard = shard.clone();
            loom::thread::spawn(move || registered(&shard, 100, Waker::noop()))
        };
        core.alarm_went_off();
        let timers = owner.join().unwrap();
        let other = next.join().unwrap();
        assert!(callback.has_fired());
        let alarm = armed.load(Ordering::SeqCst);
        assert!(alarm <= 5, "a timer due at 5, the alarm at {alarm}");
        drop((timers, other));
        assert_eq!(core.snapshot().registered, 0);
    });
}

/// The owner registers a timer due at 5, through the log, while the alarm's turn moves the
/// wheel to 6 and a foreign thread drops another timer: when the foreign lock is the one
/// that applies the insert, already due, the guard tells the driver after the unlock. The
/// timer is woken, or completed at once, or has the alarm moved to it.
#[test]
fn loom_an_insert_drained_as_due_by_a_foreign_lock_wakes_the_driver() {
    bounded(2, || {
        let (core, shard, armed, _held) = owned_core();
        let moved = registered(&shard, 50, Waker::noop());
        at(&core, 6);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.alarm_went_off())
        };
        let foreign = loom::thread::spawn(move || drop(moved));
        let (stamp, waker) = Stamp::new(&core);
        let mut timer = Registration::new(shard.clone(), IDLE);
        let registered = timer.register(5, Some(&waker));
        turner.join().unwrap();
        foreign.join().unwrap();
        let alarm = armed.load(Ordering::SeqCst);
        assert!(
            registered.is_ready() || stamp.wakes() == 1 || alarm <= 5,
            "due at 5 with the wheel at 6: not completed, not woken, the alarm at {alarm}"
        );
        assert!(stamp.wakes() <= 1, "woken twice");
        drop(timer);
    });
}

/// A manual clock's `advance` to 5 races the owner's register of a timer due at 5 through
/// the log, and a foreign thread's lock (a drop) that may be the one to apply that insert,
/// already due, after the turn moved the wheel and let go of the shard (its notice to the
/// driver does nothing: only the token's holder turns a manual clock). Once both are done
/// the timer was completed at once or woken, once, by the `advance`.
#[test]
fn loom_a_manual_advance_wakes_an_insert_a_foreign_lock_drained_as_due() {
    bounded(2, || {
        let (core, shard, _) = core(Mode::Manual);
        let _held = registered(&shard, 100, Waker::noop()); // locked: claims the shard
        let moved = registered(&shard, 50, Waker::noop()); // in the log
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || assert!(core.advance_by(Duration::from_nanos(5))))
        };
        let foreign = loom::thread::spawn(move || drop(moved));
        let (stamp, waker) = Stamp::new(&core);
        let mut timer = Registration::new(shard.clone(), IDLE);
        let registered = timer.register(5, Some(&waker));
        turner.join().unwrap();
        foreign.join().unwrap();
        assert!(
            registered.is_ready() || stamp.wakes() == 1,
            "due at 5 after an advance to 5: not completed, not woken"
        );
        assert!(stamp.wakes() <= 1, "woken twice");
        assert!(stamp.woken_at() >= 5 || stamp.wakes() == 0, "woken early");
        drop(timer);
    });
}

/// Ground rule 5's overlap: the runtime goes while its alarm's turn at 5 runs, the fallback
/// driver starts and turns, and the owner registers a timer due at 10 through the log. The
/// old turn may be the one to drain that insert (a turn's drain notifies nobody) after the
/// fallback looked at the shard, and the owner's lock, when the hints send it there, then
/// finds the log empty. The fallback thread parks until its last turn's `next`, or turns
/// again when unparked since that turn began: it must turn by 10.
#[test]
fn loom_the_runtime_going_during_its_turn_leaves_the_fallback_no_insert_to_miss() {
    bounded(3, || {
        let (core, shard, _armed, _held) = owned_core();
        going_during_a_turn_as_the_owner_registers_at_10(&core, &shard);
    });
}

/// The overlap of the models around it, from the clock at 5: the old turn (the alarm's)
/// ∥ `runtime_gone`, the fallback driver and its first turn ∥ the owner registering a timer
/// due at 10 on `shard` through its log; then the fallback thread turns again while it was
/// unparked since its last turn began, and must not park past 10.
fn going_during_a_turn_as_the_owner_registers_at_10(core: &Arc<Core>, shard: &Arc<Shard>) {
    at(core, 5);
    let old_turn = {
        let core = core.clone();
        loom::thread::spawn(move || core.alarm_went_off())
    };
    let fallback = {
        let core = core.clone();
        loom::thread::spawn(move || {
            core.runtime_gone(None);
            core.ensure_driver();
            // The thread is known from here on (`set_thread`, before its first turn).
            core.thread_unparked.store(false, Ordering::SeqCst);
            core.turn(core.clock.now_tick(), &mut Scratch::default())
        })
    };
    let timer = registered(shard, 10, Waker::noop());
    old_turn.join().unwrap();
    let mut next = fallback.join().unwrap();
    while core.thread_unparked.swap(false, Ordering::SeqCst) {
        next = core.turn(core.clock.now_tick(), &mut Scratch::default());
    }
    assert!(
        next.is_some_and(|tick| tick <= 10),
        "a timer due at 10, the fallback thread parked until {next:?}"
    );
    drop(timer);
}

/// The overlap above on two shards: the old turn and the fallback's turn cross between
/// them (each may be on either shard while the other is on the other), and the owner's
/// insert at 10 goes through the log of the second.
#[test]
fn loom_the_runtime_going_during_a_turn_of_two_shards_leaves_the_fallback_no_insert_to_miss() {
    bounded(3, || {
        let (core, shards, armed) = core_with(Mode::Tokio, 2);
        let early = registered(&shards[0], 3, Waker::noop()); // locked: claims shard 0
        let late = registered(&shards[1], 100, Waker::noop()); // locked: claims shard 1
        core.alarm_went_off();
        assert_eq!(armed.load(Ordering::SeqCst), 3);
        going_during_a_turn_as_the_owner_registers_at_10(&core, &shards[1]);
        drop((early, late));
    });
}

/// A waker that records the loom thread each of its wakes ran on.
struct OnThread {
    wakes: std::sync::Mutex<Vec<crate::sync::ThreadId>>,
}

impl Wake for OnThread {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.wakes.lock().unwrap().push(crate::sync::thread_id());
    }
}

/// An owner's thread exits (orphaning the shard, `Drain::AskOnly`) with an insert due at
/// 2 in its log, left there by a stale `armed` hint, while the alarm's turn at 5 runs:
/// the timer is completed, or woken, never on the owner's thread (in its destructor), or
/// the alarm is left at or before 5, and the firing that asks for then wakes it, once.
/// The orphaning is called at the end of the owner's thread (see
/// [`orphan_now`](crate::driver::owner::orphan_now)).
#[test]
fn loom_an_orphaning_that_drains_a_due_insert_only_asks_for_a_turn_and_loses_nothing() {
    bounded(6, || {
        let (core, shard, armed) = core(Mode::Tokio);
        let on = std::sync::Arc::new(OnThread {
            wakes: std::sync::Mutex::new(Vec::new()),
        });
        let waker = Waker::from(on.clone());
        let owner = {
            let shard = shard.clone();
            loom::thread::spawn(move || {
                let held = registered(&shard, 100, Waker::noop()); // locked: claims
                shard.stale_armed_hint();
                let mut timer = Registration::new(shard.clone(), IDLE);
                let done = timer.register(2, Some(&waker)).is_ready();
                crate::driver::owner::orphan_now(); // as the thread's exit would
                (crate::sync::thread_id(), held, timer, done)
            })
        };
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || {
                at(&core, 5);
                core.alarm_went_off()
            })
        };
        let (owner_id, held, timer, done) = owner.join().unwrap();
        turner.join().unwrap();
        let wakes = on.wakes.lock().unwrap().clone();
        assert!(
            !wakes.contains(&owner_id),
            "woken on the exiting owner's thread (its destructor)"
        );
        let alarm = armed.load(Ordering::SeqCst);
        assert!(
            done || !wakes.is_empty() || alarm <= 5,
            "due at 2: not completed, not woken, the alarm at {alarm}"
        );
        if !done && wakes.is_empty() {
            core.alarm_went_off();
            assert_eq!(
                on.wakes.lock().unwrap().len(),
                1,
                "the firing asked for did not wake it"
            );
        }
        assert!(on.wakes.lock().unwrap().len() <= 1, "woken twice");
        drop((held, timer));
    });
}

/// A waker whose last drop locks its timer's shard, as dropping the last handle of a task
/// whose future holds a timer there does; it counts its wakes and notes that it was
/// dropped.
struct LocksOnDrop {
    shard: Arc<Shard>,
    wakes: LoomArc<AtomicUsize>,
    dropped: LoomArc<AtomicBool>,
}

impl LocksOnDrop {
    /// Such a waker on `shard`, with its wake count and its dropped flag.
    fn waker(shard: &Arc<Shard>) -> (Waker, LoomArc<AtomicUsize>, LoomArc<AtomicBool>) {
        let (wakes, dropped) = (
            LoomArc::new(AtomicUsize::new(0)),
            LoomArc::new(AtomicBool::new(false)),
        );
        let waker = Waker::from(std::sync::Arc::new(LocksOnDrop {
            shard: shard.clone(),
            wakes: wakes.clone(),
            dropped: dropped.clone(),
        }));
        (waker, wakes, dropped)
    }
}

impl Wake for LocksOnDrop {
    fn wake(self: std::sync::Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for LocksOnDrop {
    fn drop(&mut self) {
        drop(self.shard.lock());
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// The owner drops a timer due at 5 (its cancel goes through the log, no lock) while the
/// alarm's turn at 6 fires it: the timer's waker, whose drop locks the shard, is woken at
/// most once (a fire before the cancel is applied wakes it, spuriously) and dropped with
/// no lock held, by the turn or by the lock that applies the cancel; no entry is left.
#[test]
fn loom_an_owners_cancel_vs_the_fire_drops_the_waker_unlocked_and_leaves_no_entry() {
    bounded(2, || {
        let (core, shard, _armed, _held) = owned_core();
        let (waker, wakes, dropped) = LocksOnDrop::waker(&shard);
        let timer = registered(&shard, 5, &waker); // through the log
        drop(waker); // the entry's is the last
        at(&core, 6);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.alarm_went_off())
        };
        drop(timer); // through the log
        turner.join().unwrap();
        assert_eq!(core.snapshot().registered, 2, "the cancelled entry is left");
        assert!(
            dropped.load(Ordering::SeqCst),
            "the cancelled timer's waker is held"
        );
        assert!(wakes.load(Ordering::SeqCst) <= 1, "woken twice");
    });
}

/// The owner cancels one of its timers through the log while a foreign thread registers
/// under the lock (which may apply that cancel): the cancelled key waits as a placeholder
/// for the owner's next refill, and is not handed to the foreign timer meanwhile; the
/// owner's later timers, some with that key, and the foreign one never share a key, and
/// the foreign one fires at its deadline.
#[test]
fn loom_an_owners_cancelled_key_is_reused_only_by_the_owner_after_the_cancel() {
    bounded(2, || {
        let (core, shard, _armed, _held) = owned_core();
        let cancelled = registered(&shard, 5, Waker::noop()); // through the log
        let foreign = {
            let shard = shard.clone();
            loom::thread::spawn(move || registered(&shard, 7, Waker::noop()))
        };
        drop(cancelled); // through the log
        let foreign = foreign.join().unwrap();
        // Enough registers to empty the reserve and refill it from the returned keys.
        let mine: Vec<Registration> = (0..6)
            .map(|_| registered(&shard, 50, Waker::noop()))
            .collect();
        let mut keys: Vec<usize> = mine.iter().filter_map(Registration::key).collect();
        keys.extend(foreign.key());
        let count = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), count, "two timers share a key");
        at(&core, 7);
        core.alarm_went_off();
        assert!(foreign.is_elapsed(), "the foreign timer did not fire at 7");
        assert!(mine.iter().all(|timer| !timer.is_elapsed()), "fired early");
        drop((mine, foreign));
        assert_eq!(core.snapshot().registered, 2);
    });
}

/// An owner registers two timers and cancels the second through its log, then its thread
/// exits (the orphaning applies the log) while a second thread registers there and the
/// alarm's turn runs: the keys of the old owner's cancels do not outlive it as
/// placeholders of nobody's, and nothing is left once every timer is dropped.
#[test]
fn loom_an_orphaned_shard_with_cancels_in_its_log_leaves_no_placeholder_behind() {
    bounded(2, || {
        let (core, shard, _armed) = core(Mode::Tokio);
        let owner = {
            let shard = shard.clone();
            loom::thread::spawn(move || {
                let first = registered(&shard, 10, Waker::noop()); // claims
                drop(registered(&shard, 5, Waker::noop())); // through the log, both ops
                first // its thread-locals are dropped after: the orphaning
            })
        };
        let next = {
            let shard = shard.clone();
            loom::thread::spawn(move || registered(&shard, 100, Waker::noop()))
        };
        at(&core, 3);
        core.alarm_went_off();
        let first = owner.join().unwrap();
        let other = next.join().unwrap();
        drop((first, other));
        assert_eq!(core.snapshot().registered, 0);
        let state = shard.lock();
        assert!(
            state.returned.iter().all(|&key| state.owned.get(key)),
            "an orphaned owner's cancelled key is left, nobody's"
        );
    });
}

/// The runtime goes while the owner drops a timer due at 10 through its log: the sweep
/// applies the cancel (no wake) or wakes the timer first (once, spuriously), and the
/// waker, whose last drop locks the shard, is dropped with no lock held; no entry is left.
#[test]
fn loom_the_runtime_going_as_the_owner_cancels_through_the_log_leaves_no_entry() {
    bounded(3, || {
        let (core, shard, _armed, _held) = owned_core();
        let (waker, wakes, dropped) = LocksOnDrop::waker(&shard);
        let timer = registered(&shard, 10, &waker); // through the log
        drop(waker);
        let gone = {
            let core = core.clone();
            loom::thread::spawn(move || core.runtime_gone(None))
        };
        drop(timer); // through the log
        gone.join().unwrap();
        assert!(wakes.load(Ordering::SeqCst) <= 1, "woken twice");
        assert_eq!(core.snapshot().registered, 2, "the cancelled entry is left");
        assert!(
            dropped.load(Ordering::SeqCst),
            "the cancelled timer's waker is held"
        );
    });
}
