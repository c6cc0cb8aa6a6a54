//! Property tests of callbacks (`Timer::schedule`, `schedule_at`) on manual clocks with
//! coarse ticks and small wheels, so that deadlines land on deep levels (hours, days,
//! `Duration::MAX`): random schedules, cancels and advances, small and huge, against a
//! `BTreeMap` oracle checked after every step; and the same invariants with several
//! threads scheduling and cancelling while another advances.
//!
//! The oracle's rounding is the documented one: a deadline (nanoseconds from the clock's
//! origin, saturated at `i64::MAX`) is rounded up to the tick, and a callback runs once
//! the clock has reached that tick.

use tickless_test_support as support;

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::Rng;
use tickless::{Instant, Scheduled, Timer};

/// Where a manual clock stops (see `Timer::advance`): one nanosecond short of `u64::MAX`.
const MANUAL_END: u64 = u64::MAX - 1;

/// What ran: `(id, the clock read inside the callback, in ns from the start)`.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(usize, u128)>>>);

impl Log {
    /// A callback that records its id and the time it saw.
    fn callback(&self, id: usize, timer: &Timer, start: Instant) -> impl FnOnce() + Send + 'static {
        let (log, timer) = (self.0.clone(), timer.clone());
        move || {
            let seen = timer.now().duration_since(start).as_nanos();
            log.lock().unwrap().push((id, seen));
        }
    }

    fn take(&self) -> Vec<(usize, u128)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// The first clock reading (ns from the origin) at which a callback whose deadline is
/// `deadline` ns from the origin runs: the deadline saturated at `i64::MAX` (how a
/// callback keeps it), rounded up to the tick.
fn due_at(deadline: u128, tick: u64) -> u128 {
    let deadline = deadline.min(i64::MAX as u128);
    deadline.div_ceil(u128::from(tick)) * u128::from(tick)
}

/// A delay for `schedule`: from within a few ticks to `Duration::MAX`.
fn delay(tick: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0..8 * tick).prop_map(Duration::from_nanos),
        3 => (0..3_600_000_000_000_u64).prop_map(Duration::from_nanos), // up to an hour
        2 => (0..30 * 86_400_u64).prop_map(Duration::from_secs),        // up to a month
        1 => (0..300 * 365 * 86_400_u64).prop_map(Duration::from_secs), // past i64::MAX ns
        1 => Just(Duration::MAX),
    ]
}

/// How far an advance moves the clock: a few ticks, a tick boundary exactly, hours,
/// days, and rarely a century (which reaches the saturated deadlines).
fn advance(tick: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0..3 * tick).prop_map(Duration::from_nanos),
        2 => (1..4_u64).prop_map(move |n| Duration::from_nanos(n * tick)),
        2 => (0..3_600_000_000_000_u64).prop_map(Duration::from_nanos),
        2 => (0..10 * 86_400_u64).prop_map(Duration::from_secs),
        1 => (0..120 * 365 * 86_400_u64).prop_map(Duration::from_secs),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    /// `schedule(delay)`.
    Schedule(Duration),
    /// `schedule_at(now + delay)` (the `Instant` saturates as tokio's does).
    ScheduleAt(Duration),
    /// `schedule(first)` of a callback that, when it runs, schedules another one
    /// `then` later (from inside the advance that runs it).
    Chain(Duration, Duration),
    /// Cancel the `n % len`-th handle made so far (run, cancelled or pending).
    Cancel(usize),
    Advance(Duration),
    /// Advance to the next tick boundary: a callback scheduled from inside a later advance
    /// to a boundary with no delay is due at once, and runs in that advance.
    AlignToTick,
    /// `advance_to(now + by)`, or `now - by` (which leaves the clock where it is) if `true`.
    AdvanceTo(bool, Duration),
}

fn ops(tick: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        5 => delay(tick).prop_map(Op::Schedule),
        2 => delay(tick).prop_map(Op::ScheduleAt),
        2 => (delay(tick), prop_oneof![Just(Duration::ZERO), delay(tick)])
            .prop_map(|(first, then)| Op::Chain(first, then)),
        1 => Just(Op::AlignToTick),
        2 => (prop::bool::weighted(0.2), advance(tick)).prop_map(|(back, by)| Op::AdvanceTo(back, by)),
        3 => any::<usize>().prop_map(Op::Cancel),
        4 => advance(tick).prop_map(Op::Advance),
    ];
    proptest::collection::vec(op, 1..100)
}

