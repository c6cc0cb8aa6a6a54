//! Register + cancel, and timeout churn, against `tokio::time` in the same run.
//!
//! ```text
//! cargo bench --bench sleep
//! ```
//!
//! Each iteration creates a sleep 10 s ahead, polls it once with the task's real context
//! (so it registers) and drops it (so it cancels), on a current-thread runtime. The full
//! comparison suite (other peers, multi-thread, memory) is a separate work item.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::Duration;

const AHEAD: Duration = Duration::from_secs(10);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Runs `body` inside a task of a current-thread runtime with that task's context.
fn in_task(runtime: &tokio::runtime::Runtime, mut body: impl FnMut(&mut Context<'_>)) {
    runtime.block_on(poll_fn(|cx| {
        body(cx);
        Poll::Ready(())
    }));
}

fn register_cancel(c: &mut Criterion) {
    let mut group = c.benchmark_group("register_cancel");
    let runtime = runtime();
    in_task(&runtime, |cx| {
        group.bench_function(BenchmarkId::new("tokio", "sleep"), |b| {
            b.iter(|| {
                let mut sleep = pin!(tokio::time::sleep(AHEAD));
                let _ = black_box(sleep.as_mut().poll(cx));
            })
        });
        group.bench_function(BenchmarkId::new("tickless", "sleep"), |b| {
            b.iter(|| {
                let mut sleep = tickless::sleep(AHEAD);
                let _ = black_box(Pin::new(&mut sleep).poll(cx));
            })
        });
        let timer = tickless::Timer::current();
        group.bench_function(BenchmarkId::new("tickless", "timer.sleep"), |b| {
            b.iter(|| {
                let mut sleep = timer.sleep(AHEAD);
                let _ = black_box(Pin::new(&mut sleep).poll(cx));
            })
        });
    });
    group.finish();
}

/// A future that is pending once (waking itself) and then ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn timeout_churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("timeout_churn");
    let runtime = runtime();
    group.bench_function("tokio", |b| {
        b.iter(|| runtime.block_on(async { tokio::time::timeout(AHEAD, YieldOnce(false)).await }))
    });
    group.bench_function("tickless", |b| {
        b.iter(|| runtime.block_on(async { tickless::timeout(AHEAD, YieldOnce(false)).await }))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = register_cancel, timeout_churn
}
criterion_main!(benches);
