//! [`Core`]: what all shards of one timer share, its counters and its run-entry bound.
//! The turn is in [`turn`](super::turn), the token holder's work in
//! [`service`](super::service).

use super::clock::Clock;
use super::shard::Shard;
use super::token::Token;
use super::{Alarm, Mode, Scratch, Snapshot};
use crate::sync::{lock, AtomicU64, AtomicU8, Mutex, Ordering};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, Weak};
use std::task::Waker;

/// What all shards of one timer share.
pub(crate) struct Core {
    pub(crate) clock: Clock,
    pub(super) mode: AtomicU8,
    /// Buckets per level of every shard's wheel.
    pub(crate) wheel_size: usize,
    /// Set once, right after the shards are made. Weak: the shards hold the core.
    pub(super) shards: OnceLock<Box<[Weak<Shard>]>>,
    pub(super) token: Token,
    /// The alarm, in tokio mode. Only the token holder touches it, and takes it out while
    /// it works, so no lock is held while a turn wakes wakers.
    pub(super) alarm: Mutex<Option<Box<dyn Alarm>>>,
    /// The earliest tick inserts have asked the alarm for since it was last armed.
    pub(super) requested: AtomicU64,
    /// The token holder's scratch (see [`Scratch`]).
    pub(super) scratch: Mutex<Scratch>,
    /// The most run entries that may be pending at once, and how many are, counted only
    /// when there is a bound (the callbacks' `Builder::max_pending` sets it).
    pub(super) run_bound: OnceLock<usize>,
    pub(super) limited: AtomicU64,
    /// The driver thread, once one runs.
    pub(super) thread: OnceLock<std::thread::Thread>,
    pub(super) wakeups: AtomicU64,
    pub(super) waker_panics: AtomicU64,
    pub(super) runs_fired: AtomicU64,
    pub(super) run_panics: AtomicU64,
    /// Under loom, a fallback driver thread is recorded here rather than started.
    #[cfg(tickless_loom)]
    pub(super) fallback_started: crate::sync::AtomicBool,
    /// Under loom, an unpark of the driver thread is recorded here (no thread runs).
    #[cfg(tickless_loom)]
    pub(super) thread_unparked: crate::sync::AtomicBool,
}

impl Core {
    /// A core and `shards` shards of `wheel_size` buckets per level, in `mode`.
    pub(crate) fn new(
        clock: Clock,
        mode: Mode,
        wheel_size: usize,
        shards: usize,
    ) -> (Arc<Core>, Box<[Arc<Shard>]>) {
        let core = Arc::new(Core {
            clock,
            mode: AtomicU8::new(mode as u8),
            wheel_size,
            shards: OnceLock::new(),
            token: Token::new(),
            alarm: Mutex::new(None),
            requested: AtomicU64::new(u64::MAX),
            scratch: Mutex::new(Scratch::default()),
            run_bound: OnceLock::new(),
            limited: AtomicU64::new(0),
            thread: OnceLock::new(),
            wakeups: AtomicU64::new(0),
            waker_panics: AtomicU64::new(0),
            runs_fired: AtomicU64::new(0),
            run_panics: AtomicU64::new(0),
            #[cfg(tickless_loom)]
            fallback_started: crate::sync::AtomicBool::new(false),
            #[cfg(tickless_loom)]
            thread_unparked: crate::sync::AtomicBool::new(false),
        });
        let armed = (mode == Mode::Manual).then_some(0);
        let shards: Box<[Arc<Shard>]> = (0..shards.max(1))
            .map(|_| Arc::new(Shard::new(core.clone(), wheel_size, armed)))
            .collect();
        let weak = shards.iter().map(Arc::downgrade).collect();
        let _ = core.shards.set(weak);
        (core, shards)
    }

    pub(crate) fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::Acquire))
    }

    /// Moves the mode from `from` to `to` (it only moves forward: see ground rule 1);
    /// whether this call did.
    pub(super) fn switch_mode(&self, from: Mode, to: Mode) -> bool {
        self.mode
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the runtime that drove this timer has gone: the timer belongs to no
    /// runtime now, and is never handed out as one's default.
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self.mode(), Mode::Stopped | Mode::Fallback)
    }

    pub(crate) fn set_alarm(&self, alarm: Box<dyn Alarm>) {
        *lock(&self.alarm) = Some(alarm);
    }

    pub(super) fn shards(&self) -> impl Iterator<Item = Arc<Shard>> + '_ {
        self.shards
            .get()
            .into_iter()
            .flat_map(|shards| shards.iter().filter_map(Weak::upgrade))
    }

    /// Sets the most run entries that may be pending at once.
    pub(crate) fn set_run_bound(&self, max: usize) {
        let _ = self.run_bound.set(max);
    }

    /// Counts a run entry about to be inserted against the bound, if there is one; `Err`
    /// with the bound when it is reached.
    pub(crate) fn reserve_run(&self) -> Result<(), usize> {
        let Some(&max) = self.run_bound.get() else {
            return Ok(());
        };
        self.limited
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |pending| {
                (pending < max as u64).then_some(pending + 1)
            })
            .map(drop)
            .map_err(|_| max)
    }

    /// `removed` run entries have left the wheels (fired or removed).
    pub(crate) fn runs_removed(&self, removed: usize) {
        if self.run_bound.get().is_some() {
            self.limited.fetch_sub(removed as u64, Ordering::AcqRel);
        }
    }

    /// Run entries inserted and not yet fired or removed, summed over the shards.
    pub(crate) fn pending_runs(&self) -> usize {
        self.shards().map(|shard| shard.lock().run_count).sum()
    }

    pub(super) fn count_panics(&self, panics: u64) {
        if panics > 0 {
            self.waker_panics.fetch_add(panics, Ordering::Relaxed);
        }
    }

    /// Wakes `waker`, catching and counting a panic.
    pub(crate) fn wake(&self, waker: Waker) {
        if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
            self.count_panics(1);
        }
    }

    /// Drops a stored waker, catching and counting a panic.
    pub(crate) fn release(&self, waker: Option<Waker>) {
        if let Some(waker) = waker {
            if catch_unwind(AssertUnwindSafe(|| drop(waker))).is_err() {
                self.count_panics(1);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot {
            wakeups: self.wakeups.load(Ordering::Relaxed),
            waker_panics: self.waker_panics.load(Ordering::Relaxed),
            runs_fired: self.runs_fired.load(Ordering::Relaxed),
            run_panics: self.run_panics.load(Ordering::Relaxed),
            ..Snapshot::default()
        };
        for shard in self.shards() {
            let state = shard.lock();
            let counters = state.wheel.counters();
            snapshot.buckets_flushed += counters.buckets_flushed;
            snapshot.entries_fired += counters.entries_fired;
            snapshot.entries_demoted += counters.entries_demoted;
            snapshot.registered += state.wheel.len() - state.run_count - state.placeholders;
            snapshot.pending_runs += state.run_count;
            snapshot.levels = snapshot.levels.max(state.wheel.levels());
        }
        snapshot
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // A parked driver thread finds nothing left to drive and ends.
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}
