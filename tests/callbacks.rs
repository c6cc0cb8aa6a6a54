//! Callbacks: `Timer::schedule` and friends. When they run (never early, in deadline
//! order, on every clock), exactly-once cancellation (also racing the driver), the pending
//! count and its limit, panics, handles dropped, timers dropped, runtimes shut down, and a
//! property test against an oracle.

use tickless_test_support as support;

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use tickless::{Driver, Instant, Timer};

const NS: Duration = Duration::from_nanos(1);

/// A shared log of what ran.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u64>>>);

impl Log {
    fn push(&self, what: u64) -> impl FnOnce() + Send + 'static {
        let log = self.0.clone();
        move || log.lock().unwrap().push(what)
    }

    fn take(&self) -> Vec<u64> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

#[test]
fn a_callback_runs_when_its_deadline_comes_never_before() {
    let timer = manual();
    let log = Log::default();
    let scheduled = timer.schedule(10 * MS, log.push(1)).unwrap();
    assert_eq!(scheduled.deadline(), timer.now() + 10 * MS);
    timer.advance(10 * MS - NS);
    assert!(log.take().is_empty(), "early");
    assert!(!scheduled.has_fired());
    timer.advance(NS);
    assert_eq!(log.take(), [1]);
    assert!(scheduled.has_fired() && !scheduled.is_cancelled());
    assert!(!scheduled.cancel(), "too late to cancel");
    assert_eq!(timer.pending(), 0);
    assert_eq!(timer.stats().callbacks_fired, 1);
}

#[test]
fn cancel_prevents_the_run_exactly_once() {
    let timer = manual();
    let log = Log::default();
    let scheduled = timer.schedule(MS, log.push(1)).unwrap();
    assert_eq!(timer.pending(), 1);
    assert!(scheduled.cancel());
    assert!(
        !scheduled.cancel(),
        "only the first cancel prevents anything"
    );
    assert!(scheduled.is_cancelled() && !scheduled.has_fired());
    assert_eq!(timer.pending(), 0);
    assert_eq!(
        timer.stats().registered,
        0,
        "the entry was unlinked at once"
    );
    timer.advance(MS);
    assert!(log.take().is_empty());
}

#[test]
fn dropping_the_handle_does_not_cancel() {
    let timer = manual();
    let log = Log::default();
    let _ = timer.schedule(MS, log.push(1)).unwrap();
    timer.advance(MS);
    assert_eq!(log.take(), [1]);
}

