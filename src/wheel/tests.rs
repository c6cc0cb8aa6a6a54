//! Unit tests of the wheel, and the property test against a `BTreeMap` oracle.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn drain_ready<T>(wheel: &mut Wheel<T>) -> Vec<usize> {
    std::iter::from_fn(|| wheel.pop_ready().map(|(key, _)| key)).collect()
}

#[test]
fn worked_example_from_the_module_docs() {
    let mut wheel = Wheel::new(64);
    let (key, placed) = wheel.insert(5000, ());
    assert_eq!(placed, Placed::Pending { queued: Some(4096) });
    assert_eq!(wheel.levels(), 3);
    assert_eq!(wheel.next_expiration(), Some(4096));

    wheel.advance(4096);
    assert_eq!(wheel.next_expiration(), Some(4992));
    wheel.advance(4992);
    assert_eq!(wheel.next_expiration(), Some(5000));
    assert!(!wheel.has_fired(key));
    wheel.advance(4999);
    assert!(!wheel.has_fired(key), "never early");
    wheel.advance(5000);
    assert!(wheel.has_fired(key));
    assert_eq!(drain_ready(&mut wheel), [key]);
    assert_eq!(wheel.next_expiration(), None);
    let counters = wheel.counters();
    assert_eq!(counters.buckets_flushed, 3);
    assert_eq!(counters.entries_demoted, 2);
    assert_eq!(counters.entries_fired, 1);
    wheel.check_invariants();
}

#[test]
fn late_advance_demotes_straight_to_the_right_level() {
    let mut wheel = Wheel::new(64);
    wheel.insert(5000, ());
    wheel.advance(4999);
    assert_eq!(wheel.next_expiration(), Some(5000));
    assert_eq!(wheel.counters().entries_demoted, 1);
    wheel.check_invariants();
}

#[test]
fn due_deadline_goes_straight_to_ready() {
    let mut wheel = Wheel::new(4);
    wheel.advance(10);
    for deadline in [0, 9, 10] {
        let (key, placed) = wheel.insert(deadline, ());
        assert_eq!(placed, Placed::Ready);
        assert!(wheel.has_fired(key));
    }
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!(drain_ready(&mut wheel).len(), 3);
    wheel.check_invariants();
}

#[test]
fn bucket_is_queued_once_however_many_entries_churn() {
    let mut wheel = Wheel::new(64);
    let (first, placed) = wheel.insert(10_000, ());
    assert!(matches!(placed, Placed::Pending { queued: Some(_) }));
    for _ in 0..1000 {
        let (key, placed) = wheel.insert(10_000, ());
        assert_eq!(placed, Placed::Pending { queued: None });
        wheel.try_remove(key);
    }
    wheel.try_remove(first);
    // The emptied bucket still has its one queue item; it is dropped at the head.
    assert_eq!(wheel.queue.items().count(), 1);
    let (_, placed) = wheel.insert(10_000, ());
    assert_eq!(placed, Placed::Pending { queued: None });
    wheel.check_invariants();
}

#[test]
fn emptied_bucket_is_skipped_by_next_expiration() {
    let mut wheel = Wheel::new(64);
    let (near, _) = wheel.insert(10, ());
    wheel.insert(50, ());
    wheel.try_remove(near);
    assert_eq!(wheel.next_expiration(), Some(50));
    assert_eq!(wheel.queue.items().count(), 1);
    wheel.check_invariants();
}

#[test]
fn remove_frees_the_slot_in_every_state() {
    let mut wheel = Wheel::new(8);
    let (pending, _) = wheel.insert(100, 'p');
    let (ready, _) = wheel.insert(1, 'r');
    let (fired, _) = wheel.insert(2, 'f');
    wheel.advance(2);
    assert_eq!(wheel.pop_ready().map(|(key, _)| key), Some(ready));
    assert_eq!(wheel.try_remove(fired), Some('f'));
    assert_eq!(wheel.try_remove(ready), Some('r'));
    assert_eq!(wheel.try_remove(pending), Some('p'));
    assert_eq!(wheel.try_remove(pending), None);
    assert_eq!(wheel.len(), 0);
    assert_eq!(drain_ready(&mut wheel), Vec::<usize>::new());
    wheel.check_invariants();
}

#[test]
fn reset_moves_earlier_later_and_back_from_fired() {
    let mut wheel = Wheel::new(4);
    let (key, _) = wheel.insert(100, ());
    assert!(matches!(wheel.reset(key, 3), Placed::Pending { .. }));
    wheel.check_invariants();
    wheel.advance(3);
    assert_eq!(drain_ready(&mut wheel), [key]);
    assert!(matches!(wheel.reset(key, 1_000), Placed::Pending { .. }));
    assert!(!wheel.has_fired(key));
    wheel.check_invariants();
    assert_eq!(wheel.reset(key, 2), Placed::Ready);
    wheel.check_invariants();
}

