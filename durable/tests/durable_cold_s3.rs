//! The cold tier (feature `s3`) against a real S3-protocol server (`s3s-fs`, started by
//! the test on a free loopback port: SigV4-signed requests, objects kept as files) and a
//! real `redis-server`: far jobs move into S3 objects and every promise of `Queue` holds
//! for them; a server that is down fails the pass with a store error and loses nothing;
//! a slow store (a delaying proxy in front of it) never holds up the leader's ticks;
//! wrong credentials are a clear error that never shows the secret key.
//! On the queue's manual clock, but for the slow store, which needs the spawned leader
//! and real time (every wait bounded and named).

use tickless_test_support as support;

use object_store::aws::AmazonS3Builder;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{at, queue_name, RedisServer, S3Server, S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY, T0};
use tickless_durable::{ColdTier, JobState, LeaderOptions, Queue, When, WorkerOptions};

mod cold {
    pub mod common;
    pub mod slow_proxy;
}
use cold::common::*;
use cold::slow_proxy::SlowProxy;

/// The builder of an S3 client of `endpoint`'s bucket signing with `access`/`secret`:
/// each request given up after `timeout`, no retries (a test's failure is seen at once,
/// not after object_store's default three minutes of retrying).
fn s3_builder(endpoint: &str, access: &str, secret: &str, timeout: Duration) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(S3_BUCKET)
        .with_access_key_id(access)
        .with_secret_access_key(secret)
        .with_region("us-east-1")
        .with_virtual_hosted_style_request(false)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(timeout)
                .with_connect_timeout(Duration::from_secs(1)),
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 0,
            retry_timeout: timeout,
        })
}

/// The client itself, for the tests that also list the bucket through it. The crate
/// builds reqwest with rustls and no crypto provider: `ColdTier::s3` installs ring
/// before it builds; a client built by hand needs it installed first.
fn s3(endpoint: &str, access: &str, secret: &str, timeout: Duration) -> Arc<dyn ObjectStore> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Arc::new(
        s3_builder(endpoint, access, secret, timeout)
            .build()
            .expect("an S3 client"),
    )
}

fn tier(store: Arc<dyn ObjectStore>) -> ColdTier {
    ColdTier::new(store)
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600))
}

