//! A tokio-driven timer built while the thread unwinds (a `Drop` making one) fires like any
//! other (its own binary: in a debug build the bug it pins aborted the process). It used
//! to get an alarm that was never polled, so tokio's timer held no waker of ours.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::Duration;
use tickless::Timer;

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn a_timer_built_while_unwinding_fires() {
    // The runtime has been asked about once already (its answer is remembered).
    drop(Timer::new());
    static BUILT: Mutex<Option<Timer>> = Mutex::new(None);
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            *BUILT.lock().unwrap() = Some(Timer::new());
        }
    }
    let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _guard = Guard;
        panic!("a task's own panic");
    }));
    assert!(caught.is_err());
    let timer = BUILT.lock().unwrap().take().unwrap();
    let on_time = tokio::time::timeout(2 * HOUR, timer.sleep(HOUR)).await;
    assert!(
        on_time.is_ok(),
        "a 1 h sleep on it did not complete within 2 h"
    );
}
