//! The owner's log on real threads: what Miri checks (`scripts/miri.sh`), and the
//! orphaning and the owner's slow path asking the driver for what they must, no more.

use super::super::clock::{Clock, Source};
use super::super::registration::{Registration, IDLE};
use super::super::{Alarm, Armed, Core, Mode, Rearmed};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Duration;

/// A tokio alarm as the alternative timer's is in context (every re-arm arms again,
/// turning first), counting the relays asked of it.
struct InContext {
    armed: u64,
    relays: Arc<AtomicUsize>,
}

impl Alarm for InContext {
    fn in_context(&self) -> bool {
        true
    }
    fn relay(&self) {
        self.relays.fetch_add(1, Ordering::SeqCst);
    }
    fn armed(&self) -> u64 {
        self.armed
    }
    fn rearm(&mut self, _: &Clock, _: u64) -> Rearmed {
        Rearmed::Arm
    }
    fn arm(&mut self, _: &Clock, tick: Option<u64>) -> Armed {
        self.armed = tick.unwrap_or(u64::MAX);
        Armed::Waiting
    }
    fn shutting_down(&mut self) -> bool {
        false
    }
}

/// A tokio-mode core with one shard on a manual clock of 1 ns ticks, its alarm
/// [`InContext`]; and the count of its relays.
fn tokio_core() -> (Arc<Core>, Arc<super::Shard>, Arc<AtomicUsize>) {
    let clock = Clock::new(Duration::from_nanos(1), Source::Manual);
    let (core, shards) = Core::new(clock, Mode::Tokio, 64, 1);
    let relays = Arc::new(AtomicUsize::new(0));
    core.set_alarm(Box::new(InContext {
        armed: u64::MAX,
        relays: relays.clone(),
    }));
    (core, shards[0].clone(), relays)
}

fn at(core: &Core, tick: u64) {
    core.clock
        .advance_to(core.clock.instant_at(0) + Duration::from_nanos(tick));
}

thread_local! {
    /// Set on the owner's thread of [`an_owner_exiting_asks_for_a_turn_and_runs_none`].
    /// `const` and without drop: readable in the thread's destructors too.
    static ON_THE_OWNER: Cell<bool> = const { Cell::new(false) };
}

/// A waker that counts its wakes, and those on the exiting owner's thread.
#[derive(Default)]
struct Wakes {
    all: AtomicUsize,
    on_the_owner: AtomicUsize,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if ON_THE_OWNER.with(Cell::get) {
            self.on_the_owner.fetch_add(1, Ordering::SeqCst);
        }
        self.all.fetch_add(1, Ordering::SeqCst);
    }
}

/// An owner's thread exits with an insert in its log that must tell the driver (its
/// bucket expires before `armed`: forced here by a stale hint, as a read of `armed`
/// before a turn raised it would leave it), and the tokio alarm's thread is in context
/// (so a re-arm turns). The orphaning, in a thread-local destructor, only asks for the
/// turn (a relay to the runtime's helper): no timer is woken there, and the turn the
/// helper then runs wakes the one due.
#[test]
fn an_owner_exiting_asks_for_a_turn_and_runs_none() {
    let (core, shard, relays) = tokio_core();
    let wakes = Arc::new(Wakes::default());
    let owner = {
        let (core, shard, waker) = (core.clone(), shard.clone(), Waker::from(wakes.clone()));
        std::thread::spawn(move || {
            ON_THE_OWNER.with(|on| on.set(true));
            // Locked: claims the shard; its notice turns at 0 and arms the alarm at 3.
            let mut due = Registration::new(shard.clone(), IDLE);
            assert!(due.register(3, Some(&waker)).is_pending());
            assert_eq!(shard.lock().armed, Some(3));
            at(&core, 5); // the clock moves; nothing turns yet
            shard.owner.armed_hint.store(0, Ordering::Relaxed);
            let mut logged = Registration::new(shard.clone(), IDLE);
            assert!(logged.register(2, None).is_pending());
            assert_eq!(in_the_log(&shard), 1, "the insert waits in the log");
            (due, logged) // then the thread-locals' destructors: the orphaning
        })
    };
    let (due, logged) = owner.join().expect("the owner's thread does not panic");
    assert_eq!(
        wakes.on_the_owner.load(Ordering::SeqCst),
        0,
        "a turn ran in the exiting thread's destructor"
    );
    assert_eq!(relays.load(Ordering::SeqCst), 1, "no turn was asked for");
    assert_eq!(wakes.all.load(Ordering::SeqCst), 0);
    core.alarm_went_off(); // what the relay asks the runtime's helper task to do
    assert_eq!(wakes.all.load(Ordering::SeqCst), 1);
    assert!(due.is_elapsed() && logged.is_elapsed());
}

