//! The dispatcher's figures in Prometheus text format: which target each queue posts to,
//! deliveries by target, outcome and HTTP status, retries, and the targets' response
//! latency; and for the dashboard's queue page ([`HookMetrics::view`]), each queue's
//! target and its requests of the last 15 minutes by outcome. Targets are named by the
//! operator's name for them (the dashboard adds the URL's origin), never by the whole
//! URL (its path or query may carry a credential) and never with a secret.

use crate::dashboard::metrics::{label, Latency, LATENCY_BOUNDS};
use crate::dashboard::WebhookView;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

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

/// How far back the dashboard's recent requests reach.
pub(crate) const RECENT: Duration = Duration::from_secs(15 * 60);
/// The most recent requests kept per queue (older ones are forgotten first).
const RECENT_MAX: usize = 10_000;

impl Outcome {
    /// What the dashboard calls a failure of this kind; `None` for a delivery.
    fn failure(self, status: u16) -> Option<String> {
        match self {
            Outcome::Delivered => None,
            Outcome::Status | Outcome::Gone => Some(status.to_string()),
            Outcome::Timeout => Some("timeout".into()),
            Outcome::Connect => Some("connection error".into()),
            Outcome::Refused => Some("refused".into()),
        }
    }

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

/// A queue's requests of the last [`RECENT`]: when, and the failure's kind (`None`:
/// delivered); the latest failure's time and error.
#[derive(Default)]
struct Recent {
    requests: VecDeque<(SystemTime, Option<String>)>,
    last_failure: Option<(SystemTime, String)>,
}

#[derive(Default)]
struct Figures {
    /// The target each queue's dispatcher posts to: (queue, target).
    routes: std::collections::BTreeSet<(String, String)>,
    /// Each routed queue's target and its origin (`scheme://host:port`).
    targets: BTreeMap<String, (String, String)>,
    /// Each queue's recent requests, for the dashboard.
    recent: BTreeMap<String, Recent>,
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
    /// Notes that `queue`'s due jobs are posted to `target`, whose URL's origin
    /// (`scheme://host:port`, no path, query or credential) is `origin`.
    pub(crate) fn route(&self, queue: &str, target: &str, origin: &str) {
        let mut figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        figures
            .routes
            .insert((queue.to_string(), target.to_string()));
        figures
            .targets
            .insert(queue.to_string(), (target.to_string(), origin.to_string()));
    }

    /// Counts a request of `queue`'s to `target` (status 0: none came) for a job's
    /// `attempt`, its latency if it was sent, and for the dashboard when it ended and
    /// `error` (the job's error, empty when delivered).
    pub(crate) fn record(
        &self,
        queue: &str,
        target: &str,
        attempt: u32,
        (outcome, status): (Outcome, u16),
        took: Option<Duration>,
        error: &str,
    ) {
        let now = SystemTime::now();
        let mut figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        let recent = figures.recent.entry(queue.to_string()).or_default();
        let failure = outcome.failure(status);
        if failure.is_some() {
            recent.last_failure = Some((now, error.to_string()));
        }
        recent.requests.push_back((now, failure));
        forget(recent, now);
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

    /// What the dashboard shows of `queue`'s dispatcher: its target (name and origin)
    /// and the requests of the last 15 minutes; `None` for a queue without one. Pass it
    /// to [`Dashboard::webhooks`](crate::dashboard::Dashboard::webhooks).
    pub fn view(&self, queue: &str) -> Option<WebhookView> {
        let mut figures = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        let (target, origin) = figures.targets.get(queue)?.clone();
        let mut view = WebhookView::new(target, origin);
        view.window = RECENT;
        if let Some(recent) = figures.recent.get_mut(queue) {
            forget(recent, SystemTime::now());
            for (_, failure) in &recent.requests {
                match failure {
                    None => view.delivered += 1,
                    Some(what) => *view.failures.entry(what.clone()).or_default() += 1,
                }
            }
            view.last_failure = recent.last_failure.clone();
        }
        Some(view)
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

/// Drops `recent`'s requests older than [`RECENT`] and beyond [`RECENT_MAX`].
fn forget(recent: &mut Recent, now: SystemTime) {
    while recent.requests.len() > RECENT_MAX
        || recent
            .requests
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at).unwrap_or_default() > RECENT)
    {
        recent.requests.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_counts_recent_requests_by_kind_and_keeps_the_last_error() {
        let metrics = HookMetrics::default();
        assert_eq!(metrics.view("q"), None, "no dispatcher for q");
        metrics.route("q", "orders", "https://hooks.example.com");
        let record = |outcome, status, error: &str| {
            metrics.record("q", "orders", 1, (outcome, status), None, error);
        };
        record(Outcome::Delivered, 204, "");
        record(Outcome::Status, 503, "answered 503: busy");
        record(Outcome::Status, 503, "answered 503: still busy");
        record(Outcome::Timeout, 0, "did not answer");
        record(Outcome::Connect, 0, "cannot reach");
        record(Outcome::Gone, 410, "answered 410 Gone");
        record(Outcome::Delivered, 200, "");
        let view = metrics.view("q").unwrap();
        assert_eq!(
            (view.target.as_str(), view.origin.as_str(), view.window),
            ("orders", "https://hooks.example.com", RECENT)
        );
        assert_eq!(view.delivered, 2);
        let failures: Vec<(&str, u64)> = view
            .failures
            .iter()
            .map(|(what, n)| (what.as_str(), *n))
            .collect();
        assert_eq!(
            failures,
            [
                ("410", 1),
                ("503", 2),
                ("connection error", 1),
                ("timeout", 1)
            ]
        );
        assert_eq!(view.last_failure.unwrap().1, "answered 410 Gone");
    }

    #[test]
    fn requests_older_than_the_window_are_forgotten() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let mut recent = Recent::default();
        recent
            .requests
            .push_back((now - RECENT - Duration::from_secs(1), Some("503".into())));
        recent
            .requests
            .push_back((now - RECENT, Some("500".into())));
        forget(&mut recent, now);
        assert_eq!(
            recent.requests.len(),
            1,
            "the one just inside the window stays"
        );
        for _ in 0..RECENT_MAX + 5 {
            recent.requests.push_back((now, None));
        }
        forget(&mut recent, now);
        assert_eq!(recent.requests.len(), RECENT_MAX);
    }
}
