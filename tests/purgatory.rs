//! The purgatory: watch / check / expire / cancel, exactly once, with no purge; the
//! `DelayedOperation` shape; threshold waits; races on a multi-thread runtime; and a
//! property test against an oracle.

use tickless_test_support as support;

use proptest::prelude::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use support::*;
use tickless::purgatory::{DelayedOperation, Outcome, Purgatory, ThresholdPurgatory};
use tickless::Timer;

/// A flag a condition reads: `Some(value)` once set.
#[derive(Clone, Default)]
struct Flag(Arc<AtomicU64>);

impl Flag {
    fn set(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }

    fn condition(&self) -> impl FnMut() -> Option<u64> + Send + 'static {
        let flag = self.0.clone();
        move || Some(flag.load(Ordering::SeqCst)).filter(|&v| v != 0)
    }
}

fn poll_now<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn an_operation_completes_when_a_check_of_one_of_its_keys_finds_it_true() {
    let timer = manual();
    let purgatory = Purgatory::with_timer(timer.clone());
    let flag = Flag::default();
    let mut watch = purgatory.watch(["a", "b", "c"], MS, flag.condition());
    assert_eq!((purgatory.watched(), purgatory.delayed()), (3, 1));
    assert_eq!(
        timer.pending(),
        1,
        "its deadline is a callback on the timer"
    );
    assert_eq!(purgatory.check(&"b"), 0, "not yet");
    assert!(poll_now(&mut watch).is_pending());
    flag.set(7);
    assert_eq!(purgatory.check(&"zzz"), 0, "another key");
    assert_eq!(purgatory.check(&"c"), 1);
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Completed(7)));
    // Gone from every key at once, and from the timer: nothing for a purge to do.
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    assert_eq!(timer.pending(), 0);
    assert_eq!(purgatory.check(&"a"), 0);
}

#[test]
fn a_condition_true_at_once_completes_without_being_watched() {
    let timer = manual();
    let purgatory = Purgatory::with_timer(timer.clone());
    let mut watch = purgatory.watch(["a"], MS, || Some("now"));
    assert_eq!(
        (purgatory.watched(), purgatory.delayed(), timer.pending()),
        (0, 0, 0)
    );
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Completed("now")));
}

#[test]
fn the_second_try_catches_an_event_between_the_first_try_and_the_watch() {
    // The condition turns true during `watch` itself, after its first try: the second
    // try, after it is watched, completes it without any check.
    let timer = manual();
    let purgatory = Purgatory::with_timer(timer.clone());
    let tries = Arc::new(AtomicUsize::new(0));
    let counted = tries.clone();
    let mut watch = purgatory.watch(["a"], MS, move || {
        (counted.fetch_add(1, Ordering::SeqCst) >= 1).then_some(2)
    });
    assert_eq!(tries.load(Ordering::SeqCst), 2);
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Completed(2)));
    assert_eq!(
        (purgatory.watched(), purgatory.delayed(), timer.pending()),
        (0, 0, 0)
    );
}

