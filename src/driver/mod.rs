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
//!    shard's lock held. The one way in without it is the shard owner's log ([`owner`]):
//!    the thread that owns a shard writes its registers and cancels there, and every lock
//!    holder applies the log, in order, before it looks at anything ([`Shard::lock`]
//!    drains it), so under the lock the wheel is as if each of those ops had been locked.
//!    Polls and resets, the owner's too, take the lock; so do cancels by any other thread,
//!    and the owner's when its log is full. A cancel in the log lets the turn fire the
//!    timer first: its waker is woken once, spuriously (the drain then drops it, after the
//!    unlock). Outside any lock are the clock (read-mostly atomics, see
//!    [`clock`]), the `mode` (which only moves forward: tokio to stopped, when the runtime
//!    goes, then stopped to fallback, when a driver thread takes over), the counters,
//!    `requested` (the earliest tick inserts asked the alarm for) and the [token](token)
//!    state, which has its own small lock.
//! 2. No user code runs with a lock held, except `Waker::clone` when a poll stores a new
//!    waker, which runs before anything is written. Wakers are woken, and *dropped*, only
//!    after the lock is released: dropping a waker can drop a task that owns a `Sleep`,
//!    whose `Drop` takes the lock. Every wake of a stored waker is caught and counted in
//!    `waker_panics`; the caller records what the wake means (a `Sleep` marks itself
//!    elapsed) *before* waking, so a panic leaves nothing half done. What a lock holder
//!    must tell the driver ([`Core::wake_for`], which can turn, and take locks) its guard
//!    does after the unlock.
//! 3. A timer's entry belongs to its owner (a `Sleep`, an `Interval`, a `DelayQueue`).
//!    The driver may move it to the ready list and take its waker, but only the owner
//!    removes it (on completion, reset or drop), so an owner's key never names another
//!    owner's entry. A shard owner registers with keys from a reserve of placeholders
//!    (entries linked nowhere, due never); a key returns to the reserve only under the
//!    lock, after the log was applied (a key the owner cancels through its log comes back
//!    through the drain that applies that cancel), so it is never handed out while an op
//!    of its last use is still in the log.
//! 4. No expiry is missed. A shard's `armed` is the earliest tick the driver is known to
//!    turn at, as far as that shard is concerned: each turn sets it to the shard's own
//!    next expiration, which is no earlier than the tick the driver then waits for (the
//!    minimum over all shards). An insert that queues a bucket expiring before its
//!    shard's `armed` lowers it and notifies the driver ([`Core::wake_for`]); any other
//!    insert leaves the driver alone. Both happen under the shard lock, so an insert either
//!    comes before the turn looked at its shard (and the turn sees it) or after (and sees
//!    the `armed` that turn set). A manual clock's shards keep `armed = Some(0)`: nothing
//!    but `advance` moves its time, so inserts never notify. A shard owner's insert through
//!    the log has no lock: the lock holder publishes `armed` and the wheel's time as hints,
//!    the owner writes its insert, `fence(SeqCst)`, then reads them (and locks, which
//!    applies rule 4, when its bucket may expire before `armed` or its deadline has come),
//!    and the turn, after it publishes `armed` and unlocks, does `fence(SeqCst)` and looks
//!    at the log again: one of the two sees the other. Every drain outside the turn applies
//!    rule 4 to what it drains, as a locked insert does (the turn may have raised `armed`
//!    past an insert that someone else then drains), and an insert it finds already due
//!    has its guard tell the driver (the orphaning, in a thread-local destructor, only
//!    asks for a turn: [`Core::ask_for`] never turns in the caller and wakes no user's
//!    waker there; the one it may wake is tokio's, the runtime's helper task's, and it may
//!    drop the alarm of a runtime that is gone: see its docs). The runtime's end
//!    pairs with the owner the same way: the mode switch, `fence(SeqCst)`, then the sweep
//!    (whose locks drain).
//! 5. Turns do not run at once. The driver thread is the only one to turn a
//!    thread-driven timer; tokio and manual timers turn only under the [token](token),
//!    which also makes the work asked for while a turn runs (a re-arm, another advance)
//!    happen before the turn's thread lets go of it. The token is not waited for while its
//!    work runs (a request returns at once), so a waker may insert, reset or advance the
//!    timer that woke it. One overlap is allowed: when a runtime shuts down in the middle
//!    of its timer's turn, the fallback thread may start turning before that turn ends.
//!    Each shard is still advanced and emptied under its lock (so nothing fires twice or
//!    is lost). The old turn may drain an owner's insert (notifying nobody) after the
//!    fallback's turn looked at its shard, and set `armed` from it, so nothing would tell
//!    the fallback thread: a tokio turn that finds the runtime gone after its locks wakes
//!    that thread, which turns again (a fallback turn that locked a shard first saw the
//!    switch before it, so the old turn's load sees it too). A locked insert opens no such
//!    window: it notifies under the lock against that shard's `armed`, and one that locks
//!    after the fallback's turn did finds the mode `Fallback` and the thread.
//! 6. The tokio alarm is touched only by the token holder: re-armed earlier from any
//!    thread (a `Sleep::reset`, which needs no runtime context), but fired, armed from
//!    disarmed and polled only in that runtime's context. A holder outside it hands that
//!    work to a helper task on the runtime, whose drop is also how the runtime's shutdown
//!    is noticed. The runtime's clock is read in that runtime (see [`clock`]); whether a
//!    deadline has come is judged by the wheel, by the time of its last turn, not by the
//!    clock of whichever thread asks.

pub(crate) mod clock;
mod owner;
pub(crate) mod registration;
pub(crate) mod runtime;
pub(crate) mod shard;

mod service;
mod thread;
mod timer_core;
mod token;
mod turn;

use clock::Clock;
use token::Token;

pub(crate) use thread::spawn_thread;
pub(crate) use timer_core::Core;
pub(crate) use turn::Scratch;

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

#[cfg(all(test, tickless_loom))]
mod loom_tests;