/// Coarse ticks, one not dividing a second, and the small wheel sizes that build the most
/// levels.
fn setup() -> impl Strategy<Value = (u64, usize, Vec<Op>)> {
    (
        prop_oneof![Just(10_000_000_u64), Just(1_000_000_000), Just(7_000_000)],
        prop_oneof![Just(2_usize), Just(4), Just(8)],
    )
        .prop_flat_map(|(tick, size)| (Just(tick), Just(size), ops(tick)))
}

/// What a case reached, so that a test can check the generator still tests something.
#[derive(Debug, Default)]
struct Reached {
    levels: usize,
    /// Callbacks that ran with a deadline more than a day away when scheduled.
    far_runs: usize,
    cancels_won: usize,
    cancels_lost: usize,
    /// Callbacks scheduled by a callback that ran.
    chained: usize,
    /// Of those, the ones due at once, run in the same advance.
    chained_at_once: usize,
}

/// The oracle's view of one callback.
#[derive(Debug)]
struct Model {
    /// The clock reading at which it runs.
    due: u128,
    /// Whether it was scheduled more than a day ahead.
    far: bool,
    /// What happened to it: `None` while pending (or, for the second of a chain, not
    /// yet scheduled).
    ended: Option<Ended>,
    /// For the first of a chain: the id of the second, and its delay.
    then: Option<(usize, Duration)>,
}

#[derive(Debug, PartialEq)]
enum Ended {
    Ran,
    Cancelled,
}

