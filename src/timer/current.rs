//! Which timer is current: an entered one, else the runtime's default, else the process's.
//!
//! Runtime defaults are kept in a process-wide list keyed by tokio's runtime id and held
//! strongly there, so a runtime's timer (and its driver task) is made once, not once per
//! `sleep`. The list's lock is never held while a timer is built or dropped. Each thread caches the last one it used. An entry whose driver task has
//! stopped (its runtime shut down) is never handed out again and is pruned the next time
//! the list is searched: tokio may give its id to a new runtime.

use super::{Builder, Timer};
use crate::driver::Shared;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use tokio::runtime::{Handle, Id};

thread_local! {
    static ENTERED: RefCell<Option<Timer>> = const { RefCell::new(None) };
    static LAST_RUNTIME: RefCell<Option<(Id, Weak<Shared>)>> = const { RefCell::new(None) };
}

static RUNTIME_DEFAULTS: Mutex<Vec<(Id, Timer)>> = Mutex::new(Vec::new());
static PROCESS_DEFAULT: OnceLock<Timer> = OnceLock::new();

/// Restores the previously current timer when dropped. Returned by [`Timer::enter`].
#[must_use = "the timer stops being current when the guard is dropped"]
#[derive(Debug)]
pub struct EnterGuard {
    previous: Option<Timer>,
    /// The guard restores this thread's state, so it must stay on this thread.
    _not_send: PhantomData<*const ()>,
}

pub(super) fn enter(timer: Timer) -> EnterGuard {
    let previous = ENTERED.with(|entered| entered.borrow_mut().replace(timer));
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
            ENTERED.with(|entered| std::mem::replace(&mut *entered.borrow_mut(), previous));
    }
}

pub(super) fn current() -> Timer {
    if let Some(timer) = ENTERED.with(|entered| entered.borrow().clone()) {
        return timer;
    }
    match Handle::try_current() {
        Ok(handle) => runtime_default(&handle),
        Err(_) => process_default(),
    }
}

fn process_default() -> Timer {
    PROCESS_DEFAULT
        .get_or_init(|| {
            let built = Builder::new().driver(super::Driver::Thread).build();
            built.unwrap_or_else(|error| panic!("tickless: default timer: {error}"))
        })
        .clone()
}

fn runtime_default(handle: &Handle) -> Timer {
    let id = handle.id();
    let cached = LAST_RUNTIME.with(|last| match &*last.borrow() {
        Some((last_id, shared)) if *last_id == id => shared.upgrade(),
        _ => None,
    });
    if let Some(shared) = cached.filter(|shared| !shared.is_stopped()) {
        return Timer { shared };
    }
    let timer = match find_or_prune(id) {
        Some(timer) => timer,
        None => {
            // Built with the list unlocked: building probes the runtime (which may run a
            // panic hook) and spawns the driver, and neither should run under a global lock.
            let built = {
                let _enter = handle.enter();
                // Task driver where the runtime has time enabled, else a driver thread.
                Timer::new()
            };
            let mut defaults = lock_defaults();
            match defaults.iter().find(|(known, _)| *known == id) {
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
            }
        }
    };
    let weak = Arc::downgrade(&timer.shared);
    LAST_RUNTIME.with(|last| *last.borrow_mut() = Some((id, weak)));
    timer
}

fn lock_defaults() -> std::sync::MutexGuard<'static, Vec<(Id, Timer)>> {
    RUNTIME_DEFAULTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The default timer of runtime `id`, if one is listed; drops the entries of runtimes that
/// have shut down on the way (outside the lock: a stale timer's last handle drops the
/// wakers it holds).
fn find_or_prune(id: Id) -> Option<Timer> {
    let mut stale = Vec::new();
    let found = {
        let mut defaults = lock_defaults();
        let mut index = 0;
        while index < defaults.len() {
            if defaults[index].1.shared.is_stopped() {
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
