//! Mutual TLS (`ConnectOptions::tls_client_pem`) against servers that ask every client for
//! a certificate (`--tls-auth-clients yes`): one server and a TLS-only cluster. Without
//! the certificate, or with one from another CA, `connect` is refused; with it, every
//! connection of a queue presents it (the shared one, the leader's subscription and the
//! worker's `BLMOVE`, on a cluster to each slot's master), and the operator's binary takes
//! it as files. Real `redis-server`s started by the tests.

use tickless_test_support as support;

use std::time::{Duration, Instant};
use support::{queue_name, RedisCluster, RedisServer};
use tickless_durable::{ConnectOptions, LeaderOptions, Queue, WorkerOptions};

/// A CA of its own and a client certificate signed by it, as PEM: what a server that
/// trusts only its own CA refuses.
fn foreign_client() -> (Vec<u8>, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!(
        "tickless-foreign-client-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    support::make_ca(&dir, "other");
    support::make_client_certificate(&dir, "other", "client");
    let pem = (
        std::fs::read(dir.join("client.crt")).unwrap(),
        std::fs::read(dir.join("client.key")).unwrap(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    pem
}

/// With a leader and a worker running on `queue`, a job due in a second is delivered
/// (within `limit`) to the handler, which checks the time itself: not before its due
/// time. The leader, which must promote it, met no error: its subscription (a
/// connection of its own) presented the certificate too.
async fn delivers_a_job(queue: &Queue, limit: Duration) {
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
        let tx = tx.clone();
        async move {
            let now = std::time::SystemTime::now();
            tx.send((job.id().to_string(), now >= job.due())).unwrap();
            Ok::<(), String>(())
        }
    }));
    let due = Duration::from_secs(1);
    assert!(queue.schedule("j", b"x", due).await.unwrap());
    let (id, on_time) = tokio::time::timeout(limit, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{}: job j not delivered within {limit:?}", queue.name()))
        .expect("the worker runs");
    assert_eq!(id, "j");
    assert!(on_time, "{}: handled before its due time", queue.name());
    let stats = leader.stats();
    assert_eq!(
        stats.errors,
        0,
        "{}: {:?}",
        queue.name(),
        leader.last_error()
    );
    worker.abort();
    leader.stop().await.unwrap();
}

#[tokio::test]
async fn one_server_asks_for_the_client_certificate_and_every_connection_presents_it() {
    let server = RedisServer::start_mutual_tls(&[]);
    let url = server.url();
    let (cert, key) = (server.client_cert_pem(), server.client_key_pem());
    let (other_cert, other_key) = foreign_client();
    for (what, options) in [
        (
            "no client certificate",
            ConnectOptions::new(&url).tls_ca_pem(server.ca_pem()),
        ),
        (
            "a certificate from another CA",
            ConnectOptions::new(&url)
                .tls_ca_pem(server.ca_pem())
                .tls_client_pem(other_cert, other_key),
        ),
    ] {
        let err = options
            .connect(&queue_name("refused"))
            .await
            .expect_err(what);
        assert!(err.is_connect(), "{what}: {err}");
    }
    let options = ConnectOptions::new(&url)
        .tls_ca_pem(server.ca_pem())
        .tls_client_pem(cert, key);
    let shown = format!("{options:?}");
    assert!(shown.contains("tls_client_cert: true"), "{shown}");
    let queue = options.connect(&queue_name("mtls")).await.expect("connect");
    delivers_a_job(&queue, Duration::from_secs(10)).await;
    // The operator's look, with the certificate as files; and the dashboard's list of
    // queues (`serve` without names) is read with the same TLS options.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .arg("inspect")
        .arg(&url)
        .arg(queue.name())
        .arg("--ca")
        .arg(server.file("ca.crt"))
        .arg("--cert")
        .arg(server.file("client.crt"))
        .arg("--key")
        .arg(server.file("client.key"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("queue {:?}", queue.name())),
        "{said}"
    );
    let names = options
        .queue_names()
        .await
        .expect("queue names over mutual TLS");
    assert_eq!(names, [queue.name()]);
}

#[tokio::test]
async fn a_client_key_or_certificate_that_does_not_parse_is_named_not_quoted() {
    let server = RedisServer::start_mutual_tls(&[]);
    let (cert, key) = (server.client_cert_pem(), server.client_key_pem());
    let key_text = String::from_utf8(key.clone()).unwrap();
    // A key line cut in two: not base64 of a key any more.
    let broken: String = key_text.replacen('\n', "\n#", 2);
    for (what, cert, key, names) in [
        (
            "a broken key",
            cert.clone(),
            broken.into_bytes(),
            "client key",
        ),
        (
            "the key in the certificate's place",
            key.clone(),
            key.clone(),
            "client certificate",
        ),
        (
            "the certificate in the key's place",
            cert.clone(),
            cert.clone(),
            "client key",
        ),
    ] {
        let err = ConnectOptions::new(&server.url())
            .tls_ca_pem(server.ca_pem())
            .tls_client_pem(cert, key)
            .connect(&queue_name("bad-pem"))
            .await
            .expect_err(what);
        assert!(err.is_invalid_url(), "{what}: {err}");
        assert!(err.to_string().contains(names), "{what}: {err}");
        for line in key_text.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!err.to_string().contains(line), "{what}: {err}");
            assert!(!format!("{err:?}").contains(line), "{what}: {err:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_asks_for_the_client_certificate_and_each_masters_queue_presents_it() {
    let cluster = RedisCluster::start_mutual_tls(3, 0);
    let (cert, key) = cluster.client_pem();
    let err = ConnectOptions::cluster(cluster.seeds())
        .tls_ca_pem(cluster.ca_pem())
        .connect(&queue_name("refused"))
        .await
        .expect_err("no client certificate");
    assert!(err.is_connect() || err.is_redis(), "{err}");
    let options = ConnectOptions::cluster(cluster.seeds())
        .tls_ca_pem(cluster.ca_pem())
        .tls_client_pem(cert, key);
    // One queue on each master: its leader and worker connect to that master themselves.
    let mut names = Vec::new();
    let mut masters = Vec::new();
    for i in 0.. {
        let name = format!("mtls{i}");
        let master = cluster.master_of_slot(cluster.slot_of(&format!("tickless:{{{name}}}:meta")));
        if !masters.contains(&master) {
            masters.push(master);
            names.push(name);
        }
        if masters.len() == 3 {
            break;
        }
        assert!(i < 1_000, "no queue name for every master: {masters:?}");
    }
    let started = Instant::now();
    for name in &names {
        let queue = options.connect(name).await.expect("connect to the cluster");
        delivers_a_job(&queue, Duration::from_secs(20)).await;
    }
    eprintln!(
        "3 queues delivered over mutual TLS in {:?}",
        started.elapsed()
    );
}
