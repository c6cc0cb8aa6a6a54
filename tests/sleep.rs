//! `Sleep`: deadlines, lazy registration, cancel on drop, reset and `set_deadline`, moving
//! between tasks.
//!
//! Timing is checked on tokio's paused clock (and once on a manual clock): exact, and
//! instant in wall time.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tickless::{Instant, Sleep, Timer};
use tokio_test::task;
use tokio_test::{assert_pending, assert_ready};

const MS: Duration = Duration::from_millis(1);

fn registered() -> usize {
    Timer::current().stats().registered
}

#[test]
fn sleep_is_24_bytes_and_unpin() {
    fn assert_unpin<T: Unpin>() {}
    assert_unpin::<Sleep>();
    assert_unpin::<tickless::Timeout<std::future::Ready<()>>>();
    if cfg!(target_pointer_width = "64") {
        assert_eq!(std::mem::size_of::<Sleep>(), 24);
    }
}

#[tokio::test(start_paused = true)]
async fn never_completes_before_its_deadline() {
    for millis in [1, 2, 10, 63, 64, 65, 999, 4097, 60_000] {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(millis);
        tickless::sleep_until(deadline).await;
        let now = Instant::now();
        assert!(
            now >= deadline,
            "{millis} ms: early by {:?}",
            deadline - now
        );
    }
}