/// Inserts waiting in the shard's log, without applying it.
fn in_the_log(shard: &super::Shard) -> u64 {
    shard.owner.tail.load(Ordering::Acquire) - shard.owner.head.load(Ordering::Acquire)
}

/// The owner's register finds, after its fence, that it must lock (its hints stale:
/// a turn moved the wheel past its deadline meanwhile), and its lock's drain finds its
/// insert due: it completes at once, and asks the driver for no turn.
#[test]
fn an_owners_insert_found_due_by_its_own_lock_asks_for_no_turn() {
    let (core, shard, _relays) = tokio_core();
    let mut held = Registration::new(shard.clone(), IDLE);
    assert!(held.register(100, None).is_pending()); // claims; arms at 100
    at(&core, 5);
    core.alarm_went_off(); // the wheel at 5
    shard.owner.elapsed_hint.store(0, Ordering::Relaxed);
    let wakeups = core.snapshot().wakeups;
    let mut timer = Registration::new(shard.clone(), IDLE);
    assert!(
        timer.register(4, None).is_ready(),
        "due at 4 with the wheel at 5"
    );
    assert_eq!(
        core.snapshot().wakeups,
        wakeups,
        "a turn for an insert completed at once"
    );
    assert_eq!(core.requested.load(Ordering::SeqCst), u64::MAX);
    drop(held);
    assert_eq!(core.snapshot().registered, 0);
}

/// An owner registers through its log (filling it, emptying its reserve, cancelling
/// some of its own timers) while a foreign thread polls and drops the others, its locks
/// applying the log, and the clock moves: the log's slots and the reserve pass between
/// the threads as the module says (what Miri checks, in `scripts/miri.sh`), and nothing
/// is left behind.
#[test]
fn an_owner_and_a_foreign_thread_share_the_log() {
    let clock = Clock::new(Duration::from_nanos(1), Source::Manual);
    let (core, shards) = Core::new(clock, Mode::Manual, 64, 1);
    let shard = shards[0].clone();
    let (send, receive) = std::sync::mpsc::channel::<Registration>();
    let foreign = std::thread::spawn(move || {
        for mut timer in receive {
            let _ = timer.poll(Waker::noop());
        }
    });
    for round in 0..60_u64 {
        let mut timer = Registration::new(shard.clone(), IDLE);
        let _ = timer.register(core.clock.now_tick() + 1 + round % 7, None);
        if round % 3 == 0 {
            drop(timer); // the owner's cancel: its key back to the reserve
        } else {
            send.send(timer)
                .expect("the foreign thread runs until the channel closes");
        }
        if round % 20 == 19 {
            core.advance_by(Duration::from_nanos(3));
        }
    }
    drop(send);
    foreign.join().expect("the foreign thread does not panic");
    let mut last = Registration::new(shard.clone(), IDLE);
    assert!(last.register(core.clock.now_tick() + 2, None).is_pending());
    core.advance_by(Duration::from_nanos(2));
    assert!(
        last.is_elapsed(),
        "a timer registered through the log did not fire"
    );
    drop(last);
    assert_eq!(core.snapshot().registered, 0, "an entry outlived its owner");
}

