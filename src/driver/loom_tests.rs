//! Every interleaving of the driver's protocols, under loom.
//!
//! Run with `RUSTFLAGS="--cfg tickless_loom" cargo test --release --lib loom`.
//!
//! The models drive the real code (shards, turn, token, registrations, `Sleep`) with a fake
//! alarm standing in for tokio's timer, and a manual clock so that "now" is chosen by the
//! model. The clock's atomics are loom's too (it takes them from [`crate::sync`]), so a
//! model whose thread advances the clock races that move against the other threads' reads
//! of it. What each checks:
//!
//! - ground rule 4: an insert racing a turn is seen by the turn or moves the alarm, also a
//!   `Sleep`'s first poll on a shard that had nothing armed while the clock moves;
//! - the token: work asked for while another thread holds it is done before it lets go,
//!   and a manual `advance` racing another returns only once its timers have fired;
//! - the clock moving while a `Sleep` registers on one of two shards: nothing fires before
//!   its deadline, nothing due is left asleep once the `advance` has returned, nothing is
//!   woken twice, and a drop racing it leaves no entry behind;
//! - rule 3: a timer cancelled, reset or polled with a new waker while the driver fires it
//!   leaves no entry behind, is never woken twice, and is never left asleep;
//! - the runtime going away while timers are registered and dropped: every waiting timer
//!   is woken or finds the fallback driver started;
//! - a callback's cancel racing its fire: exactly one of "ran" and "cancelled";
//! - a shard owner's registers through its log ([`owner`](self::owner) here).

use super::registration::{Registration, IDLE};
use super::shard::Shard;
use super::token::{Requested, FIRE};
use super::*;
use crate::sync::{AtomicU64, Ordering};
use crate::time::Sleep;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Arc as LoomArc;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Waker;
use std::task::{Context, Poll, Wake};
use std::time::Duration;

mod owner;

/// A waker that counts its wakes.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> (std::sync::Arc<Count>, Waker) {
    let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

/// A waker that counts its wakes and notes the timer's clock at the earliest of them: what
/// "never early" is checked against.
struct Stamp {
    core: Arc<Core>,
    wakes: AtomicUsize,
    /// The clock's tick when first woken; `u64::MAX` until then.
    woken_at: AtomicU64,
}

impl Wake for Stamp {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let now = self.core.clock.now_tick();
        self.woken_at.fetch_min(now, Ordering::SeqCst);
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

impl Stamp {
    fn new(core: &Arc<Core>) -> (std::sync::Arc<Stamp>, Waker) {
        let stamp = std::sync::Arc::new(Stamp {
            core: core.clone(),
            wakes: AtomicUsize::new(0),
            woken_at: AtomicU64::new(u64::MAX),
        });
        (stamp.clone(), Waker::from(stamp))
    }

    fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    fn woken_at(&self) -> u64 {
        self.woken_at.load(Ordering::SeqCst)
    }
}

/// The alarm tokio's timer would be: it records what it is armed for.
struct FakeAlarm(LoomArc<AtomicU64>);

impl Alarm for FakeAlarm {
    fn in_context(&self) -> bool {
        true
    }
    /// Only a holder that must not turn relays (an orphaning, in a thread-local
    /// destructor): the helper task fires as soon as the runtime polls it, which the
    /// models read as an alarm armed for 0.
    fn relay(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
    fn armed(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn rearm(&mut self, _: &Clock, tick: u64) -> Rearmed {
        self.0.store(tick, Ordering::SeqCst);
        Rearmed::Done
    }
    fn arm(&mut self, _: &Clock, tick: Option<u64>) -> Armed {
        self.0.store(tick.unwrap_or(u64::MAX), Ordering::SeqCst);
        Armed::Waiting
    }
    fn shutting_down(&mut self) -> bool {
        false
    }
}

/// A core in `mode` with one shard, on a manual clock (so the model sets "now"), and a
/// fake alarm in tokio mode.
fn core(mode: Mode) -> (Arc<Core>, Arc<Shard>, LoomArc<AtomicU64>) {
    let (core, shards, armed) = core_with(mode, 1);
    let shard = shards[0].clone();
    (core, shard, armed)
}

/// [`core`] with `shards` shards, on a manual clock of 1 ns ticks.
fn core_with(mode: Mode, shards: usize) -> (Arc<Core>, Box<[Arc<Shard>]>, LoomArc<AtomicU64>) {
    let clock = Clock::new(Duration::from_nanos(1), clock::Source::Manual);
    let (core, shards) = Core::new(clock, mode, 64, shards);
    let armed = LoomArc::new(AtomicU64::new(u64::MAX));
    if mode == Mode::Tokio {
        core.set_alarm(Box::new(FakeAlarm(armed.clone())));
    }
    (core, shards, armed)
}

fn at(core: &Core, tick: u64) {
    let origin = core.clock.instant_at(0);
    core.clock.advance_to(origin + Duration::from_nanos(tick));
}

fn registered(shard: &Arc<Shard>, tick: u64, waker: &Waker) -> Registration {
    let mut registration = Registration::new(shard.clone(), IDLE);
    assert!(registration.register(tick, Some(waker)).is_pending());
    registration
}

#[test]
fn loom_an_insert_racing_a_turn_is_seen_or_moves_the_alarm() {
    loom::model(|| {
        let (core, shard, armed) = core(Mode::Tokio);
        // Timers at 3 and 100; a first turn at 0 arms the alarm at 3.
        let _early = registered(&shard, 3, Waker::noop());
        let _late = registered(&shard, 100, Waker::noop());
        core.alarm_went_off();
        assert_eq!(armed.load(Ordering::SeqCst), 3);

        // The alarm goes off at 5 while a timer due at 10 is inserted.
        at(&core, 5);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.alarm_went_off())
        };
        let inserted = registered(&shard, 10, Waker::noop());
        turner.join().unwrap();
        let alarm = armed.load(Ordering::SeqCst);
        assert!(alarm <= 10, "a timer due at 10, the alarm at {alarm}");
        drop(inserted);
    });
}

#[test]
fn loom_an_advance_racing_another_returns_after_its_timers_fired() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Manual);
        let (first, first_waker) = counter();
        let (second, second_waker) = counter();
        let _first = registered(&shard, 1, &first_waker);
        let _second = registered(&shard, 2, &second_waker);
        // One thread advances by 1, the other by 2: in either order the clock stands at 1
        // or later once the first move is made, and at 2 or later once the second is. Each
        // `advance` returns only once what its own move made due has fired, whichever
        // thread turned (the counts are loom atomics, written by the turning thread before
        // the token is let go, read after `advance` waited for that).
        let other = {
            let (core, first) = (core.clone(), first.clone());
            loom::thread::spawn(move || {
                assert!(core.advance_by(Duration::from_nanos(1)));
                assert_eq!(first.0.load(Ordering::SeqCst), 1, "returned before 1 fired");
            })
        };
        assert!(core.advance_by(Duration::from_nanos(2)));
        assert_eq!(first.0.load(Ordering::SeqCst), 1, "returned before 1 fired");
        assert_eq!(
            second.0.load(Ordering::SeqCst),
            1,
            "returned before 2 fired"
        );
        other.join().unwrap();
        // The clock is loom's (see `crate::sync`), so its two moves interleave, and an
        // update lost between them would show here.
        assert_eq!(core.clock.now_tick(), 3, "both moves counted");
        assert_eq!(core.snapshot().entries_fired, 2);
    });
}

#[test]
fn loom_a_cancel_racing_the_fire_leaves_nothing_behind_and_wakes_at_most_once() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Manual);
        let (count, waker) = counter();
        let timer = registered(&shard, 2, &waker);
        at(&core, 2);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.advanced())
        };
        drop(timer);
        turner.join().unwrap();
        assert!(count.0.load(Ordering::SeqCst) <= 1);
        assert_eq!(core.snapshot().registered, 0, "an entry outlived its owner");
    });
}

#[test]
fn loom_a_reset_racing_the_fire_is_woken_or_rescheduled_never_lost() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Manual);
        let (count, waker) = counter();
        let mut timer = registered(&shard, 2, &waker);
        at(&core, 2);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.advanced())
        };
        // Moved later, to 5: it either fired first (woken; the reset re-registers it) or
        // moved first (not woken, pending at 5).
        timer.reset(5);
        turner.join().unwrap();
        let woken = count.0.load(Ordering::SeqCst);
        assert!(woken <= 1);
        assert!(!timer.is_elapsed() || woken == 1);
        at(&core, 5);
        core.advanced();
        assert!(timer.is_elapsed(), "lost after the reset");
        drop(timer);
        assert_eq!(core.snapshot().registered, 0);
    });
}

