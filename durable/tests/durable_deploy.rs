//! Durable jobs on the Redis people deploy: over TLS (`rediss://`, a CA of the test's
//! own), on a Redis Cluster (many queues over the masters, a master's failover in
//! `failover.rs`, checked against `failover_model.rs`, what it costs the other queues in
//! `isolation.rs`, a slot migrated while jobs flow in `migration.rs`), and with `WAIT` for
//! replicas. Real `redis-server`s started by the tests; quick (a few seconds each).

use tickless_test_support as support;

#[path = "durable_deploy/cluster.rs"]
mod cluster;
#[path = "durable_deploy/failover.rs"]
mod failover;
#[path = "durable_deploy/failover_model.rs"]
mod failover_model;
#[path = "durable_deploy/isolation.rs"]
mod isolation;
#[path = "durable_deploy/migration.rs"]
mod migration;

use cluster::{assert_none_early, assert_same_clock, run_queues, schedule_spread, spread_names};
use std::time::Duration;
use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{ConnectOptions, LeaderOptions, Queue, WorkerOptions};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_queues_over_three_masters_deliver_every_job_none_early() {
    let cluster = support::RedisCluster::start(3, 1);
    assert_same_clock(&cluster);
    let names = spread_names(&cluster, "c", 16);
    let options = ConnectOptions::cluster(cluster.seeds());
    let mut running = run_queues(&options, &names, WorkerOptions::default()).await;
    let due = schedule_spread(&running.queues, 25, Duration::from_millis(1_500)).await;
    let deliveries = running
        .until_delivered(&due, Duration::from_secs(30), Vec::new())
        .await;
    running.until_empty(Duration::from_secs(10)).await;
    let mut deliveries = deliveries;
    deliveries.extend(running.drain());
    assert_none_early(&deliveries, &due);
    cluster::assert_each_once(&deliveries);
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
    assert_same_clock(&cluster);
    let names = spread_names(&cluster, "c", 16);
    assert!(cluster
        .seeds()
        .iter()
        .all(|url| url.starts_with("rediss://")));
    let options = ConnectOptions::cluster(cluster.seeds())
        .tls_ca_pem(cluster.ca_pem())
        .wait_for_replicas(1, Duration::from_secs(2));
    let mut running = run_queues(&options, &names, WorkerOptions::default()).await;
    let due = schedule_spread(&running.queues, 10, Duration::from_millis(1_000)).await;
    let mut deliveries = running
        .until_delivered(&due, Duration::from_secs(30), Vec::new())
        .await;
    running.until_empty(Duration::from_secs(10)).await;
    deliveries.extend(running.drain());
    assert_none_early(&deliveries, &due);
    cluster::assert_each_once(&deliveries);
    running.stop().await;
}
