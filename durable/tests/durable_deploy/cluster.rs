//! What the cluster tests share: queues each run by a leader and a worker, every
//! delivery as its handler saw it, and the checks made of them. "Early" is judged by the
//! clock a handler reads against the due time the test asked for, never by the
//! library's own figures (its claim reply); the nodes' clock is the test's
//! ([`assert_same_clock`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};
use tickless_durable::{ConnectOptions, LeaderHandle, LeaderOptions, Queue, WorkerOptions};
use tickless_test_support::RedisCluster;

/// A job: its queue's name and its id.
pub type Key = (String, String);

/// The earliest each job may run, by the test's clock: for a delay, the test's reading
/// before the call plus the delay (Redis counts the delay from when it receives the
/// call, later).
pub type Due = BTreeMap<Key, SystemTime>;

/// One delivery, as a handler saw it.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub queue: String,
    pub id: String,
    /// The handler's own reading of the clock, first thing when it ran.
    pub started: SystemTime,
    /// Its number ([`Job::delivery`](tickless_durable::Job::delivery)): meta's count of
    /// claims on the master that handed it out.
    pub delivery: u64,
}

impl Delivery {
    pub fn key(&self) -> Key {
        (self.queue.clone(), self.id.clone())
    }
}

/// Queues on a cluster, each with a leader and a worker running, every delivery sent to
/// one channel.
pub struct Running {
    pub queues: Vec<Queue>,
    leaders: Vec<LeaderHandle>,
    workers: Vec<tokio::task::JoinHandle<Result<(), tickless_durable::Error>>>,
    tx: tokio::sync::mpsc::UnboundedSender<Delivery>,
    deliveries: tokio::sync::mpsc::UnboundedReceiver<Delivery>,
}

/// Connects to `names` with `options` and runs a leader and a worker (of `worker`'s
/// options) on each.
pub async fn run_queues(
    options: &ConnectOptions,
    names: &[String],
    worker: WorkerOptions,
) -> Running {
    let mut running = Running::new();
    running.add(options, names, worker).await;
    running
}

impl Running {
    pub fn new() -> Running {
        let (tx, deliveries) = tokio::sync::mpsc::unbounded_channel();
        Running {
            queues: Vec::new(),
            leaders: Vec::new(),
            workers: Vec::new(),
            tx,
            deliveries,
        }
    }

    /// Connects to `names` with `options` and runs a leader and a worker (of `worker`'s
    /// options) on each, their deliveries sent to this one channel.
    pub async fn add(&mut self, options: &ConnectOptions, names: &[String], worker: WorkerOptions) {
        for name in names {
            let queue = options.connect(name).await.expect("connect to the cluster");
            self.leaders
                .push(queue.leader(LeaderOptions::default()).spawn());
            let (tx, name) = (self.tx.clone(), name.clone());
            let run = queue.worker(worker.clone()).run(move |job| {
                let (tx, queue, id) = (tx.clone(), name.clone(), job.id().to_string());
                let delivery = job.delivery();
                async move {
                    let started = SystemTime::now();
                    let _ = tx.send(Delivery {
                        queue,
                        id,
                        started,
                        delivery,
                    });
                    Ok::<(), String>(())
                }
            });
            self.workers.push(tokio::spawn(run));
            self.queues.push(queue);
        }
    }
}

impl Running {
    /// The next delivery; fails after `limit`, naming `what` it waited for.
    pub async fn next(&mut self, limit: Duration, what: &str) -> Delivery {
        tokio::time::timeout(limit, self.deliveries.recv())
            .await
            .unwrap_or_else(|_| panic!("no delivery within {limit:?}: waited for {what}"))
            .expect("the workers run")
    }

