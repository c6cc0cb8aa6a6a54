//! The driver inside a tokio runtime's own timer processing.
//!
//! The alarm is one tokio [`Sleep`](tokio::time::Sleep), polled with a waker of ours
//! ([`Hook`]). tokio wakes it in the pass that fires its own timers; the wake runs the
//! turn right there (waking every due tickless timer in the same pass as tokio's) and
//! re-arms the `Sleep` for the next expiry. So a paused clock's `advance`, or its
//! auto-advance, sees tickless timers fire exactly when tokio's would.
//!
//! The `Sleep` is registered with tokio only while something is armed: a paused runtime
//! with nothing to do auto-advances its clock to the next tokio timer, and must not find
//! one of ours waiting for nothing.
//!
//! Three things make that exact and safe:
//!
//! - **One rounding.** tokio rounds deadlines up to milliseconds counted from its own
//!   start. A timer built here puts its origin on that grid ([`grid_origin`]), so its
//!   1 ms ticks *are* tokio's milliseconds and arming the alarm at a tick rounds nothing
//!   again: `sleep_until(t)` fires when tokio's `sleep_until(t)` would.
//! - **Context.** Reading a paused clock and polling the `Sleep` need the runtime's
//!   context; tokio's timer pass has it. Work that lands on a thread without it (the
//!   token holder was elsewhere when the alarm went off) is handed to a helper task on
//!   the runtime ([`Helper`]).
//! - **Shutdown without a panic.** tokio wakes every timer when its runtime shuts down,
//!   and polling a `Sleep` after that panics. The helper task's drop (tokio drops every
//!   task first) says the runtime is going; a wake before the armed tick is checked by
//!   re-arming far away, which completes at once only on a shut-down runtime.
//!
//! **tokio's alternative timer** (`--cfg tokio_unstable`, `enable_alt_timer()`) keeps a
//! wheel per worker and differs in the two ways that matter here: every reset registers
//! a new entry (so no reset completes at once), and a worker that shuts down wakes its
//! timers, ours included, before tokio drops the tasks, in a pass where a registration
//! panics and a panic aborts the process. tokio offers no way to ask which timer a
//! runtime runs, so in a build with `--cfg tokio_unstable` every multi-thread runtime's
//! alarm is *relayed*: its wake only wakes the helper task, and every call into tokio's timer
//! (turning and arming, re-arming, the shutdown check) is made from the helper's poll,
//! a task's context; a runtime that goes drops the helper instead, which says so. Timers
//! fire one task poll after tokio's own there (tokio's paused clock, where that would
//! show, needs a current-thread runtime, which has no alternative timer).

use super::clock::{deadline_after, Clock, Source};
use super::shard::Shard;
use super::{Alarm, Armed, Core, Mode, Rearmed};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::runtime::{Handle, Id, RuntimeFlavor};
use tokio::time::{Instant, Sleep};

/// How far a disarmed alarm waits: further than any test or process runs.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// A tokio-driven core and its shards, built inside `handle`'s runtime, which the caller
/// has checked has time enabled (or could not check: see [`time_enabled`]).
pub(crate) fn build(
    handle: &Handle,
    tick: Duration,
    wheel_size: usize,
    shards: usize,
) -> (Arc<Core>, Box<[Arc<Shard>]>) {
    let _enter = handle.enter();
    let now = Instant::now();
    // tokio offers no way to ask whether a runtime runs the alternative timer, and its
    // behaviour tells only racily (a worker may process a reset while it is probed):
    // where it can exist, every multi-thread runtime is taken to run it.
    let relayed = cfg!(tokio_unstable) && handle.runtime_flavor() == RuntimeFlavor::MultiThread;
    let origin = if relayed {
        now // its resets round on a worker's wheel, not on a grid a probe can find
    } else {
        let mut probe = Box::pin(tokio::time::sleep_until(deadline_after(now, FAR)));
        grid_origin(probe.as_mut(), now).unwrap_or(now)
    };
    // A paused clock does not move while ~50 resets run; a real one does.
    let paused = Instant::now() == now;
    let clock = Clock::with_origin(origin, tick, Source::Tokio);
    clock.follow_runtime(handle.clone(), paused);
    let (core, shards) = Core::new(clock, Mode::Tokio, wheel_size, shards);
    let relay = Arc::new(Relay::default());
    core.set_alarm(Box::new(TokioAlarm {
        sleep: Box::pin(tokio::time::sleep_until(deadline_after(now, FAR))),
        handle: handle.clone(),
        hook: Waker::from(Arc::new(Hook(Arc::downgrade(&core)))),
        armed: u64::MAX,
        relay: relay.clone(),
        relayed,
    }));
    // On a runtime already shut down (a blocking thread outliving it), tokio drops the
    // task at once, and its drop hands the timer to a driver thread.
    drop(handle.spawn(Helper {
        core: Arc::downgrade(&core),
        relay,
        runtime: handle.id(),
    }));
    (core, shards)
}

