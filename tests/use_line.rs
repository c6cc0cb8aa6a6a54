//! Switching from `tokio::time` is a `use` line: one program source, compiled against
//! each, gives the same events on a paused clock.

mod with_tokio {
    #[allow(unused_imports)]
    use tokio::time::{
        error, interval, interval_at, sleep, sleep_until, timeout, timeout_at, Duration, Instant,
        Interval, MissedTickBehavior, Sleep, Timeout,
    };
    include!("use_line/program.rs");
}

mod with_tickless {
    #[allow(unused_imports)]
    use tickless::{
        error, interval, interval_at, sleep, sleep_until, timeout, timeout_at, Duration, Instant,
        Interval, MissedTickBehavior, Sleep, Timeout,
    };
    include!("use_line/program.rs");
}

#[tokio::test(start_paused = true)]
async fn the_same_program_behaves_the_same_on_both() {
    let tokio = with_tokio::run().await;
    let tickless = with_tickless::run().await;
    assert!(tokio.contains(&(25, "work timed out")), "{tokio:?}");
    assert!(tokio.contains(&(55, "shutdown")), "{tokio:?}");
    assert_eq!(tickless, tokio);
}
