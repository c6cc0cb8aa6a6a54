//! `/metrics` read back by a real Prometheus text-format parser (the `prometheus-parse`
//! crate): every line is a sample it understands, each family's samples fit its `# TYPE`
//! (a `quantile` label only in a summary, `le` only in a histogram, counters named
//! `_total`), and the figures are the queue's.

use prometheus_parse::{Scrape, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{LeaderOptions, Queue};
use tickless_test_support as support;
use tower::ServiceExt as _;

mod in_process;
use in_process::get;

const JOBS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_whose_types_fit_their_samples() {
    let server = support::RedisServer::start();
    let name = support::queue_name("metrics");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    // Due soon, not now (a job already due goes straight to the ready list): the leader
    // promotes them, and its figures have something to say.
    for i in 0..JOBS {
        queue
            .schedule(&format!("due-{i}"), b"x", Duration::from_millis(100))
            .await
            .unwrap();
    }
    queue
        .schedule("later", b"x", Duration::from_secs(3600))
        .await
        .unwrap();
    // A short idle lease: the leader renews often, and leaves its lag figures in `meta`
    // at each renewal.
    let mut options = LeaderOptions::default();
    options.idle_lease = Duration::from_millis(300);
    let leader = queue.leader(options).spawn();
    let limit = Instant::now() + Duration::from_secs(20);
    while queue.stats().await.unwrap().promoted < JOBS {
        assert!(
            Instant::now() < limit,
            "the leader's promotion figures in meta did not reach {JOBS} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let response = Dashboard::new([queue.clone()])
        .router()
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    leader.stop().await.unwrap();

    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    // The parser skips what it cannot read: every sample line must have been read.
    let lines = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let points: usize = scrape
        .samples
        .iter()
        .map(|s| match &s.value {
            Value::Histogram(buckets) => buckets.len(),
            Value::Summary(quantiles) => quantiles.len(),
            _ => 1,
        })
        .sum();
    assert_eq!(points, lines, "samples the parser did not read in:\n{text}");

    let types: HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert!(!types.is_empty(), "{text}");
    for (family, kind) in &types {
        assert!(
            scrape.docs.contains_key(*family),
            "{family} has a TYPE and no HELP"
        );
        assert!(
            matches!(*kind, "gauge" | "counter" | "histogram" | "summary"),
            "{family}: {kind}"
        );
        if *kind == "counter" {
            assert!(family.ends_with("_total"), "counter {family} is not _total");
        }
    }
    for sample in &scrape.samples {
        let family = [sample.metric.as_str()]
            .into_iter()
            .chain(sample.metric.strip_suffix("_sum"))
            .chain(sample.metric.strip_suffix("_count"))
            .find(|f| types.contains_key(f))
            .unwrap_or_else(|| panic!("{} belongs to no typed family", sample.metric));
        let kind = types[family];
        assert_eq!(
            sample.labels.get("queue"),
            Some(name.as_str()),
            "{sample:?}"
        );
        match &sample.value {
            Value::Summary(_) => assert_eq!(kind, "summary", "{sample:?}"),
            Value::Histogram(_) => assert_eq!(kind, "histogram", "{sample:?}"),
            _ => {
                assert!(
                    sample.labels.get("quantile").is_none(),
                    "a quantile label outside a summary: {} ({kind})",
                    sample.metric
                );
                assert!(
                    sample.labels.get("le").is_none(),
                    "an le label outside a histogram: {} ({kind})",
                    sample.metric
                );
                if family != sample.metric {
                    assert!(
                        matches!(kind, "summary" | "histogram"),
                        "{}: _sum/_count of a {kind}",
                        sample.metric
                    );
                }
            }
        }
    }

    // The figures are the queue's.
    let value = |metric: &str, label: Option<(&str, &str)>| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("no {metric} {label:?} in\n{text}"));
        match sample.value {
            Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
            _ => panic!("{metric} is not a single value"),
        }
    };
    assert_eq!(value("tickless_jobs", Some(("state", "scheduled"))), 1.0);
    assert_eq!(
        value("tickless_jobs", Some(("state", "ready"))),
        JOBS as f64
    );
    assert_eq!(
        value("tickless_leader_promotion_lag_seconds_count", None),
        JOBS as f64
    );
    assert!(value("tickless_leader_promotion_lag_seconds_sum", None) >= 0.0);
    assert_eq!(
        value("tickless_promotion_lag_seconds_count", None),
        JOBS as f64
    );
    let summary = scrape
        .samples
        .iter()
        .find(|s| s.metric == "tickless_leader_promotion_lag_seconds")
        .expect("the leader's promotion lag summary");
    let Value::Summary(quantiles) = &summary.value else {
        panic!("{summary:?}")
    };
    let qs: Vec<f64> = quantiles.iter().map(|q| q.quantile).collect();
    assert_eq!(qs, [0.5, 0.99]);
}

/// A leader whose user lacks a grant its tick needs (`+srandmember`: the lease's own
/// scripts do not send it) says so: in its stats and last error, in the queue's meta (the
/// dashboard's queue page and `/metrics`, read by another user), and in what `stop`
/// returns. With the grant given, a new leader moves the job and the warning goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_a_grant_it_needs_says_so() {
    let server = support::RedisServer::start();
    let mut admin = server.admin().await;
    let (_, password) = support::readme_user();
    let grant = "+srandmember";
    let mut acl = vec![
        "ACL".to_string(),
        "SETUSER".into(),
        "noleader".into(),
        "reset".into(),
    ];
    acl.extend(
        support::readme_acl()
            .into_iter()
            .filter(|rule| !rule.starts_with('>') && rule != grant),
    );
    acl.push(format!(">{password}"));
    let _: () = redis::cmd(&acl[0])
        .arg(&acl[1..])
        .query_async(&mut admin)
        .await
        .unwrap();

    let name = support::queue_name("failing-leader");
    let watcher = Queue::connect(&server.admin_url(), &name).await.unwrap();
    watcher
        .schedule("due", b"x", Duration::from_millis(50))
        .await
        .unwrap();
    let url = server.url_as("noleader", &password);
    let queue = Queue::connect(&url, &name).await.unwrap();
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let limit = Instant::now() + Duration::from_secs(10);
    while leader.stats().failing < 2 || watcher.counters().await.unwrap().leader_failing < 2 {
        assert!(
            Instant::now() < limit,
            "the leader did not report two failed rounds within 10 s: {:?}, {:?}",
            leader.stats(),
            leader.last_error()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let named = format!("grant {grant})");
    let last = leader.last_error().unwrap();
    assert!(last.contains(&named), "{last}");
    let counters = watcher.counters().await.unwrap();
    assert!(
        counters
            .leader_error
            .as_deref()
            .is_some_and(|e| e.contains(&named)),
        "{counters:?}"
    );

    let metrics = get(&watcher, "/metrics").await;
    let scrape = Scrape::parse(metrics.lines().map(|l| Ok(l.to_string()))).unwrap();
    let failing = scrape
        .samples
        .iter()
        .find(|s| s.metric == "tickless_leader_failing_rounds")
        .unwrap_or_else(|| panic!("no tickless_leader_failing_rounds in\n{metrics}"));
    assert!(
        matches!(failing.value, Value::Gauge(v) if v >= 2.0),
        "{failing:?}"
    );
    let page = get(&watcher, &format!("/queue/{name}")).await;
    assert!(page.contains("id=\"leader-failing\""), "{page}");
    assert!(page.contains(&named), "{page}");
    assert_eq!(watcher.stats().await.unwrap().ready, 0, "nothing moved");

    let err = leader.stop().await.unwrap_err();
    assert!(err.is_permission(), "{err}");
    assert!(err.to_string().contains(&named), "{err}");

    // Granted: a new leader moves the job, and says the queue's leader works again.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "noleader", grant])
        .query_async(&mut admin)
        .await
        .unwrap();
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let limit = Instant::now() + Duration::from_secs(10);
    while watcher.stats().await.unwrap().ready < 1
        || watcher.counters().await.unwrap().leader_failing > 0
    {
        assert!(
            Instant::now() < limit,
            "the granted leader did not move the job and clear the warning within 10 s: {:?}",
            watcher.counters().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(leader.stats().failing, 0);
    leader.stop().await.unwrap();
    let page = get(&watcher, &format!("/queue/{name}")).await;
    assert!(!page.contains("id=\"leader-failing\""), "{page}");
}

/// A queue with a stream outlet: `/metrics` says so (the stream's key), with the stream's
/// length and each consumer group's pending entries and consumers, and so does the
/// queue's page; without the outlet, both say the ready list.
#[tokio::test]
async fn a_stream_outlet_shows_its_length_and_groups_pending() {
    let server = support::RedisServer::start();
    let name = support::queue_name("metrics-stream");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue
        .set_manual_clock(Some(support::at(support::T0)))
        .await
        .unwrap();
    let key = queue.default_stream_key();
    queue
        .set_stream_outlet(Some(&tickless_durable::StreamOutlet::new(&key)))
        .await
        .unwrap();
    let page = get(&queue, &format!("/queue/{name}")).await;
    assert!(
        page.contains(&format!("{key}</code>: 0 entries.")),
        "a stream not written yet: {page}"
    );
    for i in 0..5 {
        // Due at once: appended by the schedule's own script.
        let due = support::at(support::T0);
        queue.schedule(&format!("j{i}"), b"x", due).await.unwrap();
    }
    let mut admin = server.admin().await;
    let cmd = |args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        cmd
    };
    let _: () = cmd(&["XGROUP", "CREATE", &key, "billing", "0"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: redis::Value = cmd(&[
        "XREADGROUP",
        "GROUP",
        "billing",
        "me",
        "COUNT",
        "2",
        "STREAMS",
        &key,
        ">",
    ])
    .query_async(&mut admin)
    .await
    .unwrap();

    let text = get(&queue, "/metrics").await;
    let queue_label = format!("queue=\"{name}\"");
    for line in [
        format!("tickless_delivery_mode{{{queue_label},mode=\"stream\",stream=\"{key}\"}} 1"),
        format!("tickless_stream_length{{{queue_label},stream=\"{key}\"}} 5"),
        format!("tickless_stream_pending{{{queue_label},stream=\"{key}\",group=\"billing\"}} 2"),
        format!("tickless_stream_consumers{{{queue_label},stream=\"{key}\",group=\"billing\"}} 1"),
        format!("tickless_events_total{{{queue_label},event=\"streamed\"}} 5"),
    ] {
        assert!(text.contains(&line), "no {line} in\n{text}");
    }
    let page = get(&queue, &format!("/queue/{name}")).await;
    assert!(
        page.contains(&format!("{key}</code>: 5 entries.")),
        "{page}"
    );
    assert!(
        page.contains("<td>billing</td><td>2</td><td>1</td>"),
        "the group's pending and consumers: {page}"
    );

    queue.set_stream_outlet(None).await.unwrap();
    let text = get(&queue, "/metrics").await;
    let workers = format!("tickless_delivery_mode{{{queue_label},mode=\"workers\"}} 1");
    assert!(text.contains(&workers), "no {workers} in\n{text}");
    assert!(!text.contains("tickless_stream_length"), "{text}");
    let page = get(&queue, &format!("/queue/{name}")).await;
    assert!(page.contains("Due jobs go to the ready list"), "{page}");
}
