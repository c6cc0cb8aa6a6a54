// A tokio-style program with no `use` lines of its own: `tests/use_line.rs` includes it
// twice, once after `use tokio::time::{...}` and once after `use tickless::{...}`.

/// A heartbeat every 10 ms, work with a 25 ms timeout, a deadline reset once, and a
/// shutdown after 100 ms; returns what happened and when (ms from the start).
pub async fn run() -> Vec<(u64, &'static str)> {
    let start = Instant::now();
    let at = |label| ((Instant::now() - start).as_millis() as u64, label);
    let mut events = Vec::new();

    let mut heartbeat = interval(Duration::from_millis(10));
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let shutdown = sleep(Duration::from_millis(100));
    tokio::pin!(shutdown);
    let work = timeout(Duration::from_millis(25), sleep(Duration::from_millis(40)));
    tokio::pin!(work);
    let mut working = true;

    loop {
        // `biased`: when two branches are ready at the same instant, poll in this order
        // (select! otherwise picks at random, which no two runs would agree on).
        tokio::select! {
            biased;
            () = &mut shutdown => {
                events.push(at("shutdown"));
                break;
            }
            result = &mut work, if working => {
                working = false;
                let result: Result<(), error::Elapsed> = result;
                events.push(at(if result.is_ok() { "work done" } else { "work timed out" }));
                shutdown.as_mut().reset(Instant::now() + Duration::from_millis(30));
                events.push(at("shutdown moved"));
            }
            _ = heartbeat.tick() => events.push(at("heartbeat")),
        }
    }
    let late = timeout_at(Instant::now() + Duration::from_millis(5), std::future::pending::<()>()).await;
    events.push(at(if late.is_err() { "final timeout" } else { "impossible" }));
    sleep_until(Instant::now() + Duration::from_millis(1)).await;
    events.push(at("end"));
    events
}
