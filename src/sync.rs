//! The crate's one loom facade: every lock, atomic and cell that a protocol of the driver,
//! the callbacks or the purgatory depends on comes from here, loom's under
//! `--cfg tickless_loom` (so the loom tests explore every interleaving of the real code),
//! std's otherwise.

#[cfg(tickless_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering},
    Condvar, Mutex, MutexGuard,
};
#[cfg(not(tickless_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering},
    Condvar, Mutex, MutexGuard,
};

#[cfg(tickless_loom)]
pub(crate) type ThreadId = loom::thread::ThreadId;
#[cfg(not(tickless_loom))]
pub(crate) type ThreadId = std::thread::ThreadId;

/// The calling thread's id.
pub(crate) fn thread_id() -> ThreadId {
    #[cfg(tickless_loom)]
    return loom::thread::current().id();
    #[cfg(not(tickless_loom))]
    return std::thread::current().id();
}

/// Locks `mutex`, ignoring poison: no user code runs while the driver's locks are held
/// (see the ground rules in `driver`), so a poisoned lock still guards consistent state.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Lets other threads run (loom's, so a model can make progress through a wait).
pub(crate) fn yield_now() {
    #[cfg(tickless_loom)]
    loom::thread::yield_now();
    #[cfg(not(tickless_loom))]
    std::thread::yield_now();
}

/// A cell whose exclusive access a protocol guarantees instead of a lock (loom's under
/// the cfg, which checks that no two threads ever touch it at once).
#[cfg(tickless_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// A cell whose exclusive access a protocol guarantees instead of a lock: std's, with
/// loom's interface.
#[cfg(not(tickless_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(tickless_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a pointer to the value; dereferencing it is the caller's to justify.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
