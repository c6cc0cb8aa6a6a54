//! The work done under the [token](super::token): firing and re-arming tokio's alarm, a
//! manual clock's advances, the runtime's end, and the fallback driver thread.

use super::token::{Requested, FIRE, REARM, STOP};
use super::turn::wake_all;
use super::{Alarm, Armed, Core, Mode, Rearmed, Scratch, Token};
use crate::sync::{fence, lock, Ordering};
use std::sync::Arc;

#[cfg(not(tickless_loom))]
use super::spawn_thread;

/// Lets go of the token if its holder panics. Wakers, run entries and tokio are all caught
/// where they run; if anything panics in the holder's loop even so, the token must not
/// stay held by a thread that left.
struct Abandon<'a>(&'a Token);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abandon();
        }
    }
}

impl Core {
    /// Tells the driver that a bucket now expires at `tick`, earlier than it would turn
    /// on its own (ground rule 4).
    pub(crate) fn wake_for(&self, tick: u64) {
        match self.mode() {
            Mode::Thread | Mode::Fallback => {
                #[cfg(tickless_loom)]
                self.thread_unparked.store(true, Ordering::SeqCst);
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

    /// As [`wake_for`](Self::wake_for), for a caller that must not do the driver's work
    /// itself: a thread-local destructor (an owner's thread exiting orphans its shards),
    /// where a turn would wake wakers and run callbacks with the thread half torn down,
    /// and a panic escaping there aborts the process. Asks for the turn and returns.
    ///
    /// It wakes no user's waker. The one exception is tokio's own: in tokio mode a caller
    /// that gets the token relays ([`relay_all`](Self::relay_all)), and
    /// [`TokioAlarm::relay`](super::runtime::TokioAlarm) wakes the runtime's helper task's
    /// waker in the caller; with the runtime gone, `relay_all` drops the alarm there,
    /// whose `Drop` wakes that waker again and drops its tokio `Sleep` (deregistering it
    /// from tokio's timer).
    pub(crate) fn ask_for(&self, tick: u64) {
        match self.mode() {
            Mode::Tokio => {
                self.requested.fetch_min(tick, Ordering::AcqRel);
                if self.token.request(REARM) == Requested::Holder {
                    self.relay_all();
                }
            }
            // Only a holder of the token turns a manual clock, and this thread does not
            // hold it (`wake_for` does nothing here either): the next `advance` turns.
            Mode::Manual => {}
            // An unpark, or nothing: no turn here.
            Mode::Thread | Mode::Fallback | Mode::Stopped => self.wake_for(tick),
        }
    }

    /// For a token holder that must not do the work ([`ask_for`](Self::ask_for)): hands it
    /// to the runtime's helper task (the alarm's relay), whose firing turns and arms the
    /// alarm for the earliest bucket, which covers any re-arm; with the runtime gone, lets
    /// go of its alarm as [`service`](Self::service) does.
    fn relay_all(&self) {
        let _abandon = Abandon(&self.token);
        while self.token.next().is_some() {
            let Some(alarm) = lock(&self.alarm).take() else {
                continue;
            };
            if self.mode() == Mode::Tokio {
                alarm.relay();
                if self.mode() == Mode::Tokio {
                    *lock(&self.alarm) = Some(alarm);
                }
            }
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
            if self.mode() != Mode::Tokio {
                // Ground rule 5's overlap: the runtime went while this turn ran, and the
                // fallback thread may have looked at a shard before this turn drained an
                // owner's insert there and set `armed` from it (a turn's drain notifies
                // nobody), so nothing would tell that thread. (A locked insert notifies
                // for itself, under the lock: see the rule.)
                // This load comes after every lock of the turn: if the fallback's turn
                // locked a shard first, it sees the switch that preceded it, and the
                // thread turns again; if not, its turn comes after and sees all.
                self.wake_for(next.unwrap_or(now));
            }
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
        if !self.switch_mode(Mode::Tokio, Mode::Stopped) {
            return;
        }
        // The pair with an owner's register (see `owner`): it reads the stop after its
        // insert, or the sweep's lock drains that insert and wakes it.
        fence(Ordering::SeqCst);
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
        if self.switch_mode(Mode::Stopped, Mode::Fallback) {
            #[cfg(tickless_loom)]
            self.fallback_started.store(true, Ordering::SeqCst);
            #[cfg(not(tickless_loom))]
            if let Err(error) = spawn_thread(self) {
                panic!("tickless: the runtime driving this timer has shut down, and no driver thread could be started to take over: {error}");
            }
        }
    }

    /// Registers the calling thread as the driver thread.
    pub(super) fn set_thread(&self, thread: std::thread::Thread) {
        let _ = self.thread.set(thread);
    }
}
