//! Several threads registering, resetting and cancelling on one shared `Timer`, against an
//! oracle of what must have fired: on a manual clock (exact, phase by phase), on the
//! thread driver and inside a multi-thread tokio runtime (real time: never early, none
//! lost, judged by `Instant::now`, not by the timer's own reading of the clock).

use tickless_test_support as support;

use std::pin::Pin;
use std::sync::{Arc, Barrier};
use std::task::Waker;
use std::time::Duration;
use support::*;
use tickless::{Driver, Instant, Sleep, Timer};

/// One thread's timers: each with the deadline the oracle expects and a counting waker.
#[derive(Default)]
struct Owned {
    timers: Vec<(Sleep, Instant, Arc<Counter>)>,
    /// On real time "never early" is judged by the clock itself (`Instant::now`), not by
    /// `Timer::now`, the library's own reading of it.
    real_time: bool,
}

impl Owned {
    fn real_time() -> Owned {
        Owned {
            real_time: true,
            ..Owned::default()
        }
    }

    /// The clock that judges "early": the manual clock, or the real one.
    fn now(&self, timer: &Timer) -> Instant {
        if self.real_time {
            Instant::now()
        } else {
            timer.now()
        }
    }

    /// One random operation: register a new timer, reset one, or cancel one.
    fn step(&mut self, timer: &Timer, rng: &mut Rng, now: Instant, horizon: Duration) {
        let delay = Duration::from_nanos(rng.below(horizon.as_nanos() as u64) + 1);
        match rng.below(10) {
            0..=4 => {
                let counter = Counter::new();
                let mut sleep = timer.sleep_until(now + delay);
                // On a clock that moves meanwhile, the deadline may already have passed.
                if poll_with(&mut sleep, &Waker::from(counter.clone())).is_ready() {
                    assert!(self.now(timer) >= now + delay, "completed early");
                } else {
                    self.timers.push((sleep, now + delay, counter));
                }
            }
            5..=7 if !self.timers.is_empty() => {
                let i = rng.below(self.timers.len() as u64) as usize;
                let (sleep, deadline, _) = &mut self.timers[i];
                if !sleep.is_elapsed() {
                    *deadline = now + delay;
                    Pin::new(sleep).reset(now + delay);
                }
            }
            _ if !self.timers.is_empty() => {
                let i = rng.below(self.timers.len() as u64) as usize;
                drop(self.timers.swap_remove(i));
            }
            _ => {}
        }
    }
}

/// Threads churn in phases; between phases the clock moves with no churn running, and
/// every thread checks that exactly its timers due by then have fired, each once.
#[test]
fn manual_clock_phases_fire_exactly_the_due_timers_of_every_thread() {
    // A panicking thread would leave the others at the barrier: fail instead of hanging.
    within(Duration::from_secs(60), "phases", phases);
}

fn phases() {
    const THREADS: usize = 4;
    const PHASES: usize = 40;
    let timer = manual();
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (timer, barrier) = (timer.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(t as u64 + 1);
                let mut owned = Owned::default();
                for _ in 0..PHASES {
                    let now = timer.now();
                    for _ in 0..50 {
                        owned.step(&timer, &mut rng, now, 5 * MS);
                    }
                    barrier.wait(); // churn done
                    barrier.wait(); // clock moved
                    let now = timer.now();
                    for (sleep, deadline, counter) in &mut owned.timers {
                        let due = *deadline <= now;
                        assert_eq!(counter.count(), usize::from(due), "woken {due}?");
                        assert_eq!(sleep.is_elapsed(), due, "deadline {deadline:?}");
                        let own = Waker::from(counter.clone());
                        assert_eq!(poll_with(sleep, &own).is_ready(), due);
                    }
                    owned.timers.retain(|(sleep, _, _)| !sleep.is_elapsed());
                }
                drop(owned);
            })
        })
        .collect();
    for _ in 0..PHASES {
        barrier.wait();
        timer.advance(Duration::from_micros(150));
        barrier.wait();
    }
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(timer.stats().registered, 0);
}

