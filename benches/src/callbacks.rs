//! Issue 10's callback workloads for the `compare` program: tickless's `Timer::schedule`
//! against what Rust users write today (`tokio::spawn` of a task that sleeps, kept by its
//! `JoinHandle` to `abort()` it) and against `hierarchical_hash_wheel_timer` (a callback
//! wheel on a thread of its own, fed through a channel).
//!
//! - C1: schedule + cancel, one task: batches of `BATCH` scheduled, a yield (so tokio's
//!   tasks are polled and register their sleeps, as they would have by the time anyone
//!   cancels them), then all cancelled; ns per schedule+cancel.
//! - C3: the same from 8 tasks on 2 workers, through one shared timer; Mops/s.
//! - C2 (child process): `count` callbacks due uniformly over a second; how many ran,
//!   how early (never) and late, and the process's CPU.
//! - Memory (child process): RSS growth per pending callback, 1 hour ahead.

use crate::{answer, cpu_time, ms, spread};
use hierarchical_hash_wheel_timer::thread_timer::TimerWithThread;
use hierarchical_hash_wheel_timer::{
    ClosureTimer, OneShotClosureState, PeriodicClosureState, Timer,
};
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far ahead C1, C3 and memory schedule: never due while measured.
const AHEAD: Duration = Duration::from_secs(3600);
/// Callbacks scheduled before they are cancelled, in C1 and C3.
const BATCH: u32 = 256;

/// `hierarchical_hash_wheel_timer`'s threaded timer with `u64` ids and closures.
type Hhwt = TimerWithThread<u64, OneShotClosureState<u64>, PeriodicClosureState<u64>>;

/// The implementations compared.
pub const PEERS: [&str; 3] = [
    "tickless",
    "tokio spawn+sleep",
    "hierarchical_hash_wheel_timer",
];

/// The child-process argument naming each peer.
pub fn arg(peer: &str) -> &'static str {
    match peer {
        "tickless" => "tickless",
        "tokio spawn+sleep" => "tokio",
        _ => "hhwt",
    }
}

/// C1's and C3's body: `n` schedule+cancels in batches; returns when done.
pub async fn churn(n: u32, shared: Shared) {
    let batches = (n / BATCH).max(1);
    match shared {
        Shared::Tickless(timer) => {
            let mut handles = Vec::with_capacity(BATCH as usize);
            for _ in 0..batches {
                for _ in 0..BATCH {
                    let scheduled = timer.schedule(AHEAD, || black_box(())).expect("no limit");
                    handles.push(scheduled);
                }
                tokio::task::yield_now().await;
                for handle in handles.drain(..) {
                    black_box(handle.cancel());
                }
            }
        }
        Shared::Tokio => {
            let mut handles = Vec::with_capacity(BATCH as usize);
            for _ in 0..batches {
                for _ in 0..BATCH {
                    handles.push(tokio::spawn(async {
                        tokio::time::sleep(AHEAD).await;
                        black_box(());
                    }));
                }
                tokio::task::yield_now().await;
                for handle in handles.drain(..) {
                    handle.abort();
                }
            }
        }
        Shared::Hhwt(mut timer, ids) => {
            let mut scheduled = Vec::with_capacity(BATCH as usize);
            for _ in 0..batches {
                for _ in 0..BATCH {
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    timer.schedule_action_once(id, AHEAD, |_| black_box(()));
                    scheduled.push(id);
                }
                tokio::task::yield_now().await;
                for id in scheduled.drain(..) {
                    timer.cancel(&id);
                }
            }
        }
    }
}

/// The timer a churn runs on, made once per run and shared by its tasks.
#[derive(Clone)]
pub enum Shared {
    Tickless(tickless::Timer),
    Tokio,
    Hhwt(
        hierarchical_hash_wheel_timer::thread_timer::TimerRef<
            u64,
            OneShotClosureState<u64>,
            PeriodicClosureState<u64>,
        >,
        Arc<AtomicU64>,
    ),
}

/// Makes `peer`'s timer (in the current runtime, for tickless); the `Hhwt` value keeps
/// its thread alive: it must outlive the churn and be given to [`stop`].
pub fn shared(peer: &str) -> (Shared, Option<Hhwt>) {
    match peer {
        "tickless" => (Shared::Tickless(tickless::Timer::new()), None),
        "tokio spawn+sleep" => (Shared::Tokio, None),
        _ => {
            let timer = Hhwt::new().expect("a timer thread");
            (
                Shared::Hhwt(timer.timer_ref(), Arc::new(AtomicU64::new(0))),
                Some(timer),
            )
        }
    }
}

/// Stops `hierarchical_hash_wheel_timer`'s thread the way it asks to be stopped (dropped
/// without this, its thread panics).
pub fn stop(timer: Option<Hhwt>) {
    if let Some(timer) = timer {
        timer.shutdown().expect("the timer thread stops");
    }
}

/// C1: ns per schedule+cancel in one task of a current-thread runtime.
pub fn c1(peer: &'static str, n: u32) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let (shared, keep) = shared(peer);
        let task = tokio::spawn(async move {
            churn(n / 10, shared.clone()).await; // warm up
            let start = Instant::now();
            churn(n, shared).await;
            start.elapsed().as_nanos() as f64 / f64::from((n / BATCH).max(1) * BATCH)
        });
        let ns = task.await.expect("the churn task");
        stop(keep);
        ns
    })
}

