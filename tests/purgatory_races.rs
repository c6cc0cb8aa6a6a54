//! The purgatory's exactly-once promise at its edges: a cancel that lands while the
//! operation's condition runs on another thread, a 60,000-operation race of checks,
//! expiries, forces and cancels with the promise checked per operation, and the counters
//! read while they move.
//!
//! For every operation, exactly one of these holds: a `cancel()` returned `true` (or a
//! `cancel_for_key` counted it), `on_complete` ran once, `on_expiration` ran once.

use tickless_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;
use support::*;
use tickless::purgatory::{DelayedOperation, Outcome, Purgatory, ThresholdPurgatory};

/// A condition that, once armed, stops inside its next run until released: so a test can
/// act while it is known to be running on another thread.
#[derive(Clone)]
struct Gate {
    armed: Arc<AtomicBool>,
    entered: Arc<Mutex<Sender<()>>>,
    release: Arc<Mutex<Receiver<Option<u64>>>>,
}

/// The test's side of a [`Gate`]: wait for the run to enter, then release it with a verdict.
struct GateControl {
    armed: Arc<AtomicBool>,
    entered: Receiver<()>,
    release: Sender<Option<u64>>,
}

fn gate() -> (Gate, GateControl) {
    let (entered_tx, entered_rx) = channel();
    let (release_tx, release_rx) = channel();
    let armed = Arc::new(AtomicBool::new(false));
    (
        Gate {
            armed: armed.clone(),
            entered: Arc::new(Mutex::new(entered_tx)),
            release: Arc::new(Mutex::new(release_rx)),
        },
        GateControl {
            armed,
            entered: entered_rx,
            release: release_tx,
        },
    )
}

impl Gate {
    /// `None` (does not hold) until armed; then the run stops until released, and
    /// returns the verdict it is released with.
    fn run(&self) -> Option<u64> {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return None;
        }
        self.entered.lock().unwrap().send(()).unwrap();
        self.release.lock().unwrap().recv().unwrap()
    }
}

/// What a [`DelayedOperation`]'s hooks were told.
#[derive(Default)]
struct Hooks {
    completed: AtomicU32,
    expired: AtomicU32,
    value: AtomicU64,
}

struct Gated {
    gate: Gate,
    hooks: Arc<Hooks>,
}

impl DelayedOperation for Gated {
    type Output = u64;

    fn try_complete(&mut self) -> Option<u64> {
        self.gate.run()
    }

    fn on_complete(&mut self, value: u64) {
        self.hooks.value.store(value, Ordering::SeqCst);
        self.hooks.completed.fetch_add(1, Ordering::SeqCst);
    }

    fn on_expiration(&mut self) {
        self.hooks.expired.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Copy, Debug)]
enum Cancel {
    /// `OperationHandle::cancel`.
    Handle,
    /// `Purgatory::cancel_for_key`.
    ForKey,
    /// `Watch::cancel`, on a future rather than an operation with hooks.
    Watch,
}

