//! The last hour (720 samples) of a queue's stats, for the pictures over time.

use crate::Stats;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const KEEP: usize = 720;

/// One look at a queue.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) at: Instant,
    pub(super) lag_p50_ms: Option<u64>,
    pub(super) lag_p99_ms: Option<u64>,
    pub(super) promoted: u64,
    pub(super) token: u64,
}

#[derive(Debug, Default)]
pub(super) struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Whether the last sample is older than `every` (or there is none).
    pub(super) fn due(&self, every: Duration) -> bool {
        self.samples
            .back()
            .is_none_or(|last| last.at.elapsed() >= every)
    }

    pub(super) fn push(&mut self, stats: &Stats) {
        if self.samples.len() == KEEP {
            self.samples.pop_front();
        }
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        self.samples.push_back(Sample {
            at: Instant::now(),
            lag_p50_ms: ms(stats.promotion_lag_p50),
            lag_p99_ms: ms(stats.promotion_lag_p99),
            promoted: stats.promoted,
            token: stats.token,
        });
    }

    pub(super) fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// Promotions per second between consecutive samples of one leadership (a new
    /// leader counts from zero again), with the age of the later sample.
    pub(super) fn throughput(&self) -> Vec<(Duration, f64)> {
        let pairs = self.samples.iter().zip(self.samples.iter().skip(1));
        pairs
            .filter(|(a, b)| a.token == b.token && b.promoted >= a.promoted)
            .map(|(a, b)| {
                let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
                (b.at.elapsed(), (b.promoted - a.promoted) as f64 / secs)
            })
            .collect()
    }
}