#[test]
fn u64_max_deadline_fits_and_fires_only_at_u64_max() {
    for size in [2, 4, 64, 1 << 16] {
        let mut wheel = Wheel::new(size);
        let (key, _) = wheel.insert(u64::MAX, ());
        assert_eq!(wheel.levels(), level::max_levels(wheel.shift));
        wheel.advance(u64::MAX - 1);
        assert!(!wheel.has_fired(key));
        wheel.check_invariants();
        wheel.advance(u64::MAX);
        assert!(wheel.has_fired(key), "size {size}");
        wheel.check_invariants();
    }
}

#[test]
fn wakeups_follow_non_empty_buckets_not_ticks() {
    // One timer at 10 and one at 3,600,000 (1 h of 1 ms ticks): a handful of advances.
    let mut wheel = Wheel::new(64);
    wheel.insert(10, ());
    wheel.insert(3_600_000, ());
    let mut advances = 0;
    while let Some(next) = wheel.next_expiration() {
        wheel.advance(next);
        advances += 1;
    }
    assert_eq!(wheel.counters().entries_fired, 2);
    assert!(advances <= 6, "{advances} advances");
}

#[test]
#[should_panic(expected = "power of two")]
fn wheel_size_must_be_a_power_of_two() {
    Wheel::<()>::new(48);
}

// ---- property test against an oracle --------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// Insert at `elapsed + delta`.
    Insert(u64),
    /// Cancel the `n % len`-th live timer.
    Cancel(usize),
    /// Reset the `n % len`-th live timer to `elapsed + delta`.
    Reset(usize, u64),
    /// Advance by `delta`.
    Advance(u64),
    /// Advance to the next expiration, as the driver does.
    AdvanceToNext,
    /// Move every entry to the lowest keys.
    Compact,
}

/// Deltas from "now" to a few ticks, to far enough for 5+ levels, to the top of `u64`.
fn delta() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..8_u64,
        4 => 0..300_u64,
        2 => 0..100_000_u64,
        1 => 0..(1_u64 << 40),
        1 => Just(u64::MAX),
    ]
}

/// How far the clock moves: far (2^40 ticks builds and crosses deep levels), but never
/// to the end of time, after which every insert would be due at once and the rest of
/// the case would test nothing. The top of `u64` is reached by cases that start near it.
fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..8_u64,
        4 => 0..300_u64,
        2 => 0..100_000_u64,
        1 => 0..(1_u64 << 40),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => delta().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => (any::<usize>(), delta()).prop_map(|(n, d)| Op::Reset(n, d)),
        3 => advance().prop_map(Op::Advance),
        2 => Just(Op::AdvanceToNext),
        1 => Just(Op::Compact),
    ]
}

/// Where a case's clock starts: at 0, anywhere, or close enough to the top of `u64` that
/// its advances reach it.
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => Just(0_u64),
        1 => any::<u64>(),
        1 => (0..(1_u64 << 44)).prop_map(|back| u64::MAX - back),
    ]
}

/// What a case reached, so that a test can check the generator still tests something.
#[derive(Debug, Default)]
struct Reached {
    /// The most levels the wheel had.
    levels: usize,
    /// Entries fired (or demoted) while the wheel had 5 levels or more.
    deep_moves: u64,
    /// Ops run after the clock reached `u64::MAX` (where nothing can be pending).
    ops_at_the_end_of_time: usize,
}

