//! The processes the crash tests run and kill: a leader candidate, a worker, a
//! scheduler. They are this test binary itself, started again as
//! `durable_crash role <lead|work|schedule> <url> <queue> ...` (see `main`), so nothing
//! of the tests ships in the `tickless-durable` binary.
//!
//! ```text
//! role lead <url> <queue>                                a leader candidate, until killed
//! role work <url> <queue> [lease-ms] [hold-ms]           a worker whose handler holds each job hold-ms
//! role schedule <url> <queue> <first> <count> <spread-ms> [batch]
//!                                                        jobs first..first+count, due over spread-ms
//! role cold-lead <url> <queue> <dir> <step>:<n> <go-file>
//!                                                        a cold tier's leader stopping at a step (cold_role.rs)
//! ```
//!
//! Each prints one line per event on stdout (`leading <token> <ms>`, `start <id>
//! <attempt> <claimed ms> <due ms> <started ms>`, `end <id> <attempt>`, `asking <id> <due
//! ms>` before a batch is sent, `scheduled <id>` once it is stored). Claimed and due are
//! the library's figures; started is the handler's own reading of the clock, and the due
//! time asked is the scheduler's: "early" is judged by those two.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickless_durable::{Error, LeaderOptions, Queue, When, WorkerOptions};

/// The first argument that makes this binary a role instead of the tests.
pub const ROLE: &str = "role";

/// Runs the role `args` names (after [`ROLE`]); returns only when it fails or ends.
pub fn main(args: &[String]) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the role");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("role {args:?}: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let (Some(role), Some(url), Some(name)) = (args.first(), args.get(1), args.get(2)) else {
        return Err("usage: role (lead|work|schedule) <url> <queue> ...".to_string());
    };
    let number = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |arg| {
            arg.parse()
                .map_err(|_| format!("argument {i} ({arg:?}) is not a number"))
        })
    };
    #[cfg(feature = "cold")]
    if role == "cold-lead" {
        return super::cold_role::lead(&args[1..]).await;
    }
    let queue = Queue::connect(url, name).await.map_err(|e| e.to_string())?;
    match role.as_str() {
        "lead" => lead(&queue).await,
        "work" => work(&queue, number(3, 30_000)?, number(4, 0)?).await,
        "schedule" => {
            let (first, count, spread) = (number(3, 0)?, number(4, 0)?, number(5, 0)?);
            schedule(&queue, first, count, spread, number(6, 100)?.max(1)).await
        }
        other => Err(format!("unknown role {other:?}")),
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn lead(queue: &Queue) -> Result<(), String> {
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let mut seen = 0;
    loop {
        let stats = leader.stats();
        if stats.leaderships > seen {
            seen = stats.leaderships;
            println!("leading {} {}", stats.token, ms(SystemTime::now()));
        }
        tickless::sleep(Duration::from_millis(5)).await;
    }
}

async fn work(queue: &Queue, lease_ms: u64, hold_ms: u64) -> Result<(), String> {
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_millis(lease_ms);
    options.concurrency = 16;
    queue
        .worker(options)
        .run(move |job| async move {
            let started = ms(SystemTime::now());
            println!(
                "start {} {} {} {} {started}",
                job.id(),
                job.attempt(),
                ms(job.claimed_at()),
                ms(job.due())
            );
            if hold_ms > 0 {
                tickless::sleep(Duration::from_millis(hold_ms)).await;
            }
            println!("end {} {}", job.id(), job.attempt());
            Ok::<(), Error>(())
        })
        .await
        .map_err(|e| e.to_string())
}

async fn schedule(
    queue: &Queue,
    first: u64,
    count: u64,
    spread: u64,
    batch: u64,
) -> Result<(), String> {
    // This machine's clock, which is Redis's (the tests check).
    let start = SystemTime::now();
    let ids: Vec<String> = (first..first + count).map(|i| format!("job{i}")).collect();
    for (chunk_index, chunk) in ids.chunks(batch as usize).enumerate() {
        let jobs: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let n = (chunk_index * batch as usize + i) as u64;
                let due = start + Duration::from_millis(spread * n / count.max(1));
                println!("asking {id} {}", ms(due));
                (id.as_str(), id.as_bytes(), When::At(due))
            })
            .collect();
        // Scheduling is idempotent on the id: a batch whose answer was lost (Redis
        // restarting) is sent again until Redis takes it.
        let mut backoff = Duration::from_millis(50);
        let mut tries = 0;
        while let Err(err) = queue.schedule_batch(jobs.iter().cloned()).await {
            tries += 1;
            if !err.is_redis() || tries > 40 {
                return Err(err.to_string());
            }
            tickless::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        for id in chunk {
            println!("scheduled {id}");
        }
    }
    Ok(())
}
