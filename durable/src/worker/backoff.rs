//! [`Backoff`]: how long a failed job waits before its next attempt.

use std::time::Duration;

/// How long to wait before a failed job's next attempt.
///
/// A delay grows (or not) with the attempt, and with [`with_jitter`](Backoff::with_jitter)
/// is drawn from a range below it, so that jobs which failed together (a database down
/// for a minute) do not all come back in the same millisecond. The draw is a hash of
/// the job's id and attempt: different jobs spread over the range, and the same job and
/// attempt always get the same delay, so tests (on a manual clock) are deterministic. A
/// worker's backoff is [`WorkerOptions::backoff`](crate::WorkerOptions::backoff).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickless_durable::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
/// assert_eq!(backoff.delay(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay(3), Duration::from_secs(4));
/// assert_eq!(backoff.delay(10), Duration::from_secs(60));
///
/// // Full jitter: anywhere from 0 to the delay, by a hash of the id and attempt.
/// let jittered = backoff.with_jitter(1.0);
/// let a = jittered.delay_of("order:1", 3);
/// let b = jittered.delay_of("order:2", 3);
/// assert!(a <= Duration::from_secs(4) && b <= Duration::from_secs(4));
/// assert_ne!(a, b);
/// assert_eq!(a, jittered.delay_of("order:1", 3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    exponential: bool,
    /// The share of the delay that jitter may take off, in millionths (0: none).
    jitter_ppm: u32,
}

/// Millionths in one: [`Backoff`]'s jitter unit.
const PPM: u32 = 1_000_000;

impl Backoff {
    /// The same delay before every retry.
    pub fn fixed(delay: Duration) -> Backoff {
        Backoff {
            base: delay,
            max: delay,
            exponential: false,
            jitter_ppm: 0,
        }
    }

    /// `base` before the second attempt, doubling each time, never more than `max`.
    pub fn exponential(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max,
            exponential: true,
            jitter_ppm: 0,
        }
    }

    /// The same backoff with jitter: each delay is drawn from
    /// `[(1 - fraction) × delay, delay]`. `1.0` is "full jitter" (anywhere from 0 to the
    /// delay), `0.0` none; a fraction outside `0.0..=1.0` (or NaN) is clamped into it
    /// (NaN to 0).
    pub fn with_jitter(self, fraction: f64) -> Backoff {
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        Backoff {
            jitter_ppm: (fraction * f64::from(PPM)).round() as u32,
            ..self
        }
    }

    /// The delay after failed attempt `attempt` (1 for the first delivery), before jitter:
    /// the most that [`delay_of`](Backoff::delay_of) returns.
    pub fn delay(&self, attempt: u32) -> Duration {
        if !self.exponential {
            return self.base;
        }
        let doublings = attempt.saturating_sub(1).min(62);
        self.base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// The delay after job `id`'s failed attempt `attempt`, jitter taken off: what
    /// [`Worker::fail`](crate::Worker::fail) waits. Without jitter it is [`delay`](Backoff::delay).
    pub fn delay_of(&self, id: &str, attempt: u32) -> Duration {
        let delay = self.delay(attempt);
        if self.jitter_ppm == 0 {
            return delay;
        }
        // The share taken off: uniform in [0, jitter] by a hash of (id, attempt).
        let draw = spread(id, attempt) as f64 / u64::MAX as f64;
        let off = draw * f64::from(self.jitter_ppm) / f64::from(PPM);
        delay.mul_f64(1.0 - off)
    }
}

/// A well-spread 64-bit hash of a job id and attempt (FNV-1a, then a splitmix64
/// finish): the same on every machine and in every release, unlike `std`'s hashers.
fn spread(id: &str, attempt: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes().chain(attempt.to_le_bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn no_jitter_waits_the_whole_delay() {
        let backoff = Backoff::exponential(S, 60 * S);
        for attempt in 1..10 {
            assert_eq!(backoff.delay_of("a", attempt), backoff.delay(attempt));
        }
        assert_eq!(Backoff::fixed(S).delay_of("a", 7), S);
        // NaN is no jitter; fractions outside 0..=1 are clamped.
        assert_eq!(backoff.with_jitter(f64::NAN), backoff);
        assert_eq!(backoff.with_jitter(-1.0), backoff);
        assert_eq!(backoff.with_jitter(7.0), backoff.with_jitter(1.0));
    }

    #[test]
    fn full_jitter_spreads_jobs_that_failed_together() {
        let backoff = crate::WorkerOptions::default().backoff;
        let delays: Vec<Duration> = (0..1_000)
            .map(|i| backoff.delay_of(&format!("order:{i}"), 3))
            .collect();
        // Attempt 3 of 1 s doubling: at most 4 s, anywhere from 0.
        assert!(delays.iter().all(|d| *d <= 4 * S), "{delays:?}");
        let distinct: std::collections::HashSet<u128> =
            delays.iter().map(Duration::as_millis).collect();
        assert!(
            distinct.len() > 600,
            "only {} distinct delays",
            distinct.len()
        );
        let mean = delays.iter().sum::<Duration>() / 1_000;
        assert!(
            mean > 1800 * Duration::from_millis(1) && mean < 2200 * Duration::from_millis(1),
            "{mean:?}"
        );
        let quarter = delays.iter().filter(|d| **d < S).count();
        assert!(
            (200..300).contains(&quarter),
            "{quarter} of 1,000 below 1 s"
        );
    }

    #[test]
    fn jitter_is_a_function_of_id_and_attempt() {
        let backoff = Backoff::fixed(10 * S).with_jitter(0.25);
        for i in 0..100 {
            let id = format!("job-{i}");
            let d = backoff.delay_of(&id, 2);
            assert_eq!(
                d,
                backoff.delay_of(&id, 2),
                "same id and attempt, same delay"
            );
            assert!(d >= 7500 * Duration::from_millis(1) && d <= 10 * S, "{d:?}");
        }
        assert_ne!(backoff.delay_of("job-1", 2), backoff.delay_of("job-1", 3));
    }
}