/// A point of tokio's millisecond grid at or before `now`, found by asking when a reset
/// completes at once: tokio completes a `Sleep` reset to `t` at once when `t`, rounded up
/// to its grid, is no later than the last millisecond it has processed. That makes the
/// latest such `t` a grid point. About fifty resets, once per timer; `None` (keep `now`)
/// if tokio does not behave so.
fn grid_origin(mut sleep: Pin<&mut Sleep>, now: Instant) -> Option<Instant> {
    let mut fires = |at: Instant| {
        sleep.as_mut().reset(at);
        sleep.is_elapsed()
    };
    const NS: Duration = Duration::from_nanos(1);
    if fires(now) {
        return Some(now);
    }
    // Below `hi` nothing fired yet; find a point that does, then narrow to one nanosecond.
    let (mut lo, mut hi) = (None, now);
    let mut step = Duration::from_millis(1);
    while lo.is_none() {
        let at = hi.checked_sub(step)?;
        if fires(at) {
            lo = Some(at);
        } else {
            hi = at;
            step = step.checked_mul(2)?;
            if step > Duration::from_secs(3600) {
                return None;
            }
        }
    }
    let mut lo = lo?;
    while hi - lo > NS {
        let mid = lo + (hi - lo) / 2;
        if fires(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // A grid point fires and the next nanosecond does not, unless tokio moved meanwhile.
    (fires(lo) && !fires(lo + NS)).then_some(lo)
}

thread_local! {
    /// Set while this thread polls a helper task: a relayed alarm's calls into tokio are
    /// made only then.
    static IN_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The driver's alarm on a tokio runtime.
pub(crate) struct TokioAlarm {
    /// Registered with tokio's timer only while armed: a paused runtime with nothing to do
    /// auto-advances its clock to the next tokio timer, and an alarm kept far away would
    /// send it there. Disarmed, the box holds a fresh `Sleep` that was never polled (tokio
    /// registers a `Sleep` on its first poll or reset), so arming again allocates nothing.
    sleep: Pin<Box<Sleep>>,
    handle: Handle,
    /// Our waker, that tokio's timer wakes.
    hook: Waker,
    /// The tick the alarm is armed for; `u64::MAX`: disarmed.
    armed: u64,
    relay: Arc<Relay>,
    /// On tokio's alternative timer: every call into tokio is made from the helper task's
    /// poll (see the module docs).
    relayed: bool,
}

impl TokioAlarm {
    /// Polls the `Sleep` with the hook, so that tokio wakes it (in context).
    fn register(&mut self) -> Armed {
        let mut cx = Context::from_waker(&self.hook);
        // Outside tokio's cooperative budget: a spent budget would wake the hook at once
        // instead of registering it. tokio panics when a `Sleep` is polled on a runtime
        // that has shut down; in context that cannot happen meanwhile, except on a thread
        // of the runtime's blocking pool, so the panic is caught (not silenced: this is on
        // every pass, and silencing swaps the process's panic hook).
        let sleep = self.sleep.as_mut();
        let polled = catch_unwind(AssertUnwindSafe(|| {
            let mut sleep = std::pin::pin!(tokio::task::unconstrained(sleep));
            sleep.as_mut().poll(&mut cx)
        }));
        match polled {
            Ok(Poll::Pending) => Armed::Waiting,
            Ok(Poll::Ready(())) => Armed::Due,
            Err(_) => Armed::ShutDown,
        }
    }

    /// Deregisters: replaces the `Sleep` by a fresh one, never polled (in context).
    fn disarm(&mut self) {
        if self.armed != u64::MAX {
            let _enter = self.handle.enter();
            let far = deadline_after(Instant::now(), FAR);
            self.sleep.set(tokio::time::sleep_until(far));
            self.armed = u64::MAX;
        }
    }
}

impl Alarm for TokioAlarm {
    fn in_context(&self) -> bool {
        if self.relayed {
            return IN_HELPER.with(std::cell::Cell::get)
                && Handle::try_current().is_ok_and(|handle| handle.id() == self.handle.id());
        }
        Handle::try_current().is_ok_and(|handle| handle.id() == self.handle.id())
    }

    fn relay(&self) {
        self.relay.asked.store(true, Ordering::Release);
        self.relay.wake();
    }

    fn armed(&self) -> u64 {
        self.armed
    }

    fn rearm(&mut self, clock: &Clock, tick: u64) -> Rearmed {
        if self.relayed {
            // A reset registers a new entry, without the hook: arm again, from the helper.
            return if self.in_context() {
                Rearmed::Arm
            } else {
                Rearmed::Relay
            };
        }
        if self.armed == u64::MAX {
            // Disarmed: registering needs the runtime's context.
            return if self.in_context() {
                Rearmed::Arm
            } else {
                Rearmed::Relay
            };
        }
        if !self.sleep.is_elapsed() {
            // The hook stays registered through a reset, which needs no context; a
            // deadline tokio has passed completes at once and wakes the hook, which turns
            // (in context) or relays.
            self.sleep.as_mut().reset(clock.instant_at(tick));
            self.armed = tick;
        }
        // Else it went off: its wake is on its way, and re-arms for everything.
        Rearmed::Done
    }

    fn arm(&mut self, clock: &Clock, tick: Option<u64>) -> Armed {
        if self.relayed {
            // From the helper's poll, which tokio does not make while it shuts down; but
            // should a worker poll it in the pass in which it learns of the shutdown, a
            // registration panics: that is the runtime going, not a fault of ours.
            return catch_unwind(AssertUnwindSafe(|| self.arm_now(clock, tick)))
                .unwrap_or(Armed::ShutDown);
        }
        self.arm_now(clock, tick)
    }

    fn shutting_down(&mut self) -> bool {
        if self.relayed {
            // Never asked of tokio there (see the module docs): the helper's drop says so.
            return false;
        }
        // Only a shut-down runtime completes a `Sleep` thirty years away at once.
        self.sleep
            .as_mut()
            .reset(deadline_after(Instant::now(), FAR));
        let gone = self.sleep.is_elapsed();
        self.armed = 0; // registered (without the hook): `disarm` replaces it
        self.disarm();
        gone
    }
}

impl TokioAlarm {
    fn arm_now(&mut self, clock: &Clock, tick: Option<u64>) -> Armed {
        let Some(tick) = tick else {
            // Nothing to wait for: deregistered, so an idle paused runtime stays put.
            self.disarm();
            return Armed::Waiting;
        };
        self.sleep.as_mut().reset(clock.instant_at(tick));
        if self.sleep.is_elapsed() {
            // Completed at once: due by tokio's clock already, or the runtime is going.
            return if self.shutting_down() {
                Armed::ShutDown
            } else {
                Armed::Due
            };
        }
        let armed = self.register();
        if armed == Armed::Waiting {
            self.armed = tick;
        }
        armed
    }
}

impl Drop for TokioAlarm {
    fn drop(&mut self) {
        // The helper task ends once it finds the core gone.
        self.relay.wake();
    }
}

/// The waker tokio's timer wakes: the alarm went off.
struct Hook(Weak<Core>);

impl Wake for Hook {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(core) = self.0.upgrade() {
            core.alarm_went_off();
        }
    }
}

/// How a token holder outside the runtime's context hands it the firing.
#[derive(Default)]
struct Relay {
    asked: AtomicBool,
    helper: Mutex<Option<Waker>>,
}

impl Relay {
    fn wake(&self) {
        let waker = self
            .helper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A task on the runtime: fires the alarm when asked from outside the runtime's
/// context, and tells the core when the runtime shuts down (tokio drops every task).
struct Helper {
    core: Weak<Core>,
    relay: Arc<Relay>,
    runtime: Id,
}

impl Future for Helper {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(core) = self.core.upgrade() else {
            return Poll::Ready(());
        };
        {
            let mut helper = self
                .relay
                .helper
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !helper.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *helper = Some(cx.waker().clone());
            }
        }
        if self.relay.asked.swap(false, Ordering::AcqRel) {
            // A task's context: a relayed alarm calls into tokio only from here.
            IN_HELPER.with(|in_helper| in_helper.set(true));
            struct Leave;
            impl Drop for Leave {
                fn drop(&mut self) {
                    IN_HELPER.with(|in_helper| in_helper.set(false));
                }
            }
            let _leave = Leave;
            core.alarm_went_off();
        }
        Poll::Pending
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(core) = self.core.upgrade() {
            let in_runtime = Handle::try_current().is_ok_and(|h| h.id() == self.runtime);
            core.runtime_gone(in_runtime.then(Instant::now));
        }
    }
}

/// Whether `handle`'s runtime has its time driver enabled. tokio offers no query, and
/// making a `Sleep` without one panics, so this makes one and catches the panic, quietly
/// (see [`quietly`]). Answers are remembered for the last few runtimes asked about.
/// `None` when it cannot ask: on a thread that is unwinding (a second panic would abort),
/// when nothing is remembered; that is not remembered either.
///
/// Under `panic = "abort"` nothing can be caught: time is taken to be enabled, and a
/// runtime without it aborts the process with tokio's own message on the first timer,
/// exactly as `tokio::time::sleep` does there.
pub(crate) fn time_enabled(handle: &Handle) -> Option<bool> {
    static KNOWN: Mutex<Vec<(Id, bool)>> = Mutex::new(Vec::new());
    const REMEMBERED: usize = 64;
    if cfg!(panic = "abort") {
        return Some(true);
    }
    let id = handle.id();
    let known = |list: &Vec<(Id, bool)>| list.iter().find(|(k, _)| *k == id).map(|(_, v)| *v);
    if let Some(enabled) = known(&KNOWN.lock().unwrap_or_else(PoisonError::into_inner)) {
        return Some(enabled);
    }
    let _enter = handle.enter();
    let enabled = quietly(|| drop(tokio::time::sleep(Duration::ZERO)))?.is_ok();
    let mut list = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    if list.len() == REMEMBERED {
        list.remove(0);
    }
    list.push((id, enabled));
    Some(enabled)
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The panic hook as `std::panic::take_hook` hands it out.
type PanicHook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send + 'static>;

/// Runs `f`, catching a panic (`Some(Err(()))`) without printing it or running the panic
/// hook: for the duration of the call, the hook in place is wrapped in one that passes on
/// every panic except one raised inside `quietly` on this thread, and put back afterwards
/// (unless the user set another meanwhile, which is kept). Calls are serialised, so they
/// never wrap each other. Used only where tokio can be asked by provoking its panic and
/// nothing else, once per runtime. Nothing is caught under `panic = "abort"`; and on a
/// thread that is already unwinding (a second panic would abort) `f` is not run: `None`.
fn quietly<T>(f: impl FnOnce() -> T) -> Option<Result<T, ()>> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    if cfg!(panic = "abort") {
        return Some(Ok(f()));
    }
    if std::thread::panicking() {
        return None;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let previous: Arc<PanicHook> = Arc::new(std::panic::take_hook());
    let passed_on = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        if !QUIET.with(std::cell::Cell::get) {
            passed_on(info);
        }
    }));
    QUIET.with(|quiet| quiet.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|quiet| quiet.set(false));
    // While ours is installed it holds the second reference to the previous hook. If the
    // user replaced it meanwhile, std dropped it: keep the user's.
    let current = std::panic::take_hook();
    let ours_was_current = Arc::strong_count(&previous) == 2;
    if ours_was_current {
        drop(current);
        match Arc::try_unwrap(previous) {
            Ok(previous) => std::panic::set_hook(previous),
            Err(previous) => std::panic::set_hook(Box::new(move |info| previous(info))),
        }
    } else {
        std::panic::set_hook(current);
    }
    Some(result.map_err(drop))
}
