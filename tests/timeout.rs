//! `Timeout`: inner future first, `Elapsed` at the deadline, accessors, `io::Error`.

use std::future::{pending, ready, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tickless::{Instant, Timer};
use tokio_test::{assert_pending, assert_ready, task};

#[tokio::test(start_paused = true)]
async fn ready_future_wins_even_with_a_zero_duration() {
    assert_eq!(tickless::timeout(Duration::ZERO, ready(3)).await, Ok(3));
    let past = Instant::now() - Duration::from_secs(1);
    assert_eq!(tickless::timeout_at(past, async { "x" }).await, Ok("x"));
}

#[tokio::test(start_paused = true)]
async fn pending_future_times_out_at_the_deadline_not_before() {
    let start = Instant::now();
    let result = tickless::timeout(Duration::from_millis(250), pending::<()>()).await;
    assert!(result.is_err());
    let waited = Instant::now() - start;
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited <= Duration::from_millis(252), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn future_finishing_before_the_deadline_cancels_the_timer() {
    let value = tickless::timeout(Duration::from_secs(60), async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        9
    })
    .await;
    assert_eq!(value, Ok(9));
    assert_eq!(Timer::current().stats().registered, 0);
}

#[tokio::test(start_paused = true)]
async fn zero_duration_times_out_a_pending_future_on_first_poll() {
    let mut timeout = task::spawn(tickless::timeout(Duration::ZERO, pending::<()>()));
    assert!(assert_ready!(timeout.poll()).is_err());
}

#[tokio::test(start_paused = true)]
async fn accessors_reach_the_inner_future() {
    struct Value(u8);
    impl Future for Value {
        type Output = u8;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u8> {
            Poll::Ready(self.0)
        }
    }
    let mut timeout = tickless::timeout(Duration::from_secs(1), Value(5));
    assert_eq!(timeout.get_ref().0, 5);
    timeout.get_mut().0 = 6;
    assert_eq!(timeout.into_inner().await, 6);
}

#[tokio::test(start_paused = true)]
async fn into_inner_after_registration_cancels_the_timer() {
    let mut timeout = task::spawn(tickless::timeout(Duration::from_secs(9), pending::<u8>()));
    assert_pending!(timeout.poll());
    assert_eq!(Timer::current().stats().registered, 1);
    let timeout = timeout.into_inner();
    let _inner = timeout.into_inner();
    assert_eq!(Timer::current().stats().registered, 0);
}

#[tokio::test(start_paused = true)]
async fn accepts_into_future() {
    struct Answer;
    impl std::future::IntoFuture for Answer {
        type Output = u32;
        type IntoFuture = std::future::Ready<u32>;
        fn into_future(self) -> Self::IntoFuture {
            ready(42)
        }
    }
    assert_eq!(
        tickless::timeout(Duration::from_secs(1), Answer).await,
        Ok(42)
    );
}

#[tokio::test(start_paused = true)]
async fn nested_timeouts_fire_innermost_deadline_first() {
    let inner = tickless::timeout(Duration::from_millis(10), pending::<()>());
    let outer = tickless::timeout(Duration::from_millis(20), inner).await;
    assert!(matches!(outer, Ok(Err(_))), "the inner deadline came first");

    let inner = tickless::timeout(Duration::from_millis(30), pending::<()>());
    let outer = tickless::timeout(Duration::from_millis(20), inner).await;
    assert!(outer.is_err(), "the outer deadline came first");
}

#[tokio::test(start_paused = true)]
async fn timeout_is_unpin_and_reusable_in_a_select_loop_without_pin() {
    // 55 ms: off the 10 ms grid, so no tick is due at the same instant as the deadline
    // (a tokio timer and a tickless timer due at one instant are seen in an order that
    // depends on task scheduling: see the README).
    let mut deadline = tickless::timeout(Duration::from_millis(55), pending::<()>());
    let mut ticks = 0;
    loop {
        tokio::select! {
            result = &mut deadline => {
                assert!(result.is_err());
                break;
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => ticks += 1,
        }
    }
    assert_eq!(ticks, 5);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_inner_future_propagates_and_frees_the_timer() {
    struct PanicOnSecondPoll(bool);
    impl Future for PanicOnSecondPoll {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            assert!(!self.0, "inner future panicked");
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    let handle = tokio::spawn(tickless::timeout(
        Duration::from_secs(1),
        PanicOnSecondPoll(false),
    ));
    let error = handle.await.unwrap_err();
    assert!(error.is_panic());
    assert_eq!(Timer::current().stats().registered, 0);
}

#[test]
fn elapsed_displays_lowercase_and_converts_to_timed_out() {
    let elapsed: tickless::error::Elapsed =
        futures::executor::block_on(tickless::timeout(Duration::ZERO, pending::<()>()))
            .unwrap_err();
    assert_eq!(elapsed.to_string(), "deadline has elapsed");
    let io: std::io::Error = elapsed.into();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
}

#[test]
fn a_timeout_over_a_ready_future_is_at_most_32_bytes() {
    // The deadline is a `Sleep` (24 bytes) or, until the first wait, an instant in the
    // same space: the inner future adds its own size, padded.
    assert!(std::mem::size_of::<tickless::Timeout<std::future::Ready<()>>>() <= 32);
    assert!(std::mem::size_of::<tickless::Timeout<std::future::Pending<()>>>() <= 24);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_the_call_not_from_the_first_wait() {
    let start = Instant::now();
    let timeout = tickless::timeout(Duration::from_millis(100), pending::<()>());
    tokio::time::advance(Duration::from_millis(60)).await;
    assert!(timeout.await.is_err());
    let waited = Instant::now() - start;
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited <= Duration::from_millis(101), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passed_before_the_first_wait_times_out_without_waiting_again() {
    let _made = Timer::current(); // the runtime's default exists, and idles meanwhile
    let timeout = tickless::timeout(Duration::from_millis(10), pending::<()>());
    tokio::time::advance(Duration::from_millis(60)).await;
    let before = Instant::now();
    assert!(timeout.await.is_err());
    assert_eq!(Instant::now(), before);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_finds_its_timer_at_the_first_wait_not_at_the_call() {
    let timer = Timer::builder().manual_clock().build().unwrap();
    // Made with the runtime's default current, first waits with `timer` entered.
    let mut timeout = task::spawn(tickless::timeout(Duration::from_millis(5), pending::<()>()));
    {
        let _entered = timer.enter();
        assert_pending!(timeout.poll());
    }
    assert_eq!(
        timer.stats().registered,
        1,
        "registered where it first waited"
    );
    assert_eq!(Timer::current().stats().registered, 0);
    timer.advance(Duration::from_millis(5));
    assert!(timeout.is_woken());
    assert!(assert_ready!(timeout.poll()).is_err());
    assert_eq!(timer.stats().registered, 0);
}
