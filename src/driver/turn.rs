//! The turn: every shard advanced to the current tick, what is due woken with no lock
//! held (ground rules 2 and 3), and the next tick to turn at.

use super::shard::{Shard, ShardState};
use super::{Core, Mode};
use crate::sync::{fence, Ordering};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::Waker;

/// Wakers woken per lock release while a turn fires timers from the ready list.
const WAKE_BATCH: usize = 128;

/// Above this capacity a turn's scratch vectors are shrunk at its end.
const SCRATCH_KEPT: usize = 16 * 1024;

/// What a turn works with, kept between turns for its capacity: a turn allocates nothing
/// once these have grown.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Due entries handed out by an advance, with their keys, before they are sorted.
    fired: Vec<(usize, Waker)>,
    due: Due,
}

/// Due entries sorted by kind ([`Due::sort`]).
#[derive(Default)]
struct Due {
    /// Wakers of due timers, woken in batches.
    wakers: Vec<Waker>,
    /// Due run entries with their deadline ticks, run after every shard is turned.
    runs: Vec<(u64, Waker)>,
    /// Shards' keepalives let go of by the turn, dropped with no lock held.
    keepalives: Vec<Arc<Shard>>,
}

impl Due {
    /// A due entry's taken waker, to be woken (`wakers`) or, for a run entry, run after
    /// the turn (`runs`): the driver takes a fired run entry out of the wheel itself; what
    /// its waker runs decides, against a racing cancel, whether it runs.
    fn sort(&mut self, state: &mut ShardState, key: usize, waker: Waker) {
        if state.is_run(key) {
            let tick = state.wheel.deadline_tick(key);
            drop(state.wheel.try_remove(key)); // the no-op waker left by `take`
            if let Some(keepalive) = state.run_removed(key) {
                self.keepalives.push(keepalive);
            }
            self.runs.push((tick, waker));
        } else {
            self.wakers.push(waker);
        }
    }
}

impl Core {
    /// One turn: advances every shard to `now_tick`, wakes every due timer in batches of
    /// [`WAKE_BATCH`] with the shard's lock released, sets each shard's `armed`, then runs
    /// the due run entries of all shards in deadline order (by tick; ties as they came), and
    /// returns the tick the driver should next turn at (`None`: only when notified).
    pub(crate) fn turn(&self, now_tick: u64, scratch: &mut Scratch) -> Option<u64> {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        self.clock.saw(now_tick);
        let manual = self.mode() == Mode::Manual;
        let mut next: Option<u64> = None;
        let mut panics = 0;
        for shard in self.shards() {
            let mut state = shard.lock_for_turn();
            let mut looked_again = false;
            // Again from here, once, when the second look below finds the owner's log written.
            let shard_next = loop {
                if state.wheel.ready_is_empty() {
                    // The due entries' wakers are taken as the flush finds them, in cache;
                    // walking the ready list afterwards would miss on every entry (W2). Only
                    // when nothing waits there already, so the order is the ready list's.
                    let fired = &mut scratch.fired;
                    state
                        .wheel
                        .advance_handing_out(now_tick, |key, waker| fired.push((key, take(waker))));
                    for (key, waker) in scratch.fired.drain(..) {
                        scratch.due.sort(&mut state, key, waker);
                    }
                } else {
                    state.wheel.advance(now_tick);
                }
                loop {
                    while scratch.due.wakers.len() < WAKE_BATCH {
                        let Some((key, waker)) = state.wheel.pop_ready() else {
                            break;
                        };
                        let waker = take(waker);
                        scratch.due.sort(&mut state, key, waker);
                    }
                    if scratch.due.wakers.is_empty() {
                        break;
                    }
                    drop(state);
                    panics += wake_all(&mut scratch.due.wakers);
                    state = shard.lock_for_turn();
                }
                let shard_next = state.wheel.next_expiration();
                if !manual {
                    state.armed = shard_next;
                }
                let logged = state.logged;
                let head = state.head;
                drop(state); // publishes `armed` for the owner
                if logged {
                    // The turn's half of the pair with the owner's register (see `owner`):
                    // the owner read this `armed` and the wheel's time, or its insert is
                    // seen here. Seen as the log moved past the head this turn left, not as
                    // a log not yet drained: another lock may have drained the insert since,
                    // due, and its notice does nothing on a manual clock (only the token's
                    // holder, this turn, turns one), so the turn looks again.
                    fence(Ordering::SeqCst);
                    if shard.log_moved_since(head) {
                        if !looked_again {
                            looked_again = true;
                            state = shard.lock_for_turn();
                            continue;
                        }
                        // Not again, or an owner that keeps registering keeps the turn
                        // here: a lock whose drain applies rule 4 against the `armed` just
                        // set, and that tells the driver (this thread, which holds the
                        // token: at most one more turn) of what another lock drained due.
                        let mut state = shard.lock();
                        if !state.wheel.ready_is_empty() {
                            state.notify_after(now_tick);
                        }
                    }
                }
                break shard_next;
            };
            next = match (next, shard_next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.count_panics(panics);
        if !scratch.due.runs.is_empty() {
            let fired = scratch.due.runs.len();
            self.runs_removed(fired);
            self.runs_fired.fetch_add(fired as u64, Ordering::Relaxed);
            scratch.due.runs.sort_by_key(|&(tick, _)| tick);
            let mut failed = 0;
            for (_, run) in scratch.due.runs.drain(..) {
                if catch_unwind(AssertUnwindSafe(|| run.wake())).is_err() {
                    failed += 1;
                }
            }
            if failed > 0 {
                self.run_panics.fetch_add(failed, Ordering::Relaxed);
            }
        }
        scratch.due.keepalives.clear();
        // A flush of many timers at once grew these; do not hold that memory for good.
        for capacity in [scratch.due.wakers.capacity(), scratch.fired.capacity()] {
            if capacity > SCRATCH_KEPT {
                scratch.due.wakers.shrink_to(WAKE_BATCH);
                scratch.fired.shrink_to(WAKE_BATCH);
            }
        }
        next
    }
}

/// Takes a stored waker, leaving the no-op one (waking that one does nothing).
fn take(waker: &mut Waker) -> Waker {
    std::mem::replace(waker, Waker::noop().clone())
}

/// Wakes and empties `wakers`, catching panics; returns how many panicked.
pub(super) fn wake_all(wakers: &mut Vec<Waker>) -> u64 {
    let mut panics = 0;
    for waker in wakers.drain(..) {
        if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
            panics += 1;
        }
    }
    panics
}
