//! `Interval`: ticks at a fixed period, with tokio's missed-tick behaviours.

use crate::driver::registration::{Registration, ELAPSED, IDLE};
use crate::driver::shard::Shard;
use futures_core::Stream;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// A tick later than this after its scheduled instant counts as missed (tokio's threshold).
const MISSED_AFTER: Duration = Duration::from_millis(5);

/// What an [`Interval`] does when a tick is missed: polled more than 5 ms after it was due.
///
/// The names and meanings are tokio's. With a period of 10 ms and ticks due at 0, 10, 20,
/// ... that are next polled at 35 ms:
///
/// | behaviour | ticks returned, as scheduled instants |
/// | --- | --- |
/// | [`Burst`](Self::Burst) | 10, 20, 30 at once, then 40, 50, ... |
/// | [`Delay`](Self::Delay) | 10 at once, then 45, 55, ... (the period restarts from now) |
/// | [`Skip`](Self::Skip) | 10 at once, then 40, 50, ... (missed ticks are dropped) |
///
/// # Examples
///
/// A status report every 10 ms that should not catch up in a burst after a stall:
///
/// ```
/// use std::time::Duration;
/// use tickless::MissedTickBehavior;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut interval = tickless::interval(Duration::from_millis(10));
/// interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
/// let start = interval.tick().await;
///
/// tickless::sleep(Duration::from_millis(35)).await; // a stall: ticks 10, 20, 30 are late
/// assert_eq!(interval.tick().await - start, Duration::from_millis(10));
/// assert_eq!(interval.tick().await - start, Duration::from_millis(40), "20 and 30 skipped");
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissedTickBehavior {
    /// Ticks as fast as possible until caught up. The default.
    #[default]
    Burst,
    /// Schedules the next tick one period after the late one was observed.
    Delay,
    /// Skips the missed ticks and ticks at the next multiple of the period.
    Skip,
}

/// tokio's behaviour of the same name.
impl From<tokio::time::MissedTickBehavior> for MissedTickBehavior {
    fn from(behavior: tokio::time::MissedTickBehavior) -> MissedTickBehavior {
        match behavior {
            tokio::time::MissedTickBehavior::Burst => Self::Burst,
            tokio::time::MissedTickBehavior::Delay => Self::Delay,
            tokio::time::MissedTickBehavior::Skip => Self::Skip,
        }
    }
}

/// tokio's behaviour of the same name.
impl From<MissedTickBehavior> for tokio::time::MissedTickBehavior {
    fn from(behavior: MissedTickBehavior) -> tokio::time::MissedTickBehavior {
        match behavior {
            MissedTickBehavior::Burst => Self::Burst,
            MissedTickBehavior::Delay => Self::Delay,
            MissedTickBehavior::Skip => Self::Skip,
        }
    }
}

impl MissedTickBehavior {
    /// The next tick after one `scheduled` for then and observed at `now` (nanoseconds on
    /// the timer's timeline; `period` in nanoseconds, positive). `i128` holds any sum of
    /// these without overflow.
    fn next_tick(self, scheduled: i128, now: i128, period: i128) -> i128 {
        match self {
            Self::Burst => scheduled + period,
            Self::Delay => now + period,
            Self::Skip => now + period - (now - scheduled).rem_euclid(period),
        }
    }
}

/// Ticks at a fixed period. Made by [`interval`](crate::interval), [`interval_at`](crate::interval_at), or the [`Timer`](crate::Timer)
/// methods of the same names.
///
/// Each [`tick`](Self::tick) returns the instant the tick was *scheduled* for, not when it
/// was observed. An `Interval` is also a [`Stream`] of those instants.
///
/// Unlike tokio's, an `Interval` is `Unpin` and allocates nothing, and its instants are
/// exact to the nanosecond however far they lie (up to a million years, where the
/// `Instant`s it returns saturate).
///
/// # Examples
///
/// Flushing a buffer every 100 ms: the first tick completes at once, each next one a
/// period after the previous one was scheduled.
///
/// ```
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut flush = tickless::interval(Duration::from_millis(100));
/// let mut flushed_at = Vec::new();
/// for _ in 0..3 {
///     let at = flush.tick().await;
///     flushed_at.push(at);
/// }
/// assert_eq!(flushed_at[2] - flushed_at[0], Duration::from_millis(200));
/// assert_eq!(flush.period(), Duration::from_millis(100));
/// # }
/// ```
///
/// As a [`Stream`], with `futures`' `StreamExt`:
///
/// ```
/// use futures::StreamExt;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let ticks: Vec<_> = tickless::interval(Duration::from_secs(1)).take(3).collect().await;
/// assert_eq!(ticks[2] - ticks[0], Duration::from_secs(2));
/// # }
/// ```
#[derive(Debug)]
pub struct Interval {
    /// The timer entry for `next`, by tick.
    delay: Registration,
    /// When the next tick is scheduled, in nanoseconds on the timer's own timeline (see
    /// [`Clock::nanos`](crate::driver::clock::Clock::nanos)): it stays right when the
    /// timer's clock is handed over from a runtime that shut down.
    next: i128,
    period: Duration,
    missed_tick_behavior: MissedTickBehavior,
}

impl Interval {
    pub(crate) fn new(shard: Arc<Shard>, start: Instant, period: Duration) -> Interval {
        Interval {
            next: shard.core.clock.nanos(start),
            delay: Registration::new(shard, IDLE),
            period,
            missed_tick_behavior: MissedTickBehavior::default(),
        }
    }

