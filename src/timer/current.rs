//! Which timer is current: an entered one, else the runtime's default, else the process's.
//!
//! A runtime's default timer is sharded: every thread gets a shard number once (threads
//! are numbered in the order they first ask), and threads whose numbers differ modulo
//! [`shard_count`] use different timers, with different locks and driver tasks. So the
//! worker threads of a multi-thread runtime usually do not contend for one lock (two
//! workers on one timer did 1.6 Mops/s of register+cancel, on separate ones 5.5; see
//! `BENCHMARKS.md`). Numbers are process-wide, so two workers can still share a shard
//! when other threads took the numbers between theirs; that costs speed, not correctness.
//!
//! Runtime defaults are kept in a process-wide list keyed by tokio's runtime id and the
//! shard, and held strongly there, so a shard's timer (and its driver task) is made once,
//! not once per `sleep`. The list's lock is never held while a timer is built or dropped.
//! Each thread caches the last one it used. An entry whose driver task has stopped (its
//! runtime shut down) is never handed out again and is pruned the next time the list is
//! searched: tokio may give its id to a new runtime.

use super::{Builder, Timer};
use crate::driver::Shared;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use tokio::runtime::{Handle, Id};

thread_local! {
    static ENTERED: RefCell<Option<Timer>> = const { RefCell::new(None) };
    static LAST_RUNTIME: RefCell<Option<(Id, Weak<Shared>)>> = const { RefCell::new(None) };
    /// This thread's shard of every runtime's default timer.
    static SHARD: usize = {
        static THREADS: AtomicUsize = AtomicUsize::new(0);
        THREADS.fetch_add(1, Ordering::Relaxed) % shard_count()
    };
}

/// A runtime's default timer for one shard of its threads.
type Key = (Id, usize);

static RUNTIME_DEFAULTS: Mutex<Vec<(Key, Timer)>> = Mutex::new(Vec::new());

/// How many default timers a runtime may have: twice the available parallelism (at most
/// 64), so that the few threads that run tasks are unlikely to share one.
pub(crate) fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        (2 * cores).min(64)
    })
}
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
    let key = (id, SHARD.with(|shard| *shard));
    let cached = LAST_RUNTIME.with(|last| match &*last.borrow() {
        Some((last_id, shared)) if *last_id == id => shared.upgrade(),
        _ => None,
    });
    if let Some(shared) = cached.filter(|shared| !shared.is_stopped()) {
        return Timer { shared };
    }
    let timer = match find_or_prune(key) {
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
            match defaults.iter().find(|(known, _)| *known == key) {
                // Another thread built one first: use it, and drop ours unlocked.
                Some((_, first)) => {
                    let first = first.clone();
                    drop(defaults);
                    drop(built);
                    first
                }
                None => {
                    defaults.push((key, built.clone()));
                    built
                }
            }
        }
    };
    let weak = Arc::downgrade(&timer.shared);
    LAST_RUNTIME.with(|last| *last.borrow_mut() = Some((id, weak)));
    timer
}

fn lock_defaults() -> std::sync::MutexGuard<'static, Vec<(Key, Timer)>> {
    RUNTIME_DEFAULTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The default timer of a runtime's shard, if one is listed; drops the entries of runtimes
/// that have shut down on the way (outside the lock: a stale timer's last handle drops the
/// wakers it holds).
fn find_or_prune(key: Key) -> Option<Timer> {
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
            .find(|(known, _)| *known == key)
            .map(|(_, timer)| timer.clone())
    };
    drop(stale);
    found
}
