//! The one place where time is converted: `Instant`s to wheel ticks and back.
//!
//! A clock counts signed nanoseconds from its origin; ticks count `tick`-long steps from
//! it. A deadline becomes a tick by rounding **up** and "now" by rounding **down**, so an
//! entry that fires at `deadline_tick <= now_tick` never fires before its deadline. All
//! arithmetic saturates.
//!
//! Where the time comes from is fixed when the timer is built ([`Source`]): tokio's
//! [`Instant::now`] for a timer driven by a tokio runtime (so a paused tokio clock,
//! `advance` and `start_paused` are its clock too), the real clock for a timer driven by
//! a thread, whatever runtime the caller is in, or a manual clock that moves only when
//! told to.
//!
//! tokio reads the clock of the runtime current on the calling thread, and the real clock
//! on a thread outside any. A tokio-driven timer whose runtime's clock is paused therefore
//! reads it *in that runtime*: inside a task of it as it is, elsewhere by entering it.
//! While the runtime's clock has never been seen paused, the two are one clock and no
//! entering is needed.
//!
//! # Continuity
//!
//! A timer whose runtime shuts down goes on on the real clock ([`Clock::use_real_clock`]),
//! but a paused runtime's clock may stand hours away from real time. So the switch keeps
//! the timer's own time continuous: from then on every reading of the real clock, and
//! every instant converted, is shifted by how far the paused clock stood from the real one
//! at the switch (`shift_nanos`). The wheel's time never goes back, pending timers keep
//! the time they had left, and instants handed out afterwards (`now`, a `Sleep`'s
//! deadline) are on the real clock that `Instant::now()` reads outside the runtime.

use crate::sync::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::runtime::Handle;
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

/// The instant from which [`process_nanos`] counts: the first one asked for. Any fixed
/// instant would do; this one is near the present, so nanoseconds from it fit `i64`.
fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// `instant` as signed nanoseconds from the process's origin, saturated at about 292 years
/// either way: a deadline on no timer yet (a lazy `Timeout`'s), which
/// [`Clock::offset_of_process_nanos`] turns into any clock's offset without an `Instant`.
pub(crate) fn process_nanos(instant: Instant) -> i64 {
    saturate_i64(signed_nanos(instant, process_origin()))
}

/// The instant `nanos` nanoseconds from the process's origin, saturated where `Instant`
/// ends.
pub(crate) fn instant_at_process_nanos(nanos: i64) -> Instant {
    let origin = process_origin();
    let magnitude = Duration::from_nanos(nanos.unsigned_abs());
    if nanos >= 0 {
        deadline_after(origin, magnitude)
    } else {
        origin.checked_sub(magnitude).unwrap_or(origin)
    }
}

/// Exact signed nanoseconds from `origin` to `instant`.
fn signed_nanos(instant: Instant, origin: Instant) -> i128 {
    match instant.checked_duration_since(origin) {
        Some(since) => since.as_nanos() as i128,
        None => -(origin.duration_since(instant).as_nanos() as i128),
    }
}

/// Where a manual clock stops: one nanosecond short of `u64::MAX`, so that a deadline that
/// saturated to the last tick (`u64::MAX` at a 1 ns tick) is never reached, and never fires
/// early.
pub(crate) const MANUAL_END: u64 = u64::MAX - 1;

/// Where a clock reads the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Source {
    /// `tokio::time::Instant::now()`: the (possibly paused) clock of the runtime current on
    /// the calling thread. For timers driven by a tokio runtime, read in that runtime.
    Tokio = 0,
    /// The real, monotonic clock, whatever runtime the caller is in. For timers driven by
    /// a thread, and for a tokio timer whose runtime has shut down.
    Real = 1,
    /// Moved only by [`Clock::advance_by`] and [`Clock::advance_to`].
    Manual = 2,
}

