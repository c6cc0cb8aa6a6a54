//! `Interval`: ticks at a fixed period, with tokio's missed-tick behaviours.

use crate::driver::clock::deadline_after;
use crate::driver::registration::{Registration, ELAPSED, IDLE};
use crate::driver::shard::Shard;
use crate::Timer;
use futures_core::Stream;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// A tick later than this after its scheduled instant counts as missed (tokio's threshold).
const MISSED_AFTER: Duration = Duration::from_millis(5);

/// An [`Interval`] whose first tick completes at once, then every `period`, on the
/// [current timer](Timer::current). Same meaning as `tokio::time::interval`.
///
/// # Panics
///
/// If `period` is zero, as tokio does. [`Timer::try_interval`] returns an error instead.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut interval = tickless::interval(Duration::from_millis(10));
/// let first = interval.tick().await; // at once
/// let second = interval.tick().await; // 10 ms later
/// assert_eq!(second - first, Duration::from_millis(10));
/// # }
/// ```
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    Timer::current().interval(period)
}

/// An [`Interval`] whose first tick completes at `start`, then every `period`, on the
/// [current timer](Timer::current). Same meaning as `tokio::time::interval_at`.
///
/// # Panics
///
/// If `period` is zero, as tokio does. [`Timer::try_interval_at`] returns an error instead.
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    Timer::current().interval_at(start, period)
}

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

impl MissedTickBehavior {
    /// The next tick after one `scheduled` for then and observed at `now`.
    fn next_tick(self, scheduled: Instant, now: Instant, period: Duration) -> Instant {
        match self {
            Self::Burst => deadline_after(scheduled, period),
            Self::Delay => deadline_after(now, period),
            Self::Skip => {
                let behind = (now - scheduled).as_nanos() % period.as_nanos();
                // `behind < period`, which is a `Duration`, so this always fits.
                let behind = Duration::from_nanos(behind as u64);
                deadline_after(now, period - behind)
            }
        }
    }
}

/// Ticks at a fixed period. Made by [`interval`], [`interval_at`], or the [`Timer`]
/// methods of the same names.
///
/// Each [`tick`](Self::tick) returns the instant the tick was *scheduled* for, not when it
/// was observed. An `Interval` is also a [`Stream`] of those instants.
///
/// Unlike tokio's, an `Interval` is `Unpin` and allocates nothing, and its instants are
/// exact to the nanosecond however far they lie (up to a million years, where they
/// saturate).
#[derive(Debug)]
pub struct Interval {
    /// The timer entry for `next`, by tick.
    delay: Registration,
    /// The instant the next tick is scheduled for.
    next: Instant,
    period: Duration,
    missed_tick_behavior: MissedTickBehavior,
}

impl Interval {
    pub(crate) fn new(shard: Arc<Shard>, start: Instant, period: Duration) -> Interval {
        Interval {
            delay: Registration::new(shard, IDLE),
            next: start,
            period,
            missed_tick_behavior: MissedTickBehavior::default(),
        }
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
                if clock.now() < self.next {
                    let tick = clock.deadline_tick(self.next);
                    ready!(self.delay.register(tick, Some(cx.waker())));
                }
            }
            _ => ready!(self.delay.poll(cx.waker())),
        }
        let scheduled = self.next;
        let now = self.delay.clock().now();
        let missed = scheduled
            .checked_add(MISSED_AFTER)
            .is_some_and(|late| now > late);
        self.next = if missed {
            self.missed_tick_behavior
                .next_tick(scheduled, now, self.period)
        } else {
            deadline_after(scheduled, self.period)
        };
        self.delay.set_state(IDLE);
        Poll::Ready(scheduled)
    }

    /// Makes the next tick due one period from now.
    pub fn reset(&mut self) {
        self.reset_after(self.period);
    }

    /// Makes the next tick due now.
    pub fn reset_immediately(&mut self) {
        let now = self.delay.clock().now();
        self.reset_at(now);
    }

    /// Makes the next tick due `after` from now.
    pub fn reset_after(&mut self, after: Duration) {
        let next = deadline_after(self.delay.clock().now(), after);
        self.reset_at(next);
    }

    /// Makes the next tick due at `deadline`.
    pub fn reset_at(&mut self, deadline: Instant) {
        self.next = deadline;
        let clock = self.delay.clock();
        let tick = clock.deadline_tick(deadline);
        let due = self.delay.key().is_some() && deadline <= clock.now();
        self.delay.reset(tick, due);
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

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn next_tick_for_each_behaviour() {
        let t0 = Instant::now();
        let (scheduled, now, period) = (t0 + 10 * MS, t0 + 35 * MS, 10 * MS);
        let next = |b: MissedTickBehavior| b.next_tick(scheduled, now, period) - t0;
        assert_eq!(next(MissedTickBehavior::Burst), 20 * MS);
        assert_eq!(next(MissedTickBehavior::Delay), 45 * MS);
        assert_eq!(next(MissedTickBehavior::Skip), 40 * MS);
        // Exactly on a multiple: the next multiple.
        let on_multiple = MissedTickBehavior::Skip.next_tick(scheduled, t0 + 40 * MS, period);
        assert_eq!(on_multiple - t0, 50 * MS);
    }

    #[test]
    fn huge_periods_saturate_instead_of_overflowing() {
        let now = Instant::now();
        for behavior in [
            MissedTickBehavior::Burst,
            MissedTickBehavior::Delay,
            MissedTickBehavior::Skip,
        ] {
            assert!(behavior.next_tick(now, now + 10 * MS, Duration::MAX) > now);
        }
    }
}
