//! Scheduling through the API: one job, a batch, look-up, cancel, reschedule;
//! recurring schedules set, listed and removed.

use super::common::*;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_look_up_cancel_reschedule_and_batch() {
    let (_server, queue, client) = setup("api-jobs").await;
    let q = queue.name().to_string();
    let jobs = format!("/v1/queues/{q}/jobs");
    let tok = Some(SCHEDULER);

    let added = client
        .call(
            "POST",
            &jobs,
            tok,
            Some(r#"{"id":"order:1","payload":"héllo","delay_ms":3600000}"#),
        )
        .await;
    assert_eq!(
        (added.status, &added.body),
        (
            StatusCode::CREATED,
            &json!({"id":"order:1","result":"added"})
        )
    );
    // The same id again adds nothing, whatever else it says.
    let again = client
        .call(
            "POST",
            &jobs,
            tok,
            Some(r#"{"id":"order:1","payload":"other"}"#),
        )
        .await;
    assert_eq!(
        (again.status, &again.body),
        (StatusCode::OK, &json!({"id":"order:1","result":"exists"}))
    );

    let binary = client
        .call("POST", &jobs, tok, Some(r#"{"id":"bin/2","payload":"AP8=","encoding":"base64","at":"2099-01-01T00:00:00+01:00"}"#))
        .await;
    assert_eq!(binary.status, StatusCode::CREATED, "{}", binary.text);

    let one = client
        .call("GET", &format!("{jobs}/order:1"), Some(READER), None)
        .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text);
    assert_eq!(
        (one.body["state"].as_str(), one.body["payload"].as_str()),
        (Some("scheduled"), Some("héllo"))
    );
    assert_eq!(one.body["encoding"], "text");
    // An id with a slash, percent-encoded in the path; its payload is not UTF-8.
    let two = client
        .call("GET", &format!("{jobs}/bin%2F2"), Some(READER), None)
        .await;
    assert_eq!(
        (two.body["payload"].as_str(), two.body["encoding"].as_str()),
        (Some("AP8="), Some("base64")),
        "{}",
        two.text
    );
    assert_eq!(two.body["due"], "2098-12-31T23:00:00.000Z");
    let info = queue.job("bin/2").await.unwrap().unwrap();
    assert_eq!(info.payload, vec![0, 255]);

    let moved = client
        .call(
            "POST",
            &format!("{jobs}/order:1/reschedule"),
            tok,
            Some(r#"{"at":"2030-01-01T00:00:00Z"}"#),
        )
        .await;
    assert_eq!(moved.body, json!({"done": true}), "{}", moved.text);
    let due = queue.job("order:1").await.unwrap().unwrap().due;
    assert_eq!(
        due,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000)
    );
    let nothing = client
        .call("POST", &format!("{jobs}/none/reschedule"), tok, Some("{}"))
        .await;
    assert_eq!(nothing.body, json!({"done": false}));

    let cancelled = client
        .call("DELETE", &format!("{jobs}/order:1"), tok, None)
        .await;
    assert_eq!(cancelled.body, json!({"done": true}));
    let gone = client
        .call("GET", &format!("{jobs}/order:1"), Some(READER), None)
        .await;
    assert_eq!(
        (gone.status, kind(&gone)),
        (StatusCode::NOT_FOUND, "not-found")
    );
    let twice = client
        .call("DELETE", &format!("{jobs}/order:1"), tok, None)
        .await;
    assert_eq!(twice.body, json!({"done": false}));

    let batch: Vec<Value> = (0..300)
        .map(|i| json!({"id": format!("b{i}"), "payload": "x", "delay_ms": 60_000}))
        .chain([json!({"id": "bin/2"})])
        .collect();
    let body = json!({ "jobs": batch }).to_string();
    let reply = client
        .call("POST", &format!("{jobs}/batch"), tok, Some(&body))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let results = reply.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 301);
    assert_eq!(results[0], json!({"id":"b0","result":"added"}));
    assert_eq!(results[300], json!({"id":"bin/2","result":"exists"}));

    let counts = client
        .call("GET", &format!("/v1/queues/{q}/counts"), Some(READER), None)
        .await;
    assert_eq!(
        counts.body,
        json!({"scheduled": 301, "ready": 0, "in_flight": 0, "dead": 0, "cold": 0})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recurring_schedules_are_set_listed_and_removed() {
    let (_server, queue, client) = setup("api-recur").await;
    let q = queue.name().to_string();
    let path = |id: &str| format!("/v1/queues/{q}/schedules/{id}");
    let set = client
        .call(
            "PUT",
            &path("beat"),
            Some(SCHEDULER),
            Some(r#"{"every_ms":60000,"payload":"ping"}"#),
        )
        .await;
    assert_eq!(set.body, json!({"done": true}), "{}", set.text);
    let same = client
        .call(
            "PUT",
            &path("beat"),
            Some(SCHEDULER),
            Some(r#"{"every_ms":60000,"payload":"ping"}"#),
        )
        .await;
    assert_eq!(
        same.body,
        json!({"done": false}),
        "set again as it is: nothing changed"
    );
    let cron = client
        .call(
            "PUT",
            &path("nightly"),
            Some(SCHEDULER),
            Some(r#"{"cron":"0 2 * * *","zone":"Europe/Paris"}"#),
        )
        .await;
    assert_eq!(cron.body, json!({"done": true}), "{}", cron.text);
    let list = client
        .call(
            "GET",
            &format!("/v1/queues/{q}/schedules"),
            Some(READER),
            None,
        )
        .await;
    let schedules = list.body["schedules"].as_array().unwrap();
    assert_eq!(schedules.len(), 2, "{}", list.text);
    let beat = schedules.iter().find(|s| s["id"] == "beat").unwrap();
    assert_eq!(
        (beat["every_ms"].as_u64(), beat["payload"].as_str()),
        (Some(60000), Some("ping"))
    );
    let nightly = schedules.iter().find(|s| s["id"] == "nightly").unwrap();
    assert_eq!(
        (nightly["cron"].as_str(), nightly["zone"].as_str()),
        (Some("0 2 * * *"), Some("Europe/Paris"))
    );
    assert!(
        nightly["next"].as_str().unwrap().ends_with(":00:00.000Z"),
        "{nightly}"
    );
    let removed = client
        .call("DELETE", &path("beat"), Some(SCHEDULER), None)
        .await;
    assert_eq!(removed.body, json!({"done": true}));
    assert_eq!(queue.schedules().await.unwrap().len(), 1);
}