/// Runs `ops` on a manual-clock timer and on the oracle, checking after every step.
fn check(tick: u64, wheel_size: usize, ops: &[Op]) -> Result<Reached, TestCaseError> {
    let timer = Timer::builder()
        .manual_clock()
        .tick(Duration::from_nanos(tick))
        .wheel_size(wheel_size)
        .shards(2)
        .build()
        .unwrap();
    let start = timer.now();
    let log = Log::default();
    let mut now: u64 = 0;
    // `None` for the second of a chain until the first has run and scheduled it.
    let mut handles: Vec<Option<Scheduled>> = Vec::new();
    // The handles of callbacks scheduled by callbacks: `(id, handle)`.
    let chained: Arc<Mutex<Vec<(usize, Scheduled)>>> = Arc::default();
    let mut models: Vec<Model> = Vec::new();
    // due -> ids of the callbacks still pending: the oracle.
    let mut pending: BTreeMap<u128, BTreeSet<usize>> = BTreeMap::new();
    let mut reached = Reached::default();
    for op in ops {
        match *op {
            Op::Schedule(delay) | Op::ScheduleAt(delay) => {
                let id = handles.len();
                let callback = log.callback(id, &timer, start);
                let (handle, deadline) = if let Op::Schedule(_) = op {
                    let handle = timer.schedule(delay, callback).unwrap();
                    // `schedule` adds the delay to the clock's offset, both saturated.
                    let base = u128::from(now.min(i64::MAX as u64));
                    (handle, base + delay.as_nanos().min(i64::MAX as u128))
                } else {
                    let at = timer.now().checked_add(delay);
                    match at {
                        Some(at) => (
                            timer.schedule_at(at, callback).unwrap(),
                            at.duration_since(start).as_nanos(),
                        ),
                        // Past what an `Instant` holds: use the far-future one.
                        None => (
                            timer.schedule(delay, callback).unwrap(),
                            u128::from(now.min(i64::MAX as u64))
                                + delay.as_nanos().min(i64::MAX as u128),
                        ),
                    }
                };
                handles.push(Some(handle));
                let due = due_at(deadline, tick);
                models.push(Model {
                    due,
                    far: delay > Duration::from_secs(86_400),
                    ended: None,
                    then: None,
                });
                pending.entry(due).or_default().insert(id);
            }
            Op::Chain(first, then) => {
                let (id, second) = (handles.len(), handles.len() + 1);
                let run_first = log.callback(id, &timer, start);
                let run_second = log.callback(second, &timer, start);
                let (timer2, chained) = (timer.clone(), chained.clone());
                let callback = move || {
                    run_first();
                    let handle = timer2.schedule(then, run_second).unwrap();
                    chained.lock().unwrap().push((second, handle));
                };
                handles.push(Some(timer.schedule(first, callback).unwrap()));
                handles.push(None);
                let base = u128::from(now.min(i64::MAX as u64));
                let due = due_at(base + first.as_nanos().min(i64::MAX as u128), tick);
                models.push(Model {
                    due,
                    far: first > Duration::from_secs(86_400),
                    ended: None,
                    then: Some((second, then)),
                });
                models.push(Model {
                    due: u128::MAX,
                    far: false,
                    ended: None,
                    then: None,
                });
                pending.entry(due).or_default().insert(id);
            }
            Op::Cancel(n) => {
                if handles.is_empty() {
                    continue;
                }
                let id = n % handles.len();
                let Some(handle) = &handles[id] else { continue };
                let won = handle.cancel();
                let model = &mut models[id];
                // `true` iff it had not run (nor been cancelled).
                prop_assert_eq!(won, model.ended.is_none(), "cancel of {} ({:?})", id, model);
                if won {
                    model.ended = Some(Ended::Cancelled);
                    let ids = pending.get_mut(&model.due).unwrap();
                    ids.remove(&id);
                    if ids.is_empty() {
                        pending.remove(&model.due);
                    }
                    reached.cancels_won += 1;
                } else {
                    reached.cancels_lost += 1;
                }
                prop_assert!(handle.is_cancelled() == (model.ended == Some(Ended::Cancelled)));
            }
            Op::Advance(_) | Op::AlignToTick | Op::AdvanceTo(..) => {
                if let Op::AdvanceTo(back, by) = *op {
                    let target = if back {
                        timer.now().checked_sub(by)
                    } else {
                        timer.now().checked_add(by)
                    };
                    let Some(target) = target else { continue };
                    // Never back; saturated where a manual clock stops.
                    let to = target.saturating_duration_since(start).as_nanos();
                    now = now.max(u64::try_from(to).unwrap_or(u64::MAX).min(MANUAL_END));
                    timer.advance_to(target);
                } else {
                    let by = match *op {
                        Op::Advance(by) => by,
                        _ => Duration::from_nanos((tick - now % tick) % tick),
                    };
                    let by_nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
                    now = now.saturating_add(by_nanos).min(MANUAL_END);
                    timer.advance(by);
                }
                // Exactly the due ones ran, each once, none before its tick.
                let later = pending.split_off(&(u128::from(now) + 1));
                let mut due: BTreeSet<usize> = std::mem::replace(&mut pending, later)
                    .into_values()
                    .flatten()
                    .collect();
                // The seconds of the chains whose first runs now: scheduled from inside
                // this advance, they run in it too if already due then.
                let mut firsts: Vec<usize> = due.iter().copied().collect();
                while let Some(first) = firsts.pop() {
                    if let Some((second, then)) = models[first].then {
                        let base = u128::from(now.min(i64::MAX as u64));
                        let at = due_at(base + then.as_nanos().min(i64::MAX as u128), tick);
                        models[second].due = at;
                        if at <= u128::from(now) {
                            due.insert(second);
                            firsts.push(second);
                            reached.chained_at_once += 1;
                        } else {
                            pending.entry(at).or_default().insert(second);
                        }
                        reached.chained += 1;
                    }
                }
                let ran = log.take();
                let mut ran_ids = BTreeSet::new();
                for &(id, seen) in &ran {
                    prop_assert!(ran_ids.insert(id), "{} ran twice in one advance", id);
                    let model = &mut models[id];
                    prop_assert_eq!(model.ended.as_ref(), None, "{} ran after it ended", id);
                    prop_assert!(
                        seen >= model.due,
                        "{} ran early: at {} before {}",
                        id,
                        seen,
                        model.due
                    );
                    prop_assert_eq!(seen, u128::from(now), "the clock inside the callback");
                    model.ended = Some(Ended::Ran);
                    reached.far_runs += usize::from(model.far);
                }
                prop_assert_eq!(ran_ids, due, "at {} ns", now);
                for (id, handle) in chained.lock().unwrap().drain(..) {
                    prop_assert!(handles[id].replace(handle).is_none());
                }
            }
        }
        prop_assert_eq!(
            timer.pending(),
            pending.values().map(BTreeSet::len).sum::<usize>()
        );
        for (id, handle) in handles.iter().enumerate() {
            if let Some(handle) = handle {
                let ran = models[id].ended == Some(Ended::Ran);
                prop_assert_eq!(handle.has_fired(), ran, "{}", id);
            }
        }
        prop_assert_eq!(
            timer.now().duration_since(start).as_nanos(),
            u128::from(now)
        );
        reached.levels = reached.levels.max(timer.stats().levels);
    }
    Ok(reached)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: support::proptest_cases(4096), ..ProptestConfig::default() })]

    #[test]
    fn callbacks_on_coarse_ticks_and_deep_levels_match_an_oracle(
        (tick, size, ops) in setup(),
    ) {
        check(tick, size, &ops)?;
    }
}

