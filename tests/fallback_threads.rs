//! Runtimes built without `enable_time` share one fallback timer, and leave no driver
//! thread behind each. Its own test binary, so that no sibling test starts driver threads
//! while it counts them; Linux only, where `/proc` lists a process's threads by name.
#![cfg(target_os = "linux")]

use std::time::Duration;

/// The threads of this process named `tickless-driver`.
fn driver_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists this process's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "tickless-driver")
        .count()
}

/// Issue 8, defect 3: runtimes without time do not each leak a timer and a driver thread.
#[test]
fn runtimes_without_time_share_one_fallback_timer_and_leak_no_threads() {
    assert_eq!(driver_threads(), 0, "nothing has used tickless yet");
    for _ in 0..10 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // Inside the runtime, so that its default timer is asked for.
        runtime.block_on(async { tickless::sleep(Duration::from_millis(1)).await });
        drop(runtime);
    }
    assert_eq!(
        driver_threads(),
        1,
        "the one process-wide fallback timer's driver, and no other"
    );
}
