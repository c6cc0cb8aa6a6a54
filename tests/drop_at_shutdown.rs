//! A task's `Drop` that blocks on a tickless timer while its runtime shuts down (the
//! runtime drops every task first): the README's promise that a driver thread takes over
//! when the runtime goes, tested where tokio itself would hang. The one exception, stated
//! in the README: a current-thread runtime's own timer, which nothing can drive while that
//! runtime's only thread is blocked in the drop (tokio's hang, kept); a thread-driven
//! timer serves there.

use tickless_test_support as support;

use std::time::Duration;
use support::*;
use tickless::Timer;

/// Blocks on a 10 ms sleep (or timeout) of `timer` (the default if `None`) when dropped.
struct BlockingDrop {
    timer: Option<Timer>,
    timeout: bool,
}

impl Drop for BlockingDrop {
    fn drop(&mut self) {
        let wait = Duration::from_millis(10);
        let start = std::time::Instant::now();
        match (&self.timer, self.timeout) {
            (Some(timer), false) => futures::executor::block_on(timer.sleep(wait)),
            (None, false) => futures::executor::block_on(tickless::sleep(wait)),
            (Some(timer), true) => {
                let pending = std::future::pending::<()>();
                assert!(futures::executor::block_on(timer.timeout(wait, pending)).is_err());
            }
            (None, true) => {
                let pending = std::future::pending::<()>();
                assert!(futures::executor::block_on(tickless::timeout(wait, pending)).is_err());
            }
        }
        assert!(start.elapsed() >= wait, "never early");
    }
}

#[derive(Clone, Copy, Debug)]
enum Flavor {
    MultiThread,
    #[cfg(tokio_unstable)]
    MultiThreadAltTimer,
    /// A current-thread runtime, its tasks' timers driven by a thread.
    CurrentThreadWithThreadDriver,
}

fn case(flavor: Flavor, own_timer: bool, timeout: bool, spawn_first: bool) {
    let runtime = match flavor {
        Flavor::MultiThread => Ok(support::multi_thread_standard_timer()),
        #[cfg(tokio_unstable)]
        Flavor::MultiThreadAltTimer => Ok(support::alt_timer()),
        Flavor::CurrentThreadWithThreadDriver => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build(),
    }
    .unwrap();
    let thread_driven = matches!(flavor, Flavor::CurrentThreadWithThreadDriver);
    let own_timer = own_timer || thread_driven;
    let make_timer = move || {
        if thread_driven {
            Timer::builder()
                .driver(tickless::Driver::Thread)
                .build()
                .unwrap()
        } else {
            Timer::new()
        }
    };
    runtime.block_on(async {
        let spawn = |timer: Option<Timer>| {
            tokio::spawn(async move {
                let _guard = BlockingDrop { timer, timeout };
                std::future::pending::<()>().await;
            })
        };
        let timer = own_timer.then(make_timer);
        if spawn_first {
            spawn(timer.clone());
            // The timer's first use after the task is spawned.
            tickless::sleep(Duration::from_millis(1)).await;
            if let Some(timer) = &timer {
                timer.sleep(Duration::from_millis(1)).await;
            }
        } else {
            tickless::sleep(Duration::from_millis(1)).await;
            if let Some(timer) = &timer {
                timer.sleep(Duration::from_millis(1)).await;
            }
            spawn(timer.clone());
        }
        tokio::task::yield_now().await;
    });
    drop(runtime);
}

#[test]
fn a_drop_blocking_on_a_timer_during_shutdown_finishes() {
    for flavor in [
        Flavor::MultiThread,
        #[cfg(tokio_unstable)]
        Flavor::MultiThreadAltTimer,
        Flavor::CurrentThreadWithThreadDriver,
    ] {
        for own_timer in [false, true] {
            for timeout in [false, true] {
                for spawn_first in [false, true] {
                    let name = format!(
                        "{flavor:?} own {own_timer} timeout {timeout} spawned first {spawn_first}"
                    );
                    within(Duration::from_secs(10), &name, move || {
                        case(flavor, own_timer, timeout, spawn_first)
                    });
                }
            }
        }
    }
}
