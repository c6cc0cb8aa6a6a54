//! What every page shares (the layout, links, action buttons, times in words) and the
//! home page.
//!
//! Pages are `maud` markup: `html!` escapes every value it inserts (queue names, job ids,
//! errors, payloads), so no insertion point can forget to. The one [`PreEscaped`] is our
//! own style sheet. Parts of links are percent-encoded by [`enc`].

use crate::{Queue, Stats};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, PercentEncode, NON_ALPHANUMERIC};
use std::time::{Duration, SystemTime};

/// Kept as they are in a path segment or a query value: RFC 3986's unreserved
/// characters. Everything else is percent-encoded.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `text` percent-encoded (as UTF-8) for a URL path segment or query value.
pub(super) fn enc(text: &str) -> PercentEncode<'_> {
    utf8_percent_encode(text, UNRESERVED)
}

/// Where the dashboard is mounted ("" at the root), whether actions are allowed, whether
/// this request has the token (a session or `Bearer`), whether a token is set at all (a
/// login form), and whether payloads and job errors may be shown to it.
pub(super) struct Ctx<'a> {
    pub(super) base: &'a str,
    pub(super) actions: bool,
    pub(super) logged_in: bool,
    pub(super) login: bool,
    pub(super) readable: bool,
    pub(super) message: Option<&'a str>,
}

