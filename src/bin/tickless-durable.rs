//! `tickless-durable`: look at a durable queue, or run one of its roles.
//!
//! ```text
//! tickless-durable inspect <url> <queue>             counts, leader, lag, the next wakes, dead jobs
//! tickless-durable job <url> <queue> <id>            one job's state, due time, attempts, error
//! tickless-durable retry-dead <url> <queue> <id>     a dead job gets a new set of attempts
//! tickless-durable lead <url> <queue>                a leader candidate, until killed
//! tickless-durable work <url> <queue> [lease-ms] [hold-ms]
//!                                                    a worker whose handler holds each job hold-ms
//! tickless-durable schedule <url> <queue> <first> <count> <spread-ms> [batch]
//!                                                    jobs first..first+count, due over spread-ms
//! ```
//!
//! The roles print one line per event on stdout (`leading <token> <ms>`, `start <id>
//! <attempt> <claimed ms> <due ms>`, `end <id> <attempt>`, `scheduled <id>`): the crash
//! tests and `examples/durable_reviews.rs` run them as processes and kill them.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickless::durable::{Error, LeaderOptions, Queue, When, WorkerOptions};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tickless-durable: cannot start a runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tickless-durable: {message}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str =
    "usage: tickless-durable (inspect|job|retry-dead|lead|work|schedule) <url> <queue> ...";

async fn run(args: &[String]) -> Result<(), String> {
    let (Some(command), Some(url), Some(name)) = (args.first(), args.get(1), args.get(2)) else {
        return Err(USAGE.to_string());
    };
    let number = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |arg| {
            arg.parse()
                .map_err(|_| format!("argument {i} ({arg:?}) is not a number"))
        })
    };
    let queue = Queue::connect(url, name).await.map_err(|e| e.to_string())?;
    match command.as_str() {
        "inspect" => inspect(&queue).await.map_err(|e| e.to_string()),
        "job" => {
            let id = args.get(3).ok_or("job needs an id")?;
            let now = queue.now().await.map_err(|e| e.to_string())?;
            match queue.job(id).await.map_err(|e| e.to_string())? {
                Some(info) => {
                    println!(
                        "job {:?}: {:?}, due {}",
                        info.id,
                        info.state,
                        ago(now, info.due)
                    );
                    println!("  attempts {} of {}", info.attempts, info.max_attempts);
                    if let Some(ends) = info.lease_ends {
                        println!("  lease ends {}", ago(now, ends));
                    }
                    if let Some(error) = &info.last_error {
                        println!("  last error: {error}");
                    }
                    let shown: String = String::from_utf8_lossy(&info.payload)
                        .chars()
                        .take(200)
                        .collect();
                    println!("  payload ({} bytes): {shown:?}", info.payload.len());
                }
                None => println!("no job {id:?} in queue {name:?}"),
            }
            Ok(())
        }
        "retry-dead" => {
            let id = args.get(3).ok_or("retry-dead needs an id")?;
            let retried = queue.retry_dead(id).await.map_err(|e| e.to_string())?;
            println!(
                "{}",
                if retried {
                    "retried"
                } else {
                    "no such dead job"
                }
            );
            Ok(())
        }
        "lead" => lead(&queue).await,
        "work" => work(&queue, number(3, 30_000)?, number(4, 0)?).await,
        "schedule" => {
            let (first, count, spread) = (number(3, 0)?, number(4, 0)?, number(5, 0)?);
            schedule(&queue, first, count, spread, number(6, 100)?.max(1)).await
        }
        other => Err(format!("unknown command {other:?}; {USAGE}")),
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ago(now: SystemTime, t: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {ahead:.3?}"),
        Err(past) => format!("{:.3?} ago", past.duration()),
    }
}

async fn inspect(queue: &Queue) -> Result<(), Error> {
    let stats = queue.stats().await?;
    println!("queue {:?} at {}", queue.name(), queue.url());
    println!(
        "  scheduled {}  ready {}  in flight {}  dead {}",
        stats.scheduled, stats.ready, stats.in_flight, stats.dead
    );
    match (&stats.leader, stats.lease_ends) {
        (Some(leader), Some(ends)) => println!(
            "  leader {leader} (token {}), lease ends {}",
            stats.token,
            ago(stats.now, ends)
        ),
        _ => println!("  no leader (last token {})", stats.token),
    }
    let lag = |d: Option<Duration>| d.map_or("n/a".to_string(), |d| format!("{d:?}"));
    println!(
        "  promoted {} by the leader, lag p50 {} p99 {}",
        stats.promoted,
        lag(stats.promotion_lag_p50),
        lag(stats.promotion_lag_p99)
    );
    if stats.manual_clock {
        println!("  manual clock at {} ms", ms(stats.now));
    }
    for info in queue.dead(10).await? {
        println!(
            "  dead {:?} after {} attempts: {}",
            info.id,
            info.attempts,
            info.last_error.as_deref().unwrap_or("")
        );
    }
    Ok(())
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
            println!(
                "start {} {} {} {}",
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
    let start = queue.now().await.map_err(|e| e.to_string())?;
    let ids: Vec<String> = (first..first + count).map(|i| format!("job{i}")).collect();
    for (chunk_index, chunk) in ids.chunks(batch as usize).enumerate() {
        let jobs = chunk.iter().enumerate().map(|(i, id)| {
            let n = (chunk_index * batch as usize + i) as u64;
            let due = start + Duration::from_millis(spread * n / count.max(1));
            (id.as_str(), id.as_bytes(), When::At(due))
        });
        // Scheduling is idempotent on the id: a batch whose answer was lost (Redis
        // restarting) is sent again until Redis takes it.
        let jobs: Vec<_> = jobs.collect();
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
