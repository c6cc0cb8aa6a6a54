//! The one place where time is converted: `Instant`s to wheel ticks and back.
//!
//! Ticks count `tick`-long steps from the timer's origin. A deadline becomes a tick by
//! rounding **up** and "now" by rounding **down**, so an entry that fires at
//! `deadline_tick <= now_tick` never fires before its deadline. All arithmetic saturates.
//!
//! Where the time comes from is fixed when the timer is built ([`Source`]): tokio's
//! [`Instant::now`] for a timer driven by a task (so a paused tokio clock, `advance` and
//! `start_paused` are its clock too, read from that runtime's tasks); the real clock for
//! a timer driven by a thread, whatever runtime the caller is in; or a manual clock that
//! moves only when told to.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;
use tokio::time::Instant;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// How far a deadline that cannot be represented is put: further than any real sleep.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 1_000_000);
/// A second try for platforms whose `Instant` cannot reach [`FAR_FUTURE`] (tokio's choice).
const NEAR_FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `now + duration`, saturated to a far but representable instant.
///
/// `Duration::MAX` and other durations past what `Instant` can hold become roughly a
/// million years from now (thirty, where the platform's `Instant` cannot go further).
pub(crate) fn deadline_after(now: Instant, duration: Duration) -> Instant {
    now.checked_add(duration)
        .or_else(|| now.checked_add(FAR_FUTURE.min(duration)))
        .or_else(|| now.checked_add(NEAR_FAR_FUTURE.min(duration)))
        .unwrap_or(now)
}

/// Where a clock reads the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Source {
    /// `tokio::time::Instant::now()`: the paused clock of the runtime current on the
    /// calling thread, if it has one. For timers driven by a task of that runtime.
    Tokio = 0,
    /// The real, monotonic clock, whatever runtime the caller is in. For timers driven by
    /// a thread, and for a task timer whose runtime has shut down.
    Real = 1,
    /// Moved only by [`Clock::advance_to`].
    Manual = 2,
}

/// Converts between `Instant`s and the ticks of one wheel, and tells the time.
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    tick_nanos: u64,
    /// A [`Source`]; changes only from `Tokio` to `Real` (see [`Clock::use_real_clock`]).
    source: AtomicU8,
    /// For [`Source::Manual`]: nanoseconds past `origin`.
    manual_nanos: AtomicU64,
}

fn real_now() -> Instant {
    Instant::from_std(std::time::Instant::now())
}

impl Clock {
    /// A clock whose tick 0 is now on `source`. `tick` must not be zero. A manual clock
    /// starts at tokio's now and then moves only by [`advance_to`](Self::advance_to).
    pub(crate) fn new(tick: Duration, source: Source) -> Self {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        debug_assert!(tick_nanos > 0, "zero tick");
        let origin = match source {
            Source::Tokio | Source::Manual => Instant::now(),
            Source::Real => real_now(),
        };
        Clock {
            origin,
            tick_nanos: tick_nanos.max(1),
            source: AtomicU8::new(source as u8),
            manual_nanos: AtomicU64::new(0),
        }
    }

    /// The current instant on this clock.
    pub(crate) fn now(&self) -> Instant {
        match self.source.load(Ordering::Relaxed) {
            0 => Instant::now(),
            1 => real_now(),
            _ => self.origin + Duration::from_nanos(self.manual_nanos.load(Ordering::Acquire)),
        }
    }

