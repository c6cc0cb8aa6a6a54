//! A queue page's "Coming due" charts: when its jobs come due over the next hour, day and
//! week, from the wheel's buckets and the cold tier's windows (no job is read).
//!
//! A bucket tells how many jobs it holds, not when within it each is due; so its jobs
//! are counted whole where it starts, and a dashed line reaches as far as they may be
//! due. A cold window's width is the tier's setting, which Redis does not keep: its jobs
//! are counted where it starts.

use super::html::{human, unix_ms};
use super::svg::{self, amount, Bar};
use crate::{ColdWindow, DueBucket};
use maud::{html, Markup};
use std::time::{Duration, SystemTime};

/// A bar chart of when jobs come due: its id, caption, span, bars and x-axis labels.
struct DueChart {
    id: &'static str,
    title: &'static str,
    window: Duration,
    bins: usize,
    labels: [&'static str; 3],
}

const DUE_CHARTS: [DueChart; 3] = [
    DueChart {
        id: "due-hour",
        title: "next hour, per minute",
        window: Duration::from_secs(3600),
        bins: 60,
        labels: ["now", "+30 min", "+1 h"],
    },
    DueChart {
        id: "due-day",
        title: "next day, per 30 min",
        window: Duration::from_secs(86400),
        bins: 48,
        labels: ["now", "+12 h", "+24 h"],
    },
    DueChart {
        id: "due-week",
        title: "next week, per 4 h",
        window: Duration::from_secs(7 * 86400),
        bins: 42,
        labels: ["now", "+3.5 days", "+7 days"],
    },
];

pub(super) fn coming_due(ranges: &[DueRange], now: SystemTime) -> Markup {
    html! {
        h2 { "Coming due" }
        p id="due-note" {
            small {
                "A bar counts the jobs of each bucket of the wheel, and of each window of the "
                "cold tier (in the lighter blue), that starts within it. A bucket tells how many "
                "jobs it holds, not when within it each is due: a dashed line from a bar reaches "
                "as far as its jobs may be due."
            }
        }
        div class="charts" {
            @for chart in &DUE_CHARTS {
                @let bins = due_bins(ranges, now, chart.window, chart.bins);
                @let total: u64 = bins.iter().map(|b| b.jobs).sum();
                @let later: u64 = bins.iter().map(|b| b.later).sum();
                figure {
                    figcaption {
                        (chart.title) ": " (amount(total as f64, "job", "jobs"))
                        @if later > 0 {
                            "; " (amount(later as f64, "of them", "of them")) " may come due after "
                            (chart.labels[2])
                        }
                    }
                    (svg::bars(chart.id, chart.title, &bars(&bins, chart), ("job", "jobs"), &chart.labels))
                }
            }
        }
    }
}

/// The bars of a chart: each bin's jobs, the cold ones in the second colour, its title in
/// words, and the dashed line of its wide ranges.
fn bars(bins: &[DueBin], chart: &DueChart) -> Vec<Bar> {
    let bin = chart.window / chart.bins as u32;
    bins.iter()
        .enumerate()
        .map(|(i, b)| {
            let from = match i {
                0 => "now".to_string(),
                i => format!("+{}", human(bin * i as u32)),
            };
            let mut title = format!("{} due from {from}", amount(b.jobs as f64, "job", "jobs"));
            if b.wide > 0 {
                let reach = Duration::from_secs_f64(b.reach * bin.as_secs_f64());
                title += &format!(
                    "; {} somewhere up to +{}",
                    amount(b.wide as f64, "of them", "of them"),
                    human(reach)
                );
            }
            if b.cold > 0 {
                title += &format!(
                    "; {} in the cold tier (due within the window that starts here)",
                    amount(b.cold as f64, "of them", "of them")
                );
            }
            Bar {
                value: b.jobs as f64,
                part: b.cold as f64,
                title,
                reach: (b.wide > 0).then_some(b.reach.min(chart.bins as f64)),
            }
        })
        .collect()
}

/// Jobs that come due within one range of time: a bucket of the wheel, a staged slot, or
/// a window of the cold tier.
pub(super) struct DueRange {
    start: SystemTime,
    /// `None` for a cold window: its width is the tier's setting, which Redis does not keep.
    width: Option<Duration>,
    jobs: u64,
    cold: bool,
}

/// The wheel's buckets and the cold tier's windows, as ranges.
pub(super) fn due_ranges(buckets: &[DueBucket], cold: &[ColdWindow]) -> Vec<DueRange> {
    let hot = buckets.iter().map(|b| DueRange {
        start: b.start,
        width: Some(b.width),
        jobs: b.jobs,
        cold: false,
    });
    let cold = cold.iter().map(|w| DueRange {
        start: w.start,
        width: None,
        jobs: w.jobs,
        cold: true,
    });
    hot.chain(cold).collect()
}

/// One bin of a chart: the jobs of the ranges that start in it (of those started
/// already, in the first), how many of them are cold, how many are of ranges wider than
/// the bin, and how far (in bins from the chart's start) the widest of those reaches, and
/// how many of its jobs may come due after the chart's end.
#[derive(Clone, Debug, Default, PartialEq)]
struct DueBin {
    jobs: u64,
    cold: u64,
    wide: u64,
    reach: f64,
    later: u64,
}

/// The jobs of each range counted whole in the one of `bins` equal parts of
/// `now .. now + window` where the range starts (ranges started already: the first;
/// ranges starting after it: none). Whole, since a bucket tells how many of its jobs are
/// due within it, not when: spread over its width, one job in a 70 min bucket would be
/// fifty bars of 0.02 jobs.
fn due_bins(ranges: &[DueRange], now: SystemTime, window: Duration, bins: usize) -> Vec<DueBin> {
    let mut out = vec![DueBin::default(); bins];
    let (now, window) = (unix_ms(now) as f64, window.as_millis() as f64);
    let bin = window / bins as f64;
    for r in ranges.iter().filter(|r| r.jobs > 0) {
        let from = unix_ms(r.start) as f64 - now;
        if from >= window {
            continue;
        }
        let i = ((from.max(0.0) / bin) as usize).min(bins - 1);
        let b = &mut out[i];
        b.jobs += r.jobs;
        if r.cold {
            b.cold += r.jobs;
        }
        let Some(width) = r.width else { continue };
        let end = (from + width.as_millis() as f64) / bin;
        if end > (i + 1) as f64 {
            b.wide += r.jobs;
            b.reach = b.reach.max(end);
        }
        if end > bins as f64 {
            b.later += r.jobs;
        }
    }
    out
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn range(start_ms: u64, width_ms: Option<u64>, jobs: u64, cold: bool) -> DueRange {
        DueRange {
            start: UNIX_EPOCH + Duration::from_millis(start_ms),
            width: width_ms.map(Duration::from_millis),
            jobs,
            cold,
        }
    }

    #[test]
    fn due_bins_count_each_range_whole_where_it_starts() {
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let ranges = [
            range(999_000, Some(1024), 3, false), // overdue: the first bin
            range(1_000_000, Some(20_000), 10, false), // bins 0 and 1: wide, in bin 0
            range(1_025_000, None, 7, true),      // a cold window: bin 2
            range(1_030_000, Some(100_000), 1, false), // starts in bin 3, ends past the chart
            range(1_040_000, Some(1), 9, false),  // starts after the chart: not in it
        ];
        let bins = due_bins(&ranges, now, Duration::from_secs(40), 4);
        let bin = |jobs, cold, wide, reach, later| DueBin {
            jobs,
            cold,
            wide,
            reach,
            later,
        };
        assert_eq!(
            bins,
            [
                bin(13, 0, 10, 2.0, 0),
                bin(0, 0, 0, 0.0, 0),
                bin(7, 7, 0, 0.0, 0),
                bin(1, 0, 1, 13.0, 1),
            ]
        );
    }

    #[test]
    fn one_job_in_a_wide_bucket_is_one_bar_and_a_line_to_where_it_may_be_due() {
        let chart = &DUE_CHARTS[0];
        let now = UNIX_EPOCH + Duration::from_secs(10_000);
        // One job somewhere in a 70 min bucket that starts 10 min from now.
        let level2 = DueBucket::level_width(2).as_millis() as u64;
        let ranges = [range(10_600_000, Some(level2), 1, false)];
        let bins = due_bins(&ranges, now, chart.window, chart.bins);
        let drawn = bars(&bins, chart);
        let shown: Vec<_> = drawn.iter().filter(|b| b.value > 0.0).collect();
        assert_eq!(shown.len(), 1, "one bar, not one per minute of the bucket");
        assert_eq!(shown[0].value, 1.0);
        assert_eq!(shown[0].reach, Some(60.0), "to the chart's end");
        assert_eq!(
            shown[0].title,
            "1 job due from +10.0 min; 1 of them somewhere up to +79.9 min"
        );
        let html = coming_due(&ranges, now).into_string();
        assert!(
            html.contains("next hour, per minute: 1 job; 1 of them may come due after +1 h"),
            "{html}"
        );
        assert_eq!(
            html.matches("class=\"bar\"").count(),
            3,
            "one bar in each chart: {html}"
        );
    }
}
