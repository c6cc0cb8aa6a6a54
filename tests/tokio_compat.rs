//! The same scenarios, written once, run on `tokio::time` and on `tickless` under a paused
//! clock: every observation must be identical.
//!
//! Each scenario body is expanded twice by `compat!`, once with `t` = `tokio::time` and
//! once with `t` = `tickless`, and returns what it observed as strings (instants as
//! millisecond offsets from the scenario's start).

use std::future::{pending, ready, Future, IntoFuture};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

/// Milliseconds from `start` to `at`, with sub-millisecond parts kept.
fn ms(start: std::time::Instant, at: std::time::Instant) -> String {
    format!("{:?}", at.duration_since(start))
}

/// A future that is pending `n` times (waking itself), then ready with `n`.
struct YieldTimes(u32, u32);

impl Future for YieldTimes {
    type Output = u32;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        if self.0 == self.1 {
            return Poll::Ready(self.1);
        }
        self.0 += 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

struct Answer;

impl IntoFuture for Answer {
    type Output = u8;
    type IntoFuture = std::future::Ready<u8>;
    fn into_future(self) -> Self::IntoFuture {
        ready(42)
    }
}

macro_rules! compat {
    ($($name:ident => $body:block)*) => {
        #[allow(unused_imports)]
        mod on_tokio {
            use super::*;
            use tokio::time as t;
            $(pub async fn $name() -> Vec<String> $body)*
        }
        #[allow(unused_imports)]
        mod on_tickless {
            use super::*;
            use tickless as t;
            $(pub async fn $name() -> Vec<String> $body)*
        }
        $(
            #[tokio::test(start_paused = true)]
            async fn $name() {
                let tokio = on_tokio::$name().await;
                let tickless = on_tickless::$name().await;
                assert_eq!(tickless, tokio, "tickless (left) differs from tokio (right)");
            }
        )*
    };
}

compat! {
    completion_order => {
        let start = t::Instant::now();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for millis in [30_u64, 1, 20, 10, 64, 65, 1000] {
            let order = order.clone();
            handles.push(tokio::spawn(async move {
                t::sleep(t::Duration::from_millis(millis)).await;
                order.lock().unwrap().push(millis.to_string());
            }));
        }
        for handle in handles {
            handle.await.unwrap();
        }
        let mut seen = order.lock().unwrap().clone();
        seen.push(ms(start.into_std(), t::Instant::now().into_std()));
        seen
    }

    sleep_deadline_is_elapsed_and_reset => {
        let start = t::Instant::now();
        let mut seen = Vec::new();
        let mut sleep = pin!(t::sleep(t::Duration::from_millis(10)));
        seen.push(ms(start.into_std(), sleep.deadline().into_std()));
        seen.push(sleep.is_elapsed().to_string());
        sleep.as_mut().reset(start + t::Duration::from_millis(25));
        seen.push(ms(start.into_std(), sleep.deadline().into_std()));
        sleep.as_mut().await;
        seen.push(sleep.is_elapsed().to_string());
        seen.push(ms(start.into_std(), t::Instant::now().into_std()));
        // Reset after completion: pending again, until the new deadline.
        sleep.as_mut().reset(t::Instant::now() + t::Duration::from_millis(5));
        seen.push(sleep.is_elapsed().to_string());
        sleep.as_mut().await;
        seen.push(ms(start.into_std(), t::Instant::now().into_std()));
        seen
    }

    off_grid_deadlines_are_rounded_once => {
        // Move the paused clock off tokio's millisecond grid, then sleep to deadlines
        // between milliseconds: tickless rounds them exactly as tokio does.
        tokio::time::advance(t::Duration::from_nanos(300_001)).await;
        let mut observed = Vec::new();
        for nanos in [1_000_001_u64, 999_999, 1_000_000, 1_700_000, 64_000_001, 5] {
            let start = t::Instant::now();
            t::sleep_until(start + t::Duration::from_nanos(nanos)).await;
            observed.push(ms(start.into_std(), t::Instant::now().into_std()));
        }
        observed
    }
    due_timers_are_woken_when_advance_returns => {
        let mut observed = Vec::new();
        let mut sleep = tokio_test::task::spawn(t::sleep(t::Duration::from_millis(10)));
        observed.push(format!("{:?}", sleep.poll()));
        tokio::time::advance(t::Duration::from_millis(9)).await;
        observed.push(format!("{} {:?}", sleep.is_woken(), sleep.poll()));
        tokio::time::advance(t::Duration::from_millis(1)).await;
        observed.push(format!("{} {:?}", sleep.is_woken(), sleep.poll()));
        observed
    }
    zero_and_past_sleeps => {
        let start = t::Instant::now();
        t::sleep(t::Duration::ZERO).await;
        t::sleep_until(start - t::Duration::from_secs(1)).await;
        vec![ms(start.into_std(), t::Instant::now().into_std())]
    }

    interval_ticks_are_the_scheduled_instants => {
        let start = t::Instant::now();
        let mut interval = t::interval(t::Duration::from_millis(10));
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(ms(start.into_std(), interval.tick().await.into_std()));
        }
        let mut at = t::interval_at(start + t::Duration::from_millis(100), t::Duration::from_millis(7));
        for _ in 0..3 {
            seen.push(ms(start.into_std(), at.tick().await.into_std()));
        }
        seen
    }

