//! A property test of the purgatories against a model checked after every step: watches
//! (closures and `DelayedOperation`s with hooks, by timeout or deadline, on 1–3 keys of
//! four), condition flags set and checked, forces, cancels by handle and by key, dropped
//! futures, expiries by advancing a manual clock with a coarse tick, and threshold waits
//! (futures and callbacks) with their advances and cancels, all on one timer.
//!
//! After every step: the counts (`watched`, `delayed`, `waiting`, the timer's `pending`)
//! equal the model's; every operation and wait that ended did so once, with the modelled
//! outcome (completed with the condition's or the forced value, expired only at or after
//! its rounded deadline, cancelled only by a cancel that returned `true`), its hook or
//! callback run exactly once; every live one is still pending (not done, its future
//! `Pending`, no hook run).

use tickless_test_support as support;

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tickless::purgatory::{
    DelayedOperation, OperationHandle, Outcome, Purgatory, ThresholdHandle, ThresholdPurgatory,
    ThresholdWait, Watch,
};
use tickless::{Instant, Timer};

const KEYS: u8 = 4;

fn poll_now<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// How an operation or a wait ended, in the model (`Outcome` without its generics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Completed(u64),
    Expired,
    Cancelled,
}

fn end_of(outcome: Outcome<u64>) -> End {
    match outcome {
        Outcome::Completed(value) => End::Completed(value),
        Outcome::Expired => End::Expired,
        Outcome::Cancelled => End::Cancelled,
    }
}

/// What a hook or a threshold callback reported: how, and the clock (ns from the start)
/// it read then.
type Reports = Arc<Mutex<Vec<(usize, End, u128)>>>;

/// A `DelayedOperation` whose condition reads its flag (0: not yet) and whose hooks
/// report to the log.
struct Op {
    id: usize,
    flag: Arc<AtomicU64>,
    reports: Reports,
    timer: Timer,
    start: Instant,
}

impl Op {
    fn report(&self, end: End) {
        let seen = self.timer.now().duration_since(self.start).as_nanos();
        self.reports.lock().unwrap().push((self.id, end, seen));
    }
}

impl DelayedOperation for Op {
    type Output = u64;

    fn try_complete(&mut self) -> Option<u64> {
        Some(self.flag.load(Ordering::SeqCst)).filter(|&v| v != 0)
    }

    fn on_complete(&mut self, output: u64) {
        self.report(End::Completed(output));
    }

    fn on_expiration(&mut self) {
        self.report(End::Expired);
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// Watch under the keys of a mask (1–3 of 4), with a timeout (or a deadline that far
    /// ahead); a `DelayedOperation` or a closure; its flag set before (so it completes at
    /// once) or not.
    Watch {
        keys: u8,
        timeout: Duration,
        delayed: bool,
        until: bool,
        ready: Option<u64>,
    },
    /// Set the `n`th operation's flag (it completes with it at the next check).
    Set(usize, u64),
    /// Set the `n`th operation's flag, then check one of its keys.
    SetAndCheck(usize, u64, usize),
    Check(u8),
    Force(usize, u64),
    Cancel(usize),
    CancelKey(u8),
    /// Drop the `n`th operation's future (closures only): withdraws it.
    Drop(usize),
    Advance(Duration),
    /// A threshold wait, as a future or with a callback.
    Wait {
        key: u8,
        threshold: u64,
        timeout: Duration,
        callback: bool,
    },
    /// Raise a key's threshold value.
    Raise(u8, u64),
    CancelWait(usize),
}

/// Timeouts from under a tick to days, and `Duration::MAX`.
fn timeout(tick: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0..6 * tick).prop_map(Duration::from_nanos),
        2 => (0..3_600_000_000_000_u64).prop_map(Duration::from_nanos),
        1 => (0..5 * 86_400_u64).prop_map(Duration::from_secs),
        1 => Just(Duration::MAX),
    ]
}

fn advance(tick: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0..3 * tick).prop_map(Duration::from_nanos),
        2 => (1..3_u64).prop_map(move |n| Duration::from_nanos(n * tick)),
        1 => (0..3_600_000_000_000_u64).prop_map(Duration::from_nanos),
        1 => (0..3 * 86_400_u64).prop_map(Duration::from_secs),
    ]
}

/// Masks of one to three keys.
fn keys() -> impl Strategy<Value = u8> {
    (1..16_u8).prop_filter("1 to 3 keys", |m| m.count_ones() <= 3)
}

