//! The queue page's webhook section ([`Dashboard::webhooks`](super::Dashboard::webhooks)):
//! the target a queue's dispatcher posts to (its name and origin, never its path, query
//! or secret) and its recent failures by status code, timeout or connection error.

use super::html::ago;
use maud::{html, Markup};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the queue page shows of a queue's webhook dispatcher, as
/// [`Dashboard::webhooks`](super::Dashboard::webhooks) gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookView {
    /// The target's name (the operator's).
    pub target: String,
    /// Its URL's origin, `scheme://host:port`: never its path or query, which may carry
    /// a credential.
    pub origin: String,
    /// How far back `delivered` and `failures` reach.
    pub window: Duration,
    /// Requests answered 2xx within the window.
    pub delivered: u64,
    /// Failed requests within the window, by what came of them: the HTTP status
    /// (`"503"`), `"timeout"`, `"connection error"` or `"refused"` (not sent).
    pub failures: BTreeMap<String, u64>,
    /// The latest failure's time and error (the status and the answer's first 200
    /// bytes, or the connection's error), as the job's error says it.
    pub last_failure: Option<(SystemTime, String)>,
}

impl WebhookView {
    /// A queue posting to `target` at `origin`, with nothing recent.
    pub fn new(target: impl Into<String>, origin: impl Into<String>) -> WebhookView {
        WebhookView {
            target: target.into(),
            origin: origin.into(),
            ..WebhookView::default()
        }
    }
}

/// Where the queue page reads a queue's webhook figures from, by the queue's name.
pub(super) type Source = Arc<dyn Fn(&str) -> Option<WebhookView> + Send + Sync>;

/// The section, or nothing for a queue no dispatcher posts from.
pub(super) fn section(now: SystemTime, view: Option<&WebhookView>) -> Markup {
    let Some(view) = view else {
        return html! {};
    };
    let minutes = view.window.as_secs() / 60;
    html! {
        p id="webhook-target" {
            "Due jobs are posted to the webhook target " b { (view.target) }
            " (" code { (view.origin) } "). In the last " (minutes) " minutes: "
            span id="webhook-delivered" { (view.delivered) } " delivered, "
            span id="webhook-failed" { (view.failures.values().sum::<u64>()) } " failed."
        }
        @if !view.failures.is_empty() {
            table id="webhook-failures" {
                tr { th { "failed with" } th { "requests" } }
                @for (what, n) in &view.failures {
                    tr data-failure=(what) { td { (what) } td class="n" { (n) } }
                }
            }
        }
        @if let Some((at, error)) = &view.last_failure {
            p id="webhook-last-failure" {
                "Last failure " (ago(now, *at)) ": " code { (error) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_counts_failures_by_kind_and_escapes_what_it_shows() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut view = WebhookView::new("<i>orders</i>", "https://hooks.example.com");
        view.window = Duration::from_secs(900);
        view.delivered = 7;
        view.failures
            .extend([("503".to_string(), 2), ("timeout".to_string(), 1)]);
        view.last_failure = Some((
            now - Duration::from_secs(3),
            "webhook target orders answered 503: <b>down</b>".into(),
        ));
        let html = section(now, Some(&view)).into_string();
        assert!(!html.contains("<i>") && !html.contains("<b>down"), "{html}");
        for text in [
            "https://hooks.example.com",
            "last 15 minutes",
            "id=\"webhook-delivered\">7<",
            "id=\"webhook-failed\">3<",
            "data-failure=\"503\"><td>503</td><td class=\"n\">2<",
            "data-failure=\"timeout\"><td>timeout</td><td class=\"n\">1<",
            "3.0 s ago",
        ] {
            assert!(html.contains(text), "no {text} in {html}");
        }
        assert_eq!(section(now, None).into_string(), "");
    }
}