    missed_tick_behaviours_after_a_stall => {
        let mut seen = Vec::new();
        for behavior in [
            t::MissedTickBehavior::Burst,
            t::MissedTickBehavior::Delay,
            t::MissedTickBehavior::Skip,
        ] {
            let start = t::Instant::now();
            let mut interval = t::interval(t::Duration::from_millis(10));
            interval.set_missed_tick_behavior(behavior);
            interval.tick().await;
            tokio::time::advance(t::Duration::from_millis(35)).await;
            for _ in 0..5 {
                seen.push(ms(start.into_std(), interval.tick().await.into_std()));
            }
            seen.push(format!("{behavior:?} done"));
        }
        seen
    }

    interval_resets => {
        let start = t::Instant::now();
        let mut interval = t::interval(t::Duration::from_millis(10));
        let mut seen = vec![ms(start.into_std(), interval.tick().await.into_std())];
        interval.reset();
        seen.push(ms(start.into_std(), interval.tick().await.into_std()));
        interval.reset_after(t::Duration::from_millis(3));
        seen.push(ms(start.into_std(), interval.tick().await.into_std()));
        interval.reset_at(start + t::Duration::from_millis(50));
        seen.push(ms(start.into_std(), interval.tick().await.into_std()));
        interval.reset_immediately();
        seen.push(ms(start.into_std(), interval.tick().await.into_std()));
        seen.push(format!("{:?}", interval.period()));
        seen
    }

    timeout_ok_and_elapsed => {
        let start = t::Instant::now();
        let mut seen = Vec::new();
        seen.push(format!("{:?}", t::timeout(t::Duration::from_millis(10), ready(1)).await));
        let slow = t::timeout(t::Duration::from_millis(10), pending::<()>()).await;
        seen.push(format!("{slow:?}"));
        let elapsed: t::error::Elapsed = slow.unwrap_err();
        seen.push(elapsed.to_string());
        seen.push(format!("{:?}", std::io::Error::from(elapsed).kind()));
        let until = t::timeout_at(start + t::Duration::from_millis(30), pending::<()>()).await;
        seen.push(format!("{until:?}"));
        seen.push(ms(start.into_std(), t::Instant::now().into_std()));
        seen
    }

    zero_duration_timeouts => {
        let mut seen = Vec::new();
        seen.push(format!("{:?}", t::timeout(t::Duration::ZERO, ready(1)).await));
        seen.push(format!("{:?}", t::timeout(t::Duration::ZERO, pending::<()>()).await));
        seen.push(format!("{:?}", t::timeout(t::Duration::ZERO, YieldTimes(0, 1)).await));
        seen.push(format!("{:?}", t::timeout(t::Duration::ZERO, YieldTimes(0, 5)).await));
        seen
    }

    timeout_over_into_future => {
        vec![format!("{:?}", t::timeout(t::Duration::from_secs(1), Answer).await)]
    }

    nested_timeouts => {
        let start = t::Instant::now();
        let inner = t::timeout(t::Duration::from_millis(10), pending::<()>());
        let outer = t::timeout(t::Duration::from_millis(20), inner).await;
        let first = format!("{outer:?} at {}", ms(start.into_std(), t::Instant::now().into_std()));
        let inner = t::timeout(t::Duration::from_millis(30), pending::<()>());
        let outer = t::timeout(t::Duration::from_millis(20), inner).await;
        let second = format!("{outer:?} at {}", ms(start.into_std(), t::Instant::now().into_std()));
        vec![first, second]
    }

    timeout_whose_inner_future_panics => {
        let handle = tokio::spawn(t::timeout(t::Duration::from_secs(1), async {
            t::sleep(t::Duration::from_millis(5)).await;
            panic!("inner future panicked (expected by this test)");
        }));
        let error = handle.await.unwrap_err();
        vec![format!("panic: {}", error.is_panic())]
    }

    is_elapsed_of_sleeps_never_polled => {
        let start = t::Instant::now();
        let plain = t::sleep(t::Duration::from_millis(5));
        let mut reset = pin!(t::sleep(t::Duration::from_secs(60)));
        reset.as_mut().reset(start + t::Duration::from_millis(5));
        t::sleep(t::Duration::from_millis(10)).await;
        vec![
            format!("never polled: {}", plain.is_elapsed()),
            format!("reset, never polled: {}", reset.is_elapsed()),
        ]
    }

    timeout_accessors => {
        let mut timeout = t::timeout(t::Duration::from_secs(1), YieldTimes(0, 2));
        timeout.get_mut().0 = 1;
        let seen = format!("{}", timeout.get_ref().0);
        vec![seen, format!("{}", timeout.into_inner().await)]
    }
}
