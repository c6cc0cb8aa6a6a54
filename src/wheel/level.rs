//! Slot and level arithmetic: small pure functions over integer ticks.
//!
//! A wheel of `2^shift` buckets per level gives level `k` buckets `2^(shift*k)` ticks wide
//! and a span of `2^(shift*(k+1))` ticks. Every function here takes the wheel's `shift`
//! and a level index; none of them allocate or look at a clock. Shifts of 64 or more mean
//! "wider than any `u64` tick", which is how the top level covers every deadline.

/// Bits of tick covered by one bucket of `level`: a bucket is `2^bucket_shift` ticks wide.
pub(super) fn bucket_shift(shift: u32, level: usize) -> u32 {
    // `level` is at most `max_levels(shift)`, so the product is at most 64 + shift - 1.
    shift * level as u32
}

/// How many levels a wheel of `2^shift` buckets can need before one level spans all of
/// `u64`: `ceil(64 / shift)`.
pub(super) fn max_levels(shift: u32) -> usize {
    64_u32.div_ceil(shift) as usize
}

/// The start of the bucket of `level` holding `tick`: `tick` rounded down to the level's
/// bucket width. This is the bucket's expiration: the moment its entries must move down.
pub(super) fn bucket_start(shift: u32, level: usize, tick: u64) -> u64 {
    let width = bucket_shift(shift, level);
    if width >= 64 {
        0
    } else {
        (tick >> width) << width
    }
}

/// The slot of `level` that holds `deadline_tick`: its bucket number modulo the wheel size.
pub(super) fn slot(shift: u32, level: usize, deadline_tick: u64) -> usize {
    let width = bucket_shift(shift, level);
    let virtual_bucket = if width >= 64 {
        0
    } else {
        deadline_tick >> width
    };
    (virtual_bucket & ((1_u64 << shift) - 1)) as usize
}

/// Whether `level` can hold `deadline_tick` when the wheel's time is `elapsed_tick`
/// (Kafka's `expiration < currentTime + interval`, with `currentTime` the level's view of
/// `elapsed_tick`, rounded down to its bucket width).
///
/// Requires `deadline_tick > elapsed_tick`: due entries never enter a bucket.
pub(super) fn fits(shift: u32, level: usize, elapsed_tick: u64, deadline_tick: u64) -> bool {
    debug_assert!(deadline_tick > elapsed_tick);
    let span_shift = bucket_shift(shift, level + 1);
    if span_shift >= 64 {
        return true;
    }
    let level_now = bucket_start(shift, level, elapsed_tick);
    deadline_tick - level_now < 1_u64 << span_shift
}

/// The lowest level that holds `deadline_tick` at `elapsed_tick`.
pub(super) fn level_for(shift: u32, elapsed_tick: u64, deadline_tick: u64) -> usize {
    let mut level = 0;
    while !fits(shift, level, elapsed_tick, deadline_tick) {
        level += 1;
    }
    level
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same definitions in `u128`, written the slow and obvious way.
    fn width(shift: u32, level: usize) -> u128 {
        1_u128 << (shift as usize * level).min(127)
    }

    fn oracle_fits(shift: u32, level: usize, elapsed: u64, deadline: u64) -> bool {
        let level_now = (elapsed as u128 / width(shift, level)) * width(shift, level);
        (deadline as u128) < level_now + width(shift, level + 1)
    }

    fn shifts() -> [u32; 4] {
        [1, 2, 3, 6]
    }

    #[test]
    fn max_levels_covers_u64_and_no_more() {
        for shift in 1..=16 {
            let levels = max_levels(shift);
            assert!(bucket_shift(shift, levels) >= 64, "shift {shift}");
            assert!(bucket_shift(shift, levels - 1) < 64, "shift {shift}");
        }
        assert_eq!(max_levels(6), 11);
        assert_eq!(max_levels(1), 64);
    }

    #[test]
    fn fits_matches_oracle_exhaustively_on_small_ticks() {
        for shift in shifts() {
            for level in 0..4 {
                for elapsed in 0..300_u64 {
                    for deadline in elapsed + 1..elapsed + 600 {
                        assert_eq!(
                            fits(shift, level, elapsed, deadline),
                            oracle_fits(shift, level, elapsed, deadline),
                            "shift {shift} level {level} elapsed {elapsed} deadline {deadline}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn fits_at_the_top_of_u64() {
        for shift in shifts() {
            let top = max_levels(shift) - 1;
            for elapsed in [0, 1, u64::MAX / 2, u64::MAX - 1] {
                assert!(fits(shift, top, elapsed, u64::MAX), "shift {shift}");
                for level in 0..top {
                    assert_eq!(
                        fits(shift, level, elapsed, u64::MAX),
                        oracle_fits(shift, level, elapsed, u64::MAX),
                        "shift {shift} level {level} elapsed {elapsed}"
                    );
                }
            }
        }
    }

    #[test]
    fn level_for_is_lowest_fitting_level() {
        for shift in shifts() {
            for elapsed in [0_u64, 5, 63, 64, 1000, u64::MAX / 3] {
                for delta in (1..2000_u64).chain([1 << 20, 1 << 40, u64::MAX - elapsed]) {
                    let Some(deadline) = elapsed.checked_add(delta) else {
                        continue;
                    };
                    let level = level_for(shift, elapsed, deadline);
                    assert!(oracle_fits(shift, level, elapsed, deadline));
                    assert!(level == 0 || !oracle_fits(shift, level - 1, elapsed, deadline));
                    assert!(level < max_levels(shift));
                }
            }
        }
    }

    #[test]
    fn bucket_start_and_slot_agree_with_division() {
        for shift in shifts() {
            for level in 0..max_levels(shift) {
                for tick in (0..520_u64).chain([u64::MAX - 3, u64::MAX]) {
                    let w = width(shift, level);
                    let bucket = tick as u128 / w;
                    assert_eq!(bucket_start(shift, level, tick) as u128, bucket * w);
                    assert_eq!(slot(shift, level, tick) as u128, bucket % (1 << shift));
                }
            }
        }
    }

    /// The property the wheel relies on: entries placed in one level at one time have
    /// distinct bucket numbers in a window of `wheel_size - 1` values, so two live buckets
    /// never share a slot.
    #[test]
    fn one_level_window_never_wraps_onto_itself() {
        for shift in [1_u32, 2, 3] {
            for elapsed in 0..200_u64 {
                for level in 0..4 {
                    let mut seen = std::collections::HashMap::new();
                    for deadline in elapsed + 1..elapsed + 2000 {
                        if level_for(shift, elapsed, deadline) != level {
                            continue;
                        }
                        let start = bucket_start(shift, level, deadline);
                        assert!(start > elapsed, "bucket expires after now");
                        let previous = seen.insert(slot(shift, level, deadline), start);
                        assert!(previous.is_none_or(|p| p == start), "slot reused");
                    }
                }
            }
        }
    }
}