/// Runs `ops` on a wheel and on a `BTreeMap` of deadlines and compares them at every step.
fn check_against_oracle(wheel_size: usize, start: u64, ops: &[Op]) -> Reached {
    let mut wheel = Wheel::new(wheel_size);
    let mut reached = Reached::default();
    // key -> deadline of every entry not yet fired.
    let mut pending: BTreeMap<usize, u64> = BTreeMap::new();
    let mut fired: BTreeSet<usize> = BTreeSet::new();
    let mut now = start;
    wheel.advance(now);
    for op in ops {
        if now == u64::MAX {
            reached.ops_at_the_end_of_time += 1;
        }
        let moved = |wheel: &Wheel<u64>| {
            let counters = wheel.counters();
            counters.entries_fired + counters.entries_demoted
        };
        let moved_before = moved(&wheel);
        match *op {
            Op::Insert(delta) => {
                let deadline = now.saturating_add(delta);
                let (key, placed) = wheel.insert(deadline, deadline);
                assert_eq!(placed == Placed::Ready, deadline <= now);
                if placed == Placed::Ready {
                    fired.insert(key);
                } else {
                    pending.insert(key, deadline);
                }
            }
            Op::Cancel(n) => {
                let live: Vec<usize> = pending.keys().chain(&fired).copied().collect();
                if let Some(&key) = live.get(n % live.len().max(1)) {
                    assert!(wheel.try_remove(key).is_some());
                    pending.remove(&key);
                    fired.remove(&key);
                }
            }
            Op::Reset(n, delta) => {
                let live: Vec<usize> = pending.keys().chain(&fired).copied().collect();
                if let Some(&key) = live.get(n % live.len().max(1)) {
                    let deadline = now.saturating_add(delta);
                    *wheel.get_mut(key).unwrap() = deadline;
                    pending.remove(&key);
                    fired.remove(&key);
                    if wheel.reset(key, deadline) == Placed::Ready {
                        fired.insert(key);
                    } else {
                        pending.insert(key, deadline);
                    }
                }
            }
            Op::Advance(delta) => {
                now = now.saturating_add(delta);
                wheel.advance(now);
            }
            Op::Compact => {
                let moves: BTreeMap<usize, usize> = wheel.compact().into_iter().collect();
                let remap = |key: usize| moves.get(&key).copied().unwrap_or(key);
                pending = pending.into_iter().map(|(k, d)| (remap(k), d)).collect();
                fired = fired.into_iter().map(remap).collect();
                assert!(
                    (0..wheel.len()).all(|key| wheel.get(key).is_some()),
                    "entries packed into the lowest keys"
                );
            }
            Op::AdvanceToNext => {
                let next = wheel.next_expiration();
                let earliest = pending.values().min().copied();
                // The head bucket never expires after the earliest pending deadline.
                assert_eq!(next.is_some(), earliest.is_some());
                if let (Some(next), Some(earliest)) = (next, earliest) {
                    assert!(next <= earliest, "next {next} after earliest {earliest}");
                    assert!(next > now, "a due bucket left unflushed at {now}");
                    // No empty wakeups: the next expiration is exactly the earliest
                    // non-empty bucket's. A tick before it, nothing moves; at it, an
                    // entry fires or moves down a level.
                    let before = (wheel.counters().buckets_flushed, moved(&wheel));
                    wheel.advance(next - 1);
                    assert_eq!(
                        (wheel.counters().buckets_flushed, moved(&wheel)),
                        before,
                        "a bucket flushed before the next expiration {next}"
                    );
                    now = next;
                    wheel.advance(now);
                    assert!(
                        moved(&wheel) > before.1,
                        "woken at {next} for an empty bucket"
                    );
                }
            }
        }
        // The oracle's due set moves to fired; the wheel must have fired exactly those.
        let due: Vec<usize> = pending
            .iter()
            .filter(|&(_, &deadline)| deadline <= now)
            .map(|(&key, _)| key)
            .collect();
        for key in due {
            pending.remove(&key);
            fired.insert(key);
        }
        for (&key, &deadline) in &pending {
            assert!(
                !wheel.has_fired(key),
                "{key} fired before {deadline} at {now}"
            );
        }
        for &key in &fired {
            assert!(wheel.has_fired(key), "{key} due at {now} but not fired");
            assert!(*wheel.get(key).unwrap() <= now);
        }
        assert_eq!(wheel.len(), pending.len() + fired.len(), "entry lost");
        // peek_earliest: a ready entry while any is ready, else a pending one with the
        // smallest deadline.
        let ready: Vec<usize> = wheel
            .ready
            .iter(&wheel.entries)
            .map(|k| k as usize)
            .collect();
        match wheel.peek_earliest() {
            Some(key) if !ready.is_empty() => assert_eq!(key, ready[0]),
            Some(key) => assert_eq!(Some(&pending[&key]), pending.values().min()),
            None => assert!(ready.is_empty() && pending.is_empty()),
        }
        wheel.check_invariants();
        reached.levels = reached.levels.max(wheel.levels());
        if wheel.levels() >= 5 {
            reached.deep_moves += moved(&wheel) - moved_before;
        }
        // Hand out the ready list now and then, as the driver does.
        if now % 3 == 0 {
            drain_ready(&mut wheel);
        }
    }
    reached
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(4_000)
}

proptest! {
    // Three wheel sizes of 4,000 cases each: 12,000 cases per run.
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn size_2_matches_oracle(start in start(), ops in proptest::collection::vec(op(), 1..120)) {
        check_against_oracle(2, start, &ops);
    }

    #[test]
    fn size_4_matches_oracle(start in start(), ops in proptest::collection::vec(op(), 1..120)) {
        check_against_oracle(4, start, &ops);
    }

    #[test]
    fn size_64_matches_oracle(start in start(), ops in proptest::collection::vec(op(), 1..120)) {
        check_against_oracle(64, start, &ops);
    }
}