/// C3: Mops/s of schedule+cancel from `tasks` tasks on 2 workers, one shared timer.
pub fn c3(peer: &'static str, tasks: u32, n: u32) -> f64 {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let (shared, keep) = shared(peer);
        let run = |per_task: u32| {
            let handles: Vec<_> = (0..tasks)
                .map(|_| tokio::spawn(churn(per_task, shared.clone())))
                .collect();
            async move {
                for handle in handles {
                    handle.await.expect("a churn task");
                }
            }
        };
        run(BATCH * 4).await; // warm up
        let per_task = n / tasks;
        let start = Instant::now();
        run(per_task).await;
        let done = f64::from((per_task / BATCH).max(1) * BATCH * tasks);
        let mops = done / start.elapsed().as_secs_f64() / 1e6;
        drop(shared);
        stop(keep);
        mops
    })
}

/// When callback `i` of `count` is due: uniform over a second, a second from `start`.
fn due(start: Instant, i: u64) -> Instant {
    start + Duration::from_secs(1) + Duration::from_micros(spread(i, 1_000_000))
}

/// C2 (a child process): `count` callbacks due over a second; prints how late each ran
/// and the process's CPU.
pub fn c2(peer: &str, count: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let results: Arc<Vec<AtomicI64>> = Arc::new((0..count).map(|_| AtomicI64::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let cpu = cpu_time();
    let start = Instant::now();
    let record = {
        let (results, done, all_done) = (results.clone(), done.clone(), all_done.clone());
        move |i: u64, deadline: Instant| {
            let now = Instant::now();
            let late = match now.checked_duration_since(deadline) {
                Some(late) => late.as_nanos() as i64,
                None => -(deadline.duration_since(now).as_nanos() as i64),
            };
            results[i as usize].store(late, Ordering::Relaxed);
            if done.fetch_add(1, Ordering::AcqRel) + 1 == count as usize {
                all_done.notify_one();
            }
        }
    };
    let keep = runtime.block_on(async {
        let keep = match peer {
            "tickless" => {
                let timer = tickless::Timer::new();
                for i in 0..count {
                    let (at, record) = (due(start, i), record.clone());
                    let _ = timer
                        .schedule_at(tokio::time::Instant::from_std(at), move || record(i, at))
                        .expect("no limit");
                }
                None
            }
            "tokio" => {
                for i in 0..count {
                    let (at, record) = (due(start, i), record.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                        record(i, at);
                    });
                }
                None
            }
            _ => {
                let timer = Hhwt::new().expect("a timer thread");
                let mut timer_ref = timer.timer_ref();
                for i in 0..count {
                    let (at, record) = (due(start, i), record.clone());
                    let delay = at.saturating_duration_since(Instant::now());
                    timer_ref.schedule_action_once(i, delay, move |_| record(i, at));
                }
                Some(timer)
            }
        };
        all_done.notified().await;
        keep
    });
    let cpu = cpu_time() - cpu;
    let end = Instant::now();
    stop(keep);
    let mut late: Vec<i64> = results.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    let early = late.iter().filter(|&&l| l < 0).count();
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize] as f64 / 1e6;
    answer(&[
        ("ran", done.load(Ordering::Acquire) as f64),
        ("early", early as f64),
        ("cpu_ms", ms(cpu)),
        (
            "overhead_ms",
            ms(end.saturating_duration_since(start + Duration::from_secs(2))),
        ),
        ("p50_ms", at(0.5)),
        ("p99_ms", at(0.99)),
        ("max_ms", at(1.0)),
    ]);
}

/// Memory (a child process): RSS growth per pending callback, `count` of them an hour
/// ahead, fire and forget (no handle kept, for any peer), closures capturing nothing.
pub fn memory(peer: &str, count: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (shared, keep) = shared(match peer {
            "tickless" => "tickless",
            "tokio" => "tokio spawn+sleep",
            _ => "hierarchical_hash_wheel_timer",
        });
        // One scheduled and gone first, so drivers, threads and wheel levels exist.
        churn(BATCH, shared.clone()).await;
        let before = crate::rss_bytes();
        match &shared {
            Shared::Tickless(timer) => {
                for _ in 0..count {
                    let _ = timer.schedule(AHEAD, || black_box(())).expect("no limit");
                }
            }
            Shared::Tokio => {
                for _ in 0..count {
                    drop(tokio::spawn(async {
                        tokio::time::sleep(AHEAD).await;
                        black_box(());
                    }));
                }
                tokio::task::yield_now().await; // each task polled once: its sleep registered
            }
            Shared::Hhwt(timer, ids) => {
                let mut timer = timer.clone();
                for _ in 0..count {
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    timer.schedule_action_once(id, AHEAD, |_| black_box(()));
                }
                // Let its thread take them off the channel into its wheel.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let grown = crate::rss_bytes().saturating_sub(before);
        answer(&[("bytes_per_callback", grown as f64 / count as f64)]);
        drop(shared);
        stop(keep);
    });
}
