//! Pull workers over HTTP: claim, ack, fail, extend; a vanished worker's job comes
//! back; a fail with dead.

use super::common::*;
use axum::http::StatusCode;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime};
use tickless_durable::LeaderOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_workers_claim_ack_fail_extend_and_a_vanished_workers_job_comes_back() {
    let (_server, queue, client) = setup("api-work").await;
    let q = queue.name().to_string();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    queue.set_manual_clock(Some(t0)).await.unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    let path = |op: &str| format!("/v1/queues/{q}/{op}");
    let w = Some(WORKER);

    // An empty queue: the long poll waits its wait_ms, then answers no job.
    let started = Instant::now();
    let empty = client
        .call(
            "POST",
            &path("claim"),
            w,
            Some(r#"{"max":10,"wait_ms":300}"#),
        )
        .await;
    assert_eq!(empty.body, json!({"jobs": []}), "{}", empty.text);
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A claim waiting when a job comes due gets it without waiting out its wait_ms.
    let waiting = {
        let (client, path) = (client.clone(), path("claim"));
        tokio::spawn(async move {
            client
                .call(
                    "POST",
                    &path,
                    Some(WORKER),
                    Some(r#"{"max":10,"wait_ms":20000,"lease_ms":1000}"#),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let reply = client
        .call(
            "POST",
            &format!("/v1/queues/{q}/jobs"),
            Some(SCHEDULER),
            Some(r#"{"id":"j1","payload":"work"}"#),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let claimed = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting claim did not answer within 10 s of the job's schedule")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let first = &claimed.body["jobs"][0];
    assert_eq!(
        (
            first["id"].as_str(),
            first["attempt"].as_u64(),
            first["payload"].as_str()
        ),
        (Some("j1"), Some(1), Some("work")),
        "{}",
        claimed.text
    );
    let delivery1 = first["delivery"].as_u64().unwrap();

    // Extend: the delivery holds its job. The worker then vanishes: its lease ends, the
    // leader puts the job back, and the next claim gets it as attempt 2.
    let ext = client
        .call(
            "POST",
            &path("extend"),
            w,
            Some(
                &json!({"deliveries":[{"id":"j1","delivery":delivery1}],"lease_ms":1000})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(ext.body, json!({"count": 1}));
    let none = client.call("POST", &path("claim"), w, Some("{}")).await;
    assert_eq!(
        none.body,
        json!({"jobs": []}),
        "in flight: not delivered twice"
    );
    queue
        .advance_manual_clock(Duration::from_millis(1001))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let again = client
        .call("POST", &path("claim"), w, Some(r#"{"lease_ms":60000}"#))
        .await;
    let second = &again.body["jobs"][0];
    assert_eq!(
        (second["id"].as_str(), second["attempt"].as_u64()),
        (Some("j1"), Some(2)),
        "{}",
        again.text
    );
    let delivery2 = second["delivery"].as_u64().unwrap();
    assert_ne!(delivery1, delivery2);
    // The vanished worker's late ack, fail and extend change nothing.
    let late = json!({"deliveries":[{"id":"j1","delivery":delivery1}]}).to_string();
    assert_eq!(
        client.call("POST", &path("ack"), w, Some(&late)).await.body,
        json!({"count": 0})
    );
    assert_eq!(
        client
            .call("POST", &path("extend"), w, Some(&late))
            .await
            .body,
        json!({"count": 0})
    );
    let late_fail = json!({"id":"j1","delivery":delivery1,"error":"late"}).to_string();
    assert_eq!(
        client
            .call("POST", &path("fail"), w, Some(&late_fail))
            .await
            .body,
        json!({"outcome": "lease_lost"})
    );

    // Attempt 2 of 2 fails: dead. An admin retries it; it is delivered and acked.
    let fail = json!({"id":"j1","delivery":delivery2,"error":"smtp 451","delay_ms":0}).to_string();
    assert_eq!(
        client
            .call("POST", &path("fail"), w, Some(&fail))
            .await
            .body,
        json!({"outcome": "dead"})
    );
    let dead = client.call("GET", &path("dead"), Some(READER), None).await;
    assert_eq!(dead.body["jobs"][0]["id"], "j1", "{}", dead.text);
    assert_eq!(dead.body["jobs"][0]["last_error"], "smtp 451");
    let retried = client
        .call("POST", &path("dead/j1/retry"), Some(ADMIN), None)
        .await;
    assert_eq!(retried.body, json!({"done": true}), "{}", retried.text);
    leader.step().await.unwrap();
    let third = client
        .call("POST", &path("claim"), w, Some(r#"{"max":5}"#))
        .await;
    let job = &third.body["jobs"][0];
    assert_eq!(job["id"], "j1", "{}", third.text);

    // A failure with a delay: retried, not delivered before the delay.
    let fail = json!({"id":"j1","delivery":job["delivery"],"delay_ms":5000}).to_string();
    assert_eq!(
        client
            .call("POST", &path("fail"), w, Some(&fail))
            .await
            .body,
        json!({"outcome": "retried"})
    );
    queue
        .advance_manual_clock(Duration::from_millis(4999))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(
        client
            .call("POST", &path("claim"), w, Some("{}"))
            .await
            .body,
        json!({"jobs": []}),
        "early"
    );
    queue
        .advance_manual_clock(Duration::from_millis(1))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let fourth = client.call("POST", &path("claim"), w, Some("{}")).await;
    let job = &fourth.body["jobs"][0];
    assert_eq!(
        (job["id"].as_str(), job["attempt"].as_u64()),
        (Some("j1"), Some(2)),
        "{}",
        fourth.text
    );
    let ack = json!({"deliveries":[{"id":"j1","delivery":job["delivery"]}]}).to_string();
    assert_eq!(
        client.call("POST", &path("ack"), w, Some(&ack)).await.body,
        json!({"count": 1})
    );
    let gone = client
        .call(
            "GET",
            &format!("/v1/queues/{q}/jobs/j1"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_with_dead_sends_the_job_to_the_dead_set_at_once() {
    let (_server, queue, client) = setup("api-dead").await;
    let q = queue.name().to_string();
    let path = |op: &str| format!("/v1/queues/{q}/{op}");
    let reply = client
        .call(
            "POST",
            &path("jobs"),
            Some(SCHEDULER),
            Some(r#"{"id":"poison"}"#),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let claimed = client
        .call("POST", &path("claim"), Some(WORKER), Some("{}"))
        .await;
    let job = &claimed.body["jobs"][0];
    assert_eq!(
        (job["id"].as_str(), job["attempt"].as_u64()),
        (Some("poison"), Some(1))
    );
    let fail =
        json!({"id": "poison", "delivery": job["delivery"], "error": "cannot parse", "dead": true});
    let reply = client
        .call("POST", &path("fail"), Some(WORKER), Some(&fail.to_string()))
        .await;
    assert_eq!(
        reply.body,
        json!({"outcome": "dead"}),
        "attempt 1 of 2, dead at once"
    );
    let counters = queue.counters().await.unwrap();
    assert_eq!(
        (counters.died, counters.quarantined),
        (1, 0),
        "counted as died"
    );
    let info = queue.job("poison").await.unwrap().unwrap();
    assert_eq!(info.last_error.as_deref(), Some("cannot parse"));
    // Again for the same delivery: it no longer holds the job.
    let reply = client
        .call("POST", &path("fail"), Some(WORKER), Some(&fail.to_string()))
        .await;
    assert_eq!(reply.body, json!({"outcome": "lease_lost"}));
}
