//! The driver: a timer's shards, its clock, and the one turn that fires its timers.
//!
//! A timer is a [`Core`] and a few [`Shard`]s. Each shard is a wheel behind its own lock;
//! a timer is registered on the shard of the thread that makes it, and cancelled, reset
//! and polled on its own shard, so threads that do not share timers do not share locks.
//! One driver serves all shards: [`Core::turn`] advances every shard to the current tick,
//! wakes what is due, and returns the next tick anything can happen at. Who calls it, and
//! when, is the mode:
//!
//! - **tokio** ([`runtime`]): the wheel is turned inside tokio's own timer processing. The
//!   driver's alarm is one tokio `Sleep` whose waker is ours; tokio wakes it in the pass
//!   that fires its own timers, and the wake runs the turn and re-arms the `Sleep` for the
//!   next expiry. No task in between, so tickless timers fire in the same pass as tokio's,
//!   and a paused clock's `advance` sees them fired when it returns.
//! - **thread** ([`thread`]): a thread of its own turns and parks until the next expiry.
//! - **manual**: [`Core::advance_by`] and [`Core::advance_to`] move the clock and turn in
//!   the caller.
//!
//! # Two kinds of entry
//!
//! A wheel entry holds a `Waker`, and the driver knows two kinds, without knowing what is
//! behind either:
//!
//! - a **timer** (a `Sleep`, an `Interval`, a `DelayQueue`'s registration): its owner
//!   polls it. When it fires the driver wakes its waker and leaves the entry, which only
//!   the owner removes (rule 3); when a runtime shuts down, every timer's waker is woken,
//!   so that its owner polls again and moves to a driver thread.
//! - a **run entry** (a callback, a purgatory's expiry): nobody polls it, and its waker
//!   *is* the work. The driver takes it out of the wheel when it fires and wakes it after
//!   every shard is turned, in deadline order, with no lock held; a shutdown leaves it
//!   alone (waking it would run it early). A shard that holds run entries keeps itself
//!   alive while a driver can fire them (nothing else would), and an optional bound caps
//!   how many may be pending (set by the callbacks' `max_pending`). Whoever inserts one
//!   ([`Shard::insert_run`]) decides, against a racing [`Shard::remove_run`], whether
//!   its work runs: the driver only counts what it took and what panicked.
//!
//! # Ground rules
//!
//! 1. A shard's wheel, its `armed` tick and its run-entry marks are touched only with that
//!    shard's lock held. Outside any lock are the clock (read-mostly atomics, see
//!    [`clock`]), the `mode` (which only moves forward: tokio to stopped, when the runtime
//!    goes, then stopped to fallback, when a driver thread takes over), the counters,
//!    `requested` (the earliest tick inserts asked the alarm for) and the [token](token)
//!    state, which has its own small lock.
//! 2. No user code runs with a lock held, except `Waker::clone` when a poll stores a new
//!    waker, which runs before anything is written. Wakers are woken, and *dropped*, only
//!    after the lock is released: dropping a waker can drop a task that owns a `Sleep`,
//!    whose `Drop` takes the lock. Every wake of a stored waker is caught and counted in
//!    `waker_panics`; the caller records what the wake means (a `Sleep` marks itself
//!    elapsed) *before* waking, so a panic leaves nothing half done.
//! 3. A timer's entry belongs to its owner (a `Sleep`, an `Interval`, a `DelayQueue`).
//!    The driver may move it to the ready list and take its waker, but only the owner
//!    removes it (on completion, reset or drop), so an owner's key never names another
//!    owner's entry.
//! 4. No expiry is missed. A shard's `armed` is the earliest tick the driver is known to
//!    turn at, as far as that shard is concerned: each turn sets it to the shard's own
//!    next expiration, which is no earlier than the tick the driver then waits for (the
//!    minimum over all shards). An insert that queues a bucket expiring before its
//!    shard's `armed` lowers it and notifies the driver ([`Core::wake_for`]); any other
//!    insert leaves the driver alone. Both happen under the shard lock, so an insert either
//!    comes before the turn looked at its shard (and the turn sees it) or after (and sees
//!    the `armed` that turn set). A manual clock's shards keep `armed = Some(0)`: nothing
//!    but `advance` moves its time, so inserts never notify.
//! 5. Turns do not run at once. The driver thread is the only one to turn a
//!    thread-driven timer; tokio and manual timers turn only under the [token](token),
//!    which also makes the work asked for while a turn runs (a re-arm, another advance)
//!    happen before the turn's thread lets go of it. The token is not waited for while its
//!    work runs (a request returns at once), so a waker may insert, reset or advance the
//!    timer that woke it. One overlap is allowed: when a runtime shuts down in the middle
//!    of its timer's turn, the fallback thread may start turning before that turn ends.
//!    Each shard is still advanced and emptied under its lock (so nothing fires twice or
//!    is lost), and both set `armed` to the same shard's next expiration.
//! 6. The tokio alarm is touched only by the token holder: re-armed earlier from any
//!    thread (a `Sleep::reset`, which needs no runtime context), but fired, armed from
//!    disarmed and polled only in that runtime's context. A holder outside it hands that
//!    work to a helper task on the runtime, whose drop is also how the runtime's shutdown
//!    is noticed. The runtime's clock is read in that runtime (see [`clock`]); whether a
//!    deadline has come is judged by the wheel, by the time of its last turn, not by the
//!    clock of whichever thread asks.