#[test]
fn an_operation_expires_on_the_timers_driver_and_leaves_every_key() {
    let timer = manual();
    let purgatory = Purgatory::with_timer(timer.clone());
    let mut watch = purgatory.watch([1, 2], 200 * MS, Flag::default().condition());
    timer.advance(200 * MS - Duration::from_nanos(1));
    assert!(poll_now(&mut watch).is_pending(), "not before its deadline");
    timer.advance(Duration::from_nanos(1));
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Expired));
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn tokios_paused_clock_expires_operations_as_it_drives_sleeps() {
    let purgatory: Purgatory<&str, ()> = Purgatory::new();
    let start = tokio::time::Instant::now();
    let outcome = purgatory
        .watch(["k"], Duration::from_millis(200), || None)
        .await;
    assert_eq!(outcome, Outcome::Expired);
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[test]
fn dropping_the_future_withdraws_the_operation_from_every_key_and_the_timer() {
    let timer = manual();
    let purgatory: Purgatory<u32, u32> = Purgatory::with_timer(timer.clone());
    let watch = purgatory.watch([1, 2, 3], MS, || None);
    assert_eq!(
        (purgatory.watched(), purgatory.delayed(), timer.pending()),
        (3, 1, 1)
    );
    drop(watch);
    assert_eq!(
        (purgatory.watched(), purgatory.delayed(), timer.pending()),
        (0, 0, 0)
    );
}

#[test]
fn cancel_for_key_cancels_the_operations_watching_it_everywhere() {
    let timer = manual();
    let purgatory: Purgatory<u32, u32> = Purgatory::with_timer(timer.clone());
    let mut both = purgatory.watch([1, 2], MS, || None);
    let mut other = purgatory.watch([3], MS, || None);
    assert_eq!(purgatory.cancel_for_key(&2), 1);
    assert_eq!(poll_now(&mut both), Poll::Ready(Outcome::Cancelled));
    assert_eq!(
        (purgatory.watched(), purgatory.delayed()),
        (1, 1),
        "left key 1 too"
    );
    assert!(poll_now(&mut other).is_pending());
}

#[test]
fn force_complete_ends_it_once() {
    let timer = manual();
    let purgatory: Purgatory<u32, u32> = Purgatory::with_timer(timer.clone());
    let mut watch = purgatory.watch([1], MS, || None);
    assert_eq!(watch.force_complete(5), Ok(()));
    assert_eq!(watch.force_complete(6), Err(6), "only once");
    assert!(!watch.cancel());
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Completed(5)));
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
}

#[test]
fn a_check_finding_the_condition_running_is_not_lost() {
    // A condition reads its flag (still unset), then blocks; meanwhile the flag is set
    // and the key checked again: that check finds it running and returns at once, and
    // the runner, on finishing, runs the condition again and completes it.
    let timer = manual();
    let purgatory: Purgatory<u32, u64> = Purgatory::with_timer(timer.clone());
    let flag = Arc::new(AtomicU64::new(0));
    let (in_condition, entered) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let in_flight = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let condition = {
        let (flag, in_flight, runs) = (flag.clone(), in_flight.clone(), runs.clone());
        move || {
            assert!(
                !in_flight.swap(true, Ordering::SeqCst),
                "ran on two threads at once"
            );
            let run = runs.fetch_add(1, Ordering::SeqCst);
            let seen = flag.load(Ordering::SeqCst);
            if run == 2 {
                // The third run (the first two are watch's tries): block, holding the
                // stale reading.
                in_condition.send(()).unwrap();
                released.lock().unwrap().recv().unwrap();
            }
            in_flight.store(false, Ordering::SeqCst);
            (seen != 0).then_some(seen)
        }
    };
    let mut watch = purgatory.watch([1], MS, condition);
    let checker = {
        let purgatory = purgatory.clone();
        std::thread::spawn(move || purgatory.check(&1))
    };
    entered.recv().unwrap();
    flag.store(9, Ordering::SeqCst);
    assert_eq!(purgatory.check(&1), 0, "busy: the runner will run it again");
    release.send(()).unwrap();
    assert_eq!(checker.join().unwrap(), 1, "the runner completed it");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Completed(9)));
}

#[test]
fn an_expiry_and_a_recheck_arriving_while_the_condition_runs_end_it_expired() {
    // The condition blocks in a check's run; meanwhile another check asks for a rerun and
    // the deadline passes. The runner must end it expired: a rerun must not wipe the
    // expiry (it did: the operation went back to waiting with no deadline, lost).
    let timer = manual();
    let purgatory: Purgatory<u32, u64> = Purgatory::with_timer(timer.clone());
    let (in_condition, entered) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let runs = Arc::new(AtomicUsize::new(0));
    let condition = {
        let runs = runs.clone();
        move || {
            // The first two runs are watch's tries; the third blocks.
            if runs.fetch_add(1, Ordering::SeqCst) == 2 {
                in_condition.send(()).unwrap();
                released.lock().unwrap().recv().unwrap();
            }
            None
        }
    };
    let mut watch = purgatory.watch([1, 2], MS, condition);
    let checker = {
        let purgatory = purgatory.clone();
        std::thread::spawn(move || purgatory.check(&1))
    };
    entered.recv().unwrap();
    assert_eq!(
        purgatory.check(&2),
        0,
        "busy: asks the runner to run it again"
    );
    timer.advance(2 * MS);
    assert_eq!(purgatory.delayed(), 1, "running: the expiry only flags it");
    release.send(()).unwrap();
    assert_eq!(checker.join().unwrap(), 0);
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Expired));
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    assert_eq!(runs.load(Ordering::SeqCst), 3, "ended without the rerun");
}

