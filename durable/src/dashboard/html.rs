//! The pages: HTML written by hand, every piece of user data (queue names, job ids,
//! errors, payloads) through [`esc`].

use super::history::History;
use super::svg;
use crate::{CatchUp, DueBucket, JobInfo, Queue, Recurrence, ScheduleInfo, Stats};
use std::fmt::Write;
use std::time::{Duration, SystemTime};

/// `text` with `& < > " '` escaped: safe in element content and quoted attributes.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a URL path segment or query value (all but unreserved).
pub(super) fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Where the dashboard is mounted ("" at the root), and whether actions are allowed and
/// this browser is logged in.
pub(super) struct Ctx<'a> {
    pub(super) base: &'a str,
    pub(super) actions: bool,
    pub(super) logged_in: bool,
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
    pub(super) fn button(
        &self,
        queue: &str,
        action: &str,
        id: Option<&str>,
        label: &str,
    ) -> String {
        if !(self.actions && self.logged_in) {
            return String::new();
        }
        let id_field = id.map_or(String::new(), |id| {
            format!("<input type=\"hidden\" name=\"id\" value=\"{}\">", esc(id))
        });
        format!(
            "<form method=\"post\" action=\"{}/action\" class=\"inline\">\
             <input type=\"hidden\" name=\"action\" value=\"{action}\">{id_field}\
             <button type=\"submit\" class=\"{action}\">{}</button></form>",
            esc(&self.queue_url(queue)),
            esc(label)
        )
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;max-width:70em}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
.inline{display:inline}.msg{background:#eef6e8;padding:.5em;border:1px solid #9c6}\
.warn{background:#fbeaea;padding:.5em;border:1px solid #c66}\
.chart{width:100%;max-width:40em;height:auto;background:#fafafa;border:1px solid #ddd}\
.chart text{font-size:10px;fill:#555}.axis{stroke:#999}.bar{fill:#4a7fb5}\
polyline{fill:none;stroke-width:1.5}polyline.p50{stroke:#4a7fb5}polyline.p99{stroke:#c0504d}\
polyline.rate{stroke:#4a7fb5}text.p50{fill:#4a7fb5}text.p99{fill:#c0504d}text.rate{fill:#4a7fb5}\
pre{background:#f4f4f4;padding:.6em;overflow:auto;max-height:30em}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(24em,1fr));gap:1em}";

/// A whole page around `body`.
pub(super) fn page(ctx: &Ctx<'_>, title: &str, body: &str) -> String {
    let mut out = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{} · tickless</title><style>{STYLE}</style></head><body>\
         <p><a href=\"{}\">tickless queues</a></p>",
        esc(title),
        esc(&ctx.home())
    );
    if let Some(message) = ctx.message {
        let _ = write!(out, "<p class=\"msg\" id=\"msg\">{}</p>", esc(message));
    }
    out.push_str(body);
    if ctx.actions && !ctx.logged_in {
        let _ = write!(
            out,
            "<hr><form method=\"post\" action=\"{}/login\" id=\"login\">\
             <label>Access token for actions <input type=\"password\" name=\"token\" id=\"token\">\
             </label> <button type=\"submit\">Log in</button></form>",
            esc(ctx.base)
        );
    } else if !ctx.actions {
        out.push_str("<hr><p><small>Read-only.</small></p>");
    }
    out.push_str("</body></html>");
    out
}

pub(super) fn ago(now: SystemTime, t: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", human(ahead)),
        Err(past) => format!("{} ago", human(past.duration())),
    }
}

fn human(d: Duration) -> String {
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

fn leader_cell(stats: &Stats) -> String {
    match &stats.leader {
        Some(leader) => format!(
            "{} <small>(token <span class=\"token\">{}</span>)</small>",
            esc(leader),
            stats.token
        ),
        None => format!("none <small>(last token {})</small>", stats.token),
    }
}

/// The home page: one row per queue (a queue that could not be read shows its error).
pub(super) fn overview(ctx: &Ctx<'_>, rows: &[(&Queue, Result<Stats, String>)]) -> String {
    let mut body = String::from(
        "<h1>Queues</h1><table id=\"queues\"><tr><th>queue</th><th>scheduled</th>\
         <th>ready</th><th>in flight</th><th>dead</th><th>leader</th></tr>",
    );
    for (queue, stats) in rows {
        let name = queue.name();
        let _ = write!(
            body,
            "<tr data-queue=\"{}\"><td><a href=\"{}\">{}</a></td>",
            esc(name),
            esc(&ctx.queue_url(name)),
            esc(name)
        );
        match stats {
            Ok(s) => {
                let _ = write!(
                    body,
                    "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                     <td class=\"n\">{}</td><td>{}</td></tr>",
                    s.scheduled,
                    s.ready,
                    s.in_flight,
                    s.dead,
                    leader_cell(s)
                );
            }
            Err(err) => {
                let _ = write!(body, "<td colspan=\"5\">{}</td></tr>", esc(err));
            }
        }
    }
    body.push_str("</table>");
    page(ctx, "queues", &body)
}

/// How many jobs come due in each of `bins` equal parts of `now .. now + window`. A
/// bucket's jobs are spread evenly over its width (the wheel tells no more); jobs
/// already due count in the first part.
pub(super) fn due_bins(
    buckets: &[DueBucket],
    now: SystemTime,
    window: Duration,
    bins: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; bins];
    let (now, window) = (unix_ms(now) as f64, window.as_millis() as f64);
    let bin = window / bins as f64;
    for b in buckets {
        let start = unix_ms(b.start) as f64;
        let width = (b.width.as_millis() as f64).max(1.0);
        let (lo, hi) = (start.max(now), start + width);
        if hi <= now {
            out[0] += b.jobs as f64; // overdue: the leader's next promotions
            continue;
        }
        let per_ms = b.jobs as f64 / width;
        let overdue = b.jobs as f64 * (lo - start) / width;
        out[0] += overdue;
        let mut t = lo;
        while t < hi && t < now + window {
            let i = (((t - now) / bin) as usize).min(bins - 1);
            let end = (now + bin * (i + 1) as f64).min(hi);
            out[i] += per_ms * (end - t);
            t = end;
        }
    }
    out
}

pub(super) struct QueueView<'a> {
    pub(super) queue: &'a Queue,
    pub(super) stats: Stats,
    pub(super) buckets: Vec<DueBucket>,
    pub(super) truncated: bool,
    pub(super) ready: Vec<String>,
    pub(super) in_flight: Vec<(String, SystemTime)>,
    pub(super) dead: Vec<JobInfo>,
    /// The recurring schedules, or the error that kept them from being read (a garbled
    /// record, which `Queue::schedules` names).
    pub(super) schedules: Result<Vec<ScheduleInfo>, String>,
    /// Script calls of leaders and workers that raised, and the latest one's message.
    pub(super) script_errors: (u64, Option<String>),
}

fn level_name(level: Option<u8>) -> String {
    match level {
        None => "staged (due within about 1 s)".to_string(),
        Some(k) => format!("level {k} ({} buckets)", human(DueBucket::level_width(k))),
    }
}

/// Jobs per wheel level (`None`: the staged window), from the buckets.
pub(super) fn per_level(buckets: &[DueBucket]) -> Vec<(Option<u8>, u64)> {
    let mut levels: Vec<(Option<u8>, u64)> = Vec::new();
    for b in buckets {
        match levels.iter_mut().find(|(level, _)| *level == b.level) {
            Some((_, jobs)) => *jobs += b.jobs,
            None => levels.push((b.level, b.jobs)),
        }
    }
    levels.sort();
    levels
}

pub(super) fn queue_page(ctx: &Ctx<'_>, view: &QueueView<'_>, history: &History) -> String {
    let (s, name) = (&view.stats, view.queue.name());
    let mut body = format!(
        "<h1>Queue <span id=\"queue-name\">{}</span></h1><p><small>{}</small></p>\
         <table id=\"counts\"><tr><th>scheduled</th><td class=\"n\" id=\"count-scheduled\">{}</td></tr>\
         <tr><th>ready</th><td class=\"n\" id=\"count-ready\">{}</td></tr>\
         <tr><th>in flight</th><td class=\"n\" id=\"count-in-flight\">{}</td></tr>\
         <tr><th>dead</th><td class=\"n\" id=\"count-dead\">{}</td></tr>\
         <tr><th>leader</th><td id=\"leader\">{}</td></tr>",
        esc(name),
        esc(view.queue.url()),
        s.scheduled,
        s.ready,
        s.in_flight,
        s.dead,
        leader_cell(s),
    );
    if let Some(ends) = s.lease_ends {
        let _ = write!(
            body,
            "<tr><th>lease ends</th><td>{}</td></tr>",
            ago(s.now, ends)
        );
    }
    let lag =
        |d: Option<Duration>| d.map_or("n/a".to_string(), |d| format!("{} ms", d.as_millis()));
    let _ = write!(
        body,
        "<tr><th>promotion lag</th><td>p50 {} · p99 {}</td></tr>\
         <tr><th>promoted by the leader</th><td class=\"n\">{}</td></tr></table>",
        lag(s.promotion_lag_p50),
        lag(s.promotion_lag_p99),
        s.promoted
    );
    if let (n @ 1.., last) = &view.script_errors {
        let _ = write!(
            body,
            "<p class=\"warn\" id=\"script-errors\">{n} script calls of leaders and workers \
             failed (each changed nothing). The latest: <span id=\"last-script-error\">{}</span></p>",
            esc(last.as_deref().unwrap_or("unknown"))
        );
    }
    if s.manual_clock {
        let _ = write!(body, "<p>Manual clock at {} ms.</p>", unix_ms(s.now));
    }

    body.push_str("<h2>The wheel</h2><table id=\"wheel\"><tr><th>where</th><th>jobs</th></tr>");
    for (level, jobs) in per_level(&view.buckets) {
        let key = level.map_or("staged".to_string(), |k| k.to_string());
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"n\" id=\"level-{key}\">{jobs}</td></tr>",
            level_name(level)
        );
    }
    body.push_str("</table>");
    if view.truncated {
        body.push_str("<p>(More staged jobs than read: the latest are not counted.)</p>");
    }

    body.push_str("<h2>Coming due</h2><div class=\"charts\">");
    let windows: [(&str, &str, Duration, usize, [&str; 3]); 3] = [
        (
            "due-hour",
            "next hour, per minute",
            Duration::from_secs(3600),
            60,
            ["now", "+30 min", "+1 h"],
        ),
        (
            "due-day",
            "next day, per 30 min",
            Duration::from_secs(86400),
            48,
            ["now", "+12 h", "+24 h"],
        ),
        (
            "due-week",
            "next week, per 4 h",
            Duration::from_secs(7 * 86400),
            42,
            ["now", "+3.5 days", "+7 days"],
        ),
    ];
    for (id, title, window, bins, labels) in windows {
        let counts = due_bins(&view.buckets, s.now, window, bins);
        let total: f64 = counts.iter().sum();
        let _ = write!(
            body,
            "<figure><figcaption>{title}: {} jobs</figcaption>{}</figure>",
            svg::short(total.round()),
            svg::bars(id, title, &counts, "jobs", &labels)
        );
    }
    body.push_str("</div>");

    // The samples' span: from the oldest kept (an hour at most) to now; a minute at least.
    let span = history
        .samples()
        .next()
        .map_or(Duration::ZERO, |first| first.at.elapsed())
        .clamp(Duration::from_secs(60), Duration::from_secs(3600));
    let _ = write!(
        body,
        "<h2>Over the last {}</h2><div class=\"charts\">",
        human(span)
    );
    let (left, middle) = (format!("-{}", human(span)), format!("-{}", human(span / 2)));
    let span = span.as_secs_f64();
    let x = |age: Duration| 1.0 - age.as_secs_f64() / span;
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for sample in history.samples() {
        let age = sample.at.elapsed();
        if let Some(ms) = sample.lag_p50_ms {
            p50.push((x(age), ms as f64));
        }
        if let Some(ms) = sample.lag_p99_ms {
            p99.push((x(age), ms as f64));
        }
    }
    let rate: Vec<(f64, f64)> = history
        .throughput()
        .into_iter()
        .map(|(age, r)| (x(age), r))
        .collect();
    let labels = [left.as_str(), middle.as_str(), "now"];
    let _ = write!(
        body,
        "<figure><figcaption>promotion lag</figcaption>{}</figure>\
         <figure><figcaption>throughput (promotions per second)</figcaption>{}</figure></div>",
        svg::lines(
            "lag",
            "promotion lag",
            &[("p50", "p50", p50), ("p99", "p99", p99)],
            "ms",
            &labels
        ),
        svg::lines(
            "throughput",
            "promotions per second",
            &[("per second", "rate", rate)],
            "/s",
            &labels
        ),
    );

    schedules_section(ctx, view, &mut body);

    let _ = write!(
        body,
        "<h2>Find a job</h2><form method=\"get\" action=\"{}/job\">\
         <input name=\"id\" placeholder=\"job id\"> <button type=\"submit\">Show</button></form>",
        esc(&ctx.queue_url(name))
    );

    let link = |id: &str| {
        format!(
            "<a href=\"{}\" class=\"job\">{}</a>",
            esc(&ctx.job_url(name, id)),
            esc(id)
        )
    };
    let _ = write!(
        body,
        "<h2>Ready (first {})</h2><ul id=\"ready\">",
        view.ready.len()
    );
    for id in &view.ready {
        let _ = write!(body, "<li>{}</li>", link(id));
    }
    let _ = write!(
        body,
        "</ul><h2>In flight (first {})</h2><ul id=\"in-flight\">",
        view.in_flight.len()
    );
    for (id, ends) in &view.in_flight {
        let _ = write!(
            body,
            "<li>{} lease ends {}</li>",
            link(id),
            ago(s.now, *ends)
        );
    }
    let _ = write!(body, "</ul><h2>Dead (first {})</h2>", view.dead.len());
    if !view.dead.is_empty() {
        body.push_str(&ctx.button(name, "retry-all", None, "Retry all dead"));
    }
    body.push_str(
        "<table id=\"dead\"><tr><th>job</th><th>attempts</th><th>last error</th><th></th></tr>",
    );
    for info in &view.dead {
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}{}</td></tr>",
            link(&info.id),
            info.attempts,
            esc(info.last_error.as_deref().unwrap_or("")),
            ctx.button(name, "retry", Some(&info.id), "Retry"),
            ctx.button(name, "cancel", Some(&info.id), "Delete"),
        );
    }
    body.push_str("</table>");
    page(ctx, name, &body)
}

/// The recurring schedules: what each runs, its next occurrence, and a button to remove it.
fn schedules_section(ctx: &Ctx<'_>, view: &QueueView<'_>, body: &mut String) {
    let (name, now) = (view.queue.name(), view.stats.now);
    let schedules = match &view.schedules {
        Ok(schedules) if schedules.is_empty() => return,
        Ok(schedules) => schedules,
        Err(err) => {
            let _ = write!(
                body,
                "<h2>Recurring schedules</h2><p id=\"schedules-error\">{}</p>",
                esc(err)
            );
            return;
        }
    };
    let _ = write!(
        body,
        "<h2>Recurring schedules ({})</h2><table id=\"schedules\"><tr><th>schedule</th>\
         <th>when</th><th>missed runs</th><th>next</th><th>last</th><th></th></tr>",
        schedules.len()
    );
    for info in schedules {
        let when = match &info.recurrence {
            Recurrence::Every(period) => format!("every {}", human(*period)),
            Recurrence::Cron { expression, zone } => format!("cron {expression} ({zone})"),
        };
        let missed = match info.catch_up {
            CatchUp::Burst => "each runs",
            CatchUp::Delay => "one runs, then a period from now",
            CatchUp::Skip => "the latest runs",
        };
        let next = info
            .next
            .map_or_else(|| "none known".to_string(), |t| ago(now, t));
        let _ = write!(
            body,
            "<tr data-schedule=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            esc(&info.id),
            esc(&info.id),
            esc(&when),
            missed,
            esc(&next),
            esc(&ago(now, info.last)),
            ctx.button(name, "unschedule", Some(&info.id), "Remove"),
        );
    }
    body.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn encodes_everything_but_unreserved() {
        assert_eq!(enc("order:42/a b?&#é"), "order%3A42%2Fa%20b%3F%26%23%C3%A9");
    }

    fn bucket(level: Option<u8>, start_ms: u64, width_ms: u64, jobs: u64) -> DueBucket {
        DueBucket {
            level,
            start: UNIX_EPOCH + Duration::from_millis(start_ms),
            width: Duration::from_millis(width_ms),
            jobs,
        }
    }

    #[test]
    fn due_bins_spread_buckets_over_their_width() {
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let buckets = [
            bucket(None, 999_000, 1024, 3),           // overdue
            bucket(Some(1), 1_000_000, 20_000, 10),   // spans bins 0 and 1 evenly
            bucket(Some(2), 1_030_000, 100_000, 100), // 10 s of it inside the window
        ];
        let bins = due_bins(&buckets, now, Duration::from_secs(40), 4);
        let want = [3.0 + 5.0, 5.0, 0.0, 10.0];
        for (got, want) in bins.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{bins:?}");
        }
    }

    #[test]
    fn due_bins_count_a_started_bucket_s_past_part_as_due() {
        let now = UNIX_EPOCH + Duration::from_secs(10);
        let bins = due_bins(
            &[bucket(Some(0), 9_500, 1_000, 10)],
            now,
            Duration::from_secs(4),
            4,
        );
        assert!((bins[0] - 10.0).abs() < 1e-9, "{bins:?}");
        assert_eq!(bins.iter().sum::<f64>(), 10.0);
    }
}
