//! Which timer the free functions use, with no setup, in each kind of context.

use tickless_test_support as support;

use std::future::Future;
use std::time::Duration;
use tickless::{Instant, Timer};

const MS: Duration = Duration::from_millis(1);

#[tokio::main(flavor = "current_thread")]
async fn a_tokio_main() -> Instant {
    tickless::sleep(5 * MS).await;
    Instant::now()
}

#[test]
fn works_with_no_setup_inside_tokio_main() {
    let start = Instant::now();
    assert!(a_tokio_main() - start >= 5 * MS);
}

#[tokio::test(start_paused = true)]
async fn completes_in_virtual_time_under_start_paused() {
    let wall = std::time::Instant::now();
    let start = Instant::now();
    tickless::sleep(Duration::from_secs(24 * 3600)).await;
    assert!(Instant::now() - start >= Duration::from_secs(24 * 3600));
    // A day of virtual time; the wall clock barely moves (generous bound, not a timing test).
    assert!(wall.elapsed() < Duration::from_secs(60));
}

#[test]
fn works_under_futures_block_on_with_a_process_wide_timer() {
    let start = Instant::now();
    futures::executor::block_on(tickless::sleep(5 * MS));
    assert!(Instant::now() - start >= 5 * MS);
    let result = futures::executor::block_on(tickless::timeout(MS, std::future::pending::<()>()));
    assert!(result.is_err());
    let first = Timer::current();
    let second = std::thread::spawn(Timer::current).join().unwrap();
    assert!(
        first.same_timer(&second),
        "one process-wide timer outside runtimes"
    );
}

#[test]
fn one_default_timer_per_runtime_shared_by_all_its_threads() {
    support::multi_thread().block_on(async {
        let here = Timer::current();
        assert!(here.same_timer(&Timer::current()), "stable on one thread");
        // Many threads in the runtime: all get the same timer (sharded inside by thread).
        let handle = tokio::runtime::Handle::current();
        let mut sleeps = Vec::new();
        for _ in 0..129 {
            let handle = handle.clone();
            let (timer, sleep) = std::thread::spawn(move || {
                let _runtime = handle.enter();
                let timer = Timer::current();
                assert!(timer.same_timer(&Timer::current()), "stable on one thread");
                (timer, tickless::sleep(MS))
            })
            .join()
            .unwrap();
            assert!(timer.same_timer(&here), "one default per runtime");
            sleeps.push(sleep);
        }
        // Made on 129 threads (so on every shard), all driven by the runtime.
        futures::future::join_all(sleeps).await;
        assert_eq!(here.stats().registered, 0);
        let outside = std::thread::spawn(Timer::current).join().unwrap();
        assert!(
            !here.same_timer(&outside),
            "outside the runtime: the process default"
        );
    })
}

#[test]
fn each_runtime_gets_its_own_default_timer() {
    let runtime = |_| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    };
    let (first, second) = (runtime(1), runtime(2));
    let a = first.block_on(async { Timer::current() });
    let b = second.block_on(async { Timer::current() });
    assert!(!a.same_timer(&b));
    assert!(a.same_timer(&first.block_on(async { Timer::current() })));
    // After a runtime shuts down its default is never handed out again.
    drop(first);
    let third = runtime(3);
    let c = third.block_on(async { Timer::current() });
    assert!(!c.same_timer(&a));
    third.block_on(tickless::sleep(MS));
}

#[tokio::test(start_paused = true)]
async fn an_entered_timer_is_current_until_its_guard_drops() {
    let runtime_default = Timer::current();
    let outer = Timer::builder().wheel_size(8).build().unwrap();
    let inner = Timer::builder().wheel_size(16).build().unwrap();
    {
        let _outer = outer.enter();
        assert!(Timer::current().same_timer(&outer));
        {
            let _inner = inner.enter();
            assert!(Timer::current().same_timer(&inner));
            tickless::sleep(MS).await;
            assert_eq!(inner.stats().entries_fired, 1);
        }
        assert!(Timer::current().same_timer(&outer));
    }
    assert!(Timer::current().same_timer(&runtime_default));
}