#[test]
fn loom_a_poll_with_a_new_waker_racing_the_fire_is_never_left_asleep() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Manual);
        let (old_count, old) = counter();
        let (new_count, new) = counter();
        let mut timer = registered(&shard, 2, &old);
        at(&core, 2);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.advanced())
        };
        let polled = timer.poll(&new);
        turner.join().unwrap();
        // Pending means the new waker is stored, so the fire must have woken it.
        if polled.is_pending() {
            assert_eq!(new_count.0.load(Ordering::SeqCst), 1, "left asleep");
        }
        let total = old_count.0.load(Ordering::SeqCst) + new_count.0.load(Ordering::SeqCst);
        assert!(total <= 1, "woken twice");
        assert_eq!(timer.poll(&new), Poll::Ready(()));
    });
}

#[test]
fn loom_the_runtime_going_while_timers_register_leaves_none_asleep() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Tokio);
        let (count, waker) = counter();
        let gone = {
            let core = core.clone();
            loom::thread::spawn(move || core.runtime_gone(None))
        };
        let mut timer = Registration::new(shard.clone(), IDLE);
        let polled = timer.register(10, Some(&waker));
        gone.join().unwrap();
        assert!(polled.is_pending());
        let woken = count.0.load(Ordering::SeqCst) == 1;
        let fallback = core.fallback_started.load(Ordering::SeqCst);
        assert!(
            woken || fallback,
            "registered as the runtime went: neither woken nor driven"
        );
        // And a timer dropped as the runtime goes leaves nothing behind.
        drop(timer);
        assert_eq!(core.snapshot().registered, 0);
    });
}

#[test]
fn loom_work_asked_while_the_token_is_held_is_done_before_it_is_let_go() {
    loom::model(|| {
        let token = LoomArc::new(Token::new());
        let done = LoomArc::new(AtomicBool::new(false));
        let asker = {
            let (token, done) = (token.clone(), done.clone());
            loom::thread::spawn(move || match token.request(FIRE) {
                Requested::Holder => {
                    while let Some(work) = token.next() {
                        assert_eq!(work & FIRE, FIRE);
                        done.store(true, Ordering::SeqCst);
                    }
                }
                Requested::Busy { ticket } => {
                    token.wait_done(ticket);
                    assert!(
                        done.load(Ordering::SeqCst),
                        "returned before its work was done"
                    );
                }
                Requested::Mine => unreachable!(),
            })
        };
        if token.request(FIRE) == Requested::Holder {
            while token.next().is_some() {
                done.store(true, Ordering::SeqCst);
            }
        }
        asker.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    });
}

#[test]
fn loom_a_cancel_racing_a_callbacks_fire_is_exactly_once() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Manual);
        let ran = LoomArc::new(AtomicBool::new(false));
        let scheduled = {
            let ran = ran.clone();
            crate::callback::schedule_on(&shard, 2, move || ran.store(true, Ordering::SeqCst))
        };
        at(&core, 2);
        let turner = {
            let core = core.clone();
            loom::thread::spawn(move || core.advanced())
        };
        let cancelled = scheduled.cancel();
        turner.join().unwrap();
        let ran = ran.load(Ordering::SeqCst);
        assert!(ran != cancelled, "ran {ran}, cancel returned {cancelled}");
        assert_eq!(scheduled.is_cancelled(), cancelled);
        assert_eq!(scheduled.has_fired(), ran);
        assert_eq!(core.pending_runs(), 0);
        assert_eq!(core.snapshot().registered, 0, "an entry was left behind");
        assert_eq!(shard.lock().wheel.len(), 0);
    });
}

#[test]
fn loom_a_poll_with_a_new_waker_as_the_runtime_goes_is_woken_or_driven() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Tokio);
        let (_old_count, old) = counter();
        let (new_count, new) = counter();
        let mut timer = registered(&shard, 10, &old);
        let gone = {
            let core = core.clone();
            loom::thread::spawn(move || core.runtime_gone(None))
        };
        let polled = timer.poll(&new);
        gone.join().unwrap();
        assert!(polled.is_pending());
        let woken = new_count.0.load(Ordering::SeqCst) == 1;
        let fallback = core.fallback_started.load(Ordering::SeqCst);
        assert!(
            woken || fallback,
            "the new waker is stored in a stopped timer: neither woken nor driven"
        );
        drop(timer);
    });
}

