//! A dashboard page read in-process, through the router (no server, no browser).

use tickless_durable::dashboard::Dashboard;
use tickless_durable::Queue;
use tower::ServiceExt as _;

/// GET `path` of a dashboard of `queue`: the body of its 200 answer.
pub async fn get(queue: &Queue, path: &str) -> String {
    let response = Dashboard::new([queue.clone()])
        .router()
        .oneshot(
            axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let body = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    String::from_utf8(body.to_vec()).unwrap()
}