#[test]
fn a_runtime_entered_inside_a_task_is_current_there_and_only_there() {
    support::multi_thread().block_on(async {
        let outer = Timer::current();
        let inner_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (before, inside, after) = tokio::task::spawn_blocking(move || {
            let before = Timer::current();
            let inside = inner_runtime.block_on(async {
                tickless::sleep(MS).await;
                Timer::current()
            });
            let after = Timer::current();
            (before, inside, after)
        })
        .await
        .unwrap();
        // The blocking thread is the outer runtime's (another shard of it, perhaps); inside
        // the inner runtime's `block_on`, the inner runtime's timer; after it, not that one.
        assert!(!before.same_timer(&inside));
        assert!(!after.same_timer(&inside));
        assert!(after.same_timer(&before));
        tickless::sleep(MS).await;
        assert!(outer.same_timer(&Timer::current()));
    })
}

#[test]
fn tasks_of_two_runtimes_on_one_thread_get_each_their_runtimes_timer() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    };
    let (first, second) = (runtime(), runtime());
    let in_task = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            let task = tokio::spawn(async {
                let timer = Timer::current();
                tickless::sleep(MS).await;
                assert!(Timer::current().same_timer(&timer));
                timer
            });
            (task.await.unwrap(), Timer::current())
        })
    };
    let (a_task, a_outside) = in_task(&first);
    let (b_task, b_outside) = in_task(&second);
    assert!(a_task.same_timer(&a_outside));
    assert!(b_task.same_timer(&b_outside));
    assert!(!a_task.same_timer(&b_task));
}

#[test]
fn a_runtime_entered_by_its_handle_inside_a_task_is_current_there() {
    // The same task, and so the same `tokio::task::id()`, before, inside and after the
    // guard: which runtime is current is tokio's context, not the task's.
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let other_default = other.block_on(async { Timer::current() });
    let other_handle = other.handle().clone();
    support::multi_thread().block_on(async move {
        tokio::spawn(async move {
            let own = Timer::current();
            drop(tickless::sleep(MS)); // this thread has looked its runtime's default up
            let (inside, sleep, timeout) = {
                let _entered = other_handle.enter();
                let mut sleep = Box::pin(tickless::sleep(Duration::from_secs(60)));
                let mut timeout = Box::pin(tickless::timeout(
                    Duration::from_secs(60),
                    std::future::pending::<()>(),
                ));
                let waker = futures::task::noop_waker();
                let mut cx = std::task::Context::from_waker(&waker);
                assert!(sleep.as_mut().poll(&mut cx).is_pending());
                assert!(timeout.as_mut().poll(&mut cx).is_pending());
                (Timer::current(), sleep, timeout)
            };
            assert!(inside.same_timer(&other_default));
            assert!(!own.same_timer(&other_default));
            assert_eq!(
                other_default.stats().registered,
                2,
                "both on the entered runtime's"
            );
            assert!(
                Timer::current().same_timer(&own),
                "and its own again after the guard"
            );
            drop((sleep, timeout));
        })
        .await
        .unwrap();
    });
}

#[test]
fn a_runtime_blocked_on_inside_block_in_place_is_current_there() {
    // The same task, and so the same `tokio::task::try_id()`, on the same worker thread,
    // before, inside and after the nested `block_on`: which runtime is current is
    // tokio's context, not the task's or the thread's.
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let other_default = other.block_on(async { Timer::current() });
    let other = support::multi_thread().block_on(async move {
        tokio::spawn(async move {
            let own = Timer::current();
            drop(tickless::sleep(MS)); // this thread has looked its runtime's default up
            let task = tokio::task::try_id();
            let (inside, inside_task, sleep, timeout) = tokio::task::block_in_place(|| {
                other.block_on(async {
                    let mut sleep = Box::pin(tickless::sleep(Duration::from_secs(60)));
                    let mut timeout = Box::pin(tickless::timeout(
                        Duration::from_secs(60),
                        std::future::pending::<()>(),
                    ));
                    let waker = futures::task::noop_waker();
                    let mut cx = std::task::Context::from_waker(&waker);
                    assert!(sleep.as_mut().poll(&mut cx).is_pending());
                    assert!(timeout.as_mut().poll(&mut cx).is_pending());
                    (Timer::current(), tokio::task::try_id(), sleep, timeout)
                })
            });
            assert_eq!(
                inside_task, task,
                "tokio keeps the task's id in the nested block_on"
            );
            assert!(inside.same_timer(&other_default));
            assert!(!own.same_timer(&other_default));
            assert_eq!(
                other_default.stats().registered,
                2,
                "both on the runtime blocked on"
            );
            assert!(
                Timer::current().same_timer(&own),
                "and its own again after it"
            );
            drop((sleep, timeout));
            other
        })
        .await
        .unwrap()
    });
    drop(other); // here, outside any runtime: a runtime may not be dropped inside one
}