/// The generator keeps testing: drawn as the property draws them, most cases build deep
/// wheels, run callbacks scheduled days ahead, and see cancels both win and lose.
#[test]
fn the_callback_generator_reaches_deep_levels_and_both_cancel_outcomes() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    const CASES: usize = 200;
    let mut runner = TestRunner::deterministic();
    let cases = setup();
    let (mut deep, mut far, mut won, mut lost) = (0, 0, 0, 0);
    let (mut chained, mut at_once) = (0, 0);
    for _ in 0..CASES {
        let (tick, size, ops) = cases.new_tree(&mut runner).unwrap().current();
        let reached = check(tick, size, &ops).unwrap();
        deep += usize::from(reached.levels >= 5);
        far += usize::from(reached.far_runs > 0);
        won += usize::from(reached.cancels_won > 0);
        lost += usize::from(reached.cancels_lost > 0);
        chained += usize::from(reached.chained > 0);
        at_once += usize::from(reached.chained_at_once > 0);
    }
    assert!(
        at_once * 10 > CASES,
        "{at_once} of {CASES} cases ran a chain's second at once"
    );
    assert!(
        chained * 4 > CASES,
        "{chained} of {CASES} cases ran a chain's first"
    );
    assert!(deep * 2 > CASES, "{deep} of {CASES} cases had 5+ levels");
    assert!(
        far * 4 > CASES,
        "{far} of {CASES} cases ran a callback scheduled days ahead"
    );
    assert!(
        won * 2 > CASES && lost * 4 > CASES,
        "cancels won in {won}, lost in {lost} cases"
    );
}

// ---- Several threads schedule and cancel while another advances ----------------------

/// `(thread, n)` -> every clock reading (ns from the start) seen inside that callback:
/// one, if all is well.
type Runs = Arc<Mutex<BTreeMap<(usize, usize), Vec<u128>>>>;

/// One callback as its scheduling thread saw it.
struct Made {
    handle: Scheduled,
    /// Its deadline, ns from the start (`Scheduled::deadline`).
    deadline: u128,
    /// What its first cancel returned, if it was cancelled.
    cancel_won: Option<bool>,
}

