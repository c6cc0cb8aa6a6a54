//! Property tests of `tickless::DelayQueue`: (a) against a model on a manual clock, checked
//! after every step (inserts, resets, removes, stale keys, compaction, advances, partial
//! and full drains); (b) differentially against `tokio_util::time::DelayQueue`, the same
//! random ops on both under tokio's paused clock, comparing what each step expires, with
//! tokio's own `Sleep` as the referee where the two differ (see `differential`).
//!
//! Order: the queue promises bucket order only ("items due at the same tick come in no
//! particular order, and items found due together by a late poll may come a little out of
//! deadline order"), as tokio-util does. So within one drain the model checks the set, and
//! across drains that nothing comes out before it is due: stepping the clock to each
//! deadline in turn (`AdvanceToNext`) then checks deadline order exactly.

use tickless_test_support as support;

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tickless::{DelayQueue, Instant, Timer};

fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

// ---- (a) Against a model on a manual clock --------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Insert(Duration),
    /// `insert_at(now + ns)` or, negative, that far in the past.
    InsertAt(i64),
    /// `remove` (or `try_remove`, on odd `n`) of the `n`th live item.
    Remove(usize),
    Reset(usize, Duration),
    ResetAt(usize, i64),
    /// `try_remove` with the `n`th stale key (removed or expired): `None`.
    TryRemoveStale(usize),
    Compact,
    Advance(Duration),
    /// Advance exactly to the earliest due time of the model, if any.
    AdvanceToNext,
    /// Poll up to this many items (a partial drain).
    Poll(usize),
    /// Poll until `Pending` or the end of the stream.
    Drain,
}

fn timeout(tick: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0..8 * tick).prop_map(Duration::from_nanos),
        2 => (0..1_000_000 * tick).prop_map(Duration::from_nanos),
        1 => (0..30 * 86_400_u64).prop_map(Duration::from_secs),
        1 => Just(Duration::MAX),
    ]
}

fn offset(tick: u64) -> impl Strategy<Value = i64> {
    let tick = tick as i64;
    prop_oneof![
        3 => -8 * tick..8 * tick,
        1 => -1_000_000 * tick..1_000_000 * tick,
    ]
}

fn ops(tick: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        5 => timeout(tick).prop_map(Op::Insert),
        2 => offset(tick).prop_map(Op::InsertAt),
        2 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), timeout(tick)).prop_map(|(n, t)| Op::Reset(n, t)),
        1 => (any::<usize>(), offset(tick)).prop_map(|(n, o)| Op::ResetAt(n, o)),
        1 => any::<usize>().prop_map(Op::TryRemoveStale),
        1 => Just(Op::Compact),
        3 => prop_oneof![
            (0..3 * tick).prop_map(Duration::from_nanos),
            (0..2_000_000 * tick).prop_map(Duration::from_nanos),
            (0..3 * 86_400_u64).prop_map(Duration::from_secs),
        ]
        .prop_map(Op::Advance),
        2 => Just(Op::AdvanceToNext),
        2 => (1..4_usize).prop_map(Op::Poll),
        2 => Just(Op::Drain),
    ];
    proptest::collection::vec(op, 1..100)
}

fn case() -> impl Strategy<Value = (u64, usize, Vec<Op>)> {
    (
        prop_oneof![Just(1_u64), Just(1_000_000), Just(7_000_000)],
        prop_oneof![Just(2_usize), Just(64)],
    )
        .prop_flat_map(|(tick, size)| (Just(tick), Just(size), ops(tick)))
}

/// One item in the model.
struct Item {
    key: tickless::delay_queue::Key,
    /// Its deadline, ns from the start (may be negative: in the past).
    deadline: i128,
    /// The instant that deadline is, when one can hold it.
    instant: Option<Instant>,
}

/// The first clock reading at which an item with this deadline is handed out: rounded up
/// to the tick (a past deadline at once), in ticks saturated at `u64::MAX`.
fn due_at(deadline: i128, tick: u64) -> u128 {
    if deadline <= 0 {
        return 0;
    }
    let ticks = (deadline as u128)
        .div_ceil(u128::from(tick))
        .min(u128::from(u64::MAX));
    ticks * u128::from(tick)
}