/// Converts between `Instant`s and the ticks of one wheel, and tells the time.
///
/// Its atomics come from [`crate::sync`]: std's, with these orderings, in a normal build,
/// and loom's under `--cfg tickless_loom`, so the driver's loom models interleave a
/// manual clock's moves (and the source, shift and seen tick) with the registrations and
/// turns that race them. `paused` alone is std's everywhere (see there).
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    /// `origin` as exact nanoseconds from the process's origin (see [`process_nanos`]).
    origin_process_nanos: i128,
    tick_nanos: u64,
    /// A [`Source`]; changes only from `Tokio` to `Real` (see [`Clock::use_real_clock`]).
    source: AtomicU8,
    /// For [`Source::Manual`]: nanoseconds past `origin`.
    manual_nanos: AtomicU64,
    /// Added to every conversion once a tokio clock was replaced by the real one (see the
    /// module docs); zero before.
    shift_nanos: AtomicI64,
    /// The latest tick a turn has advanced the wheel to: the time the timer has seen.
    seen_tick: AtomicU64,
    /// For [`Source::Tokio`]: the runtime whose clock this is, and whether that clock has
    /// been seen paused (then it is read in that runtime; see the module docs).
    runtime: OnceLock<Handle>,
    /// std's even under loom: [`check_paused`](Self::check_paused) stores it or not
    /// depending on how far the real clock has run, which loom cannot replay (a model's
    /// executions would take different paths, and loom aborts). It only chooses how tokio's
    /// clock is read, which no model does.
    paused: AtomicBool,
}

fn real_now() -> Instant {
    Instant::from_std(std::time::Instant::now())
}

