//! The shutdown matrix: a runtime that drove a timer shuts down while a `Sleep`, an
//! `Interval`, a `DelayQueue` or a `Timeout` waits on it; afterwards the waiter is polled
//! on another runtime, under `futures::executor::block_on`, or dropped unpolled. Every
//! combination of runtime flavour and clock (current-thread real, current-thread paused
//! after an hour of virtual time, multi-thread real), of the timer (one built in the
//! runtime, or the runtime's default) and of the waiter: no hang, no panic, none early.

use tickless_test_support as support;

use futures::StreamExt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use support::*;
use tickless::{DelayQueue, Instant, Interval, Sleep, Timeout, Timer};

const WAIT: Duration = Duration::from_millis(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    CurrentThread,
    CurrentThreadPaused,
    MultiThread,
    /// tokio's alternative timer (`--cfg tokio_unstable`).
    #[cfg(tokio_unstable)]
    MultiThreadAltTimer,
}

#[derive(Clone, Copy, Debug)]
enum Which {
    Own,
    Default,
}

#[derive(Clone, Copy, Debug)]
enum After {
    OtherRuntime,
    BlockOn,
    Drop,
}

fn runtime(flavor: Flavor) -> tokio::runtime::Runtime {
    match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build(),
        Flavor::CurrentThreadPaused => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build(),
        Flavor::MultiThread => Ok(support::multi_thread_standard_timer()),
        #[cfg(tokio_unstable)]
        Flavor::MultiThreadAltTimer => Ok(support::alt_timer()),
    }
    .unwrap()
}

/// A waiter of each kind, due `WAIT` from now on its timer, and how to tell its deadline.
enum Waiter {
    Sleep(Sleep),
    Interval(Interval),
    Queue(DelayQueue<u32>),
    Timeout(Timeout<std::future::Pending<()>>),
}

impl Waiter {
    /// The waiter, and its timer if it has its own.
    fn make(kind: usize, which: Which) -> (Waiter, Option<Timer>) {
        let timer = match which {
            Which::Own => Some(Timer::new()),
            Which::Default => None,
        };
        let waiter = match (kind, &timer) {
            (0, Some(timer)) => Waiter::Sleep(timer.sleep(WAIT)),
            (0, None) => Waiter::Sleep(tickless::sleep(WAIT)),
            (1, Some(timer)) => Waiter::Interval(timer.interval_at(timer.now() + WAIT, WAIT)),
            (1, None) => Waiter::Interval(tickless::interval_at(Instant::now() + WAIT, WAIT)),
            (2, timer) => {
                let mut queue = match timer {
                    Some(timer) => DelayQueue::with_timer(timer.clone(), 1),
                    None => DelayQueue::new(),
                };
                queue.insert(7, WAIT);
                Waiter::Queue(queue)
            }
            (_, Some(timer)) => Waiter::Timeout(timer.timeout(WAIT, std::future::pending())),
            (_, None) => Waiter::Timeout(tickless::timeout(WAIT, std::future::pending())),
        };
        (waiter, timer)
    }

    /// Polls once; `Some(deadline)` when it completed (with the deadline it had), on the
    /// real clock once its runtime is gone.
    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> Option<Option<Instant>> {
        match self {
            Waiter::Sleep(sleep) => {
                let deadline = sleep.deadline();
                Pin::new(sleep)
                    .poll(cx)
                    .is_ready()
                    .then_some(Some(deadline))
            }
            Waiter::Interval(interval) => match interval.poll_tick(cx) {
                std::task::Poll::Ready(at) => Some(Some(at)),
                std::task::Poll::Pending => None,
            },
            Waiter::Queue(queue) => match queue.poll_next_unpin(cx) {
                std::task::Poll::Ready(item) => Some(item.map(|item| item.deadline())),
                std::task::Poll::Pending => None,
            },
            Waiter::Timeout(timeout) => match Pin::new(timeout).poll(cx) {
                std::task::Poll::Ready(result) => {
                    assert!(result.is_err(), "a pending future cannot complete");
                    Some(None)
                }
                std::task::Poll::Pending => None,
            },
        }
    }
}

/// One case; panics, naming it, when a promise breaks.
fn case(flavor: Flavor, which: Which, kind: usize, after: After) {
    let name = format!("{flavor:?} {which:?} kind {kind} then {after:?}");
    let rt = runtime(flavor);
    let (mut waiter, timer, made_at) = rt.block_on(async {
        if let Flavor::CurrentThreadPaused = flavor {
            tokio::time::advance(Duration::from_secs(3600)).await;
        }
        // Read before the waiter is made, so that time this thread spends preempted
        // between the two cannot pass for a waiter done early.
        let made_at = std::time::Instant::now();
        let (mut waiter, timer) = Waiter::make(kind, which);
        let polled = std::future::poll_fn(|cx| std::task::Poll::Ready(waiter.poll(cx))).await;
        // The interval's first tick is due `WAIT` from now too: nothing completes yet.
        assert!(polled.is_none(), "completed at once");
        (waiter, timer, made_at)
    });
    drop(rt);
    let finished = match after {
        After::Drop => {
            // Dropped unpolled after its runtime went: it leaves nothing in its timer.
            drop(waiter);
            if let Some(timer) = timer {
                assert_eq!(timer.stats().registered, 0, "{name}: an entry left behind");
                assert_eq!(timer.pending(), 0, "{name}");
            }
            return;
        }
        After::BlockOn => {
            futures::executor::block_on(std::future::poll_fn(|cx| match waiter.poll(cx) {
                Some(done) => std::task::Poll::Ready(done),
                None => std::task::Poll::Pending,
            }))
        }
        After::OtherRuntime => {
            let other = runtime(Flavor::CurrentThread);
            other.block_on(std::future::poll_fn(|cx| match waiter.poll(cx) {
                Some(done) => std::task::Poll::Ready(done),
                None => std::task::Poll::Pending,
            }))
        }
    };
    // Never early: real time has passed what was left of the wait, and the deadline
    // reported (on the real clock, once the runtime is gone) has passed.
    assert!(
        made_at.elapsed() >= WAIT - Duration::from_millis(2),
        "{name}: done after {:?}",
        made_at.elapsed()
    );
    if let Some(deadline) = finished {
        let now = Instant::now();
        assert!(
            now >= deadline,
            "{name}: {:?} before its deadline",
            deadline - now
        );
    }
}

