//! `/metrics`: the queues in Prometheus text format (version 0.0.4).
//!
//! Every figure is read from Redis at scrape time, so any dashboard of a cluster of
//! processes reports the same numbers: one `stats` pipeline and one wheel read per
//! queue.

use crate::Queue;
use std::fmt::Write;
#[cfg(feature = "api")]
use std::time::Duration;

/// A label value with `\`, `"` and newlines escaped, as the format asks. (The API's and
/// the webhook dispatchers' figures use it too.)
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// How many bounds a [`Latency`] histogram has (its buckets are one more: the rest).
#[cfg(feature = "api")]
pub(crate) const LATENCY_BOUNDS: usize = 10;

/// A latency histogram that a process keeps of its own work (the API's requests, the
/// webhook dispatchers' posts), unlike the queues' figures, read from Redis.
#[cfg(feature = "api")]
#[derive(Default)]
pub(crate) struct Latency {
    /// Observations at or under each bound (not cumulative), then the rest.
    buckets: [u64; LATENCY_BOUNDS + 1],
    sum: Duration,
}

#[cfg(feature = "api")]
impl Latency {
    /// Counts one observation against `bounds` (seconds, ascending).
    pub(crate) fn observe(&mut self, bounds: &[f64; LATENCY_BOUNDS], took: Duration) {
        let seconds = took.as_secs_f64();
        let at = bounds
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(LATENCY_BOUNDS);
        self.buckets[at] += 1;
        self.sum += took;
    }

    /// Writes one series of histogram `name`: its `_bucket` lines (cumulative, then
    /// `+Inf`), `_sum` and `_count`, labelled `key="value"` (`value` escaped here).
    pub(crate) fn render(
        &self,
        out: &mut String,
        bounds: &[f64; LATENCY_BOUNDS],
        name: &str,
        key: &str,
        value: &str,
    ) {
        let value = label(value);
        let mut cumulative = 0;
        for (bound, n) in bounds.iter().zip(self.buckets) {
            cumulative += n;
            let _ = writeln!(
                out,
                "{name}_bucket{{{key}=\"{value}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.buckets[LATENCY_BOUNDS];
        let _ = writeln!(
            out,
            "{name}_bucket{{{key}=\"{value}\",le=\"+Inf\"}} {cumulative}\n\
             {name}_sum{{{key}=\"{value}\"}} {}\n\
             {name}_count{{{key}=\"{value}\"}} {cumulative}",
            self.sum.as_secs_f64()
        );
    }
}

/// Milliseconds as Prometheus's base unit, seconds: `5` → `0.005`, `1000` → `1`.
fn seconds(ms: u64) -> String {
    (ms as f64 / 1000.0).to_string()
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    lines: String,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind,
            help,
            lines: String::new(),
        }
    }

    fn add(&mut self, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.add_suffixed("", labels, value);
    }

    /// A line of the family's `name` + `suffix` (a histogram's `_bucket`, `_sum`).
    fn add_suffixed(
        &mut self,
        suffix: &str,
        labels: &[(&str, &str)],
        value: impl std::fmt::Display,
    ) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", label(v)))
            .collect();
        let _ = writeln!(
            self.lines,
            "{}{suffix}{{{}}} {value}",
            self.name,
            labels.join(",")
        );
    }

    fn write(&self, out: &mut String) {
        if !self.lines.is_empty() {
            let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
            let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
            out.push_str(&self.lines);
        }
    }
}

