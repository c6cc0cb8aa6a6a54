//! The dispatcher's figures in Prometheus text format: which target each queue posts to,
//! deliveries by target, outcome and HTTP status, retries, and the targets' response
//! latency. Targets are named by the operator's
//! name for them, never by URL (a URL may carry a credential) and never with a secret.

use crate::dashboard::metrics::{label, Latency, LATENCY_BOUNDS};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
const BOUNDS_S: [f64; LATENCY_BOUNDS] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// What became of one request (or of a delivery refused before any request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Outcome {
    /// A 2xx: acknowledged.
    Delivered,
    /// Another status: failed, retried after the backoff (or dead after the last).
    Status,
    /// 410 Gone: dead at once.
    Gone,
    /// No answer within the target's timeout.
    Timeout,
    /// No connection (refused, reset, TLS, or every address refused by the guard).
    Connect,
    /// Refused before any request: scheme, host or address not allowed.
    Refused,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Status => "failed_status",
            Outcome::Gone => "gone",
            Outcome::Timeout => "timeout",
            Outcome::Connect => "connect_error",
            Outcome::Refused => "refused",
        }
    }
}

#[derive(Default)]
struct Figures {
    /// The target each queue's dispatcher posts to: (queue, target).
    routes: std::collections::BTreeSet<(String, String)>,
    deliveries: BTreeMap<(String, Outcome, u16), u64>,
    /// Requests that were a retry (attempt 2 or later), by target.
    retries: BTreeMap<String, u64>,
    latency: BTreeMap<String, Latency>,
}

/// The webhook dispatchers' figures ([`Dispatchers::metrics`](super::Dispatchers::metrics));
/// [`render`](HookMetrics::render) writes them. Cheap to clone: clones share the figures.
#[derive(Clone, Default)]
pub struct HookMetrics {
    figures: Arc<Mutex<Figures>>,
}

impl std::fmt::Debug for HookMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookMetrics")
    }
}

impl HookMetrics {
    /// Notes that `queue`'s due jobs are posted to `target`.
    pub(crate) fn route(&self, queue: &str, target: &str) {
        let mut figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        figures
            .routes
            .insert((queue.to_string(), target.to_string()));
    }

    /// Counts a request to `target` (status 0: none came) for a job's `attempt`, and its
    /// latency if it was sent.
    pub(crate) fn record(
        &self,
        target: &str,
        attempt: u32,
        outcome: Outcome,
        status: u16,
        took: Option<Duration>,
    ) {
        let mut figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        if attempt > 1 {
            *figures.retries.entry(target.to_string()).or_default() += 1;
        }
        *figures
            .deliveries
            .entry((target.to_string(), outcome, status))
            .or_default() += 1;
        if let Some(took) = took {
            figures
                .latency
                .entry(target.to_string())
                .or_default()
                .observe(&BOUNDS_S, took);
        }
    }

    /// The figures in Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out.push_str(
            "# HELP tickless_webhook_queue_target 1 for each queue and the target (by name) its due jobs are posted to.\n\
             # TYPE tickless_webhook_queue_target gauge\n",
        );
        for (queue, target) in &figures.routes {
            let _ = writeln!(
                out,
                "tickless_webhook_queue_target{{queue=\"{}\",target=\"{}\"}} 1",
                label(queue),
                label(target)
            );
        }
        out.push_str(
            "# HELP tickless_webhook_retries_total Webhook requests that were a retry (the job's attempt 2 or later), by target.\n\
             # TYPE tickless_webhook_retries_total counter\n",
        );
        for (target, count) in &figures.retries {
            let _ = writeln!(
                out,
                "tickless_webhook_retries_total{{target=\"{}\"}} {count}",
                label(target)
            );
        }
        out.push_str(
            "# HELP tickless_webhook_deliveries_total Webhook requests by target, outcome and HTTP status (0: no answer).\n\
             # TYPE tickless_webhook_deliveries_total counter\n",
        );
        for ((target, outcome, status), count) in &figures.deliveries {
            let _ = writeln!(
                out,
                "tickless_webhook_deliveries_total{{target=\"{}\",outcome=\"{}\",status=\"{status}\"}} {count}",
                label(target),
                outcome.name()
            );
        }
        out.push_str(
            "# HELP tickless_webhook_latency_seconds Webhook targets' response time.\n\
             # TYPE tickless_webhook_latency_seconds histogram\n",
        );
        for (target, latency) in &figures.latency {
            latency.render(
                &mut out,
                &BOUNDS_S,
                "tickless_webhook_latency_seconds",
                "target",
                target,
            );
        }
        out
    }
}
