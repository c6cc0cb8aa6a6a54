//! What tickless does in a program built with `panic = "abort"`, where nothing can be
//! caught, so no probe for a runtime's time driver is made. `scripts/abort-check.sh`
//! builds this with the `abort-check` profile and checks both cases:
//!
//! - `with-time`: a runtime with time: tickless works inside tokio's timer, as always;
//! - `without-time`: a runtime built without `enable_time`: the first tickless timer
//!   aborts the process with tokio's own message, as `tokio::time::sleep` does there.
//!
//! (Built normally, panics unwind, the probe is made quietly, and `without-time` uses the
//! process-wide timer instead: `tests/time_disabled.rs`.)

use std::time::Duration;

fn main() {
    let case = std::env::args().nth(1).unwrap_or_default();
    let builder = || tokio::runtime::Builder::new_current_thread();
    match case.as_str() {
        "with-time" => {
            let runtime = builder().enable_time().start_paused(true).build().unwrap();
            runtime.block_on(async {
                let start = tokio::time::Instant::now();
                tickless::sleep(Duration::from_secs(3600)).await;
                assert_eq!(start.elapsed(), Duration::from_secs(3600));
                let timer = tickless::Timer::builder()
                    .driver(tickless::Driver::Tokio)
                    .build()
                    .expect("a tokio-driven timer");
                timer.sleep(Duration::from_millis(5)).await;
            });
            println!("with-time: ok");
        }
        "without-time" => {
            let runtime = builder().build().unwrap();
            runtime.block_on(async { tickless::sleep(Duration::from_millis(1)).await });
            println!("without-time: completed (expected tokio's abort)");
        }
        other => {
            eprintln!("usage: tickless-abort-check with-time|without-time (got {other:?})");
            std::process::exit(2);
        }
    }
}