    /// An `Interval` with the period and missed-tick behaviour of tokio's `interval`, on
    /// the [current timer](crate::Timer::current), whose first tick completes at once: for
    /// an API that now takes tickless's `Interval` (a different type from tokio's) and a
    /// caller that holds tokio's.
    ///
    /// tokio does not say when its interval's next tick is due, so the schedule starts
    /// anew, as [`interval`](crate::interval)'s does: what `tokio::time::interval(period)`
    /// made before its first tick carries over exactly. For another start, follow with
    /// [`reset_at`](Self::reset_at). tokio's interval is left as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut theirs = tokio::time::interval(Duration::from_secs(1));
    /// theirs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    ///
    /// let mut ours = tickless::Interval::from_tokio(&theirs);
    /// assert_eq!(ours.period(), Duration::from_secs(1));
    /// assert_eq!(ours.missed_tick_behavior(), tickless::MissedTickBehavior::Skip);
    /// let first = ours.tick().await;
    /// assert_eq!(ours.tick().await - first, Duration::from_secs(1));
    /// # }
    /// ```
    pub fn from_tokio(interval: &tokio::time::Interval) -> Interval {
        let mut ours = crate::interval(interval.period());
        ours.set_missed_tick_behavior(interval.missed_tick_behavior().into());
        ours
    }

    /// Completes when the next tick is due, with the instant it was scheduled for.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a tick that completes is never lost by dropping this future.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick: `Ready` with its scheduled instant once it is due.
    ///
    /// When `Pending`, the waker of `cx` is woken at the next tick; only the waker of the
    /// last call is kept.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        match self.delay.state() {
            ELAPSED => {}
            // The next tick is registered lazily, as tokio does, so a burst of missed
            // ticks completes at once without touching the wheel.
            IDLE => {
                let clock = self.delay.clock();
                if clock.now_nanos() < self.next {
                    let tick = clock.nanos_tick(self.next);
                    ready!(self.delay.register(tick, Some(cx.waker())));
                }
            }
            _ => ready!(self.delay.poll(cx.waker())),
        }
        let clock = self.delay.clock();
        let (scheduled, now) = (self.next, clock.now_nanos());
        let period = self.period.as_nanos() as i128;
        self.next = if now > scheduled + MISSED_AFTER.as_nanos() as i128 {
            self.missed_tick_behavior.next_tick(scheduled, now, period)
        } else {
            scheduled + period
        };
        let scheduled = clock.instant_at_nanos(scheduled);
        self.delay.set_state(IDLE);
        Poll::Ready(scheduled)
    }

    /// Makes the next tick due one period from now.
    ///
    /// # Examples
    ///
    /// A heartbeat that is only needed when nothing else was sent for a period:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickless::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut heartbeat = tickless::interval(Duration::from_secs(1));
    /// heartbeat.tick().await;
    /// tickless::sleep(Duration::from_millis(600)).await;
    /// // A message went out: the next heartbeat is a full period from now.
    /// heartbeat.reset();
    /// let sent = Instant::now();
    /// assert_eq!(heartbeat.tick().await - sent, Duration::from_secs(1));
    /// # }
    /// ```
    pub fn reset(&mut self) {
        self.reset_after(self.period);
    }

    /// Makes the next tick due now.
    pub fn reset_immediately(&mut self) {
        self.reset_to(self.delay.clock().now_nanos());
    }

    /// Makes the next tick due `after` from now.
    pub fn reset_after(&mut self, after: Duration) {
        self.reset_to(self.delay.clock().now_nanos() + after.as_nanos() as i128);
    }

    /// Makes the next tick due at `deadline`.
    pub fn reset_at(&mut self, deadline: Instant) {
        self.reset_to(self.delay.clock().nanos(deadline));
    }

    fn reset_to(&mut self, next: i128) {
        self.next = next;
        let tick = self.delay.clock().nanos_tick(next);
        self.delay.reset(tick);
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What happens when a tick is missed.
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed_tick_behavior
    }

    /// Sets what happens when a tick is missed.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed_tick_behavior = behavior;
    }
}

impl Stream for Interval {
    type Item = Instant;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Instant>> {
        self.get_mut().poll_tick(cx).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i128 = 1_000_000;

    #[test]
    fn next_tick_for_each_behaviour() {
        let (scheduled, now, period) = (10 * MS, 35 * MS, 10 * MS);
        let next = |b: MissedTickBehavior| b.next_tick(scheduled, now, period);
        assert_eq!(next(MissedTickBehavior::Burst), 20 * MS);
        assert_eq!(next(MissedTickBehavior::Delay), 45 * MS);
        assert_eq!(next(MissedTickBehavior::Skip), 40 * MS);
        // Exactly on a multiple: the next multiple.
        let on_multiple = MissedTickBehavior::Skip.next_tick(scheduled, 40 * MS, period);
        assert_eq!(on_multiple, 50 * MS);
    }

    #[test]
    fn huge_periods_do_not_overflow() {
        let max = Duration::MAX.as_nanos() as i128;
        for behavior in [
            MissedTickBehavior::Burst,
            MissedTickBehavior::Delay,
            MissedTickBehavior::Skip,
        ] {
            assert!(behavior.next_tick(max, max + 10 * MS, max) > max);
        }
    }
}
