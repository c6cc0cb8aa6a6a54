//! Which timer is current: an entered one, else the runtime's default, else the process's.
//!
//! A runtime with time enabled gets one default timer, made on first use and driven inside
//! that runtime; like every timer it is sharded by thread inside, so its worker threads do
//! not contend for one lock. A runtime without time uses the process-wide default, which a
//! thread drives: nothing is made, or left behind, per such runtime.
//!
//! Runtime defaults are kept in a process-wide list keyed by tokio's runtime id, and held
//! strongly there, so the timer is made once, not once per `sleep`. The list's lock is
//! never held while a timer is built or dropped. Each thread caches its shard of the last
//! default it used, weakly: the free functions find it without touching the timer's
//! reference count, which every worker shares. An entry whose runtime has shut down is
//! never handed out again, and is dropped from the list (with its wheels, and its
//! fallback driver thread once idle) the next time any thread searches it.
//!
//! Each lookup asks tokio which runtime is current (`Handle::try_current`, which clones the
//! handle: two atomic operations on a count that every worker of the runtime shares); the
//! rest is one thread-local. Nothing cheaper tells a change. tokio keeps the current
//! handle in its own thread-local, set by `Handle::enter`, `Runtime::block_on` and its
//! worker and blocking threads, and publishes it only by that clone. Inside one poll of
//! one task, on one thread and with one task id, the task may enter another runtime's
//! handle, or block on another runtime inside `block_in_place`, and nothing tickless can
//! read (the task id, the worker index, the waker, its own state) changes: `tests/current.rs`
//! holds both cases. A cache that skipped the question would register there on the
//! wrong runtime's timer.

use super::{Builder, Inner, Timer};
use crate::driver::runtime::time_enabled;
use crate::driver::shard::Shard;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use tokio::runtime::{Handle, Id};
use tokio::time::Instant;

/// This thread's view of which timer is current. One thread-local, not two: the free
/// functions' hot path reads both fields, and each thread-local with a destructor costs a
/// state check of its own on every access.
struct Local {
    /// The timer most recently entered on this thread ([`Timer::enter`]).
    entered: RefCell<Option<Timer>>,
    /// The default of the runtime this thread last asked about, and this thread's shard
    /// of it.
    last_runtime: RefCell<Option<Cached>>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            entered: RefCell::new(None),
            last_runtime: RefCell::new(None),
        }
    };
}

struct Cached {
    runtime: Id,
    timer: Weak<Inner>,
    shard: Weak<Shard>,
}

static RUNTIME_DEFAULTS: Mutex<Vec<(Id, Timer)>> = Mutex::new(Vec::new());
static PROCESS_DEFAULT: OnceLock<Timer> = OnceLock::new();

/// Restores the previously current timer when dropped. Returned by [`Timer::enter`].
///
/// It is not `Send`: it restores the thread it was made on.
///
/// # Examples
///
/// Code written against the free functions runs on a manual clock in a test:
///
/// ```
/// use std::time::Duration;
/// use tickless::Timer;
///
/// fn start_request_timer() -> tickless::Sleep {
///     tickless::sleep(Duration::from_secs(30))
/// }
///
/// let timer = Timer::builder().manual_clock().build()?;
/// let sleep = {
///     let _guard = timer.enter();
///     start_request_timer() // on `timer`, since it is current here
/// };
/// assert!(!Timer::current().same_timer(&timer), "no longer current");
/// let waited = std::thread::spawn(move || futures::executor::block_on(sleep));
/// timer.advance(Duration::from_secs(30));
/// waited.join().unwrap();
/// # Ok::<(), tickless::BuildError>(())
/// ```
#[must_use = "the timer stops being current when the guard is dropped"]
#[derive(Debug)]
pub struct EnterGuard {
    previous: Option<Timer>,
    /// The guard restores this thread's state, so it must stay on this thread.
    _not_send: PhantomData<*const ()>,
}

pub(super) fn enter(timer: Timer) -> EnterGuard {
    let previous = LOCAL.with(|local| local.entered.borrow_mut().replace(timer));
    EnterGuard {
        previous,
        _not_send: PhantomData,
    }
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        // Swap rather than assign, so the timer dropped here is dropped outside the borrow.
        let _entered =
            LOCAL.with(|local| std::mem::replace(&mut *local.entered.borrow_mut(), previous));
    }
}

pub(super) fn current() -> Timer {
    let found = LOCAL.with(|local| {
        if let Some(timer) = &*local.entered.borrow() {
            return Ok(timer.clone());
        }
        let handle = Handle::try_current().map_err(|_| None)?;
        match cached(local, handle.id(), |cached| cached.timer.upgrade()) {
            Some(inner) if !inner.core.is_stopped() => Ok(Timer { inner }),
            _ => Err(Some(handle)),
        }
    });
    // Built or searched for outside the thread-local's borrows.
    match found {
        Ok(timer) => timer,
        Err(Some(handle)) => remember(&handle).0,
        Err(None) => process_default(),
    }
}