#[test]
fn every_waiter_outlives_every_kind_of_runtime_shutdown() {
    let flavors = [
        Flavor::CurrentThread,
        Flavor::CurrentThreadPaused,
        Flavor::MultiThread,
        #[cfg(tokio_unstable)]
        Flavor::MultiThreadAltTimer,
    ];
    let mut cases = Vec::new();
    for flavor in flavors {
        for which in [Which::Own, Which::Default] {
            for kind in 0..4 {
                for after in [After::OtherRuntime, After::BlockOn, After::Drop] {
                    cases.push((flavor, which, kind, after));
                }
            }
        }
    }
    assert_eq!(cases.len(), 24 * flavors.len());
    // In parallel, a few at a time, each under a watchdog: a hang fails its case.
    for chunk in cases.chunks(12) {
        let running: Vec<_> = chunk
            .iter()
            .map(|&(flavor, which, kind, after)| {
                let name = format!("{flavor:?} {which:?} kind {kind} then {after:?}");
                std::thread::spawn(move || {
                    within(Duration::from_secs(20), &name.clone(), move || {
                        case(flavor, which, kind, after)
                    })
                })
            })
            .collect();
        for case in running {
            case.join().unwrap();
        }
    }
}

/// A runtime dropped under a pending `Interval`: the instants of the ticks after the
/// hand-over to the real clock are exactly a period after those before, as tokio's
/// `Interval` hands them out (`Burst` always; `Delay` and `Skip` too when the tick is not
/// late past tokio's 5 ms, and by their rule, never sooner, when it is). For runtimes on
/// the real clock; a paused runtime's clock is gone with it, and the ticks after are on
/// the real one.
#[test]
fn interval_instants_stay_exactly_a_period_apart_across_the_hand_over() {
    use tickless::MissedTickBehavior;
    const PERIOD: Duration = Duration::from_millis(50);
    const LATE: Duration = Duration::from_millis(5);
    let mut cases = Vec::new();
    for flavor in [
        Flavor::CurrentThread,
        Flavor::MultiThread,
        #[cfg(tokio_unstable)]
        Flavor::MultiThreadAltTimer,
    ] {
        for which in [Which::Own, Which::Default] {
            for behavior in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                for after in [After::BlockOn, After::OtherRuntime] {
                    cases.push((flavor, which, behavior, after));
                }
            }
        }
    }
    let check = |(flavor, which, behavior, after): (Flavor, Which, MissedTickBehavior, After)| {
        let name = format!("{flavor:?} {which:?} {behavior:?} then {after:?}");
        let rt = runtime(flavor);
        let (mut interval, first) = rt.block_on(async {
            let mut interval = match which {
                Which::Own => Timer::new().interval(PERIOD),
                Which::Default => tickless::interval(PERIOD),
            };
            interval.set_missed_tick_behavior(behavior);
            let first = interval.tick().await;
            let polled = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(interval.poll_tick(cx).is_pending())
            })
            .await;
            assert!(polled, "{name}: the second tick is pending at the drop");
            (interval, first)
        });
        drop(rt);
        let mut ticks = vec![first];
        let mut late = false;
        for _ in 0..2 {
            let next = async {
                let at = interval.tick().await;
                (at, Instant::now().saturating_duration_since(at) > LATE)
            };
            let (at, was_late) = match after {
                After::BlockOn => futures::executor::block_on(next),
                _ => runtime(Flavor::CurrentThread).block_on(next),
            };
            assert!(Instant::now() >= at, "{name}: a tick before its instant");
            ticks.push(at);
            late |= was_late;
        }
        for pair in ticks.windows(2) {
            let apart = pair[1] - pair[0];
            if behavior == MissedTickBehavior::Burst || !late {
                assert_eq!(apart, PERIOD, "{name}: ticks {ticks:?}");
            } else {
                assert!(apart >= PERIOD, "{name}: ticks {ticks:?}");
            }
        }
    };
    for chunk in cases.chunks(6) {
        let running: Vec<_> = chunk
            .iter()
            .map(|&case| {
                std::thread::spawn(move || {
                    within(Duration::from_secs(20), "interval", move || check(case))
                })
            })
            .collect();
        for case in running {
            case.join().unwrap();
        }
    }
}