struct Produce {
    acked: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<&'static str>>>,
}

impl DelayedOperation for Produce {
    type Output = &'static str;

    fn try_complete(&mut self) -> Option<&'static str> {
        self.acked.load(Ordering::SeqCst).then_some("acked")
    }

    fn on_complete(&mut self, output: &'static str) {
        self.log.lock().unwrap().push(output);
    }

    fn on_expiration(&mut self) {
        self.log.lock().unwrap().push("expired");
    }
}

#[test]
fn delayed_operations_get_exactly_one_hook() {
    let timer = manual();
    let purgatory = Purgatory::with_timer(timer.clone());
    let log = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicBool::new(false));
    let op = |acked: &Arc<AtomicBool>| Produce {
        acked: acked.clone(),
        log: log.clone(),
    };
    let first = purgatory.watch_operation(["p0"], MS, op(&acked));
    let _second = purgatory.watch_operation(["p1"], MS, op(&Arc::new(AtomicBool::new(false))));
    let third = purgatory.watch_operation(["p0"], MS, op(&Arc::new(AtomicBool::new(false))));
    assert!(third.cancel(), "cancelled: no hook");
    acked.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check(&"p0"), 1);
    assert!(first.is_done());
    timer.advance(MS);
    assert_eq!(*log.lock().unwrap(), ["acked", "expired"]);
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
}

#[test]
fn checks_racing_expiry_and_drops_on_threads_end_every_operation_once() {
    const OPS: usize = if cfg!(miri) { 60 } else { 2_000 };
    let runtime = support::multi_thread();
    runtime.block_on(async {
        let purgatory: Purgatory<u64, usize> = Purgatory::new();
        let go = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..OPS)
            .map(|i| {
                let (purgatory, go) = (purgatory.clone(), go.clone());
                tokio::spawn(async move {
                    let keys = [i as u64 % 7, i as u64 % 11 + 100];
                    // A third never hold: they end by expiring, racing the checks that
                    // run them; the rest hold once `go` is set (or expire first, if
                    // their deadline comes before a check finds them). Dropped ones
                    // never hold, so every completion a check counts is awaited here.
                    let holds = i % 3 != 0 && i % 5 != 0;
                    // Miri runs ~100x slower: deadlines as far in its steps.
                    let scale = if cfg!(miri) { 100 } else { 1 };
                    let timeout = if holds {
                        Duration::from_micros((i % 20) as u64 * 100 + 2_000) * scale
                    } else {
                        Duration::from_micros((i % 20) as u64 * 100) * scale
                    };
                    let watch = purgatory.watch(keys, timeout, move || {
                        (holds && go.load(Ordering::Relaxed)).then_some(i)
                    });
                    if i % 5 == 0 {
                        drop(watch); // withdrawn while others check and expire
                        return None;
                    }
                    Some(watch.await)
                })
            })
            .collect();
        let checkers: Vec<_> = (0..2)
            .map(|half| {
                let (purgatory, go) = (purgatory.clone(), go.clone());
                tokio::spawn(async move {
                    let mut completed = 0;
                    for round in 0..50_u64 {
                        if round == 2 {
                            go.store(true, Ordering::Relaxed);
                        }
                        for key in (0..7).chain(100..111).filter(|k| k % 2 == half) {
                            completed += purgatory.check(&key);
                        }
                        tokio::task::yield_now().await;
                    }
                    completed
                })
            })
            .collect();
        let mut outcomes = (0, 0, 0);
        for task in tasks {
            match task.await.unwrap() {
                Some(Outcome::Completed(_)) => outcomes.0 += 1,
                Some(Outcome::Expired) => outcomes.1 += 1,
                Some(Outcome::Cancelled) => outcomes.2 += 1,
                None => {}
            }
        }
        let mut checked = 0;
        for checker in checkers {
            checked += checker.await.unwrap();
        }
        assert_eq!(
            outcomes.2, 0,
            "only drops cancel, and a dropped one has no outcome"
        );
        assert_eq!(
            outcomes.0 + outcomes.1,
            OPS - OPS / 5,
            "every awaited one ended once"
        );
        // Not equal: a watch's own tries (before and after linking) complete an
        // operation without a check. The per-operation ledger of exactly one ending is
        // `tests/purgatory_races.rs`'s.
        assert!(checked <= outcomes.0, "no completion counted twice");
        assert!(
            outcomes.0 > 0 && outcomes.1 > 0,
            "both completions and expiries: {outcomes:?}"
        );
        assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    });
}