/// The generator keeps testing: drawn the way the property tests draw them, most cases
/// build 5+ levels and fire or demote entries there, and almost none spend ops at the end
/// of time (where every insert is due at once).
#[test]
fn the_generator_reaches_deep_levels_and_rarely_the_end_of_time() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    const CASES: usize = 400;
    let mut runner = TestRunner::deterministic();
    let cases = (start(), proptest::collection::vec(op(), 1..120));
    for size in [2, 4, 64] {
        let (mut deep, mut deep_moves, mut wasted, mut ops) = (0, 0, 0, 0);
        for _ in 0..CASES {
            let (start, case) = cases.new_tree(&mut runner).unwrap().current();
            let reached = check_against_oracle(size, start, &case);
            deep += usize::from(reached.levels >= 5);
            deep_moves += usize::from(reached.deep_moves > 0);
            wasted += reached.ops_at_the_end_of_time;
            ops += case.len();
        }
        assert!(
            deep * 2 > CASES,
            "size {size}: {deep} of {CASES} cases had 5+ levels"
        );
        assert!(
            deep_moves * 4 > CASES,
            "size {size}: {deep_moves} of {CASES} cases fired or demoted at 5+ levels"
        );
        assert!(
            wasted * 20 < ops,
            "size {size}: {wasted} of {ops} ops ran with the clock at u64::MAX"
        );
    }
}

#[test]
fn a_late_advance_hands_out_earlier_buckets_first() {
    let mut wheel = Wheel::new(64);
    let mut deadline_of = BTreeMap::new();
    // The first bucket's entries sit deeper in the last lanes than in the first ones (its
    // first four keys are removed), so a walk that mixed buckets lane by lane would hand
    // out the second bucket's entries (reusing those keys) before the first's.
    let first: Vec<usize> = (0..16).map(|_| wheel.insert(10, ()).0).collect();
    for &key in &first[..4] {
        wheel.try_remove(key);
    }
    for &key in &first[4..] {
        deadline_of.insert(key, 10);
    }
    for deadline in [20, 100] {
        for _ in 0..20 {
            let (key, _) = wheel.insert(deadline, ());
            deadline_of.insert(key, deadline);
        }
    }
    wheel.advance(200);
    let deadlines: Vec<u64> = drain_ready(&mut wheel)
        .into_iter()
        .map(|key| deadline_of[&key])
        .collect();
    let mut sorted = deadlines.clone();
    sorted.sort_unstable();
    assert_eq!(deadlines, sorted, "bucket by bucket, in expiration order");
    assert_eq!(deadlines.len(), 52);
}

#[test]
fn a_timer_entry_is_32_bytes_in_the_slab() {
    use std::mem::size_of;
    use std::task::Waker;
    assert_eq!(size_of::<Entry<Waker>>(), 32);
    // The slab wraps each entry in an enum like this one; the waker's non-null vtable
    // pointer gives it a niche, so the wrapper adds no tag.
    #[allow(dead_code)]
    enum SlabEntry<T> {
        Vacant(usize),
        Occupied(T),
    }
    assert_eq!(size_of::<SlabEntry<Entry<Waker>>>(), 32);
}

#[test]
fn handing_out_on_advance_gives_what_the_ready_list_would_in_its_order() {
    // Two wheels given the same inserts and cancels; one advanced as before and its ready
    // list drained, the other handing out as it advances.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for size in [2, 4, 64] {
        let (mut listed, mut handing) = (Wheel::new(size), Wheel::new(size));
        let mut now = 0;
        for _ in 0..200 {
            for _ in 0..(next() % 20) {
                let deadline = now + next() % 10_000;
                let (a, _) = listed.insert(deadline, deadline);
                let (b, _) = handing.insert(deadline, deadline);
                assert_eq!(a, b);
                if next() % 4 == 0 {
                    assert_eq!(listed.try_remove(a), handing.try_remove(b));
                }
            }
            now += next() % 700;
            listed.advance(now);
            let expected: Vec<(usize, u64)> =
                std::iter::from_fn(|| listed.pop_ready().map(|(key, d)| (key, *d))).collect();
            let mut got = Vec::new();
            handing.advance_handing_out(now, |key, deadline| got.push((key, *deadline)));
            assert_eq!(got, expected, "handed out at {now}");
            assert!(handing.ready_is_empty(), "handed out and also listed");
            for &(key, deadline) in &got {
                assert!(deadline <= now, "early");
                assert!(handing.has_fired(key));
                assert_eq!(handing.try_remove(key), listed.try_remove(key));
            }
            assert_eq!(handing.counters(), listed.counters());
            listed.check_invariants();
            handing.check_invariants();
        }
    }
}

/// A wheel that handed out a placeholder key (a shard owner's) must never be compacted:
/// the key's holder would keep its old key. Checked in debug builds.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "placeholders")]
fn compact_refuses_a_wheel_with_placeholder_keys() {
    let mut wheel: Wheel<u64> = Wheel::new(64);
    wheel.insert(5, 5);
    let _held = wheel.placeholder(0);
    let _ = wheel.compact();
}