fn threads_schedule_and_cancel_while_one_advances(seed: u64, tick: u64, wheel_size: usize) {
    const THREADS: usize = 3;
    const OPS: usize = 3_000;
    let timer = Timer::builder()
        .manual_clock()
        .tick(Duration::from_nanos(tick))
        .wheel_size(wheel_size)
        .shards(4)
        .build()
        .unwrap();
    let start = timer.now();
    let runs: Runs = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // How many advances have run: the schedulers keep pace with it, so that scheduling,
    // cancelling and advancing interleave however the threads are placed.
    let advances = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let advancer = {
        let (timer, stop, advances) = (timer.clone(), stop.clone(), advances.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(seed ^ 0xA11CE);
            let mut steps = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && steps < 1_000_000 {
                let by = match rng.below(4) {
                    0 => rng.below(3 * tick),
                    1 => tick,
                    2 => rng.below(3_600_000_000_000),
                    _ => rng.below(5 * 86_400_000_000_000),
                };
                timer.advance(Duration::from_nanos(by));
                steps += 1;
                advances.store(steps, std::sync::atomic::Ordering::SeqCst);
                std::thread::yield_now();
            }
            steps
        })
    };
    let schedulers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (timer, runs, advances) = (timer.clone(), runs.clone(), advances.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(thread as u64));
                let mut made: Vec<Made> = Vec::new();
                for i in 0..OPS {
                    while advances.load(std::sync::atomic::Ordering::SeqCst) < i / 30 {
                        std::thread::yield_now();
                    }
                    if rng.below(3) == 0 && !made.is_empty() {
                        let n = rng.below(made.len() as u64) as usize;
                        let won = made[n].handle.cancel();
                        made[n].cancel_won.get_or_insert(won);
                        continue;
                    }
                    let delay = match rng.below(5) {
                        0 => Duration::from_nanos(rng.below(8 * tick)),
                        1 => Duration::from_nanos(rng.below(3_600_000_000_000)),
                        2 => Duration::from_secs(rng.below(30 * 86_400)),
                        3 => Duration::from_nanos(rng.below(4 * tick)),
                        _ => Duration::MAX,
                    };
                    let id = (thread, made.len());
                    let runs = runs.clone();
                    let clock = timer.clone();
                    let callback = move || {
                        let seen = clock.now().duration_since(start).as_nanos();
                        runs.lock().unwrap().entry(id).or_default().push(seen);
                    };
                    let handle = if rng.below(2) == 0 {
                        timer.schedule(delay, callback).unwrap()
                    } else {
                        let at = timer.now().checked_add(delay).unwrap_or(timer.now());
                        timer.schedule_at(at, callback).unwrap()
                    };
                    let deadline = handle.deadline().duration_since(start).as_nanos();
                    made.push(Made {
                        handle,
                        deadline,
                        cancel_won: None,
                    });
                }
                made
            })
        })
        .collect();
    let made: Vec<Vec<Made>> = schedulers.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let steps = advancer.join().unwrap();
    // The advances ran while the callbacks were being scheduled and cancelled.
    assert!(
        steps + 1 >= OPS / 30,
        "only {steps} advances during the scheduling"
    );
    // One more advance, a year: everything not saturated far away is due.
    timer.advance(Duration::from_secs(365 * 86_400));
    let end = timer.now().duration_since(start).as_nanos();
    let runs = runs.lock().unwrap();
    let mut still_pending = 0;
    let (mut ran, mut won) = (0, 0);
    for (thread, made) in made.iter().enumerate() {
        for (n, m) in made.iter().enumerate() {
            let seen = runs.get(&(thread, n)).map_or(&[][..], Vec::as_slice);
            let due = due_at(m.deadline, tick);
            assert!(seen.len() <= 1, "{thread}/{n} ran {} times", seen.len());
            if let Some(&at) = seen.first() {
                assert!(at >= due, "{thread}/{n} ran early: at {at}, due {due}");
                assert_ne!(
                    m.cancel_won,
                    Some(true),
                    "{thread}/{n} ran after a winning cancel"
                );
                assert!(m.handle.has_fired() && !m.handle.is_cancelled());
                ran += 1;
            } else if m.cancel_won == Some(true) {
                assert!(m.handle.is_cancelled() && !m.handle.has_fired());
                won += 1;
            } else {
                assert!(due > end, "{thread}/{n} due at {due} but not run by {end}");
                assert!(!m.handle.is_cancelled() && !m.handle.has_fired());
                still_pending += 1;
            }
            // A losing cancel means it had run (or was running): it must have run.
            if m.cancel_won == Some(false) {
                assert_eq!(seen.len(), 1, "{thread}/{n}: cancel lost but it never ran");
            }
        }
    }
    assert_eq!(timer.pending(), still_pending);
    assert!(
        ran > 0 && won > 0 && still_pending > 0,
        "ran {ran}, cancelled {won}, pending {still_pending}"
    );
}

#[test]
fn threads_schedule_and_cancel_while_one_advances_exactly_once_never_early() {
    for (seed, tick, size) in [
        (1, 10_000_000, 2),
        (2, 1_000_000_000, 4),
        (3, 7_000_000, 8),
        (4, 10_000_000, 64),
    ] {
        threads_schedule_and_cancel_while_one_advances(seed, tick, size);
    }
}