#[derive(Debug, Default)]
struct Reached {
    expired: usize,
    stale_checked: usize,
    reset_after_due: usize,
}

fn check(tick: u64, wheel_size: usize, ops: &[Op]) -> Result<Reached, TestCaseError> {
    let timer = Timer::builder()
        .manual_clock()
        .tick(Duration::from_nanos(tick))
        .wheel_size(wheel_size)
        .build()
        .unwrap();
    let start = timer.now();
    let mut queue: DelayQueue<usize> = DelayQueue::with_timer(timer.clone(), 0);
    let mut live: BTreeMap<usize, Item> = BTreeMap::new();
    let mut stale: Vec<tickless::delay_queue::Key> = Vec::new();
    let mut next_id = 0;
    let mut now: u128 = 0;
    let mut reached = Reached::default();
    let instant_at = |ns: i128| -> Option<Instant> {
        if ns >= 0 {
            start.checked_add(Duration::from_nanos(u64::try_from(ns).ok()?))
        } else {
            start.checked_sub(Duration::from_nanos(u64::try_from(-ns).ok()?))
        }
    };
    for op in ops {
        let ids: Vec<usize> = live.keys().copied().collect();
        let pick = |n: usize| ids.get(n % ids.len().max(1)).copied();
        match *op {
            Op::Insert(timeout) => {
                let key = queue.insert(next_id, timeout);
                let deadline = now as i128 + timeout.as_nanos() as i128;
                live.insert(
                    next_id,
                    Item {
                        key,
                        deadline,
                        instant: instant_at(deadline),
                    },
                );
                next_id += 1;
            }
            Op::InsertAt(offset) => {
                let deadline = now as i128 + i128::from(offset);
                let Some(at) = instant_at(deadline) else {
                    continue;
                };
                let key = queue.insert_at(next_id, at);
                live.insert(
                    next_id,
                    Item {
                        key,
                        deadline,
                        instant: Some(at),
                    },
                );
                next_id += 1;
            }
            Op::Remove(n) => {
                let Some(id) = pick(n) else { continue };
                let item = live.remove(&id).unwrap();
                let expired = if n % 2 == 0 {
                    queue.remove(&item.key)
                } else {
                    queue.try_remove(&item.key).expect("a live key")
                };
                prop_assert_eq!(*expired.get_ref(), id);
                prop_assert_eq!(expired.key(), item.key);
                if let Some(instant) = item.instant {
                    prop_assert_eq!(expired.deadline(), instant);
                }
                stale.push(item.key);
            }
            Op::Reset(n, timeout) => {
                let Some(id) = pick(n) else { continue };
                let item = live.get_mut(&id).unwrap();
                reached.reset_after_due += usize::from(due_at(item.deadline, tick) <= now);
                queue.reset(&item.key, timeout);
                item.deadline = now as i128 + timeout.as_nanos() as i128;
                item.instant = instant_at(item.deadline);
            }
            Op::ResetAt(n, offset) => {
                let Some(id) = pick(n) else { continue };
                let item = live.get_mut(&id).unwrap();
                let deadline = now as i128 + i128::from(offset);
                let Some(at) = instant_at(deadline) else {
                    continue;
                };
                reached.reset_after_due += usize::from(due_at(item.deadline, tick) <= now);
                queue.reset_at(&item.key, at);
                item.deadline = deadline;
                item.instant = Some(at);
            }
            Op::TryRemoveStale(n) => {
                if stale.is_empty() {
                    continue;
                }
                let key = stale[n % stale.len()];
                prop_assert!(
                    queue.try_remove(&key).is_none(),
                    "a stale key removed an item"
                );
                reached.stale_checked += 1;
            }
            Op::Compact => queue.compact(),
            Op::Advance(by) => {
                now += by.as_nanos();
                timer.advance(by);
            }
            Op::AdvanceToNext => {
                let Some(next) = live.values().map(|i| due_at(i.deadline, tick)).min() else {
                    continue;
                };
                // Not past where a manual clock stops.
                if next > now && next < u128::from(u64::MAX - 1) {
                    timer.advance(Duration::from_nanos((next - now) as u64));
                    now = next;
                }
            }
            Op::Poll(_) | Op::Drain => {
                let limit = if let Op::Poll(n) = *op { n } else { usize::MAX };
                let mut taken = 0;
                while taken < limit {
                    let due: BTreeSet<usize> = live
                        .iter()
                        .filter(|(_, i)| due_at(i.deadline, tick) <= now)
                        .map(|(&id, _)| id)
                        .collect();
                    match queue.poll_expired(&mut cx()) {
                        Poll::Ready(Some(expired)) => {
                            let id = *expired.get_ref();
                            prop_assert!(
                                due.contains(&id),
                                "{} handed out at {} but not due ({:?})",
                                id,
                                now,
                                live.get(&id).map(|i| i.deadline)
                            );
                            let item = live.remove(&id).unwrap();
                            prop_assert_eq!(expired.key(), item.key);
                            if let Some(instant) = item.instant {
                                prop_assert_eq!(expired.deadline(), instant);
                            }
                            stale.push(item.key);
                            reached.expired += 1;
                            taken += 1;
                        }
                        Poll::Ready(None) => {
                            prop_assert!(
                                live.is_empty(),
                                "the stream ended with {} items held",
                                live.len()
                            );
                            break;
                        }
                        Poll::Pending => {
                            prop_assert!(due.is_empty(), "pending at {} with {:?} due", now, due);
                            prop_assert!(!live.is_empty());
                            break;
                        }
                    }
                }
            }
        }
        prop_assert_eq!(queue.len(), live.len());
        prop_assert_eq!(queue.is_empty(), live.is_empty());
        prop_assert_eq!(queue.peek().is_some(), !live.is_empty());
        for item in live.values() {
            if let Some(instant) = item.instant {
                prop_assert_eq!(queue.deadline(&item.key), instant);
            }
        }
    }
    Ok(reached)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: support::proptest_cases(4096), ..ProptestConfig::default() })]

    #[test]
    fn delay_queue_matches_a_model_after_every_step((tick, size, ops) in case()) {
        check(tick, size, &ops)?;
    }
}