#[test]
fn callbacks_due_in_one_pass_run_in_deadline_order_across_threads() {
    let timer = manual();
    let log = Log::default();
    // Scheduled from several threads (so on several shards), in scrambled order.
    let threads: Vec<_> = [5_u64, 3, 9, 1, 7, 2, 8, 4, 6]
        .chunks(3)
        .map(|deadlines| {
            let (timer, log, deadlines) = (timer.clone(), log.clone(), deadlines.to_vec());
            std::thread::spawn(move || {
                for d in deadlines {
                    let _ = timer
                        .schedule(Duration::from_nanos(d), log.push(d))
                        .unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    timer.advance(10 * NS);
    assert_eq!(log.take(), (1..=9).collect::<Vec<_>>());
}

#[test]
fn a_panicking_callback_is_counted_and_the_others_still_run() {
    let timer = manual();
    let log = Log::default();
    let _ = timer.schedule(MS, log.push(1)).unwrap();
    let boom = timer
        .schedule(MS, || panic!("a callback panicked (injected)"))
        .unwrap();
    let _ = timer.schedule(MS, log.push(3)).unwrap();
    timer.advance(MS);
    assert_eq!(log.take(), [1, 3]);
    assert!(boom.has_fired());
    let stats = timer.stats();
    assert_eq!((stats.callback_panics, stats.callbacks_fired), (1, 3));
    // The driver lives.
    let _ = timer.schedule(MS, log.push(4)).unwrap();
    timer.advance(MS);
    assert_eq!(log.take(), [4]);
}

#[test]
fn pending_is_exact_and_max_pending_is_a_limit() {
    let timer = Timer::builder()
        .manual_clock()
        .max_pending(3)
        .build()
        .unwrap();
    let a = timer.schedule(MS, || {}).unwrap();
    let _b = timer.schedule(2 * MS, || {}).unwrap();
    let _c = timer.schedule(3 * MS, || {}).unwrap();
    assert_eq!(timer.pending(), 3);
    let error = timer.schedule(MS, || {}).unwrap_err();
    assert!(error.is_at_capacity() && !error.is_shutdown() && !error.is_invalid());
    assert_eq!(
        error.to_string(),
        "timer is at capacity: 3 callbacks pending (max_pending)"
    );
    assert!(a.cancel());
    assert_eq!(timer.pending(), 2);
    let _d = timer.schedule(MS, || {}).unwrap();
    timer.advance(2 * MS);
    assert_eq!(
        timer.pending(),
        1,
        "a cancel and two runs freed three places"
    );
    assert_eq!(timer.stats().pending_callbacks, 1);
    for _ in 0..2 {
        let _ = timer.schedule(MS, || {}).unwrap();
    }
    assert!(timer.schedule(MS, || {}).unwrap_err().is_at_capacity());
    let none = Timer::builder()
        .manual_clock()
        .max_pending(0)
        .build()
        .unwrap();
    assert!(none.schedule(MS, || {}).unwrap_err().is_at_capacity());
    // `Sleep`s do not count.
    let mut sleep = none.sleep(MS);
    assert!(poll_once(&mut sleep).is_pending());
}

#[test]
fn error_constructors_and_predicates_mean_what_tokios_do() {
    use tokio::time::error::Error as Tokio;
    let pairs = [
        (tickless::error::Error::shutdown(), Tokio::shutdown()),
        (tickless::error::Error::at_capacity(), Tokio::at_capacity()),
        (tickless::error::Error::invalid(), Tokio::invalid()),
    ];
    for (ours, tokios) in &pairs {
        assert_eq!(
            (ours.is_shutdown(), ours.is_at_capacity(), ours.is_invalid()),
            (
                tokios.is_shutdown(),
                tokios.is_at_capacity(),
                tokios.is_invalid()
            ),
            "{ours} vs tokio's {tokios}"
        );
        // The wording is ours (it says what tickless knows, e.g. which limit), in
        // tokio's style: lowercase, no trailing period.
        let text = ours.to_string();
        assert!(text.starts_with(char::is_lowercase) && !text.ends_with('.'));
    }
    assert_eq!(pairs[0].0.to_string(), "timer is shut down");
    assert_eq!(pairs[1].0.to_string(), "timer is at capacity");
}

#[test]
fn a_callback_scheduled_from_inside_an_advance_runs_before_it_returns() {
    let timer = manual();
    let log = Log::default();
    let inner = log.clone();
    let again = timer.clone();
    let _ = timer
        .schedule(MS, move || {
            inner.push(1)();
            // Due now: runs before the `advance` that ran this returns.
            let _ = again.schedule(Duration::ZERO, inner.push(2)).unwrap();
        })
        .unwrap();
    timer.advance(MS);
    assert_eq!(log.take(), [1, 2]);
    // Outside an advance, a due callback waits for the next one.
    let _ = timer.schedule(Duration::ZERO, log.push(3)).unwrap();
    assert!(log.take().is_empty());
    timer.advance(Duration::ZERO);
    assert_eq!(log.take(), [3]);
}

#[test]
fn a_callback_may_cancel_another_due_in_the_same_pass() {
    let timer = manual();
    let log = Log::default();
    let later = Arc::new(timer.schedule(2 * NS, log.push(2)).unwrap());
    let victim = later.clone();
    let inner = log.clone();
    let _ = timer
        .schedule(NS, move || {
            inner.push(1)();
            assert!(victim.cancel(), "not yet run: cancelled");
        })
        .unwrap();
    timer.advance(2 * NS);
    assert_eq!(log.take(), [1]);
    assert!(later.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn tokios_paused_clock_drives_callbacks_as_it_drives_sleeps() {
    let timer = Timer::new();
    let start = Instant::now();
    let fired_at = Arc::new(Mutex::new(None));
    let at = fired_at.clone();
    let _ = timer
        .schedule(Duration::from_secs(3600), move || {
            *at.lock().unwrap() = Some(Instant::now());
        })
        .unwrap();
    tokio::time::advance(Duration::from_secs(3599)).await;
    assert!(fired_at.lock().unwrap().is_none());
    tokio::time::advance(Duration::from_secs(1)).await;
    // Run inside tokio's timer pass: done when `advance` returns.
    assert_eq!(
        *fired_at.lock().unwrap(),
        Some(start + Duration::from_secs(3600))
    );
    // Auto-advance finds a callback's deadline too.
    let (done, ran) = tokio::sync::oneshot::channel();
    let _ = timer
        .schedule(Duration::from_secs(86_400), move || {
            let _ = done.send(());
        })
        .unwrap();
    ran.await.unwrap();
    assert_eq!(Instant::now() - start, Duration::from_secs(3600 + 86_400));
}

#[tokio::test(start_paused = true)]
async fn spawn_after_spawns_when_due_and_cancel_stops_it_until_then() {
    let timer = Timer::new();
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let spawned = {
        let sent = sent.clone();
        timer
            .spawn_after(Duration::from_secs(5), async move {
                tokio::task::yield_now().await;
                sent.send("spawned").unwrap();
            })
            .unwrap()
    };
    let cancelled = timer
        .spawn_after(Duration::from_secs(5), async move {
            sent.send("cancelled one ran").unwrap();
        })
        .unwrap();
    assert!(cancelled.cancel());
    assert_eq!(received.recv().await, Some("spawned"));
    assert!(spawned.has_fired());
    assert_eq!(
        received.recv().await,
        None,
        "the cancelled future was dropped unrun"
    );
}

#[test]
fn spawn_after_outside_a_runtime_is_an_invalid_request() {
    let timer = manual();
    let error = timer.spawn_after(MS, async {}).unwrap_err();
    assert!(error.is_invalid());
    assert!(error.to_string().contains("no"), "{error}");
}

#[test]
fn pending_callbacks_run_after_the_runtime_that_drove_them_shuts_down() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (ran, done) = std::sync::mpsc::channel();
    let deadline = runtime.block_on(async {
        let timer = Timer::new();
        let scheduled = timer
            .schedule(30 * MS, move || ran.send(Instant::now()).unwrap())
            .unwrap();
        scheduled.deadline()
    });
    // The timer handle is gone too: the pending callback keeps the timer alive, and a
    // driver thread takes over when the runtime goes, with nobody polling anything.
    drop(runtime);
    let at = done
        .recv_timeout(Duration::from_secs(10))
        .expect("never ran");
    assert!(at >= deadline, "ran early");
}

#[test]
fn a_pending_callback_keeps_a_thread_driven_timer_alive() {
    let (ran, done) = std::sync::mpsc::channel();
    {
        let timer = Timer::builder().driver(Driver::Thread).build().unwrap();
        let _ = timer
            .schedule(5 * MS, move || ran.send(()).unwrap())
            .unwrap();
    }
    done.recv_timeout(Duration::from_secs(10))
        .expect("never ran");
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A callback that records whether it ran and whether it was dropped.
fn watched(timer: &Timer) -> (tickless::Scheduled, Arc<AtomicBool>, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let ran = Arc::new(AtomicBool::new(false));
    let (flag, did_run) = (DropFlag(dropped.clone()), ran.clone());
    let scheduled = timer
        .schedule(MS, move || {
            let _flag = flag;
            did_run.store(true, Ordering::SeqCst);
        })
        .unwrap();
    (scheduled, ran, dropped)
}

#[test]
fn a_manual_timer_dropped_drops_its_pending_callbacks_unrun() {
    // Nothing can advance a manual clock without a handle, so its callbacks do not keep
    // it alive: with the timer and the callback's handle gone, the closure is dropped.
    let timer = manual();
    let (scheduled, ran, dropped) = watched(&timer);
    drop(timer);
    drop(scheduled);
    assert!(dropped.load(Ordering::SeqCst) && !ran.load(Ordering::SeqCst));
    // With the callback's handle kept, it can still be cancelled, which drops it.
    let timer = manual();
    let (scheduled, ran, dropped) = watched(&timer);
    drop(timer);
    assert!(scheduled.cancel());
    assert!(dropped.load(Ordering::SeqCst) && !ran.load(Ordering::SeqCst));
}

#[test]
fn cancels_racing_the_driver_on_a_multi_thread_runtime_are_exactly_once() {
    const N: usize = 4_000;
    let runtime = support::multi_thread();
    runtime.block_on(async {
        let timer = Timer::new();
        let ran = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let ran = ran.clone();
                // From now to 20 ms: the cancels below start once the first have run,
                // and race the driver through the rest.
                let delay = Duration::from_micros((i % 400) as u64 * 50);
                timer
                    .schedule(delay, move || {
                        ran[i].fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap()
            })
            .collect();
        // Cancel them all from two tasks (each one half) while the driver fires them,
        // starting once some have run, so that both outcomes happen.
        let handles = Arc::new(handles);
        let some_ran = Instant::now();
        while ran.iter().all(|n| n.load(Ordering::SeqCst) == 0) {
            assert!(some_ran.elapsed() < Duration::from_secs(10), "nothing ran");
            tokio::task::yield_now().await;
        }
        let cancelled: Vec<_> = (0..2)
            .map(|half| {
                let handles = handles.clone();
                tokio::spawn(async move {
                    let mut cancelled = Vec::new();
                    for i in (half..N).step_by(2) {
                        if handles[i].cancel() {
                            cancelled.push(i);
                        }
                        if i % 64 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    cancelled
                })
            })
            .collect();
        let mut was_cancelled = vec![false; N];
        for task in cancelled {
            for i in task.await.unwrap() {
                was_cancelled[i] = true;
            }
        }
        // Every one ran or was cancelled: wait for the driver, with a generous limit.
        let all_ended = Instant::now();
        while timer.pending() > 0 {
            assert!(
                all_ended.elapsed() < Duration::from_secs(10),
                "still pending"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let won = was_cancelled.iter().filter(|&&c| c).count();
        assert!(
            won > 0 && won < N,
            "both outcomes happen: {won} of {N} cancels won"
        );
        for i in 0..N {
            let runs = ran[i].load(Ordering::SeqCst);
            assert_eq!(runs + usize::from(was_cancelled[i]), 1, "callback {i}");
            assert_eq!(handles[i].is_cancelled(), was_cancelled[i]);
            assert_eq!(handles[i].has_fired(), runs == 1);
        }
        assert_eq!(timer.pending(), 0);
        assert_eq!(timer.stats().registered, 0);
    });
}

// ---- Property test: random schedule / cancel / advance against an oracle -------------

#[derive(Clone, Debug)]
enum Op {
    Schedule(u64),
    Cancel(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..2_000_u64).prop_map(Op::Schedule),
        2 => any::<usize>().prop_map(Op::Cancel),
        3 => (0..700_u64).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn callbacks_match_an_oracle(ops in proptest::collection::vec(op(), 1..80)) {
        let timer = manual();
        let start = timer.now();
        let log = Log::default();
        let mut now = 0_u64;
        let mut handles = Vec::new();
        // id -> deadline of each callback the oracle expects still to run.
        let mut pending: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Schedule(delay) => {
                    let id = handles.len() as u64;
                    handles.push(timer.schedule(Duration::from_nanos(delay), log.push(id)).unwrap());
                    pending.insert(id, now + delay);
                }
                Op::Cancel(n) if !handles.is_empty() => {
                    let id = (n % handles.len()) as u64;
                    let prevented = handles[id as usize].cancel();
                    prop_assert_eq!(prevented, pending.remove(&id).is_some());
                }
                Op::Cancel(_) => {}
                Op::Advance(by) => {
                    now += by;
                    timer.advance(Duration::from_nanos(by));
                    // Exactly the due ones ran, in deadline order (ties in any order).
                    let mut due: Vec<(u64, u64)> = pending
                        .iter()
                        .filter(|&(_, &deadline)| deadline <= now)
                        .map(|(&id, &deadline)| (deadline, id))
                        .collect();
                    due.sort_unstable();
                    let ran = log.take();
                    let mut ran_by_deadline: Vec<(u64, u64)> =
                        ran.iter().map(|id| (pending[id], *id)).collect();
                    let deadlines: Vec<u64> = ran_by_deadline.iter().map(|(d, _)| *d).collect();
                    prop_assert!(deadlines.windows(2).all(|w| w[0] <= w[1]), "out of order: {:?}", ran);
                    ran_by_deadline.sort_unstable();
                    prop_assert_eq!(ran_by_deadline, due.clone());
                    for (_, id) in due {
                        pending.remove(&id);
                    }
                }
            }
            prop_assert_eq!(timer.pending(), pending.len());
            prop_assert_eq!(timer.now(), start + Duration::from_nanos(now));
        }
    }
}
