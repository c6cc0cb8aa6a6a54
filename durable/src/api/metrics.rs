//! The API's own figures in Prometheus text format: requests by operation and status,
//! their latency, and requests by token name (never the secret). Kept in this process
//! (each `serve` counts its own requests), unlike the queues' figures, kept in Redis.

use crate::dashboard::metrics::{label, Latency, LATENCY_BOUNDS};
use crate::dashboard::TokenUse;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Upper bounds of the latency histogram's buckets, in seconds.
const BOUNDS_S: [f64; LATENCY_BOUNDS] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5, 30.0];

/// The operation's name for a route: `schedule`, `claim`, ... (`other` for none).
pub(crate) fn operation(method: &str, route: &str) -> &'static str {
    let route = route.trim_start_matches("/v1");
    match (method, route) {
        ("POST", "/queues/{queue}/jobs") => "schedule",
        ("POST", "/queues/{queue}/jobs/batch") => "schedule_batch",
        ("GET", "/queues/{queue}/jobs/{id}") => "job",
        ("DELETE", "/queues/{queue}/jobs/{id}") => "cancel",
        ("POST", "/queues/{queue}/jobs/{id}/reschedule") => "reschedule",
        ("GET", "/queues/{queue}/schedules") => "schedules",
        ("PUT", "/queues/{queue}/schedules/{id}") => "set_schedule",
        ("DELETE", "/queues/{queue}/schedules/{id}") => "unschedule",
        ("GET", "/queues/{queue}/counts") => "counts",
        ("GET", "/queues/{queue}/dead") => "dead",
        ("POST", "/queues/{queue}/dead/{id}/retry") => "retry_dead",
        ("POST", "/queues/{queue}/claim") => "claim",
        ("POST", "/queues/{queue}/ack") => "ack",
        ("POST", "/queues/{queue}/fail") => "fail",
        ("POST", "/queues/{queue}/extend") => "extend",
        ("GET", "/openapi.json") => "openapi",
        _ => "other",
    }
}

#[derive(Default)]
struct Figures {
    requests: BTreeMap<(&'static str, u16), u64>,
    latency: BTreeMap<&'static str, Latency>,
    /// Requests by token name: how many, when the last came, by status and operation.
    tokens: BTreeMap<String, TokenUse>,
}

/// The HTTP API's request figures, as [`Api::metrics`](super::Api::metrics) gives them;
/// [`render`](ApiMetrics::render) writes them in Prometheus text format. Cheap to clone:
/// clones share the figures.
#[derive(Clone, Default)]
pub struct ApiMetrics {
    figures: Arc<Mutex<Figures>>,
}

impl std::fmt::Debug for ApiMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiMetrics").finish_non_exhaustive()
    }
}

impl ApiMetrics {
    /// A request answered: its operation, status, time taken, and the name of its token
    /// when it had a valid one.
    pub(crate) fn record(
        &self,
        operation: &'static str,
        status: u16,
        took: Duration,
        token: Option<&str>,
    ) {
        let now = SystemTime::now();
        let mut figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        *figures.requests.entry((operation, status)).or_default() += 1;
        if let Some(name) = token {
            if !figures.tokens.contains_key(name) {
                figures.tokens.insert(name.to_string(), TokenUse::new(name));
            }
            if let Some(used) = figures.tokens.get_mut(name) {
                used.requests += 1;
                used.last_used = Some(now);
                *used.by_status.entry(status).or_default() += 1;
                // No new `String` a request: only an operation's first.
                match used.by_operation.get_mut(operation) {
                    Some(count) => *count += 1,
                    None => {
                        used.by_operation.insert(operation.to_string(), 1);
                    }
                }
            }
        }
        figures
            .latency
            .entry(operation)
            .or_default()
            .observe(&BOUNDS_S, took);
    }

    /// Each token's use (by name, never the secret) since these figures began, for
    /// [`Dashboard::api_tokens`](crate::dashboard::Dashboard::api_tokens): `tickless-durable
    /// serve` shows them on its home page.
    pub fn token_use(&self) -> Vec<TokenUse> {
        let figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        figures.tokens.values().cloned().collect()
    }

    /// The figures in Prometheus text format (version 0.0.4): counters
    /// `tickless_api_requests_total{operation,status}` and
    /// `tickless_api_token_requests_total{token}` (by name), the gauge
    /// `tickless_api_token_last_used_seconds{token}` (Unix time), and the histogram
    /// `tickless_api_request_duration_seconds{operation}`.
    pub fn render(&self) -> String {
        let figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        if !figures.requests.is_empty() {
            out.push_str(
                "# HELP tickless_api_requests_total HTTP API requests by operation and status.\n\
                 # TYPE tickless_api_requests_total counter\n",
            );
            for ((operation, status), n) in &figures.requests {
                let _ = writeln!(
                    out,
                    "tickless_api_requests_total{{operation=\"{operation}\",status=\"{status}\"}} {n}"
                );
            }
            out.push_str(
                "# HELP tickless_api_request_duration_seconds HTTP API request latency by operation, \
                 from routing to the answer's head.\n\
                 # TYPE tickless_api_request_duration_seconds histogram\n",
            );
            for (operation, latency) in &figures.latency {
                latency.render(
                    &mut out,
                    &BOUNDS_S,
                    "tickless_api_request_duration_seconds",
                    "operation",
                    operation,
                );
            }
        }
        if !figures.tokens.is_empty() {
            out.push_str(
                "# HELP tickless_api_token_requests_total HTTP API requests by token name (never the secret).\n\
                 # TYPE tickless_api_token_requests_total counter\n",
            );
            for (name, used) in &figures.tokens {
                let _ = writeln!(
                    out,
                    "tickless_api_token_requests_total{{token=\"{}\"}} {}",
                    label(name),
                    used.requests
                );
            }
            out.push_str(
                "# HELP tickless_api_token_last_used_seconds When a token (by name) was last used, Unix time.\n\
                 # TYPE tickless_api_token_last_used_seconds gauge\n",
            );
            for (name, used) in &figures.tokens {
                let at = used
                    .last_used
                    .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
                    .map_or(0.0, |d| d.as_secs_f64());
                let _ = writeln!(
                    out,
                    "tickless_api_token_last_used_seconds{{token=\"{}\"}} {at}",
                    label(name)
                );
            }
        }
        out
    }
}
