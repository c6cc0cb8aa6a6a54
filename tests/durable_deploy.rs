//! Durable jobs on the Redis people deploy: over TLS (`rediss://`, a CA of the test's
//! own), on a Redis Cluster (many queues over the masters, a master's failover, a slot
//! migrated while jobs flow), and with `WAIT` for replicas. Real `redis-server`s started
//! by the tests; quick (a few seconds each).
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, SystemTime};
use support::{queue_name, RedisServer};
use tickless::durable::{ConnectOptions, LeaderOptions, Queue, WorkerOptions};

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
