//! A manual clock: virtual time on any runtime flavour, moved only by `Timer::advance`,
//! which fires everything due before it returns.

use tickless_test_support as support;

use futures::StreamExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::time::Duration;
use tickless::{DelayQueue, Driver, Timer};

const MS: Duration = Duration::from_millis(1);

fn manual() -> Timer {
    Timer::builder().manual_clock().build().unwrap()
}

#[test]
fn many_tasks_on_a_multi_thread_runtime_fire_exactly_at_each_advance() {
    support::multi_thread().block_on(async {
        const TASKS: u64 = 400;
        let timer = manual();
        let start = timer.now();
        let (registered, all_registered) = mpsc::channel();
        let (completed, completions) = mpsc::channel();
        let mut tasks = Vec::new();
        for i in 0..TASKS {
            let (timer, registered, completed) =
                (timer.clone(), registered.clone(), completed.clone());
            tasks.push(tokio::spawn(async move {
                let delay = Duration::from_millis((i % 40 + 1) * 10); // 10, 20, ..., 400 ms
                let mut sleep = timer.sleep(delay);
                let first = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(Pin::new(&mut sleep).poll(cx))
                })
                .await;
                assert!(first.is_pending());
                registered.send(()).unwrap();
                sleep.await;
                completed.send((delay, timer.now() - start)).unwrap();
            }));
        }
        for _ in 0..TASKS {
            all_registered.recv().unwrap();
        }
        assert_eq!(timer.stats().registered, TASKS as usize);

        for step in 1..=40_u64 {
            timer.advance(10 * MS);
            // Deterministic: when advance returns, exactly the timers due so far have fired.
            assert_eq!(
                timer.stats().entries_fired,
                step * TASKS / 40,
                "step {step}"
            );
            // The clock waits for this step's tasks: each sees it at its own deadline, not a
            // step before (early) nor after (late).
            for _ in 0..TASKS / 40 {
                let (delay, completed_at) = completions
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_else(|_| panic!("step {step}: a woken task did not complete"));
                assert_eq!(completed_at, delay, "step {step}");
            }
            assert!(
                completions.try_recv().is_err(),
                "step {step}: one completed early"
            );
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(timer.stats().registered, 0);
    })
}

#[test]
fn works_across_plain_threads_and_block_on() {
    let timer = manual();
    let (registered, is_registered) = mpsc::channel();
    let waiter = {
        let timer = timer.clone();
        std::thread::spawn(move || {
            let mut sleep = timer.sleep(Duration::from_secs(3600));
            futures::executor::block_on(std::future::poll_fn(|cx| {
                let poll = Pin::new(&mut sleep).poll(cx);
                if poll.is_pending() {
                    let _ = registered.send(());
                }
                poll
            }));
            timer.now()
        })
    };
    is_registered.recv().unwrap();
    let start = timer.now();
    timer.advance(Duration::from_secs(3599));
    assert_eq!(timer.stats().entries_fired, 0, "not yet");
    timer.advance(Duration::from_secs(1));
    let done = waiter.join().unwrap();
    assert_eq!(done - start, Duration::from_secs(3600));
}

#[test]
fn without_advance_nothing_fires_and_time_stands_still() {
    let timer = manual();
    let start = timer.now();
    let mut sleep = timer.sleep(MS);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    for _ in 0..1000 {
        assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
    }
    assert_eq!(timer.now(), start);
    timer.advance_to(start + MS);
    assert!(sleep.is_elapsed());
    // advance_to an earlier instant leaves the clock where it is.
    timer.advance_to(start);
    assert_eq!(timer.now(), start + MS);
}

#[test]
fn interval_and_delay_queue_follow_a_manual_clock() {
    let timer = manual();
    let start = timer.now();
    let _current = timer.enter();
    let mut interval = tickless::interval(10 * MS);
    let mut queue = DelayQueue::new();
    queue.insert("b", 25 * MS);
    queue.insert("a", 5 * MS);
    futures::executor::block_on(async {
        assert_eq!(interval.tick().await, start);
        timer.advance(10 * MS);
        assert_eq!(interval.tick().await, start + 10 * MS);
        assert_eq!(queue.next().await.unwrap().into_inner(), "a");
        timer.advance(15 * MS);
        assert_eq!(queue.next().await.unwrap().into_inner(), "b");
        assert_eq!(interval.tick().await, start + 20 * MS);
    });
}

#[test]
#[should_panic(expected = "Timer::advance needs a manual clock")]
fn advancing_a_timer_on_a_real_clock_panics_with_a_hint() {
    let timer = Timer::builder().driver(Driver::Thread).build().unwrap();
    timer.advance(MS);
}

#[test]
fn a_manual_clock_with_a_driver_is_a_configuration_error() {
    let error = Timer::builder()
        .manual_clock()
        .driver(Driver::Thread)
        .build()
        .unwrap_err();
    assert!(error.is_manual_with_driver());
    assert!(error.to_string().contains("manual_clock"), "{error}");
}

#[test]
fn advance_fires_deadlines_between_ticks_exactly_by_default() {
    let timer = manual();
    assert_eq!(timer.tick(), Duration::from_nanos(1));
    let mut sleep = timer.sleep(Duration::from_micros(1500));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
    timer.advance(Duration::from_micros(1499));
    assert!(!sleep.is_elapsed());
    timer.advance(Duration::from_micros(1));
    assert!(sleep.is_elapsed(), "due at exactly 1.5 ms");
    assert!(Pin::new(&mut sleep).poll(&mut cx).is_ready());
}

#[test]
fn with_a_coarser_tick_deadlines_round_up_to_it() {
    let timer = Timer::builder().manual_clock().tick(MS).build().unwrap();
    let mut sleep = timer.sleep(Duration::from_micros(1500));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
    timer.advance(Duration::from_micros(1500));
    assert!(!sleep.is_elapsed(), "rounded up to the 2 ms tick");
    timer.advance(Duration::from_micros(500));
    assert!(sleep.is_elapsed());
}