    /// Switches a tokio clock to the real one: its runtime has shut down, so there is no
    /// paused clock left to follow. A clock that was paused and moved by hand keeps its
    /// instants but now advances with real time, so deadlines set in virtual time may
    /// come sooner or later than they would have there.
    pub(crate) fn use_real_clock(&self) {
        let _ = self.source.compare_exchange(
            Source::Tokio as u8,
            Source::Real as u8,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Moves a manual clock forward to `instant` (never back); returns `false` for any
    /// other clock, which this cannot move. The offset saturates at `u64::MAX` nanoseconds
    /// (584 years).
    pub(crate) fn advance_to(&self, instant: Instant) -> bool {
        if self.source.load(Ordering::Relaxed) != Source::Manual as u8 {
            return false;
        }
        let target = instant.saturating_duration_since(self.origin).as_nanos();
        let target = u64::try_from(target).unwrap_or(u64::MAX);
        self.manual_nanos.fetch_max(target, Ordering::AcqRel);
        true
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_nanos)
    }

    /// The tick at which `deadline` has certainly passed: rounded up.
    pub(crate) fn deadline_tick(&self, deadline: Instant) -> u64 {
        let since = deadline.saturating_duration_since(self.origin);
        ticks(since, self.tick_nanos, Rounding::Up)
    }

    /// The current tick: rounded down.
    pub(crate) fn now_tick(&self) -> u64 {
        let since = self.now().saturating_duration_since(self.origin);
        ticks(since, self.tick_nanos, Rounding::Down)
    }

    /// `instant` as signed nanoseconds from this clock's origin, saturated at about 292
    /// years either way: how a `Sleep` keeps its deadline in 8 bytes instead of 16.
    pub(crate) fn offset(&self, instant: Instant) -> i64 {
        let saturated = |since: Duration| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX);
        match instant.checked_duration_since(self.origin) {
            Some(since) => saturated(since),
            None => -saturated(self.origin.duration_since(instant)),
        }
    }

    /// The current time as an [`offset`](Self::offset).
    pub(crate) fn now_offset(&self) -> i64 {
        match self.source.load(Ordering::Relaxed) {
            2 => i64::try_from(self.manual_nanos.load(Ordering::Acquire)).unwrap_or(i64::MAX),
            _ => self.offset(self.now()),
        }
    }

    /// The instant `offset` nanoseconds from the origin.
    pub(crate) fn instant_at_offset(&self, offset: i64) -> Instant {
        let nanos = Duration::from_nanos(offset.unsigned_abs());
        if offset >= 0 {
            deadline_after(self.origin, nanos)
        } else {
            self.origin.checked_sub(nanos).unwrap_or(self.origin)
        }
    }

    /// The tick at which the instant at `offset` has certainly passed: rounded up, as
    /// [`deadline_tick`](Self::deadline_tick).
    pub(crate) fn offset_tick(&self, offset: i64) -> u64 {
        u64::try_from(offset).map_or(0, |nanos| div_tick(nanos, self.tick_nanos, Rounding::Up))
    }

    /// The instant at which `tick` begins, saturated to a far future.
    pub(crate) fn instant_at(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * u128::from(self.tick_nanos);
        let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
        let since = Duration::new(secs, (nanos % NANOS_PER_SEC) as u32);
        deadline_after(self.origin, since)
    }
}

#[derive(Clone, Copy)]
enum Rounding {
    Up,
    Down,
}

/// `nanos / tick_nanos`, rounded. The default tick (1 ms) and the manual clock's (1 ns)
/// divide by a constant, which the compiler turns into a multiply: a division by a
/// run-time value was a tenth of the cost of a `DelayQueue` insert.
fn div_tick(nanos: u64, tick_nanos: u64, rounding: Rounding) -> u64 {
    const MS: u64 = 1_000_000;
    match (tick_nanos, rounding) {
        (1, _) => nanos,
        (MS, Rounding::Up) => nanos.div_ceil(MS),
        (MS, Rounding::Down) => nanos / MS,
        (_, Rounding::Up) => nanos.div_ceil(tick_nanos),
        (_, Rounding::Down) => nanos / tick_nanos,
    }
}

