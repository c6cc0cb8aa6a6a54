//! What the cold tier's tests share (durable_cold.rs on a directory, durable_cold_s3.rs
//! on s3s-fs): a temporary directory, the queue on the manual clock with its leader and
//! a worker, far jobs, the clock moved and the jobs drained (each checked not early, and
//! with `stride_to` not late either), counts read from Redis. Each test binary uses a
//! part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tickless_durable::JobState;
use tickless_durable::{ColdTier, Leader, LeaderOptions, Queue, When, Worker, WorkerOptions};
use tickless_test_support::{at, queue_name, RedisServer, T0};

pub const HOUR: u64 = 3_600_000;
pub const FAR: u64 = 48 * HOUR;

/// A directory of its own under the system's temporary directory, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(test: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "tickless-cold-{}-{}",
            std::process::id(),
            queue_name(test)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the store's directory");
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every file under `dir`.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

pub async fn setup(server: &RedisServer, test: &str, tier: ColdTier) -> (Queue, Leader, Worker) {
    let queue = Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect")
        .with_cold_tier(tier);
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    let worker = queue.worker(WorkerOptions::default());
    (queue, leader, worker)
}

pub fn payload(i: u64) -> Vec<u8> {
    let mut p = format!("job {i} ").into_bytes();
    p.resize(200, b'.');
    p
}

/// `n` far jobs `far:<i>`, due FAR + i seconds after `from`, 200-byte payloads.
pub async fn schedule_far(queue: &Queue, from: u64, n: u64) -> BTreeMap<String, u64> {
    let jobs: Vec<(String, Vec<u8>, u64)> = (0..n)
        .map(|i| (format!("far:{i}"), payload(i), from + FAR + i * 1000))
        .collect();
    let added = queue
        .schedule_batch(
            jobs.iter()
                .map(|(id, p, due)| (id.as_str(), p.as_slice(), When::At(at(*due)))),
        )
        .await
        .unwrap();
    assert!(added.iter().all(|&a| a));
    jobs.into_iter().map(|(id, _, due)| (id, due)).collect()
}

/// Moves the manual clock to `to`, lets the leader step, and returns what a worker then
/// gets (acked): (id, due in ms), each checked not early.
pub async fn run_to(
    queue: &Queue,
    leader: &mut Leader,
    worker: &Worker,
    to: u64,
) -> Vec<(String, u64)> {
    queue.set_manual_clock(Some(at(to))).await.unwrap();
    leader.step().await.unwrap();
    // The tick after a load promotes what the load put into the staged window.
    leader.step().await.unwrap();
    let mut got = Vec::new();
    loop {
        let jobs = worker.try_claim(1000).await.unwrap();
        if jobs.is_empty() {
            return got;
        }
        for job in jobs {
            let due = ms(job.due());
            assert!(
                due <= to,
                "{} handed out at {to}, due {due}: early",
                job.id()
            );
            assert!(
                job.claimed_at() >= job.due(),
                "{} claimed before due",
                job.id()
            );
            got.push((job.id().to_string(), due));
            worker.ack(&job).await.unwrap();
        }
    }
}

/// [`run_to`], checked on time as well as not early: what comes is exactly the jobs of
/// `owed` due at or before `to`, each once and with its due time, and they leave `owed`. A
/// drain stepped in strides with it sees each job come in the first stride whose end
/// reaches its due time: a job filed later than its due time (a load that put it into the
/// wheel late) fails it, as one handed out early does.
pub async fn stride_to(
    queue: &Queue,
    leader: &mut Leader,
    worker: &Worker,
    to: u64,
    owed: &mut BTreeMap<String, u64>,
) -> Vec<(String, u64)> {
    let got = run_to(queue, leader, worker, to).await;
    let mut came: BTreeMap<String, u64> = BTreeMap::new();
    for (id, due) in &got {
        assert!(
            came.insert(id.clone(), *due).is_none(),
            "{id} came twice by {to}"
        );
        assert_eq!(
            owed.get(id),
            Some(due),
            "{id} (due {due}) came by {to}: it was not owed, or owed at another time"
        );
    }
    let late: Vec<(&String, &u64)> = owed
        .iter()
        .filter(|(id, &due)| due <= to && !came.contains_key(*id))
        .collect();
    assert!(
        late.is_empty(),
        "{} jobs due by {to} did not come by then (late), the first: {:?}",
        late.len(),
        &late[..late.len().min(5)]
    );
    for id in came.keys() {
        owed.remove(id);
    }
    got
}

