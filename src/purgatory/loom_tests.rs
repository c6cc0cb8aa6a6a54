//! Every interleaving of an operation's end, under loom: a check racing its expiry racing
//! a drop (cancel), and a check racing a check. Exactly one of them ends it, with the
//! outcome that one chose; its condition never runs on two threads at once; a check that
//! finds it running (or running again) is not lost. Then the key index (`index`), on the
//! real `Purgatory`: a watch racing a check, a `cancel_for_key` and a drop, two forces
//! racing a check that runs the condition, and a drop racing two checks of a key watched
//! twice.
//!
//! Run with `RUSTFLAGS="--cfg tickless_loom" cargo test --release --lib loom`.

use super::op::{Condition, Ended, Ending, Op, Outcome};
use crate::sync::Ordering;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Arc;
use std::task::Waker;

/// Completes once `ready` is set; asserts it never runs concurrently with itself.
struct Flagged {
    ready: Arc<AtomicBool>,
    running: Arc<AtomicBool>,
    overlaps: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

impl Condition<u8> for Flagged {
    fn check(&mut self) -> Option<u8> {
        // Counted, not asserted: a panic here would be caught as "does not hold".
        if self.running.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let ready = self.ready.load(Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
        ready.then_some(1)
    }

    fn finish(self: Box<Self>, outcome: Outcome<u8>) -> Option<Outcome<u8>> {
        self.finished.fetch_add(1, Ordering::SeqCst);
        Some(outcome)
    }
}

/// An operation on a [`Flagged`] condition, its `ready` flag, and the counts of its
/// finishes and of overlapping runs.
fn op(
    ready: bool,
) -> (
    Arc<Op<u8>>,
    Arc<AtomicBool>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
) {
    let ready = Arc::new(AtomicBool::new(ready));
    let finished = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let op = Arc::new(Op::new(Box::new(Flagged {
        ready: ready.clone(),
        running: Arc::new(AtomicBool::new(false)),
        overlaps: overlaps.clone(),
        finished: finished.clone(),
    })));
    (op, ready, finished, overlaps)
}

#[test]
fn loom_a_check_racing_expiry_racing_a_cancel_ends_it_once() {
    loom::model(|| {
        let (op, _, finished, overlaps) = op(true);
        let check = {
            let op = op.clone();
            loom::thread::spawn(move || op.try_complete())
        };
        let expire = {
            let op = op.clone();
            loom::thread::spawn(move || op.expire())
        };
        let cancelled = op.cancel();
        let by_cancel = (cancelled == Ending::Here).then_some(Ended::Cancelled);
        let ended: Vec<Ended> = [check.join().unwrap(), expire.join().unwrap(), by_cancel]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(ended.len(), 1, "ended by {ended:?}");
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "finished twice or never"
        );
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "ran on two threads at once"
        );
        let outcome = match op.poll(Waker::noop()) {
            std::task::Poll::Ready(Some(outcome)) => outcome,
            other => panic!("ended, but the future sees {other:?}"),
        };
        let expected = match ended[0] {
            Ended::Completed => Outcome::Completed(1),
            Ended::Expired => Outcome::Expired,
            Ended::Cancelled => Outcome::Cancelled,
        };
        assert_eq!(outcome, expected);
        assert_eq!(
            cancelled.decided(),
            outcome.is_cancelled(),
            "the cancel reported {cancelled:?}, the operation ended {outcome:?}"
        );
    });
}

#[test]
fn loom_a_check_finding_the_condition_running_is_not_lost() {
    loom::model(|| {
        let (op, ready, _, overlaps) = op(false);
        let first = {
            let op = op.clone();
            loom::thread::spawn(move || op.try_complete())
        };
        // The condition turns true, then a second check: whichever check runs after that
        // (this one, or the first one again, asked to) completes it.
        ready.store(true, Ordering::SeqCst);
        let second = op.try_complete();
        let first = first.join().unwrap();
        let completed = [first, second]
            .into_iter()
            .filter(|ended| *ended == Some(Ended::Completed))
            .count();
        assert_eq!(
            completed, 1,
            "lost, or completed twice: {first:?} {second:?}"
        );
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "ran on two threads at once"
        );
        assert!(op.is_done());
    });
}