fn steps(tick: u64) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        5 => (keys(), timeout(tick), any::<bool>(), any::<bool>(), prop::option::weighted(0.1, 1..100_u64))
            .prop_map(|(keys, timeout, delayed, until, ready)| Step::Watch { keys, timeout, delayed, until, ready }),
        2 => (any::<usize>(), 1..100_u64).prop_map(|(n, v)| Step::Set(n, v)),
        3 => (any::<usize>(), 1..100_u64, any::<usize>()).prop_map(|(n, v, k)| Step::SetAndCheck(n, v, k)),
        2 => (0..KEYS).prop_map(Step::Check),
        2 => (any::<usize>(), 100..200_u64).prop_map(|(n, v)| Step::Force(n, v)),
        2 => any::<usize>().prop_map(Step::Cancel),
        1 => (0..KEYS).prop_map(Step::CancelKey),
        1 => any::<usize>().prop_map(Step::Drop),
        4 => advance(tick).prop_map(Step::Advance),
        3 => (0..KEYS, 0..40_u64, timeout(tick), any::<bool>())
            .prop_map(|(key, threshold, timeout, callback)| Step::Wait { key, threshold, timeout, callback }),
        2 => (0..KEYS, 0..50_u64).prop_map(|(k, v)| Step::Raise(k, v)),
        1 => any::<usize>().prop_map(Step::CancelWait),
    ];
    proptest::collection::vec(step, 1..80)
}

/// A manual clock's tick (1 ns, 1 ms, 10 ms) and the steps.
fn case() -> impl Strategy<Value = (u64, Vec<Step>)> {
    prop_oneof![Just(1_u64), Just(1_000_000), Just(10_000_000)]
        .prop_flat_map(|tick| (Just(tick), steps(tick)))
}

/// The first clock reading (ns from the start) at which a deadline `deadline` ns from the
/// start has passed on a timer with this tick: saturated at `i64::MAX`, rounded up.
fn due_at(deadline: u128, tick: u64) -> u128 {
    deadline.min(i64::MAX as u128).div_ceil(u128::from(tick)) * u128::from(tick)
}

/// An operation's handle, by kind.
enum Handle {
    /// A closure's future; `None` once dropped, or once it resolved (it was polled then).
    Watch(Option<Watch<u8, u64>>),
    Delayed(OperationHandle<u8, u64>),
}

struct Operation {
    keys: Vec<u8>,
    due: u128,
    flag: Arc<AtomicU64>,
    handle: Handle,
    /// The model's outcome; `Cancelled` also for a dropped future.
    end: Option<End>,
}

impl Operation {
    fn live(&self) -> bool {
        self.end.is_none()
    }

    fn handle(&self) -> Option<&OperationHandle<u8, u64>> {
        match &self.handle {
            Handle::Watch(watch) => watch.as_deref(),
            Handle::Delayed(handle) => Some(handle),
        }
    }
}

enum WaitHandle {
    Future(Option<ThresholdWait<u8>>),
    Callback(ThresholdHandle<u8>),
}

struct Wait {
    key: u8,
    threshold: u64,
    due: u128,
    handle: WaitHandle,
    end: Option<End>,
}

/// What a case reached, so that a test can check the generator still tests something.
#[derive(Debug, Default)]
struct Reached {
    completed: usize,
    forced: usize,
    expired: usize,
    cancelled: usize,
    cancelled_by_key: usize,
    threshold_completed: usize,
    threshold_expired: usize,
}