/// Churn and advances at once: nothing is woken twice, nothing is lost, and when the clock
/// has passed every deadline, every timer still held has fired.
#[test]
fn manual_clock_churn_racing_advances_loses_nothing() {
    const THREADS: usize = 3;
    let timer = manual();
    let start = timer.now();
    let advancer = {
        let timer = timer.clone();
        std::thread::spawn(move || {
            for _ in 0..2_000 {
                timer.advance(Duration::from_micros(5));
            }
        })
    };
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let timer = timer.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(100 + t as u64);
                let mut owned = Owned::default();
                for _ in 0..3_000 {
                    owned.step(&timer, &mut rng, timer.now(), 2 * MS);
                    for (sleep, deadline, counter) in &mut owned.timers {
                        assert!(counter.count() <= 1, "woken twice");
                        // With its own waker: another would replace it in the wheel.
                        if poll_with(sleep, &Waker::from(counter.clone())).is_ready() {
                            assert!(timer.now() >= *deadline, "completed early");
                        }
                    }
                    owned.timers.retain(|(sleep, _, _)| !sleep.is_elapsed());
                }
                owned
            })
        })
        .collect();
    advancer.join().unwrap();
    let owned: Vec<Owned> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    timer.advance_to(start + Duration::from_secs(1));
    for owned in owned {
        for (mut sleep, deadline, counter) in owned.timers {
            assert_eq!(counter.count(), 1, "deadline {deadline:?} never fired");
            assert!(poll_once(&mut sleep).is_ready());
        }
    }
    assert_eq!(timer.stats().registered, 0);
}

/// On real time: threads share one timer; a completed timer is never early, and every
/// timer not cancelled completes.
fn real_time_churn(timer: Timer, threads: usize) {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let timer = timer.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(200 + t as u64);
                let mut owned = Owned::real_time();
                for _ in 0..2_000 {
                    owned.step(&timer, &mut rng, Instant::now(), 3 * MS);
                    for (sleep, deadline, counter) in &mut owned.timers {
                        assert!(counter.count() <= 1, "woken twice");
                        // With its own waker: another would replace it in the wheel.
                        if poll_with(sleep, &Waker::from(counter.clone())).is_ready() {
                            assert!(Instant::now() >= *deadline, "completed early");
                        }
                    }
                    owned.timers.retain(|(sleep, _, _)| !sleep.is_elapsed());
                }
                // The rest complete, each at or after its deadline.
                for (sleep, deadline, _) in owned.timers.drain(..) {
                    futures::executor::block_on(sleep);
                    assert!(Instant::now() >= deadline, "completed early");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(timer.stats().registered, 0);
}

#[test]
fn thread_driver_churn_from_four_threads_is_never_early_and_loses_nothing() {
    let timer = Timer::builder()
        .driver(Driver::Thread)
        .tick(Duration::from_micros(100))
        .build()
        .unwrap();
    within(Duration::from_secs(60), "thread driver churn", move || {
        real_time_churn(timer, 4)
    });
}

#[test]
fn tokio_driver_churn_from_runtime_threads_is_never_early_and_loses_nothing() {
    let runtime = support::multi_thread();
    let timer = runtime.block_on(async { Timer::new() });
    let handle = runtime.handle().clone();
    within(Duration::from_secs(60), "tokio driver churn", move || {
        // Plain threads in the runtime's context: their registrations re-arm tokio's timer
        // from outside its workers.
        let _enter = handle.enter();
        real_time_churn(timer, 3)
    });
    // And tasks on the workers, sharing the timer.
    runtime.block_on(async {
        let timer = Timer::current();
        let tasks: Vec<_> = (0..8_u64)
            .map(|t| {
                let timer = timer.clone();
                tokio::spawn(async move {
                    let mut rng = Rng(300 + t);
                    for _ in 0..200 {
                        let deadline = Instant::now() + Duration::from_micros(rng.below(3_000));
                        timer.sleep_until(deadline).await;
                        assert!(Instant::now() >= deadline, "completed early");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(timer.stats().registered, 0);
    });
}
