//! Small charts as inline SVG, drawn by the server: no script, nothing to fetch.
//!
//! Each chart is [`Markup`] built by `maud`'s `html!`, which escapes every value it
//! inserts; this file needs nothing of the pages around it. SVG elements are written
//! with an end tag (`line ... {}`): inside HTML, `<line>` alone would stay open and
//! swallow what follows.

use maud::{html, Markup};

const W: f64 = 560.0;
const H: f64 = 150.0;
/// Room for the axis labels.
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 18.0;

/// A number in few characters: 12, 3.4k, 5.6M.
pub(super) fn short(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.0}k", n / 1e3)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.2}")
    }
}

/// `n` and the word for it: "1 job", "2 jobs", "0.50 jobs".
pub(super) fn amount(n: f64, one: &str, many: &str) -> String {
    format!("{} {}", short(n), if n == 1.0 { one } else { many })
}

/// One decimal: the precision of every coordinate drawn.
fn coord(v: f64) -> String {
    format!("{v:.1}")
}

/// The chart's box, axes and labels (`top` at the top of the y axis, `x_labels` spread
/// evenly along the x axis), around `marks`.
fn chart(id: &str, title: &str, top: &str, x_labels: &[&str], marks: Markup) -> Markup {
    let last = x_labels.len().max(2) - 1;
    let anchor = |i: usize| match i {
        0 => "start",
        i if i == last => "end",
        _ => "middle",
    };
    html! {
        svg id=(id) class="chart" role="img" viewBox={ "0 0 " (W + LEFT) " " (H + BOTTOM) }
            xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            line x1=(LEFT) y1=(H) x2=(LEFT + W) y2=(H) class="axis" {}
            line x1=(LEFT) y1="0" x2=(LEFT) y2=(H) class="axis" {}
            text x=(LEFT - 4.0) y="12" text-anchor="end" { (top) }
            text x=(LEFT - 4.0) y=(H) text-anchor="end" { "0" }
            @for (i, label) in x_labels.iter().enumerate() {
                text x=(coord(LEFT + W * i as f64 / last as f64)) y=(H + BOTTOM - 3.0)
                    text-anchor=(anchor(i)) { (label) }
            }
            (marks)
        }
    }
}

/// One bar of [`bars`]: its height, the part of it (from the axis up) drawn in the
/// second colour, its `<title>` (what a pointer over it shows), and where a dashed line
/// from its top ends, in bars from the left edge (for jobs due somewhere up to there).
pub(super) struct Bar {
    pub(super) value: f64,
    pub(super) part: f64,
    pub(super) title: String,
    pub(super) reach: Option<f64>,
}

/// A bar per bin, left to right; `one` and `many` name the unit at the top of the y axis
/// ("1 job", "4 jobs").
pub(super) fn bars(
    id: &str,
    title: &str,
    bins: &[Bar],
    (one, many): (&str, &str),
    x_labels: &[&str],
) -> Markup {
    let max = bins.iter().map(|b| b.value).fold(0.0, f64::max);
    let width = W / bins.len().max(1) as f64;
    let height = |value: f64| (value / max * (H - 4.0)).max(1.0);
    let marks = html! {
        @for (i, bar) in bins.iter().enumerate() {
            @if bar.value > 0.0 {
                @let (x, top) = (LEFT + i as f64 * width, H - height(bar.value));
                rect x=(coord(x + 0.5)) y=(coord(top)) width=(coord((width - 1.0).max(0.5)))
                    height=(coord(H - top)) class="bar" {
                    title { (bar.title) }
                }
                @if bar.part > 0.0 {
                    @let part_top = H - height(bar.part);
                    rect x=(coord(x + 0.5)) y=(coord(part_top))
                        width=(coord((width - 1.0).max(0.5))) height=(coord(H - part_top))
                        class="part" {
                        title { (bar.title) }
                    }
                }
                @if let Some(reach) = bar.reach {
                    line x1=(coord(x + width)) y1=(coord(top)) x2=(coord(LEFT + reach * width))
                        y2=(coord(top)) class="span" {
                        title { (bar.title) }
                    }
                }
            }
        }
    };
    chart(id, title, &amount(max, one, many), x_labels, marks)
}

