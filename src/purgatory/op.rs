//! One watched operation: its condition, its outcome, and the one atomic state that
//! decides how it ends.
//!
//! An operation ends exactly once: completed by its condition (a check found it true),
//! completed by force, expired, or cancelled. The state's phase says whether it waits,
//! whether a thread is running its condition now, or whether it has ended; the flags
//! record what arrived while the condition ran, for the runner to act on before it lets
//! go:
//!
//! | from | event | to |
//! | --- | --- | --- |
//! | waiting | a check | running (this thread runs the condition, with no lock held) |
//! | running | a check | running + recheck (the runner runs the condition again) |
//! | running again | a check | nothing: the check waits for this run to end, then claims it once more |
//! | running | the condition holds | ended: cancelled if flagged so; else completed |
//! | running | the condition does not hold | ended: cancelled / forced / expired if flagged (in that order); else running again if recheck (from its first run only); else waiting |
//! | waiting | expiry, cancel | ended: expired, cancelled (the cancel reports `true`) |
//! | running | expiry | running + expire (the runner ends it expired, unless the condition holds) |
//! | running | cancel, with no cancel or force flagged | running + cancel: the cancel reports `true` now, and the runner ends it cancelled, whatever the condition says |
//! | running | cancel, with a cancel or force flagged | nothing: the cancel reports `false` |
//! | waiting | force | ended: completed with the forced value |
//! | running | force, with no cancel flagged | running + force, the value parked; the forcer waits for the runner (the condition's own value wins if it holds) |
//! | running | force, with a cancel flagged | nothing: the value is handed back |
//! | ended | anything | nothing |
//!
//! So the condition never runs on two threads at once, a check that finds it running is
//! not lost (the runner checks again), and an expiry or cancel racing a check is decided
//! by one compare-and-swap: the loser observes nothing. Whoever ends the operation gets
//! [`Ended`] back and does what ending means (unlinking it from its keys, cancelling its
//! expiry): exactly once.
//!
//! Whoever is *told* how it ended is told exactly once too: a cancel that reports `true`
//! (it ended cancelled, and no hook ran), or the condition's `finish` with the outcome. A
//! cancel never waits: landing while the condition runs, it is the cancel's flag, set by
//! one compare-and-swap, that decides, so the runner ends the operation cancelled even if
//! the condition then holds (its value is dropped). That is what makes a cancel from any
//! thread, a condition's own included, report the truth without waiting for user code. A
//! force does wait for the runner (it reports whether its value was used, and the
//! condition's own value wins), so a force must not be made from inside the operation's
//! own condition.
//!
//! A runner runs the condition again once, not for as long as checks keep coming: checks
//! landing in every run would keep it running the condition for others without end (a
//! watch never returned while another thread checked its keys in a loop, issue 35). A
//! check that finds it running again waits for that run to end and claims it itself:
//! every run from then on starts after the check, so one more claim is enough. So a check
//! may wait for one run of a condition on another thread, and a condition must not check
//! its own operation's keys (it would wait for itself).
//!
//! The state is also the condition's lock: the thread that moved it to running, or from
//! waiting to ended, owns the condition until it moves the state on, and no other thread
//! touches it. So a run of a condition costs two compare-and-swaps and no lock: a check
//! runs every condition watching its key, so this is the cost that grows with the rate
//! squared (`unsafe` for that reason alone, in [`Op::cond`]'s three accessors; loom
//! checks the exclusion).

use crate::sync::{lock, AtomicU32, Mutex, Ordering, Spin, UnsafeCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Poll, Waker};

const PHASE: u32 = 3;
const WAITING: u32 = 0;
const RUNNING: u32 = 1;
const DONE: u32 = 2;
/// A check arrived while the condition ran.
const RECHECK: u32 = 4;
/// The deadline came while the condition ran.
const EXPIRE: u32 = 8;
/// The operation was withdrawn while the condition ran.
const CANCEL: u32 = 16;
/// A value was forced while the condition ran; it waits in `forced`.
const FORCE: u32 = 32;
/// The runner is running the condition again, for checks that came during its first run:
/// checks that come now wait for this run to end, instead of asking for another.
const AGAIN: u32 = 64;

