//! The HTTP API (feature `api`) through its router, in-process, against a real
//! redis-server: every route's happy path; every bad request gets its 4xx problem and
//! changes nothing; tokens' scopes and queue sets; the OpenAPI document; Redis down.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};
use tickless_durable::api::{Api, Scope, Token};
use tickless_durable::{LeaderOptions, Queue};
use tickless_test_support as support;
use tower::ServiceExt as _;

const ADMIN: &str = "admin-secret-0123456789";
const SCHEDULER: &str = "schedule-secret-0123456789";
const WORKER: &str = "work-secret-0123456789";
const READER: &str = "read-secret-0123456789";
const OTHER_QUEUE: &str = "other-queue-secret-0123456789";

/// The tokens of most tests: one per scope on `queue`, and an admin of another queue.
fn tokens(queue: &str) -> Vec<Token> {
    vec![
        Token::new("admin", ADMIN)
            .scopes([Scope::Admin])
            .queues([queue]),
        Token::new("scheduler", SCHEDULER)
            .scopes([Scope::Schedule])
            .queues([queue]),
        Token::new("worker", WORKER)
            .scopes([Scope::Work])
            .queues([queue]),
        Token::new("reader", READER).scopes([Scope::Read]),
        Token::new("elsewhere", OTHER_QUEUE)
            .scopes([Scope::Admin])
            .queues(["elsewhere"]),
    ]
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
    text: String,
}

#[derive(Clone)]
struct Client {
    app: axum::Router,
}

impl Client {
    fn new(api: Api) -> Client {
        Client { app: api.router() }
    }

    /// `method path` with the token (if any) and a JSON body (if any).
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        self.send(request).await
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }
}

/// A problem's kind: the end of its `type`.
fn kind(reply: &Reply) -> &str {
    assert_eq!(
        reply
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap()),
        Some("application/problem+json"),
        "{} {}",
        reply.status,
        reply.text
    );
    assert_eq!(
        reply.body["status"],
        reply.status.as_u16(),
        "{}",
        reply.text
    );
    reply.body["type"]
        .as_str()
        .and_then(|t| t.strip_prefix("urn:tickless-durable:problem:"))
        .unwrap_or_else(|| panic!("no problem type in {}", reply.text))
}