pub(crate) mod clock;
pub(crate) mod registration;
pub(crate) mod runtime;
pub(crate) mod shard;

mod thread;
mod token;

use crate::sync::{lock, AtomicU64, AtomicU8, Mutex, Ordering};
use clock::Clock;
use shard::{Shard, ShardState};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, Weak};
use std::task::Waker;
use token::{Requested, Token, FIRE, REARM, STOP};

pub(crate) use thread::spawn_thread;

/// Wakers woken per lock release while a turn fires timers from the ready list.
const WAKE_BATCH: usize = 128;

/// Above this capacity a turn's scratch vectors are shrunk at its end.
const SCRATCH_KEPT: usize = 16 * 1024;

/// Who turns a timer's wheel (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    /// A thread of its own.
    Thread = 0,
    /// Inside a tokio runtime's timer processing.
    Tokio = 1,
    /// `Timer::advance`, in the caller.
    Manual = 2,
    /// The tokio runtime has shut down; a thread takes over on next use.
    Stopped = 3,
    /// A thread, since the tokio runtime shut down.
    Fallback = 4,
}

impl Mode {
    fn from_u8(mode: u8) -> Mode {
        match mode {
            0 => Mode::Thread,
            1 => Mode::Tokio,
            2 => Mode::Manual,
            3 => Mode::Stopped,
            _ => Mode::Fallback,
        }
    }
}

/// An alarm the driver arms for the next expiry: tokio's timer ([`runtime::TokioAlarm`]),
/// or a fake one in the loom tests.
pub(crate) trait Alarm: Send {
    /// Whether the calling thread may fire and arm the alarm here: read the clock it
    /// follows and register with it.
    fn in_context(&self) -> bool;
    /// Hands firing to a thread that is in context.
    fn relay(&self);
    /// The tick the alarm is armed for; `u64::MAX` when it waits for nothing.
    fn armed(&self) -> u64;
    /// Moves a waiting alarm earlier, to `tick`, from any thread. An alarm that has gone
    /// off is left alone: its firing is on its way.
    fn rearm(&mut self, clock: &Clock, tick: u64) -> Rearmed;
    /// Arms the alarm for `tick` (`None`: for nothing), in context.
    fn arm(&mut self, clock: &Clock, tick: Option<u64>) -> Armed;
    /// Whether the alarm's runtime is shutting down (asked after an early wake).
    fn shutting_down(&mut self) -> bool;
}

/// What [`Alarm::rearm`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rearmed {
    /// Moved, or nothing to do.
    Done,
    /// Not armed, and this thread may arm it: turn and arm, as for a firing.
    Arm,
    /// Not armed, and arming needs a thread in context: relay.
    Relay,
}

/// What [`Alarm::arm`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Armed {
    /// It waits for its tick.
    Waiting,
    /// Its tick has already come: turn again.
    Due,
    /// Its runtime is shutting down.
    ShutDown,
}

/// Counts of what a timer's driver and wheels have done, and what they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) wakeups: u64,
    pub(crate) buckets_flushed: u64,
    pub(crate) entries_fired: u64,
    pub(crate) entries_demoted: u64,
    pub(crate) waker_panics: u64,
    pub(crate) runs_fired: u64,
    pub(crate) run_panics: u64,
    pub(crate) registered: usize,
    pub(crate) pending_runs: usize,
    pub(crate) levels: usize,
}

/// What a turn works with, kept between turns for its capacity: a turn allocates nothing
/// once these have grown.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Wakers of due timers, woken in batches.
    wakers: Vec<Waker>,
    /// Due run entries with their deadline ticks, run after every shard is turned.
    runs: Vec<(u64, Waker)>,
    /// Due entries handed out by an advance, with their keys, before they are sorted into
    /// `wakers` and `runs`.
    fired: Vec<(usize, Waker)>,
    /// Shards' keepalives let go of by the turn, dropped with no lock held.
    keepalives: Vec<Arc<Shard>>,
}

