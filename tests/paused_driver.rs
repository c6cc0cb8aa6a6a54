//! The tokio driver under a paused clock: idle, unwinding, and used from outside the
//! runtime. (From a review; each failed on the code it reviewed.)

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;
use tickless::{Driver, Timer};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

/// tokio parks a paused runtime that has no timer until something wakes it; it does not
/// move the clock. A tickless timer that waits for nothing must not change that.
#[tokio::test(start_paused = true)]
async fn an_idle_tickless_timer_does_not_move_a_paused_clock() {
    let timer = Timer::new();
    // Use it once, so it certainly holds nothing afterwards.
    timer.sleep(MS).await;
    let start = Instant::now();
    let turns = timer.stats().driver_wakeups;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let watched = timer.clone();
    // Sends once the driver has turned again (the bug), or after a real-time watchdog.
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_millis(300);
        while watched.stats().driver_wakeups == turns && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let _ = tx.send(watched.stats().driver_wakeups - turns);
    });
    let extra_turns = rx.await.unwrap();
    let moved = Instant::now() - start;
    assert_eq!(
        (moved, extra_turns),
        (Duration::ZERO, 0),
        "the paused clock moved, or the driver turned, while the runtime was idle"
    );
}

/// A `Drop` that resets a timer while its thread unwinds (a guard re-scheduling a
/// watchdog, say) must not make tickless believe the runtime has shut down.
#[tokio::test(start_paused = true)]
async fn a_reset_while_unwinding_does_not_stop_the_runtime_driver() {
    let timer = Timer::builder().driver(Driver::Tokio).build().unwrap();
    let start = timer.now();
    // Arms tokio's alarm an hour away; then tokio's time moves on without a turn.
    let mut far = timer.sleep(HOUR);
    assert!(Pin::new(&mut far)
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending());
    tokio::time::advance(10 * MS).await;

    struct Guard(tickless::Sleep, Instant);
    impl Drop for Guard {
        fn drop(&mut self) {
            Pin::new(&mut self.0).reset(self.1);
        }
    }
    let guard = Guard(timer.sleep(2 * HOUR), start + 5 * MS);
    let caught = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let _guard = guard;
        panic!("a task's own panic");
    }));
    assert!(caught.is_err());

    // The runtime is alive: a tickless sleep still follows its paused clock.
    let on_time = tokio::time::timeout(2 * HOUR, timer.sleep(HOUR)).await;
    assert!(
        on_time.is_ok(),
        "a 1 h tickless sleep did not complete within 2 h of paused time"
    );
}

/// The probe for "has this runtime time enabled" made while a thread unwinds (a `Drop`
/// making a timeout, say) must not be remembered as "no".
#[test]
fn a_first_use_while_unwinding_does_not_disable_the_runtime_timer() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    struct Guard(tokio::runtime::Handle);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _enter = self.0.enter();
            // Spawning a cleanup with a timeout: the first tickless use on this runtime.
            drop(tickless::timeout(Duration::from_secs(5), async {}));
        }
    }
    let caught = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let _guard = Guard(handle);
        panic!("a task's own panic");
    }));
    assert!(caught.is_err());
    runtime.block_on(async {
        let built = Timer::builder().driver(Driver::Tokio).build();
        assert!(
            built.is_ok(),
            "Driver::Tokio refused on a runtime with time: {:?}",
            built.err()
        );
        let start = Instant::now();
        tokio::time::advance(HOUR).await;
        let drift = Timer::current().now().saturating_duration_since(start);
        assert!(
            drift >= HOUR,
            "the current timer does not follow the paused clock (it moved {drift:?})"
        );
    });
}

/// `Sleep` is `Send` and its `reset` needs no runtime context (as tokio's). Reset from a
/// plain thread, a tokio-driven timer must still judge "already due" by its runtime's
/// (paused) clock, not by the real clock that thread reads.
#[tokio::test(start_paused = true)]
async fn a_reset_from_outside_the_runtime_is_not_judged_on_the_real_clock() {
    let timer = Timer::builder().driver(Driver::Tokio).build().unwrap();
    let deadline = Instant::now() + 10 * MS; // on the paused clock
    let mut sleep = timer.sleep(HOUR);
    assert!(Pin::new(&mut sleep)
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending());
    let sleep = std::thread::spawn(move || {
        // Real time passes the deadline; the paused clock stays where it is.
        while std::time::Instant::now() <= deadline.into_std() {
            std::thread::yield_now();
        }
        Pin::new(&mut sleep).reset(deadline);
        sleep
    })
    .join()
    .unwrap();
    assert!(
        Instant::now() < deadline,
        "setup: the paused clock has not moved"
    );
    assert!(
        !sleep.is_elapsed(),
        "fired at {:?} on the paused clock, before its deadline {:?}",
        Instant::now(),
        deadline
    );
}