/// The store's objects under `prefix`, as object_store lists them.
async fn listed(store: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    use futures::StreamExt;
    let prefix = object_store::path::Path::from(prefix);
    let mut out: Vec<String> = store
        .list(Some(&prefix))
        .map(|meta| meta.expect("a LIST of the bucket").location.to_string())
        .collect()
        .await;
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_jobs_go_to_s3_keep_every_promise_and_come_back_once_on_time() {
    let server = RedisServer::start();
    let s3s = S3Server::start();
    let store = s3(
        &s3s.endpoint(),
        S3_ACCESS_KEY,
        S3_SECRET_KEY,
        Duration::from_secs(10),
    );
    let (queue, mut leader, worker) = setup(&server, "s3-promises", tier(store.clone())).await;
    let mut due = schedule_far(&queue, T0, 2500).await;
    for i in 0..10u64 {
        let id = format!("near:{i}");
        assert!(queue
            .schedule(&id, b"n", When::At(at(T0 + 10_000 + i)))
            .await
            .unwrap());
        due.insert(id, T0 + 10_000 + i);
    }

    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 2500);
    assert_eq!(
        hlen(&server, &jobs_key(&queue)).await,
        10,
        "only the near jobs in Redis"
    );
    assert_eq!(index_entries(&server, &queue).await, 2500);
    // The segments are S3 objects: the server keeps them as files, a LIST names them,
    // each at <root>/<queue>/<deployment>/<window ms>/<seg>.seg with its window on the
    // hour, the deployment being the queue's meta's `cdep`.
    let dep = hget(
        &server,
        &format!("tickless:{{{}}}:meta", queue.name()),
        "cdep",
    )
    .await;
    assert_eq!(dep.len(), 16, "a deployment id of 16 hex digits: {dep:?}");
    let prefix = format!("tickless/{}/{dep}", queue.name());
    let objects = listed(store.as_ref(), &prefix).await;
    assert_eq!(
        objects,
        s3s.objects(),
        "the LIST and the server's files differ"
    );
    let windows = queue.cold_windows().await.unwrap();
    assert_eq!(windows.iter().map(|w| w.jobs).sum::<u64>(), 2500);
    assert_eq!(
        windows.iter().map(|w| w.segments).sum::<u64>() as usize,
        objects.len()
    );
    for object in &objects {
        let rest = object
            .strip_prefix(&format!("{prefix}/"))
            .unwrap_or_else(|| panic!("{object} is not under {prefix}"));
        let (window, seg) = rest.split_once('/').expect("<window>/<seg>.seg");
        let window: u64 = window.parse().expect("a window in ms");
        assert_eq!(window % HOUR, 0, "{object}: windows start on the hour");
        assert!(window >= T0 + 6 * HOUR, "{object}: within the horizon");
        assert!(seg.ends_with(".seg"), "{object}");
    }

    keep_promises(&queue, &mut due).await;

    let mut delivered: BTreeMap<String, u32> = BTreeMap::new();
    let mut record = |got: Vec<(String, u64)>| {
        for (id, d) in got {
            assert_eq!(d, due[&id], "{id} delivered with another due time");
            *delivered.entry(id).or_default() += 1;
        }
    };
    record(run_to(&queue, &mut leader, &worker, T0 + 61_000).await);
    // Nothing loads before its window is within the lead (3 h); then all of it does,
    // and the bucket empties.
    record(run_to(&queue, &mut leader, &worker, T0 + FAR - 4 * HOUR).await);
    assert_eq!(leader.stats().cold_loaded, 0);
    record(run_to(&queue, &mut leader, &worker, T0 + FAR - 2 * HOUR).await);
    assert_eq!(leader.stats().cold_loaded, 2500 - 150);
    assert_eq!(index_entries(&server, &queue).await, 0);
    assert!(queue.cold_windows().await.unwrap().is_empty());
    assert!(s3s.objects().is_empty(), "left in S3: {:?}", s3s.objects());
    assert!(listed(store.as_ref(), &prefix).await.is_empty());

    let mut t = T0 + FAR - 2 * HOUR;
    while t < T0 + FAR + 2500 * 1000 {
        t += 600_000;
        record(run_to(&queue, &mut leader, &worker, t).await);
    }
    let expected: BTreeSet<String> = due.keys().cloned().collect();
    let got: BTreeSet<String> = delivered.keys().cloned().collect();
    assert_eq!(got.len(), expected.len(), "lost or unexpected deliveries");
    assert_eq!(got, expected, "lost or unexpected deliveries");
    let twice: Vec<_> = delivered.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_s3_server_fails_the_pass_and_nothing_leaves_redis_or_is_lost() {
    let server = RedisServer::start();
    let mut s3s = S3Server::start();
    let store = s3(
        &s3s.endpoint(),
        S3_ACCESS_KEY,
        S3_SECRET_KEY,
        Duration::from_secs(5),
    );
    let (queue, mut leader, worker) = setup(&server, "s3-down", tier(store)).await;
    let due = schedule_far(&queue, T0, 300).await;

    // Down at move time: the pass fails as the store's (at its first request, the
    // sweep's LIST: `step` sweeps first), every job stays in Redis.
    s3s.stop();
    let err = leader.step().await.unwrap_err();
    assert!(err.is_store(), "{err}");
    assert!(err.to_string().contains(&s3s.endpoint()), "{err}");
    assert_eq!(hlen(&server, &jobs_key(&queue)).await, 300);
    assert_eq!(index_entries(&server, &queue).await, 0);
    assert!(queue.cold_windows().await.unwrap().is_empty());
    assert!(s3s.objects().is_empty());
    s3s.start_again();
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 300);
    assert_eq!(hlen(&server, &jobs_key(&queue)).await, 0);
    assert_eq!(index_entries(&server, &queue).await, 300);
    assert!(!s3s.objects().is_empty());

    // Down at load time: the pass fails, the jobs stay named by the index and in S3.
    queue
        .set_manual_clock(Some(at(T0 + FAR - 2 * HOUR)))
        .await
        .unwrap();
    s3s.stop();
    let err = leader.step().await.unwrap_err();
    assert!(err.is_store(), "{err}");
    assert_eq!(leader.stats().cold_loaded, 0);
    assert_eq!(index_entries(&server, &queue).await, 300);
    assert_eq!(hlen(&server, &jobs_key(&queue)).await, 0);
    s3s.start_again();
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_loaded, 300);
    assert_eq!(index_entries(&server, &queue).await, 0);
    assert!(s3s.objects().is_empty(), "left in S3: {:?}", s3s.objects());

    let mut delivered = BTreeSet::new();
    for (id, d) in run_to(&queue, &mut leader, &worker, T0 + FAR + 600_000).await {
        assert_eq!(d, due[&id]);
        assert!(delivered.insert(id.clone()), "{id} twice");
    }
    assert_eq!(delivered.len(), due.len(), "lost jobs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_never_holds_up_the_ticks_and_loses_nothing() {
    // Real time and the spawned leader: its cold pass is a task beside its ticks.
    let server = RedisServer::start();
    let s3s = S3Server::start();
    let proxy = SlowProxy::start(s3s.port()).await;
    let timeout = Duration::from_secs(6);
    let store = s3(&proxy.endpoint(), S3_ACCESS_KEY, S3_SECRET_KEY, timeout);
    let queue = Queue::connect(&server.url(), &queue_name("s3-slow"))
        .await
        .expect("connect")
        .with_cold_tier(tier(store).check_every(Duration::from_millis(100)));
    let worker = queue.worker(WorkerOptions::default());
    let leader = queue.leader(LeaderOptions::default()).spawn();
    wait_until(Duration::from_secs(10), "the leader to lead", || {
        let leading = leader.stats().leading;
        async move { leading }
    })
    .await;

    // The store hangs: each chunk held far longer than the client waits.
    proxy.set_delay(Duration::from_secs(60));
    let now = ms(server.time());
    let far = schedule_far(&queue, now, 200).await;
    wait_until(
        Duration::from_secs(10),
        "a cold pass's request held by the proxy",
        || {
            let held = proxy.held();
            async move { held > 0 }
        },
    )
    .await;
    let hung_at = Instant::now();

    // While the pass hangs, jobs due soon are promoted on time.
    let now = ms(server.time());
    let mut hot = BTreeMap::new();
    for i in 0..20u64 {
        let due = now + 200 + i * 50;
        assert!(queue
            .schedule(&format!("hot:{i}"), b"h", When::At(at(due)))
            .await
            .unwrap());
        hot.insert(format!("hot:{i}"), due);
    }
    let mut lags = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lags.len() < hot.len() {
        assert!(
            Instant::now() < deadline,
            "waited 5 s for the hot jobs; got {} of {}",
            lags.len(),
            hot.len()
        );
        for job in worker.try_claim(100).await.unwrap() {
            assert_eq!(ms(job.due()), hot[job.id()]);
            lags.push(ms(job.claimed_at()).saturating_sub(ms(job.due())));
            worker.ack(&job).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = hung_at.elapsed();
    assert!(
        took < timeout,
        "the hot jobs took {took:?} to come, past the client's {timeout:?} timeout: \
         the leader held up the runtime while its pass hung"
    );
    let stats = leader.stats();
    assert!(
        proxy.held() > 0 && stats.cold_moved == 0 && stats.errors == 0,
        "the pass ended before the hot jobs were delivered ({took:?} after it hung): \
         the test proves nothing"
    );
    let worst = lags.iter().max().copied().unwrap_or(0);
    assert!(
        worst < 500,
        "a hot job was promoted {worst} ms late while a pass hung: {lags:?}"
    );

    // The client gives up: the pass fails as a store error, counted; nothing left Redis.
    wait_until(timeout * 2, "the hung pass to time out", || {
        let errors = leader.stats().errors;
        async move { errors > 0 }
    })
    .await;
    assert!(leader.last_error().is_some());
    assert_eq!(hlen(&server, &jobs_key(&queue)).await, far.len() as u64);
    assert_eq!(index_entries(&server, &queue).await, 0);

    // Slow but working (200 ms a chunk): a later pass moves every far job.
    proxy.set_delay(Duration::from_millis(200));
    wait_until(
        Duration::from_secs(30),
        "the far jobs to move through the slow proxy",
        || {
            let moved = leader.stats().cold_moved;
            async move { moved >= 200 }
        },
    )
    .await;
    assert_eq!(leader.stats().cold_moved, 200);
    assert_eq!(index_entries(&server, &queue).await, 200);
    assert_eq!(hlen(&server, &jobs_key(&queue)).await, 0);
    assert!(!s3s.objects().is_empty());
    proxy.set_delay(Duration::ZERO);
    for id in ["far:0", "far:199"] {
        let info = queue.job(id).await.unwrap().expect("a cold job is a job");
        assert_eq!(
            (info.state, info.due),
            (JobState::Cold, at(far[id])),
            "{id}"
        );
    }
    leader.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_a_clear_error_that_never_shows_the_secret() {
    let server = RedisServer::start();
    let s3s = S3Server::start();
    let wrong_secret = "wrong-secret-Kd93nXq0";
    for (case, access, secret, code) in [
        (
            "wrong secret",
            S3_ACCESS_KEY,
            wrong_secret,
            "SignatureDoesNotMatch",
        ),
        ("unknown access key", "nobody", S3_SECRET_KEY, "NotSignedUp"),
    ] {
        // Through the public constructor, which installs the crypto provider itself.
        let tier = ColdTier::s3(s3_builder(
            &s3s.endpoint(),
            access,
            secret,
            Duration::from_secs(5),
        ))
        .expect("a tier on S3")
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600));
        let shown = format!("{tier:?}");
        assert!(shown.contains(S3_BUCKET), "{case}: {shown}");
        let test = format!("s3-creds-{}", case.replace(' ', "-"));
        let queue = Queue::connect(&server.url(), &queue_name(&test))
            .await
            .expect("connect")
            .with_cold_tier(tier);
        queue.set_manual_clock(Some(at(T0))).await.unwrap();
        schedule_far(&queue, T0, 20).await;
        let mut leader = queue.leader(LeaderOptions::default());
        let err = leader.step().await.unwrap_err();
        assert!(
            leader.is_leading(),
            "{case}: the lease is Redis's, not the store's"
        );
        let (display, debug) = (err.to_string(), format!("{err:?}"));
        assert!(err.is_store(), "{case}: {display}");
        // Which request, of what, and S3's own answer: the first move's PUT (a queue
        // whose first take has not run yet has no deployment id, so nothing to LIST).
        assert!(
            display.contains("403") && display.contains(code) && display.contains("PUT"),
            "{case}: not clear: {display}"
        );
        for text in [&display, &debug, &shown] {
            assert!(
                !text.contains(secret),
                "{case}: the secret key shown: {text}"
            );
            assert!(
                !text.contains(S3_SECRET_KEY),
                "{case}: the secret key shown: {text}"
            );
        }
        assert_eq!(hlen(&server, &jobs_key(&queue)).await, 20, "{case}");
        assert!(s3s.objects().is_empty(), "{case}");
    }
}
