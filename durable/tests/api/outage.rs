//! Redis down under the router: 503 problems with Retry-After, then work again.

use super::common::*;
use axum::http::StatusCode;
use std::time::{Duration, Instant};

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