/// One cancel landing while the condition runs inside a check on another thread, which
/// then returns `verdict`: the cancel's answer and the operation's end must agree.
fn cancel_while_the_condition_runs(cancel: Cancel, verdict: Option<u64>) {
    let timer = manual();
    let purgatory: Purgatory<&str, u64> = Purgatory::with_timer(timer.clone());
    let (gate, control) = gate();
    let hooks = Arc::new(Hooks::default());
    let (handle, mut watch) = match cancel {
        Cancel::Watch => {
            let gate = gate.clone();
            let watch = purgatory.watch(["k", "other"], 10 * MS, move || gate.run());
            (None, Some(watch))
        }
        _ => {
            let op = Gated {
                gate,
                hooks: hooks.clone(),
            };
            (
                Some(purgatory.watch_operation(["k", "other"], 10 * MS, op)),
                None,
            )
        }
    };
    control.armed.store(true, Ordering::SeqCst);
    let checker = {
        let purgatory = purgatory.clone();
        thread::spawn(move || purgatory.check(&"k"))
    };
    control
        .entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the check runs the condition");
    let reported = match cancel {
        Cancel::Handle => handle.as_ref().unwrap().cancel(),
        Cancel::ForKey => purgatory.cancel_for_key(&"other") == 1,
        Cancel::Watch => watch.as_ref().unwrap().cancel(),
    };
    control.release.send(verdict).unwrap();
    let completed_by_check = checker.join().unwrap();
    // Past the deadline: an operation still waiting would expire now.
    timer.advance(20 * MS);
    let (completed, expired, cancelled) = match watch.take() {
        Some(mut watch) => match poll_once(&mut watch) {
            std::task::Poll::Ready(Outcome::Completed(v)) => {
                assert_eq!(Some(v), verdict);
                (1, 0, 0)
            }
            std::task::Poll::Ready(Outcome::Expired) => (0, 1, 0),
            std::task::Poll::Ready(Outcome::Cancelled) => (0, 0, 1),
            std::task::Poll::Pending => panic!("{cancel:?}: still pending after its deadline"),
        },
        None => {
            assert!(handle.as_ref().unwrap().is_done(), "{cancel:?}: ended");
            let completed = hooks.completed.load(Ordering::SeqCst);
            let expired = hooks.expired.load(Ordering::SeqCst);
            (completed, expired, u32::from(completed + expired == 0))
        }
    };
    let told = u32::from(reported) + completed + expired;
    assert_eq!(
        told, 1,
        "{cancel:?} with verdict {verdict:?}: cancel reported {reported}, completed \
         ×{completed}, expired ×{expired}: exactly one must be told"
    );
    assert_eq!(
        cancelled,
        u32::from(reported),
        "{cancel:?}: ended cancelled exactly when a cancel said so"
    );
    assert_eq!(completed_by_check, completed as usize);
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    assert_eq!(timer.pending(), 0);
}

#[test]
fn a_cancel_landing_while_the_condition_runs_is_told_how_the_operation_ended() {
    for cancel in [Cancel::Handle, Cancel::ForKey, Cancel::Watch] {
        for verdict in [None, Some(7)] {
            within(Duration::from_secs(30), "cancel while running", move || {
                cancel_while_the_condition_runs(cancel, verdict)
            });
        }
    }
}

/// What happened to one operation of the race, as its hooks and its callers saw it.
#[derive(Default)]
struct Ledger {
    completed: AtomicU32,
    expired: AtomicU32,
    /// `cancel()` calls that returned `true`.
    cancels_won: AtomicU32,
    /// `force_complete` calls that returned `Ok`, and the value the last one forced.
    forces_won: AtomicU32,
    forced: AtomicU64,
    /// The value `on_complete` got.
    value: AtomicU64,
}

struct Raced {
    id: usize,
    ready: Arc<Vec<AtomicBool>>,
    ledger: Arc<Vec<Ledger>>,
}

/// Forced values carry this bit, so that a forced completion can be told from a held
/// condition's.
const FORCED: u64 = 1 << 40;

impl DelayedOperation for Raced {
    type Output = u64;

    fn try_complete(&mut self) -> Option<u64> {
        // Long enough for the other threads to land inside it now and then.
        std::hint::black_box((0..50).sum::<u64>());
        self.ready[self.id % self.ready.len()]
            .load(Ordering::SeqCst)
            .then_some(self.id as u64)
    }

    fn on_complete(&mut self, value: u64) {
        let ledger = &self.ledger[self.id];
        ledger.value.store(value, Ordering::SeqCst);
        ledger.completed.fetch_add(1, Ordering::SeqCst);
    }

    fn on_expiration(&mut self) {
        self.ledger[self.id].expired.fetch_add(1, Ordering::SeqCst);
    }
}

/// 16 keys; each operation watches two of them and its group's key (for
/// `cancel_for_key`, so that every cancel it counts can be attributed).
const KEYS: u64 = 16;
const GROUPS: u64 = 500;

