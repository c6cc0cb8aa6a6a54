//! Criterion benches of the churn workloads (issue 4's W1, W1t, W4 and DQ1), every peer in
//! the same run. The workload bodies are `src/workloads.rs`, the same code the `compare`
//! program (`src/main.rs`) times; that program also runs the workloads criterion cannot
//! (a million timers, idle CPU, memory) and checks the targets.
//!
//! ```text
//! cargo bench -p tickless-bench --bench timers
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::future::poll_fn;
use std::hint::black_box;
use std::task::Poll;
use std::time::{Duration, Instant};

use tickless_bench::workloads::{
    in_task, register_cancel, shared_timer, spread_over_tasks, timeout_churn, AHEAD,
};
use tickless_bench::Peer;

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// W1: create a sleep 10 s ahead, poll it once with the task's context, drop it.
fn register_cancel_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("W1 register+cancel");
    let runtime = current_thread();
    for peer in Peer::SLEEPS {
        let timer = runtime.block_on(async { shared_timer(peer) });
        group.bench_function(BenchmarkId::from_parameter(peer.name()), |b| {
            b.iter_custom(|iters| {
                let timer = timer.clone();
                in_task(
                    &runtime,
                    poll_fn(move |cx| {
                        let start = Instant::now();
                        register_cancel(peer, timer.as_ref(), iters as u32, cx);
                        Poll::Ready(start.elapsed())
                    }),
                )
            })
        });
    }
    group.finish();
}

/// W1t: `timeout(10 s, f)` awaited, `f` pending once; the loop runs inside one task.
fn timeout_churn_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("W1t timeout churn");
    let runtime = current_thread();
    for peer in Peer::SLEEPS {
        let timer = runtime.block_on(async { shared_timer(peer) });
        group.bench_function(BenchmarkId::from_parameter(peer.name()), |b| {
            b.iter_custom(|iters| {
                let timer = timer.clone();
                in_task(&runtime, async move {
                    let start = Instant::now();
                    timeout_churn(peer, timer.as_ref(), iters as u32).await;
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

/// W4: W1 spread over 8 tasks on a 2-worker runtime; time per op overall.
fn multi_thread_churn_bench(c: &mut Criterion) {
    const TASKS: u64 = 8;
    let mut group = c.benchmark_group("W4 churn, 8 tasks on 2 workers");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    for peer in Peer::SLEEPS {
        let timer = runtime.block_on(async { shared_timer(peer) });
        group.bench_function(BenchmarkId::from_parameter(peer.name()), |b| {
            b.iter_custom(|iters| {
                let per_task = (iters / TASKS).max(1) as u32;
                let elapsed = runtime.block_on(async {
                    let start = Instant::now();
                    spread_over_tasks(peer, timer.as_ref(), TASKS as u32, per_task).await;
                    start.elapsed()
                });
                // Scaled to `iters` operations, as criterion expects.
                elapsed.mul_f64(iters as f64 / (u64::from(per_task) * TASKS) as f64)
            })
        });
    }
    group.finish();
}

/// DQ1: `DelayQueue` insert(10 s) + remove.
fn delay_queue_churn_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("DQ1 DelayQueue insert+remove");
    let runtime = current_thread();
    let _enter = runtime.enter();
    let mut tickless_queue = tickless::DelayQueue::new();
    group.bench_function("tickless", |b| {
        b.iter(|| {
            let key = tickless_queue.insert(1_u32, AHEAD);
            black_box(tickless_queue.remove(&key))
        })
    });
    let mut tokio_queue = tokio_util::time::DelayQueue::new();
    group.bench_function("tokio-util", |b| {
        b.iter(|| {
            let key = tokio_queue.insert(1_u32, AHEAD);
            black_box(tokio_queue.remove(&key))
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = register_cancel_bench, timeout_churn_bench, multi_thread_churn_bench,
        delay_queue_churn_bench
}
criterion_main!(benches);