/// The generator keeps testing: most cases expire items, check stale keys, and reset
/// items that were already due.
#[test]
fn the_delay_queue_generator_expires_resets_and_checks_stale_keys() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    const CASES: usize = 200;
    let mut runner = TestRunner::deterministic();
    let (mut expired, mut stale, mut reset) = (0, 0, 0);
    for _ in 0..CASES {
        let (tick, size, ops) = case().new_tree(&mut runner).unwrap().current();
        let r = check(tick, size, &ops).unwrap();
        expired += usize::from(r.expired > 0);
        stale += usize::from(r.stale_checked > 0);
        reset += usize::from(r.reset_after_due > 0);
    }
    assert!(
        expired * 4 > CASES * 3,
        "{expired} of {CASES} cases expired an item"
    );
    assert!(
        stale * 3 > CASES,
        "{stale} of {CASES} cases tried a stale key"
    );
    assert!(
        reset * 5 > CASES,
        "{reset} of {CASES} cases reset a due item"
    );
}

// ---- (b) Differential: tokio-util's DelayQueue on tokio's paused clock -----------------

#[derive(Clone, Debug)]
enum Diff {
    Insert(Duration),
    /// `insert_at(now + d)`, or `now - d` (in the past) if `true`.
    InsertAt(Duration, bool),
    Remove(usize),
    Reset(usize, Duration),
    /// `reset_at(now + d)`, or `now - d` if `true`.
    ResetAt(usize, Duration, bool),
    Advance(Duration),
}

