//! A timer made in the context of a runtime whose time driver has shut down (a blocking
//! task still running after `shutdown_background`: tokio keeps that thread in the
//! runtime's context) is handed to a driver thread, without a panic.

use std::sync::mpsc;
use std::time::Duration;
use tickless::{Driver, Timer};

#[test]
fn a_timer_built_after_the_runtime_shut_down_works() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    // Ask once while the runtime runs, as an application would have.
    runtime.block_on(async { tickless::sleep(Duration::from_millis(1)).await });
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    runtime.spawn_blocking(move || {
        go_rx.recv().unwrap();
        let in_context = tokio::runtime::Handle::try_current().is_ok();
        let built = std::panic::catch_unwind(|| {
            let timer = Timer::builder().driver(Driver::Tokio).build().unwrap();
            futures::executor::block_on(timer.sleep(Duration::from_millis(1)));
        });
        done_tx.send((in_context, built.is_ok())).unwrap();
    });
    runtime.shutdown_background();
    go_tx.send(()).unwrap();
    let (in_context, ok) = done_rx.recv().unwrap();
    assert!(
        in_context,
        "setup: the blocking thread is in the runtime's context"
    );
    assert!(
        ok,
        "building (or using) a timer on a shut-down runtime panicked"
    );
}