/// A registration polled while another thread advances the clock past its deadline: it is
/// pending until the fire, each pending poll leaves the waker that the fire then wakes
/// (once), a ready one comes no earlier than the deadline, and once the `advance` has
/// returned the timer has fired.
#[test]
fn loom_registrations_poll_pending_until_fired() {
    loom::model(|| {
        let (core, shard, _) = core(Mode::Manual);
        let (registered_with, first) = Stamp::new(&core);
        let (polled_with, second) = Stamp::new(&core);
        let advancer = {
            let core = core.clone();
            loom::thread::spawn(move || assert!(core.advance_by(Duration::from_nanos(2))))
        };
        let mut timer = Registration::new(shard.clone(), IDLE);
        let registered = timer.register(2, Some(&first));
        let polled = timer.poll(&second);
        // Read after the poll: had the timer been ready before the clock reached 2, some
        // interleaving would read the clock before the advance moved it.
        let after_poll = core.clock.now_tick();
        if polled.is_ready() {
            assert!(
                after_poll >= 2,
                "ready at {after_poll}, before its deadline"
            );
        }
        advancer.join().unwrap();
        match (registered.is_pending(), polled.is_pending()) {
            // Fired before the poll: the waker it had then was woken.
            (true, false) => assert_eq!(registered_with.wakes(), 1, "fired unwoken"),
            // The poll's waker replaced the first, and the fire woke it.
            (true, true) => {
                assert_eq!(polled_with.wakes(), 1, "left asleep after its poll");
                assert_eq!(registered_with.wakes(), 0, "a replaced waker was woken");
            }
            // The turn had passed 2 before it registered: due at once, nothing to wake.
            (false, _) => assert!(polled.is_ready()),
        }
        assert!(
            registered_with.wakes() + polled_with.wakes() <= 1,
            "woken twice"
        );
        for stamp in [&registered_with, &polled_with] {
            if stamp.wakes() > 0 {
                assert!(stamp.woken_at() >= 2, "woken at {}", stamp.woken_at());
            }
        }
        assert_eq!(
            timer.poll(&second),
            Poll::Ready(()),
            "fired once advanced past"
        );
        assert_eq!(core.snapshot().registered, 0, "an entry outlived its owner");
    });
}

/// Two `Sleep`s first polled (so registered, on one of two shards) while another thread
/// advances the manual clock to 2, past the first's deadline and short of the second's,
/// with another timer due at 1 on the other shard: nothing completes or is woken before its
/// deadline, and once the `advance` has returned everything due has been woken, exactly
/// once, a final turn included.
#[test]
fn loom_a_sleep_registered_as_the_clock_passes_its_deadline_is_woken_once_never_early() {
    loom::model(|| {
        let (core, shards, _) = core_with(Mode::Manual, 2);
        let (other, other_waker) = Stamp::new(&core);
        let other_timer = registered(&shards[0], 1, &other_waker);
        let mut due = Sleep::new(shards[1].clone(), core.clock.instant_at(2));
        let mut later = Sleep::new(shards[1].clone(), core.clock.instant_at(3));
        let advancer = {
            let core = core.clone();
            loom::thread::spawn(move || assert!(core.advance_by(Duration::from_nanos(2))))
        };
        let (due_stamp, due_waker) = Stamp::new(&core);
        let (later_stamp, later_waker) = Stamp::new(&core);
        let due_polled = Pin::new(&mut due).poll(&mut Context::from_waker(&due_waker));
        // Read after the poll: a completion before the clock reached 2 would show in the
        // interleavings where the advance does not come in between.
        let after_poll = core.clock.now_tick();
        if due_polled.is_ready() {
            assert!(
                after_poll >= 2,
                "ready at {after_poll}, before its deadline"
            );
        }
        let later_polled = Pin::new(&mut later).poll(&mut Context::from_waker(&later_waker));
        assert!(
            later_polled.is_pending(),
            "due at 3, ready with the clock at 2 at most"
        );
        advancer.join().unwrap();
        // The advance to 2 has returned: what is due is woken, and not early.
        assert_eq!(other.wakes(), 1, "the other shard's timer was left asleep");
        assert!(other.woken_at() >= 1, "woken at {}", other.woken_at());
        if due_polled.is_pending() {
            assert_eq!(
                due_stamp.wakes(),
                1,
                "registered, and left asleep past its deadline"
            );
            assert!(
                due_stamp.woken_at() >= 2,
                "woken at {}",
                due_stamp.woken_at()
            );
        } else {
            assert_eq!(
                due_stamp.wakes(),
                0,
                "completed at its first poll, yet woken"
            );
        }
        assert_eq!(
            later_stamp.wakes(),
            0,
            "woken at {}, before 3",
            later_stamp.woken_at()
        );
        // A final turn wakes nothing twice, and nothing early.
        core.advanced();
        assert_eq!(other.wakes(), 1, "woken twice");
        assert!(due_stamp.wakes() <= 1, "woken twice");
        assert_eq!(later_stamp.wakes(), 0, "woken before its deadline");
        assert!(due.is_elapsed());
        assert!(!later.is_elapsed());
        drop((other_timer, due, later));
        assert_eq!(core.snapshot().registered, 0, "an entry outlived its owner");
    });
}

