//! A runtime built without `enable_time`: tickless falls back to its process-wide timer,
//! and finding out raises no panic the user can see: no message, the user's panic hook
//! not called. (Its own test binary: it installs a panic hook.)
//!
//! Under `panic = "abort"` nothing can be caught, so the probe is not made: time is
//! taken to be enabled and such a runtime aborts on the first timer with tokio's own
//! message, as `tokio::time::sleep` does; `scripts/abort-check.sh` checks that build.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickless::{Driver, Timer};

#[test]
fn a_runtime_without_time_falls_back_quietly() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    std::panic::set_hook(Box::new(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    }));
    // Outside any runtime: the process-wide timer, on its driver thread.
    let process_wide = Timer::current();
    for _ in 0..3 {
        let process_wide = process_wide.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            tickless::sleep(Duration::from_millis(1)).await;
            let error = Timer::builder().driver(Driver::Tokio).build().unwrap_err();
            assert!(error.to_string().contains("enable_time"), "{error}");
            assert!(
                Timer::current().same_timer(&process_wide),
                "the fallback is the process-wide timer"
            );
        });
    }
    let _ = std::panic::take_hook();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the user's panic hook ran");
    // A panic of the user's own still reaches the user's hook: only the probe is quiet.
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    std::panic::set_hook(Box::new(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async { tickless::sleep(Duration::from_millis(1)).await });
    assert!(std::panic::catch_unwind(|| panic!("the user's own")).is_err());
    let _ = std::panic::take_hook();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