fn check(tick: u64, steps: &[Step]) -> Result<Reached, TestCaseError> {
    let timer = Timer::builder()
        .manual_clock()
        .tick(Duration::from_nanos(tick))
        .wheel_size(4)
        .build()
        .unwrap();
    let start = timer.now();
    let purgatory: Purgatory<u8, u64> = Purgatory::with_timer(timer.clone());
    let thresholds: ThresholdPurgatory<u8> = ThresholdPurgatory::with_timer(timer.clone());
    let reports: Reports = Arc::default();
    // Every report so far, by id: operations', and thresholds' at `usize::MAX - id`.
    let mut reported: BTreeMap<usize, Vec<(End, u128)>> = BTreeMap::new();
    let mut ops: Vec<Operation> = Vec::new();
    let mut waits: Vec<Wait> = Vec::new();
    let mut values = [0_u64; KEYS as usize];
    let mut now: u128 = 0;
    let mut reached = Reached::default();
    let ends_for = |ops: &[Operation], key: u8, flagged: bool| -> Vec<usize> {
        (0..ops.len())
            .filter(|&i| ops[i].live() && ops[i].keys.contains(&key))
            .filter(|&i| !flagged || ops[i].flag.load(Ordering::SeqCst) != 0)
            .collect()
    };
    for step in steps {
        match *step {
            Step::Watch {
                keys,
                timeout,
                delayed,
                until,
                ready,
            } => {
                let id = ops.len();
                let keyed: Vec<u8> = (0..KEYS).filter(|k| keys & (1 << k) != 0).collect();
                let flag = Arc::new(AtomicU64::new(ready.unwrap_or(0)));
                // A deadline that far ahead as an `Instant`, if one can hold it.
                let deadline = timer.now().checked_add(timeout).filter(|_| until);
                let due = due_at(now + timeout.as_nanos(), tick);
                let handle = if delayed {
                    let op = Op {
                        id,
                        flag: flag.clone(),
                        reports: reports.clone(),
                        timer: timer.clone(),
                        start,
                    };
                    Handle::Delayed(purgatory.watch_operation(keyed.clone(), timeout, op))
                } else {
                    let seen = flag.clone();
                    let condition = move || Some(seen.load(Ordering::SeqCst)).filter(|&v| v != 0);
                    Handle::Watch(Some(match deadline {
                        Some(deadline) => purgatory.watch_until(keyed.clone(), deadline, condition),
                        None => purgatory.watch(keyed.clone(), timeout, condition),
                    }))
                };
                // A condition that holds at once completes without being watched.
                let end = ready.map(End::Completed);
                reached.completed += usize::from(end.is_some());
                ops.push(Operation {
                    keys: keyed,
                    due,
                    flag,
                    handle,
                    end,
                });
            }
            Step::Set(n, value) if !ops.is_empty() => {
                ops[n % ops.len()].flag.store(value, Ordering::SeqCst);
            }
            Step::SetAndCheck(n, value, k) if !ops.is_empty() => {
                let op = &ops[n % ops.len()];
                op.flag.store(value, Ordering::SeqCst);
                let key = op.keys[k % op.keys.len()];
                let ending = ends_for(&ops, key, true);
                prop_assert_eq!(purgatory.check(&key), ending.len(), "check({})", key);
                for i in ending {
                    ops[i].end = Some(End::Completed(ops[i].flag.load(Ordering::SeqCst)));
                    reached.completed += 1;
                }
            }
            Step::Check(key) => {
                let ending = ends_for(&ops, key, true);
                prop_assert_eq!(purgatory.check(&key), ending.len(), "check({})", key);
                for i in ending {
                    ops[i].end = Some(End::Completed(ops[i].flag.load(Ordering::SeqCst)));
                    reached.completed += 1;
                }
            }
            Step::Force(n, value) if !ops.is_empty() => {
                let len = ops.len();
                let op = &mut ops[n % len];
                if let Some(handle) = op.handle() {
                    let forced = handle.force_complete(value);
                    prop_assert_eq!(forced.is_ok(), op.live(), "force of {:?}", op.end);
                    if forced.is_ok() {
                        op.end = Some(End::Completed(value));
                        reached.forced += 1;
                    } else {
                        prop_assert_eq!(forced, Err(value), "the value back");
                    }
                }
            }
            Step::Cancel(n) if !ops.is_empty() => {
                let len = ops.len();
                let op = &mut ops[n % len];
                if let Some(handle) = op.handle() {
                    let won = handle.cancel();
                    prop_assert_eq!(won, op.live(), "cancel of {:?}", op.end);
                    if won {
                        op.end = Some(End::Cancelled);
                        reached.cancelled += 1;
                    }
                }
            }
            Step::CancelKey(key) => {
                let ending = ends_for(&ops, key, false);
                prop_assert_eq!(
                    purgatory.cancel_for_key(&key),
                    ending.len(),
                    "cancel_for_key({})",
                    key
                );
                for i in ending {
                    ops[i].end = Some(End::Cancelled);
                    reached.cancelled_by_key += 1;
                }
            }
            Step::Drop(n) if !ops.is_empty() => {
                let len = ops.len();
                let op = &mut ops[n % len];
                if let Handle::Watch(watch @ Some(_)) = &mut op.handle {
                    *watch = None;
                    // Withdrawn if live; nothing can observe the outcome any more.
                    op.end.get_or_insert(End::Cancelled);
                }
            }
            Step::Advance(by) => {
                now += by.as_nanos();
                timer.advance(by);
                for op in ops.iter_mut().filter(|op| op.live() && op.due <= now) {
                    op.end = Some(End::Expired);
                    reached.expired += 1;
                }
                for wait in waits.iter_mut().filter(|w| w.end.is_none() && w.due <= now) {
                    wait.end = Some(End::Expired);
                    reached.threshold_expired += 1;
                }
            }
            Step::Wait {
                key,
                threshold,
                timeout,
                callback,
            } => {
                let id = waits.len();
                let handle = if callback {
                    let (reports, timer) = (reports.clone(), timer.clone());
                    WaitHandle::Callback(thresholds.wait_then(
                        key,
                        threshold,
                        timeout,
                        move |outcome| {
                            let seen = timer.now().duration_since(start).as_nanos();
                            reports
                                .lock()
                                .unwrap()
                                .push((usize::MAX - id, end_of(outcome), seen));
                        },
                    ))
                } else {
                    WaitHandle::Future(Some(thresholds.wait(key, threshold, timeout)))
                };
                // Reached already: completed at once, with the key's value.
                let value = values[key as usize];
                let end = (threshold <= value).then_some(End::Completed(value));
                reached.threshold_completed += usize::from(end.is_some());
                waits.push(Wait {
                    key,
                    threshold,
                    due: due_at(now + timeout.as_nanos(), tick),
                    handle,
                    end,
                });
            }
            Step::Raise(key, value) => {
                let raised = value > values[key as usize];
                let ending: Vec<usize> = (0..waits.len())
                    .filter(|&i| {
                        raised
                            && waits[i].end.is_none()
                            && waits[i].key == key
                            && waits[i].threshold <= value
                    })
                    .collect();
                prop_assert_eq!(
                    thresholds.advance(&key, value),
                    ending.len(),
                    "advance({}, {})",
                    key,
                    value
                );
                if raised {
                    values[key as usize] = value;
                }
                for i in ending {
                    waits[i].end = Some(End::Completed(value));
                    reached.threshold_completed += 1;
                }
                prop_assert_eq!(thresholds.value(&key), values[key as usize]);
            }
            Step::CancelWait(n) if !waits.is_empty() => {
                let len = waits.len();
                let wait = &mut waits[n % len];
                let handle = match &wait.handle {
                    WaitHandle::Future(Some(future)) => Some(&**future),
                    WaitHandle::Future(None) => None,
                    WaitHandle::Callback(handle) => Some(handle),
                };
                if let Some(handle) = handle {
                    let won = handle.cancel();
                    prop_assert_eq!(won, wait.end.is_none(), "cancel of a wait {:?}", wait.end);
                    if won {
                        wait.end = Some(End::Cancelled);
                    }
                }
            }
            _ => {}
        }

        // Counts.
        let live: Vec<&Operation> = ops.iter().filter(|op| op.live()).collect();
        let live_waits = waits.iter().filter(|w| w.end.is_none()).count();
        prop_assert_eq!(purgatory.delayed(), live.len());
        prop_assert_eq!(
            purgatory.watched(),
            live.iter().map(|op| op.keys.len()).sum::<usize>()
        );
        prop_assert_eq!(thresholds.waiting(), live_waits);
        prop_assert_eq!(
            timer.pending(),
            live.len() + live_waits,
            "the deadlines on the timer"
        );

        // Reports: each ended operation's hook, each ended callback wait's callback, once.
        for (id, end, seen) in reports.lock().unwrap().drain(..) {
            prop_assert_eq!(seen, now, "a hook ran outside a step's clock");
            reported.entry(id).or_default().push((end, seen));
        }
        for (id, op) in ops.iter_mut().enumerate() {
            let got = reported.get(&id).map_or(&[][..], Vec::as_slice);
            let live = op.live();
            match &mut op.handle {
                Handle::Delayed(handle) => {
                    prop_assert_eq!(handle.is_done(), !op.live(), "{} is_done", id);
                    let hooks: Vec<End> = got.iter().map(|&(end, _)| end).collect();
                    // Cancelled: neither hook.
                    let expected: Vec<End> = op
                        .end
                        .into_iter()
                        .filter(|&e| e != End::Cancelled)
                        .collect();
                    prop_assert_eq!(hooks, expected, "{}'s hooks", id);
                    if let Some(&(End::Expired, at)) = got.first() {
                        prop_assert!(at >= op.due, "{} expired at {} before {}", id, at, op.due);
                    }
                }
                Handle::Watch(slot) => {
                    prop_assert!(got.is_empty());
                    if let Some(watch) = slot {
                        prop_assert_eq!(watch.is_done(), !live, "{} is_done", id);
                        match poll_now(watch) {
                            Poll::Pending => {
                                prop_assert!(live, "{} pending after {:?}", id, op.end)
                            }
                            Poll::Ready(outcome) => {
                                prop_assert_eq!(Some(end_of(outcome)), op.end, "{}'s outcome", id);
                                *slot = None; // resolved: never polled again
                            }
                        }
                    }
                }
            }
        }
        for (id, wait) in waits.iter_mut().enumerate() {
            let got = reported
                .get(&(usize::MAX - id))
                .map_or(&[][..], Vec::as_slice);
            match &mut wait.handle {
                WaitHandle::Callback(handle) => {
                    prop_assert_eq!(handle.is_done(), wait.end.is_some(), "wait {} is_done", id);
                    let ends: Vec<End> = got.iter().map(|&(end, _)| end).collect();
                    prop_assert_eq!(
                        ends,
                        wait.end.into_iter().collect::<Vec<_>>(),
                        "wait {}'s callback",
                        id
                    );
                    if let Some(&(End::Expired, at)) = got.first() {
                        prop_assert!(
                            at >= wait.due,
                            "wait {} expired at {} before {}",
                            id,
                            at,
                            wait.due
                        );
                    }
                }
                WaitHandle::Future(slot) => {
                    if let Some(future) = slot {
                        prop_assert_eq!(
                            future.is_done(),
                            wait.end.is_some(),
                            "wait {} is_done",
                            id
                        );
                        match poll_now(future) {
                            Poll::Pending => prop_assert!(
                                wait.end.is_none(),
                                "wait {} pending after {:?}",
                                id,
                                wait.end
                            ),
                            Poll::Ready(outcome) => {
                                prop_assert_eq!(
                                    Some(end_of(outcome)),
                                    wait.end,
                                    "wait {}'s outcome",
                                    id
                                );
                                *slot = None;
                            }
                        }
                    }
                }
            }
        }
        prop_assert_eq!(timer.now().duration_since(start).as_nanos(), now);
    }
    // At the end, every live operation and wait is still pending: not done, and counted.
    for op in ops.iter().filter(|op| op.live()) {
        if let Some(handle) = op.handle() {
            prop_assert!(!handle.is_done());
        }
    }
    prop_assert_eq!(
        purgatory.delayed(),
        ops.iter().filter(|op| op.live()).count()
    );
    prop_assert_eq!(
        thresholds.waiting(),
        waits.iter().filter(|w| w.end.is_none()).count()
    );
    Ok(reached)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: support::proptest_cases(4096), ..ProptestConfig::default() })]

    #[test]
    fn purgatories_match_a_model_after_every_step((tick, steps) in case()) {
        check(tick, &steps)?;
    }
}

/// The generator keeps testing: most cases see operations complete by a check and by
/// force, expire, and get cancelled, and threshold waits complete and expire.
#[test]
fn the_purgatory_generator_reaches_every_ending() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    const CASES: usize = 200;
    let mut runner = TestRunner::deterministic();
    let mut totals = [0_usize; 7];
    for _ in 0..CASES {
        let (tick, steps) = case().new_tree(&mut runner).unwrap().current();
        let r = check(tick, &steps).unwrap();
        let seen = [
            r.completed,
            r.forced,
            r.expired,
            r.cancelled,
            r.cancelled_by_key,
            r.threshold_completed,
            r.threshold_expired,
        ];
        for (total, seen) in totals.iter_mut().zip(seen) {
            *total += usize::from(seen > 0);
        }
    }
    // completed, forced, expired, cancelled, by key, threshold completed, expired.
    for (what, total) in totals.iter().enumerate() {
        assert!(
            total * 3 > CASES,
            "ending {what} in only {total} of {CASES} cases: {totals:?}"
        );
    }
}
