//! Who used the HTTP API: a section of the home page, one row per token by name (never
//! its secret), from figures another layer keeps ([`Dashboard::api_tokens`]).
//!
//! [`Dashboard::api_tokens`]: super::Dashboard::api_tokens

use super::html::ago;
use maud::{html, Markup};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// One API token's use since the server started, as the dashboard's home page shows it:
/// by name, never the secret. [`ApiMetrics::token_use`] gives them for
/// [`Dashboard::api_tokens`].
///
/// [`ApiMetrics::token_use`]: crate::api::ApiMetrics::token_use
/// [`Dashboard::api_tokens`]: super::Dashboard::api_tokens
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenUse {
    /// The token's name.
    pub name: String,
    /// Requests made with it.
    pub requests: u64,
    /// When the last of them came.
    pub last_used: Option<SystemTime>,
    /// Requests by the answer's status.
    pub by_status: BTreeMap<u16, u64>,
    /// Requests by operation (`schedule`, `claim`, ...).
    pub by_operation: BTreeMap<String, u64>,
}

impl TokenUse {
    /// A token named `name` that made no request yet.
    pub fn new(name: impl Into<String>) -> TokenUse {
        TokenUse {
            name: name.into(),
            ..TokenUse::default()
        }
    }
}

/// Where the home page reads the tokens' use from.
pub(super) type Source = Arc<dyn Fn() -> Vec<TokenUse> + Send + Sync>;

/// The home page's section: the tokens, the most recently used first.
pub(super) fn section(now: SystemTime, mut uses: Vec<TokenUse>) -> Markup {
    uses.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.name.cmp(&b.name)));
    let counts = |by: Vec<(String, u64)>| -> String {
        by.iter()
            .map(|(what, n)| format!("{what}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    html! {
        h2 { "API tokens" }
        @if uses.is_empty() {
            p id="no-api-requests" { "No API request with a token since this server started." }
        } @else {
            table id="api-tokens" {
                tr {
                    th { "token" } th { "requests" } th { "last used" }
                    th { "by status" } th { "by operation" }
                }
                @for used in &uses {
                    tr data-token=(used.name) {
                        td { (used.name) }
                        td class="n" { (used.requests) }
                        td {
                            @if let Some(at) = used.last_used { (ago(now, at)) }
                        }
                        td { (counts(used.by_status.iter().map(|(s, n)| (s.to_string(), *n)).collect())) }
                        td { (counts(used.by_operation.iter().map(|(o, n)| (o.clone(), *n)).collect())) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rows_come_most_recent_first_with_their_counts_and_names_escaped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut old = TokenUse::new("old");
        old.requests = 1;
        old.last_used = Some(now - Duration::from_secs(90));
        old.by_status.insert(401, 1);
        let mut recent = TokenUse::new("<b>recent</b>");
        recent.requests = 3;
        recent.last_used = Some(now - Duration::from_millis(300));
        recent.by_status.extend([(201, 2), (403, 1)]);
        recent.by_operation.insert("schedule".into(), 3);
        let html = section(now, vec![old, recent]).into_string();
        let (first, second) = (html.find("recent").unwrap(), html.find(">old<").unwrap());
        assert!(first < second, "{html}");
        assert!(!html.contains("<b>"), "{html}");
        for text in ["300 ms ago", "90.0 s ago", "201: 2, 403: 1", "schedule: 3"] {
            assert!(html.contains(text), "no {text} in {html}");
        }
        let none = section(now, Vec::new()).into_string();
        assert!(none.contains("no-api-requests"), "{none}");
    }
}
