//! `Interval`: scheduled instants, missed-tick behaviours, resets, zero period, `Stream`.
//!
//! All on tokio's paused clock, so every instant is exact.

use futures::StreamExt;
use std::time::Duration;
use tickless::{Instant, Interval, MissedTickBehavior, Timer};

const MS: Duration = Duration::from_millis(1);

/// The next `n` ticks, as offsets from `origin` in ms.
async fn ticks(interval: &mut Interval, origin: Instant, n: usize) -> Vec<u64> {
    let mut offsets = Vec::new();
    for _ in 0..n {
        offsets.push((interval.tick().await - origin).as_millis() as u64);
    }
    offsets
}

#[tokio::test(start_paused = true)]
async fn first_tick_is_immediate_then_every_period_at_the_scheduled_instants() {
    let start = Instant::now();
    let mut interval = tickless::interval(10 * MS);
    assert_eq!(interval.period(), 10 * MS);
    assert_eq!(ticks(&mut interval, start, 4).await, [0, 10, 20, 30]);
    assert_eq!(Instant::now() - start, 30 * MS);
}

#[tokio::test(start_paused = true)]
async fn interval_at_starts_at_start() {
    let start = Instant::now();
    let mut interval = tickless::interval_at(start + 25 * MS, 10 * MS);
    assert_eq!(ticks(&mut interval, start, 3).await, [25, 35, 45]);
}

/// Ticks due at 0, 10, 20, ...; the consumer stalls until 35 ms after the first.
async fn after_a_stall(behavior: MissedTickBehavior) -> Vec<u64> {
    let start = Instant::now();
    let mut interval = tickless::interval(10 * MS);
    interval.set_missed_tick_behavior(behavior);
    assert_eq!(interval.missed_tick_behavior(), behavior);
    interval.tick().await;
    tokio::time::advance(35 * MS).await;
    ticks(&mut interval, start, 5).await
}

#[tokio::test(start_paused = true)]
async fn burst_catches_up_at_once_and_is_the_default() {
    assert_eq!(
        tickless::interval(MS).missed_tick_behavior(),
        MissedTickBehavior::Burst
    );
    assert_eq!(
        after_a_stall(MissedTickBehavior::Burst).await,
        [10, 20, 30, 40, 50]
    );
}

#[tokio::test(start_paused = true)]
async fn delay_restarts_the_period_from_when_the_late_tick_was_seen() {
    assert_eq!(
        after_a_stall(MissedTickBehavior::Delay).await,
        [10, 45, 55, 65, 75]
    );
}

#[tokio::test(start_paused = true)]
async fn skip_drops_missed_ticks_and_keeps_the_grid() {
    assert_eq!(
        after_a_stall(MissedTickBehavior::Skip).await,
        [10, 40, 50, 60, 70]
    );
}

#[tokio::test(start_paused = true)]
async fn resets_move_the_next_tick() {
    let start = Instant::now();
    let mut interval = tickless::interval(10 * MS);
    interval.tick().await;

    interval.reset();
    assert_eq!(ticks(&mut interval, start, 1).await, [10]);
    interval.reset_after(3 * MS);
    assert_eq!(ticks(&mut interval, start, 2).await, [13, 23]);
    interval.reset_at(start + 100 * MS);
    assert_eq!(ticks(&mut interval, start, 2).await, [100, 110]);
    interval.reset_immediately();
    assert_eq!(ticks(&mut interval, start, 2).await, [110, 120]);
}

#[tokio::test(start_paused = true)]
async fn an_interval_is_a_stream_of_scheduled_instants() {
    let start = Instant::now();
    let offsets: Vec<u64> = tickless::interval(7 * MS)
        .take(4)
        .map(|tick| (tick - start).as_millis() as u64)
        .collect()
        .await;
    assert_eq!(offsets, [0, 7, 14, 21]);
}

#[test]
#[should_panic(expected = "`period` must be non-zero: pass a positive Duration")]
fn a_zero_period_panics_like_tokio_with_a_hint() {
    let timer = Timer::builder()
        .driver(tickless::Driver::Thread)
        .build()
        .unwrap();
    let _interval = timer.interval(Duration::ZERO);
}

#[test]
fn try_interval_turns_a_zero_period_into_an_error() {
    let timer = Timer::builder()
        .driver(tickless::Driver::Thread)
        .build()
        .unwrap();
    let error = timer.try_interval(Duration::ZERO).unwrap_err();
    assert_eq!(error.to_string(), "`period` must be non-zero");
    assert!(timer.try_interval_at(Instant::now(), MS).is_ok());
}

#[tokio::test(start_paused = true)]
async fn interval_is_unpin_and_frees_its_timer_when_dropped() {
    fn assert_unpin<T: Unpin>(_: &T) {}
    let mut interval = tickless::interval(Duration::from_secs(60));
    assert_unpin(&interval);
    interval.tick().await;
    let pending = tokio::time::timeout(MS, interval.tick()).await;
    assert!(pending.is_err(), "the second tick is a minute away");
    assert_eq!(Timer::current().stats().registered, 1);
    drop(interval);
    assert_eq!(Timer::current().stats().registered, 0);
}

#[tokio::test(start_paused = true)]
async fn a_huge_period_neither_panics_nor_ticks() {
    let mut interval = tickless::interval(Duration::MAX);
    interval.tick().await;
    let second = tokio::time::timeout(Duration::from_secs(3600), interval.tick()).await;
    assert!(second.is_err());
}