#[test]
fn no_purge_completed_operations_keep_no_memory_anywhere() {
    // Under Miri (CI runs this file there, for the purgatory's `unsafe`), fewer.
    const N: u64 = if cfg!(miri) { 100 } else { 10_000 };
    let timer = manual();
    let purgatory: Purgatory<u64, u64> = Purgatory::with_timer(timer.clone());
    let flag = Flag::default();
    let mut watches: Vec<_> = (0..N)
        .map(|i| {
            purgatory.watch(
                [i % 100, 100 + i % 3],
                Duration::from_secs(60),
                flag.condition(),
            )
        })
        .collect();
    assert_eq!(purgatory.watched(), 2 * N as usize);
    flag.set(1);
    // Only the first 100 keys are checked: completion still unlinks the other key.
    let completed: usize = (0..100).map(|key| purgatory.check(&key)).sum();
    assert_eq!(completed, N as usize);
    assert_eq!(
        (purgatory.watched(), purgatory.delayed(), timer.pending()),
        (0, 0, 0)
    );
    for watch in &mut watches {
        assert_eq!(poll_now(watch), Poll::Ready(Outcome::Completed(1)));
    }
}

// ---- Threshold waits ------------------------------------------------------------------

#[test]
fn advancing_a_key_completes_exactly_the_waiters_it_satisfies() {
    let timer = manual();
    let hw: ThresholdPurgatory<u32> = ThresholdPurgatory::with_timer(timer.clone());
    let mut waits: Vec<_> = [5_u64, 10, 15, 10]
        .iter()
        .map(|&threshold| hw.wait(0, threshold, MS))
        .collect();
    let mut other = hw.wait(1, 1, MS);
    assert_eq!(hw.waiting(), 5);
    assert_eq!(hw.advance(&0, 4), 0);
    assert_eq!(hw.advance(&0, 10), 3);
    assert_eq!(hw.advance(&0, 9), 0, "values only rise");
    assert_eq!(hw.value(&0), 10);
    let polled: Vec<_> = waits.iter_mut().map(poll_now).collect();
    assert_eq!(
        polled,
        [
            Poll::Ready(Outcome::Completed(10)),
            Poll::Ready(Outcome::Completed(10)),
            Poll::Pending,
            Poll::Ready(Outcome::Completed(10)),
        ]
    );
    assert!(poll_now(&mut other).is_pending());
    // Reached already: completes at once.
    let mut late = hw.wait(0, 3, MS);
    assert_eq!(poll_now(&mut late), Poll::Ready(Outcome::Completed(10)));
    timer.advance(MS);
    assert_eq!(poll_now(&mut waits[2]), Poll::Ready(Outcome::Expired));
    assert_eq!(poll_now(&mut other), Poll::Ready(Outcome::Expired));
    assert_eq!((hw.waiting(), timer.pending()), (0, 0));
}