pub(super) async fn render(queues: &[Queue]) -> String {
    let mut jobs = Family::new("tickless_jobs", "gauge", "Jobs of a queue by state.");
    let mut wheel = Family::new(
        "tickless_wheel_jobs",
        "gauge",
        "Scheduled jobs by wheel level (staged: due within about a second).",
    );
    let mut up = Family::new(
        "tickless_leader_up",
        "gauge",
        "1 if the queue has a leader whose lease is live.",
    );
    let mut token = Family::new(
        "tickless_leader_token",
        "gauge",
        "The fencing token of the current or last leadership: grows by one per leader change.",
    );
    let mut lag = Family::new(
        "tickless_leader_promotion_lag_seconds",
        "summary",
        "Promotion lag (due time to the ready list) over the current leader's promotions \
         (kept by the leader's process, so it starts again with each leadership; the \
         histogram tickless_promotion_lag_seconds is every leader's, kept in Redis).",
    );
    let mut totals = Family::new(
        "tickless_events_total",
        "counter",
        "Running totals kept in Redis by the queue's scripts: scheduled, delivered, acked, \
         retried, died, quarantined (records a script could not read), leaderships \
         (leader changes), cold_moved and cold_loaded (jobs moved to the cold tier's store \
         and back), streamed (jobs appended to the queue's stream outlet), script_errors \
         (script calls of a leader or worker that raised and \
         changed nothing: garbage in a key, a missing permission).",
    );
    let mut hist = Family::new(
        "tickless_promotion_lag_seconds",
        "histogram",
        "Promotion lag (due time to the ready list) of every promotion, kept in Redis by the \
         leader's script in whole milliseconds.",
    );
    let mut failing = Family::new(
        "tickless_leader_failing_rounds",
        "gauge",
        "Rounds a leader (or candidate) of the queue has failed in a row, as it last said: 0 \
         while it works; above 0 it cannot do its work (a grant missing, garbage in a key), \
         and the dashboard's queue page says why.",
    );
    let mut recurring = Family::new(
        "tickless_recurring_schedules",
        "gauge",
        "Recurring schedules (every, cron) of a queue.",
    );
    let mut cold_jobs = Family::new(
        "tickless_cold_window_jobs",
        "gauge",
        "Jobs of a queue's cold tier (kept in its store, not in Redis) by window: the \
         window's start as Unix seconds; the leader loads a window its tier's lead before \
         that.",
    );
    let mut cold_bytes = Family::new(
        "tickless_cold_window_bytes",
        "gauge",
        "Bytes of a queue's cold tier in its store, by window (the segments' size).",
    );
    let mut cold_segments = Family::new(
        "tickless_cold_segments",
        "gauge",
        "Segments (objects in the store) of a queue's cold tier.",
    );
    let mut cold_next = Family::new(
        "tickless_cold_next_window_start_seconds",
        "gauge",
        "The start (Unix seconds) of a queue's earliest cold window: the next to load.",
    );
    let mut mode = Family::new(
        "tickless_delivery_mode",
        "gauge",
        "1 for how a queue's due jobs leave it: `workers` (its ready list, claimed by \
         workers, the HTTP API's and webhook dispatchers alike) or `stream` (its stream \
         outlet, label `stream` the key).",
    );
    let mut stream_len = Family::new(
        "tickless_stream_length",
        "gauge",
        "Entries in a queue's stream outlet (XLEN), read or not.",
    );
    let mut stream_pending = Family::new(
        "tickless_stream_pending",
        "gauge",
        "Entries of a queue's stream read by a consumer of the group and not acknowledged.",
    );
    let mut stream_consumers = Family::new(
        "tickless_stream_consumers",
        "gauge",
        "Consumers a consumer group of a queue's stream knows.",
    );
    let mut errors = Family::new(
        "tickless_scrape_errors",
        "gauge",
        "1 if the queue could not be read for this scrape.",
    );
    for queue in queues {
        let q = queue.name();
        let stats = match queue.stats().await {
            Ok(stats) => stats,
            Err(_) => {
                errors.add(&[("queue", q)], 1);
                continue;
            }
        };
        errors.add(&[("queue", q)], 0);
        for (state, n) in [
            ("scheduled", stats.scheduled),
            ("ready", stats.ready),
            ("in_flight", stats.in_flight),
            ("dead", stats.dead),
        ] {
            jobs.add(&[("queue", q), ("state", state)], n);
        }
        if let Ok(windows) = queue.cold_windows().await {
            let unix = |t: std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            };
            jobs.add(
                &[("queue", q), ("state", "cold")],
                windows.iter().map(|w| w.jobs).sum::<u64>(),
            );
            cold_segments.add(
                &[("queue", q)],
                windows.iter().map(|w| w.segments).sum::<u64>(),
            );
            if let Some(first) = windows.first() {
                cold_next.add(&[("queue", q)], unix(first.start));
            }
            for w in &windows {
                let start = unix(w.start).to_string();
                cold_jobs.add(&[("queue", q), ("window", &start)], w.jobs);
                cold_bytes.add(&[("queue", q), ("window", &start)], w.bytes);
            }
        }
        up.add(&[("queue", q)], u8::from(stats.leader.is_some()));
        token.add(&[("queue", q)], stats.token);
        for (quantile, value) in [
            ("0.5", stats.promotion_lag_p50),
            ("0.99", stats.promotion_lag_p99),
        ] {
            if let Some(value) = value {
                lag.add(&[("queue", q), ("quantile", quantile)], value.as_secs_f64());
            }
        }
        lag.add_suffixed(
            "_sum",
            &[("queue", q)],
            stats.promotion_lag_sum.as_secs_f64(),
        );
        lag.add_suffixed("_count", &[("queue", q)], stats.promoted);
        if let Ok(c) = queue.counters().await {
            for (event, n) in [
                ("scheduled", c.scheduled),
                ("delivered", c.delivered),
                ("acked", c.acked),
                ("retried", c.retried),
                ("died", c.died),
                ("quarantined", c.quarantined),
                ("leaderships", c.leaderships),
                ("script_errors", c.script_errors),
                ("cold_moved", c.cold_moved),
                ("cold_loaded", c.cold_loaded),
                ("streamed", c.streamed),
            ] {
                totals.add(&[("queue", q), ("event", event)], n);
            }
            let mut cumulative = 0;
            for (le, n) in &c.lag {
                cumulative += n;
                let le = le.map_or("+Inf".to_string(), seconds);
                hist.add_suffixed("_bucket", &[("queue", q), ("le", &le)], cumulative);
            }
            hist.add_suffixed("_sum", &[("queue", q)], seconds(c.lag_sum_ms));
            hist.add_suffixed("_count", &[("queue", q)], c.promoted);
            failing.add(&[("queue", q)], c.leader_failing);
        }
        match queue.stream_info().await {
            Ok(None) => mode.add(&[("queue", q), ("mode", "workers")], 1),
            Ok(Some(info)) => {
                let key = info.key.as_str();
                mode.add(&[("queue", q), ("mode", "stream"), ("stream", key)], 1);
                stream_len.add(&[("queue", q), ("stream", key)], info.length);
                for g in &info.groups {
                    let labels = [("queue", q), ("stream", key), ("group", g.name.as_str())];
                    stream_pending.add(&labels, g.pending);
                    stream_consumers.add(&labels, g.consumers);
                }
            }
            Err(_) => {} // as the other optional reads: the figures are left out
        }
        if let Ok(schedules) = queue.schedules().await {
            recurring.add(&[("queue", q)], schedules.len());
        }
        if let Ok((buckets, _)) = queue.due_buckets().await {
            let mut levels = [0u64; 8]; // 0..=6, then staged
            for b in &buckets {
                levels[b.level.map_or(7, usize::from)] += b.jobs;
            }
            for (i, n) in levels.iter().enumerate() {
                let level = if i == 7 {
                    "staged".to_string()
                } else {
                    i.to_string()
                };
                wheel.add(&[("queue", q), ("level", &level)], n);
            }
        }
    }
    let mut out = String::new();
    for family in [
        &jobs,
        &wheel,
        &up,
        &token,
        &lag,
        &totals,
        &hist,
        &failing,
        &recurring,
        &cold_jobs,
        &cold_bytes,
        &cold_segments,
        &cold_next,
        &mode,
        &stream_len,
        &stream_pending,
        &stream_consumers,
        &errors,
    ] {
        family.write(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_written_as_seconds() {
        assert_eq!(seconds(1), "0.001");
        assert_eq!(seconds(5), "0.005");
        assert_eq!(seconds(50), "0.05");
        assert_eq!(seconds(1000), "1");
        assert_eq!(seconds(5000), "5");
        assert_eq!(seconds(1234), "1.234");
        assert_eq!(seconds(0), "0");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut f = Family::new("x", "gauge", "help");
        f.add(&[("queue", "q\"1")], 3);
        let mut out = String::new();
        f.write(&mut out);
        assert_eq!(
            out,
            "# HELP x help\n# TYPE x gauge\nx{queue=\"q\\\"1\"} 3\n"
        );
    }
}
