//! One million sleeps spread over two seconds, in one `FuturesUnordered` in one task.
//!
//! Deadlines are uniform over the two seconds that start one second from now, so the first
//! pass registers every sleep before any is due: that pass is the schedule time, and the
//! memory it adds is the cost of a million pending timers.
//!
//! ```text
//! cargo run --release --example million_timers            # tickless
//! cargo run --release --example million_timers -- --tokio # then tokio::time, in a child
//! cargo run --release --example million_timers -- 200000  # another count
//! ```
//!
//! Prints progress while they fire, then: fired and early counts, lateness p50/p99/max,
//! schedule and total time, process CPU, driver wakeups, and bytes per pending timer
//! (RSS growth over the count, future and `FuturesUnordered` node included). tokio's
//! sleeps are wrapped in `tokio::task::unconstrained`: under its cooperative budget this
//! workload stalls.

use futures::stream::{FuturesUnordered, StreamExt};
use readings::{cpu_time, rss_bytes, spread};
use std::future::Future;
use std::time::Duration;
use tickless::{Instant, Timer};

mod readings;

/// Deadlines are uniform in `[OFFSET, OFFSET + SPREAD)` from the start.
const OFFSET: Duration = Duration::from_secs(1);
const SPREAD: Duration = Duration::from_secs(2);

struct Report {
    fired: usize,
    early: usize,
    lateness: Vec<Duration>,
    schedule: Duration,
    total: Duration,
    /// Process CPU and RSS growth come from `/proc`: zero off Linux.
    cpu: Duration,
    bytes_per_timer: f64,
}

async fn run<S, F>(name: &str, count: u64, sleep_until: S) -> Report
where
    S: Fn(Instant) -> F,
    F: Future<Output = ()>,
{
    let rss_before = rss_bytes();
    let cpu_before = cpu_time();
    let start = Instant::now();
    let spread_micros = SPREAD.as_micros() as u64;
    let mut all: FuturesUnordered<_> = (0..count)
        .map(|i| {
            let deadline = start + OFFSET + Duration::from_micros(spread(i, spread_micros));
            let sleep = sleep_until(deadline);
            async move {
                sleep.await;
                (Instant::now(), deadline)
            }
        })
        .collect();
    // One pass polls (and so registers) every sleep before any can be reported done.
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(all.poll_next_unpin(cx))).await;
    let schedule = start.elapsed();
    let rss_pending = rss_bytes();

    let mut lateness = Vec::with_capacity(count as usize);
    let mut early = 0;
    let mut record = |(done, deadline): (Instant, Instant), lateness: &mut Vec<Duration>| {
        if done < deadline {
            early += 1;
        }
        lateness.push(done.saturating_duration_since(deadline));
    };
    if let std::task::Poll::Ready(Some(done)) = first {
        record(done, &mut lateness);
    }
    let mut last_report = Instant::now();
    while let Some(done) = all.next().await {
        record(done, &mut lateness);
        if last_report.elapsed() >= Duration::from_millis(250) {
            last_report = Instant::now();
            println!(
                "  {name}: {:>9} fired at {:>6.0} ms",
                lateness.len(),
                start.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    let total = start.elapsed();
    lateness.sort_unstable();
    Report {
        fired: lateness.len(),
        early,
        lateness,
        schedule,
        total,
        cpu: cpu_time().saturating_sub(cpu_before),
        bytes_per_timer: rss_pending.saturating_sub(rss_before) as f64 / count as f64,
    }
}

fn print(name: &str, report: &Report, count: u64) {
    let percentile = |p: f64| {
        let index = ((report.lateness.len() as f64 - 1.0) * p).round() as usize;
        report.lateness.get(index).copied().unwrap_or_default()
    };
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    println!("{name}:");
    println!("  fired            {} of {count}", report.fired);
    println!("  early            {}", report.early);
    println!(
        "  lateness         p50 {}  p99 {}  max {}",
        ms(percentile(0.5)),
        ms(percentile(0.99)),
        ms(percentile(1.0))
    );
    println!("  schedule         {}", ms(report.schedule));
    println!(
        "  total            {} (overhead past the last deadline at {}: {})",
        ms(report.total),
        ms(OFFSET + SPREAD),
        ms(report.total.saturating_sub(OFFSET + SPREAD))
    );
    println!("  process CPU      {}", ms(report.cpu));
    println!(
        "  bytes per timer  {:.0} (RSS growth / count, future included)",
        report.bytes_per_timer
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = args
        .iter()
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(1_000_000_u64);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");

    // `--tokio-only`: the comparison run, in a process of its own so that memory freed by
    // the tickless run cannot flatter its RSS growth.
    if args.iter().any(|arg| arg == "--tokio-only") {
        let report = runtime.block_on(run("tokio", count, |deadline| {
            tokio::task::unconstrained(tokio::time::sleep_until(deadline))
        }));
        print("tokio::time (unconstrained)", &report, count);
        return;
    }

    println!(
        "{count} sleeps, deadlines spread over {SPREAD:?} from {OFFSET:?} on, one FuturesUnordered, one task"
    );
    println!(
        "size_of::<tickless::Sleep>() = {}, size_of::<tokio::time::Sleep>() = {}",
        std::mem::size_of::<tickless::Sleep>(),
        std::mem::size_of::<tokio::time::Sleep>()
    );
    let (report, stats) = runtime.block_on(async {
        let timer = Timer::new();
        let report = run("tickless", count, |deadline| timer.sleep_until(deadline)).await;
        (report, timer.stats())
    });
    print("tickless", &report, count);
    println!(
        "  driver wakeups   {} ({} buckets flushed, {} fired, {} demoted)",
        stats.driver_wakeups, stats.buckets_flushed, stats.entries_fired, stats.entries_demoted
    );
    let ok = report.fired as u64 == count && report.early == 0;

    if args.iter().any(|arg| arg == "--tokio") {
        let status = std::env::current_exe().and_then(|exe| {
            std::process::Command::new(exe)
                .args([count.to_string(), "--tokio-only".to_string()])
                .status()
        });
        if !status.as_ref().is_ok_and(|status| status.success()) {
            eprintln!("the tokio comparison run failed: {status:?}");
        }
    }
    if !ok {
        eprintln!("FAILED: every timer must fire, none early");
        std::process::exit(1);
    }
}
