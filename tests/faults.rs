//! Fault injection: wakers that panic on wake, clone or drop, at every place tickless
//! calls them, and the promises that must survive: no slab key shared by two owners,
//! every other timer fires once and never early, the counters add up, the driver lives.
//!
//! The first tests are issue 8's numbered defects, each one failing on the code before
//! its fix.

use tickless_test_support as support;

use futures::StreamExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use support::*;
use tickless::{DelayQueue, Instant, MissedTickBehavior, Timer};

const HOUR: Duration = Duration::from_secs(3600);
const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// A sleep of `timer` polled once with the faulty waker, so the wheel holds that waker.
fn registered_with(timer: &Timer, after: Duration, waker: &FaultyWaker) -> tickless::Sleep {
    let mut sleep = timer.sleep(after);
    assert!(poll_with(&mut sleep, waker.waker()).is_pending());
    sleep
}

/// Issue 8, defect 1: a `Sleep` whose reset wakes a panicking waker must not keep a key
/// that a later registration reuses.
#[test]
fn a_waker_panicking_in_reset_leaves_no_stale_key_behind() {
    let timer = manual();
    let bad = faulty_waker(Fault::Wake);
    let mut doomed = registered_with(&timer, HOUR, &bad);
    // Reset to a deadline that has passed: the entry goes, the waker is woken (and panics).
    let _ = panicked(|| Pin::new(&mut doomed).reset(timer.now()));
    assert_eq!(bad.wakes(), 1, "the waiting task is woken to see the reset");

    // Another timer, likely in the slot `doomed` had.
    let counter = Counter::new();
    let other_waker = Waker::from(counter.clone());
    let mut other = timer.sleep(10 * MS);
    assert!(poll_with(&mut other, &other_waker).is_pending());

    // Neither resetting nor dropping `doomed` may touch `other`.
    Pin::new(&mut doomed).reset(timer.now() + 5 * MS);
    timer.advance(5 * MS);
    assert_eq!(
        counter.count(),
        0,
        "`other` fired early, moved by `doomed`'s reset"
    );
    drop(doomed);
    timer.advance(5 * MS);
    assert_eq!(
        counter.count(),
        1,
        "`other` was lost: cancelled by `doomed`'s drop"
    );
    assert!(poll_once(&mut other).is_ready());
    assert_eq!(timer.stats().registered, 0);
}

/// Defect 1, through `Interval::reset_immediately`.
#[test]
fn an_interval_reset_waking_a_panicking_waker_leaves_no_stale_key() {
    let timer = manual();
    let bad = faulty_waker(Fault::Wake);
    let mut interval = timer.interval(HOUR);
    let mut cx = Context::from_waker(bad.waker());
    assert!(
        interval.poll_tick(&mut cx).is_ready(),
        "the first tick is immediate"
    );
    assert!(interval.poll_tick(&mut cx).is_pending());
    let _ = panicked(|| interval.reset_immediately());

    let counter = Counter::new();
    let mut other = timer.sleep(10 * MS);
    assert!(poll_with(&mut other, &Waker::from(counter.clone())).is_pending());
    drop(interval);
    timer.advance(10 * MS);
    assert_eq!(
        counter.count(),
        1,
        "`other` was cancelled by the interval's drop"
    );
}

/// Defect 1, through `DelayQueue::insert` of an item due now while a task waits.
#[test]
fn a_delay_queue_insert_waking_a_panicking_waker_leaves_no_stale_key() {
    let timer = manual();
    let bad = faulty_waker(Fault::Wake);
    let mut queue = DelayQueue::with_timer(timer.clone(), 0);
    queue.insert("later", HOUR);
    let mut cx = Context::from_waker(bad.waker());
    assert!(queue.poll_expired(&mut cx).is_pending());
    let _ = panicked(|| {
        queue.insert("now", Duration::ZERO);
    });

    let counter = Counter::new();
    let mut other = timer.sleep(10 * MS);
    assert!(poll_with(&mut other, &Waker::from(counter.clone())).is_pending());
    drop(queue);
    timer.advance(10 * MS);
    assert_eq!(
        counter.count(),
        1,
        "`other` was cancelled by the queue's drop"
    );
}