#[test]
fn operations_still_expire_once_every_handle_to_their_purgatory_is_gone() {
    // Each operation is its own timer callback and holds its purgatory weakly: dropping
    // every handle neither keeps the purgatory alive nor loses the expiries.
    let timer = manual();
    let log = Arc::new(Mutex::new(Vec::new()));
    {
        let purgatory: Purgatory<&str, &'static str> = Purgatory::with_timer(timer.clone());
        let produce = Produce {
            acked: Arc::new(AtomicBool::new(false)),
            log: log.clone(),
        };
        drop(purgatory.watch_operation(["p0", "p1"], MS, produce));
        let watermarks: ThresholdPurgatory<&str> = ThresholdPurgatory::with_timer(timer.clone());
        let log = log.clone();
        let _ = watermarks.wait_then("p0", 7, MS, move |outcome| {
            log.lock().unwrap().push(if outcome.is_expired() {
                "threshold expired"
            } else {
                "?"
            });
        });
    }
    assert_eq!(timer.pending(), 2, "the expiries wait on the timer");
    timer.advance(MS);
    let mut log = log.lock().unwrap().clone();
    log.sort_unstable();
    assert_eq!(log, ["expired", "threshold expired"]);
    assert_eq!(timer.pending(), 0);
}

#[test]
fn threshold_callbacks_and_cancels_end_once() {
    let timer = manual();
    let hw: ThresholdPurgatory<&str> = ThresholdPurgatory::with_timer(timer.clone());
    let got = Arc::new(Mutex::new(Vec::new()));
    let record = |got: &Arc<Mutex<Vec<Outcome<u64>>>>| {
        let got = got.clone();
        move |outcome| got.lock().unwrap().push(outcome)
    };
    let _a = hw.wait_then("p", 2, MS, record(&got));
    let b = hw.wait_then("p", 3, MS, record(&got));
    let _c = hw.wait_then("q", 3, MS, record(&got));
    assert!(b.cancel() && !b.cancel());
    hw.advance(&"p", 5);
    timer.advance(MS);
    assert_eq!(
        *got.lock().unwrap(),
        [Outcome::Cancelled, Outcome::Completed(5), Outcome::Expired]
    );
    assert_eq!((hw.waiting(), timer.pending()), (0, 0));
}

// ---- Property test: random watch / check / expire / drop / cancel against an oracle ---

#[derive(Clone, Debug)]
enum Op {
    /// Watch keys (a bitmask of 4 keys) until this many ns, completing once `ready` is set.
    Watch(u8, u64),
    /// Mark the `n`th live operation's condition true.
    Ready(usize),
    /// Check a key.
    Check(u8),
    /// Move the clock.
    Advance(u64),
    /// Drop the `n`th live operation's future.
    Drop(usize),
    /// Cancel the operations watching a key.
    CancelKey(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..16_u8, 1..500_u64).prop_map(|(keys, d)| Op::Watch(keys, d)),
        3 => any::<usize>().prop_map(Op::Ready),
        4 => (0..4_u8).prop_map(Op::Check),
        2 => (0..300_u64).prop_map(Op::Advance),
        1 => any::<usize>().prop_map(Op::Drop),
        1 => (0..4_u8).prop_map(Op::CancelKey),
    ]
}

