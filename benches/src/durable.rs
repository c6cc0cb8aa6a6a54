//! The `durable` section of the `compare` program (feature `redis`): tickless's Redis
//! wheel against a ZSET-per-job queue (one hash and one sorted-set member per job, as
//! Sidekiq and BullMQ keep delayed jobs), built here in Rust, on the same local
//! `redis-server` (started here, append-only file on, `appendfsync everysec`) in the same
//! run. Redis commands and CPU come from `INFO commandstats` / `INFO cpu` deltas, memory
//! from `used_memory` deltas over jobs with an empty payload (so: payload excluded).

#[path = "durable_peer.rs"]
mod peer;

use peer::Peer;
use redis::aio::MultiplexedConnection;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickless_durable::{ConnectOptions, LeaderOptions, Queue, When, WorkerOptions};
use tickless_test_support::RedisServer; // the tests' own server helper

/// What this section found, as (target, measured, met).
pub type Row = (String, String, bool);

struct Sizes {
    rounds: usize,
    jobs: usize,
    lag_jobs: usize,
    lag_spread: Duration,
    idle_jobs: usize,
    idle_window: Duration,
}

pub fn run(quick: bool) -> Vec<Row> {
    let sizes = if quick {
        Sizes {
            rounds: 1,
            jobs: 20_000,
            lag_jobs: 5_000,
            lag_spread: Duration::from_secs(2),
            idle_jobs: 20_000,
            idle_window: Duration::from_secs(10),
        }
    } else {
        Sizes {
            rounds: 3,
            jobs: 100_000,
            lag_jobs: 20_000,
            lag_spread: Duration::from_secs(5),
            idle_jobs: 100_000,
            idle_window: Duration::from_secs(60),
        }
    };
    let server = RedisServer::start_with_fsync("everysec");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(all(&server.url(), &sizes))
}

