//! Soak: 10,000,000 timers churned on one shared timer by tasks on every worker thread,
//! some firing, most cancelled. Memory returns to where it stood after the warm-up, and
//! the wheel holds nothing at the end. (Its own test binary: it reads the process's RSS.)

use tickless_test_support as support;

use std::time::Duration;
use tickless::Timer;

/// Resident set size in bytes, from `/proc` (so the memory half of this test runs on
/// Linux only; elsewhere the binary keeps the churn and the "nothing left" check).
#[cfg(target_os = "linux")]
fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .expect("statm's second field: resident pages");
    Some(pages * 4096)
}

#[cfg(not(target_os = "linux"))]
fn rss() -> Option<u64> {
    None
}

/// `total` timers over 8 tasks: each keeps a ring of 64, replacing one per step (the old
/// one cancelled if still pending), deadlines up to 200 us ahead, so that some fire.
async fn churn(timer: &Timer, total: u64) {
    const TASKS: u64 = 8;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let timer = timer.clone();
            tokio::spawn(async move {
                let mut ring: Vec<Option<tickless::Sleep>> = (0..64).map(|_| None).collect();
                let mut fired = 0_u64;
                for i in 0..total / TASKS {
                    let slot = &mut ring[(i % 64) as usize];
                    if let Some(old) = slot.take() {
                        fired += u64::from(old.is_elapsed());
                    }
                    let ahead = Duration::from_nanos((i * 7_919 + t * 104_729) % 200_000);
                    let mut sleep = timer.sleep(ahead);
                    let _ = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(std::pin::Pin::new(&mut sleep).poll(cx))
                    })
                    .await;
                    *slot = Some(sleep);
                    if i % 64 == 63 {
                        tokio::task::yield_now().await;
                    }
                }
                fired
            })
        })
        .collect();
    let mut fired = 0;
    for task in tasks {
        fired += task.await.unwrap();
    }
    assert!(
        fired > 0,
        "no timer fired: the churn did not exercise firing"
    );
}

use std::future::Future as _;

#[test]
fn ten_million_timers_churned_across_workers_leave_memory_and_the_wheel_as_they_were() {
    let runtime = support::multi_thread();
    runtime.block_on(async {
        let timer = Timer::new();
        churn(&timer, 1_000_000).await; // warm-up: slabs, buckets and queues grown
        let before = rss();
        churn(&timer, 9_000_000).await;
        let after = rss();
        assert_eq!(timer.stats().registered, 0, "entries left in the wheel");
        if let (Some(before), Some(after)) = (before, after) {
            let grown = after.saturating_sub(before);
            assert!(
                grown < 4 << 20,
                "memory grew by {grown} bytes over 9,000,000 timers after warm-up"
            );
        }
    });
}