/// Defect 2: wakers that panic when the tokio driver stops (its runtime shut down) are
/// counted like any other.
#[test]
fn wakers_panicking_while_the_runtime_shuts_down_are_counted() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let timer = runtime.block_on(async { Timer::new() });
    let bad = faulty_waker(Fault::Wake);
    let mut sleep = registered_with(&timer, HOUR, &bad);
    drop(runtime);
    assert_eq!(bad.wakes(), 1, "woken when the runtime went");
    assert_eq!(timer.stats().waker_panics, 1);
    // The sleep is still whole: it completes on the fallback driver.
    Pin::new(&mut sleep).reset(timer.now() + MS);
    futures::executor::block_on(sleep);
}

/// Defect 4: a paused runtime that advanced an hour shuts down; the timer goes on from
/// there on the real clock, and a new 50 ms sleep takes 50 ms, not microseconds.
#[test]
fn shutting_down_a_paused_runtime_never_sends_the_clock_back() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let (timer, mut pending) = runtime.block_on(async {
        let timer = Timer::new();
        tokio::time::advance(HOUR).await;
        timer.sleep(MS).await;
        let pending = timer.sleep(80 * MS);
        (timer, pending)
    });
    assert!(poll_once(&mut pending).is_pending());
    drop(runtime);
    let wall = std::time::Instant::now();
    futures::executor::block_on(timer.sleep(50 * MS));
    assert!(
        wall.elapsed() >= 50 * MS,
        "a 50 ms sleep took {:?}",
        wall.elapsed()
    );
    futures::executor::block_on(pending);
    assert!(
        wall.elapsed() >= 80 * MS,
        "the pending 80 ms sleep kept its remaining time"
    );
}

