//! tokio's alternative timer (`--cfg tokio_unstable`, `Builder::enable_alt_timer`).
#![cfg(tokio_unstable)]

use tickless_test_support as support;

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

#[test]
fn a_runtime_on_the_alt_timer_shuts_down_under_a_pending_tickless_sleep() {
    for _ in 0..20 {
        let runtime = support::alt_timer();
        runtime.block_on(async {
            tickless::sleep(Duration::from_millis(1)).await;
            let (registered, is_registered) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let mut sleep = pin!(tickless::sleep(Duration::from_secs(3600)));
                std::future::poll_fn(|cx| {
                    assert!(sleep.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                let _ = registered.send(());
                sleep.await;
            });
            is_registered.await.unwrap();
        });
        drop(runtime);
    }
}

#[test]
fn ten_thousand_sleeps_on_the_alt_timer_fire_once_and_never_early() {
    const N: u64 = 10_000;
    let runtime = support::alt_timer();
    let early = runtime.block_on(async {
        let tasks: Vec<_> = (0..N)
            .map(|i| {
                tokio::spawn(async move {
                    let deadline = tickless::Instant::now() + Duration::from_millis(i % 50);
                    tickless::sleep_until(deadline).await;
                    tickless::Instant::now() < deadline
                })
            })
            .collect();
        let mut early = 0;
        for task in tasks {
            early += usize::from(task.await.unwrap());
        }
        early
    });
    assert_eq!(early, 0);
    let registered = runtime.block_on(async { tickless::Timer::current().stats().registered });
    assert_eq!(registered, 0, "every entry fired and was taken");
}

#[test]
fn timeout_interval_and_delay_queue_keep_their_promises_on_the_alt_timer() {
    use futures::StreamExt;
    let runtime = support::alt_timer();
    runtime.block_on(async {
        let start = tickless::Instant::now();
        let elapsed = tickless::timeout(Duration::from_millis(20), std::future::pending::<()>());
        assert!(elapsed.await.is_err());
        assert!(start.elapsed() >= Duration::from_millis(20));
        let ready = tickless::timeout(Duration::from_secs(5), async { 7 });
        assert_eq!(ready.await.unwrap(), 7);

        let mut interval = tickless::interval(Duration::from_millis(10));
        let first = interval.tick().await;
        for n in 1..=5_u32 {
            let at = interval.tick().await;
            assert_eq!(
                at - first,
                n * Duration::from_millis(10),
                "exactly a period apart"
            );
            assert!(tickless::Instant::now() >= at);
        }

        let mut queue = tickless::DelayQueue::new();
        for ms in [30_u64, 10, 20] {
            queue.insert(ms, Duration::from_millis(ms));
        }
        let mut order = Vec::new();
        while let Some(item) = queue.next().await {
            assert!(tickless::Instant::now() >= item.deadline());
            order.push(item.into_inner());
        }
        assert_eq!(order, [10, 20, 30]);
    });
}

/// A deadline moved earlier from a thread outside the runtime is relayed to the helper
/// task on the alternative timer (a reset there registers with tokio): it still fires.
#[test]
fn a_sleep_moved_earlier_from_a_plain_thread_fires_on_the_alt_timer() {
    let runtime = support::alt_timer();
    let timer = runtime.block_on(async { tickless::Timer::new() });
    let (moved, was_moved) = std::sync::mpsc::channel::<()>();
    let sleeper = timer.clone();
    let done = runtime.spawn(async move {
        let mut sleep = pin!(sleeper.sleep(Duration::from_secs(3600)));
        std::future::poll_fn(|cx| {
            assert!(sleep.as_mut().poll(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        // From a plain thread: the timer's alarm is re-armed there, or relayed.
        let earlier = sleeper.now() + Duration::from_millis(5);
        let plain = std::thread::spawn({
            let sleeper = sleeper.clone();
            move || {
                let mut other = Box::pin(sleeper.sleep_until(earlier));
                let waker = futures::task::noop_waker();
                assert!(other
                    .as_mut()
                    .poll(&mut std::task::Context::from_waker(&waker))
                    .is_pending());
                other
            }
        })
        .join()
        .unwrap();
        moved.send(()).unwrap();
        plain.await;
        sleeper.now() >= earlier
    });
    was_moved.recv().unwrap();
    let on_time = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), done)
            .await
            .expect("the earlier deadline fired")
            .unwrap()
    });
    assert!(on_time);
}

#[test]
fn callbacks_and_purgatory_expiries_run_on_the_alt_timer() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let runtime = support::alt_timer();
    runtime.block_on(async {
        let timer = tickless::Timer::current();
        let ran = Arc::new(AtomicUsize::new(0));
        for i in 0..100_u64 {
            let ran = ran.clone();
            let _ = timer
                .schedule(Duration::from_millis(i % 10), move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
        }
        let purgatory: tickless::purgatory::Purgatory<u8, ()> =
            tickless::purgatory::Purgatory::new();
        let watch = purgatory.watch([1], Duration::from_millis(15), || None);
        assert!(watch.await.is_expired());
        tokio::time::timeout(Duration::from_secs(10), async {
            while ran.load(Ordering::SeqCst) < 100 {
                tickless::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("every callback ran");
        assert_eq!(timer.pending(), 0);
    });
}
