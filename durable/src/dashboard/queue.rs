//! A queue's page, one small function per section: counts and leader, the wheel by
//! level, what comes due over the next hour, day and week (due.rs), lag and throughput
//! over the last hour, recurring schedules, and the ready, in-flight and dead jobs.

use super::due::{coming_due, due_ranges};
use super::history::History;
use super::html::{ago, human, leader_cell, page, unix_ms, Ctx};
use super::svg::{self, amount};
use crate::{
    CatchUp, ColdWindow, DueBucket, JobInfo, Queue, Recurrence, ScheduleInfo, Stats, StreamInfo,
};
use maud::{html, Markup};
use std::time::{Duration, SystemTime};

/// What a queue's page shows, read from Redis before the page is drawn.
pub(super) struct QueueView<'a> {
    pub(super) queue: &'a Queue,
    pub(super) stats: Stats,
    pub(super) buckets: Vec<DueBucket>,
    pub(super) truncated: bool,
    pub(super) ready: Vec<String>,
    pub(super) in_flight: Vec<(String, SystemTime)>,
    pub(super) dead: Vec<JobInfo>,
    /// Where the page of dead jobs starts (`?dead_from=`), and how many a page holds.
    pub(super) dead_from: usize,
    pub(super) dead_page: usize,
    /// The recurring schedules, or the error that kept them from being read (a garbled
    /// record, which `Queue::schedules` names).
    pub(super) schedules: Result<Vec<ScheduleInfo>, String>,
    /// Script calls of leaders and workers that raised, and the latest one's message.
    pub(super) script_errors: (u64, Option<String>),
    /// Rounds a leader of the queue failed in a row (0: none failing), and why.
    pub(super) leader_failing: (u64, Option<String>),
    /// The cold tier's windows (empty for a queue without one).
    pub(super) cold: Vec<ColdWindow>,
    /// The stream outlet (`None`: due jobs go to the ready list), or why it could not be
    /// read.
    pub(super) stream: Result<Option<StreamInfo>, String>,
    /// The webhook dispatcher's target and recent failures, if one posts its jobs.
    pub(super) webhook: Option<super::WebhookView>,
}

pub(super) fn queue_page(ctx: &Ctx<'_>, view: &QueueView<'_>, history: &History) -> Markup {
    let (s, name) = (&view.stats, view.queue.name());
    let body = html! {
        h1 { "Queue " span id="queue-name" { (name) } }
        p { small { (view.queue.url()) } }
        (counts(s))
        (delivery(&view.stream))
        (super::hooks::section(SystemTime::now(), view.webhook.as_ref()))
        (no_leader(s, &view.buckets))
        (leader_failing(&view.leader_failing))
        (script_errors(&view.script_errors))
        @if s.manual_clock {
            p { "Manual clock at " (unix_ms(s.now)) " ms." }
        }
        (wheel(&view.buckets, view.truncated))
        (coming_due(&due_ranges(&view.buckets, &view.cold), s.now))
        (super::cold::cold(s.now, &view.cold))
        (over_time(history))
        (schedules(ctx, name, s.now, &view.schedules))
        (find_job(ctx, name))
        (ready(ctx, name, &view.ready))
        (in_flight(ctx, name, s.now, &view.in_flight))
        (dead(ctx, name, view))
    };
    page(ctx, name, body)
}

/// The jobs in each state, the leader and its lease, promotion lag.
fn counts(s: &Stats) -> Markup {
    let lag =
        |d: Option<Duration>| d.map_or("n/a".to_string(), |d| format!("{} ms", d.as_millis()));
    html! {
        table id="counts" {
            tr { th { "scheduled" } td class="n" id="count-scheduled" { (s.scheduled) } }
            tr { th { "ready" } td class="n" id="count-ready" { (s.ready) } }
            tr { th { "in flight" } td class="n" id="count-in-flight" { (s.in_flight) } }
            tr { th { "dead" } td class="n" id="count-dead" { (s.dead) } }
            @if s.cold > 0 {
                tr { th { "cold" } td class="n" id="count-cold" { (s.cold) } }
            }
            tr { th { "leader" } td id="leader" { (leader_cell(s)) } }
            @if let Some(ends) = s.lease_ends {
                tr { th { "lease ends" } td { (ago(s.now, ends)) } }
            }
            tr {
                th { "promotion lag" }
                td { "p50 " (lag(s.promotion_lag_p50)) " · p99 " (lag(s.promotion_lag_p99)) }
            }
            tr { th { "promoted by the leader" } td class="n" { (s.promoted) } }
        }
    }
}