async fn all(url: &str, sizes: &Sizes) -> Vec<Row> {
    let client = redis::Client::open(url).expect("url");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    println!(
        "\n## Durable jobs (Redis {}, append-only on, everysec)\n",
        info_field(&mut admin, "server", "redis_version").await
    );
    let mut rows = Vec::new();

    // Schedule, memory, cancel.
    println!(
        "| workload ({} jobs) | tickless wheel | ZSET per job (peer) | ratio |",
        sizes.jobs
    );
    println!("|---|---:|---:|---:|");
    let ours = churn(url, &mut admin, sizes.jobs, false).await;
    let peer = churn(url, &mut admin, sizes.jobs, true).await;
    let line =
        |what: &str, a: f64, b: f64| println!("| {what} | {a:.0} | {b:.0} | {:.2}x |", a / b);
    line("schedule, jobs/s (batched, 128 per call)", ours.0, peer.0);
    line(
        "bytes of Redis memory per pending job, payload excluded",
        ours.1,
        peer.1,
    );
    line("cancel, jobs/s (batched, 128 per call)", ours.2, peer.2);
    rows.push((
        "schedule >= 100,000 jobs/s".into(),
        format!("{:.0}/s (peer {:.0})", ours.0, peer.0),
        ours.0 >= 100_000.0,
    ));
    rows.push((
        "<= 200 bytes per pending job".into(),
        format!("{:.0} B (peer {:.0})", ours.1, peer.1),
        ours.1 <= 200.0,
    ));
    rows.push((
        "cancel >= 50,000/s".into(),
        format!("{:.0}/s (peer {:.0})", ours.2, peer.2),
        ours.2 >= 50_000.0,
    ));

    // Delivery: lag, commands and CPU per delivered job.
    // Rounds interleaved, figures the median of the rounds (the host is shared).
    let (mut ours, mut peer, mut resending) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..sizes.rounds {
        ours.push(deliver(url, &mut admin, sizes, Who::Ours, round).await);
        peer.push(deliver(url, &mut admin, sizes, Who::Peer, round).await);
        resending.push(deliver(url, &mut admin, sizes, Who::OursResending, round).await);
    }
    let (ours, peer) = (Delivery::median(ours), Delivery::median(peer));
    let resending = Delivery::median(resending);
    println!(
        "\n| delivery: {} jobs due over {:?}, median of {} rounds | tickless wheel | ZSET per job (peer) |",
        sizes.lag_jobs, sizes.lag_spread, sizes.rounds
    );
    println!("|---|---:|---:|");
    println!("| delivered | {} | {} |", ours.delivered, peer.delivered);
    println!(
        "| early (claimed before due) | {} | {} |",
        ours.early, peer.early
    );
    println!(
        "| due-to-handler lag p50 ms | {:.1} | {:.1} |",
        ours.p50, peer.p50
    );
    println!(
        "| due-to-handler lag p99 ms | {:.1} | {:.1} |",
        ours.p99, peer.p99
    );
    println!("| Redis commands per delivered job (schedule to ack, inner script calls included) | {:.2} | {:.2} |", ours.commands, peer.commands);
    println!(
        "| Redis CPU µs per delivered job | {:.1} | {:.1} |",
        ours.cpu_us, peer.cpu_us
    );
    // The same with exact resends (`retry_schedules_for`, a cluster's default): every
    // job is due within the resend window, so each schedule remembers its token.
    println!(
        "| the same, scheduled with `retry_schedules_for(10 s)` (exact resends): Redis CPU µs per delivered job; lag p99 ms | {:.1} ({:+.1}); {:.1} | |",
        resending.cpu_us,
        resending.cpu_us - ours.cpu_us,
        resending.p99
    );
    rows.push((
        "<= 10 Redis commands per delivered job".into(),
        format!("{:.2} (peer {:.2})", ours.commands, peer.commands),
        ours.commands <= 10.0,
    ));
    rows.push((
        "<= 40 µs Redis CPU per delivered job".into(),
        format!("{:.1} µs (peer {:.1})", ours.cpu_us, peer.cpu_us),
        ours.cpu_us <= 40.0,
    ));
    rows.push((
        "lag p50 <= 2 ms, p99 <= 20 ms".into(),
        format!(
            "p50 {:.1} p99 {:.1} ms (peer {:.1} / {:.1})",
            ours.p50, ours.p99, peer.p50, peer.p99
        ),
        ours.p50 <= 2.0 && ours.p99 <= 20.0,
    ));
    rows.push((
        "0 delivered early, 0 lost".into(),
        format!(
            "{} early, {} of {} delivered",
            ours.early, ours.delivered, sizes.lag_jobs
        ),
        ours.early == 0 && ours.delivered == sizes.lag_jobs,
    ));

    // Faults: a worker that dies, a leader that dies.
    let (lease, worst) = redelivery(url).await;
    println!("\n| fault (tickless wheel) | measured |");
    println!("|---|---:|");
    println!("| redelivery after a worker dies holding jobs, worst of 5, lease {lease:?} | lease + {} ms |", worst.as_millis());
    rows.push((
        "redelivery <= lease + 1 s, every time".into(),
        format!("lease + {} ms (worst of 5)", worst.as_millis()),
        worst <= Duration::from_secs(1),
    ));
    let failover = failover(url).await;
    println!(
        "| leader failover after an abrupt end, worst of 3 | {} ms |",
        failover.as_millis()
    );
    rows.push((
        "leader failover <= 1 s".into(),
        format!("{} ms (worst of 3)", failover.as_millis()),
        failover <= Duration::from_secs(1),
    ));

    // Idle.
    let (ours, peer) = (
        idle(url, &mut admin, sizes, false).await,
        idle(url, &mut admin, sizes, true).await,
    );
    println!("| idle: {} jobs due in an hour, a leader, a candidate and a worker, over {:?}: commands/s | {ours:.2} (peer: one mover, no election: {peer:.2}) |", sizes.idle_jobs, sizes.idle_window);
    rows.push((
        "idle <= 0.5 Redis commands/s".into(),
        format!("{ours:.2}/s (peer {peer:.2})"),
        ours <= 0.5,
    ));
    rows
}

// ---------------------------------------------------------------------------------------
// Redis readings

async fn info(conn: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .expect("INFO")
}

/// One field of `INFO section` (`?` if absent); `callbacks` reads the server's version.
pub async fn info_field(conn: &mut MultiplexedConnection, section: &str, field: &str) -> String {
    let text = info(conn, section).await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// Commands served so far (script-inner calls included), less INFO's own.
async fn commands(conn: &mut MultiplexedConnection) -> f64 {
    tickless_test_support::calls_but_info(&info(conn, "commandstats").await) as f64
}

/// Redis's CPU time so far, in µs (`used_cpu_sys + used_cpu_user`); `callbacks` reads it too.
pub async fn cpu_us(conn: &mut MultiplexedConnection) -> f64 {
    let sys: f64 = info_field(conn, "cpu", "used_cpu_sys")
        .await
        .parse()
        .unwrap_or(0.0);
    let user: f64 = info_field(conn, "cpu", "used_cpu_user")
        .await
        .parse()
        .unwrap_or(0.0);
    (sys + user) * 1e6
}

async fn used_memory(conn: &mut MultiplexedConnection) -> f64 {
    info_field(conn, "memory", "used_memory")
        .await
        .parse()
        .unwrap_or(0.0)
}

fn in_an_hour(i: usize, n: usize) -> When {
    // Due between 1 h and 1 h 10 min from now, spread evenly.
    When::After(Duration::from_secs(3600) + Duration::from_millis((600_000 * i / n.max(1)) as u64))
}

/// `n` job ids, `prefix:0000000` on.
pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i:07}")).collect()
}

