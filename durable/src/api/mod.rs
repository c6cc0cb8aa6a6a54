//! An HTTP API for durable queues (cargo feature `api`): any language schedules and
//! works jobs with its own HTTP client.
//!
//! [`Api`] builds an [`axum::Router`] whose routes are under `/v1/`; `tickless-durable
//! serve` serves it beside the dashboard. JSON over HTTP/1.1; the OpenAPI 3.1 document,
//! generated from the code, is at `/v1/openapi.json` (the one route without a token).
//!
//! | route | scope | what |
//! | --- | --- | --- |
//! | `POST /v1/queues/{queue}/jobs` | schedule | schedule one job: `id`, `payload` (`encoding` `text` or `base64`), `delay_ms` or `at` (RFC 3339); 201 `added`, 200 `exists` |
//! | `POST /v1/queues/{queue}/jobs/batch` | schedule | up to 10,000 jobs; all checked first, one bad job refuses the batch (nothing scheduled) |
//! | `GET /v1/queues/{queue}/jobs/{id}` | read | a job's state, due time, attempts, error, payload |
//! | `DELETE /v1/queues/{queue}/jobs/{id}` | schedule | cancel |
//! | `POST /v1/queues/{queue}/jobs/{id}/reschedule` | schedule | a waiting job's new due time |
//! | `GET /v1/queues/{queue}/schedules` | read | recurring schedules |
//! | `PUT`, `DELETE /v1/queues/{queue}/schedules/{id}` | schedule | set (`every_ms`, or `cron` and `zone`), remove |
//! | `GET /v1/queues/{queue}/counts` | read | jobs by state |
//! | `GET /v1/queues/{queue}/dead?offset=&limit=` | read | dead jobs, a page |
//! | `POST /v1/queues/{queue}/dead/{id}/retry` | admin | a dead job's new attempts |
//! | `POST /v1/queues/{queue}/claim` | work | up to `max` jobs, waiting up to `wait_ms` (long poll), each held `lease_ms` |
//! | `POST /v1/queues/{queue}/ack`, `/extend` | work | deliveries by `id` and `delivery` number |
//! | `POST /v1/queues/{queue}/fail` | work | retried after `delay_ms`, or dead after its last attempt; dead now with `dead` |
//!
//! Everything the library promises holds: a schedule is idempotent on its id (a repeat
//! answers `exists`), no job is delivered before it is due, and delivery is at least
//! once: a worker that claims and vanishes loses its leases, and the jobs are delivered
//! again. Acks, fails and extends act only if the named delivery still holds its job.
//!
//! # Tokens
//!
//! Every request but the document's needs `Authorization: Bearer <secret>` of one of
//! the [`Token`]s given; with none given, every request is refused (401). A token has a
//! name, [`Scope`]s and, if named, the only queues it may touch (403 otherwise). Secrets
//! are compared in constant time, and never logged, shown in `Debug`, or echoed.
//!
//! # Problems
//!
//! Errors are RFC 9457 `application/problem+json` bodies `{type, title, status,
//! detail}`; `type` is `urn:tickless-durable:problem:<kind>`, stable:
//!
//! | kind | status | |
//! | --- | --- | --- |
//! | `malformed-json`, `invalid-path`, `invalid-query` | 400 | the request does not parse |
//! | `unauthorized` | 401 | no token, an unknown one, or none configured |
//! | `forbidden` | 403 | the token lacks the scope or the queue |
//! | `unknown-queue`, `not-found` | 404 | |
//! | `body-too-large`, `payload-too-large`, `batch-too-large` | 413 | |
//! | `not-json` | 415 | |
//! | `invalid-body`, `invalid-id`, `invalid-payload`, `invalid-due`, `invalid-schedule`, `invalid-queue-name`, `invalid-lease`, `invalid-claim`, `invalid-page` | 422 | |
//! | `redis-unavailable`, `replication`, `cold-store` | 503 | with `Retry-After`; a schedule is safe to send again |
//! | `redis-permission`, `garbage`, `server` | 500 | the server's Redis setup |
//!
//! A refused request changed nothing.
//!
//! ```no_run
//! use tickless_durable::api::{Api, Scope, Token};
//! use tickless_durable::Queue;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
//! let worker = Token::new("reviewer", std::env::var("REVIEWER_TOKEN")?).scopes([Scope::Work]);
//! let app = Api::new([queue]).token(worker).router();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```

mod auth;
mod extract;
mod metrics;
mod model;
mod openapi;
mod problem;
mod routes;
mod track;

pub use auth::{Scope, Token, MIN_SECRET_BYTES};
pub use metrics::ApiMetrics;