async fn setup(test: &str) -> (support::RedisServer, Queue, Client) {
    let server = support::RedisServer::start();
    let name = support::queue_name(test);
    let queue = Queue::connect(&server.url(), &name)
        .await
        .unwrap()
        .with_max_attempts(2);
    let client = Client::new(Api::new([queue.clone()]).tokens(tokens(&name)));
    (server, queue, client)
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_scopes_and_queue_sets_are_enforced() {
    let (_server, queue, client) = setup("api-auth").await;
    let q = queue.name().to_string();
    let jobs = format!("/v1/queues/{q}/jobs");
    let job = Some(r#"{"id":"a"}"#);
    /// (token, method, path, body, status)
    type Case<'a> = (Option<&'a str>, &'a str, String, Option<&'a str>, u16);
    let cases: Vec<Case<'_>> = vec![
        (None, "POST", jobs.clone(), job, 401),
        (
            Some("not-a-token-of-this-server"),
            "POST",
            jobs.clone(),
            job,
            401,
        ),
        (
            Some(&ADMIN[..ADMIN.len() - 1]),
            "POST",
            jobs.clone(),
            job,
            401,
        ),
        (Some(READER), "POST", jobs.clone(), job, 403),
        (Some(WORKER), "POST", jobs.clone(), job, 403),
        (Some(SCHEDULER), "GET", format!("{jobs}/a"), None, 403),
        (
            Some(WORKER),
            "GET",
            format!("/v1/queues/{q}/counts"),
            None,
            403,
        ),
        (
            Some(SCHEDULER),
            "POST",
            format!("/v1/queues/{q}/claim"),
            Some("{}"),
            403,
        ),
        (
            Some(READER),
            "POST",
            format!("/v1/queues/{q}/claim"),
            Some("{}"),
            403,
        ),
        (
            Some(READER),
            "POST",
            format!("/v1/queues/{q}/dead/a/retry"),
            None,
            403,
        ),
        (
            Some(SCHEDULER),
            "POST",
            format!("/v1/queues/{q}/dead/a/retry"),
            None,
            403,
        ),
        (Some(OTHER_QUEUE), "POST", jobs.clone(), job, 403),
        (Some(OTHER_QUEUE), "DELETE", format!("{jobs}/a"), None, 403),
    ];
    for (token, method, path, body, status) in &cases {
        let reply = client.call(method, path, *token, *body).await;
        assert_eq!(
            reply.status.as_u16(),
            *status,
            "{token:?} {method} {path}: {}",
            reply.text
        );
        let expected = if *status == 401 {
            "unauthorized"
        } else {
            "forbidden"
        };
        assert_eq!(kind(&reply), expected);
        for secret in [ADMIN, SCHEDULER, WORKER, READER, OTHER_QUEUE] {
            assert!(
                !reply.text.contains(secret),
                "a secret echoed: {}",
                reply.text
            );
        }
        if *status == 401 {
            assert_eq!(reply.headers.get("www-authenticate").unwrap(), "Bearer");
        }
    }
    assert_eq!(
        queue.stats().await.unwrap().scheduled,
        0,
        "a refused request scheduled"
    );
    // The right scope on the right queue may; admin may all.
    let ok = client.call("POST", &jobs, Some(SCHEDULER), job).await;
    assert_eq!(ok.status, StatusCode::CREATED);
    let ok = client
        .call("GET", &format!("{jobs}/a"), Some(ADMIN), None)
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    // A token for every queue reads this one too.
    let ok = client
        .call("GET", &format!("{jobs}/a"), Some(READER), None)
        .await;
    assert_eq!(ok.status, StatusCode::OK);

    // No token configured: every request refused, even one with a bearer.
    let closed = Client::new(Api::new([queue.clone()]));
    let reply = closed
        .call("GET", &format!("{jobs}/a"), Some(ADMIN), None)
        .await;
    assert_eq!((reply.status.as_u16(), kind(&reply)), (401, "unauthorized"));
    assert!(
        reply.text.contains("no API token configured"),
        "{}",
        reply.text
    );
    // The document needs no token.
    let doc = closed.call("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(doc.status, StatusCode::OK);

    let debug = format!("{:?}", Api::new([queue.clone()]).tokens(tokens(&q)));
    for secret in [ADMIN, SCHEDULER, WORKER, READER, OTHER_QUEUE] {
        assert!(!debug.contains(secret), "{debug}");
    }
    assert!(debug.contains("\"scheduler\""), "{debug}");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_route_with_its_problems() {
    let (_server, _queue, client) = setup("api-doc").await;
    let doc = client.call("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.body["openapi"], "3.1.0");
    let routes = [
        ("post", "/v1/queues/{queue}/jobs"),
        ("post", "/v1/queues/{queue}/jobs/batch"),
        ("get", "/v1/queues/{queue}/jobs/{id}"),
        ("delete", "/v1/queues/{queue}/jobs/{id}"),
        ("post", "/v1/queues/{queue}/jobs/{id}/reschedule"),
        ("get", "/v1/queues/{queue}/schedules"),
        ("put", "/v1/queues/{queue}/schedules/{id}"),
        ("delete", "/v1/queues/{queue}/schedules/{id}"),
        ("get", "/v1/queues/{queue}/counts"),
        ("get", "/v1/queues/{queue}/dead"),
        ("post", "/v1/queues/{queue}/dead/{id}/retry"),
        ("post", "/v1/queues/{queue}/claim"),
        ("post", "/v1/queues/{queue}/ack"),
        ("post", "/v1/queues/{queue}/fail"),
        ("post", "/v1/queues/{queue}/extend"),
    ];
    let paths = doc.body["paths"].as_object().unwrap();
    let listed: usize = paths
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        listed,
        routes.len(),
        "operations listed: {:?}",
        paths.keys()
    );
    for (method, path) in routes {
        let op = &doc.body["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not in the document");
        for status in ["400", "401", "403", "404", "413", "422", "503"] {
            let content = &op["responses"][status]["content"]["application/problem+json"];
            assert!(content.is_object(), "{method} {path}: no {status} problem");
        }
        if op.get("requestBody").is_some() {
            assert!(
                op["responses"]["415"].is_object(),
                "{method} {path}: no 415"
            );
        }
        // Each route answers something else than 404 for a path of its shape.
        let concrete = path.replace("{queue}", "nosuch").replace("{id}", "x");
        let reply = client
            .call(&method.to_uppercase(), &concrete, None, Some("{}"))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{method} {concrete}: {}",
            reply.text
        );
    }
    assert!(doc.body["components"]["schemas"]["Problem"].is_object());
    assert_eq!(
        doc.body["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_answers_503_with_retry_after_and_up_again_works() {
    let (mut server, queue, client) = setup("api-down").await;
    let q = queue.name().to_string();
    let jobs = format!("/v1/queues/{q}/jobs");
    server.kill();
    let reply = client
        .call("POST", &jobs, Some(ADMIN), Some(r#"{"id":"a"}"#))
        .await;
    assert_eq!(
        (reply.status.as_u16(), kind(&reply)),
        (503, "redis-unavailable"),
        "{}",
        reply.text
    );
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    server.restart();
    // The queue's connection comes back on a later call: within a bounded number.
    let limit = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = client
            .call("POST", &jobs, Some(ADMIN), Some(r#"{"id":"a"}"#))
            .await;
        if reply.status == StatusCode::CREATED {
            break;
        }
        assert_eq!(reply.status.as_u16(), 503, "{}", reply.text);
        assert!(
            Instant::now() < limit,
            "the API did not schedule within 10 s of Redis's restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(queue.job("a").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_operation_status_and_token_name() {
    let server = support::RedisServer::start();
    let name = support::queue_name("api-metrics");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    let api = Api::new([queue.clone()]).tokens(tokens(&name));
    let metrics = api.metrics();
    let client = Client::new(api);
    let jobs = format!("/v1/queues/{name}/jobs");
    for id in ["a", "b", "a"] {
        let body = json!({ "id": id }).to_string();
        client
            .call("POST", &jobs, Some(SCHEDULER), Some(&body))
            .await;
    }
    client
        .call("POST", &jobs, Some(READER), Some(r#"{"id":"c"}"#))
        .await;
    client
        .call("POST", &jobs, None, Some(r#"{"id":"c"}"#))
        .await;
    let text = metrics.render();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let value = |name: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| s.value.clone())
    };
    use prometheus_parse::Value;
    let count = |labels: &[(&str, &str)]| match value("tickless_api_requests_total", labels) {
        Some(Value::Counter(n)) => n,
        other => panic!("{labels:?}: {other:?}\n{text}"),
    };
    assert_eq!(count(&[("operation", "schedule"), ("status", "201")]), 2.0);
    assert_eq!(count(&[("operation", "schedule"), ("status", "200")]), 1.0);
    assert_eq!(count(&[("operation", "schedule"), ("status", "403")]), 1.0);
    assert_eq!(count(&[("operation", "schedule"), ("status", "401")]), 1.0);
    match value(
        "tickless_api_request_duration_seconds",
        &[("operation", "schedule")],
    ) {
        Some(Value::Histogram(buckets)) => {
            assert_eq!(buckets.last().unwrap().count, 5.0, "{text}");
        }
        other => panic!("no latency histogram: {other:?}\n{text}"),
    }
    match value(
        "tickless_api_token_requests_total",
        &[("token", "scheduler")],
    ) {
        Some(Value::Counter(n)) => assert_eq!(n, 3.0),
        other => panic!("{other:?}\n{text}"),
    }
    for secret in [ADMIN, SCHEDULER, WORKER, READER, OTHER_QUEUE] {
        assert!(!text.contains(secret), "{text}");
    }
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