fn ticks(since: Duration, tick_nanos: u64, rounding: Rounding) -> u64 {
    // The common case fits u64 nanoseconds (up to ~584 years); u128 division is slower.
    if let Some(nanos) = since
        .as_secs()
        .checked_mul(NANOS_PER_SEC as u64)
        .and_then(|n| n.checked_add(u64::from(since.subsec_nanos())))
    {
        return div_tick(nanos, tick_nanos, rounding);
    }
    let nanos = since.as_nanos();
    let ticks = match rounding {
        Rounding::Up => nanos.div_ceil(u128::from(tick_nanos)),
        Rounding::Down => nanos / u128::from(tick_nanos),
    };
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        for (nanos, up, down) in [
            (0, 0, 0),
            (1, 1, 0),
            (MS - 1, 1, 0),
            (MS, 1, 1),
            (MS + 1, 2, 1),
        ] {
            let since = Duration::from_nanos(nanos);
            assert_eq!(ticks(since, MS, Rounding::Up), up, "{nanos} up");
            assert_eq!(ticks(since, MS, Rounding::Down), down, "{nanos} down");
        }
        // The constant-divisor fast paths agree with plain division for every tick.
        for tick in [1, 3, 1_000, MS - 1, MS, MS + 1, 7 * MS] {
            for nanos in [
                0,
                1,
                2,
                999,
                1_000,
                MS - 1,
                MS,
                MS + 1,
                3 * MS + 5,
                u64::MAX,
            ] {
                assert_eq!(div_tick(nanos, tick, Rounding::Up), nanos.div_ceil(tick));
                assert_eq!(div_tick(nanos, tick, Rounding::Down), nanos / tick);
            }
        }
    }

    #[test]
    fn huge_durations_saturate() {
        assert_eq!(ticks(Duration::MAX, 1, Rounding::Up), u64::MAX);
        assert_eq!(ticks(Duration::MAX, MS, Rounding::Down), u64::MAX);
        let past_u64_nanos = Duration::from_secs(600 * 365 * 86_400);
        assert_eq!(
            ticks(past_u64_nanos, MS, Rounding::Down) as u128,
            past_u64_nanos.as_nanos() / MS as u128
        );
    }

    #[test]
    fn round_trip_never_lands_before_the_deadline() {
        let clock = Clock::new(Duration::from_micros(700), Source::Tokio);
        for offset in [0, 1, 699_999, 700_000, 700_001, 123_456_789] {
            let deadline = clock.origin + Duration::from_nanos(offset);
            let tick = clock.deadline_tick(deadline);
            assert!(clock.instant_at(tick) >= deadline, "offset {offset}");
            assert!(tick == 0 || clock.instant_at(tick - 1) < deadline);
        }
    }

    #[test]
    fn a_manual_clock_moves_only_forward_and_only_when_told() {
        let clock = Clock::new(Duration::from_millis(1), Source::Manual);
        let start = clock.now();
        assert_eq!(clock.now(), start);
        assert!(clock.advance_to(start + Duration::from_millis(5)));
        assert_eq!(clock.now_tick(), 5);
        assert!(clock.advance_to(start + Duration::from_millis(2)));
        assert_eq!(clock.now() - start, Duration::from_millis(5), "never back");
        assert!(!Clock::new(Duration::from_millis(1), Source::Tokio).advance_to(start));
        assert!(!Clock::new(Duration::from_millis(1), Source::Real).advance_to(start));
    }

    #[test]
    fn offsets_are_exact_nanoseconds_either_side_of_the_origin_and_saturate() {
        let clock = Clock::new(Duration::from_millis(1), Source::Tokio);
        let origin = clock.origin;
        for nanos in [0, 1, MS - 1, MS, MS + 1, 86_400 * 1_000_000_000] {
            let later = origin + Duration::from_nanos(nanos);
            assert_eq!(clock.offset(later), nanos as i64);
            assert_eq!(clock.instant_at_offset(nanos as i64), later);
            assert_eq!(clock.offset_tick(nanos as i64), clock.deadline_tick(later));
            if let Some(earlier) = origin.checked_sub(Duration::from_nanos(nanos)) {
                assert_eq!(clock.offset(earlier), -(nanos as i64));
                assert_eq!(clock.instant_at_offset(-(nanos as i64)), earlier);
                assert_eq!(clock.offset_tick(-(nanos as i64)), 0);
            }
        }
        let far = deadline_after(origin, Duration::MAX);
        assert_eq!(clock.offset(far), i64::MAX, "saturates past 292 years");
        assert!(
            clock.instant_at_offset(i64::MAX) > origin + Duration::from_secs(86_400 * 365 * 290)
        );
        let manual = Clock::new(Duration::from_nanos(1), Source::Manual);
        assert_eq!(manual.now_offset(), 0);
        manual.advance_to(manual.origin + Duration::from_nanos(5));
        assert_eq!(manual.now_offset(), 5);
        assert_eq!(manual.offset(manual.now()), 5);
    }

    #[test]
    fn deadline_after_saturates_instead_of_panicking() {
        let now = Instant::now();
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(86_400 * 365 * 100));
        assert_eq!(deadline_after(now, Duration::ZERO), now);
        let clock = Clock::new(Duration::from_nanos(1), Source::Tokio);
        assert!(clock.instant_at(u64::MAX) > clock.origin);
    }
}
