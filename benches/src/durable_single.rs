//! Issue 28's single calls (feature `redis`), `--durable-speed single`: one job per script
//! call, as most applications schedule (one job per order, per request).
//!
//! On a server with the append-only file on (`everysec`), one queue and its one
//! connection (`Queue` clones share it), 100 calls in flight (100 tasks, each sending its
//! next call when the last one answered):
//!
//! - **schedule**: `Queue::schedule` of new ids, due 5-10 s ahead (so into buckets);
//! - **reschedule**: each of those to 20-30 s ahead;
//! - **cancel**: each of those;
//! - **ack**: as many jobs due now (scheduled in batches), claimed in batches, then each
//!   acked alone (`Worker::ack`).
//!
//! For each: calls/s, Redis CPU µs per call (`INFO cpu` over the phase, all of Redis's
//! work: reading the calls, the script, answering), the script's µs per call
//! (`INFO commandstats`' `evalsha` line: its commands included), script calls per call
//! (below 1 where concurrent schedules were merged: `Queue::schedule` sends calls made
//! while one is on its way together) and Redis commands per call. Median of the rounds by rate. `PAYLOAD=<bytes>` sets the jobs' payload (default
//! 36 bytes).

use super::{commandstats, cpu_s, Row};
use std::time::{Duration, Instant};
use tickless_durable::{Queue, When, WorkerOptions};
use tickless_test_support::RedisServer;

/// Calls in flight.
const IN_FLIGHT: usize = 100;

/// What one phase measured.
#[derive(Clone, Copy, Default)]
struct Phase {
    rate: f64,
    cpu_us: f64,
    evalsha_us: f64,
    /// Script calls per call made: below 1 where concurrent calls were merged.
    scripts: f64,
    commands: f64,
}