struct Model {
    keys: u8,
    deadline: u64,
    ready: Arc<AtomicBool>,
    watch: Option<tickless::purgatory::Watch<u8, usize>>,
    outcome: Option<Outcome<usize>>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 300 }))]

    #[test]
    fn the_purgatory_matches_an_oracle(
        ops in proptest::collection::vec(op(), 1..if cfg!(miri) { 20 } else { 60 })
    ) {
        let timer = manual();
        let purgatory: Purgatory<u8, usize> = Purgatory::with_timer(timer.clone());
        let mut now = 0_u64;
        let mut models: Vec<Model> = Vec::new();
        for op in ops {
            match op {
                Op::Watch(keys, delay) => {
                    let ready = Arc::new(AtomicBool::new(false));
                    let id = models.len();
                    let seen = ready.clone();
                    let keyed: Vec<u8> = (0..4).filter(|k| keys & (1 << k) != 0).collect();
                    let watch = purgatory.watch(keyed, Duration::from_nanos(delay), move || {
                        seen.load(Ordering::SeqCst).then_some(id)
                    });
                    models.push(Model { keys, deadline: now + delay, ready, watch: Some(watch), outcome: None });
                }
                Op::Ready(n) if !models.is_empty() => {
                    let n = n % models.len();
                    models[n].ready.store(true, Ordering::SeqCst);
                }
                Op::Check(key) => {
                    let expected: usize = models.iter()
                        .filter(|m| m.outcome.is_none() && m.watch.is_some())
                        .filter(|m| m.keys & (1 << key) != 0 && m.ready.load(Ordering::SeqCst))
                        .count();
                    prop_assert_eq!(purgatory.check(&key), expected);
                    for (id, m) in models.iter_mut().enumerate() {
                        if m.outcome.is_none() && m.watch.is_some() && m.keys & (1 << key) != 0 && m.ready.load(Ordering::SeqCst) {
                            m.outcome = Some(Outcome::Completed(id));
                        }
                    }
                }
                Op::Advance(by) => {
                    now += by;
                    timer.advance(Duration::from_nanos(by));
                    for m in &mut models {
                        if m.outcome.is_none() && m.watch.is_some() && m.deadline <= now {
                            m.outcome = Some(Outcome::Expired);
                        }
                    }
                }
                Op::Drop(n) if !models.is_empty() => {
                    let n = n % models.len();
                    models[n].watch = None;
                }
                Op::CancelKey(key) => {
                    let expected = models.iter()
                        .filter(|m| m.outcome.is_none() && m.watch.is_some() && m.keys & (1 << key) != 0)
                        .count();
                    prop_assert_eq!(purgatory.cancel_for_key(&key), expected);
                    for m in &mut models {
                        if m.outcome.is_none() && m.watch.is_some() && m.keys & (1 << key) != 0 {
                            m.outcome = Some(Outcome::Cancelled);
                        }
                    }
                }
                _ => {}
            }
            // Counts: exactly the live, unended operations are watched, under their keys.
            let live: Vec<&Model> = models.iter().filter(|m| m.outcome.is_none() && m.watch.is_some()).collect();
            prop_assert_eq!(purgatory.delayed(), live.len());
            prop_assert_eq!(purgatory.watched(), live.iter().map(|m| m.keys.count_ones() as usize).sum::<usize>());
            prop_assert_eq!(timer.pending(), live.len());
        }
        for m in &mut models {
            if let (Some(watch), Some(expected)) = (m.watch.as_mut(), m.outcome.take()) {
                prop_assert_eq!(poll_now(watch), Poll::Ready(expected));
            }
        }
    }
}

#[test]
fn two_forces_while_the_condition_runs_complete_it_once_with_one_value() {
    // Two forces racing each other and the runner: one wins, with its own value, and the
    // other gets its value back. (Review found two races here, fixed in `op.rs`: forces
    // parking at once overwrote each other, and a forcer could take its value back before
    // the runner used it. Their windows are a few instructions wide: this run does not
    // hit them reliably; it checks the outcome of every interleaving it does hit.)
    for _ in 0..if cfg!(miri) { 5 } else { 200 } {
        let timer = manual();
        let purgatory: Purgatory<u32, u64> = Purgatory::with_timer(timer.clone());
        let (in_condition, entered) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let released = Mutex::new(released);
        let runs = Arc::new(AtomicUsize::new(0));
        let condition = {
            let runs = runs.clone();
            move || {
                // The third run (the first two are watch's tries) blocks in the checker.
                if runs.fetch_add(1, Ordering::SeqCst) == 2 {
                    in_condition.send(()).unwrap();
                    released.lock().unwrap().recv().unwrap();
                }
                None
            }
        };
        let mut watch = purgatory.watch([1], MS, condition);
        let checker = {
            let purgatory = purgatory.clone();
            std::thread::spawn(move || purgatory.check(&1))
        };
        entered.recv().unwrap();
        let results: Vec<(u64, Result<(), u64>)> = std::thread::scope(|scope| {
            let forces: Vec<_> = [7, 8]
                .into_iter()
                .map(|value| {
                    let watch = &watch;
                    scope.spawn(move || (value, watch.force_complete(value)))
                })
                .collect();
            release.send(()).unwrap();
            forces.into_iter().map(|f| f.join().unwrap()).collect()
        });
        checker.join().unwrap();
        let winners: Vec<u64> = results
            .iter()
            .filter(|(_, result)| result.is_ok())
            .map(|&(value, _)| value)
            .collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        for (value, result) in &results {
            if let Err(back) = result {
                assert_eq!(back, value, "a losing force gets its own value back");
            }
        }
        assert_eq!(
            poll_now(&mut watch),
            Poll::Ready(Outcome::Completed(winners[0]))
        );
        assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    }
}