/// Defect 5: concurrent advances add up exactly.
#[test]
fn concurrent_advances_move_the_clock_by_their_sum() {
    let timer = manual();
    let start = timer.now();
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (timer, barrier) = (timer.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..25_000 {
                    timer.advance(Duration::from_nanos(100));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(timer.now() - start, 10 * MS);
}

struct AdvancingWaker(Timer);

impl std::task::Wake for AdvancingWaker {
    fn wake(self: Arc<Self>) {
        self.0.advance(MS);
    }
}

/// Defect 6: a waker that advances the manual clock it was woken by does not deadlock;
/// what its advance makes due fires before the outer advance returns.
#[test]
fn a_waker_that_advances_its_own_timer_does_not_deadlock() {
    let timer = manual();
    let fired = within(Duration::from_secs(10), "advance from a waker", move || {
        let waker = Waker::from(Arc::new(AdvancingWaker(timer.clone())));
        let mut first = timer.sleep(MS);
        assert!(poll_with(&mut first, &waker).is_pending());
        let counter = Counter::new();
        let mut second = timer.sleep(2 * MS);
        assert!(poll_with(&mut second, &Waker::from(counter.clone())).is_pending());
        timer.advance(MS); // fires `first`, whose waker advances to 2 ms
        counter.count()
    });
    assert_eq!(fired, 1, "the timer made due by the nested advance fired");
}

/// Defect 7: a `DelayQueue` holding a `Duration::MAX` item does not spin once the clock
/// passes 292 years.
#[test]
fn a_delay_queue_does_not_spin_past_292_years() {
    within(Duration::from_secs(10), "poll_expired", || {
        let timer = manual();
        let mut queue = DelayQueue::with_timer(timer.clone(), 0);
        queue.insert("never", Duration::MAX);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(queue.poll_expired(&mut cx).is_pending());
        timer.advance(300 * YEAR);
        assert!(
            queue.poll_expired(&mut cx).is_pending(),
            "not due for a million years"
        );
        queue.insert("soon", YEAR);
        timer.advance(YEAR);
        match queue.poll_expired(&mut cx) {
            Poll::Ready(Some(item)) => assert_eq!(item.into_inner(), "soon"),
            other => panic!(
                "expected the item due at 301 years, got {:?}",
                other.is_ready()
            ),
        }
    });
}

/// Defect 8: an `Interval` keeps its period past 292 years.
#[test]
fn an_interval_keeps_ticking_past_292_years() {
    within(Duration::from_secs(10), "interval ticks", || {
        let timer = manual();
        let start = timer.now();
        let mut interval = timer.interval_at(start, 100 * YEAR);
        interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut cx = Context::from_waker(Waker::noop());
        let mut seen = Vec::new();
        for _ in 0..5 {
            match interval.poll_tick(&mut cx) {
                Poll::Ready(at) => seen.push(at - start),
                Poll::Pending => {
                    timer.advance(100 * YEAR);
                    match interval.poll_tick(&mut cx) {
                        Poll::Ready(at) => seen.push(at - start),
                        Poll::Pending => panic!("no tick after a whole period"),
                    }
                }
            }
        }
        let expected: Vec<Duration> = (0..5).map(|i| i * 100 * YEAR).collect();
        assert_eq!(seen, expected);
    });
}

/// Defect 9: a task waiting in `poll_expired` is woken when the queue becomes empty, by
/// `remove`, `try_remove` or `clear`, so it sees the end of the stream at once.
#[test]
fn emptying_a_delay_queue_wakes_the_task_waiting_on_it() {
    type Empty = fn(&mut DelayQueue<&'static str>, tickless::delay_queue::Key);
    let ways: [(&str, Empty); 3] = [
        ("remove", |queue, key| {
            queue.remove(&key);
        }),
        ("try_remove", |queue, key| {
            queue.try_remove(&key);
        }),
        ("clear", |queue, _| queue.clear()),
    ];
    for (how, empty) in ways {
        let timer = manual();
        let mut queue = DelayQueue::with_timer(timer.clone(), 0);
        let key = queue.insert("item", HOUR);
        let counter = Counter::new();
        let waker = Waker::from(counter.clone());
        assert!(queue
            .poll_expired(&mut Context::from_waker(&waker))
            .is_pending());
        empty(&mut queue, key);
        assert_eq!(counter.count(), 1, "{how} did not wake the waiting task");
        assert!(matches!(
            queue.poll_expired(&mut Context::from_waker(&waker)),
            Poll::Ready(None)
        ));
    }
}

/// Defect 10: `compact` exists, shrinks the storage to the items held, and keeps every
/// key valid.
#[tokio::test(start_paused = true)]
async fn compact_shrinks_storage_and_keeps_keys_valid() {
    let start = Instant::now();
    let mut queue = DelayQueue::with_capacity(10);
    let keys: Vec<_> = (0..6_u64)
        .map(|i| queue.insert(i, Duration::from_secs(i + 1)))
        .collect();
    for key in &keys[..3] {
        queue.remove(key);
    }
    queue.compact();
    assert_eq!(queue.capacity(), 3);
    for (i, key) in keys.iter().enumerate().skip(3) {
        assert_eq!(
            queue.deadline(key),
            start + Duration::from_secs(i as u64 + 1)
        );
    }
    queue.reset(&keys[4], Duration::from_secs(10));
    assert_eq!(queue.remove(&keys[3]).into_inner(), 3);
    assert!(
        queue.try_remove(&keys[0]).is_none(),
        "a removed item's key stays stale"
    );
    let new = queue.insert(99, MS);
    assert_eq!(queue.next().await.unwrap().into_inner(), 99);
    assert!(queue.try_remove(&new).is_none());
    assert_eq!(queue.next().await.unwrap().into_inner(), 5);
    assert_eq!(queue.next().await.unwrap().into_inner(), 4);
    assert!(queue.next().await.is_none());
}

// ---- The fault-injection matrix -------------------------------------------------------
//
// A faulty waker at every place tickless clones, wakes or drops a stored waker; after each
// fault the same invariants are checked with a few witness timers: each fires once, never
// early; the counters add up; the driver still fires a new timer.

/// Timers registered before a fault, with counting wakers, at 1, 2 and 3 ms from `start`.
struct Witnesses {
    start: Instant,
    sleeps: Vec<(tickless::Sleep, Arc<Counter>)>,
}

impl Witnesses {
    fn new(timer: &Timer) -> Witnesses {
        let start = timer.now();
        let sleeps = (1..=3)
            .map(|ms| {
                let counter = Counter::new();
                let mut sleep = timer.sleep(ms * MS);
                assert!(poll_with(&mut sleep, &Waker::from(counter.clone())).is_pending());
                (sleep, counter)
            })
            .collect();
        Witnesses { start, sleeps }
    }

    /// Advances a manual `timer` millisecond by millisecond to 3 ms past `start` (from
    /// wherever the test left it): each witness is woken once, exactly when its deadline
    /// has come.
    fn check(mut self, timer: &Timer, what: &str) {
        for step in 1..=3_u32 {
            let target = self.start + step * MS;
            if timer.now() < target {
                timer.advance_to(target);
            }
            let now = timer.now();
            for (i, (sleep, counter)) in self.sleeps.iter().enumerate() {
                let due = self.start + (i as u32 + 1) * MS <= now;
                assert_eq!(
                    counter.count(),
                    usize::from(due),
                    "{what}: witness {i} at {step} ms"
                );
                assert_eq!(sleep.is_elapsed(), due, "{what}: witness {i} at {step} ms");
            }
        }
        for (sleep, _) in &mut self.sleeps {
            assert!(poll_once(sleep).is_ready());
        }
        drop(self.sleeps);
        // The driver lives: a new timer fires.
        let counter = Counter::new();
        let mut fresh = timer.sleep(MS);
        assert!(poll_with(&mut fresh, &Waker::from(counter.clone())).is_pending());
        timer.advance(MS);
        assert_eq!(counter.count(), 1, "{what}: the driver stopped firing");
        assert!(poll_once(&mut fresh).is_ready());
        drop(fresh);
        assert_eq!(
            timer.stats().registered,
            0,
            "{what}: an entry was left behind"
        );
    }
}

#[test]
fn a_waker_panicking_when_the_driver_fires_it_is_counted_and_nothing_else_changes() {
    let timer = manual();
    let bad = faulty_waker(Fault::Wake);
    let witnesses = Witnesses::new(&timer);
    let mut doomed = registered_with(&timer, MS, &bad);
    timer.advance(MS);
    assert_eq!((bad.wakes(), timer.stats().waker_panics), (1, 1));
    assert!(
        poll_once(&mut doomed).is_ready(),
        "fired, its panic notwithstanding"
    );
    drop(doomed);
    witnesses.check(&timer, "panic on wake by the driver");
}

#[test]
fn a_waker_panicking_when_a_reset_fires_it_is_counted_and_the_sleep_completes() {
    let timer = manual();
    let bad = faulty_waker(Fault::Wake);
    let witnesses = Witnesses::new(&timer);
    let mut doomed = registered_with(&timer, HOUR, &bad);
    assert!(
        !panicked(|| Pin::new(&mut doomed).reset(timer.now())),
        "caught"
    );
    assert_eq!(timer.stats().waker_panics, 1);
    assert!(doomed.is_elapsed());
    assert!(poll_once(&mut doomed).is_ready());
    drop(doomed);
    witnesses.check(&timer, "panic on wake by a reset");
}

#[test]
fn a_waker_panicking_on_clone_leaves_the_sleep_as_it_was() {
    let timer = manual();
    let bad = faulty_waker(Fault::Clone);
    let witnesses = Witnesses::new(&timer);
    // First poll: the clone panics before anything is registered.
    let mut first = timer.sleep(2 * MS);
    assert!(panicked(|| {
        let _ = poll_with(&mut first, bad.waker());
    }));
    assert_eq!(
        timer.stats().registered,
        3,
        "nothing registered for the panicking poll"
    );
    let counter = Counter::new();
    assert!(poll_with(&mut first, &Waker::from(counter.clone())).is_pending());
    // A later poll with the faulty waker: the stored waker stays the old one.
    assert!(panicked(|| {
        let _ = poll_with(&mut first, bad.waker());
    }));
    timer.advance(2 * MS);
    assert_eq!(
        counter.count(),
        1,
        "the waker stored before the panic was woken"
    );
    assert!(poll_once(&mut first).is_ready());
    drop(first);
    witnesses.check(&timer, "panic on clone");
}

/// A waker whose first clone advances `timer` by `by`, and whose every drop panics.
fn advancing_on_clone(timer: &Timer, by: Duration) -> Waker {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{RawWaker, RawWakerVTable};
    struct State {
        timer: Timer,
        by: Duration,
        advanced: AtomicBool,
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_raw);
    fn state(data: *const ()) -> &'static State {
        // SAFETY: `data` is a live `Arc<State>` pointer for as long as a waker holds it.
        unsafe { &*data.cast::<State>() }
    }
    unsafe fn clone(data: *const ()) -> RawWaker {
        let state = state(data);
        if !state.advanced.swap(true, Ordering::SeqCst) {
            state.timer.advance(state.by);
        }
        // SAFETY: `data` came from `Arc::into_raw`; the clone adds one reference.
        unsafe { Arc::increment_strong_count(data.cast::<State>()) };
        RawWaker::new(data, &VTABLE)
    }
    unsafe fn wake(data: *const ()) {
        // SAFETY: releases this waker's reference, quietly (only drops misbehave).
        unsafe { drop(Arc::from_raw(data.cast::<State>())) };
    }
    unsafe fn wake_by_ref(_: *const ()) {}
    unsafe fn drop_raw(data: *const ()) {
        // SAFETY: releases this waker's reference.
        unsafe { drop(Arc::from_raw(data.cast::<State>())) };
        panic!("a waker panicked on drop (injected)");
    }
    let state = Arc::new(State {
        timer: timer.clone(),
        by,
        advanced: AtomicBool::new(false),
    });
    // SAFETY: the vtable treats the data pointer as an `Arc<State>` made by
    // `Arc::into_raw`, and keeps its reference count balanced.
    unsafe { Waker::from_raw(RawWaker::new(Arc::into_raw(state).cast(), &VTABLE)) }
}

#[test]
fn a_waker_panicking_on_drop_is_counted_wherever_tickless_drops_it() {
    let timer = manual();
    let witnesses = Witnesses::new(&timer);
    let bad = faulty_waker(Fault::Drop);
    // Dropped when the sleep is cancelled.
    let doomed = registered_with(&timer, HOUR, &bad);
    assert!(!panicked(|| drop(doomed)), "caught on cancel");
    // Dropped when another poll replaces it.
    let mut replaced = registered_with(&timer, HOUR, &bad);
    assert!(
        !panicked(|| {
            let _ = poll_once(&mut replaced);
        }),
        "caught on replace"
    );
    drop(replaced);
    assert_eq!(timer.stats().waker_panics, 2);
    // Dropped when a registration finds its deadline passed at the insert: the clock
    // moved between the sleep's own check and the insert (here, from inside the
    // waker's clone, made in between; in life, an advance on another thread).
    let mut overtaken = timer.sleep(MS);
    let waker = advancing_on_clone(&timer, MS);
    let mut first = Poll::Pending;
    assert!(
        !panicked(|| first = poll_with(&mut overtaken, &waker)),
        "caught at the insert"
    );
    assert!(first.is_ready(), "its deadline came at the insert");
    std::mem::forget(waker); // the original would panic on drop too
    assert_eq!(
        timer.stats().waker_panics,
        3,
        "each of the three places counted"
    );
    witnesses.check(&timer, "panic on drop");
}

#[test]
fn an_inner_future_panicking_inside_a_timeout_leaves_no_entry() {
    let timer = manual();
    let witnesses = Witnesses::new(&timer);
    let mut timeout = timer.timeout(
        HOUR,
        futures::future::poll_fn(|cx| {
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        }),
    );
    assert!(poll_once(&mut Pin::new(&mut timeout)).is_pending());
    assert_eq!(timer.stats().registered, 4);
    let exploding = timer.timeout(HOUR, async {
        panic!("the inner future panicked (injected)")
    });
    assert!(panicked(|| {
        let _ = futures::executor::block_on(exploding);
    }));
    drop(timeout);
    witnesses.check(&timer, "an inner future's panic");
}

struct PanickingAdvance(Timer);

impl std::task::Wake for PanickingAdvance {
    fn wake(self: Arc<Self>) {
        self.0.advance(MS);
        panic!("a waker panicked after advancing (injected)");
    }
}

#[test]
fn a_waker_that_advances_then_panics_is_counted_and_its_advance_stands() {
    let timer = manual();
    let witnesses = Witnesses::new(&timer);
    let mut first = timer.sleep(MS);
    let waker = Waker::from(Arc::new(PanickingAdvance(timer.clone())));
    assert!(poll_with(&mut first, &waker).is_pending());
    assert!(!panicked(|| timer.advance(MS)));
    assert_eq!(timer.stats().waker_panics, 1);
    assert_eq!(
        timer.now() - witnesses.start,
        2 * MS,
        "both advances counted"
    );
    drop(first);
    witnesses.check(&timer, "advance then panic in a waker");
}

/// Faults on a tokio-driven timer: a panicking waker in tokio's timer pass does not stop
/// the pass or tickless.
#[tokio::test(start_paused = true)]
async fn a_panicking_waker_inside_tokios_timer_pass_is_counted_and_the_pass_goes_on() {
    let timer = Timer::new();
    let bad = faulty_waker(Fault::Wake);
    let mut doomed = registered_with(&timer, MS, &bad);
    let on_time = tokio::spawn({
        let timer = timer.clone();
        async move { timer.sleep(MS).await }
    });
    let tokio_own = tokio::spawn(tokio::time::sleep(MS));
    tokio::time::sleep(MS).await;
    assert_eq!((bad.wakes(), timer.stats().waker_panics), (1, 1));
    on_time.await.unwrap();
    tokio_own.await.unwrap();
    assert!(poll_once(&mut doomed).is_ready());
    timer.sleep(MS).await;
}