/// A manual-clock core with one shard that the calling thread owns (its first register,
/// locked, claimed it); that timer, due at 1000.
fn owned_manual_core() -> (Arc<Core>, Arc<super::Shard>, Registration) {
    let clock = Clock::new(Duration::from_nanos(1), Source::Manual);
    let (core, shards) = Core::new(clock, Mode::Manual, 64, 1);
    let shard = shards[0].clone();
    let mut claims = Registration::new(shard.clone(), IDLE);
    assert!(claims.register(1000, None).is_pending());
    (core, shard, claims)
}

/// The owner's register and cancel (W1's) take no lock: they finish while another
/// thread holds the shard's, and the holder's next lock applies them.
#[test]
fn an_owners_register_and_cancel_take_no_lock() {
    let (core, shard, claims) = owned_manual_core();
    let (locked, holding) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = {
        let shard = shard.clone();
        std::thread::spawn(move || {
            let guard = shard.lock();
            locked.send(()).expect("the test waits for the lock");
            let _ = released.recv();
            drop(guard);
        })
    };
    holding
        .recv_timeout(Duration::from_secs(10))
        .expect("the holder takes the lock within 10 s");
    let (done, finished) = std::sync::mpsc::channel();
    let owner = std::thread::scope(|scope| {
        // The calling thread is the owner: it runs the ops; a watchdog would need the
        // owner's thread, so the bound is on the report of the ops' end instead.
        scope.spawn(move || {
            let _ = finished.recv_timeout(Duration::from_secs(10));
            let _ = release.send(());
        });
        for round in 0..10 {
            let mut timer = Registration::new(shard.clone(), IDLE);
            assert!(timer.register(100 + round, None).is_pending());
            drop(timer);
        }
        let _ = done.send(()); // the watchdog gone: it let the holder go after 10 s
        in_the_log(&shard)
    });
    holder.join().expect("the holder does not panic");
    assert_eq!(owner, 20, "ten inserts and ten cancels wait in the log");
    assert_eq!(core.snapshot().registered, 1, "a cancelled timer is left");
    assert_eq!(in_the_log(&shard), 0);
    drop(claims);
    assert_eq!(core.snapshot().registered, 0);
}

/// Timers registered by the owner, some dropped by it (through its log), some polled on a
/// foreign thread and sent back to be dropped by the owner, and timers the foreign thread
/// registered, dropped by the owner too (any key's cancel goes through the log): the log's
/// ops and the returned keys pass between the threads as the module says (Miri), every
/// key is used by one timer at a time, and nothing is left behind.
#[test]
fn an_owners_cancels_of_its_own_moved_and_foreign_timers_share_the_log() {
    let (core, shard, claims) = owned_manual_core();
    let (send, receive) = std::sync::mpsc::channel::<Registration>();
    let (back, returned) = std::sync::mpsc::channel::<Registration>();
    let foreign = {
        let shard = shard.clone();
        std::thread::spawn(move || {
            for mut timer in receive {
                let _ = timer.poll(Waker::noop());
                let mut own = Registration::new(shard.clone(), IDLE);
                let _ = own.register(500, None);
                for timer in [timer, own] {
                    back.send(timer).expect("the owner takes them back");
                }
            }
        })
    };
    let mut held = Vec::new();
    for round in 0..60_u64 {
        let mut timer = Registration::new(shard.clone(), IDLE);
        let _ = timer.register(core.clock.now_tick() + 1 + round % 5, None);
        match round % 3 {
            0 => drop(timer),
            1 => send.send(timer).expect("the foreign thread runs"),
            _ => held.push(timer),
        }
        while let Ok(timer) = returned.try_recv() {
            drop(timer); // a moved timer of the owner's, or a foreign one
        }
        if round % 20 == 19 {
            core.advance_by(Duration::from_nanos(2));
        }
        let mut keys: Vec<usize> = held.iter().filter_map(Registration::key).collect();
        let count = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), count, "two held timers share a key");
    }
    drop(send);
    foreign.join().expect("the foreign thread does not panic");
    drop(returned.into_iter().collect::<Vec<_>>());
    core.advance_by(Duration::from_nanos(10));
    assert!(
        held.iter().all(Registration::is_elapsed),
        "a held timer did not fire"
    );
    drop((held, claims));
    assert_eq!(core.snapshot().registered, 0, "an entry outlived its timer");
}