/// What all shards of one timer share.
pub(crate) struct Core {
    pub(crate) clock: Clock,
    mode: AtomicU8,
    /// Buckets per level of every shard's wheel.
    pub(crate) wheel_size: usize,
    /// Set once, right after the shards are made. Weak: the shards hold the core.
    shards: OnceLock<Box<[Weak<Shard>]>>,
    token: Token,
    /// The alarm, in tokio mode. Only the token holder touches it, and takes it out while
    /// it works, so no lock is held while a turn wakes wakers.
    alarm: Mutex<Option<Box<dyn Alarm>>>,
    /// The earliest tick inserts have asked the alarm for since it was last armed.
    requested: AtomicU64,
    /// The token holder's scratch (see [`Scratch`]).
    scratch: Mutex<Scratch>,
    /// The most run entries that may be pending at once, and how many are, counted only
    /// when there is a bound (the callbacks' `Builder::max_pending` sets it).
    run_bound: OnceLock<usize>,
    limited: AtomicU64,
    /// The driver thread, once one runs.
    thread: OnceLock<std::thread::Thread>,
    wakeups: AtomicU64,
    waker_panics: AtomicU64,
    runs_fired: AtomicU64,
    run_panics: AtomicU64,
    /// Under loom, a fallback driver thread is recorded here rather than started.
    #[cfg(tickless_loom)]
    fallback_started: crate::sync::AtomicBool,
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