#[test]
fn loom_a_check_finding_the_condition_running_again_is_not_lost() {
    // Two checks, one of which may make the other's thread run the condition again; then
    // the event, and a third check, which may find that run under way: it waits for it to
    // end, and claims it once more. Whichever way, it completes, once.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(4);
    model.check(|| {
        let (op, ready, finished, overlaps) = op(false);
        let checks: Vec<_> = (0..2)
            .map(|_| {
                let op = op.clone();
                loom::thread::spawn(move || op.try_complete())
            })
            .collect();
        ready.store(true, Ordering::SeqCst);
        let last = op.try_complete();
        let ended: Vec<Ended> = checks
            .into_iter()
            .map(|check| check.join().unwrap())
            .chain([last])
            .flatten()
            .collect();
        assert_eq!(ended, [Ended::Completed], "lost, or ended twice");
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn loom_an_expiry_arriving_with_a_recheck_is_not_lost() {
    loom::model(|| {
        // The condition never holds: two checks and the expiry race; whatever the
        // interleaving, the expiry ends it (a recheck asked of the runner must not wipe
        // the expiry it was also told of).
        let (op, _, finished, overlaps) = op(false);
        let checks: Vec<_> = (0..2)
            .map(|_| {
                let op = op.clone();
                loom::thread::spawn(move || op.try_complete())
            })
            .collect();
        let expired = op.expire();
        let ended: Vec<Ended> = checks
            .into_iter()
            .map(|check| check.join().unwrap())
            .chain([expired])
            .flatten()
            .collect();
        assert_eq!(ended, [Ended::Expired], "lost, or ended twice");
        assert!(op.is_done());
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    });
}

/// A cancel racing a check that runs the condition (holding, or not): the cancel
/// reports `true` exactly when the operation ends cancelled, whoever ends it.
fn a_cancel_racing_a_running_condition_is_told_the_truth(ready: bool) {
    loom::model(move || {
        let (op, _, finished, overlaps) = op(ready);
        let check = {
            let op = op.clone();
            loom::thread::spawn(move || op.try_complete())
        };
        let reported = cancel_reported(&op);
        check.join().unwrap();
        assert!(op.is_done());
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        let outcome = match op.poll(Waker::noop()) {
            std::task::Poll::Ready(Some(outcome)) => outcome,
            other => panic!("ended, but the future sees {other:?}"),
        };
        assert_eq!(
            reported,
            outcome.is_cancelled(),
            "cancel reported {reported}, the operation ended {outcome:?}"
        );
    });
}

fn cancel_reported(op: &Op<u8>) -> bool {
    op.cancel().decided()
}

#[test]
fn loom_a_cancel_racing_a_condition_that_holds_is_told_the_truth() {
    a_cancel_racing_a_running_condition_is_told_the_truth(true);
}

#[test]
fn loom_a_cancel_racing_a_condition_that_does_not_hold_is_told_the_truth() {
    a_cancel_racing_a_running_condition_is_told_the_truth(false);
}

#[test]
fn loom_a_force_racing_a_cancel_racing_a_running_condition_tells_one_of_them() {
    let mut model = loom::model::Builder::new();
    // The forcer waits for the runner (blocked, under loom: see `sync::Spin`); bounded
    // preemptions keep the model as small as it was when that wait was a spin.
    model.preemption_bound = Some(3);
    model.check(|| {
        let (op, _, finished, _) = op(false);
        let check = {
            let op = op.clone();
            loom::thread::spawn(move || op.try_complete())
        };
        let force = {
            let op = op.clone();
            loom::thread::spawn(move || op.force(9))
        };
        let cancelled = op.cancel();
        check.join().unwrap();
        let forced = force.join().unwrap();
        assert!(op.is_done());
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        let outcome = match op.poll(Waker::noop()) {
            std::task::Poll::Ready(Some(outcome)) => outcome,
            other => panic!("ended, but the future sees {other:?}"),
        };
        let force_won = !matches!(forced, super::op::Forced::No(_));
        assert!(
            cancelled.decided() != force_won,
            "cancel {cancelled:?} and force {forced:?}: exactly one wins"
        );
        let expected = if force_won {
            Outcome::Completed(9)
        } else {
            Outcome::Cancelled
        };
        assert_eq!(outcome, expected);
    });
}

// The key index itself: the real `Purgatory`, on a manual timer that never fires, one key,
// one operation. Its operations' `Arc`s are loom's (`crate::sync::Arc`), so loom fails a
// model that uses one after the last reference went (`from_raw` of an unknown `Arc`), or
// leaves one behind ("Arc leaked").

mod index {
    use super::super::{DelayedOperation, Outcome, Purgatory, Watch};
    use crate::Timer;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    /// Long enough that the manual clock, which nobody advances, never reaches it.
    const TIMEOUT: Duration = Duration::from_secs(60);
    const VALUE: u8 = 7;

    fn manual_timer() -> Timer {
        Timer::builder()
            .manual_clock()
            .shards(1)
            .build()
            .expect("a manual timer")
    }

    /// What an operation's hooks were told (counted outside loom: only read after joins).
    #[derive(Default)]
    struct Told {
        completed: AtomicUsize,
        expired: AtomicUsize,
    }

    /// Completes with [`VALUE`] once `ready` is set (the event a check announces).
    struct Produce {
        ready: Arc<AtomicBool>,
        told: std::sync::Arc<Told>,
    }

    impl DelayedOperation for Produce {
        type Output = u8;

        fn try_complete(&mut self) -> Option<u8> {
            self.ready.load(Ordering::SeqCst).then_some(VALUE)
        }

        fn on_complete(&mut self, output: u8) {
            assert_eq!(output, VALUE);
            self.told.completed.fetch_add(1, Ordering::SeqCst);
        }

        fn on_expiration(&mut self) {
            self.told.expired.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// After everything joined: the operation left the key and the timer, and was ended
    /// (so counted out) once.
    fn assert_left_everything(purgatory: &Purgatory<u8, u8>, timer: &Timer) {
        assert_eq!(
            (purgatory.watched(), purgatory.delayed()),
            (0, 0),
            "left linked, or unlinked twice"
        );
        assert!(purgatory.inner.watching(&1).is_empty(), "left in the index");
        assert_eq!(timer.pending(), 0, "its expiry left on the timer");
    }

    #[test]
    fn loom_a_watch_racing_a_check_then_dropped_ends_once_and_is_freed() {
        loom::model(|| {
            let timer = manual_timer();
            let purgatory: Purgatory<u8, u8> = Purgatory::with_timer(timer.clone());
            let ready = Arc::new(AtomicBool::new(false));
            let told = std::sync::Arc::new(Told::default());
            let checker = {
                let purgatory = purgatory.clone();
                let ready = ready.clone();
                loom::thread::spawn(move || {
                    ready.store(true, Ordering::SeqCst);
                    purgatory.check(&1)
                })
            };
            let operation = Produce {
                ready,
                told: told.clone(),
            };
            // Dropped at once: it cancels the operation unless it ended, racing the check
            // (which may still be inside it, holding it only by the index's reference).
            drop(Watch {
                handle: purgatory.watch_operation([1], TIMEOUT, operation),
            });
            let checked = checker.join().unwrap();
            let completed = told.completed.load(Ordering::SeqCst);
            assert!(completed <= 1, "completed {completed} times");
            assert_eq!(told.expired.load(Ordering::SeqCst), 0, "expired unadvanced");
            assert!(
                checked <= completed,
                "the check counted {checked}, the hooks were told {completed}"
            );
            assert_left_everything(&purgatory, &timer);
        });
    }

    #[test]
    fn loom_a_watch_racing_a_check_and_a_cancel_for_its_key_then_dropped_ends_once() {
        // Three threads: a check, a `cancel_for_key` (which holds references of its
        // own) and the watch, dropped at once. Whoever decides, it ends once: completed
        // (told once, with the condition's value) or cancelled (told nothing), and a
        // cancel reports a cancel that happened. Unbounded, this model does not finish in
        // 7 minutes here; bounded to four preemptions it takes about 3 s (five: 15 s).
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(4);
        model.check(|| {
            let timer = manual_timer();
            let purgatory: Purgatory<u8, u8> = Purgatory::with_timer(timer.clone());
            let ready = Arc::new(AtomicBool::new(false));
            let told = std::sync::Arc::new(Told::default());
            let checker = {
                let purgatory = purgatory.clone();
                let ready = ready.clone();
                loom::thread::spawn(move || {
                    ready.store(true, Ordering::SeqCst);
                    purgatory.check(&1)
                })
            };
            let canceller = {
                let purgatory = purgatory.clone();
                loom::thread::spawn(move || purgatory.cancel_for_key(&1))
            };
            let operation = Produce {
                ready,
                told: told.clone(),
            };
            drop(Watch {
                handle: purgatory.watch_operation([1], TIMEOUT, operation),
            });
            let checked = checker.join().unwrap();
            let cancelled = canceller.join().unwrap();
            let completed = told.completed.load(Ordering::SeqCst);
            assert!(completed <= 1, "completed {completed} times");
            assert!(
                cancelled + completed <= 1,
                "cancel_for_key cancelled {cancelled}, yet it completed {completed} times"
            );
            assert_eq!(told.expired.load(Ordering::SeqCst), 0, "expired unadvanced");
            assert!(
                checked <= completed,
                "the check counted {checked}, the hooks were told {completed}"
            );
            assert_left_everything(&purgatory, &timer);
        });
    }

    #[test]
    fn loom_a_check_racing_a_watch_is_not_lost() {
        loom::model(|| {
            let timer = manual_timer();
            let purgatory: Purgatory<u8, u8> = Purgatory::with_timer(timer.clone());
            let ready = Arc::new(AtomicBool::new(false));
            let checker = {
                let purgatory = purgatory.clone();
                let ready = ready.clone();
                loom::thread::spawn(move || {
                    ready.store(true, Ordering::SeqCst);
                    purgatory.check(&1)
                })
            };
            let mut watch = purgatory.watch([1], TIMEOUT, move || {
                ready.load(Ordering::SeqCst).then_some(VALUE)
            });
            let checked = checker.join().unwrap();
            // The event came before the check: the check ran the condition, or asked the
            // watcher (its runner then) to, or came before the link and the watcher's
            // second try saw it. Either way it completed, once.
            assert!(watch.is_done(), "the check was lost");
            assert!(checked <= 1);
            let outcome = Pin::new(&mut watch).poll(&mut Context::from_waker(Waker::noop()));
            assert_eq!(outcome, Poll::Ready(Outcome::Completed(VALUE)));
            drop(watch);
            assert_left_everything(&purgatory, &timer);
        });
    }

    #[test]
    fn loom_two_forces_racing_a_running_condition_complete_it_once_with_one_value() {
        let mut model = loom::model::Builder::new();
        // A force that finds the condition running waits for the runner (blocked, under
        // loom: see `sync::Spin`, without which two forces spinning at once never end).
        // Even so, unbounded, this model does not finish in 6 minutes here; bounded to
        // three preemptions it takes about a second.
        model.preemption_bound = Some(3);
        model.check(|| {
            let timer = manual_timer();
            let purgatory: Purgatory<u8, u8> = Purgatory::with_timer(timer.clone());
            // Never holds: the watch's two tries leave it linked, and a force decides.
            let watch = Arc::new(purgatory.watch([1], TIMEOUT, || None));
            let checker = {
                let purgatory = purgatory.clone();
                loom::thread::spawn(move || purgatory.check(&1))
            };
            let forces: Vec<_> = [7, 8]
                .into_iter()
                .map(|value| {
                    let watch = watch.clone();
                    loom::thread::spawn(move || (value, watch.force_complete(value)))
                })
                .collect();
            let results: Vec<(u8, Result<(), u8>)> =
                forces.into_iter().map(|f| f.join().unwrap()).collect();
            let checked = checker.join().unwrap();
            let winners: Vec<u8> = results
                .iter()
                .filter(|(_, result)| result.is_ok())
                .map(|&(value, _)| value)
                .collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            for (value, result) in &results {
                if let Err(back) = result {
                    assert_eq!(back, value, "a losing force gets its own value back");
                }
            }
            assert!(checked <= 1);
            let mut watch = Arc::try_unwrap(watch).unwrap_or_else(|_| unreachable!());
            let outcome = Pin::new(&mut watch).poll(&mut Context::from_waker(Waker::noop()));
            assert_eq!(outcome, Poll::Ready(Outcome::Completed(winners[0])));
            drop(watch);
            assert_left_everything(&purgatory, &timer);
        });
    }

    #[test]
    fn loom_a_drop_racing_checks_of_a_key_watched_twice_ends_it_once_and_frees_it() {
        // Issue 35: an operation watched twice under one key, two checks of that key (the
        // second may find the watcher running the condition again for the first), and
        // the watch dropped at once. It ends cancelled, once, leaves the key and the timer,
        // and is freed; its condition never runs on two threads at once; and the watching
        // thread runs it at most three times (its two tries, and once again for checks
        // meanwhile), not once more per check that lands while it runs.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(5);
        model.check(|| {
            let timer = manual_timer();
            let purgatory: Purgatory<u8, u8> = Purgatory::with_timer(timer.clone());
            let checker = {
                let purgatory = purgatory.clone();
                loom::thread::spawn(move || purgatory.check(&1) + purgatory.check(&1))
            };
            let watcher = crate::sync::thread_id();
            let running = Arc::new(AtomicBool::new(false));
            let overlaps = std::sync::Arc::new(AtomicUsize::new(0));
            let watcher_runs = std::sync::Arc::new(AtomicUsize::new(0));
            let condition = {
                let (overlaps, watcher_runs) = (overlaps.clone(), watcher_runs.clone());
                move || {
                    if running.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    if crate::sync::thread_id() == watcher {
                        watcher_runs.fetch_add(1, Ordering::SeqCst);
                    }
                    running.store(false, Ordering::SeqCst);
                    None
                }
            };
            let watch = purgatory.watch([1, 1], TIMEOUT, condition);
            let ran_in_watch = watcher_runs.load(Ordering::SeqCst);
            drop(watch);
            assert_eq!(checker.join().unwrap(), 0, "it never holds");
            assert!(
                ran_in_watch <= 3,
                "the watching thread ran the condition {ran_in_watch} times in `watch`"
            );
            assert_eq!(
                overlaps.load(Ordering::SeqCst),
                0,
                "ran on two threads at once"
            );
            assert_left_everything(&purgatory, &timer);
        });
    }
}
