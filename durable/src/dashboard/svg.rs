//! Small charts as inline SVG, drawn by the server: no script, nothing to fetch.

use super::html::esc;
use std::fmt::Write;

const W: f64 = 560.0;
const H: f64 = 150.0;
/// Room for the axis labels.
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 18.0;

fn frame(out: &mut String, id: &str, title: &str, max: f64, unit: &str, x_labels: &[&str]) {
    let _ = write!(
        out,
        "<svg id=\"{}\" class=\"chart\" role=\"img\" viewBox=\"0 0 {} {}\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title>",
        esc(id),
        W + LEFT,
        H + BOTTOM,
        esc(title)
    );
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{H}\" x2=\"{}\" y2=\"{H}\" class=\"axis\"/>\
         <line x1=\"{LEFT}\" y1=\"0\" x2=\"{LEFT}\" y2=\"{H}\" class=\"axis\"/>\
         <text x=\"{}\" y=\"12\" text-anchor=\"end\">{}</text>\
         <text x=\"{}\" y=\"{H}\" text-anchor=\"end\">0</text>",
        LEFT + W,
        LEFT - 4.0,
        esc(&format!("{} {unit}", short(max))),
        LEFT - 4.0,
    );
    let n = x_labels.len().max(2) - 1;
    for (i, label) in x_labels.iter().enumerate() {
        let x = LEFT + W * i as f64 / n as f64;
        let anchor = match i {
            0 => "start",
            i if i == n => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            H + BOTTOM - 3.0,
            esc(label)
        );
    }
}

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

/// A bar per bin, left to right; each bar's `<title>` holds its count.
pub(super) fn bars(id: &str, title: &str, bins: &[f64], unit: &str, x_labels: &[&str]) -> String {
    let max = bins.iter().copied().fold(0.0, f64::max);
    let mut out = String::new();
    frame(&mut out, id, title, max, unit, x_labels);
    let width = W / bins.len().max(1) as f64;
    for (i, &value) in bins.iter().enumerate() {
        if value <= 0.0 {
            continue;
        }
        let height = (value / max * (H - 4.0)).max(1.0);
        let _ = write!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{height:.1}\" class=\"bar\">\
             <title>{}</title></rect>",
            LEFT + i as f64 * width + 0.5,
            H - height,
            (width - 1.0).max(0.5),
            short(value),
        );
    }
    out.push_str("</svg>");
    out
}

/// A line: its name, its CSS class, its points (`x` in 0..=1, left to right).
pub(super) type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One line per series.
pub(super) fn lines(
    id: &str,
    title: &str,
    series: &[Series<'_>],
    unit: &str,
    x_labels: &[&str],
) -> String {
    let max = series
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0);
    let mut out = String::new();
    frame(&mut out, id, title, max, unit, x_labels);
    for (i, (name, class, points)) in series.iter().enumerate() {
        let mut path = String::new();
        for (x, y) in points {
            let _ = write!(
                path,
                "{:.1},{:.1} ",
                LEFT + x.clamp(0.0, 1.0) * W,
                H - y / max * (H - 4.0)
            );
        }
        let _ = write!(
            out,
            "<polyline points=\"{}\" class=\"{}\"/><text x=\"{}\" y=\"{}\" class=\"{}\">{}</text>",
            path.trim_end(),
            esc(class),
            LEFT + 8.0,
            14.0 + 13.0 * i as f64,
            esc(class),
            esc(name)
        );
    }
    out.push_str("</svg>");
    out
}
