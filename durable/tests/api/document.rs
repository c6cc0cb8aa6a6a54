//! What the API tells about itself: the OpenAPI document and the request metrics.

use super::common::*;
use axum::http::StatusCode;
use serde_json::json;
use tickless_durable::api::Api;
use tickless_durable::dashboard::Dashboard;
use tickless_durable::Queue;
use tickless_test_support as support;

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

/// The dashboard's home page, given the API's figures, shows which tokens were used, by
/// name: requests, the last one's time, by status and by operation; no secret, neither
/// a configured one nor a wrong one sent, appears on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_which_tokens_used_the_api_never_a_secret() {
    let (_server, queue, _) = setup("api-dash").await;
    let name = queue.name().to_string();
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
    let wrong = "not-a-token-0123456789";
    for token in [READER, wrong] {
        client
            .call("POST", &jobs, Some(token), Some(r#"{"id":"c"}"#))
            .await;
    }
    let dashboard = Client {
        app: Dashboard::new([queue])
            .api_tokens(move || metrics.token_use())
            .router(),
    };
    let page = dashboard.call("GET", "/", None, None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let row = |token: &str| {
        let start = page
            .text
            .find(&format!("data-token=\"{token}\""))
            .unwrap_or_else(|| panic!("no row for {token}: {}", page.text));
        let end = page.text[start..].find("</tr>").unwrap() + start;
        page.text[start..end].to_string()
    };
    let scheduler = row("scheduler");
    for text in [">3<", " ms ago", "200: 1, 201: 2", "schedule: 3"] {
        assert!(scheduler.contains(text), "no {text} in {scheduler}");
    }
    assert!(row("reader").contains("403: 1"), "{}", row("reader"));
    assert!(
        !page.text.contains("data-token=\"worker\""),
        "an unused token has no row"
    );
    for secret in [ADMIN, SCHEDULER, WORKER, READER, OTHER_QUEUE, wrong] {
        assert!(!page.text.contains(secret), "{}", page.text);
    }
}