/// A runtime's default, or the process's for a runtime without time; not to be
/// remembered when it is the process's only because the runtime could not be asked.
struct Found {
    timer: Timer,
    remember: bool,
}

/// This thread's shard of the current timer: what the free functions register on. The
/// same timer as [`current`], found without touching its handle's reference count.
pub(crate) fn current_shard() -> Arc<Shard> {
    let found = LOCAL.with(|local| {
        if let Some(timer) = &*local.entered.borrow() {
            return Ok(timer.shard().clone());
        }
        // The one lookup that is not a thread-local read: which runtime's handle is
        // entered here can change between any two calls (`Handle::enter` inside a task),
        // and tokio tells it only by cloning the handle (see the module docs).
        let handle = Handle::try_current().map_err(|_| None)?;
        match cached(local, handle.id(), |cached| cached.shard.upgrade()) {
            Some(shard) if !shard.core.is_stopped() => Ok(shard),
            _ => Err(Some(handle)),
        }
    });
    match found {
        Ok(shard) => shard,
        Err(Some(handle)) => remember(&handle).1,
        Err(None) => process_default().shard().clone(),
    }
}

/// Now on the clock of the timer the free functions would use here: an entered timer's
/// (which may be a manual clock), else tokio's `Instant::now()`, which is the clock of
/// every runtime default (read in its runtime, paused or not) and of the process-wide
/// default (the real clock, outside a runtime or in one without time). One thread-local
/// read and one clock read: no lookup of the runtime's default.
pub(crate) fn current_now() -> Instant {
    LOCAL
        .with(|local| local.entered.borrow().as_ref().map(Timer::now))
        .unwrap_or_else(Instant::now)
}

fn cached<T>(local: &Local, runtime: Id, get: impl FnOnce(&Cached) -> Option<T>) -> Option<T> {
    match &*local.last_runtime.borrow() {
        Some(cached) if cached.runtime == runtime => get(cached),
        _ => None,
    }
}

/// Finds (or makes) the runtime's default, and caches it for this thread.
fn remember(handle: &Handle) -> (Timer, Arc<Shard>) {
    let Found { timer, remember } = runtime_default(handle);
    let shard = timer.shard().clone();
    if !remember {
        return (timer, shard);
    }
    let cached = Cached {
        runtime: handle.id(),
        timer: Arc::downgrade(&timer.inner),
        shard: Arc::downgrade(&shard),
    };
    // Replaced outside the borrow: the old entry holds only weak references, but keep the
    // habit of dropping timer state unborrowed.
    let old = LOCAL.with(|local| local.last_runtime.borrow_mut().replace(cached));
    drop(old);
    (timer, shard)
}

fn process_default() -> Timer {
    PROCESS_DEFAULT
        .get_or_init(|| {
            let built = Builder::new().driver(super::Driver::Thread).build();
            built.unwrap_or_else(|error| panic!("tickless: default timer: {error}"))
        })
        .clone()
}

fn runtime_default(handle: &Handle) -> Found {
    let id = handle.id();
    if let Some(timer) = find_or_prune(id) {
        return Found {
            timer,
            remember: true,
        };
    }
    match time_enabled(handle) {
        Some(true) => {}
        enabled => {
            return Found {
                timer: process_default(),
                remember: enabled.is_some(),
            }
        }
    }
    // Built with the list unlocked: building spawns a task and probes the runtime, and
    // neither should run under a global lock.
    let built = {
        let _enter = handle.enter();
        Builder::new()
            .driver(super::Driver::Tokio)
            .build()
            .unwrap_or_else(|error| panic!("tickless: default timer: {error}"))
    };
    let mut defaults = lock_defaults();
    let timer = match defaults.iter().find(|(known, _)| *known == id) {
        // Another thread built one first: use it, and drop ours unlocked.
        Some((_, first)) => {
            let first = first.clone();
            drop(defaults);
            drop(built);
            first
        }
        None => {
            defaults.push((id, built.clone()));
            built
        }
    };
    Found {
        timer,
        remember: true,
    }
}

fn lock_defaults() -> std::sync::MutexGuard<'static, Vec<(Id, Timer)>> {
    RUNTIME_DEFAULTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The default timer of a runtime, if one is listed; drops the entries of runtimes that
/// have shut down on the way (outside the lock: a stale timer's last handle drops the
/// wakers it holds).
fn find_or_prune(id: Id) -> Option<Timer> {
    let mut stale = Vec::new();
    let found = {
        let mut defaults = lock_defaults();
        let mut index = 0;
        while index < defaults.len() {
            if defaults[index].1.core().is_stopped() {
                stale.push(defaults.swap_remove(index));
            } else {
                index += 1;
            }
        }
        defaults
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, timer)| timer.clone())
    };
    drop(stale);
    found
}
