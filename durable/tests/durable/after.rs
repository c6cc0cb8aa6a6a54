//! `When::After(d)`: due no earlier than Redis's clock when the call was sent, plus d.

use super::queue;
use std::time::{Duration, UNIX_EPOCH};
use support::RedisServer;
use tickless_durable::JobState;
use tickless_test_support as support;

/// Redis `TIME` read on another connection just before each `schedule`, with delays of
/// odd microseconds: each job's due time is at least that reading plus its delay. Redis
/// answers `TIME` from the system clock at each call (`gettimeofday`, not a time cached
/// per event-loop pass or per script), so the script's reading, taken after the call
/// arrived, is never earlier than the caller's. `After(Duration::ZERO)` is the exception
/// README names: due at once, at Redis's now rounded down to the millisecond (so up to
/// 0.999 ms before the caller's reading), and ready at once.
#[tokio::test]
async fn a_delay_counts_from_no_earlier_than_the_callers_reading_of_redis_time() {
    let server = RedisServer::start();
    let queue = queue(&server, "after").await;
    let mut admin = server.admin().await;
    let mut early = Vec::new();
    for i in 0..600u64 {
        let delay = Duration::from_micros(if i % 10 == 0 { 0 } else { i * 7_919 % 10_000 });
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut admin).await.unwrap();
        let id = format!("j{i}");
        assert!(queue.schedule(&id, b"", delay).await.unwrap());
        let job = queue.job(&id).await.unwrap().unwrap();
        let due_us = job.due.duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
        let called_us = s * 1_000_000 + us;
        let floor = if delay.is_zero() {
            assert_eq!(job.state, JobState::Ready, "{id}: due at once");
            called_us - called_us % 1_000
        } else {
            called_us + delay.as_micros() as u64
        };
        if due_us < floor {
            early.push((delay, floor - due_us));
        }
    }
    assert!(early.is_empty(), "(delay, µs early): {early:?}");
}
