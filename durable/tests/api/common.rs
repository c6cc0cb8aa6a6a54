//! What the API tests share: their tokens, a client that calls the router in-process,
//! problem kinds, and a queue on a redis-server of the test's own.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tickless_durable::api::{Api, Scope, Token};
use tickless_durable::Queue;
use tickless_test_support as support;
use tower::ServiceExt as _;

pub const ADMIN: &str = "admin-secret-0123456789";
pub const SCHEDULER: &str = "schedule-secret-0123456789";
pub const WORKER: &str = "work-secret-0123456789";
pub const READER: &str = "read-secret-0123456789";
pub const OTHER_QUEUE: &str = "other-queue-secret-0123456789";

/// The tokens of most tests: one per scope on `queue`, and an admin of another queue.
pub fn tokens(queue: &str) -> Vec<Token> {
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

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

#[derive(Clone)]
pub struct Client {
    pub app: axum::Router,
}

impl Client {
    pub fn new(api: Api) -> Client {
        Client { app: api.router() }
    }

    /// `method path` with the token (if any) and a JSON body (if any).
    pub async fn call(
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

    pub async fn send(&self, request: Request<Body>) -> Reply {
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
pub fn kind(reply: &Reply) -> &str {
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

pub async fn setup(test: &str) -> (support::RedisServer, Queue, Client) {
    let server = support::RedisServer::start();
    let name = support::queue_name(test);
    let queue = Queue::connect(&server.url(), &name)
        .await
        .unwrap()
        .with_max_attempts(2);
    let client = Client::new(Api::new([queue.clone()]).tokens(tokens(&name)));
    (server, queue, client)
}