/// How a watched operation ended.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickless::purgatory::{Outcome, Purgatory};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let replicas: Purgatory<&str, u64> = Purgatory::new();
/// let acked = replicas.watch(["replica-2"], Duration::from_millis(100), || None);
/// let outcome = acked.await; // nothing checks "replica-2" in time
/// let reply = match &outcome {
///     Outcome::Completed(offset) => format!("acked up to {offset}"),
///     Outcome::Expired => "request timed out".to_string(),
///     Outcome::Cancelled => "request withdrawn".to_string(),
/// };
/// assert_eq!(reply, "request timed out");
/// assert!(outcome.is_expired());
/// assert_eq!(outcome.completed(), None);
/// # }
/// ```
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Its condition held (or it was completed by force), with this value.
    Completed(T),
    /// Its deadline came first.
    Expired,
    /// It was withdrawn: its future dropped, or
    /// [`cancel_for_key`](super::Purgatory::cancel_for_key) called on one of its keys.
    Cancelled,
}

impl<T> Outcome<T> {
    /// Whether it completed.
    pub fn is_completed(&self) -> bool {
        matches!(self, Outcome::Completed(_))
    }

    /// Whether its deadline came first.
    pub fn is_expired(&self) -> bool {
        matches!(self, Outcome::Expired)
    }

    /// Whether it was withdrawn.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Outcome::Cancelled)
    }

    /// The value it completed with, if it did.
    pub fn completed(self) -> Option<T> {
        match self {
            Outcome::Completed(value) => Some(value),
            _ => None,
        }
    }
}

/// What the watcher of an operation supplies: its condition, and what to do when it ends.
pub(super) trait Condition<T>: Send {
    /// Whether the condition holds now: `Some` with the value it completes with.
    fn check(&mut self) -> Option<T>;

    /// The operation ended; hands the outcome back if this condition does not consume
    /// it (it is then kept for the operation's future).
    fn finish(self: Box<Self>, outcome: Outcome<T>) -> Option<Outcome<T>>;
}

/// What [`Op::claim`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// This thread is now the condition's runner: it must call [`Op::run`] next.
    Runner,
    /// Nothing for this thread to do: it has ended, or its runner will run it again.
    No,
    /// Its runner is running it again already: wait for that run to end
    /// ([`Op::await_again`]), then claim it once more.
    Wait,
}

/// What [`Op::force`] did.
#[derive(Debug)]
pub(super) enum Forced<T> {
    /// This call completed it: the caller now unlinks it, once.
    Here,
    /// The thread running its condition completed it with the forced value (and unlinks
    /// it).
    ByRunner,
    /// It had ended, or its condition held first: the value is handed back.
    No(T),
}

/// What [`Op::cancel`] (and an expiry) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    /// This call ended it: the caller now unlinks it, once.
    Here,
    /// Its condition is running: the runner ends it so (and unlinks it).
    ByRunner,
    /// It had ended, or (for a cancel) another cancel or a force came first.
    No,
}

impl Ending {
    /// Whether this call decided the operation's end: what a cancel reports.
    pub(super) fn decided(self) -> bool {
        self != Ending::No
    }
}

/// How this call ended the operation (the caller now unlinks it, once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    Completed,
    Expired,
    Cancelled,
}

pub(super) struct Op<T> {
    state: AtomicU32,
    /// The condition, until the operation ends. Touched only by the operation's owner:
    /// the thread whose compare-and-swap moved the state to running (until its next
    /// change of the state), or from waiting to ended. The state's acquire-release
    /// changes order each owner's accesses after the previous owner's.
    cond: UnsafeCell<Option<Box<dyn Condition<T>>>>,
    /// A value forced while the condition ran.
    forced: Mutex<Option<T>>,
    /// Where forces wait for the runner to end it, and checks for its run again to end
    /// (told by the runner once it has).
    ended: Spin,
    /// The outcome once ended (unless the condition consumed it), and the future's waker.
    slot: Mutex<Slot<T>>,
}

