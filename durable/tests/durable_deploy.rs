//! Durable jobs on the Redis people deploy: over TLS (`rediss://`, a CA of the test's
//! own), on a Redis Cluster (many queues over the masters, a master's failover, a slot
//! migrated while jobs flow), and with `WAIT` for replicas. Real `redis-server`s started
//! by the tests; quick (a few seconds each).

use tickless_test_support as support;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use support::{queue_name, RedisServer};
use tickless_durable::{ConnectOptions, LeaderOptions, Queue, WorkerOptions};

const T0: u64 = 1_700_000_000_000;

fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// `url` with `password` put in: `rediss://:<password>@host:port/`.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    format!("{scheme}://:{password}@{rest}")
}

/// The core scenario on `queue`, on a manual clock: a job is not claimable a millisecond
/// before its due time, is at it; then, with a leader and a worker running on their own
/// connections (the leader's subscription, the worker's `BLMOVE`), a job due now is
/// delivered and acked.
async fn core_scenario(queue: &Queue) {
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    assert!(queue
        .schedule("a", b"payload", at(T0 + 5_000))
        .await
        .unwrap());
    let mut leader = queue.leader(LeaderOptions::default());
    let worker = queue.worker(WorkerOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    queue
        .advance_manual_clock(Duration::from_millis(4_999))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert!(worker.try_claim(10).await.unwrap().is_empty(), "early");
    queue
        .advance_manual_clock(Duration::from_millis(1))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let jobs = worker.try_claim(10).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].payload(), b"payload");
    assert!(worker.ack(&jobs[0]).await.unwrap());
    drop(leader);

    // Running: the leader hears of the job on its channel, the worker wakes from BLMOVE.
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
        let tx = tx.clone();
        async move {
            tx.send(job.id().to_string()).unwrap();
            Ok::<(), String>(())
        }
    }));
    assert!(queue.schedule("b", b"now", at(T0)).await.unwrap());
    let id = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("delivered")
        .unwrap();
    assert_eq!(id, "b");
    worker.abort();
    leader.stop().await.unwrap();
}

#[tokio::test]
async fn over_tls_with_the_servers_ca_a_job_is_scheduled_led_and_delivered() {
    let server = RedisServer::start_tls(&["--requirepass", "S3cret"]);
    let url = with_password(&server.url(), "S3cret");
    let queue = ConnectOptions::new(&url)
        .tls_ca_pem(server.ca_pem())
        .connect(&queue_name("tls"))
        .await
        .expect("connect over TLS");
    assert!(!queue.url().contains("S3cret"));
    core_scenario(&queue).await;
}

#[tokio::test]
async fn over_tls_insecure_skips_the_certificate_check() {
    let server = RedisServer::start_tls(&[]);
    let url = format!("{}#insecure", server.url());
    let queue = Queue::connect(&url, &queue_name("insecure"))
        .await
        .expect("connect over TLS without checking the certificate");
    assert!(queue.schedule("a", b"x", Duration::ZERO).await.unwrap());
}