#[tokio::test(start_paused = true)]
async fn completes_within_one_tick_plus_driver_latency() {
    // The tokio driver fires with tokio's timer (1 ms resolution), on tokio's own
    // millisecond grid: one rounding, so lateness stays under one tick (on a paused clock,
    // exactly reproducible).
    for micros in [500, 1_000, 1_500, 10_000, 123_456, 5_000_000] {
        let deadline = Instant::now() + Duration::from_micros(micros);
        tickless::sleep_until(deadline).await;
        let late = Instant::now() - deadline;
        assert!(late < MS, "{micros} us: late by {late:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn zero_and_past_deadlines_complete_on_first_poll_without_touching_the_wheel() {
    let before = Timer::current().stats();
    let mut zero = task::spawn(tickless::sleep(Duration::ZERO));
    assert!(
        !zero.is_elapsed(),
        "as in tokio: not elapsed before it is polled"
    );
    assert_ready!(zero.poll());
    assert!(zero.is_elapsed());
    let past = Instant::now() - Duration::from_secs(5);
    let mut past = task::spawn(tickless::sleep_until(past));
    assert_ready!(past.poll());
    assert!(past.is_elapsed());
    let after = Timer::current().stats();
    assert_eq!(after.entries_fired, before.entries_fired);
    assert_eq!(after.registered, 0);
}

#[tokio::test(start_paused = true)]
async fn registration_is_lazy_and_drop_cancels() {
    let sleeps: Vec<Sleep> = (1..=100)
        .map(|i| tickless::sleep(Duration::from_secs(i)))
        .collect();
    assert_eq!(registered(), 0, "creating a Sleep registers nothing");

    let mut tasks: Vec<_> = sleeps.into_iter().map(task::spawn).collect();
    for task in &mut tasks {
        assert_pending!(task.poll());
    }
    assert_eq!(registered(), 100, "the first Pending poll registers");
    for task in &mut tasks {
        assert_pending!(task.poll());
    }
    assert_eq!(registered(), 100, "polling again registers nothing new");

    tasks.truncate(40);
    assert_eq!(registered(), 40, "drop cancels");
    drop(tasks);
    assert_eq!(
        registered(),
        0,
        "the slab is empty once every Sleep is gone"
    );
}

#[tokio::test(start_paused = true)]
async fn completed_sleep_frees_its_slot() {
    tickless::sleep(MS).await;
    let mut sleep = task::spawn(tickless::sleep(10 * MS));
    assert_pending!(sleep.poll());
    assert_eq!(registered(), 1);
    tokio::time::advance(10 * MS).await;
    tokio::task::yield_now().await;
    assert!(sleep.is_woken());
    assert_ready!(sleep.poll());
    assert!(sleep.is_elapsed());
    assert_eq!(registered(), 0);
}

#[tokio::test(start_paused = true)]
async fn reset_earlier() {
    let start = Instant::now();
    let mut sleep = task::spawn(tickless::sleep(Duration::from_secs(60)));
    assert_pending!(sleep.poll());
    sleep.enter(|_, sleep| sleep.reset(start + 20 * MS));
    assert_eq!(sleep.deadline(), start + 20 * MS);
    tokio::time::sleep(20 * MS).await;
    tokio::task::yield_now().await;
    assert!(sleep.is_woken(), "woken at the new, earlier deadline");
    assert_ready!(sleep.poll());
}

#[tokio::test(start_paused = true)]
async fn reset_later() {
    let start = Instant::now();
    let mut sleep = task::spawn(tickless::sleep(20 * MS));
    assert_pending!(sleep.poll());
    sleep.enter(|_, sleep| sleep.reset(start + 100 * MS));
    tokio::time::sleep(50 * MS).await;
    assert!(!sleep.is_woken());
    assert_pending!(sleep.poll());
    assert!(!sleep.is_elapsed());
    tokio::time::sleep(50 * MS).await;
    tokio::task::yield_now().await;
    assert!(sleep.is_woken());
    assert_ready!(sleep.poll());
    assert!(Instant::now() >= start + 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn reset_after_it_fired_makes_it_pending_again() {
    let mut sleep = tickless::sleep(5 * MS);
    (&mut sleep).await;
    assert!(sleep.is_elapsed());
    let deadline = Instant::now() + 30 * MS;
    Pin::new(&mut sleep).reset(deadline);
    assert!(!sleep.is_elapsed());
    sleep.await;
    assert!(Instant::now() >= deadline);
}

#[tokio::test(start_paused = true)]
async fn reset_to_the_past_wakes_the_waiting_task() {
    let mut sleep = task::spawn(tickless::sleep(Duration::from_secs(60)));
    assert_pending!(sleep.poll());
    sleep.enter(|_, sleep| sleep.reset(Instant::now()));
    assert!(sleep.is_woken());
    assert_ready!(sleep.poll());
    assert_eq!(registered(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_sleep_moved_to_another_task_wakes_the_new_task() {
    let mut sleep = tickless::sleep(50 * MS);
    // Register it from this task...
    let first_poll =
        std::future::poll_fn(|cx: &mut Context<'_>| Poll::Ready(Pin::new(&mut sleep).poll(cx)))
            .await;
    assert!(first_poll.is_pending());
    // ...then move it to another, which must be the one woken.
    let deadline = sleep.deadline();
    let other = tokio::spawn(async move {
        sleep.await;
        Instant::now()
    });
    let finished = other.await.unwrap();
    assert!(finished >= deadline);
}

#[tokio::test(start_paused = true)]
async fn duration_max_and_a_century_stay_pending_without_panicking() {
    let century = Duration::from_secs(100 * 365 * 86_400);
    let mut max = task::spawn(tickless::sleep(Duration::MAX));
    let mut hundred_years = task::spawn(tickless::sleep(century));
    assert!(max.deadline() > Instant::now() + century);
    assert_pending!(max.poll());
    assert_pending!(hundred_years.poll());

    tokio::time::advance(Duration::from_secs(50 * 365 * 86_400)).await;
    tokio::task::yield_now().await;
    assert_pending!(max.poll());
    assert_pending!(hundred_years.poll());

    // The tokio clock itself can go a century ahead; the century sleep fires, MAX does not.
    tokio::time::advance(Duration::from_secs(51 * 365 * 86_400)).await;
    tokio::task::yield_now().await;
    assert_ready!(hundred_years.poll());
    assert_pending!(max.poll());
    assert!(Timer::current().stats().levels >= 5);
}

#[tokio::test(start_paused = true)]
async fn sleeps_complete_in_deadline_order() {
    let start = Instant::now();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for millis in [700_u64, 5, 90, 64, 3000, 1, 4096] {
        let order = order.clone();
        handles.push(tokio::spawn(async move {
            tickless::sleep_until(start + Duration::from_millis(millis)).await;
            order.lock().unwrap().push(millis);
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [1, 5, 64, 90, 700, 3000, 4096]);
}

#[tokio::test(start_paused = true)]
async fn a_sleep_first_polled_after_its_deadline_completes_on_the_next_driver_turn() {
    let start = Instant::now();
    let mut sleep = task::spawn(tickless::sleep(10 * MS));
    tokio::time::advance(20 * MS).await;
    // `sleep(d)` skips the clock read at first poll: the wheel decides, so this poll
    // registers, and the driver fires it at once.
    let _ = sleep.poll();
    tokio::task::yield_now().await;
    assert_ready!(sleep.poll());
    assert_eq!(
        Instant::now() - start,
        20 * MS,
        "no virtual time passed meanwhile"
    );
    // `sleep_until` reads the clock: a past deadline completes on the first poll.
    let mut until = task::spawn(tickless::sleep_until(start + 10 * MS));
    assert_ready!(until.poll());
}

#[tokio::test(start_paused = true)]
async fn set_deadline_moves_an_unpinned_sleep_earlier_and_wakes_its_task_there() {
    let start = Instant::now();
    let mut sleep = tickless::sleep(Duration::from_secs(60));
    let mut waiter = task::spawn(());
    assert_pending!(waiter.enter(|cx, _| Pin::new(&mut sleep).poll(cx)));
    sleep.set_deadline(start + 20 * MS);
    assert_eq!(sleep.deadline(), start + 20 * MS);
    tokio::time::sleep(19 * MS).await;
    assert!(!waiter.is_woken());
    tokio::time::sleep(MS).await;
    tokio::task::yield_now().await;
    assert!(waiter.is_woken(), "woken at the new, earlier deadline");
    assert_ready!(waiter.enter(|cx, _| Pin::new(&mut sleep).poll(cx)));
    assert_eq!(registered(), 0);
}

#[tokio::test(start_paused = true)]
async fn set_deadline_later_keeps_the_task_waiting_until_the_new_deadline() {
    let start = Instant::now();
    let mut sleep = tickless::sleep(20 * MS);
    let mut waiter = task::spawn(());
    assert_pending!(waiter.enter(|cx, _| Pin::new(&mut sleep).poll(cx)));
    sleep.set_deadline(start + 100 * MS);
    tokio::time::sleep(50 * MS).await;
    assert!(!waiter.is_woken(), "not at the old deadline");
    assert!(!sleep.is_elapsed());
    (&mut sleep).await;
    assert_eq!(Instant::now() - start, 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn set_deadline_after_it_fired_makes_it_pending_again() {
    let mut sleep = tickless::sleep(5 * MS);
    (&mut sleep).await;
    assert!(sleep.is_elapsed());
    let deadline = Instant::now() + 30 * MS;
    sleep.set_deadline(deadline);
    assert!(!sleep.is_elapsed());
    sleep.await;
    assert!(Instant::now() >= deadline);
}

#[tokio::test(start_paused = true)]
async fn set_deadline_registers_a_sleep_never_polled_as_tokio_reset_does() {
    let mut sleep = tickless::sleep(Duration::from_secs(60));
    sleep.set_deadline(Instant::now() + 10 * MS);
    assert_eq!(registered(), 1);
    tokio::time::sleep(10 * MS).await;
    tokio::task::yield_now().await;
    assert!(sleep.is_elapsed(), "fired without a poll");
}

#[test]
fn set_deadline_on_a_manual_clock_fires_at_the_new_deadline_not_the_old() {
    let timer = Timer::builder().manual_clock().build().unwrap();
    let start = timer.now();
    let mut sleep = timer.sleep(10 * MS);
    let mut waiter = task::spawn(());
    assert_pending!(waiter.enter(|cx, _| Pin::new(&mut sleep).poll(cx)));
    sleep.set_deadline(start + 30 * MS);
    timer.advance(10 * MS);
    assert!(!waiter.is_woken(), "not at the old deadline");
    timer.advance(20 * MS - Duration::from_nanos(1));
    assert!(!waiter.is_woken(), "not a nanosecond early");
    timer.advance(Duration::from_nanos(1));
    assert!(waiter.is_woken());
    assert_ready!(waiter.enter(|cx, _| Pin::new(&mut sleep).poll(cx)));
}