fn diff_ops() -> impl Strategy<Value = Vec<Diff>> {
    // Whole milliseconds and arbitrary nanoseconds: both rounded onto tokio's 1 ms grid.
    let duration = prop_oneof![
        3 => (0..20_u64).prop_map(Duration::from_millis),
        3 => (0..20_000_000_u64).prop_map(Duration::from_nanos),
        1 => (0..600_000_u64).prop_map(Duration::from_millis),
        1 => (0..2 * 86_400_u64).prop_map(Duration::from_secs),
    ];
    let op = prop_oneof![
        5 => duration.clone().prop_map(Diff::Insert),
        1 => any::<usize>().prop_map(Diff::Remove),
        2 => (any::<usize>(), duration.clone()).prop_map(|(n, d)| Diff::Reset(n, d)),
        2 => (duration.clone(), prop::bool::weighted(0.3)).prop_map(|(d, past)| Diff::InsertAt(d, past)),
        1 => (any::<usize>(), duration.clone(), prop::bool::weighted(0.3))
            .prop_map(|(n, d, past)| Diff::ResetAt(n, d, past)),
        4 => duration.prop_map(Diff::Advance),
    ];
    proptest::collection::vec(op, 1..60)
}

/// How far tokio's paused clock has moved off its millisecond grid when the queues are
/// made: none, or part of a millisecond.
fn skew() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (1..1_000_000_u64).prop_map(Duration::from_nanos)
    ]
}

/// An item of the differential: its keys in both queues while each holds it, its
/// deadline, and when each queue handed it out.
struct Both {
    ours: Option<tickless::delay_queue::Key>,
    theirs: Option<tokio_util::time::delay_queue::Key>,
    deadline: tokio::time::Instant,
    ours_at: Option<tokio::time::Instant>,
    theirs_at: Option<tokio::time::Instant>,
    /// tokio-util handed it out on the step of its last insert or reset.
    theirs_at_once: bool,
    /// The step of its last insert or reset.
    since: usize,
}

