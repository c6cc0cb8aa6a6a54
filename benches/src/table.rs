//! Samples per implementation, printed as Markdown tables, and the issues' targets checked
//! against the medians.

use crate::median;

/// Which way a figure improves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

/// Samples of one figure, per implementation, in the order the implementations came.
#[derive(Default)]
pub struct Samples(Vec<(String, Vec<f64>)>);

impl Samples {
    pub fn push(&mut self, name: &str, value: f64) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, values)) => values.push(value),
            None => self.0.push((name.to_string(), vec![value])),
        }
    }

    pub fn median(&self, name: &str) -> f64 {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or(f64::NAN, |(_, values)| median(&mut values.clone()))
    }

    /// The smallest and the largest sample of `name`.
    pub fn range(&self, name: &str) -> (f64, f64) {
        let values = self
            .0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice());
        let values = values.unwrap_or_default().iter().copied();
        let min = values.clone().fold(f64::INFINITY, f64::min);
        (min, values.fold(f64::NEG_INFINITY, f64::max))
    }

    /// The best median among the implementations that are not tickless.
    pub fn best_peer(&self, better: Better) -> (String, f64) {
        let peers = self
            .0
            .iter()
            .filter(|(name, _)| !name.starts_with("tickless"));
        let medians = peers.map(|(name, values)| (name.clone(), median(&mut values.clone())));
        let pick = |a: &(String, f64), b: &(String, f64)| match better {
            Better::Lower => a.1.total_cmp(&b.1),
            Better::Higher => b.1.total_cmp(&a.1),
        };
        medians
            .min_by(pick)
            .unwrap_or_else(|| (String::new(), f64::NAN))
    }

    /// Prints a Markdown table: median, min and max per implementation, and the ratio of
    /// each median to `base`'s.
    pub fn print(&self, title: &str, unit: &str, base: &str) {
        let base_median = self.median(base);
        println!("\n### {title}\n");
        println!("| implementation | median {unit} | min | max | runs | vs {base} |");
        println!("|---|---:|---:|---:|---:|---:|");
        for (name, values) in &self.0 {
            let mut sorted = values.clone();
            let mid = median(&mut sorted);
            println!(
                "| {name} | {} | {} | {} | {} | {:.2}x |",
                fmt(mid),
                fmt(sorted[0]),
                fmt(sorted[sorted.len() - 1]),
                sorted.len(),
                mid / base_median
            );
        }
    }
}

/// Three significant figures or so, without exponent.
pub fn fmt(value: f64) -> String {
    match value.abs() {
        v if v.is_nan() => "n/a".to_string(),
        v if v >= 100.0 => format!("{value:.0}"),
        v if v >= 10.0 => format!("{value:.1}"),
        _ => format!("{value:.2}"),
    }
}

/// One target: what it says, the measured figure, and whether it is met.
pub struct Target {
    /// The issue that set it.
    pub issue: u32,
    pub what: &'static str,
    pub measured: String,
    pub met: bool,
}

/// Prints the targets as a Markdown table and how many are met.
pub fn print_targets(targets: &[Target]) {
    println!("\n### Targets\n");
    println!("| issue | target | measured | met |");
    println!("|---|---|---|---|");
    for target in targets {
        let met = if target.met { "yes" } else { "**no**" };
        println!(
            "| {} | {} | {} | {met} |",
            target.issue, target.what, target.measured
        );
    }
    let met = targets.iter().filter(|target| target.met).count();
    println!("\n{met} of {} targets met.", targets.len());
}