/// A warning when jobs are due and no leader holds the lease: only a leader moves due
/// jobs to the ready list, so none of them is delivered until one runs.
/// How due jobs leave the queue: its ready list (workers, the HTTP API's and webhook
/// dispatchers alike), or its stream outlet with the stream's length and groups.
fn delivery(stream: &Result<Option<StreamInfo>, String>) -> Markup {
    html! {
        @match stream {
            Ok(None) => p id="delivery" { "Due jobs go to the ready list, for workers." },
            Ok(Some(info)) => {
                p id="delivery" {
                    "Due jobs go to the stream " code { (info.key) } ": "
                    (info.length) " entries."
                }
                @if !info.groups.is_empty() {
                    table id="stream-groups" {
                        tr { th { "consumer group" } th { "pending" } th { "consumers" } }
                        @for g in &info.groups {
                            tr { td { (g.name) } td { (g.pending) } td { (g.consumers) } }
                        }
                    }
                }
            }
            Err(err) => p id="delivery" class="warn" { "The stream outlet could not be read: " (err) },
        }
    }
}

fn no_leader(s: &Stats, buckets: &[DueBucket]) -> Markup {
    let due: u64 = buckets
        .iter()
        .filter(|b| b.start <= s.now)
        .map(|b| b.jobs)
        .sum();
    html! {
        @if s.leader.is_none() && due > 0 {
            p class="warn" id="no-leader" {
                "No leader: " (amount(due as f64, "job is", "jobs are")) " due, and none is "
                "delivered until a leader runs (" code { "Queue::leader" } ", in any process "
                "connected to this queue)."
            }
        }
    }
}

/// A warning when script calls failed, with the latest one's message; else nothing.
fn script_errors((failed, last): &(u64, Option<String>)) -> Markup {
    html! {
        @if *failed > 0 {
            p class="warn" id="script-errors" {
                (failed) " script calls of leaders and workers failed (each changed nothing). "
                "The latest: "
                span id="last-script-error" { (last.as_deref().unwrap_or("unknown")) }
            }
        }
    }
}

/// A warning when a leader says its rounds fail, with why; else nothing.
fn leader_failing((rounds, why): &(u64, Option<String>)) -> Markup {
    html! {
        @if *rounds > 0 {
            p class="warn" id="leader-failing" {
                "The leader is not working: " (rounds) " rounds failed in a row. Why: "
                span id="leader-error" { (why.as_deref().unwrap_or("unknown")) }
            }
        }
    }
}

/// Jobs per level of the wheel.
fn wheel(buckets: &[DueBucket], truncated: bool) -> Markup {
    html! {
        h2 { "The wheel" }
        table id="wheel" {
            tr { th { "where" } th { "jobs" } }
            @for (level, jobs) in per_level(buckets) {
                @let key = level.map_or("staged".to_string(), |k| k.to_string());
                tr { td { (level_name(level)) } td class="n" id={ "level-" (key) } { (jobs) } }
            }
        }
        @if truncated {
            p { "(More staged jobs than read: the latest are not counted.)" }
        }
    }
}

