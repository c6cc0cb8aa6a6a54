//! The driver: no empty ticks, notifications only when needed, resilience, shutdown,
//! the thread driver, and configuration errors.

use tickless_test_support as support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tickless::{Driver, Instant, Timer};
use tokio_test::{assert_pending, task};

const MS: Duration = Duration::from_millis(1);

/// The limit for a test on the real clock: far beyond its deadlines, so a lost timer
/// fails the test instead of hanging it.
const WATCHDOG: Duration = Duration::from_secs(10);

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn ten_ms_and_one_hour_cost_a_handful_of_wakeups_not_thousands() {
    let timer = Timer::new();
    let start = Instant::now();
    let short = timer.sleep(10 * MS);
    let long = timer.sleep(Duration::from_secs(3600));
    tokio::join!(short, long);
    assert!(Instant::now() - start >= Duration::from_secs(3600));
    let stats = timer.stats();
    assert_eq!(stats.entries_fired, 2);
    assert!(
        stats.driver_wakeups <= 10,
        "{} wakeups for two timers",
        stats.driver_wakeups
    );
    assert_eq!(stats.registered, 0);
}

#[tokio::test(start_paused = true)]
async fn later_inserts_leave_the_driver_alone_and_earlier_ones_wake_it() {
    let timer = Timer::new();
    let mut near = task::spawn(timer.sleep(10 * MS));
    assert_pending!(near.poll());
    tokio::task::yield_now().await; // the driver arms for 10 ms
    let armed = timer.stats().driver_wakeups;

    let mut later: Vec<_> = (1..=1000)
        .map(|i| task::spawn(timer.sleep(Duration::from_secs(i))))
        .collect();
    for sleep in &mut later {
        assert_pending!(sleep.poll());
    }
    tokio::task::yield_now().await;
    assert_eq!(
        timer.stats().driver_wakeups,
        armed,
        "later inserts woke the driver"
    );

    // An earlier insert moves the driver's alarm (tokio's timer) earlier, without a turn.
    let start = Instant::now();
    let mut earlier = task::spawn(timer.sleep(2 * MS));
    assert_pending!(earlier.poll());
    tokio::task::yield_now().await;
    assert_eq!(timer.stats().driver_wakeups, armed, "re-armed, not turned");
    tokio::time::sleep(2 * MS).await;
    assert!(earlier.is_woken(), "woken at 2 ms, not at 10 ms");
    assert_eq!(Instant::now() - start, 2 * MS);
}

struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a user waker panicked (expected by this test)");
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_waker_neither_stops_the_driver_nor_loses_other_timers() {
    let timer = Timer::new();
    let waker = Waker::from(Arc::new(PanickingWaker));
    let mut doomed = timer.sleep(5 * MS);
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut doomed).poll(&mut cx).is_pending());

    let fired = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for millis in [5_u64, 5, 6, 50] {
        let (timer, fired) = (timer.clone(), fired.clone());
        tasks.push(tokio::spawn(async move {
            timer.sleep(Duration::from_millis(millis)).await;
            fired.fetch_add(1, Ordering::SeqCst);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(fired.load(Ordering::SeqCst), 4);
    assert_eq!(timer.stats().waker_panics, 1);
    // The driver still runs.
    timer.sleep(100 * MS).await;
    assert!(Pin::new(&mut doomed).poll(&mut cx).is_ready());
}

/// Polls `future` once with a no-op waker.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = Waker::noop();
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

#[test]
fn a_sleep_registered_before_its_runtime_shut_down_completes_after_on_a_driver_thread() {
    support::within(WATCHDOG, "a sleep whose runtime shut down", || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let mut sleep = {
            let _enter = runtime.enter();
            tickless::sleep(30 * MS)
        };
        runtime.block_on(async { assert!(poll_once(&mut sleep).is_pending()) });
        drop(runtime);
        let deadline = sleep.deadline();
        futures::executor::block_on(&mut sleep);
        assert!(Instant::now() >= deadline, "never early");
        assert!(sleep.is_elapsed());
    });
}

#[test]
fn a_timer_outlives_its_runtime_and_keeps_working() {
    support::within(
        WATCHDOG,
        "a timer outlives its runtime and keeps working",
        || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let (timer, mut unpolled) = runtime.block_on(async {
                let timer = Timer::new();
                timer.sleep(MS).await;
                let unpolled = timer.sleep(20 * MS);
                (timer, unpolled)
            });
            drop(runtime);
            futures::executor::block_on(async {
                timer.sleep(5 * MS).await;
                (&mut unpolled).await;
            });
            assert!(unpolled.is_elapsed());
            assert_eq!(timer.stats().registered, 0);
        },
    );
}

#[test]
fn a_runtime_shut_down_mid_wait_wakes_its_waiters() {
    support::within(
        WATCHDOG,
        "a runtime shut down mid wait wakes its waiters",
        || {
            // A task of another executor waits on a timer whose runtime then shuts down: it is
            // woken, re-polls, and a driver thread carries its sleep to the deadline.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let timer = runtime.block_on(async { Timer::new() });
            let mut sleep = timer.sleep(40 * MS);
            let deadline = sleep.deadline();
            let (registered, is_registered) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                futures::executor::block_on(std::future::poll_fn(|cx| {
                    let poll = Pin::new(&mut sleep).poll(cx);
                    let _ = registered.send(());
                    poll
                }))
            });
            is_registered.recv().unwrap();
            assert_eq!(timer.stats().registered, 1);
            drop(runtime);
            waiter.join().unwrap();
            assert!(Instant::now() >= deadline);
        },
    );
}