    /// The next `n` deliveries, all within `limit`, waiting for `what`.
    pub async fn take(&mut self, n: usize, limit: Duration, what: &str) -> Vec<Delivery> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut all = Vec::new();
        while all.len() < n {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            all.push(
                self.next(left, &format!("{what} ({} of {n} so far)", all.len()))
                    .await,
            );
        }
        all
    }

    /// Receives deliveries until every job of `expected` was delivered (counting those in
    /// `all` already); all deliveries, in order. Fails after `limit`.
    pub async fn until_delivered(
        &mut self,
        expected: &Due,
        limit: Duration,
        mut all: Vec<Delivery>,
    ) -> Vec<Delivery> {
        let mut missing: BTreeSet<Key> = expected.keys().cloned().collect();
        for d in &all {
            missing.remove(&d.key());
        }
        let deadline = tokio::time::Instant::now() + limit;
        while !missing.is_empty() {
            let delivery = tokio::time::timeout_at(deadline, self.deliveries.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{} of {} jobs not delivered after {limit:?}, e.g. {:?}",
                        missing.len(),
                        expected.len(),
                        missing.iter().take(5).collect::<Vec<_>>()
                    )
                })
                .expect("the workers run");
            missing.remove(&delivery.key());
            all.push(delivery);
        }
        all
    }

    /// Every delivery received so far and not yet taken.
    pub fn drain(&mut self) -> Vec<Delivery> {
        std::iter::from_fn(|| self.deliveries.try_recv().ok()).collect()
    }

    /// Waits until no queue holds a job (scheduled, ready, in flight or dead): every
    /// delivery was acked, so none is still to come. Fails after `limit`.
    pub async fn until_empty(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        for queue in &self.queues {
            loop {
                let stats = queue.stats().await;
                if let Ok(s) = &stats {
                    if s.scheduled + s.ready + s.in_flight + s.dead == 0 {
                        break;
                    }
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "queue {} still holds jobs after {limit:?}: {stats:?}",
                    queue.name()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    pub async fn stop(self) {
        for worker in &self.workers {
            worker.abort();
        }
        for leader in self.leaders {
            tokio::time::timeout(Duration::from_secs(10), leader.stop())
                .await
                .expect("a leader stops within 10 s")
                .ok();
        }
    }
}

/// Schedules `per_queue` jobs on each queue, due at spread delays up to `spread`: the
/// earliest each may run.
pub async fn schedule_spread(queues: &[Queue], per_queue: usize, spread: Duration) -> Due {
    let mut due = Due::new();
    for queue in queues {
        for i in 0..per_queue {
            let id = format!("j{i}");
            let delay = spread * (i as u32 * 7 % per_queue as u32) / per_queue as u32;
            let asked = SystemTime::now();
            assert!(queue.schedule(&id, b"x", delay).await.unwrap());
            due.insert((queue.name().to_string(), id), asked + delay);
        }
    }
    due
}

/// No handler ran before the due time the test asked for, by the handler's own clock.
pub fn assert_none_early(deliveries: &[Delivery], due: &Due) {
    for d in deliveries {
        let due = due
            .get(&d.key())
            .unwrap_or_else(|| panic!("a job the test never scheduled: {d:?}"));
        assert!(
            d.started >= *due,
            "{}/{} ran {:?} before its due time",
            d.queue,
            d.id,
            due.duration_since(d.started).unwrap_or_default()
        );
    }
}

/// The deliveries of each job, in the order they came.
pub fn by_job(deliveries: &[Delivery]) -> BTreeMap<Key, Vec<&Delivery>> {
    let mut jobs: BTreeMap<Key, Vec<&Delivery>> = BTreeMap::new();
    for d in deliveries {
        jobs.entry(d.key()).or_default().push(d);
    }
    jobs
}

/// With no crash, each job is delivered exactly once.
pub fn assert_each_once(deliveries: &[Delivery]) {
    for (key, ds) in by_job(deliveries) {
        assert_eq!(ds.len(), 1, "{key:?} delivered more than once: {ds:?}");
    }
}

/// The master serving `name`'s queue keys.
pub fn master_of_queue(cluster: &RedisCluster, name: &str) -> u16 {
    cluster.master_of_slot(cluster.slot_of(&format!("tickless:{{{name}}}:meta")))
}

/// Names `<prefix>0`.. `<prefix><count - 1>`, spread by their hash tags over every master
/// of `cluster`.
pub fn spread_names(cluster: &RedisCluster, prefix: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    let mut owners: Vec<u16> = names.iter().map(|n| master_of_queue(cluster, n)).collect();
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(
        owners,
        cluster.masters(),
        "{count} queues over every master"
    );
    names
}

/// Every master reads the test's clock (see [`RedisServer::assert_same_clock`]).
///
/// [`RedisServer::assert_same_clock`]: tickless_test_support::RedisServer::assert_same_clock
pub fn assert_same_clock(cluster: &RedisCluster) {
    for port in cluster.masters() {
        cluster.node(port).assert_same_clock();
    }
}