#[test]
fn sixty_thousand_operations_racing_checks_expiries_forces_and_cancels_each_end_once() {
    // Under Miri (CI runs this file there, for the purgatory's `unsafe`), smaller.
    const WAVES: usize = if cfg!(miri) { 2 } else { 6 };
    const PER_WAVE: usize = if cfg!(miri) { 40 } else { 10_000 };
    within(Duration::from_secs(240), "the race", || {
        let timer = manual();
        let purgatory: Purgatory<u64, u64> = Purgatory::with_timer(timer.clone());
        let ledger: Arc<Vec<Ledger>> =
            Arc::new((0..WAVES * PER_WAVE).map(|_| Ledger::default()).collect());
        let ready: Arc<Vec<AtomicBool>> =
            Arc::new((0..64).map(|_| AtomicBool::new(false)).collect());
        // Per group key: how many operations `cancel_for_key` said it cancelled.
        let group_cancels: Arc<Vec<AtomicUsize>> =
            Arc::new((0..GROUPS).map(|_| AtomicUsize::new(0)).collect());
        let mut handles = Vec::with_capacity(WAVES * PER_WAVE);
        for wave in 0..WAVES {
            let first = wave * PER_WAVE;
            let mut rng = Rng(wave as u64 + 1);
            for id in first..first + PER_WAVE {
                let keys = [
                    rng.below(KEYS),
                    rng.below(KEYS),
                    1_000 + (id as u64 % GROUPS),
                ];
                let op = Raced {
                    id,
                    ready: ready.clone(),
                    ledger: ledger.clone(),
                };
                let timeout = Duration::from_millis(1 + rng.below(40));
                handles.push(Arc::new(purgatory.watch_operation(keys, timeout, op)));
            }
            let wave_handles: Arc<Vec<_>> = Arc::new(handles[first..].to_vec());
            let start = Arc::new(Barrier::new(6));
            let stop = Arc::new(AtomicBool::new(false));
            let mut threads = Vec::new();
            // Four checkers, flipping conditions as they go.
            for t in 0..4 {
                let (purgatory, ready, start, stop) = (
                    purgatory.clone(),
                    ready.clone(),
                    start.clone(),
                    stop.clone(),
                );
                threads.push(thread::spawn(move || {
                    let mut rng = Rng(100 * wave as u64 + t);
                    start.wait();
                    while !stop.load(Ordering::SeqCst) {
                        let flip = rng.below(ready.len() as u64) as usize;
                        ready[flip].fetch_xor(true, Ordering::SeqCst);
                        purgatory.check(&rng.below(KEYS));
                    }
                }));
            }
            // Expiries: the manual clock moves, 1 ms at a time, on this thread.
            {
                let (timer, start, stop) = (timer.clone(), start.clone(), stop.clone());
                threads.push(thread::spawn(move || {
                    start.wait();
                    while !stop.load(Ordering::SeqCst) {
                        timer.advance(MS);
                        thread::yield_now();
                    }
                }));
            }
            // Forces and cancels, by handle and by key.
            {
                let (purgatory, ledger, group_cancels, start, stop) = (
                    purgatory.clone(),
                    ledger.clone(),
                    group_cancels.clone(),
                    start.clone(),
                    stop.clone(),
                );
                let wave_handles = wave_handles.clone();
                threads.push(thread::spawn(move || {
                    let mut rng = Rng(7_000 + wave as u64);
                    start.wait();
                    while !stop.load(Ordering::SeqCst) {
                        let i = rng.below(PER_WAVE as u64) as usize;
                        let id = first + i;
                        let handle = &wave_handles[i];
                        match rng.below(10) {
                            0..=3 => {
                                let value = FORCED | id as u64;
                                if handle.force_complete(value).is_ok() {
                                    ledger[id].forced.store(value, Ordering::SeqCst);
                                    ledger[id].forces_won.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            4..=8 => {
                                if handle.cancel() {
                                    ledger[id].cancels_won.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            _ => {
                                let group = rng.below(GROUPS);
                                let n = purgatory.cancel_for_key(&(1_000 + group));
                                group_cancels[group as usize].fetch_add(n, Ordering::SeqCst);
                            }
                        }
                    }
                }));
            }
            // Until every operation of the wave has ended: the clock passes every
            // deadline (at most 41 ms after the wave started), then some more racing.
            while wave_handles.iter().any(|handle| !handle.is_done()) {
                thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
            for thread in threads {
                thread.join().unwrap();
            }
        }
        assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
        assert_eq!(timer.pending(), 0, "every expiry fired or was cancelled");
        // Per operation: exactly one party was told.
        let mut by_key_per_group = vec![0_usize; GROUPS as usize];
        let mut outcomes = [0_usize; 4]; // completed, forced, expired, cancelled
        for (id, entry) in ledger.iter().enumerate() {
            let completed = entry.completed.load(Ordering::SeqCst);
            let expired = entry.expired.load(Ordering::SeqCst);
            let cancels = entry.cancels_won.load(Ordering::SeqCst);
            let forces = entry.forces_won.load(Ordering::SeqCst);
            assert!(
                completed <= 1 && expired <= 1 && cancels <= 1 && forces <= 1,
                "operation {id}: on_complete ×{completed}, on_expiration ×{expired}, \
                 cancel() true ×{cancels}, force Ok ×{forces}"
            );
            assert!(
                completed + expired + cancels <= 1,
                "operation {id}: told twice: on_complete ×{completed}, on_expiration \
                 ×{expired}, cancel() true ×{cancels}"
            );
            if forces == 1 {
                assert_eq!(
                    completed, 1,
                    "operation {id}: a force that won completes it"
                );
                assert_eq!(
                    entry.value.load(Ordering::SeqCst),
                    entry.forced.load(Ordering::SeqCst),
                    "operation {id}: with the forced value"
                );
            }
            if completed == 1 {
                let value = entry.value.load(Ordering::SeqCst);
                assert!(value == id as u64 || value == FORCED | id as u64);
                outcomes[usize::from(value & FORCED != 0)] += 1;
            } else if expired == 1 {
                outcomes[2] += 1;
            } else if cancels == 0 {
                // Ended cancelled by no handle: a `cancel_for_key` of its group counted it.
                by_key_per_group[id % GROUPS as usize] += 1;
                outcomes[3] += 1;
            } else {
                outcomes[3] += 1;
            }
        }
        for (group, (counted, found)) in group_cancels
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .zip(by_key_per_group)
            .enumerate()
        {
            assert_eq!(
                counted, found,
                "group {group}: cancel_for_key counted {counted}, yet {found} of its \
                 operations ended cancelled with no cancel() told"
            );
        }
        // Every way of ending happened, or the race tested less than it claims.
        assert!(
            outcomes.iter().all(|&n| n > 0),
            "completed, forced, expired, cancelled: {outcomes:?}"
        );
    });
}

#[test]
fn threshold_waiting_never_exceeds_what_was_made_while_advances_race_waits() {
    const WAITS: usize = if cfg!(miri) { 200 } else { 100_000 };
    within(Duration::from_secs(120), "threshold counters", || {
        let timer = manual();
        let purgatory: ThresholdPurgatory<u64> = ThresholdPurgatory::with_timer(timer.clone());
        let made = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (purgatory, made, stop) = (purgatory.clone(), made.clone(), stop.clone());
            thread::spawn(move || {
                let mut reads = 0_u64;
                while !stop.load(Ordering::SeqCst) {
                    // Read `made` after: a wait counted in `waiting` was made before.
                    let waiting = purgatory.waiting();
                    let made = made.load(Ordering::SeqCst);
                    assert!(
                        waiting <= made,
                        "waiting() read {waiting} with {made} waits made"
                    );
                    reads += 1;
                }
                reads
            })
        };
        // Two waiters, each wait just above its key's value; four advancers raising the
        // 8 keys one step at a time, in their own orders: most waits are ended by an
        // advance on another thread as soon as they are listed.
        let waiters: Vec<_> = (0..2_u64)
            .map(|t| {
                let (purgatory, made, ended) = (purgatory.clone(), made.clone(), ended.clone());
                thread::spawn(move || {
                    let mut rng = Rng(t + 1);
                    for _ in 0..WAITS / 2 {
                        let key = rng.below(8);
                        let threshold = purgatory.value(&key) + 1 + rng.below(2);
                        made.fetch_add(1, Ordering::SeqCst);
                        let ended = ended.clone();
                        drop(
                            purgatory.wait_then(key, threshold, Duration::from_secs(3600), {
                                move |_| {
                                    ended.fetch_add(1, Ordering::SeqCst);
                                }
                            }),
                        );
                    }
                })
            })
            .collect();
        let advancers: Vec<_> = (0..4_u64)
            .map(|t| {
                let (purgatory, stop) = (purgatory.clone(), stop.clone());
                thread::spawn(move || {
                    let mut rng = Rng(50 + t);
                    while !stop.load(Ordering::SeqCst) {
                        let key = rng.below(8);
                        purgatory.advance(&key, purgatory.value(&key).saturating_add(1));
                    }
                })
            })
            .collect();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        // Every wait's threshold is passed, then everything stops.
        for key in 0..8 {
            purgatory.advance(&key, u64::MAX);
        }
        stop.store(true, Ordering::SeqCst);
        for advancer in advancers {
            advancer.join().unwrap();
        }
        assert!(reader.join().unwrap() > 0);
        // Quiet: every wait ended, so none waits.
        assert_eq!(ended.load(Ordering::SeqCst), WAITS);
        assert_eq!(purgatory.waiting(), 0);
    });
}

#[test]
fn purgatory_counters_never_exceed_what_was_made_while_operations_race() {
    const OPS: usize = if cfg!(miri) { 40 } else { 20_000 };
    within(Duration::from_secs(120), "purgatory counters", || {
        let timer = manual();
        let purgatory: Purgatory<u64, ()> = Purgatory::with_timer(timer.clone());
        let made = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let reader = {
            let (purgatory, made, stop) = (purgatory.clone(), made.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (watched, delayed) = (purgatory.watched(), purgatory.delayed());
                    let made = made.load(Ordering::SeqCst);
                    assert!(delayed <= made, "delayed() read {delayed}, {made} made");
                    assert!(watched <= 2 * made, "watched() read {watched}, {made} made");
                }
            })
        };
        let mut threads = Vec::new();
        for t in 0..2_u64 {
            let (purgatory, made, ready) = (purgatory.clone(), made.clone(), ready.clone());
            threads.push(thread::spawn(move || {
                let mut rng = Rng(t + 1);
                let mut handles = Vec::new();
                for i in 0..OPS / 2 {
                    made.fetch_add(1, Ordering::SeqCst);
                    let ready = ready.clone();
                    let watch = purgatory.watch(
                        [rng.below(8), rng.below(8)],
                        Duration::from_secs(3600),
                        move || ready.load(Ordering::Relaxed).then_some(()),
                    );
                    if i % 3 == 0 {
                        drop(watch); // withdrawn
                    } else {
                        handles.push(watch);
                    }
                }
                handles
            }));
        }
        let checkers: Vec<_> = (0..2_u64)
            .map(|t| {
                let (purgatory, ready) = (purgatory.clone(), ready.clone());
                thread::spawn(move || {
                    let mut rng = Rng(90 + t);
                    let rounds = if cfg!(miri) { 100 } else { 40_000 };
                    for round in 0..rounds {
                        if round == rounds / 2 {
                            ready.store(true, Ordering::Relaxed);
                        }
                        purgatory.check(&rng.below(8));
                    }
                })
            })
            .collect();
        let mut watches = Vec::new();
        for thread in threads {
            watches.extend(thread.join().unwrap());
        }
        for checker in checkers {
            checker.join().unwrap();
        }
        ready.store(true, Ordering::Relaxed);
        for key in 0..8 {
            purgatory.check(&key);
        }
        stop.store(true, Ordering::SeqCst);
        reader.join().unwrap();
        assert!(watches.iter().all(|watch| watch.is_done()));
        assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    });
}

/// Issue 35: 20,000 `Watch`es on `[1, 2, 1]` (a key named twice), each polled once and
/// dropped, while another thread checks keys 1 and 2 without pause. Half the conditions
/// spin a while, one in ten holds at once. A check that finds a condition running asks its
/// runner to run it again: the watching thread (the runner during `watch`'s second try)
/// must not be kept doing that for every check that lands meanwhile, which with a checker
/// this fast never ends.
#[test]
fn a_watcher_is_not_kept_rerunning_its_condition_for_a_checker_that_never_pauses() {
    const WATCHES: u64 = if cfg!(miri) { 40 } else { 20_000 };
    const STALL: Duration = Duration::from_secs(30);
    const STEPS: [&str; 3] = ["watch", "poll", "drop"];
    let purgatory: Purgatory<u64, u64> = Purgatory::with_timer(manual());
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let checker = {
        let (purgatory, stop, checks) = (purgatory.clone(), stop.clone(), checks.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                purgatory.check(&1);
                purgatory.check(&2);
                checks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // 3 × the watch's index + its step; and its condition's runs on the watching thread.
    let progress = Arc::new(AtomicU64::new(0));
    let runs_here = Arc::new(AtomicU64::new(0));
    let (finished, done) = channel::<()>();
    let watcher = {
        let (purgatory, progress, runs_here) =
            (purgatory.clone(), progress.clone(), runs_here.clone());
        thread::spawn(move || {
            let _finished = finished; // dropped on return or panic: the watchdog stops
            let watcher = thread::current().id();
            let mut rng = Rng(35);
            for i in 0..WATCHES {
                let (spins, holds) = (rng.below(2) == 0, rng.below(10) == 0);
                runs_here.store(0, Ordering::SeqCst);
                progress.store(3 * i, Ordering::SeqCst);
                let runs = runs_here.clone();
                let mut watch = purgatory.watch([1, 2, 1], Duration::from_secs(3600), move || {
                    if thread::current().id() == watcher {
                        runs.fetch_add(1, Ordering::SeqCst);
                    }
                    for n in 0..if spins { 200 } else { 0 } {
                        std::hint::black_box(n);
                    }
                    holds.then_some(i)
                });
                // Its first and second tries, and one run again for checks meanwhile.
                let ran = runs_here.load(Ordering::SeqCst);
                assert!(
                    ran <= 3,
                    "watch {i}: its condition ran {ran} times on the watching thread \
                     inside `watch`: kept running it for the checker"
                );
                progress.store(3 * i + 1, Ordering::SeqCst);
                let _ = poll_once(&mut watch);
                if i % 4 == 0 {
                    thread::yield_now();
                }
                progress.store(3 * i + 2, Ordering::SeqCst);
                drop(watch);
            }
        })
    };
    // The watchdog: the watches must move on at least once every `STALL`.
    let (mut seen, mut since) = (u64::MAX, std::time::Instant::now());
    while let Err(RecvTimeoutError::Timeout) = done.recv_timeout(Duration::from_millis(10)) {
        let now = progress.load(Ordering::SeqCst);
        if now != seen {
            (seen, since) = (now, std::time::Instant::now());
        } else if since.elapsed() >= STALL {
            stop.store(true, Ordering::SeqCst);
            panic!(
                "no progress in {STALL:?}: watch {} of {WATCHES} stuck in its `{}`, its \
                 condition run {} times on the watching thread, the checker at {} rounds",
                now / 3,
                STEPS[(now % 3) as usize],
                runs_here.load(Ordering::SeqCst),
                checks.load(Ordering::Relaxed),
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    checker.join().unwrap();
    if let Err(panic) = watcher.join() {
        std::panic::resume_unwind(panic);
    }
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
}
