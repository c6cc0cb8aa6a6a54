//! Big batches against a real `redis-server`, on the queue's manual clock: a claim, a
//! tick and an extend of 4,000 or more jobs, past the ~8,000 values Lua 5.1's `unpack`
//! takes (two per job in most writes), move every job and strand none; batch sizes
//! above the most one script call takes (10,000) are clamped, not sent.

use tickless_test_support as support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{queue_name, RedisServer};
use tickless_durable::{Leader, LeaderOptions, Queue, Worker, WorkerOptions};

/// A multiple of 1024 ms (level 0's bucket width), 26,624 ms into a level-1 bucket.
const T0: u64 = 1_700_000_000_000;
/// More jobs than one unpack of two values per job takes (~8,000 values).
const MANY: usize = 4100;

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

async fn queue(server: &RedisServer, test: &str) -> Queue {
    let queue = Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect");
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue
}

/// Schedules `ids`, each due at `due(i)`.
async fn schedule(queue: &Queue, ids: &[String], due: impl Fn(usize) -> u64) {
    let jobs = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), b"", at(due(i)).into()));
    let added = queue.schedule_batch(jobs).await.unwrap();
    assert!(added.iter().all(|&a| a));
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("j{i}")).collect()
}

/// A leader ticking up to `batch` jobs per call, whose lease outlives any manual clock
/// move of these tests.
async fn leader(queue: &Queue, batch: usize) -> Leader {
    let mut options = LeaderOptions::default();
    options.busy_lease = Duration::from_secs(86_400);
    options.idle_lease = options.busy_lease;
    options.batch = batch;
    let mut leader = queue.leader(options);
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    leader
}

fn llen(server: &RedisServer, queue: &Queue, key: &str) -> usize {
    let key = format!("tickless:{{{}}}:{key}", queue.name());
    let command = if key.ends_with(":ready") {
        "LLEN"
    } else {
        "ZCARD"
    };
    server.cli(&[command, &key]).trim().parse().unwrap()
}

/// Claims `n` jobs a thousand at a time (below any limit), for the tests of what follows.
async fn claim_in_thousands(worker: &Worker, n: usize) {
    let mut got = 0;
    while got < n {
        got += worker.try_claim(1000).await.unwrap().len();
    }
    assert_eq!(got, n);
}

/// One claim of 4,100 ready jobs takes them all. (It used to take `ready` apart and then
/// fail writing the records, 8,200 values in one unpack: every popped job stranded.)
#[tokio::test]
async fn a_claim_of_4100_jobs_takes_every_one() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigclaim").await;
    let all = ids(MANY);
    schedule(&queue, &all, |_| T0).await;
    let worker = queue.worker(WorkerOptions::default());
    let jobs = worker.try_claim(MANY).await.unwrap();
    let got: BTreeSet<&str> = jobs.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
    assert_eq!(llen(&server, &queue, "ready"), 0);
    assert_eq!(llen(&server, &queue, "flight"), MANY);
}

/// A tick whose batch takes 4,100 ended leases puts every job back in `ready`, and each
/// is delivered again. (It used to take them out of `flight` and then fail writing their
/// notes to `errors`: every one stranded, a batch more at each retry.)
#[tokio::test]
async fn a_tick_of_4100_ended_leases_delivers_every_job_again() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigtick").await;
    let all = ids(MANY);
    schedule(&queue, &all, |_| T0).await;
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(10);
    let worker = queue.worker(options);
    claim_in_thousands(&worker, MANY).await;
    let mut leader = leader(&queue, 5000).await;
    queue
        .advance_manual_clock(Duration::from_secs(20))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(llen(&server, &queue, "flight"), 0);
    assert_eq!(llen(&server, &queue, "ready"), MANY);
    let again = worker.try_claim(MANY).await.unwrap();
    assert!(again.iter().all(|j| j.attempt() == 2));
    let got: BTreeSet<&str> = again.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
}

/// A tick that drains 17 due buckets of 256 jobs (4,352 jobs, more than 16 buckets' worth
/// of records in one write) promotes every job. (It used to empty the buckets and then
/// fail writing the records.)
#[tokio::test]
async fn a_tick_draining_17_full_buckets_promotes_every_job() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigdrain").await;
    let all = ids(17 * 256);
    // Bucket k's jobs at T0 + 2048 + k * 1024: 17 level-0 buckets of 256 jobs (past the
    // staged window, within T0's level-1 bucket).
    schedule(&queue, &all, |i| T0 + 2048 + (i as u64 / 256) * 1024).await;
    assert_eq!(llen(&server, &queue, "due"), 17);
    let mut leader = leader(&queue, 5000).await;
    queue
        .advance_manual_clock(Duration::from_secs(30))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(llen(&server, &queue, "ready"), all.len());
    let worker = queue.worker(WorkerOptions::default());
    let jobs = worker.try_claim(all.len()).await.unwrap();
    let got: BTreeSet<&str> = jobs.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
}

/// One extend of 4,100 running jobs extends every lease. (It used to fail outright:
/// 8,200 values in one unpack.)
#[tokio::test]
async fn extending_4100_running_jobs_extends_every_lease() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigextend").await;
    let all = ids(MANY);
    schedule(&queue, &all, |_| T0).await;
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(10);
    let worker = queue.worker(options);
    claim_in_thousands(&worker, MANY).await;
    queue
        .advance_manual_clock(Duration::from_secs(9))
        .await
        .unwrap();
    let extended = worker.extend(all.iter().map(String::as_str)).await.unwrap();
    assert_eq!(extended, MANY);
    // Every lease now ends at T0 + 19 s: none has ended at T0 + 15 s.
    let mut leader = leader(&queue, 5000).await;
    queue
        .advance_manual_clock(Duration::from_secs(6))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(llen(&server, &queue, "flight"), MANY);
    assert_eq!(llen(&server, &queue, "ready"), 0);
}

/// A claim of `usize::MAX` and a leader batch of `usize::MAX` are clamped to what one
/// script call takes, and work. (They used to be sent as is, and refused by Redis.)
#[tokio::test]
async fn batches_above_the_most_a_call_takes_are_clamped() {
    let server = RedisServer::start();
    let queue = queue(&server, "clamped").await;
    let all = ids(3);
    schedule(&queue, &all, |i| T0 + 5000 * i as u64).await;
    let mut leader = leader(&queue, usize::MAX).await;
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let mut options = WorkerOptions::default();
    options.concurrency = usize::MAX;
    let worker = queue.worker(options);
    let jobs = worker.try_claim(usize::MAX).await.unwrap();
    let got: BTreeSet<&str> = jobs.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
}