#[tokio::test]
async fn over_tls_a_server_signed_by_another_ca_is_refused_clearly_without_the_secret() {
    let server = RedisServer::start_tls(&["--requirepass", "S3cret"]);
    let url = with_password(&server.url(), "S3cret");
    let dir = std::env::temp_dir().join(format!("tickless-other-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    support::make_ca(&dir, "other");
    let other = std::fs::read(dir.join("other.crt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    for options in [
        ConnectOptions::new(&url).tls_ca_pem(other),
        // The system's roots do not know the test's CA either.
        ConnectOptions::new(&url),
    ] {
        let err = options
            .connect(&queue_name("wrong-ca"))
            .await
            .expect_err("a certificate from an unknown CA");
        let message = err.to_string();
        eprintln!("refused: {message}");
        assert!(err.is_connect(), "{message}");
        assert!(
            message.contains(&format!("localhost:{}", server.port())),
            "{message}"
        );
        assert!(
            message.to_lowercase().contains("certificate"),
            "names the certificate: {message}"
        );
        assert!(!message.contains("S3cret"), "{message}");
        assert!(!format!("{err:?}").contains("S3cret"), "{err:?}");
        assert!(!format!("{options:?}").contains("S3cret"), "{options:?}");
    }
}

/// One delivery, as a handler saw it.
#[derive(Clone, Debug)]
struct Delivery {
    queue: String,
    id: String,
    due: SystemTime,
    claimed: SystemTime,
}

/// Queues on a cluster, each with a leader and a worker running, every delivery sent to
/// one channel.
struct Running {
    queues: Vec<Queue>,
    leaders: Vec<tickless_durable::LeaderHandle>,
    workers: Vec<tokio::task::JoinHandle<Result<(), tickless_durable::Error>>>,
    deliveries: tokio::sync::mpsc::UnboundedReceiver<Delivery>,
}

async fn run_queues(options: &ConnectOptions, names: &[String]) -> Running {
    let (tx, deliveries) = tokio::sync::mpsc::unbounded_channel();
    let mut running = Running {
        queues: Vec::new(),
        leaders: Vec::new(),
        workers: Vec::new(),
        deliveries,
    };
    for name in names {
        let queue = options.connect(name).await.expect("connect to the cluster");
        running
            .leaders
            .push(queue.leader(LeaderOptions::default()).spawn());
        let (tx, name) = (tx.clone(), name.clone());
        let worker = queue.worker(WorkerOptions::default()).run(move |job| {
            let delivery = Delivery {
                queue: name.clone(),
                id: job.id().to_string(),
                due: job.due(),
                claimed: job.claimed_at(),
            };
            let tx = tx.clone();
            async move {
                let _ = tx.send(delivery);
                Ok::<(), String>(())
            }
        });
        running.workers.push(tokio::spawn(worker));
        running.queues.push(queue);
    }
    running
}

impl Running {
    /// Receives deliveries until every `(queue, id)` of `expected` was delivered; all
    /// deliveries, in order. Fails after `limit`.
    async fn until_delivered(
        &mut self,
        expected: &std::collections::BTreeSet<(String, String)>,
        limit: Duration,
    ) -> Vec<Delivery> {
        self.until_delivered_with(expected, limit, Vec::new()).await
    }

    /// [`until_delivered`](Self::until_delivered), counting `already` received.
    async fn until_delivered_with(
        &mut self,
        expected: &std::collections::BTreeSet<(String, String)>,
        limit: Duration,
        mut all: Vec<Delivery>,
    ) -> Vec<Delivery> {
        let mut seen: std::collections::BTreeSet<(String, String)> = all
            .iter()
            .map(|d| (d.queue.clone(), d.id.clone()))
            .collect();
        let deadline = tokio::time::Instant::now() + limit;
        while !expected.is_subset(&seen) {
            let delivery = tokio::time::timeout_at(deadline, self.deliveries.recv())
                .await
                .unwrap_or_else(|_| {
                    let missing: Vec<_> = expected.difference(&seen).take(5).collect();
                    panic!(
                        "{} of {} jobs not delivered after {limit:?}, e.g. {missing:?}",
                        expected.difference(&seen).count(),
                        expected.len()
                    )
                })
                .expect("the workers run");
            seen.insert((delivery.queue.clone(), delivery.id.clone()));
            all.push(delivery);
        }
        all
    }

    async fn stop(self) {
        for worker in &self.workers {
            worker.abort();
        }
        for leader in self.leaders {
            let _ = leader.stop().await;
        }
    }
}

/// Schedules `per_queue` jobs on each queue, due at spread delays up to `spread`; the
/// `(queue, id)` of each.
async fn schedule_spread(
    queues: &[Queue],
    per_queue: usize,
    spread: Duration,
) -> std::collections::BTreeSet<(String, String)> {
    let mut expected = std::collections::BTreeSet::new();
    for queue in queues {
        for i in 0..per_queue {
            let id = format!("j{i}");
            let delay = spread * (i as u32 * 7 % per_queue as u32) / per_queue as u32;
            assert!(queue.schedule(&id, b"x", delay).await.unwrap());
            expected.insert((queue.name().to_string(), id));
        }
    }
    expected
}

fn assert_none_early(deliveries: &[Delivery]) {
    for d in deliveries {
        assert!(d.claimed >= d.due, "claimed before due: {d:?}");
    }
}

/// Names `c0`..`c15`, spread by their hash tags over every master of `cluster`.
fn spread_names(cluster: &support::RedisCluster) -> Vec<String> {
    let names: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
    let mut owners: Vec<u16> = names
        .iter()
        .map(|n| cluster.master_of_slot(cluster.slot_of(&format!("tickless:{{{n}}}:meta"))))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(owners, cluster.masters(), "16 queues over every master");
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_queues_over_three_masters_deliver_every_job_none_early() {
    let cluster = support::RedisCluster::start(3, 1);
    let names = spread_names(&cluster);
    let options = ConnectOptions::cluster(cluster.seeds());
    let mut running = run_queues(&options, &names).await;
    let expected = schedule_spread(&running.queues, 25, Duration::from_millis(1_500)).await;
    let deliveries = running
        .until_delivered(&expected, Duration::from_secs(30))
        .await;
    assert_none_early(&deliveries);
    running.stop().await;

    // The operator's tool reaches a queue on any master from the seeds.
    let seeds = cluster.seeds()[..2].join(",");
    for name in &names {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
            .args(["inspect", &seeds, name])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masters_kill_9_fails_over_and_deliveries_resume_none_lost_none_promoted_twice() {
    let mut cluster = support::RedisCluster::start(3, 1);
    let names = spread_names(&cluster);
    let options =
        ConnectOptions::cluster(cluster.seeds()).wait_for_replicas(1, Duration::from_millis(300));
    let mut running = run_queues(&options, &names).await;
    let expected = schedule_spread(&running.queues, 25, Duration::from_secs(3)).await;
    let victim = cluster.master_of_slot(cluster.slot_of("tickless:{c0}:meta"));
    let on_victim: std::collections::BTreeSet<&String> = names
        .iter()
        .filter(|n| {
            cluster.master_of_slot(cluster.slot_of(&format!("tickless:{{{n}}}:meta"))) == victim
        })
        .collect();
    // Jobs flowing, the master dies.
    let mut before = Vec::new();
    while before.len() < 60 {
        before.push(running.deliveries.recv().await.unwrap());
    }
    let slot = cluster.slot_of("tickless:{c0}:meta");
    let survivor = *cluster.masters().iter().find(|m| **m != victim).unwrap();
    let killed_at = SystemTime::now();
    let killed = std::time::Instant::now();
    cluster.kill(victim);
    // When the cluster has promoted the replica, as a survivor sees it.
    let promoted = std::thread::spawn(move || loop {
        match support::master_of_slot_seen_by(survivor, slot) {
            Some(port) if port != victim => return killed.elapsed(),
            _ if killed.elapsed() > Duration::from_secs(20) => return killed.elapsed(),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    });
    let after = running
        .until_delivered_with(&expected, Duration::from_secs(30), before.clone())
        .await;
    let resumed = after[before.len()..]
        .iter()
        .find(|d| on_victim.contains(&d.queue))
        .map(|_| killed.elapsed());
    eprintln!(
        "failover: victim {victim} served {} queues; replica promoted {:?} after the kill, \
         first delivery from those queues {resumed:?} after the kill (node timeout {} ms)",
        on_victim.len(),
        promoted.join().unwrap(),
        support::NODE_TIMEOUT_MS
    );
    assert_none_early(&after);
    // Twice only for a job whose first delivery was claimed before the kill (its ack or
    // its claim may have died with the master); never two deliveries after it.
    let mut by_job: HashMap<(&str, &str), Vec<&Delivery>> = HashMap::new();
    for d in &after {
        by_job.entry((&d.queue, &d.id)).or_default().push(d);
    }
    let repeated: Vec<_> = by_job.values().filter(|ds| ds.len() > 1).collect();
    for ds in &repeated {
        assert!(
            ds.len() == 2 && ds[0].claimed <= killed_at,
            "delivered twice without a kill to explain it: {ds:?}"
        );
    }
    eprintln!("failover: {} jobs delivered twice", repeated.len());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_key_by_key_while_jobs_flow_loses_none() {
    let cluster = support::RedisCluster::start(3, 0);
    let names = vec!["moving".to_string(), "staying".to_string()];
    let options = ConnectOptions::cluster(cluster.seeds());
    let mut running = run_queues(&options, &names).await;
    // Jobs due over 4 s: staged ones and level-0 buckets.
    let expected = schedule_spread(&running.queues, 60, Duration::from_secs(4)).await;
    let mut before = Vec::new();
    while before.len() < 20 {
        before.push(running.deliveries.recv().await.unwrap());
    }
    let slot = cluster.slot_of("tickless:{moving}:meta");
    let from = cluster.master_of_slot(slot);
    let to = *cluster.masters().iter().find(|m| **m != from).unwrap();
    let migrate = tokio::task::spawn_blocking(move || {
        cluster.migrate_slot(slot, from, to, 1);
        cluster
    });
    // Schedules keep coming while the keys move.
    let moving = running.queues[0].clone();
    let mut expected = expected;
    let (mut more, mut retried) = (0, 0);
    while !migrate.is_finished() {
        let id = format!("during{more}");
        let delay = Duration::from_millis(more % 3 * 700);
        // Idempotent on the id: a schedule refused while the slot is half moved is sent
        // again. Every key but a bucket is declared, so the redis crate follows Redis's
        // ASK/TRYAGAIN on its own; only a script that meets a bucket key already moved
        // is refused (`non local key`): 0 re-sends in our runs, 9-12 when scripts
        // declared only `meta`.
        let mut refused = 0;
        while let Err(err) = moving.schedule(&id, b"x", delay).await {
            assert!(err.is_redis() && refused < 100, "{err}");
            refused += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        retried += refused;
        expected.insert(("moving".to_string(), id));
        more += 1;
    }
    eprintln!("migration: {more} jobs scheduled while the slot moved, {retried} calls sent again");
    let cluster = migrate.await.unwrap();
    let after = running
        .until_delivered_with(&expected, Duration::from_secs(30), before)
        .await;
    assert_eq!(cluster.master_of_slot(slot), to, "the slot moved");
    assert_none_early(&after);
    running.stop().await;
}

/// Waits until the replica on `replica` is in sync with its master.
fn wait_in_sync(replica: &RedisServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(std::time::Instant::now() < deadline, "replica not in sync");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_no_acknowledged_schedule_is_lost_when_the_master_is_killed() {
    let mut master = RedisServer::start_with_args(&["--appendonly", "no"]);
    let port = master.port().to_string();
    let replica =
        RedisServer::start_with_args(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    wait_in_sync(&replica);
    let name = queue_name("wait");
    let queue = ConnectOptions::new(&master.url())
        .wait_for_replicas(1, Duration::from_secs(20))
        .connect(&name)
        .await
        .unwrap();
    // The replica stalls. 24 MiB of payloads: more than the sockets between master and
    // replica buffer, so without WAIT the tail is only in the master's memory when the
    // schedules return.
    replica.signal("STOP");
    let scheduler = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let payload = vec![7u8; 1 << 20];
            let mut acknowledged = Vec::new();
            for i in 0..24 {
                let id = format!("j{i}");
                queue
                    .schedule(&id, &payload, Duration::from_secs(60))
                    .await?;
                acknowledged.push(id);
            }
            Ok::<_, tickless_durable::Error>(acknowledged)
        })
    };
    // Either the schedules return at once (no WAIT), or one waits for the replica: then
    // the replica goes on, and the schedules return as it catches up.
    let mut continued = false;
    while !scheduler.is_finished() {
        let clients = master.cli(&["INFO", "clients"]);
        if !continued && !clients.contains("blocked_clients:0") {
            replica.signal("CONT");
            continued = true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let acknowledged = scheduler.await.unwrap().unwrap();
    master.kill();
    if !continued {
        replica.signal("CONT");
    }
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]).trim(), "OK");
    let promoted = Queue::connect(&replica.url(), &name).await.unwrap();
    let mut lost = Vec::new();
    for id in &acknowledged {
        if promoted.job(id).await.unwrap().is_none() {
            lost.push(id.clone());
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged schedules lost with the master: {lost:?}",
        lost.len(),
        acknowledged.len()
    );
}

#[tokio::test]
async fn fewer_replicas_than_asked_is_an_error_and_the_job_is_kept_on_the_master() {
    let master = RedisServer::start_with_args(&["--appendonly", "no"]);
    let port = master.port().to_string();
    let replica =
        RedisServer::start_with_args(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    wait_in_sync(&replica);
    let queue = ConnectOptions::new(&master.url())
        .wait_for_replicas(2, Duration::from_millis(50))
        .connect(&queue_name("too-few"))
        .await
        .unwrap();
    let err = queue
        .schedule("a", b"x", Duration::from_secs(60))
        .await
        .expect_err("one replica of two");
    assert!(err.is_replication(), "{err}");
    assert!(err.to_string().contains("1 of 2 replicas"), "{err}");
    assert!(
        queue.job("a").await.unwrap().is_some(),
        "kept on the master"
    );
    let batch = queue
        .schedule_batch([("b", b"x", tickless_durable::When::After(Duration::ZERO))])
        .await;
    assert!(batch.unwrap_err().is_replication());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_with_wait_delivers_on_every_master() {
    let cluster = support::RedisCluster::start_tls(3, 1);
    let names = spread_names(&cluster);
    assert!(cluster
        .seeds()
        .iter()
        .all(|url| url.starts_with("rediss://")));
    let options = ConnectOptions::cluster(cluster.seeds())
        .tls_ca_pem(cluster.ca_pem())
        .wait_for_replicas(1, Duration::from_secs(2));
    let mut running = run_queues(&options, &names).await;
    let expected = schedule_spread(&running.queues, 10, Duration::from_millis(1_000)).await;
    let deliveries = running
        .until_delivered(&expected, Duration::from_secs(30))
        .await;
    assert_none_early(&deliveries);
    running.stop().await;
}