/// Runs `call(i)` for i in 0..n, `IN_FLIGHT` at a time, and measures it.
fn phase<F, Fut>(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    n: usize,
    call: F,
) -> Phase
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let cpu0 = cpu_s(server);
    let stats0 = commandstats(server);
    let start = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..IN_FLIGHT)
            .map(|t| {
                let call = call.clone();
                tokio::spawn(async move {
                    for i in (t..n).step_by(IN_FLIGHT) {
                        call(i).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a caller");
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let cpu1 = cpu_s(server);
    let stats1 = commandstats(server);
    let delta = |name: &str| -> (f64, f64) {
        let of = |stats: &[(String, f64, f64)]| {
            stats
                .iter()
                .find(|s| s.0 == name)
                .map_or((0.0, 0.0), |s| (s.1, s.2))
        };
        let (c0, u0) = of(&stats0);
        let (c1, u1) = of(&stats1);
        (c1 - c0, u1 - u0)
    };
    let (evalshas, evalsha_usec) = delta("evalsha");
    let commands: f64 = stats1
        .iter()
        .filter(|s| s.0 != "info")
        .map(|s| delta(&s.0).0)
        .sum();
    let calls = n as f64;
    Phase {
        rate: calls / elapsed,
        cpu_us: (cpu1 - cpu0) * 1e6 / calls,
        evalsha_us: evalsha_usec / evalshas.max(1.0),
        scripts: evalshas / calls,
        commands: commands / calls,
    }
}

/// One round on a fresh server: the four phases.
fn round(runtime: &tokio::runtime::Runtime, n: usize, round: usize) -> [Phase; 4] {
    let server = RedisServer::start_with_fsync("everysec");
    let payload: usize = std::env::var("PAYLOAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(36);
    let payload = vec![b'x'; payload];
    let queue = runtime
        .block_on(Queue::connect(&server.url(), &format!("single-{round}")))
        .expect("connect");
    // The scripts loaded and the keys made before anything is measured.
    runtime
        .block_on(queue.schedule("warm", &payload, Duration::from_secs(3600)))
        .expect("schedule");
    let delay = move |i: usize, base: u64| Duration::from_millis(base + (i * 5_000 / n) as u64);

    let (q, p) = (queue.clone(), payload.clone());
    let schedule = phase(runtime, &server, n, move |i| {
        let (q, p) = (q.clone(), p.clone());
        async move {
            let added = q.schedule(&format!("j{i}"), &p, delay(i, 5_000)).await;
            assert!(added.expect("schedule"), "j{i} was new");
        }
    });
    let q = queue.clone();
    let reschedule = phase(runtime, &server, n, move |i| {
        let q = q.clone();
        async move {
            let moved = q.reschedule(&format!("j{i}"), delay(i, 20_000)).await;
            assert!(moved.expect("reschedule"), "j{i} was waiting");
        }
    });
    let q = queue.clone();
    let cancel = phase(runtime, &server, n, move |i| {
        let q = q.clone();
        async move {
            assert!(
                q.cancel(&format!("j{i}")).await.expect("cancel"),
                "j{i} was there"
            );
        }
    });

    // Acks: jobs due now, claimed in batches, each acked alone.
    let ids: Vec<String> = (0..n).map(|i| format!("a{i}")).collect();
    for chunk in ids.chunks(1_000) {
        let jobs = chunk
            .iter()
            .map(|id| (id.as_str(), payload.as_slice(), When::After(Duration::ZERO)));
        runtime
            .block_on(queue.schedule_batch(jobs))
            .expect("schedule");
    }
    // A leader is not needed: a job due when scheduled goes straight to `ready`.
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(600);
    let worker = std::sync::Arc::new(queue.worker(options));
    let mut jobs = Vec::with_capacity(n);
    while jobs.len() < n {
        let claimed = runtime.block_on(worker.try_claim(1_000)).expect("claim");
        assert!(!claimed.is_empty(), "{} of {n} claimed", jobs.len());
        jobs.extend(claimed);
    }
    let jobs = std::sync::Arc::new(jobs);
    let ack = phase(runtime, &server, n, move |i| {
        let (worker, jobs) = (worker.clone(), jobs.clone());
        async move {
            assert!(worker.ack(&jobs[i]).await.expect("ack"), "job {i} was held");
        }
    });
    [schedule, reschedule, cancel, ack]
}

/// The single-call part of `--durable-speed`.
pub(super) fn single_calls(runtime: &tokio::runtime::Runtime, quick: bool) -> Vec<Row> {
    let (rounds, n) = if quick { (1, 5_000) } else { (3, 20_000) };
    let mut runs: Vec<[Phase; 4]> = (0..rounds).map(|r| round(runtime, n, r)).collect();
    let names = ["schedule", "reschedule", "cancel", "ack"];
    let median = |p: usize, runs: &mut Vec<[Phase; 4]>| -> Phase {
        runs.sort_by(|a, b| a[p].rate.total_cmp(&b[p].rate));
        runs[runs.len() / 2][p]
    };
    let medians: Vec<Phase> = (0..names.len()).map(|p| median(p, &mut runs)).collect();
    println!(
        "\n| single calls, {IN_FLIGHT} in flight, {n} each, append-only on (everysec), median of {rounds} (by rate) | calls/s | Redis CPU µs per call (`INFO cpu`) | `evalsha` µs per script call | script calls per call | `evalsha` µs per call | commands per call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, m) in names.iter().zip(&medians) {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} |",
            m.rate,
            m.cpu_us,
            m.evalsha_us,
            m.scripts,
            m.evalsha_us * m.scripts,
            m.commands
        );
    }
    // Merged schedules (several jobs a script call) are not single script calls: their
    // rows say so, and give the script's time per job.
    let mut rows: Vec<Row> = names
        .iter()
        .zip(&medians)
        .map(|(name, m)| {
            if m.scripts < 0.99 {
                (
                    format!("single {name}: <= 6 µs of `evalsha` per call (merged, {:.1} jobs a script call)", 1.0 / m.scripts),
                    format!("{:.2} µs", m.evalsha_us * m.scripts),
                    m.evalsha_us * m.scripts <= 6.0,
                )
            } else {
                (
                    format!("single {name}: <= 6 µs per `evalsha` call"),
                    format!("{:.2} µs", m.evalsha_us),
                    m.evalsha_us <= 6.0,
                )
            }
        })
        .collect();
    rows.push((
        format!("single schedules, {IN_FLIGHT} in flight: <= 10 µs Redis CPU per job"),
        format!(
            "{:.2} µs ({:.0} jobs/s)",
            medians[0].cpu_us, medians[0].rate
        ),
        medians[0].cpu_us <= 10.0,
    ));
    rows
}