/// Runs `ops` on both queues, made `skew` past a point of tokio's millisecond grid, then
/// drains both; returns how many items expired.
///
/// The referee is tokio's own `Sleep`: a deadline is rounded up onto tokio's 1 ms grid and
/// fires once the clock reaches that point. tickless puts its default timer's origin on
/// that grid, so it must hand out each item at the first step at which a `Sleep` for the
/// item's deadline would have fired: never early, never later (checked exactly here).
/// Both queues are never early (no item before its deadline).
///
/// With `skew` zero, tokio-util's start is on the grid too, and both queues hand out the
/// same items at every step (checked). Off the grid they differ, in both directions
/// (pinned by `off_the_grid_tickless_hands_out_when_tokios_sleep_fires`): tokio-util rounds
/// a deadline up to a whole millisecond from its own start and then its `Sleep` rounds that
/// instant up again onto the grid, so it can hand out an item up to a millisecond after a
/// `Sleep` would fire, and so later than tickless; and it hands out at once an item whose
/// deadline is exactly on its own (shifted) grid at a millisecond it has already reached
/// (a zero timeout, say), before a `Sleep` of the same deadline fires, and so before
/// tickless. So the check against tokio-util is: tickless never later, except for such an
/// item, which tokio-util handed out at once on insert or reset.
fn differential(skew: Duration, ops: &[Diff]) -> Result<usize, TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        // A point of tokio's grid: the paused clock starts on one.
        let origin = tokio::time::Instant::now();
        let grid_ceil = |deadline: tokio::time::Instant| {
            let ms = (deadline - origin).as_nanos().div_ceil(1_000_000);
            origin + Duration::from_millis(ms as u64)
        };
        tokio::time::advance(skew).await;
        let mut ours: DelayQueue<usize> = DelayQueue::new();
        let mut theirs: tokio_util::time::DelayQueue<usize> = tokio_util::time::DelayQueue::new();
        let mut items: Vec<Both> = Vec::new();
        let mut expired = 0;
        let last = Diff::Advance(Duration::from_secs(3 * 86_400));
        for (step, op) in ops.iter().chain([&last]).enumerate() {
            let now = tokio::time::Instant::now();
            // Items both queues still hold: the ones to remove or reset.
            let held: Vec<usize> = (0..items.len())
                .filter(|&i| items[i].ours.is_some() && items[i].theirs.is_some())
                .collect();
            let pick = |n: usize| held.get(n % held.len().max(1)).copied();
            match *op {
                Diff::Insert(timeout) => {
                    let id = items.len();
                    items.push(Both {
                        ours: Some(ours.insert(id, timeout)),
                        theirs: Some(theirs.insert(id, timeout)),
                        deadline: now + timeout,
                        ours_at: None,
                        theirs_at: None,
                        theirs_at_once: false,
                        since: step,
                    });
                }
                Diff::InsertAt(d, past) => {
                    let at = if past {
                        now.checked_sub(d).unwrap_or(now)
                    } else {
                        now + d
                    };
                    let id = items.len();
                    items.push(Both {
                        ours: Some(ours.insert_at(id, at)),
                        theirs: Some(theirs.insert_at(id, at)),
                        deadline: at,
                        ours_at: None,
                        theirs_at: None,
                        theirs_at_once: false,
                        since: step,
                    });
                }
                Diff::ResetAt(n, d, past) => {
                    let Some(id) = pick(n) else { continue };
                    let at = if past {
                        now.checked_sub(d).unwrap_or(now)
                    } else {
                        now + d
                    };
                    let item = &mut items[id];
                    ours.reset_at(item.ours.as_ref().unwrap(), at);
                    theirs.reset_at(item.theirs.as_ref().unwrap(), at);
                    item.deadline = at;
                    item.since = step;
                }
                Diff::Remove(n) => {
                    let Some(id) = pick(n) else { continue };
                    let item = &mut items[id];
                    prop_assert_eq!(ours.remove(&item.ours.take().unwrap()).into_inner(), id);
                    prop_assert_eq!(theirs.remove(&item.theirs.take().unwrap()).into_inner(), id);
                }
                Diff::Reset(n, timeout) => {
                    let Some(id) = pick(n) else { continue };
                    let item = &mut items[id];
                    ours.reset(item.ours.as_ref().unwrap(), timeout);
                    theirs.reset(item.theirs.as_ref().unwrap(), timeout);
                    item.deadline = now + timeout;
                    item.since = step;
                }
                Diff::Advance(by) => tokio::time::advance(by).await,
            }
            // What each queue hands out now.
            let now = tokio::time::Instant::now();
            let mut drain_ours = BTreeSet::new();
            while let Poll::Ready(Some(out)) = ours.poll_expired(&mut cx()) {
                let item = &mut items[*out.get_ref()];
                prop_assert!(
                    grid_ceil(item.deadline) <= now,
                    "ours early: {:?} before {:?}",
                    now,
                    item.deadline
                );
                item.ours = None;
                item.ours_at = Some(now);
                drain_ours.insert(*out.get_ref());
            }
            let mut drain_theirs = BTreeSet::new();
            while let Poll::Ready(Some(out)) = theirs.poll_expired(&mut cx()) {
                let item = &mut items[*out.get_ref()];
                prop_assert!(
                    item.deadline <= now,
                    "theirs early: {:?} before {:?}",
                    now,
                    item.deadline
                );
                item.theirs = None;
                item.theirs_at = Some(now);
                item.theirs_at_once = item.since == step;
                drain_theirs.insert(*out.get_ref());
            }
            // Not late: tickless holds nothing a `Sleep` would have fired for.
            for (id, item) in items.iter().enumerate() {
                if item.ours.is_some() {
                    prop_assert!(
                        grid_ceil(item.deadline) > now,
                        "{} late at step {}",
                        id,
                        step
                    );
                }
            }
            if skew.is_zero() {
                prop_assert_eq!(&drain_ours, &drain_theirs, "step {} ({:?})", step, op);
            }
            expired += drain_ours.len();
        }
        prop_assert!(
            ours.is_empty() && theirs.is_empty(),
            "the last advance drains both"
        );
        for (id, item) in items.iter().enumerate() {
            prop_assert_eq!(
                item.ours_at.is_some(),
                item.theirs_at.is_some(),
                "{} expired in one only",
                id
            );
            if let (Some(ours_at), Some(theirs_at)) = (item.ours_at, item.theirs_at) {
                prop_assert!(
                    ours_at <= theirs_at || (item.theirs_at_once && !skew.is_zero()),
                    "{} later than tokio-util's",
                    id
                );
            }
        }
        Ok(expired)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: support::proptest_cases(2048), ..ProptestConfig::default() })]

    #[test]
    fn delay_queue_hands_out_when_tokios_sleep_fires_and_agrees_with_tokio_util(skew in skew(), ops in diff_ops()) {
        differential(skew, &ops)?;
    }
}