#[test]
fn try_watch_and_try_wait_report_a_timer_at_its_limit_instead_of_panicking() {
    let timer = Timer::builder()
        .manual_clock()
        .max_pending(1)
        .build()
        .unwrap();
    let purgatory: Purgatory<&str, u64> = Purgatory::with_timer(timer.clone());
    let flag = Flag::default();
    let first = purgatory.try_watch(["a"], MS, flag.condition()).unwrap();
    let error = purgatory
        .try_watch(["a", "b"], MS, flag.condition())
        .unwrap_err();
    assert!(error.is_at_capacity(), "{error}");
    assert_eq!(
        (purgatory.watched(), purgatory.delayed()),
        (1, 1),
        "the refused operation is linked under no key"
    );
    assert!(panicked(|| drop(purgatory.watch(
        ["a"],
        MS,
        flag.condition()
    ))));
    let log = Arc::new(Mutex::new(Vec::new()));
    let refused = Produce {
        acked: Arc::new(AtomicBool::new(false)),
        log: log.clone(),
    };
    let operations: Purgatory<&str, &'static str> = Purgatory::with_timer(timer.clone());
    assert!(operations
        .try_watch_operation(["a"], MS, refused)
        .unwrap_err()
        .is_at_capacity());
    assert!(
        log.lock().unwrap().is_empty(),
        "no hook runs for a refused operation"
    );
    // A condition that holds at once needs no deadline.
    let mut done = purgatory.try_watch(["a"], MS, || Some(5)).unwrap();
    assert_eq!(poll_now(&mut done), Poll::Ready(Outcome::Completed(5)));

    let thresholds: ThresholdPurgatory<&str> = ThresholdPurgatory::with_timer(timer.clone());
    assert!(thresholds
        .try_wait("a", 1, MS)
        .unwrap_err()
        .is_at_capacity());
    assert!(thresholds
        .try_wait_then("a", 1, MS, |_| panic!("never called"))
        .unwrap_err()
        .is_at_capacity());
    assert_eq!(thresholds.waiting(), 0);
    thresholds.advance(&"a", 3);
    let mut reached = thresholds.try_wait("a", 2, MS).unwrap();
    assert_eq!(poll_now(&mut reached), Poll::Ready(Outcome::Completed(3)));

    drop(first);
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    let mut now_fits = thresholds.try_wait("a", 9, MS).unwrap();
    assert!(now_fits.cancel());
    assert!(now_fits.is_done());
    assert_eq!(poll_now(&mut now_fits), Poll::Ready(Outcome::Cancelled));
    assert_eq!(timer.pending(), 0);
}

#[test]
fn a_condition_may_cancel_its_own_operation() {
    let timer = manual();
    let purgatory: Purgatory<&str, u64> = Purgatory::with_timer(timer.clone());
    let inside = purgatory.clone();
    let cancelled_inside = Arc::new(AtomicUsize::new(0));
    let counted = cancelled_inside.clone();
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    let mut watch = purgatory.watch(["a", "b"], MS, move || {
        if arm.load(Ordering::SeqCst) {
            // Its own cancel lands while it runs: it wins, whatever this returns.
            counted.fetch_add(inside.cancel_for_key(&"b"), Ordering::SeqCst);
            return Some(1);
        }
        None
    });
    armed.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check(&"a"), 0, "cancelled, not completed");
    assert_eq!(cancelled_inside.load(Ordering::SeqCst), 1);
    assert_eq!(poll_now(&mut watch), Poll::Ready(Outcome::Cancelled));
    assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
    assert_eq!(timer.pending(), 0);
}
