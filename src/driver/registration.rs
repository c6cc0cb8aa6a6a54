//! A registration on a timer's shard: the one mechanism `Sleep`, `Interval` and
//! `DelayQueue` are built on. It owns its wheel entry (ground rule 3): it alone removes it,
//! on completion, reset or drop, and it records each change of its state *before* any
//! waker runs, so a waker that panics cannot leave it holding a key that is no longer its
//! own.

use super::clock::Clock;
use super::shard::{Registered, Shard};
use std::fmt;
use std::sync::Arc;
use std::task::{Poll, Waker};

// `Registration::state` is one of these, or below them all, the key of its wheel entry.

/// Not in the wheel.
pub(crate) const IDLE: usize = usize::MAX;
/// Completed; not in the wheel.
pub(crate) const ELAPSED: usize = usize::MAX - 1;
/// Not in the wheel, and free for the owner to give a meaning (`Sleep` does).
pub(crate) const OWNER_A: usize = usize::MAX - 2;
/// Not in the wheel, and free for the owner to give a meaning (`Sleep` does).
pub(crate) const OWNER_B: usize = usize::MAX - 3;

/// A timer entry on one shard, by tick. 16 bytes.
pub(crate) struct Registration {
    shard: Arc<Shard>,
    state: usize,
}

impl Registration {
    pub(crate) fn new(shard: Arc<Shard>, state: usize) -> Self {
        debug_assert!(state >= OWNER_B, "a new registration holds no key");
        Registration { shard, state }
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.shard.core.clock
    }

    pub(crate) fn state(&self) -> usize {
        self.state
    }

    /// Sets a state that holds no key; a held entry is forgotten first.
    pub(crate) fn set_state(&mut self, state: usize) {
        debug_assert!(state >= OWNER_B);
        self.cancel();
        self.state = state;
    }

    /// The wheel key, if registered.
    pub(crate) fn key(&self) -> Option<usize> {
        (self.state < OWNER_B).then_some(self.state)
    }

    /// Registers at `deadline_tick`, to wake `waker` (none yet: a later poll stores one).
    /// `Ready` (and the state is `ELAPSED`) when the deadline has already come.
    pub(crate) fn register(&mut self, deadline_tick: u64, waker: Option<&Waker>) -> Poll<()> {
        self.cancel();
        let waker = waker.unwrap_or(Waker::noop()).clone();
        match self.shard.register(deadline_tick, waker) {
            Registered::Pending(key) => {
                self.state = key;
                Poll::Pending
            }
            Registered::Elapsed => {
                self.state = ELAPSED;
                Poll::Ready(())
            }
        }
    }

    /// Polls: `Ready` once fired (the entry is then gone and the state `ELAPSED`), or
    /// already `ELAPSED`; otherwise `waker` is the one the timer will wake. A registration
    /// holding no key and not elapsed stays `Pending`: its owner registers it.
    pub(crate) fn poll(&mut self, waker: &Waker) -> Poll<()> {
        match self.key() {
            Some(key) => {
                let poll = self.shard.poll(key, waker);
                if poll.is_ready() {
                    self.state = ELAPSED;
                }
                poll
            }
            None if self.state == ELAPSED => Poll::Ready(()),
            None => Poll::Pending,
        }
    }

    /// Whether the deadline has come: the driver fired it, or it completed.
    pub(crate) fn is_elapsed(&self) -> bool {
        match self.key() {
            Some(key) => self.shard.fired(key),
            None => self.state == ELAPSED,
        }
    }

    /// Moves the deadline to `deadline_tick`, keeping the waker. Whether it has come is
    /// the wheel's to judge, by the time of its last turn, not the caller's clock (which a
    /// thread outside a paused runtime would read wrong), as tokio judges a reset by its
    /// own timer's time: a registered timer whose new deadline has come is removed and its
    /// waker woken (after the state says `ELAPSED`), so the waiting task polls and
    /// completes; one due since the last turn fires on the next. One not registered is
    /// registered, with no waker, as tokio does.
    pub(crate) fn reset(&mut self, deadline_tick: u64) {
        let Some(key) = self.key() else {
            let _ = self.register(deadline_tick, None);
            return;
        };
        if let Err(waker) = self.shard.reset(key, deadline_tick) {
            self.state = ELAPSED;
            self.shard.core.wake(waker);
        }
    }

    /// Forgets a registered timer (the state becomes `IDLE`). O(1).
    pub(crate) fn cancel(&mut self) {
        if let Some(key) = self.key() {
            self.state = IDLE;
            let waker = self.shard.cancel(key);
            self.shard.core.release(waker);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Registration");
        match self.state {
            IDLE => debug.field("state", &"idle"),
            ELAPSED => debug.field("state", &"elapsed"),
            key if key < OWNER_B => debug.field("key", &key),
            _ => debug.field("state", &"not registered"),
        };
        debug.finish()
    }
}