/// The differential generator keeps testing: most cases expire items.
#[test]
fn the_differential_generator_expires_items() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    const CASES: usize = 100;
    let mut runner = TestRunner::deterministic();
    let mut expiring = 0;
    for _ in 0..CASES {
        let (skew, ops) = (skew(), diff_ops())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        expiring += usize::from(differential(skew, &ops).unwrap() > 0);
    }
    assert!(
        expiring * 3 > CASES * 2,
        "{expiring} of {CASES} cases expired an item"
    );
}

/// The two differences the differential allows, pinned, with tokio's own `Sleep` as the
/// referee: with the queues made half a millisecond past a grid point, an item due 0.9 ms
/// after that point comes out of tickless at 1 ms, when a `Sleep` for the same deadline
/// fires, and later out of tokio-util (rounded from its start to 1.5 ms, then onto the
/// grid: 2 ms); an item with a zero timeout comes out of tokio-util at once (its deadline
/// is on tokio-util's own millisecond grid, already reached), and out of tickless when a
/// `Sleep` of zero fires: at the next grid point. Neither is ever early.
#[test]
fn off_the_grid_tickless_hands_out_when_tokios_sleep_fires() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::advance(Duration::from_micros(500)).await;
        let mut ours: DelayQueue<u32> = DelayQueue::new();
        let mut theirs: tokio_util::time::DelayQueue<u32> = tokio_util::time::DelayQueue::new();
        let mut sleeps = [Duration::ZERO, Duration::from_micros(400)]
            .map(|timeout| Box::pin(tokio::time::sleep(timeout)));
        for (id, timeout) in [(0, Duration::ZERO), (1, Duration::from_micros(400))] {
            ours.insert(id, timeout);
            theirs.insert(id, timeout);
        }
        let drain = |ours: &mut DelayQueue<u32>, theirs: &mut tokio_util::time::DelayQueue<u32>| {
            let mut out = (Vec::new(), Vec::new());
            while let Poll::Ready(Some(e)) = ours.poll_expired(&mut cx()) {
                out.0.push(e.into_inner());
            }
            while let Poll::Ready(Some(e)) = theirs.poll_expired(&mut cx()) {
                out.1.push(e.into_inner());
            }
            out
        };
        let fired = |sleeps: &mut [std::pin::Pin<Box<tokio::time::Sleep>>; 2]| {
            sleeps
                .each_mut()
                .map(|sleep| sleep.as_mut().poll(&mut cx()).is_ready())
        };
        // 0.5 ms: tokio-util hands out the zero timeout; no `Sleep` has fired.
        assert_eq!(drain(&mut ours, &mut theirs), (vec![], vec![0]));
        assert_eq!(fired(&mut sleeps), [false, false]);
        // 1 ms, the grid point: both `Sleep`s fire, and tickless hands out both items.
        tokio::time::advance(Duration::from_micros(500)).await;
        assert_eq!(fired(&mut sleeps), [true, true]);
        let (mut ours_out, theirs_out) = drain(&mut ours, &mut theirs);
        ours_out.sort_unstable();
        assert_eq!((ours_out, theirs_out), (vec![0, 1], vec![]));
        // 2 ms: tokio-util hands out the other.
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(drain(&mut ours, &mut theirs), (vec![], vec![1]));
    });
}