/// Promotion lag and throughput over the samples' span: from the oldest kept (an hour
/// at most) to now; a minute at least.
fn over_time(history: &History) -> Markup {
    let span = history
        .samples()
        .next()
        .map_or(Duration::ZERO, |first| first.at.elapsed())
        .clamp(Duration::from_secs(60), Duration::from_secs(3600));
    let (left, middle) = (format!("-{}", human(span)), format!("-{}", human(span / 2)));
    let labels = [left.as_str(), middle.as_str(), "now"];
    let x = |age: Duration| 1.0 - age.as_secs_f64() / span.as_secs_f64();
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
    let lag = [("p50", "p50", p50), ("p99", "p99", p99)];
    let rate = [("per second", "rate", rate)];
    html! {
        h2 { "Over the last " (human(span)) }
        div class="charts" {
            figure {
                figcaption { "promotion lag" }
                (svg::lines("lag", "promotion lag", &lag, "ms", &labels))
            }
            figure {
                figcaption { "throughput (promotions per second)" }
                (svg::lines("throughput", "promotions per second", &rate, "/s", &labels))
            }
        }
    }
}

/// The recurring schedules: what each runs, its next occurrence, and a button to remove
/// it. Nothing when there are none.
fn schedules(
    ctx: &Ctx<'_>,
    queue: &str,
    now: SystemTime,
    schedules: &Result<Vec<ScheduleInfo>, String>,
) -> Markup {
    match schedules {
        Ok(schedules) if schedules.is_empty() => html! {},
        Ok(schedules) => html! {
            h2 { "Recurring schedules (" (schedules.len()) ")" }
            table id="schedules" {
                tr {
                    th { "schedule" } th { "when" } th { "missed runs" } th { "next" }
                    th { "last" } th {}
                }
                @for info in schedules {
                    (schedule_row(ctx, queue, now, info))
                }
            }
        },
        Err(err) => html! {
            h2 { "Recurring schedules" }
            p id="schedules-error" { (err) }
        },
    }
}

fn schedule_row(ctx: &Ctx<'_>, queue: &str, now: SystemTime, info: &ScheduleInfo) -> Markup {
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
    html! {
        tr data-schedule=(info.id) {
            td { (info.id) }
            td { (when) }
            td { (missed) }
            td { (next) }
            td { (ago(now, info.last)) }
            td { (ctx.button(queue, "unschedule", Some(&info.id), "Remove")) }
        }
    }
}

fn find_job(ctx: &Ctx<'_>, queue: &str) -> Markup {
    html! {
        h2 { "Find a job" }
        form method="get" action={ (ctx.queue_url(queue)) "/job" } {
            input name="id" placeholder="job id";
            " "
            button type="submit" { "Show" }
        }
    }
}

/// A link to a job's page, the id as its text.
fn job_link(ctx: &Ctx<'_>, queue: &str, id: &str) -> Markup {
    html! {
        a href=(ctx.job_url(queue, id)) class="job" { (id) }
    }
}

fn ready(ctx: &Ctx<'_>, queue: &str, ids: &[String]) -> Markup {
    html! {
        h2 { "Ready (first " (ids.len()) ")" }
        ul id="ready" {
            @for id in ids {
                li { (job_link(ctx, queue, id)) }
            }
        }
    }
}

fn in_flight(ctx: &Ctx<'_>, queue: &str, now: SystemTime, jobs: &[(String, SystemTime)]) -> Markup {
    html! {
        h2 { "In flight (first " (jobs.len()) ")" }
        ul id="in-flight" {
            @for (id, lease_ends) in jobs {
                li { (job_link(ctx, queue, id)) " lease ends " (ago(now, *lease_ends)) }
            }
        }
    }
}