struct Slot<T> {
    /// Set by `end`, with `outcome`: the future sees both or neither.
    ended: bool,
    outcome: Option<Outcome<T>>,
    waker: Option<Waker>,
}

// SAFETY: `cond`, the one field that is not `Sync` by itself, is only touched by the
// operation's owner of the moment, one thread at a time, each owner's accesses ordered
// after the previous owner's by the state's acquire-release changes (see `Op::cond`); what
// it holds is `Send`.
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for Op<T> {}

impl<T: Send> Op<T> {
    pub(super) fn new(cond: Box<dyn Condition<T>>) -> Self {
        Op {
            state: AtomicU32::new(WAITING),
            cond: UnsafeCell::new(Some(cond)),
            forced: Mutex::new(None),
            ended: Spin::new(),
            slot: Mutex::new(Slot {
                ended: false,
                outcome: None,
                waker: None,
            }),
        }
    }

    /// Whether it has ended.
    pub(super) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) & PHASE == DONE
    }

    /// Runs the condition (here, or by the thread running it now, again); `Some` if this
    /// call ended the operation. Panics of the condition count as "does not hold".
    #[allow(unsafe_code)]
    pub(super) fn try_complete(&self) -> Option<Ended> {
        let mut claim = self.claim();
        if claim == Claim::Wait {
            self.await_again();
            claim = self.claim();
        }
        if claim == Claim::Runner {
            // SAFETY: the claim made this thread the runner.
            unsafe { self.run() }
        } else {
            None
        }
    }

    /// A check's first half: [`Claim::Runner`] if this thread is now the condition's
    /// runner; [`Claim::No`] if the thread running it now was asked to run it again, or it
    /// has ended; [`Claim::Wait`] if that thread is running it again already. One
    /// compare-and-swap, no user code: a check makes its claims under the lock of its
    /// key's shard.
    pub(super) fn claim(&self) -> Claim {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let (next, claim) = match state & PHASE {
                DONE => return Claim::No,
                // A write all the same (of the state it read), so that the runner's next
                // change, which ends that run, is ordered after it (and so after the
                // event this check announces), and so is every run that starts after.
                RUNNING if state & AGAIN != 0 => (state, Claim::Wait),
                RUNNING => (state | RECHECK, Claim::No),
                _ => (RUNNING, Claim::Runner),
            };
            match self
                .state
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return claim,
                Err(now) => state = now,
            }
        }
    }

    /// After [`Claim::Wait`]: returns once that run again has ended. Every run from then
    /// on starts after the check that waited, so one more claim is all that check owes:
    /// if it finds the condition running (again, even), that run will see its event.
    pub(super) fn await_again(&self) {
        self.ended
            .until(|| self.state.load(Ordering::Acquire) & AGAIN == 0);
    }

    /// With the state running: runs the condition, and once more if a check arrived while
    /// it ran, then ends the operation if it held or an expiry, cancel or force arrived.
    /// `Some` if this call ended the operation; once it returns, the operation is no
    /// longer this thread's to touch (unless it ended it: then it unlinks it).
    ///
    /// # Safety
    ///
    /// Only by the runner: once per [`claim`](Self::claim) that returned
    /// [`Claim::Runner`], on that thread.
    #[allow(unsafe_code)]
    pub(super) unsafe fn run(&self) -> Option<Ended> {
        loop {
            // SAFETY: the state is running, and this thread moved it there: it owns the
            // condition.
            let held = unsafe { self.check_cond() };
            if let Some(value) = held {
                // A read-modify-write, like every other change of the state, so that the
                // flags set by racing threads are ordered before or after it, never lost
                // over it (a plain store is not ordered against their compare-and-swaps).
                let flags = self.state.swap(DONE, Ordering::AcqRel);
                if flags & (FORCE | AGAIN) != 0 {
                    // Forces wait for the end only once one is flagged; checks, for a run
                    // again.
                    self.ended.notify();
                }
                // SAFETY: this thread moved the state from running to ended.
                let cond = unsafe { self.take_cond() };
                if flags & CANCEL != 0 {
                    // A cancel landed while the condition ran, and was told it won.
                    drop(value);
                    self.end(cond, Outcome::Cancelled);
                    return Some(Ended::Cancelled);
                }
                // Otherwise the condition's own value wins over anything that arrived
                // meanwhile (a parked forced value goes back to its forcer).
                self.end(cond, Outcome::Completed(value));
                return Some(Ended::Completed);
            }
            let mut state = self.state.load(Ordering::Acquire);
            // A forced value is taken before the state says ended: its forcer, waiting for
            // that, takes back what is left (the value a holding condition did not need).
            let mut parked = None;
            let next = loop {
                if state & FORCE != 0 && parked.is_none() {
                    parked = lock(&self.forced).take();
                }
                // A flag that ends it wins over a recheck: running again would clear it.
                // A recheck is set only in the first run: checks that come during the run
                // again wait for it, so this thread is not kept running it for others.
                let next = if state & (FORCE | EXPIRE | CANCEL) != 0 {
                    DONE
                } else if state & RECHECK != 0 {
                    RUNNING | AGAIN
                } else {
                    WAITING
                };
                match self.state.compare_exchange_weak(
                    state,
                    next,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break next,
                    Err(now) => state = now,
                }
            };
            if state & (FORCE | AGAIN) != 0 && next & AGAIN == 0 {
                // Forces wait for the end only once one is flagged; checks, for a run
                // again.
                self.ended.notify();
            }
            match next & PHASE {
                WAITING => return None,
                RUNNING => continue,
                _ => {
                    // SAFETY: this thread moved the state from running to ended.
                    let cond = unsafe { self.take_cond() };
                    let (outcome, ended) = if state & CANCEL != 0 {
                        (Outcome::Cancelled, Ended::Cancelled)
                    } else if state & FORCE != 0 {
                        let value = parked.expect("parked with the flag");
                        (Outcome::Completed(value), Ended::Completed)
                    } else {
                        (Outcome::Expired, Ended::Expired)
                    };
                    self.end(cond, outcome);
                    return Some(ended);
                }
            }
        }
    }

    /// Runs the condition in place; a panic counts as "does not hold".
    ///
    /// # Safety
    ///
    /// Only by the operation's owner while the state is running (see [`Op::cond`]).
    #[allow(unsafe_code)]
    unsafe fn check_cond(&self) -> Option<T> {
        self.cond.with_mut(|cond| {
            // SAFETY: the caller owns the condition: no other thread touches it.
            let cond = unsafe { &mut *cond }
                .as_mut()
                .expect("the condition is there until the operation ends");
            catch_unwind(AssertUnwindSafe(|| cond.check())).unwrap_or(None)
        })
    }

    /// Takes the condition out, to end the operation.
    ///
    /// # Safety
    ///
    /// Only by the thread that moved the state to ended (see [`Op::cond`]), once.
    #[allow(unsafe_code)]
    unsafe fn take_cond(&self) -> Box<dyn Condition<T>> {
        self.cond
            // SAFETY: the caller owns the condition: no other thread touches it.
            .with_mut(|cond| unsafe { &mut *cond }.take())
            .expect("taken once, by the thread that ended the operation")
    }

    /// The deadline came: `Some` if this call ended it (else it had ended, or its runner
    /// will, seeing the flag, unless the condition holds or a cancel came first).
    pub(super) fn expire(&self) -> Option<Ended> {
        (self.end_or_flag(EXPIRE, 0, Outcome::Expired) == Ending::Here).then_some(Ended::Expired)
    }

    /// Withdraws it, unless it has ended, or another cancel or a force came first. If its
    /// condition is running, the runner ends it cancelled whatever the condition says
    /// ([`Ending::ByRunner`]): this never waits, so it may be called from anywhere,
    /// the operation's own condition included.
    pub(super) fn cancel(&self) -> Ending {
        self.end_or_flag(CANCEL, CANCEL | FORCE, Outcome::Cancelled)
    }

    /// Completes it with `value` unless it has ended. If its condition is running, the
    /// value waits for the runner, which completes it with the value unless the condition
    /// holds (its own value wins); this call waits for the runner to finish, so must not
    /// be made from inside this operation's own condition.
    pub(super) fn force(&self, value: T) -> Forced<T> {
        let mut value = Some(value);
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            match state & PHASE {
                DONE => return Forced::No(value.take().expect("still ours")),
                // A cancel was told it won: the runner ends it cancelled.
                RUNNING if state & CANCEL != 0 => {
                    return Forced::No(value.take().expect("still ours"))
                }
                RUNNING if state & FORCE == 0 => {
                    // Parked and flagged under the slot's lock, so that of two forces
                    // racing here one parks and the other waits: neither overwrites the
                    // other's value, nor takes it back.
                    let mut forced = lock(&self.forced);
                    if forced.is_some() {
                        // Another force has parked (and flagged it, under this lock), or
                        // the condition held first: either way the runner ends it. Look
                        // again once it has.
                        drop(forced);
                        self.ended.until(|| self.is_done());
                        state = self.state.load(Ordering::Acquire);
                        continue;
                    }
                    *forced = value.take();
                    match self.state.compare_exchange_weak(
                        state,
                        state | FORCE,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            drop(forced);
                            return self.await_runner();
                        }
                        Err(now) => {
                            value = forced.take();
                            state = now;
                        }
                    }
                }
                // Another force is parked: wait for the runner, then look again.
                RUNNING => {
                    self.ended.until(|| self.is_done());
                    state = self.state.load(Ordering::Acquire);
                }
                _ => match self.state.compare_exchange_weak(
                    state,
                    DONE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        // SAFETY: this thread moved the state from waiting to ended.
                        #[allow(unsafe_code)]
                        let cond = unsafe { self.take_cond() };
                        let value = value.take().expect("not parked");
                        self.end(cond, Outcome::Completed(value));
                        return Forced::Here;
                    }
                    Err(now) => state = now,
                },
            }
        }
    }

    /// After parking a forced value: waits for the runner to end the operation, and says
    /// whether it used the value.
    fn await_runner(&self) -> Forced<T> {
        self.ended.until(|| self.is_done());
        match lock(&self.forced).take() {
            Some(value) => Forced::No(value), // the condition held first
            None => Forced::ByRunner,
        }
    }

    /// Ends a waiting operation with `outcome` ([`Ending::Here`]), or flags a running
    /// one with `flag` unless one of `refused` is set already ([`Ending::ByRunner`]).
    fn end_or_flag(&self, flag: u32, refused: u32, outcome: Outcome<T>) -> Ending {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let (next, done) = match state & PHASE {
                DONE => return Ending::No,
                RUNNING if state & refused != 0 => return Ending::No,
                RUNNING => (state | flag, Ending::ByRunner),
                _ => (DONE, Ending::Here),
            };
            match self
                .state
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if done == Ending::Here {
                        // SAFETY: this thread moved the state from waiting to ended.
                        #[allow(unsafe_code)]
                        let cond = unsafe { self.take_cond() };
                        self.end(cond, outcome);
                    }
                    return done;
                }
                Err(now) => state = now,
            }
        }
    }

    /// After the state went to ended: hands the outcome to the condition, keeps what it
    /// hands back for the future, and wakes the future. No lock is held while user code
    /// (the condition's `finish`, the waker) runs.
    fn end(&self, cond: Box<dyn Condition<T>>, outcome: Outcome<T>) {
        let kept = catch_unwind(AssertUnwindSafe(|| cond.finish(outcome))).unwrap_or(None);
        let waker = {
            let mut slot = lock(&self.slot);
            slot.ended = true;
            slot.outcome = kept;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
        }
    }

    /// For the operation's future: its outcome once ended (taken: `Pending` after it is
    /// taken, and for an outcome its condition consumed); otherwise `waker` is woken when
    /// it ends.
    pub(super) fn poll(&self, waker: &Waker) -> Poll<Option<Outcome<T>>> {
        let mut slot = lock(&self.slot);
        if slot.ended {
            return Poll::Ready(slot.outcome.take());
        }
        let old = if slot.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            None
        } else {
            slot.waker.replace(waker.clone())
        };
        drop(slot);
        drop(old);
        Poll::Pending
    }
}
