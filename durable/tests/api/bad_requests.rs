//! Every bad request gets its 4xx problem and changes nothing.

use super::common::*;
use axum::body::Body;
use axum::http::Request;
use serde_json::json;
use tickless_durable::api::{Api, Scope, Token};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_their_4xx_problem_and_change_nothing() {
    let (server, queue, _) = setup("api-bad").await;
    let q = queue.name().to_string();
    // A small body limit, to see it refuse without a large test body.
    let client = Client::new(
        Api::new([queue.clone()])
            .tokens(tokens(&q))
            .body_limit(64 << 10),
    );
    let jobs = format!("/v1/queues/{q}/jobs");
    let batch = format!("{jobs}/batch");
    let long_id = "i".repeat(513);
    let big = "x".repeat(65 << 10);
    let over_max = (1u64 << 52) + 1;
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","#.into()),
            400,
            "malformed-json",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":1}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","delay_ms":"soon"}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","delay_ms":-1}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","priority":1}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"payload":"x"}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","encoding":"hex"}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(format!(r#"{{"id":"a","payload":"{big}"}}"#)),
            413,
            "body-too-large",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":""}"#.into()),
            422,
            "invalid-id",
        ),
        (
            "POST",
            jobs.clone(),
            Some(format!(r#"{{"id":"{long_id}"}}"#)),
            422,
            "invalid-id",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","payload":"!!","encoding":"base64"}"#.into()),
            422,
            "invalid-payload",
        ),
        (
            "POST",
            jobs.clone(),
            Some(format!(r#"{{"id":"a","delay_ms":{}}}"#, u64::MAX)),
            422,
            "invalid-due",
        ),
        (
            "POST",
            jobs.clone(),
            Some(format!(r#"{{"id":"a","delay_ms":{over_max}}}"#)),
            422,
            "invalid-due",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","delay_ms":1,"at":"2030-01-01T00:00:00Z"}"#.into()),
            422,
            "invalid-due",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","at":"tomorrow"}"#.into()),
            422,
            "invalid-due",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","at":"1969-12-31T23:59:59Z"}"#.into()),
            422,
            "invalid-due",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"{"id":"a","at":"+275760-01-01T00:00:00Z"}"#.into()),
            422,
            "invalid-due",
        ),
        (
            "POST",
            "/v1/queues/nosuch/jobs".into(),
            Some(r#"{"id":"a"}"#.into()),
            403,
            "forbidden",
        ),
        // A batch with one bad job: refused whole, its good jobs not scheduled.
        (
            "POST",
            batch.clone(),
            Some(r#"{"jobs":[{"id":"good"},{"id":""}]}"#.into()),
            422,
            "invalid-id",
        ),
        (
            "POST",
            batch.clone(),
            Some(r#"{"jobs":[{"id":"good"},{"id":"b","at":"x"}]}"#.into()),
            422,
            "invalid-due",
        ),
        (
            "POST",
            batch.clone(),
            Some(r#"{"jobs":[{"id":"good"},{"id":"b","extra":1}]}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            batch.clone(),
            Some(r#"{"jobs":{"id":"good"}}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "PUT",
            format!("/v1/queues/{q}/schedules/s"),
            Some(r#"{"cron":"61 * * * *"}"#.into()),
            422,
            "invalid-schedule",
        ),
        (
            "PUT",
            format!("/v1/queues/{q}/schedules/s"),
            Some(r#"{"cron":"0 2 * * *","zone":"Mars/Olympus"}"#.into()),
            422,
            "invalid-schedule",
        ),
        (
            "PUT",
            format!("/v1/queues/{q}/schedules/s"),
            Some(r#"{"every_ms":0}"#.into()),
            422,
            "invalid-schedule",
        ),
        (
            "PUT",
            format!("/v1/queues/{q}/schedules/s"),
            Some(r#"{"every_ms":5,"cron":"* * * * *"}"#.into()),
            422,
            "invalid-schedule",
        ),
        (
            "PUT",
            format!("/v1/queues/{q}/schedules/s"),
            Some("{}".into()),
            422,
            "invalid-schedule",
        ),
        (
            "POST",
            format!("{jobs}/a/reschedule"),
            Some(r#"{"delay_ms":1e3}"#.into()),
            422,
            "invalid-body",
        ),
        // serde would read a struct from an array: only an object is a body.
        (
            "POST",
            format!("{jobs}/a/reschedule"),
            Some("[null, null]".into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            jobs.clone(),
            Some(r#"["a"]"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            format!("/v1/queues/{q}/claim"),
            Some(r#"{"max":0}"#.into()),
            422,
            "invalid-claim",
        ),
        (
            "POST",
            format!("/v1/queues/{q}/claim"),
            Some(r#"{"max":1,"wait_ms":30001}"#.into()),
            422,
            "invalid-claim",
        ),
        (
            "POST",
            format!("/v1/queues/{q}/claim"),
            Some(r#"{"lease_ms":9}"#.into()),
            422,
            "invalid-lease",
        ),
        (
            "POST",
            format!("/v1/queues/{q}/ack"),
            Some(r#"{"deliveries":[{"id":"a"}]}"#.into()),
            422,
            "invalid-body",
        ),
        (
            "POST",
            format!("/v1/queues/{q}/fail"),
            Some(r#"{"id":"a","delivery":1,"delay_ms":18446744073709551615}"#.into()),
            422,
            "invalid-due",
        ),
        (
            "GET",
            format!("/v1/queues/{q}/dead?limit=0"),
            None,
            422,
            "invalid-page",
        ),
        (
            "GET",
            format!("/v1/queues/{q}/dead?limit=x"),
            None,
            400,
            "invalid-query",
        ),
        (
            "GET",
            format!("/v1/queues/{q}/dead?color=red"),
            None,
            400,
            "invalid-query",
        ),
        (
            "GET",
            format!("/v1/queues/{q}/jobs/%FF"),
            None,
            400,
            "invalid-path",
        ),
        ("GET", "/v1/queues".into(), None, 404, "not-found"),
    ];
    for (method, path, body, status, expected) in &cases {
        let reply = client
            .call(method, path, Some(ADMIN), body.as_deref())
            .await;
        assert_eq!(
            reply.status.as_u16(),
            *status,
            "{method} {path} {body:?}: {}",
            reply.text
        );
        assert_eq!(kind(&reply), *expected, "{method} {path} {body:?}");
    }
    // Not JSON: 415.
    let request = Request::post(&jobs)
        .header("authorization", format!("Bearer {ADMIN}"))
        .header("content-type", "text/plain")
        .body(Body::from(r#"{"id":"a"}"#))
        .unwrap();
    let reply = client.send(request).await;
    assert_eq!((reply.status.as_u16(), kind(&reply)), (415, "not-json"));
    // A payload over 1 MiB within a body the limit allows.
    let large = Client::new(Api::new([queue.clone()]).tokens(tokens(&q)));
    let payload = "p".repeat(tickless_durable::MAX_PAYLOAD_BYTES + 1);
    let body = json!({"id": "a", "payload": payload}).to_string();
    let reply = large.call("POST", &jobs, Some(ADMIN), Some(&body)).await;
    assert_eq!(
        (reply.status.as_u16(), kind(&reply)),
        (413, "payload-too-large")
    );
    // An unknown queue (the token may touch any queue).
    let any = Client::new(
        Api::new([queue.clone()]).token(Token::new("all", ADMIN).scopes([Scope::Admin])),
    );
    let reply = any
        .call("GET", "/v1/queues/nosuch/counts", Some(ADMIN), None)
        .await;
    assert_eq!(
        (reply.status.as_u16(), kind(&reply)),
        (404, "unknown-queue")
    );

    // Nothing changed: no job, no schedule, no count, no key of the queue but none.
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.scheduled, stats.ready, stats.in_flight, stats.dead),
        (0, 0, 0, 0)
    );
    assert_eq!(queue.counters().await.unwrap().scheduled, 0);
    assert!(queue.schedules().await.unwrap().is_empty());
    assert!(queue.job("good").await.unwrap().is_none());
    let keys = server.cli(&["--scan", "--pattern", &format!("tickless:{{{q}}}:*")]);
    assert!(
        keys.lines().all(|k| k.ends_with(":meta") || k.is_empty()),
        "keys written by refused requests: {keys}"
    );
}