fn saturate_i64(nanos: i128) -> i64 {
    nanos.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Clock {
    /// A clock whose tick 0 is now on `source`. `tick` must not be zero. A manual clock
    /// starts at tokio's now and then moves only when told to.
    pub(crate) fn new(tick: Duration, source: Source) -> Self {
        let origin = match source {
            Source::Tokio | Source::Manual => Instant::now(),
            Source::Real => real_now(),
        };
        Clock::with_origin(origin, tick, source)
    }

    /// A clock whose tick 0 is `origin` (at or before now on `source`).
    pub(crate) fn with_origin(origin: Instant, tick: Duration, source: Source) -> Self {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        debug_assert!(tick_nanos > 0, "zero tick");
        Clock {
            origin,
            origin_process_nanos: signed_nanos(origin, process_origin()),
            tick_nanos: tick_nanos.max(1),
            source: AtomicU8::new(source as u8),
            manual_nanos: AtomicU64::new(0),
            shift_nanos: AtomicI64::new(0),
            seen_tick: AtomicU64::new(0),
            runtime: OnceLock::new(),
            paused: AtomicBool::new(false),
        }
    }

    /// Makes this tokio clock follow `runtime`'s clock, which is `paused` or not now.
    pub(crate) fn follow_runtime(&self, runtime: Handle, paused: bool) {
        let _ = self.runtime.set(runtime);
        self.paused.store(paused, Ordering::Release);
    }

    /// For a turn, in the runtime: notes a runtime clock that stands apart from the real
    /// one (paused, or paused before), so that later reads enter the runtime.
    pub(crate) fn check_paused(&self, runtime_now: Instant) {
        if self.paused.load(Ordering::Relaxed) {
            return;
        }
        let real = real_now();
        let apart = real
            .checked_duration_since(runtime_now)
            .or_else(|| runtime_now.checked_duration_since(real))
            .is_none_or(|gap| gap > Duration::from_millis(1));
        if apart {
            self.paused.store(true, Ordering::Release);
        }
    }

    /// tokio's clock as the timer's runtime reads it (see the module docs).
    fn runtime_now(&self) -> Instant {
        // Inside a tokio task, the task's runtime is current: one thread-local read.
        if !self.paused.load(Ordering::Acquire) || tokio::task::try_id().is_some() {
            return Instant::now();
        }
        match self.runtime.get() {
            Some(runtime) if !Handle::try_current().is_ok_and(|h| h.id() == runtime.id()) => {
                let _enter = runtime.enter();
                Instant::now()
            }
            _ => Instant::now(),
        }
    }

    fn source(&self) -> u8 {
        self.source.load(Ordering::Acquire)
    }

    pub(crate) fn is_manual(&self) -> bool {
        self.source() == Source::Manual as u8
    }

    /// The current instant on this clock.
    pub(crate) fn now(&self) -> Instant {
        match self.source() {
            0 => self.runtime_now(),
            1 => real_now(),
            _ => self.origin + Duration::from_nanos(self.manual_nanos.load(Ordering::Acquire)),
        }
    }

    /// Signed nanoseconds from the origin to `instant`, shifted (see the module docs): the
    /// timer's own timeline, which stays continuous when the clock's source changes.
    pub(crate) fn nanos(&self, instant: Instant) -> i128 {
        signed_nanos(instant, self.origin) + i128::from(self.shift())
    }

    /// The shift, once the source is the real clock; zero before. The source is stored
    /// after the shift, so a reader that sees the real source sees its shift, and one that
    /// sees tokio's does not pair a tokio reading with it.
    fn shift(&self) -> i64 {
        if self.source() == Source::Real as u8 {
            self.shift_nanos.load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// The current time on the timer's own timeline (see [`nanos`](Self::nanos)).
    pub(crate) fn now_nanos(&self) -> i128 {
        match self.source() {
            2 => i128::from(self.manual_nanos.load(Ordering::Acquire)),
            _ => self.nanos(self.now()),
        }
    }

    /// The tick at which the time `nanos` on the timer's timeline has certainly passed:
    /// rounded up. The one conversion of a deadline to a tick.
    pub(crate) fn nanos_tick(&self, nanos: i128) -> u64 {
        ticks(nanos, self.tick_nanos, Rounding::Up)
    }

    /// The instant `nanos` (shifted) nanoseconds from the origin, saturated.
    pub(crate) fn instant_at_nanos(&self, nanos: i128) -> Instant {
        let unshifted = nanos - i128::from(self.shift());
        let magnitude = unshifted.unsigned_abs();
        // The common case fits u64 nanoseconds (584 years): a u128 division by 10^9 is a
        // library call, a u64 one a multiplication (a `DelayQueue` pays this per item).
        let duration = match u64::try_from(magnitude) {
            Ok(nanos) => Duration::from_nanos(nanos),
            Err(_) => {
                let secs = u64::try_from(magnitude / NANOS_PER_SEC).unwrap_or(u64::MAX);
                Duration::new(secs, (magnitude % NANOS_PER_SEC) as u32)
            }
        };
        if unshifted >= 0 {
            deadline_after(self.origin, duration)
        } else {
            self.origin.checked_sub(duration).unwrap_or(self.origin)
        }
    }

    /// Switches a tokio clock to the real one, keeping the timer's time continuous (see
    /// the module docs): its runtime has shut down, so there is no paused clock left to
    /// follow. `runtime_now` is that runtime's clock, if the caller could still read it;
    /// otherwise the latest time a turn saw stands in for it.
    pub(crate) fn use_real_clock(&self, runtime_now: Option<Instant>) {
        if self.source() != Source::Tokio as u8 {
            return;
        }
        let seen = i128::from(self.seen_tick.load(Ordering::Acquire)) * i128::from(self.tick_nanos);
        let stood = runtime_now.map_or(seen, |now| self.nanos(now).max(seen));
        let real = self.nanos(real_now());
        // A runtime whose clock was never seen paused ran on the real clock: the two
        // readings differ only by when they were taken, and the timeline goes on
        // unshifted, so instants handed out before and after the switch are on one clock
        // to the nanosecond (an `Interval`'s stay exactly a period apart).
        let one_clock = !self.paused.load(Ordering::Acquire) && stood <= real;
        let shift = if one_clock { 0 } else { stood - real };
        self.shift_nanos
            .store(saturate_i64(shift), Ordering::Release);
        self.source.store(Source::Real as u8, Ordering::Release);
    }

    /// Moves a manual clock forward by `duration`, exactly, however many threads do so at
    /// once; returns `false` for any other clock. Saturates at [`MANUAL_END`] nanoseconds
    /// from the origin (584 years).
    pub(crate) fn advance_by(&self, duration: Duration) -> bool {
        if !self.is_manual() {
            return false;
        }
        let by = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .manual_nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |nanos| {
                Some(nanos.saturating_add(by).min(MANUAL_END))
            });
        true
    }

    /// Moves a manual clock forward to `instant` (never back); returns `false` for any
    /// other clock. Saturates as [`advance_by`](Self::advance_by).
    pub(crate) fn advance_to(&self, instant: Instant) -> bool {
        if !self.is_manual() {
            return false;
        }
        let target = instant.saturating_duration_since(self.origin).as_nanos();
        let target = u64::try_from(target).map_or(MANUAL_END, |t| t.min(MANUAL_END));
        self.manual_nanos.fetch_max(target, Ordering::AcqRel);
        true
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_nanos)
    }

    /// Records that a turn advanced the wheel to `tick`.
    pub(crate) fn saw(&self, tick: u64) {
        self.seen_tick.fetch_max(tick, Ordering::AcqRel);
    }

    /// The current tick: rounded down.
    pub(crate) fn now_tick(&self) -> u64 {
        match self.source() {
            2 => div_tick(
                self.manual_nanos.load(Ordering::Acquire),
                self.tick_nanos,
                Rounding::Down,
            ),
            _ => ticks(self.nanos(self.now()), self.tick_nanos, Rounding::Down),
        }
    }

    /// `instant` as signed nanoseconds from this clock's origin, saturated at about 292
    /// years either way: how a `Sleep` keeps its deadline in 8 bytes instead of 16.
    pub(crate) fn offset(&self, instant: Instant) -> i64 {
        saturate_i64(self.nanos(instant))
    }

    /// The [`offset`](Self::offset) of the instant `nanos` nanoseconds from the process's
    /// origin (see [`process_nanos`]): the same number, by integer arithmetic alone.
    pub(crate) fn offset_of_process_nanos(&self, nanos: i64) -> i64 {
        saturate_i64(i128::from(nanos) - self.origin_process_nanos + i128::from(self.shift()))
    }

    /// The current time as an [`offset`](Self::offset).
    pub(crate) fn now_offset(&self) -> i64 {
        match self.source() {
            2 => i64::try_from(self.manual_nanos.load(Ordering::Acquire)).unwrap_or(i64::MAX),
            _ => self.offset(self.now()),
        }
    }

    /// The instant `offset` nanoseconds from the origin.
    pub(crate) fn instant_at_offset(&self, offset: i64) -> Instant {
        self.instant_at_nanos(i128::from(offset))
    }

    /// The instant at which `tick` begins, saturated to a far future.
    pub(crate) fn instant_at(&self, tick: u64) -> Instant {
        self.instant_at_nanos(i128::from(tick) * i128::from(self.tick_nanos))
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

/// Signed nanoseconds from the origin as ticks: before the origin is tick 0, past `u64`
/// saturates.
fn ticks(nanos: i128, tick_nanos: u64, rounding: Rounding) -> u64 {
    if nanos <= 0 {
        return 0;
    }
    // The common case fits u64 nanoseconds (up to ~584 years); u128 division is slower.
    if let Ok(nanos) = u64::try_from(nanos) {
        return div_tick(nanos, tick_nanos, rounding);
    }
    let nanos = nanos as u128;
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
            let since = i128::from(nanos);
            assert_eq!(ticks(since, MS, Rounding::Up), up, "{nanos} up");
            assert_eq!(ticks(since, MS, Rounding::Down), down, "{nanos} down");
        }
        assert_eq!(ticks(-5, MS, Rounding::Up), 0, "before the origin");
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
        let max = Duration::MAX.as_nanos() as i128;
        assert_eq!(ticks(max, 1, Rounding::Up), u64::MAX);
        assert_eq!(ticks(max, MS, Rounding::Down), u64::MAX);
        let past_u64_nanos = Duration::from_secs(600 * 365 * 86_400).as_nanos();
        assert_eq!(
            ticks(past_u64_nanos as i128, MS, Rounding::Down) as u128,
            past_u64_nanos / MS as u128
        );
    }

    #[test]
    fn round_trip_never_lands_before_the_deadline() {
        let clock = Clock::new(Duration::from_micros(700), Source::Tokio);
        for offset in [0, 1, 699_999, 700_000, 700_001, 123_456_789] {
            let deadline = clock.origin + Duration::from_nanos(offset);
            let tick = clock.nanos_tick(clock.nanos(deadline));
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
        assert!(clock.advance_by(Duration::from_millis(2)));
        assert_eq!(clock.now() - start, Duration::from_millis(7));
        assert!(clock.advance_by(Duration::MAX));
        assert_eq!(
            clock.now() - start,
            Duration::from_nanos(MANUAL_END),
            "saturates at 584 years"
        );
        assert!(!Clock::new(Duration::from_millis(1), Source::Tokio).advance_to(start));
        assert!(!Clock::new(Duration::from_millis(1), Source::Real).advance_by(MS_DURATION));
    }

    const MS_DURATION: Duration = Duration::from_millis(1);

    #[test]
    fn offsets_are_exact_nanoseconds_either_side_of_the_origin_and_saturate() {
        let clock = Clock::new(Duration::from_millis(1), Source::Tokio);
        let origin = clock.origin;
        for nanos in [0, 1, MS - 1, MS, MS + 1, 86_400 * 1_000_000_000] {
            let later = origin + Duration::from_nanos(nanos);
            assert_eq!(clock.offset(later), nanos as i64);
            assert_eq!(clock.instant_at_offset(nanos as i64), later);
            assert_eq!(
                clock.nanos_tick(i128::from(clock.offset(later))),
                nanos.div_ceil(MS)
            );
            if let Some(earlier) = origin.checked_sub(Duration::from_nanos(nanos)) {
                assert_eq!(clock.offset(earlier), -(nanos as i64));
                assert_eq!(clock.instant_at_offset(-(nanos as i64)), earlier);
                assert_eq!(clock.nanos_tick(-i128::from(nanos)), 0);
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
    fn switching_to_the_real_clock_continues_from_where_the_runtime_clock_stood() {
        let clock = Clock::new(Duration::from_millis(1), Source::Tokio);
        let an_hour = Duration::from_secs(3600);
        // The paused clock stood an hour ahead of real time when its runtime went.
        let stood = real_now() + an_hour;
        clock.use_real_clock(Some(stood));
        let now_tick = clock.now_tick();
        assert!(now_tick >= 3_600_000, "time went back to {now_tick}");
        assert!(now_tick < 3_600_000 + 60_000, "time jumped to {now_tick}");
        // Instants handed out and taken in are on the real clock from now on.
        let now = clock.now();
        assert!(now <= real_now());
        let in_300 = now + Duration::from_millis(300);
        let wait = clock.instant_at(clock.nanos_tick(clock.nanos(in_300))) - now;
        assert!(wait >= Duration::from_millis(300), "{wait:?}");
        assert!(wait <= Duration::from_millis(302), "{wait:?}");
        // Without a reading of the runtime's clock, the latest tick a turn saw stands in.
        let unread = Clock::new(Duration::from_millis(1), Source::Tokio);
        unread.saw(5_000);
        unread.use_real_clock(None);
        assert!(unread.now_tick() >= 5_000);
    }

    #[test]
    fn offsets_from_process_nanos_are_the_offsets_of_the_instants() {
        let start = Instant::now();
        let instants = || {
            [0, 1, 999_999, 1_000_000, 3_600_000_000_123]
                .into_iter()
                .flat_map(|nanos| {
                    let d = Duration::from_nanos(nanos);
                    [Some(start + d), start.checked_sub(d)]
                })
                .flatten()
        };
        let later_origin = Clock::with_origin(
            start + Duration::from_millis(7),
            Duration::from_millis(1),
            Source::Tokio,
        );
        // A clock whose runtime's paused clock stood an hour ahead when it went: shifted.
        let shifted = Clock::new(Duration::from_millis(1), Source::Tokio);
        shifted.use_real_clock(Some(real_now() + Duration::from_secs(3600)));
        let manual = Clock::new(Duration::from_nanos(1), Source::Manual);
        for clock in [&later_origin, &shifted, &manual] {
            for instant in instants() {
                assert_eq!(
                    clock.offset_of_process_nanos(process_nanos(instant)),
                    clock.offset(instant),
                    "{instant:?} on {clock:?}"
                );
            }
            let far = clock.offset_of_process_nanos(i64::MAX);
            assert!(far > i64::MAX / 2, "a saturated deadline stays far: {far}");
        }
        for instant in instants() {
            assert_eq!(instant_at_process_nanos(process_nanos(instant)), instant);
        }
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
