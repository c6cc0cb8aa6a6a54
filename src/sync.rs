//! The crate's one loom facade: every lock, atomic and cell that a protocol of the driver,
//! the callbacks or the purgatory depends on (and the `Arc`s of the purgatory's
//! operations, with their wakers) comes from here, loom's under
//! `--cfg tickless_loom` (so the loom tests explore every interleaving of the real code),
//! std's otherwise.

#[cfg(tickless_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering},
    Condvar, Mutex, MutexGuard,
};
#[cfg(not(tickless_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering},
    Condvar, Mutex, MutexGuard,
};

/// Thread-locals whose destructors a protocol depends on (a shard's owner orphans its
/// shards when its thread exits): loom's under the cfg, which runs them at a model
/// thread's end.
#[cfg(tickless_loom)]
pub(crate) use loom::thread_local;
#[cfg(not(tickless_loom))]
pub(crate) use std::thread_local;

/// The purgatory's references to its operations: loom's under the cfg, so that a model
/// sees every reference the key index, the timer's waker and the handles hold, and fails
/// on one used after the last was dropped, or never dropped.
#[cfg(tickless_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(tickless_loom))]
pub(crate) use std::sync::Arc;

/// Another reference to the value behind `ptr` (from `Arc::as_ptr` of a live `Arc`), for
/// a protocol that holds an `Arc`'s value by pointer while another reference keeps it.
///
/// Under loom it is first inspected (its count read): loom takes clones as independent
/// of drops (safe code cannot clone an `Arc` already dropped), so it would never try
/// this after the last drop; an inspection it orders against every drop, so a model
/// fails ("Arc is already released", or `from_raw` of an unknown `Arc`) if one can come
/// first. (The inspection also acquires what the drops released, as std's does not.)
///
/// # Safety
///
/// `ptr` points into an `Arc` whose count the caller's protocol keeps above zero until
/// this returns.
#[allow(unsafe_code)]
pub(crate) unsafe fn arc_from_ptr<T>(ptr: *const T) -> Arc<T> {
    #[cfg(tickless_loom)]
    {
        // SAFETY: the caller's: `ptr` is into an `Arc` still alive; not dropped here.
        let arc = std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(ptr) });
        Arc::strong_count(&arc);
    }
    // SAFETY: the caller's: `ptr` is into an `Arc` still alive, which the increment
    // keeps alive for the one `from_raw` takes over.
    unsafe {
        Arc::increment_strong_count(ptr);
        Arc::from_raw(ptr)
    }
}

/// What a waker made by [`waker`] does when woken, for a value behind loom's `Arc` (std's
/// `Wake` takes only std's).
#[cfg(tickless_loom)]
pub(crate) trait Wake: Send + Sync + 'static {
    fn wake_by_ref(this: &Arc<Self>);
}

/// A waker that holds `arc`: std's `Waker::from`.
#[cfg(not(tickless_loom))]
pub(crate) fn waker<W: std::task::Wake + Send + Sync + 'static>(arc: Arc<W>) -> std::task::Waker {
    std::task::Waker::from(arc)
}

/// A waker that holds `arc`, one of loom's: as std's `Waker::from` makes one, its data
/// pointer the value's address (what `Waker::data` tells an entry by), each clone a
/// reference loom counts.
#[cfg(tickless_loom)]
pub(crate) fn waker<W: Wake>(arc: Arc<W>) -> std::task::Waker {
    use std::marker::PhantomData;
    use std::mem::ManuallyDrop;
    use std::task::{RawWaker, RawWakerVTable, Waker};

    struct Vtable<W>(PhantomData<W>);

    impl<W: Wake> Vtable<W> {
        const VTABLE: RawWakerVTable =
            RawWakerVTable::new(Self::clone, Self::wake, Self::wake_by_ref, Self::drop);

        fn raw(data: *const W) -> RawWaker {
            RawWaker::new(data.cast(), &Self::VTABLE)
        }

        // SAFETY (all four): `data` is what `Arc::into_raw` gave for this waker or one of
        // its clones, each owning one strong reference, not yet given back.
        #[allow(unsafe_code)]
        unsafe fn clone(data: *const ()) -> RawWaker {
            // SAFETY: see above: the reference this waker owns keeps it alive.
            unsafe { Arc::increment_strong_count(data.cast::<W>()) };
            Self::raw(data.cast())
        }

        #[allow(unsafe_code)]
        unsafe fn wake(data: *const ()) {
            // SAFETY: see above: this takes over the waker's reference, dropped after.
            let arc = unsafe { Arc::from_raw(data.cast::<W>()) };
            W::wake_by_ref(&arc);
        }

        #[allow(unsafe_code)]
        unsafe fn wake_by_ref(data: *const ()) {
            // SAFETY: see above: borrowed, the waker keeps its reference.
            let arc = ManuallyDrop::new(unsafe { Arc::from_raw(data.cast::<W>()) });
            W::wake_by_ref(&arc);
        }

        #[allow(unsafe_code)]
        unsafe fn drop(data: *const ()) {
            // SAFETY: see above: the waker's reference, given back once.
            drop(unsafe { Arc::from_raw(data.cast::<W>()) });
        }
    }

    // SAFETY: the vtable's functions keep the contract above: each waker owns one
    // reference, its clone takes another, wake and drop give it back.
    #[allow(unsafe_code)]
    unsafe {
        Waker::from_raw(Vtable::<W>::raw(Arc::into_raw(arc)))
    }
}

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

/// Where a thread waits for another to make something true. Outside loom it spins
/// (std's `yield_now` between looks) and is zero-sized, `notify` doing nothing.
///
/// Under loom a waiting thread blocks on a condvar instead, until a `notify`: loom
/// explores two threads yielding at once without end (a switch away from a thread that
/// yielded is free, so preemption bounds do not bound it), while a blocked thread leaves
/// it only the spin's one way out, another thread's change. So every change that can make
/// what is waited for true must be followed by [`notify`](Self::notify): a missing one
/// shows as loom's deadlock, never as a pass.
pub(crate) struct Spin {
    #[cfg(tickless_loom)]
    changed: (Mutex<()>, Condvar),
}

impl Spin {
    pub(crate) fn new() -> Self {
        Spin {
            #[cfg(tickless_loom)]
            changed: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Returns once `done` is true.
    pub(crate) fn until(&self, done: impl Fn() -> bool) {
        #[cfg(not(tickless_loom))]
        while !done() {
            std::thread::yield_now();
        }
        #[cfg(tickless_loom)]
        {
            let mut changed = lock(&self.changed.0);
            while !done() {
                changed = self
                    .changed
                    .1
                    .wait(changed)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
    }

    /// After a change that may make what a thread waits for in [`until`](Self::until)
    /// true.
    pub(crate) fn notify(&self) {
        #[cfg(tickless_loom)]
        {
            let _changed = lock(&self.changed.0);
            self.changed.1.notify_all();
        }
    }
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