/// A `Sleep` registered on one of two shards and then dropped while another thread
/// advances the clock past its deadline: whether the fire or the drop comes first, the
/// slab is left empty and the waker is woken at most once, never early.
#[test]
fn loom_a_sleep_dropped_as_the_clock_passes_its_deadline_leaves_the_slab_empty() {
    loom::model(|| {
        let (core, shards, _) = core_with(Mode::Manual, 2);
        let (other, other_waker) = Stamp::new(&core);
        let other_timer = registered(&shards[0], 1, &other_waker);
        let mut sleep = Box::pin(Sleep::new(shards[1].clone(), core.clock.instant_at(2)));
        let advancer = {
            let core = core.clone();
            loom::thread::spawn(move || assert!(core.advance_by(Duration::from_nanos(2))))
        };
        let (slept, waker) = Stamp::new(&core);
        let _ = sleep.as_mut().poll(&mut Context::from_waker(&waker));
        drop(sleep);
        advancer.join().unwrap();
        assert!(slept.wakes() <= 1, "woken twice");
        if slept.wakes() == 1 {
            assert!(slept.woken_at() >= 2, "woken at {}", slept.woken_at());
        }
        assert_eq!(other.wakes(), 1, "the other shard's timer was left asleep");
        drop(other_timer);
        assert_eq!(core.snapshot().registered, 0, "an entry outlived its owner");
        for shard in shards.iter() {
            let state = shard.lock();
            let held = state.wheel.len() - state.placeholders;
            assert_eq!(held, 0, "a slab entry was left behind");
        }
    });
}

/// Ground rule 4 across two shards, with the clock moving: the alarm's thread moves the
/// clock to 5 and turns while a `Sleep` due at 10 is first polled on the shard that held
/// nothing when the alarm was armed. The turn sees it, or it moves the alarm to it; and it
/// is woken when the alarm goes off at 10, not before.
#[test]
fn loom_a_sleep_registered_on_an_idle_shard_as_the_alarm_goes_off_is_seen_or_moves_the_alarm() {
    loom::model(|| {
        let (core, shards, armed) = core_with(Mode::Tokio, 2);
        // Timers at 3 and 100 on shard 0; a first turn at 0 arms the alarm at 3, and
        // leaves shard 1 with nothing armed.
        let _early = registered(&shards[0], 3, Waker::noop());
        let _late = registered(&shards[0], 100, Waker::noop());
        core.alarm_went_off();
        assert_eq!(armed.load(Ordering::SeqCst), 3);

        let mut sleep = Sleep::new(shards[1].clone(), core.clock.instant_at(10));
        let alarm = {
            let core = core.clone();
            loom::thread::spawn(move || {
                at(&core, 5);
                core.alarm_went_off();
            })
        };
        let (stamp, waker) = Stamp::new(&core);
        let polled = Pin::new(&mut sleep).poll(&mut Context::from_waker(&waker));
        alarm.join().unwrap();
        assert!(polled.is_pending(), "due at 10, ready with the clock at 5");
        let alarm_at = armed.load(Ordering::SeqCst);
        assert!(alarm_at <= 10, "a sleep due at 10, the alarm at {alarm_at}");
        assert_eq!(stamp.wakes(), 0, "woken at {}, before 10", stamp.woken_at());

        at(&core, 10);
        core.alarm_went_off();
        assert_eq!(
            stamp.wakes(),
            1,
            "left asleep when the alarm went off at 10"
        );
        assert!(stamp.woken_at() >= 10, "woken at {}", stamp.woken_at());
    });
}