/// A page of the dead jobs, oldest first, each with its last error (if this request may
/// read it) and buttons to retry or delete it, and links to the next page and back to the first.
fn dead(ctx: &Ctx<'_>, queue: &str, view: &QueueView<'_>) -> Markup {
    let (jobs, from) = (&view.dead, view.dead_from);
    let url = ctx.queue_url(queue);
    html! {
        @if jobs.is_empty() {
            h2 { "Dead (none from " (from + 1) ")" }
        } @else {
            h2 { "Dead (" (from + 1) " to " (from + jobs.len()) ", oldest first)" }
        }
        p {
            @if from > 0 {
                a id="dead-first" href=(url) { "first page" } " "
            }
            @if jobs.len() == view.dead_page {
                a id="dead-next" href=(format!("{url}?dead_from={}", from + jobs.len())) {
                    "next page"
                }
            }
        }
        @if !jobs.is_empty() {
            (ctx.button(queue, "retry-all", None, "Retry all dead"))
        }
        table id="dead" {
            tr { th { "job" } th { "attempts" } th { "last error" } th {} }
            @for info in jobs {
                tr {
                    td { (job_link(ctx, queue, &info.id)) }
                    td class="n" { (info.attempts) }
                    @if ctx.readable {
                        td { (info.last_error.as_deref().unwrap_or("")) }
                    } @else {
                        td class="hidden" { (ctx.hidden()) }
                    }
                    td {
                        (ctx.button(queue, "retry", Some(&info.id), "Retry"))
                        (ctx.button(queue, "cancel", Some(&info.id), "Delete"))
                    }
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const EVIL: &str = "<img src=x id=evil onerror=alert(1)>&\"'";

    fn ctx() -> Ctx<'static> {
        Ctx {
            base: "/ops",
            actions: true,
            logged_in: true,
            login: true,
            readable: true,
            message: None,
        }
    }

    #[test]
    fn job_ids_are_text_and_percent_encoded_links() {
        let ctx = ctx();
        let ids = [EVIL.to_string()];
        let html = ready(&ctx, "q", &ids).into_string();
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains(
                "<a href=\"/ops/queue/q/job?id=%3Cimg%20src%3Dx%20id%3Devil%20onerror\
                 %3Dalert%281%29%3E%26%22%27\" class=\"job\">&lt;img src=x id=evil \
                 onerror=alert(1)&gt;&amp;&quot;'</a>"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_failing_leader_shows_only_when_it_fails() {
        assert!(leader_failing(&(0, Some(EVIL.to_string()))).0.is_empty());
        let html = leader_failing(&(3, Some(EVIL.to_string()))).into_string();
        assert!(html.contains("3 rounds failed"), "{html}");
        assert!(!html.contains(EVIL), "{html}");
    }

    #[test]
    fn script_errors_show_only_when_some_failed() {
        assert!(script_errors(&(0, Some(EVIL.to_string()))).0.is_empty());
        let html = script_errors(&(2, Some(EVIL.to_string()))).into_string();
        assert!(html.contains(">2 script calls of leaders"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        let html = script_errors(&(1, None)).into_string();
        assert!(
            html.contains("<span id=\"last-script-error\">unknown</span>"),
            "{html}"
        );
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
    fn jobs_per_level_add_up_staged_first() {
        let buckets = [
            bucket(Some(2), 0, 1, 4),
            bucket(None, 0, 1, 1),
            bucket(Some(2), 5, 1, 6),
            bucket(Some(0), 0, 1, 2),
        ];
        assert_eq!(
            per_level(&buckets),
            [(None, 1), (Some(0), 2), (Some(2), 10)]
        );
    }

    #[test]
    fn no_leader_warns_only_when_jobs_are_due() {
        let now = UNIX_EPOCH + Duration::from_secs(10);
        let mut stats = crate::read::stats::build("m", 3, 0, 0, 0, &[], (10, 0)).unwrap();
        assert_eq!(stats.now, now);
        let later = [bucket(Some(0), 11_000, 1024, 2)];
        assert!(no_leader(&stats, &later).0.is_empty(), "none due yet");
        let due = [
            bucket(None, 9_000, 1024, 1),
            bucket(Some(0), 11_000, 1024, 2),
        ];
        let html = no_leader(&stats, &due).into_string();
        assert!(html.contains("No leader: 1 job is due"), "{html}");
        stats.leader = Some("host-1".into());
        assert!(no_leader(&stats, &due).0.is_empty(), "a leader runs");
    }
}