// ---------------------------------------------------------------------------------------
// Workloads

/// (schedule jobs/s, bytes per pending job, cancel jobs/s).
async fn churn(
    url: &str,
    admin: &mut MultiplexedConnection,
    n: usize,
    peer: bool,
) -> (f64, f64, f64) {
    let name = if peer { "peer-churn" } else { "churn" };
    let ids = ids("order", n);
    let before = used_memory(admin).await;
    let start = Instant::now();
    if peer {
        let peer = Peer::connect(url, name).await;
        peer.schedule(
            ids.iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), in_an_hour(i, n))),
        )
        .await;
        let scheduled = n as f64 / start.elapsed().as_secs_f64();
        let bytes = (used_memory(admin).await - before) / n as f64;
        let start = Instant::now();
        peer.cancel(&ids).await;
        (scheduled, bytes, n as f64 / start.elapsed().as_secs_f64())
    } else {
        let queue = Queue::connect(url, name).await.expect("connect");
        let jobs = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), b"".as_slice(), in_an_hour(i, n)));
        let added = queue.schedule_batch(jobs).await.expect("schedule");
        assert!(added.iter().all(|a| *a));
        let scheduled = n as f64 / start.elapsed().as_secs_f64();
        let bytes = (used_memory(admin).await - before) / n as f64;
        let start = Instant::now();
        let removed = queue
            .cancel_batch(ids.iter().map(String::as_str))
            .await
            .expect("cancel");
        assert!(removed.iter().all(|r| *r));
        (scheduled, bytes, n as f64 / start.elapsed().as_secs_f64())
    }
}

/// Whose queue a delivery round runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Ours,
    /// Ours, its schedules sent with a resend token (`retry_schedules_for`).
    OursResending,
    Peer,
}

#[derive(Clone, Copy)]
struct Delivery {
    delivered: usize,
    early: usize,
    p50: f64,
    p99: f64,
    commands: f64,
    cpu_us: f64,
}

impl Delivery {
    /// Each figure's median over the rounds; `delivered` the fewest, `early` the most.
    fn median(rounds: Vec<Delivery>) -> Delivery {
        let mid = |f: fn(&Delivery) -> f64| {
            let mut values: Vec<f64> = rounds.iter().map(f).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        Delivery {
            delivered: rounds.iter().map(|r| r.delivered).min().unwrap_or(0),
            early: rounds.iter().map(|r| r.early).max().unwrap_or(0),
            p50: mid(|r| r.p50),
            p99: mid(|r| r.p99),
            commands: mid(|r| r.commands),
            cpu_us: mid(|r| r.cpu_us),
        }
    }
}

/// `lag_jobs` jobs due over `lag_spread`, from 1 s ahead; one leader and one worker.
async fn deliver(
    url: &str,
    admin: &mut MultiplexedConnection,
    sizes: &Sizes,
    who: Who,
    round: usize,
) -> Delivery {
    let n = sizes.lag_jobs;
    let peer = who == Who::Peer;
    let name = format!("{who:?}-deliver-{round}");
    let name = name.as_str();
    let lags = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let early = Arc::new(AtomicUsize::new(0));
    let ids = ids("job", n);
    let spread = sizes.lag_spread.as_millis() as usize;
    let when = |i: usize| When::After(Duration::from_millis(1_000 + (spread * i / n) as u64));
    let (commands0, cpu0) = (commands(admin).await, cpu_us(admin).await);
    let tasks = if peer {
        let peer = Peer::connect(url, name).await;
        peer.schedule(ids.iter().enumerate().map(|(i, id)| (id.as_str(), when(i))))
            .await;
        vec![
            tokio::spawn(peer.clone().mover()),
            tokio::spawn(peer.worker(lags.clone(), early.clone())),
        ]
    } else {
        let mut options = ConnectOptions::new(url);
        if who == Who::OursResending {
            options = options.retry_schedules_for(Duration::from_secs(10));
        }
        let queue = options.connect(name).await.expect("connect");
        let jobs = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), b"".as_slice(), when(i)));
        queue.schedule_batch(jobs).await.expect("schedule");
        let leader = queue.leader(LeaderOptions::default()).spawn();
        let (lags, early) = (lags.clone(), early.clone());
        let worker = queue.worker(WorkerOptions::default()).run(move |job| {
            let lag = job.lag();
            if job.claimed_at() < job.due() {
                early.fetch_add(1, Ordering::Relaxed);
            }
            lags.lock().unwrap().push(lag);
            async { Ok::<(), std::io::Error>(()) }
        });
        let worker = tokio::spawn(async move {
            let _ = worker.await;
        });
        vec![
            tokio::spawn(async move {
                // Keeps the leader alive until the task is aborted.
                let _leader = leader;
                std::future::pending::<()>().await
            }),
            worker,
        ]
    };
    let deadline = Instant::now() + sizes.lag_spread + Duration::from_secs(30);
    while lags.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the last acks go out before reading the counters.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (commands1, cpu1) = (commands(admin).await, cpu_us(admin).await);
    for task in tasks {
        task.abort();
    }
    let mut lags = lags.lock().unwrap().clone();
    lags.sort();
    let q = |q: f64| {
        lags.get(((lags.len().max(1) - 1) as f64 * q) as usize)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    Delivery {
        delivered: lags.len(),
        early: early.load(Ordering::Relaxed),
        p50: q(0.5),
        p99: q(0.99),
        commands: (commands1 - commands0) / n as f64,
        cpu_us: (cpu1 - cpu0) / n as f64,
    }
}