    /// Whether the runtime that drove this timer has gone: the timer belongs to no
    /// runtime now, and is never handed out as one's default.
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self.mode(), Mode::Stopped | Mode::Fallback)
    }

    pub(crate) fn set_alarm(&self, alarm: Box<dyn Alarm>) {
        *lock(&self.alarm) = Some(alarm);
    }

    fn shards(&self) -> impl Iterator<Item = Arc<Shard>> + '_ {
        self.shards
            .get()
            .into_iter()
            .flat_map(|shards| shards.iter().filter_map(Weak::upgrade))
    }

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
            let mut state = shard.lock();
            if state.wheel.ready_is_empty() {
                // The due entries' wakers are taken as the flush finds them, in cache;
                // walking the ready list afterwards would miss on every entry (W2). Only
                // when nothing waits there already, so the order is the ready list's.
                let fired = &mut scratch.fired;
                state
                    .wheel
                    .advance_handing_out(now_tick, |key, waker| fired.push((key, take(waker))));
                for (key, waker) in scratch.fired.drain(..) {
                    sort_fired(
                        &mut state,
                        key,
                        waker,
                        &mut scratch.wakers,
                        &mut scratch.runs,
                        &mut scratch.keepalives,
                    );
                }
            } else {
                state.wheel.advance(now_tick);
            }
            loop {
                while scratch.wakers.len() < WAKE_BATCH {
                    let Some((key, waker)) = state.wheel.pop_ready() else {
                        break;
                    };
                    let waker = take(waker);
                    sort_fired(
                        &mut state,
                        key,
                        waker,
                        &mut scratch.wakers,
                        &mut scratch.runs,
                        &mut scratch.keepalives,
                    );
                }
                if scratch.wakers.is_empty() {
                    break;
                }
                drop(state);
                panics += wake_all(&mut scratch.wakers);
                state = shard.lock();
            }
            let shard_next = state.wheel.next_expiration();
            if !manual {
                state.armed = shard_next;
            }
            drop(state);
            next = match (next, shard_next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.count_panics(panics);
        if !scratch.runs.is_empty() {
            let fired = scratch.runs.len();
            self.runs_removed(fired);
            self.runs_fired.fetch_add(fired as u64, Ordering::Relaxed);
            scratch.runs.sort_by_key(|&(tick, _)| tick);
            let mut failed = 0;
            for (_, run) in scratch.runs.drain(..) {
                if catch_unwind(AssertUnwindSafe(|| run.wake())).is_err() {
                    failed += 1;
                }
            }
            if failed > 0 {
                self.run_panics.fetch_add(failed, Ordering::Relaxed);
            }
        }
        scratch.keepalives.clear();
        // A flush of many timers at once grew these; do not hold that memory for good.
        for capacity in [scratch.wakers.capacity(), scratch.fired.capacity()] {
            if capacity > SCRATCH_KEPT {
                scratch.wakers.shrink_to(WAKE_BATCH);
                scratch.fired.shrink_to(WAKE_BATCH);
            }
        }
        next
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

    fn count_panics(&self, panics: u64) {
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

    /// Tells the driver that a bucket now expires at `tick`, earlier than it would turn
    /// on its own (ground rule 4).
    pub(crate) fn wake_for(&self, tick: u64) {
        match self.mode() {
            Mode::Thread | Mode::Fallback => {
                if let Some(thread) = self.thread.get() {
                    thread.unpark();
                }
            }
            Mode::Tokio => {
                self.requested.fetch_min(tick, Ordering::AcqRel);
                self.request(REARM);
            }
            // A manual clock's time moves only by `advance`; a run entry already due when
            // inserted from inside one (a callback scheduling another) runs before that
            // `advance` returns, any other at the next.
            Mode::Manual => {
                if self.token.held_here() {
                    self.request(FIRE);
                }
            }
            Mode::Stopped => {}
        }
    }

    /// The alarm went off (or its relay ran): turn the wheel.
    pub(crate) fn alarm_went_off(&self) {
        self.request(FIRE);
    }

    /// Asks for `work` under the token, and does it (and all work asked for meanwhile)
    /// if this thread gets the token.
    fn request(&self, work: u8) -> Requested {
        let requested = self.token.request(work);
        if requested == Requested::Holder {
            self.drive();
        }
        requested
    }

    /// For the token holder: does the work handed out until there is none.
    fn drive(&self) {
        // Wakers, run entries and tokio are all caught where they run; if anything panics
        // here even so, the token must not stay held by a thread that left.
        struct Abandon<'a>(&'a Token);
        impl Drop for Abandon<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.abandon();
                }
            }
        }
        let _abandon = Abandon(&self.token);
        let mut scratch = std::mem::take(&mut *lock(&self.scratch));
        while let Some(work) = self.token.next() {
            self.service(work, &mut scratch);
        }
        // Only a holder takes it, and a holder asked from inside its own work does not
        // drive again, so nothing was put here meanwhile.
        *lock(&self.scratch) = scratch;
    }

    fn service(&self, work: u8, batch: &mut Scratch) {
        match self.mode() {
            Mode::Manual => {
                if work & FIRE != 0 {
                    self.turn(self.clock.now_tick(), batch);
                }
            }
            Mode::Tokio => {
                let Some(mut alarm) = lock(&self.alarm).take() else {
                    return;
                };
                self.service_alarm(alarm.as_mut(), work, batch);
                if self.mode() == Mode::Tokio {
                    *lock(&self.alarm) = Some(alarm);
                }
            }
            // The runtime is gone (STOP, or work asked for just before it went): let go
            // of its alarm.
            Mode::Stopped | Mode::Fallback | Mode::Thread => {
                let alarm = lock(&self.alarm).take();
                drop(alarm);
            }
        }
    }

    fn service_alarm(&self, alarm: &mut dyn Alarm, work: u8, batch: &mut Scratch) {
        if work & FIRE != 0 {
            if alarm.in_context() {
                // The turn re-arms for the earliest bucket of all, which covers any re-arm
                // asked for meanwhile.
                return self.fire(alarm, batch);
            }
            alarm.relay();
        }
        if work & (REARM | STOP) == REARM {
            let tick = self.requested.load(Ordering::Acquire);
            if tick < alarm.armed() {
                match alarm.rearm(&self.clock, tick) {
                    Rearmed::Done => {}
                    Rearmed::Arm => return self.fire(alarm, batch),
                    Rearmed::Relay => alarm.relay(),
                }
            }
            // Taken only once acted on: a relayed request stays for the helper's turn.
            let _ = self.requested.compare_exchange(
                tick,
                u64::MAX,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Turns the wheel for a firing alarm and arms it for the next expiry, in context.
    fn fire(&self, alarm: &mut dyn Alarm, batch: &mut Scratch) {
        self.requested.store(u64::MAX, Ordering::Release);
        self.clock.check_paused(self.clock.now());
        loop {
            let now = self.clock.now_tick();
            // Woken before its tick: tokio wakes every timer when its runtime shuts down.
            if now < alarm.armed() && alarm.shutting_down() {
                return self.runtime_gone(Some(self.clock.now()));
            }
            let next = self.turn(now, batch);
            match alarm.arm(&self.clock, next) {
                Armed::Waiting => return,
                Armed::Due => continue,
                Armed::ShutDown => return self.runtime_gone(Some(self.clock.now())),
            }
        }
    }

    /// The tokio runtime that drove this timer has shut down (`runtime_now` is its clock,
    /// when the caller could still read it). Registered timers are kept; every waiting
    /// task is woken, so that its next poll starts a driver thread on the real clock,
    /// which continues from where the runtime's clock stood.
    pub(crate) fn runtime_gone(&self, runtime_now: Option<tokio::time::Instant>) {
        let switched = self.mode.compare_exchange(
            Mode::Tokio as u8,
            Mode::Stopped as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if switched.is_err() {
            return;
        }
        self.clock.use_real_clock(runtime_now);
        let mut wakers = Vec::new();
        let mut runs = None;
        for shard in self.shards() {
            let mut state = shard.lock();
            state.armed = None;
            state.take_timer_wakers(&mut wakers);
            if state.run_count > 0 {
                runs = Some(shard.core.clone());
            }
        }
        let panics = wake_all(&mut wakers);
        self.count_panics(panics);
        self.request(STOP);
        // Nobody polls a run entry: when any is pending, the driver thread starts now.
        if let Some(core) = runs {
            core.ensure_driver();
        }
    }

    /// Moves a manual clock forward by `duration` and fires everything due, as
    /// [`advanced`](Self::advanced); `false` (and nothing done) for any other clock.
    /// `Timer::advance`, and the loom models.
    pub(crate) fn advance_by(&self, duration: std::time::Duration) -> bool {
        let moved = self.clock.advance_by(duration);
        if moved {
            self.advanced();
        }
        moved
    }

    /// Moves a manual clock forward to `instant` (never back) and fires everything due, as
    /// [`advanced`](Self::advanced); `false` (and nothing done) for any other clock.
    pub(crate) fn advance_to(&self, instant: tokio::time::Instant) -> bool {
        let moved = self.clock.advance_to(instant);
        if moved {
            self.advanced();
        }
        moved
    }

    /// Fires everything due on a manual clock the caller has just moved, waking the
    /// wakers, before it returns; or, when called from inside this timer's own turn (a
    /// waker that advances), before that turn's thread lets go.
    pub(crate) fn advanced(&self) {
        if let Requested::Busy { ticket } = self.request(FIRE) {
            self.token.wait_done(ticket);
        }
    }

    /// Starts a driver thread if the tokio runtime has gone.
    pub(crate) fn ensure_driver(self: &Arc<Self>) {
        if self.mode.load(Ordering::Acquire) != Mode::Stopped as u8 {
            return;
        }
        let claimed = self.mode.compare_exchange(
            Mode::Stopped as u8,
            Mode::Fallback as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if claimed.is_ok() {
            #[cfg(tickless_loom)]
            self.fallback_started.store(true, Ordering::SeqCst);
            #[cfg(not(tickless_loom))]
            if let Err(error) = spawn_thread(self) {
                panic!("tickless: the runtime driving this timer has shut down, and no driver thread could be started to take over: {error}");
            }
        }
    }

    /// Registers the calling thread as the driver thread.
    fn set_thread(&self, thread: std::thread::Thread) {
        let _ = self.thread.set(thread);
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
            snapshot.registered += state.wheel.len() - state.run_count;
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

/// A due entry's taken waker, to be woken (`wakers`) or, for a run entry, run after the
/// turn (`runs`): the driver takes a fired run entry out of the wheel itself; what its
/// waker runs decides, against a racing cancel, whether it runs.
fn sort_fired(
    state: &mut ShardState,
    key: usize,
    waker: Waker,
    wakers: &mut Vec<Waker>,
    runs: &mut Vec<(u64, Waker)>,
    keepalives: &mut Vec<Arc<Shard>>,
) {
    if state.is_run(key) {
        let tick = state.wheel.deadline_tick(key);
        drop(state.wheel.try_remove(key)); // the no-op waker left by `take`
        if let Some(keepalive) = state.run_removed(key) {
            keepalives.push(keepalive);
        }
        runs.push((tick, waker));
    } else {
        wakers.push(waker);
    }
}

/// Takes a stored waker, leaving the no-op one (waking that one does nothing).
fn take(waker: &mut Waker) -> Waker {
    std::mem::replace(waker, Waker::noop().clone())
}

/// Wakes and empties `wakers`, catching panics; returns how many panicked.
fn wake_all(wakers: &mut Vec<Waker>) -> u64 {
    let mut panics = 0;
    for waker in wakers.drain(..) {
        if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
            panics += 1;
        }
    }
    panics
}

#[cfg(all(test, tickless_loom))]
mod loom_tests;