use crate::{ConnectOptions, Queue};
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::response::IntoResponse;
use problem::Problem;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// The default limit of a request body: a batch of many small jobs, or one job of the
/// largest payload (1 MiB) in base64.
pub const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// The HTTP API over some queues; [`router`](Api::router) makes it an axum
/// [`Router`](axum::Router). See the [module docs](self).
#[derive(Clone)]
pub struct Api {
    queues: Vec<Queue>,
    any_queue: Option<ConnectOptions>,
    tokens: Vec<Token>,
    body_limit: usize,
    metrics: ApiMetrics,
}

impl fmt::Debug for Api {
    /// The tokens' names, never their secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("queues", &self.queues)
            .field("any_queue", &self.any_queue.as_ref().map(|o| o.shown_url()))
            .field("tokens", &self.tokens)
            .field("body_limit", &self.body_limit)
            .finish()
    }
}

impl Api {
    /// An API over `queues`, refusing every request until a [`token`](Api::token) is
    /// given. A queue not given is unknown (404), unless [`any_queue`](Api::any_queue).
    pub fn new(queues: impl IntoIterator<Item = Queue>) -> Api {
        Api {
            queues: queues.into_iter().collect(),
            any_queue: None,
            tokens: Vec::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            metrics: ApiMetrics::default(),
        }
    }

    /// Also serves the queues the tokens name ([`Token::queues`]), opened with `options`
    /// on first use: scheduling on a new one creates it. The tokens' queue sets are the
    /// allow-list: a queue that was neither given to [`new`](Api::new) nor named by a
    /// token is unknown (404), even to a token for every queue, so no request creates a
    /// queue the operator did not name. (`tickless-durable serve` without queue names.)
    pub fn any_queue(mut self, options: ConnectOptions) -> Api {
        self.any_queue = Some(options);
        self
    }

    /// A token that may call the API (several may be given: one per client, or two
    /// while one replaces the other).
    pub fn token(mut self, token: Token) -> Api {
        self.tokens.push(token);
        self
    }

    /// Tokens, as [`token`](Api::token) each.
    pub fn tokens(mut self, tokens: impl IntoIterator<Item = Token>) -> Api {
        self.tokens.extend(tokens);
        self
    }

    /// The largest request body, in bytes ([`DEFAULT_BODY_LIMIT`] by default); a larger
    /// one is refused (413) before it is read whole.
    pub fn body_limit(mut self, bytes: usize) -> Api {
        self.body_limit = bytes;
        self
    }

    /// The API's request figures (by operation, status and token name; latency), for a
    /// `/metrics` of your own: [`ApiMetrics::render`]. `tickless-durable serve` adds them
    /// to the dashboard's `/metrics`.
    pub fn metrics(&self) -> ApiMetrics {
        self.metrics.clone()
    }

    /// The axum router: the routes under `/v1/`.
    pub fn router(self) -> axum::Router {
        let body_limit = self.body_limit;
        let state = Arc::new(State {
            opened: RwLock::new(
                self.queues
                    .iter()
                    .map(|q| (q.name().to_string(), q.clone()))
                    .collect(),
            ),
            opening: tokio::sync::Mutex::new(()),
            any_queue: self.any_queue,
            tokens: self.tokens,
        });
        let document = openapi::document();
        let v1 = routes::router(state)
            .route(
                "/openapi.json",
                axum::routing::get(move || async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        document.clone(),
                    )
                }),
            )
            .route_layer(track::Track(self.metrics))
            .fallback(|| async {
                Problem::not_found("no such route in the API (see /v1/openapi.json)".into())
                    .into_response()
            })
            .layer(DefaultBodyLimit::max(body_limit));
        axum::Router::new().nest("/v1", v1)
    }
}

/// What the handlers share. `opened` is never held across an `await`; `opening` is held
/// while a queue is opened on demand, so that two requests open it once.
struct State {
    opened: RwLock<HashMap<String, Queue>>,
    opening: tokio::sync::Mutex<()>,
    any_queue: Option<ConnectOptions>,
    tokens: Vec<Token>,
}

impl State {
    fn find(&self, name: &str) -> Option<Queue> {
        self.opened
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Queue `name`: one given, or (with `any_queue`) one a token names, opened now.
    async fn queue(&self, name: &str) -> Result<Queue, Problem> {
        if let Some(queue) = self.find(name) {
            return Ok(queue);
        }
        let Some(options) = &self.any_queue else {
            return Err(Problem::unknown_queue(name));
        };
        let _opening = self.opening.lock().await;
        if let Some(queue) = self.find(name) {
            return Ok(queue);
        }
        // The tokens' queue sets bound what is opened: nothing a request names alone.
        if !self.tokens.iter().any(|token| token.names(name)) {
            return Err(Problem::unknown_queue(name));
        }
        let queue = options.connect(name).await?;
        self.opened
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), queue.clone());
        Ok(queue)
    }
}
