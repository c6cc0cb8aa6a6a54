//! The cluster part of the durable section (feature `redis`): schedules per second on one
//! node against three masters (16 queues, replicas off, append-only off on both), lag on
//! the cluster, the time from a master's `kill -9` to deliveries resuming, and what
//! `WAIT` for one replica costs per schedule and per batch. Every server is started here
//! with the tests' own helpers; Redis CPU comes from `INFO cpu` deltas summed over the
//! masters.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickless_durable::{ConnectOptions, LeaderOptions, Queue, When, WorkerOptions};
use tickless_test_support::{master_of_slot_seen_by, RedisCluster, RedisServer, NODE_TIMEOUT_MS};

/// What this part found, as (target, measured, met).
pub type Row = (String, String, bool);

const QUEUES: usize = 16;
const BATCH: usize = 1_000;

pub fn run(quick: bool) -> Vec<Row> {
    let batches = if quick { 4 } else { 12 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let names: Vec<String> = (0..QUEUES).map(|i| format!("c{i}")).collect();
    let mut rows = Vec::new();
    println!("\n## Durable jobs on Redis Cluster (3 masters on this 2-core host)\n");

    // Schedules/s: one node, then three masters; rounds interleaved, best of each.
    let rounds = if quick { 1 } else { 3 };
    let (mut one, mut three) = ((0.0f64, 0.0f64), (0.0f64, 0.0f64));
    for round in 0..rounds {
        let node = RedisServer::start_with_args(&["--appendonly", "no"]);
        let options = ConnectOptions::new(&node.url());
        let r = runtime.block_on(schedule_rate(&options, &[&node], &names, batches, round));
        one = if r.0 > one.0 { r } else { one };
        drop(node);
        let cluster = RedisCluster::start(3, 0);
        let masters: Vec<&RedisServer> =
            cluster.masters().iter().map(|p| cluster.node(*p)).collect();
        let options = ConnectOptions::cluster(cluster.seeds());
        let r = runtime.block_on(schedule_rate(&options, &masters, &names, batches, round));
        three = if r.0 > three.0 { r } else { three };
    }
    println!(
        "| {QUEUES} queues, batches of {BATCH} (one in flight per queue), delays 5-10 s, best of {rounds} | one node | 3 masters | ratio |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| schedules/s | {:.0} | {:.0} | {:.2}x |",
        one.0,
        three.0,
        three.0 / one.0
    );
    println!(
        "| Redis CPU µs per scheduled job (summed over masters) | {:.1} | {:.1} | |",
        one.1, three.1
    );
    rows.push((
        "cluster schedules/s >= 1.6x one node (16 queues, 3 masters, replicas off)".into(),
        format!(
            "{:.0}/s vs {:.0}/s: {:.2}x",
            three.0,
            one.0,
            three.0 / one.0
        ),
        three.0 >= 1.6 * one.0,
    ));

    // Lag on the cluster.
    let cluster = RedisCluster::start(3, 0);
    let jobs = if quick { 150 } else { 400 };
    let (p50, p99, early, delivered) =
        runtime.block_on(lag(&ConnectOptions::cluster(cluster.seeds()), &names, jobs));
    drop(cluster);
    println!(
        "\n| cluster: {QUEUES} queues x {jobs} jobs due over 3 s, a leader and a worker each | measured |"
    );
    println!("|---|---:|");
    println!("| delivered | {delivered} of {} |", QUEUES * jobs);
    println!("| early | {early} |");
    println!("| due-to-handler lag p50 / p99 ms | {p50:.2} / {p99:.2} |");
    rows.push((
        "cluster lag p50 <= 2 ms, p99 <= 20 ms".into(),
        format!(
            "p50 {p50:.1} p99 {p99:.1} ms, {early} early, {delivered} of {} delivered",
            QUEUES * jobs
        ),
        p50 <= 2.0 && p99 <= 20.0 && early == 0 && delivered == QUEUES * jobs,
    ));

    // A master's kill -9.
    let mut cluster = RedisCluster::start(3, 1);
    let (promoted, resumed) = runtime.block_on(kill_a_master(&mut cluster, &names));
    drop(cluster);
    println!(
        "| kill -9 of a master (node timeout {NODE_TIMEOUT_MS} ms): replica promoted / deliveries of its queues resume | {} ms / {} ms |",
        promoted.as_millis(),
        resumed.as_millis()
    );
    let bound = Duration::from_millis(NODE_TIMEOUT_MS + 1_000);
    rows.push((
        format!(
            "kill -9 of a master to deliveries resuming <= node timeout + 1 s ({} ms)",
            bound.as_millis()
        ),
        format!(
            "{} ms (Redis promoted the replica at {} ms)",
            resumed.as_millis(),
            promoted.as_millis()
        ),
        resumed <= bound,
    ));

    // WAIT.
    let master = RedisServer::start_with_args(&["--appendonly", "no"]);
    let port = master.port().to_string();
    let replica =
        RedisServer::start_with_args(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let calls = if quick { 1_000 } else { 3_000 };
    let cost = runtime.block_on(wait_cost(&master.url(), calls, batches));
    println!(
        "| WAIT 1 replica: one schedule, µs per call, without / with ({calls} in a row) | {:.0} / {:.0} |",
        cost.0, cost.1
    );
    println!(
        "| WAIT 1 replica: a batch of {BATCH}, ms per batch, without / with | {:.2} / {:.2} |",
        cost.2, cost.3
    );
    rows.push((
        "WAIT cost per schedule and per batch (measured, no target)".into(),
        format!(
            "+{:.0} µs per schedule ({:.0} -> {:.0}), +{:.2} ms per batch of {BATCH} ({:.2} -> {:.2})",
            cost.1 - cost.0,
            cost.0,
            cost.1,
            cost.3 - cost.2,
            cost.2,
            cost.3
        ),
        true,
    ));
    rows
}

/// Used CPU seconds of a server, user + system (`INFO cpu`).
fn cpu_s(server: &RedisServer) -> f64 {
    let info = server.cli(&["INFO", "cpu"]);
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_user:") + field("used_cpu_sys:")
}

/// Every queue schedules `batches` batches of [`BATCH`] jobs, one batch in flight per
/// queue; (jobs/s, Redis CPU µs per job summed over `masters`).
async fn schedule_rate(
    options: &ConnectOptions,
    masters: &[&RedisServer],
    names: &[String],
    batches: usize,
    round: usize,
) -> (f64, f64) {
    let mut queues = Vec::new();
    for name in names {
        queues.push(
            options
                .connect(&format!("{name}-r{round}"))
                .await
                .expect("connect"),
        );
    }
    let cpu0: f64 = masters.iter().map(|m| cpu_s(m)).sum();
    let start = Instant::now();
    let tasks: Vec<_> = queues
        .into_iter()
        .map(|queue| {
            tokio::spawn(async move {
                for b in 0..batches {
                    let ids: Vec<String> = (0..BATCH).map(|i| format!("b{b}-{i}")).collect();
                    let jobs = ids.iter().enumerate().map(|(i, id)| {
                        let delay = Duration::from_millis(5_000 + (i * 5_000 / BATCH) as u64);
                        (id.as_str(), b"".as_slice(), When::After(delay))
                    });
                    queue.schedule_batch(jobs).await.expect("schedule");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a scheduler");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu1: f64 = masters.iter().map(|m| cpu_s(m)).sum();
    let jobs = (names.len() * batches * BATCH) as f64;
    (jobs / elapsed, (cpu1 - cpu0) * 1e6 / jobs)
}

/// Leaders and workers on every queue; `jobs` per queue due over 3 s from 1 s ahead:
/// (lag p50 ms, p99 ms, early, delivered).
async fn lag(options: &ConnectOptions, names: &[String], jobs: usize) -> (f64, f64, usize, usize) {
    let lags = Arc::new(Mutex::new(Vec::new()));
    let early = Arc::new(Mutex::new(0usize));
    let mut tasks = Vec::new();
    let mut leaders = Vec::new();
    for name in names {
        let queue = options
            .connect(&format!("lag-{name}"))
            .await
            .expect("connect");
        let ids: Vec<String> = (0..jobs).map(|i| format!("j{i}")).collect();
        queue
            .schedule_batch(ids.iter().enumerate().map(|(i, id)| {
                let delay = Duration::from_millis(1_000 + (i * 3_000 / jobs) as u64);
                (id.as_str(), b"".as_slice(), When::After(delay))
            }))
            .await
            .expect("schedule");
        leaders.push(queue.leader(LeaderOptions::default()).spawn());
        let (lags, early) = (lags.clone(), early.clone());
        tasks.push(tokio::spawn(queue.worker(WorkerOptions::default()).run(
            move |job| {
                lags.lock().unwrap().push(job.lag());
                if job.claimed_at() < job.due() {
                    *early.lock().unwrap() += 1;
                }
                async { Ok::<(), std::io::Error>(()) }
            },
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while lags.lock().unwrap().len() < names.len() * jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for task in tasks {
        task.abort();
    }
    for leader in leaders {
        let _ = leader.stop().await;
    }
    let mut lags = lags.lock().unwrap().clone();
    lags.sort();
    let q = |q: f64| {
        lags.get(((lags.len().max(1) - 1) as f64 * q) as usize)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    let early = *early.lock().unwrap();
    (q(0.5), q(0.99), early, lags.len())
}

/// Jobs due all the time on 16 queues; the master of `c0`'s slot is killed: (when a
/// survivor sees its replica promoted, when the first job of its queues is delivered),
/// both from the kill.
async fn kill_a_master(cluster: &mut RedisCluster, names: &[String]) -> (Duration, Duration) {
    let options = ConnectOptions::cluster(cluster.seeds());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut tasks = Vec::new();
    let mut leaders = Vec::new();
    for name in names {
        let queue = options.connect(name).await.expect("connect");
        let ids: Vec<String> = (0..400).map(|i| format!("j{i}")).collect();
        queue
            .schedule_batch(ids.iter().enumerate().map(|(i, id)| {
                let delay = Duration::from_millis(500 + 20 * i as u64);
                (id.as_str(), b"".as_slice(), When::After(delay))
            }))
            .await
            .expect("schedule");
        leaders.push(queue.leader(LeaderOptions::default()).spawn());
        let (tx, name) = (tx.clone(), name.clone());
        tasks.push(tokio::spawn(queue.worker(WorkerOptions::default()).run(
            move |_job| {
                let _ = tx.send(name.clone());
                async { Ok::<(), std::io::Error>(()) }
            },
        )));
    }
    let slot = cluster.slot_of("tickless:{c0}:meta");
    let victim = cluster.master_of_slot(slot);
    let survivor = *cluster.masters().iter().find(|m| **m != victim).unwrap();
    let on_victim: Vec<&String> = names
        .iter()
        .filter(|n| {
            cluster.master_of_slot(cluster.slot_of(&format!("tickless:{{{n}}}:meta"))) == victim
        })
        .collect();
    // Deliveries flowing.
    for _ in 0..200 {
        rx.recv().await;
    }
    let killed = Instant::now();
    cluster.kill(victim);
    let promoted = std::thread::spawn(move || loop {
        match master_of_slot_seen_by(survivor, slot) {
            Some(port) if port != victim => return killed.elapsed(),
            _ if killed.elapsed() > Duration::from_secs(30) => return killed.elapsed(),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    });
    let resumed = loop {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some(name))
                if on_victim.contains(&&name) && killed.elapsed() > Duration::from_millis(50) =>
            {
                break killed.elapsed();
            }
            Ok(Some(_)) => {}
            _ => break killed.elapsed(),
        }
    };
    for task in tasks {
        task.abort();
    }
    for leader in leaders {
        let _ = leader.stop().await;
    }
    (promoted.join().unwrap(), resumed)
}

/// (µs per schedule without WAIT, with; ms per batch without, with).
async fn wait_cost(url: &str, calls: usize, batches: usize) -> (f64, f64, f64, f64) {
    let plain = Queue::connect(url, "wait-off").await.expect("connect");
    let waiting = ConnectOptions::new(url)
        .wait_for_replicas(1, Duration::from_secs(1))
        .connect("wait-on")
        .await
        .expect("connect");
    let per_call = |queue: Queue, tag: &'static str| async move {
        let start = Instant::now();
        for i in 0..calls {
            let id = format!("{tag}{i}");
            queue
                .schedule(&id, b"", Duration::from_secs(3_600))
                .await
                .expect("schedule");
        }
        start.elapsed().as_secs_f64() * 1e6 / calls as f64
    };
    let per_batch = |queue: Queue, tag: &'static str| async move {
        let start = Instant::now();
        for b in 0..batches {
            let ids: Vec<String> = (0..BATCH).map(|i| format!("{tag}{b}-{i}")).collect();
            queue
                .schedule_batch(ids.iter().map(|id| {
                    (
                        id.as_str(),
                        b"".as_slice(),
                        When::After(Duration::from_secs(3_600)),
                    )
                }))
                .await
                .expect("schedule");
        }
        start.elapsed().as_secs_f64() * 1e3 / batches as f64
    };
    // Interleaved halves, so that a noisy neighbour hits both.
    let a1 = per_call(plain.clone(), "a").await;
    let b1 = per_call(waiting.clone(), "a").await;
    let a2 = per_call(plain.clone(), "b").await;
    let b2 = per_call(waiting.clone(), "b").await;
    let c = per_batch(plain, "c").await;
    let d = per_batch(waiting, "c").await;
    ((a1 + a2) / 2.0, (b1 + b2) / 2.0, c, d)
}
