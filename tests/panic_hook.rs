//! Another thread's panic hook does not hold up tickless timers (its own binary: it installs
//! a panic hook). A turn once swapped the process's panic hook, and `take_hook` waits for
//! every panic hook running elsewhere to return; turns no longer touch the hook.

use std::sync::mpsc;
use std::time::Duration;
use tickless::{Driver, Timer};

#[test]
fn another_threads_panic_hook_does_not_block_the_timer_pass() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let timer = runtime.block_on(async { Timer::builder().driver(Driver::Tokio).build().unwrap() });

    // A hook that, on the thread named "reporter", waits for the runtime to do something
    // (a crash reporter flushing through a task, say); a watchdog bounds the wait.
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (fired_tx, fired_rx) = mpsc::channel::<()>();
    let (outcome_tx, outcome_rx) = mpsc::channel::<bool>();
    let entered_tx = std::sync::Mutex::new(entered_tx);
    let fired_rx = std::sync::Mutex::new(fired_rx);
    std::panic::set_hook(Box::new(move |_| {
        if std::thread::current().name() != Some("reporter") {
            return;
        }
        entered_tx.lock().unwrap().send(()).unwrap();
        let got = fired_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(3))
            .is_ok();
        outcome_tx.send(got).unwrap();
    }));
    let reporter = std::thread::Builder::new()
        .name("reporter".into())
        .spawn(|| panic!("the reporter's own panic"))
        .unwrap();
    entered_rx.recv().unwrap();

    // The reporter is inside its hook. A 1 ms tickless sleep on the paused runtime.
    runtime.block_on(async {
        timer.sleep(Duration::from_millis(1)).await;
        fired_tx.send(()).unwrap();
    });
    assert!(reporter.join().is_err());
    let _ = std::panic::take_hook();
    assert!(
        outcome_rx.recv().unwrap(),
        "the tickless turn waited for another thread's panic hook to return"
    );
}
