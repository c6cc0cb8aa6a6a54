//! From `tokio::time`'s own types to tickless's: for a library whose public API now takes
//! tickless's `Sleep`, `Interval` or `Elapsed` (other types than tokio's, with the same
//! names) and a caller that still holds tokio's.
//!
//! On tokio's paused clock: exact, and instant in wall time.

use std::time::Duration;
use tickless::error::Elapsed;
use tickless::{Instant, Interval, MissedTickBehavior, Sleep};

const MS: Duration = Duration::from_millis(1);

const BEHAVIOURS: [(tokio::time::MissedTickBehavior, MissedTickBehavior); 3] = [
    (
        tokio::time::MissedTickBehavior::Burst,
        MissedTickBehavior::Burst,
    ),
    (
        tokio::time::MissedTickBehavior::Delay,
        MissedTickBehavior::Delay,
    ),
    (
        tokio::time::MissedTickBehavior::Skip,
        MissedTickBehavior::Skip,
    ),
];

#[tokio::test(start_paused = true)]
async fn sleep_from_tokio_keeps_its_deadline_and_completes_there() {
    let start = Instant::now();
    let mut theirs = Box::pin(tokio::time::sleep(Duration::from_secs(60)));
    theirs.as_mut().reset(start + 25 * MS);
    let ours = Sleep::from_tokio(&theirs);
    assert_eq!(
        ours.deadline(),
        start + 25 * MS,
        "the deadline after tokio's reset"
    );
    drop(theirs);
    ours.await;
    assert_eq!(Instant::now() - start, 25 * MS);
}

#[test]
fn missed_tick_behavior_converts_both_ways() {
    for (theirs, ours) in BEHAVIOURS {
        assert_eq!(MissedTickBehavior::from(theirs), ours);
        assert_eq!(tokio::time::MissedTickBehavior::from(ours), theirs);
    }
}

/// The ticks of `interval` as ms from its first, with a 35 ms stall after the first: what
/// each missed-tick behaviour changes.
async fn ticks_around_a_stall(mut tick: impl AsyncFnMut() -> Instant) -> Vec<u64> {
    let first = tick().await;
    tokio::time::sleep(35 * MS).await;
    let mut offsets = vec![0];
    for _ in 0..5 {
        offsets.push((tick().await - first).as_millis() as u64);
    }
    offsets
}

#[tokio::test(start_paused = true)]
async fn interval_from_tokio_ticks_as_a_fresh_tokio_interval_does_for_each_behaviour() {
    let fresh = |behavior| {
        let mut interval = tokio::time::interval(10 * MS);
        interval.set_missed_tick_behavior(behavior);
        interval
    };
    for (behavior, _) in BEHAVIOURS {
        let mut theirs = fresh(behavior);
        let expected = ticks_around_a_stall(async || theirs.tick().await).await;

        let mut ours = Interval::from_tokio(&fresh(behavior));
        assert_eq!(ours.period(), 10 * MS);
        assert_eq!(ours.missed_tick_behavior(), behavior.into());
        let got = ticks_around_a_stall(async || ours.tick().await).await;
        assert_eq!(got, expected, "{behavior:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn elapsed_from_tokio_is_ours_and_still_a_timed_out_io_error() {
    let timed_out = || tokio::time::timeout(Duration::ZERO, std::future::pending::<()>());
    let theirs = timed_out().await.unwrap_err();
    let ours = Elapsed::from(timed_out().await.unwrap_err());
    assert_eq!(ours.to_string(), theirs.to_string());
    let (ours, theirs) = (std::io::Error::from(ours), std::io::Error::from(theirs));
    assert_eq!(ours.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(ours.kind(), theirs.kind());
    // tokio's is the bare kind ("timed out"); ours carries the `Elapsed` as its source.
    assert_eq!(ours.to_string(), "deadline has elapsed");
}

/// A user's error type after the `use`-line switch: its `From` names tickless's `Elapsed`.
#[derive(Debug, PartialEq)]
enum FetchError {
    TimedOut,
}

impl From<Elapsed> for FetchError {
    fn from(_: Elapsed) -> FetchError {
        FetchError::TimedOut
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_type_from_tickless_elapsed_takes_both_timeouts_with_question_mark() {
    async fn fetch() -> Result<(), FetchError> {
        tickless::timeout(MS, std::future::pending::<()>()).await?;
        Ok(())
    }
    async fn fetch_through_a_tokio_library() -> Result<(), FetchError> {
        tokio::time::timeout(MS, std::future::pending::<()>())
            .await
            .map_err(Elapsed::from)?;
        Ok(())
    }
    assert_eq!(fetch().await, Err(FetchError::TimedOut));
    assert_eq!(
        fetch_through_a_tokio_library().await,
        Err(FetchError::TimedOut)
    );
}