impl Ctx<'_> {
    pub(super) fn home(&self) -> String {
        if self.base.is_empty() {
            "/".to_string()
        } else {
            self.base.to_string()
        }
    }

    pub(super) fn queue_url(&self, queue: &str) -> String {
        format!("{}/queue/{}", self.base, enc(queue))
    }

    pub(super) fn job_url(&self, queue: &str, id: &str) -> String {
        format!("{}/job?id={}", self.queue_url(queue), enc(id))
    }

    /// A form with one button posting `action` (and `id`) to the queue; nothing when
    /// actions are off or the browser is not logged in.
    /// What stands where a payload or a job error is hidden from this request.
    pub(super) fn hidden(&self) -> &'static str {
        if self.login {
            "hidden: log in with the access token to see it"
        } else {
            "hidden: this dashboard has no access token (see public_read)"
        }
    }

    pub(super) fn button(
        &self,
        queue: &str,
        action: &str,
        id: Option<&str>,
        label: &str,
    ) -> Markup {
        html! {
            @if self.actions && self.logged_in {
                form method="post" action={ (self.queue_url(queue)) "/action" } class="inline" {
                    input type="hidden" name="action" value=(action);
                    @if let Some(id) = id {
                        input type="hidden" name="id" value=(id);
                    }
                    button type="submit" class=(action) { (label) }
                }
            }
        }
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;max-width:70em}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
.inline{display:inline}.msg{background:#eef6e8;padding:.5em;border:1px solid #9c6}\
.warn{background:#fbeaea;padding:.5em;border:1px solid #c66}\
.chart{width:100%;max-width:40em;height:auto;background:#fafafa;border:1px solid #ddd}\
.chart text{font-size:10px;fill:#555}.axis{stroke:#999}.bar{fill:#4a7fb5}.part{fill:#9cc3e6}\
.span{stroke:#4a7fb5;stroke-width:1.5;stroke-dasharray:4 3}\
polyline{fill:none;stroke-width:1.5}polyline.p50{stroke:#4a7fb5}polyline.p99{stroke:#c0504d}\
polyline.rate{stroke:#4a7fb5}text.p50{fill:#4a7fb5}text.p99{fill:#c0504d}text.rate{fill:#4a7fb5}\
pre{background:#f4f4f4;padding:.6em;overflow:auto;max-height:30em}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(24em,1fr));gap:1em}";

/// A whole page around `body`: the link home, the message of the last action, and at the
/// foot the login form (or the logout button) when a token is set, and "Read-only."
/// when actions are off.
pub(super) fn page(ctx: &Ctx<'_>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width";
                title { (title) " · tickless" }
                // Our own constant, and a style element's text is not HTML: an escape
                // would reach the CSS as it is.
                style { (PreEscaped(STYLE)) }
            }
            body {
                p { a href=(ctx.home()) { "tickless queues" } }
                @if let Some(message) = ctx.message {
                    p class="msg" id="msg" { (message) }
                }
                (body)
                @if ctx.login || !ctx.actions {
                    hr;
                }
                @if ctx.logged_in {
                    form method="post" action={ (ctx.base) "/logout" } id="logout" {
                        button type="submit" { "Log out" }
                    }
                } @else if ctx.login {
                    form method="post" action={ (ctx.base) "/login" } id="login" {
                        label {
                            "Access token "
                            input type="password" name="token" id="token";
                        }
                        " "
                        button type="submit" { "Log in" }
                    }
                }
                @if !ctx.actions {
                    p { small { "Read-only." } }
                }
            }
        }
    }
}

/// `t` from `now` in words: "in 5.0 min", "300 ms ago".
pub(super) fn ago(now: SystemTime, t: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", human(ahead)),
        Err(past) => format!("{} ago", human(past.duration())),
    }
}

/// A duration in the unit that reads best.
pub(super) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..120_000 => format!("{:.1} s", d.as_secs_f64()),
        120_000..7_200_000 => format!("{:.1} min", d.as_secs_f64() / 60.0),
        7_200_000..172_800_000 => format!("{:.1} h", d.as_secs_f64() / 3600.0),
        _ => format!("{:.1} days", d.as_secs_f64() / 86400.0),
    }
}

pub(super) fn unix_ms(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The leader and its fencing token, or the last token when none leads.
pub(super) fn leader_cell(stats: &Stats) -> Markup {
    html! {
        @match &stats.leader {
            Some(leader) => {
                (leader) " " small { "(token " span class="token" { (stats.token) } ")" }
            }
            None => { "none " small { "(last token " (stats.token) ")" } }
        }
    }
}

/// The home page: one row per queue (a queue that could not be read shows its error),
/// what the latest look for queues (`looks`: the dashboard shows every queue on its
/// server) could not do, and the API's tokens' section when there is one.
pub(super) fn overview(
    ctx: &Ctx<'_>,
    rows: &[(&Queue, Result<Stats, String>)],
    looks: bool,
    problems: &[String],
    api_tokens: Option<Markup>,
) -> Markup {
    let body = html! {
        h1 { "Queues" }
        @for problem in problems {
            p class="warn" { (problem) }
        }
        @if rows.is_empty() && looks {
            p id="no-queues" { "No queue on this server yet: a queue is listed once a job is scheduled on it." }
        } @else if rows.is_empty() {
            p id="no-queues" { "No queue." }
        }
        table id="queues" {
            tr {
                th { "queue" } th { "scheduled" } th { "ready" } th { "in flight" }
                th { "dead" } th { "leader" }
            }
            @for (queue, stats) in rows {
                tr data-queue=(queue.name()) {
                    td { a href=(ctx.queue_url(queue.name())) { (queue.name()) } }
                    @match stats {
                        Ok(s) => {
                            td class="n" { (s.scheduled) }
                            td class="n" { (s.ready) }
                            td class="n" { (s.in_flight) }
                            td class="n" { (s.dead) }
                            td { (leader_cell(s)) }
                        }
                        Err(err) => { td colspan="5" { (err) } }
                    }
                }
            }
        }
        @if let Some(section) = api_tokens { (section) }
    };
    page(ctx, "queues", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVIL: &str = "<img src=x id=evil onerror=alert(1)>&\"'";

    #[test]
    fn encodes_everything_but_unreserved() {
        assert_eq!(
            enc("order:42/a b?&#é").to_string(),
            "order%3A42%2Fa%20b%3F%26%23%C3%A9"
        );
        assert_eq!(enc("AZaz09-._~").to_string(), "AZaz09-._~");
    }

    fn logged_in(base: &str) -> Ctx<'_> {
        Ctx {
            base,
            actions: true,
            logged_in: true,
            login: true,
            readable: true,
            message: Some(EVIL),
        }
    }

    #[test]
    fn pages_escape_markup_and_quotes() {
        let ctx = logged_in("/o\"ps");
        let body = ctx.button("q", "retry", Some(EVIL), EVIL);
        let html = page(&ctx, EVIL, body).into_string();
        assert!(!html.contains("<img"), "{html}");
        let text = "&lt;img src=x id=evil onerror=alert(1)&gt;&amp;&quot;'";
        assert!(
            html.contains(&format!("<title>{text} · tickless</title>")),
            "{html}"
        );
        assert!(html.contains(&format!("id=\"msg\">{text}</p>")), "{html}");
        assert!(
            html.contains(&format!("name=\"id\" value=\"{text}\"")),
            "{html}"
        );
        assert!(
            html.contains(&format!("class=\"retry\">{text}</button>")),
            "{html}"
        );
        assert!(html.contains("href=\"/o&quot;ps\""), "{html}");
        assert!(html.contains(&format!("<style>{STYLE}</style>")), "{html}");
    }

    #[test]
    fn buttons_need_actions_and_a_login() {
        let mut ctx = logged_in("");
        assert!(!ctx.button("q", "retry-all", None, "Retry all").0.is_empty());
        let html = page(&ctx, "t", html! {}).into_string();
        assert!(
            html.contains("id=\"logout\"") && !html.contains("login"),
            "{html}"
        );
        ctx.logged_in = false;
        assert!(ctx.button("q", "retry-all", None, "Retry all").0.is_empty());
        let html = page(&ctx, "t", html! {}).into_string();
        assert!(html.contains("id=\"login\""), "{html}");
        ctx.actions = false;
        let html = page(&ctx, "t", html! {}).into_string();
        assert!(
            html.contains("Read-only.") && html.contains("id=\"login\""),
            "{html}"
        );
        ctx.login = false;
        let html = page(&ctx, "t", html! {}).into_string();
        assert!(
            html.contains("Read-only.") && !html.contains("login"),
            "{html}"
        );
    }

    #[test]
    fn links_percent_encode_names_and_ids() {
        let ctx = logged_in("");
        assert_eq!(
            ctx.job_url("a b", "x&y=<z>"),
            "/queue/a%20b/job?id=x%26y%3D%3Cz%3E"
        );
    }
}