/// A line: its name, its CSS class, its points (`x` in 0..=1, left to right).
pub(super) type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One line per series, each named in the top left corner in its own colour.
pub(super) fn lines(
    id: &str,
    title: &str,
    series: &[Series<'_>],
    unit: &str,
    x_labels: &[&str],
) -> Markup {
    let max = series
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0);
    let points = |points: &[(f64, f64)]| {
        points
            .iter()
            .map(|(x, y)| {
                let (x, y) = (LEFT + x.clamp(0.0, 1.0) * W, H - y / max * (H - 4.0));
                format!("{},{}", coord(x), coord(y))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let marks = html! {
        @for (i, (name, class, line)) in series.iter().enumerate() {
            polyline points=(points(line)) class=(class) {}
            text x=(LEFT + 8.0) y=(14.0 + 13.0 * i as f64) class=(class) { (name) }
        }
    };
    chart(
        id,
        title,
        &format!("{} {unit}", short(max)),
        x_labels,
        marks,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(short(12.0), "12");
        assert_eq!(short(0.5), "0.50");
        assert_eq!(short(3_400.0), "3.4k");
        assert_eq!(short(56_000.0), "56k");
        assert_eq!(short(5_600_000.0), "5.6M");
    }

    #[test]
    fn chart_text_is_escaped() {
        let evil = "<script>x</script>\"&";
        let bar = |value: f64| Bar {
            value,
            part: 0.0,
            title: evil.to_string(),
            reach: None,
        };
        let svg = bars(
            evil,
            evil,
            &[bar(1.0), bar(0.0), bar(2.0)],
            (evil, evil),
            &[evil, evil],
        )
        .into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(
            svg.contains("id=\"&lt;script&gt;x&lt;/script&gt;&quot;&amp;\""),
            "{svg}"
        );
        assert!(
            svg.contains("<title>&lt;script&gt;x&lt;/script&gt;&quot;&amp;</title>"),
            "{svg}"
        );
        assert_eq!(svg.matches("<rect ").count(), 2, "{svg}");
        let svg = lines(evil, "t", &[(evil, evil, vec![(0.0, 1.0)])], "/s", &[]).into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("class=\"&lt;script&gt;"), "{svg}");
    }

    #[test]
    fn amounts_say_one_job_and_two_jobs() {
        assert_eq!(amount(1.0, "job", "jobs"), "1 job");
        assert_eq!(amount(0.0, "job", "jobs"), "0 jobs");
        assert_eq!(amount(2.0, "job", "jobs"), "2 jobs");
    }

    #[test]
    fn a_bar_s_part_and_reach_are_drawn_over_it() {
        let bins = [
            Bar {
                value: 4.0,
                part: 1.0,
                title: "4 jobs".into(),
                reach: Some(3.0),
            },
            Bar {
                value: 0.0,
                part: 0.0,
                title: String::new(),
                reach: None,
            },
        ];
        let svg = bars("b", "t", &bins, ("job", "jobs"), &[]).into_string();
        assert_eq!(svg.matches("class=\"bar\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("class=\"part\"").count(), 1, "{svg}");
        // From the first bar's right edge (W / 2 wide) to 3 bars from the left edge.
        assert!(
            svg.contains("<line x1=\"344.0\" y1=\"4.0\" x2=\"904.0\" y2=\"4.0\" class=\"span\">"),
            "{svg}"
        );
        assert!(svg.contains(">4 jobs</text>"), "the y axis's top: {svg}");
    }

    #[test]
    fn svg_elements_are_closed() {
        let svg = lines(
            "l",
            "t",
            &[("p50", "p50", vec![(0.0, 1.0), (1.0, 2.0)])],
            "ms",
            &["a", "b"],
        )
        .into_string();
        assert_eq!(
            svg.matches("<line ").count(),
            svg.matches("</line>").count()
        );
        assert!(svg.contains("points=\"64.0,77.0 624.0,4.0\""), "{svg}");
        assert!(svg.ends_with("</svg>"), "{svg}");
    }
}