/// A worker claims 50 jobs and dies (its connection dropped, no ack); the time from its
/// lease's end to another worker's claim of the first of them, worst of 5 rounds.
async fn redelivery(url: &str) -> (Duration, Duration) {
    let lease = Duration::from_secs(2);
    let queue = Queue::connect(url, "redelivery").await.expect("connect");
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let ids = ids(&format!("r{round}"), 50);
        queue
            .schedule_batch(
                ids.iter()
                    .map(|id| (id.as_str(), b"".as_slice(), When::After(Duration::ZERO))),
            )
            .await
            .expect("schedule");
        let mut options = WorkerOptions::default();
        options.lease = lease;
        let dying = Queue::connect(url, "redelivery")
            .await
            .expect("connect")
            .worker(options.clone());
        let held = dying.try_claim(50).await.expect("claim");
        let claimed = Instant::now();
        assert_eq!(held.len(), 50);
        drop(dying);
        let mut rescuer = queue.worker(options);
        let again = rescuer.claim(50).await.expect("claim again");
        let late = claimed.elapsed().saturating_sub(lease);
        worst = worst.max(late);
        for job in &again {
            rescuer.ack(job).await.expect("ack");
        }
    }
    drop(leader);
    (lease, worst)
}

/// Two candidates, jobs due all the time; the leader ends abruptly (its task aborted, its
/// connections closed, no release): time until the other leads, worst of 3.
async fn failover(url: &str) -> Duration {
    let queue = Queue::connect(url, "failover").await.expect("connect");
    let ids = ids("f", 3000);
    queue
        .schedule_batch(ids.iter().enumerate().map(|(i, id)| {
            (
                id.as_str(),
                b"".as_slice(),
                When::After(Duration::from_millis(10 * i as u64)),
            )
        }))
        .await
        .expect("schedule");
    let mut candidates = vec![
        queue.leader(LeaderOptions::default()).spawn(),
        queue.leader(LeaderOptions::default()).spawn(),
    ];
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let leading = loop {
            if let Some(i) = candidates.iter().position(|c| c.stats().leading) {
                break i;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        candidates.remove(leading); // dropped: aborted, no release
        let ended = Instant::now();
        while !candidates[0].stats().leading {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        worst = worst.max(ended.elapsed());
        candidates.push(queue.leader(LeaderOptions::default()).spawn());
    }
    worst
}

/// Commands per second over the idle window with `idle_jobs` jobs due in an hour.
async fn idle(url: &str, admin: &mut MultiplexedConnection, sizes: &Sizes, peer: bool) -> f64 {
    let n = sizes.idle_jobs;
    let name = if peer { "peer-idle" } else { "idle" };
    let ids = ids("i", n);
    let tasks = if peer {
        let peer = Peer::connect(url, name).await;
        peer.schedule(
            ids.iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), in_an_hour(i, n))),
        )
        .await;
        let lags = Arc::new(Mutex::new(Vec::new()));
        vec![
            tokio::spawn(peer.clone().mover()),
            tokio::spawn(peer.worker(lags, Arc::default())),
        ]
    } else {
        let queue = Queue::connect(url, name).await.expect("connect");
        queue
            .schedule_batch(
                ids.iter()
                    .enumerate()
                    .map(|(i, id)| (id.as_str(), b"".as_slice(), in_an_hour(i, n))),
            )
            .await
            .expect("schedule");
        let (a, b) = (
            queue.leader(LeaderOptions::default()).spawn(),
            queue.leader(LeaderOptions::default()).spawn(),
        );
        let worker = queue
            .worker(WorkerOptions::default())
            .run(|_| async { Ok::<(), std::io::Error>(()) });
        vec![
            tokio::spawn(async move {
                let _keep = (a, b);
                std::future::pending::<()>().await
            }),
            tokio::spawn(async move {
                let _ = worker.await;
            }),
        ]
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = commands(admin).await;
    tokio::time::sleep(sizes.idle_window).await;
    let after = commands(admin).await;
    for task in tasks {
        task.abort();
    }
    (after - before) / sizes.idle_window.as_secs_f64()
}