/// Polls `what` every 10 ms until it holds, for at most `limit`.
pub async fn wait_until<F: std::future::Future<Output = bool>>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = std::time::Instant::now() + limit;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "waited {limit:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `t` in ms since the Unix epoch.
pub fn ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The queue's `jobs` hash's name.
pub fn jobs_key(queue: &Queue) -> String {
    format!("tickless:{{{}}}:jobs", queue.name())
}

pub async fn hlen(server: &RedisServer, key: &str) -> u64 {
    let mut admin = server.admin().await;
    redis::cmd("HLEN")
        .arg(key)
        .query_async(&mut admin)
        .await
        .unwrap()
}

pub async fn hget(server: &RedisServer, key: &str, field: &str) -> String {
    let mut admin = server.admin().await;
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(&mut admin)
        .await
        .unwrap_or_else(|err| panic!("HGET {key} {field}: {err}"))
}

/// The keys of the queue's cold index.
pub async fn index_keys(server: &RedisServer, queue: &Queue) -> Vec<String> {
    let mut admin = server.admin().await;
    redis::cmd("KEYS")
        .arg(format!("tickless:{{{}}}:ci:*", queue.name()))
        .query_async(&mut admin)
        .await
        .unwrap()
}

/// How many entries the queue's cold index holds.
pub async fn index_entries(server: &RedisServer, queue: &Queue) -> u64 {
    let mut admin = server.admin().await;
    let keys = index_keys(server, queue).await;
    let mut n = 0;
    for key in keys {
        let len: u64 = redis::cmd("HLEN")
            .arg(&key)
            .query_async(&mut admin)
            .await
            .unwrap();
        n += len;
    }
    n
}

/// Every promise of `Queue` on the cold jobs [`schedule_far`] made (all moved already): the
/// lookup reads `far:7`'s record from the store; scheduling a cold id again, alone or in a
/// batch, adds nothing; `far:0`..`far:99` are cancelled, once, and then looked up as gone
/// (and cannot be rescheduled); `far:100`..`far:149` are rescheduled to T0 + 60 s (+ i ms)
/// and are in the wheel again with their payload. `due` loses the cancelled ids and gets
/// the new due times.
pub async fn keep_promises(queue: &Queue, due: &mut BTreeMap<String, u64>) {
    let info = queue
        .job("far:7")
        .await
        .unwrap()
        .expect("a cold job is a job");
    assert_eq!(info.state, JobState::Cold);
    assert_eq!(info.due, at(due["far:7"]));
    assert_eq!(info.payload, payload(7));
    assert_eq!((info.attempts, info.max_attempts), (0, 5));

    // Idempotent on id: a cold id names a job, alone or in a batch.
    let soon = When::After(std::time::Duration::from_secs(1));
    assert!(!queue.schedule("far:5", b"other", soon).await.unwrap());
    let ids: Vec<String> = (10..20).map(|i| format!("far:{i}")).collect();
    let again = queue
        .schedule_batch(ids.iter().map(|id| (id.as_str(), b"x", soon)))
        .await
        .unwrap();
    assert!(
        again.iter().all(|&a| !a),
        "a batch of cold ids added {again:?}"
    );

    // Cancel 100, once.
    let cancelled: Vec<String> = (0..100).map(|i| format!("far:{i}")).collect();
    let removed = queue
        .cancel_batch(cancelled.iter().map(String::as_str))
        .await
        .unwrap();
    assert!(removed.iter().all(|&r| r));
    assert!(!queue.cancel("far:3").await.unwrap(), "cancelled twice");
    assert!(queue.job("far:3").await.unwrap().is_none());
    assert!(!queue.reschedule("far:3", soon).await.unwrap());
    for id in &cancelled {
        due.remove(id);
    }

    // Reschedule 50 to the next minute: read from the store, back into the wheel.
    for i in 100..150 {
        let id = format!("far:{i}");
        assert!(queue
            .reschedule(&id, When::At(at(T0 + 60_000 + i)))
            .await
            .unwrap());
        due.insert(id, T0 + 60_000 + i);
    }
    let info = queue.job("far:120").await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.payload),
        (JobState::Scheduled, payload(120))
    );
}