#[test]
fn thread_driver_works_under_futures_block_on() {
    support::within(
        WATCHDOG,
        "thread driver works under futures block on",
        || {
            let timer = Timer::builder()
                .driver(Driver::Thread)
                .tick(Duration::from_micros(100))
                .build()
                .unwrap();
            let start = Instant::now();
            futures::executor::block_on(async {
                let results =
                    futures::future::join_all((1..=20).map(|i| timer.sleep(i * MS))).await;
                assert_eq!(results.len(), 20);
            });
            assert!(Instant::now() - start >= 20 * MS);
            let stats = timer.stats();
            assert_eq!(stats.entries_fired, 20);
            assert_eq!(stats.registered, 0);
        },
    );
}

#[test]
fn tokio_driver_honours_a_paused_clock_set_by_hand() {
    let runtime = paused_runtime();
    runtime.block_on(async {
        let timer = Timer::builder().driver(Driver::Tokio).build().unwrap();
        let mut sleep = task::spawn(timer.sleep(Duration::from_secs(30)));
        assert_pending!(sleep.poll());
        tokio::time::advance(Duration::from_secs(29)).await;
        tokio::task::yield_now().await;
        assert_pending!(sleep.poll());
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert!(sleep.is_woken());
        assert!(sleep.poll().is_ready());
    });
}

#[test]
fn invalid_configurations_are_errors_naming_the_setting_and_value() {
    let error = Timer::builder().tick(Duration::ZERO).build().unwrap_err();
    assert!(error.is_invalid_tick());
    assert!(error.to_string().contains("tick 0ns"), "{error}");

    for size in [0, 1, 3, 48, 100, (1 << 16) + 1, 1 << 17] {
        let error = Timer::builder().wheel_size(size).build().unwrap_err();
        assert!(error.is_invalid_wheel_size());
        assert!(
            error.to_string().contains(&format!("wheel_size {size}")),
            "{error}"
        );
    }
    for size in [2, 4, 64, 1 << 16] {
        Timer::builder().wheel_size(size).build().unwrap();
    }

    let error = Timer::builder().driver(Driver::Tokio).build().unwrap_err();
    assert!(error.is_no_runtime());
    assert!(error.to_string().contains("driver Tokio"), "{error}");
}

#[test]
fn tokio_driver_in_a_runtime_without_time_is_an_error_and_the_default_falls_back() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let error = Timer::builder().driver(Driver::Tokio).build().unwrap_err();
        assert!(error.is_no_runtime());
        assert!(error.to_string().contains("enable_time"), "{error}");
        // With no driver asked for, a driver thread runs it; sleeping works.
        tickless::sleep(MS).await;
        Timer::new().sleep(MS).await;
    });
}

#[test]
fn a_thread_driven_timer_keeps_real_time_inside_a_paused_runtime() {
    // Its clock is fixed when it is built: the real one, even when read from a paused
    // runtime, whose clock may be behind real time or, after `advance`, far ahead of it.
    support::within(
        WATCHDOG,
        "a thread-driven timer in a paused runtime",
        || {
            paused_runtime().block_on(async {
                tokio::time::advance(Duration::from_secs(3600)).await;
                let timer = Timer::builder().driver(Driver::Thread).build().unwrap();
                let wall = std::time::Instant::now();
                let start = timer.now();
                timer.sleep(20 * MS).await;
                assert!(timer.now() - start >= 20 * MS);
                assert!(wall.elapsed() >= 20 * MS, "never early in real time");
            })
        },
    );
}

#[test]
fn is_elapsed_alone_sees_a_timer_fire_after_its_runtime_shut_down() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (timer, mut sleep) = runtime.block_on(async {
        let timer = Timer::new();
        (timer.clone(), timer.sleep(Duration::from_secs(3600)))
    });
    // Reset registers it (with no waker: it is never polled).
    Pin::new(&mut sleep).reset(timer.now() + 10 * MS);
    drop(runtime);
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while !sleep.is_elapsed() {
        assert!(std::time::Instant::now() < give_up, "never fired");
        std::thread::yield_now();
    }
    assert!(timer.now() >= sleep.deadline());
}

#[tokio::test(start_paused = true)]
async fn a_tokio_timer_and_a_tickless_timer_due_at_one_instant_fire_in_one_pass() {
    for millis in [1_u64, 10, 64, 65, 4097] {
        let d = Duration::from_millis(millis);
        let (ours, theirs) = (tickless::sleep(d), tokio::time::sleep(d));
        tokio::pin!(theirs);
        // Both fire in tokio's one timer pass, before the task that awaits them runs
        // again, so a biased select sees both ready and takes the first branch. (A
        // tickless driver woken by tokio's timer, one task later, lost this race.)
        let first = tokio::select! {
            biased;
            () = ours => "tickless",
            () = &mut theirs => "tokio",
        };
        assert_eq!(first, "tickless", "{millis} ms");
    }
}
