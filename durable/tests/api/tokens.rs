//! Tokens: scopes and queue sets enforced, no token configured refuses everything.

use super::common::*;
use axum::http::StatusCode;
use tickless_durable::api::{Api, Scope, Token};
use tickless_durable::{ConnectOptions, Queue};
use tickless_test_support as support;

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

/// An API that opens queues on demand (`serve` without queue names) opens only those its
/// tokens name: any other is unknown (404), to a token for every queue too, and is not
/// created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_the_tokens_queue_sets_are_the_allow_list() {
    let server = support::RedisServer::start();
    let (named, other) = (
        support::queue_name("api-named"),
        support::queue_name("api-unnamed"),
    );
    let client = Client::new(
        Api::new([])
            .any_queue(ConnectOptions::new(&server.url()))
            .tokens([
                Token::new("named", SCHEDULER)
                    .scopes([Scope::Schedule])
                    .queues([named.as_str()]),
                Token::new("everywhere", ADMIN).scopes([Scope::Admin]),
            ]),
    );
    for (token, id) in [(SCHEDULER, "a"), (ADMIN, "b")] {
        let reply = client
            .call(
                "POST",
                &format!("/v1/queues/{named}/jobs"),
                Some(token),
                Some(&format!(r#"{{"id":"{id}"}}"#)),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    let reply = client
        .call(
            "POST",
            &format!("/v1/queues/{other}/jobs"),
            Some(ADMIN),
            Some(r#"{"id":"a"}"#),
        )
        .await;
    assert_eq!(
        (reply.status.as_u16(), kind(&reply)),
        (404, "unknown-queue"),
        "{}",
        reply.text
    );
    let reply = client
        .call(
            "POST",
            &format!("/v1/queues/{other}/jobs"),
            Some(SCHEDULER),
            Some(r#"{"id":"a"}"#),
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
    let other = Queue::connect(&server.url(), &other).await.unwrap();
    assert!(
        !other.exists().await.unwrap(),
        "the unnamed queue was created"
    );
    let named = Queue::connect(&server.url(), &named).await.unwrap();
    for id in ["a", "b"] {
        assert!(named.job(id).await.unwrap().is_some(), "{id}");
    }
}
