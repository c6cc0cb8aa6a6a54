//! A purgatory of delayed operations: Kafka's `DelayedOperationPurgatory`, async,
//! exactly once, with no purge.
//!
//! An operation waits under several keys for its condition, or for its deadline. An
//! event on a key ([`Purgatory::check`]) runs the conditions of the operations watching
//! it; an operation ends exactly once: completed (its condition held, or a force), expired
//! (its deadline came first, on the timer's driver: no reaper thread), or cancelled
//! (withdrawn). [`ThresholdPurgatory`] is the common special case done in O(completed):
//! wait until a key's value reaches a threshold.
//!
//! | Kafka | tickless |
//! | --- | --- |
//! | `tryCompleteElseWatch(op, keys)` | [`Purgatory::watch`] (a future) or [`Purgatory::watch_operation`] (a [`DelayedOperation`]) |
//! | `checkAndComplete(key)` | [`Purgatory::check`] |
//! | `forceComplete()` | [`OperationHandle::force_complete`] (a [`Watch`] derefs to its handle) |
//! | `onComplete`, `onExpiration` | [`DelayedOperation::on_complete`], [`DelayedOperation::on_expiration`] |
//! | `cancelForKey(key)` | [`Purgatory::cancel_for_key`] |
//! | `watched()`, `numDelayed()` | [`Purgatory::watched`], [`Purgatory::delayed`] (exact, O(1)) |
//! | the expiration reaper thread | the timer's driver |
//! | the purge of completed operations, every 1,000 | none needed: an operation that ends leaves every key at once |
//! | raft's `ThresholdPurgatory` | [`ThresholdPurgatory`] |
//!
//! # How
//!
//! Each operation has one atomic state (see `op.rs`) that decides how it ends, and makes sure
//! its condition never runs on two threads at once: a check that finds it running asks
//! the runner to run it again (and does not wait for it), so no completion is lost. The runner
//! does so once: a check that finds it running again waits for that run to end and runs
//! the condition itself, so no thread is kept running it for others' checks without end
//! (a watch never returned while another thread checked its keys in a loop). No lock of the
//! purgatory is held while user code runs (conditions, `on_complete`, wakers, and drops of
//! operations and their values); keys' `Hash` and `Eq` run under the lock of the key's
//! shard, as in any map.
//!
//! Keys are spread over shards by their hash, each shard a map from key to the operations
//! watching it, behind its own lock, so checks of different keys on different threads do
//! not contend. An operation records where it is linked under each key; whoever ends it
//! unlinks it from all of them at once (O(keys)) and cancels its expiry, so a completed
//! operation keeps no memory anywhere: nothing waits for a purge.
//!
//! A check claims the operations watching its key under the shard's lock (one
//! compare-and-swap each, no user code), then runs their conditions with the lock
//! released. Since only a claimed operation's runner can end it, and only whoever ends an
//! operation unlinks it, a claimed operation stays alive in the index until it has run:
//! a check takes no reference count per operation it claims (only one it must wait for
//! is held by a reference), and a run costs two atomic operations (the claim and the
//! release). For that to hold, the thread that watches an operation
//! is its runner from before it links the first key until its second try, so nothing
//! ends (and unlinks) an operation while it is still being linked. That is the cost that
//! grows with the rate squared, since a check runs every condition watching its key; it
//! is the purgatory's only `unsafe`, besides the condition's cell in `op.rs`. loom checks
//! the state's exclusion and its cancel and force races (`loom_tests.rs`, on `Op`), and
//! the index itself in its smallest configuration (one key, one operation, the real
//! `Purgatory` on a manual timer): a watch racing a check (and a `cancel_for_key`), then
//! dropped while the check may still be in it, ends the operation once and frees it after
//! the check is done with it (the operations' `Arc`s are loom's there), a check racing a
//! watch is not lost, a drop racing two checks of a key the operation watches twice ends
//! it once with the watching thread running the condition at most three times,
//! and two forces landing while a check runs the condition complete it once, with one
//! of their values (under loom a force, or a check, waits for the runner by blocking, not
//! spinning: see `sync::Spin`). Larger configurations are checked by races on threads
//! (`tests/purgatory_races.rs`, `tests/purgatory.rs`).
//!
//! An operation is its own timer callback (the timer wakes it when its deadline comes),
//! so watching one allocates the operation, its condition and its keys, and nothing on
//! the timer's side. A threshold wait is one allocation.
//!
//! Keys' `Hash` and `Eq` must not panic (as in any map). A panic that escapes a check
//! (from a key's `Hash`, or a value's `Drop`) is raised again only after every operation
//! the check claimed has run.

mod handle;
mod inner;
mod op;
mod threshold;

#[cfg(all(test, tickless_loom))]
mod loom_tests;

pub use handle::{OperationHandle, Watch};
pub use op::Outcome;
pub use threshold::{ThresholdHandle, ThresholdPurgatory, ThresholdWait};

use crate::error::Error;
use crate::sync::{arc_from_ptr, lock, Arc, Mutex};
use crate::Timer;
use inner::{cancel, Entry, Inner};
use op::{Claim, Condition, Ended};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
// The purgatory itself is std's `Arc` (its operations hold it weakly); its operations are
// the facade's (`crate::sync::Arc`), loom's under the cfg, so that the models see them.
use std::sync::Arc as Shared;
use std::time::Duration;
use tokio::time::Instant;

/// What a purgatory's keys must be: hashable, comparable, and shareable between the
/// threads that watch, check and expire (an operation keeps its keys, to leave them all
/// when it ends). Implemented for every type that is.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickless::purgatory::Purgatory;
///
/// #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// struct Partition {
///     topic: String,
///     index: u32,
/// }
///
/// let timer = tickless::Timer::builder().manual_clock().build()?;
/// let produce: Purgatory<Partition, ()> = Purgatory::with_timer(timer);
/// let orders_0 = Partition { topic: "orders".into(), index: 0 };
/// let _request = produce.watch([orders_0.clone()], Duration::from_secs(1), || None);
/// assert_eq!(produce.watched(), 1);
/// assert_eq!(produce.check(&orders_0), 0, "its condition does not hold yet");
/// # Ok::<(), tickless::BuildError>(())
/// ```
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Key for K {}

/// Operations waiting under keys for a condition or a deadline (Kafka's
/// `DelayedOperationPurgatory`); see the [module docs](self).
///
/// Cheap to clone: every clone is the same purgatory.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tickless::purgatory::{Outcome, Purgatory};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let purgatory = Purgatory::new();
/// let replicated = Arc::new(AtomicU64::new(0));
/// // A produce request waits until 100 bytes are replicated on partition "p0", or 200 ms.
/// let seen = replicated.clone();
/// let request = purgatory.watch(["p0"], Duration::from_millis(200), move || {
///     let bytes = seen.load(Ordering::SeqCst);
///     (bytes >= 100).then_some(bytes)
/// });
/// replicated.store(150, Ordering::SeqCst);
/// assert_eq!(purgatory.check(&"p0"), 1);
/// assert_eq!(request.await, Outcome::Completed(150));
/// assert_eq!((purgatory.watched(), purgatory.delayed()), (0, 0));
/// # }
/// ```
pub struct Purgatory<K, T> {
    inner: Shared<Inner<K, T>>,
}

impl<K, T> Clone for Purgatory<K, T> {
    fn clone(&self) -> Self {
        Purgatory {
            inner: self.inner.clone(),
        }
    }
}

impl<K, T> fmt::Debug for Purgatory<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purgatory")
            .field("watched", &self.inner.watched.load(Ordering::Relaxed))
            .field("delayed", &self.inner.delayed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<K, T> Default for Purgatory<K, T>
where
    K: Key,
    T: Send + 'static,
{
    fn default() -> Self {
        Purgatory::new()
    }
}

/// A condition given as a closure, whose outcome goes to the operation's future.
struct Closure<F>(F);

impl<T, F: FnMut() -> Option<T> + Send> Condition<T> for Closure<F> {
    fn check(&mut self) -> Option<T> {
        (self.0)()
    }

    fn finish(self: Box<Self>, outcome: Outcome<T>) -> Option<Outcome<T>> {
        Some(outcome)
    }
}

/// Kafka's `DelayedOperation`: an operation with its own condition and completion hooks,
/// watched with [`Purgatory::watch_operation`].
///
/// Exactly one of [`on_complete`](Self::on_complete) and
/// [`on_expiration`](Self::on_expiration) runs, unless the operation is cancelled (then
/// neither). They run on the thread that ended the operation: a checker's, or the timer's
/// driver for an expiry, with no lock held. [`try_complete`](Self::try_complete) is never
/// run on two threads at once.
///
/// # Examples
///
/// A consumer's fetch that answers once enough bytes are in the log, or with nothing when
/// its wait is over:
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::{mpsc, Arc};
/// use std::time::Duration;
/// use tickless::purgatory::{DelayedOperation, Purgatory};
///
/// struct Fetch {
///     log_end: Arc<AtomicU64>,
///     offset: u64,
///     min_bytes: u64,
///     respond: mpsc::Sender<Option<u64>>,
/// }
///
/// impl DelayedOperation for Fetch {
///     type Output = u64;
///
///     fn try_complete(&mut self) -> Option<u64> {
///         let available = self.log_end.load(Ordering::SeqCst) - self.offset;
///         (available >= self.min_bytes).then_some(available)
///     }
///
///     fn on_complete(&mut self, bytes: u64) {
///         let _ = self.respond.send(Some(bytes));
///     }
///
///     fn on_expiration(&mut self) {
///         let _ = self.respond.send(None);
///     }
/// }
///
/// let timer = tickless::Timer::builder().manual_clock().build()?;
/// let fetches = Purgatory::with_timer(timer.clone());
/// let log_end = Arc::new(AtomicU64::new(0));
/// let (respond, responses) = mpsc::channel();
/// let fetch = |offset| Fetch {
///     log_end: log_end.clone(),
///     offset,
///     min_bytes: 100,
///     respond: respond.clone(),
/// };
///
/// fetches.watch_operation(["orders-0"], Duration::from_millis(500), fetch(0));
/// log_end.store(120, Ordering::SeqCst); // a produce request appended 120 bytes
/// assert_eq!(fetches.check(&"orders-0"), 1);
/// assert_eq!(responses.try_recv(), Ok(Some(120)));
///
/// fetches.watch_operation(["orders-0"], Duration::from_millis(500), fetch(120));
/// timer.advance(Duration::from_millis(500));
/// assert_eq!(responses.try_recv(), Ok(None), "expired");
/// # Ok::<(), tickless::BuildError>(())
/// ```
pub trait DelayedOperation: Send + 'static {
    /// What the operation completes with.
    type Output: Send + 'static;

    /// Whether the operation can complete now: `Some` with its output if so.
    fn try_complete(&mut self) -> Option<Self::Output>;

    /// The operation completed (its condition held, or it was forced).
    fn on_complete(&mut self, output: Self::Output);

    /// The operation's deadline came before it completed.
    fn on_expiration(&mut self) {}
}

struct Delayed<D>(D);

impl<D: DelayedOperation> Condition<D::Output> for Delayed<D> {
    fn check(&mut self) -> Option<D::Output> {
        self.0.try_complete()
    }

    fn finish(mut self: Box<Self>, outcome: Outcome<D::Output>) -> Option<Outcome<D::Output>> {
        match outcome {
            Outcome::Completed(output) => self.0.on_complete(output),
            Outcome::Expired => self.0.on_expiration(),
            Outcome::Cancelled => {}
        }
        None
    }
}

impl<K, T> Purgatory<K, T>
where
    K: Key,
    T: Send + 'static,
{
    /// An empty purgatory whose deadlines are kept by the [current timer](Timer::current).
    pub fn new() -> Self {
        Purgatory::with_timer(Timer::current())
    }

    /// An empty purgatory whose deadlines are kept by `timer`: its clock, its driver.
    pub fn with_timer(timer: Timer) -> Self {
        let shards = Timer::default_shards();
        Purgatory {
            inner: Shared::new(Inner {
                timer,
                hasher: RandomState::new(),
                shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
                watched: AtomicUsize::new(0),
                delayed: AtomicUsize::new(0),
            }),
        }
    }

    /// Watches an operation under `keys` until `condition` holds when checked, or
    /// `timeout` passes. Kafka's `tryCompleteElseWatch`: the condition is tried first
    /// (completing at once, without watching, if it holds), then the operation is
    /// watched under every key, then the condition is tried once more, so an event
    /// between the first try and the watch is not missed.
    ///
    /// The returned future resolves to the [`Outcome`]. Dropping it withdraws the
    /// operation from every key and from the timer.
    ///
    /// # Panics
    ///
    /// Where [`try_watch`](Self::try_watch) returns an error: each deadline is a
    /// callback on the timer, which may have a [`max_pending`](crate::Builder::max_pending)
    /// limit.
    pub fn watch<I, F>(&self, keys: I, timeout: Duration, condition: F) -> Watch<K, T>
    where
        I: IntoIterator<Item = K>,
        F: FnMut() -> Option<T> + Send + 'static,
    {
        self.try_watch(keys, timeout, condition)
            .unwrap_or_else(|error| could_not_watch(&error))
    }

    /// [`watch`](Self::watch), or an error if the purgatory's timer cannot take the
    /// operation's deadline: it is at its [`max_pending`](crate::Builder::max_pending)
    /// limit, or shut down. Nothing is watched then (the condition has been tried once,
    /// and is dropped). A condition that holds at once needs no deadline: `Ok` even then.
    pub fn try_watch<I, F>(
        &self,
        keys: I,
        timeout: Duration,
        condition: F,
    ) -> Result<Watch<K, T>, Error>
    where
        I: IntoIterator<Item = K>,
        F: FnMut() -> Option<T> + Send + 'static,
    {
        let deadline = self.inner.timer.deadline_after(timeout);
        self.try_watch_until(keys, deadline, condition)
    }

    /// [`watch`](Self::watch) with a deadline instead of a timeout.
    ///
    /// # Panics
    ///
    /// As [`watch`](Self::watch).
    pub fn watch_until<I, F>(&self, keys: I, deadline: Instant, condition: F) -> Watch<K, T>
    where
        I: IntoIterator<Item = K>,
        F: FnMut() -> Option<T> + Send + 'static,
    {
        self.try_watch_until(keys, deadline, condition)
            .unwrap_or_else(|error| could_not_watch(&error))
    }

    /// [`try_watch`](Self::try_watch) with a deadline instead of a timeout.
    pub fn try_watch_until<I, F>(
        &self,
        keys: I,
        deadline: Instant,
        condition: F,
    ) -> Result<Watch<K, T>, Error>
    where
        I: IntoIterator<Item = K>,
        F: FnMut() -> Option<T> + Send + 'static,
    {
        let handle = self.handle(keys, deadline, Box::new(Closure(condition)))?;
        Ok(Watch { handle })
    }

    /// Watches a [`DelayedOperation`] under `keys` until it completes or `timeout` passes,
    /// as [`watch`](Self::watch) does; its hooks are told how it ended. The handle may
    /// be dropped: the operation stays watched.
    ///
    /// # Panics
    ///
    /// As [`watch`](Self::watch).
    pub fn watch_operation<I, D>(
        &self,
        keys: I,
        timeout: Duration,
        operation: D,
    ) -> OperationHandle<K, T>
    where
        I: IntoIterator<Item = K>,
        D: DelayedOperation<Output = T>,
    {
        self.try_watch_operation(keys, timeout, operation)
            .unwrap_or_else(|error| could_not_watch(&error))
    }

    /// [`watch_operation`](Self::watch_operation), or an error as
    /// [`try_watch`](Self::try_watch) returns one (then neither hook runs, and the
    /// operation is dropped).
    pub fn try_watch_operation<I, D>(
        &self,
        keys: I,
        timeout: Duration,
        operation: D,
    ) -> Result<OperationHandle<K, T>, Error>
    where
        I: IntoIterator<Item = K>,
        D: DelayedOperation<Output = T>,
    {
        let deadline = self.inner.timer.deadline_after(timeout);
        self.handle(keys, deadline, Box::new(Delayed(operation)))
    }

    /// The one way in: watches `condition` (not generic, so compiled once per `K`, `T`).
    fn handle<I>(
        &self,
        keys: I,
        deadline: Instant,
        condition: Box<dyn Condition<T>>,
    ) -> Result<OperationHandle<K, T>, Error>
    where
        I: IntoIterator<Item = K>,
    {
        let keys: Box<[K]> = keys.into_iter().collect();
        let entry = self.inner.watch(keys, deadline, condition)?;
        Ok(OperationHandle {
            entry,
            inner: self.inner.clone(),
        })
    }

    /// Runs the condition of every operation watching `key`, on this thread (Kafka's
    /// `checkAndComplete`), and returns how many completed. A condition already running
    /// elsewhere runs once more there; if it is running there once more already, this
    /// waits for that run to end and runs it here (so that no thread is kept running a
    /// condition for other threads' checks without end). So do not call this from inside
    /// a condition whose operation watches `key`: it would wait for itself.
    #[allow(unsafe_code)]
    pub fn check(&self, key: &K) -> usize {
        // Claimed under the shard's lock (a claim is one compare-and-swap, no user code),
        // run after it is released. A claimed operation cannot end but by its runner
        // (expiry, cancel and force only flag it), and only whoever ends an operation
        // unlinks it, so it stays linked under `key`, kept alive by the index, until this
        // thread has run it: no reference count per operation, the cost a check pays for
        // every operation watching its key. One its runner is running again is not ours
        // yet, and may end and leave the index meanwhile: a reference keeps it.
        let mut busy: Vec<Arc<Entry<K, T>>> = Vec::new();
        let claimed: Vec<*const Entry<K, T>> = {
            let shard = lock(&self.inner.shards[self.inner.shard_of(key)]);
            shard.get(key).map_or_else(Vec::new, |slab| {
                let mut claimed = Vec::with_capacity(slab.len());
                for (_, entry) in slab {
                    match entry.op.claim() {
                        Claim::Runner => claimed.push(Arc::as_ptr(entry)),
                        // Once, if it watches `key` twice.
                        Claim::Wait if !busy.iter().any(|b| Arc::ptr_eq(b, entry)) => {
                            busy.push(entry.clone());
                        }
                        Claim::Wait | Claim::No => {}
                    }
                }
                claimed
            })
        };
        let mut completed = 0;
        // Every claimed operation is run even if something panics on the way (a value's
        // `Drop`, a key's `Hash` while unlinking): one left claimed would never run again.
        let mut panicked = None;
        let mut run_claimed = |entry: *const Entry<K, T>| {
            let run = catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: claimed and not yet run, so alive (the index holds it, or `busy`
                // does), and this thread is its runner.
                let ended = unsafe { (*entry).op.run() }?;
                // SAFETY: this thread ended it, so it is still linked (only its ender
                // unlinks it) and alive: a reference of our own, for the unlinking, which
                // drops the index's.
                let entry = unsafe { arc_from_ptr(entry) };
                self.inner.finish(&entry, ended);
                Some(ended)
            }));
            match run {
                Ok(ended) => completed += usize::from(ended == Some(Ended::Completed)),
                Err(payload) => {
                    panicked.get_or_insert(payload);
                }
            }
        };
        claimed.into_iter().for_each(&mut run_claimed);
        // Their runners will not run them again for this check: once that run ends, every
        // run starts after this check, so one more claim is all it owes.
        for entry in &busy {
            entry.op.await_again();
            if entry.op.claim() == Claim::Runner {
                run_claimed(Arc::as_ptr(entry));
            }
        }
        if let Some(payload) = panicked {
            resume_unwind(payload);
        }
        completed
    }

    /// Cancels every operation watching `key` (their outcome is `Cancelled`, and they
    /// leave all their keys); returns how many it cancelled.
    pub fn cancel_for_key(&self, key: &K) -> usize {
        self.inner
            .watching(key)
            .into_iter()
            .filter(|entry| cancel(&self.inner, entry))
            .count()
    }

    /// How many links of operations under keys there are: an operation watching three
    /// keys counts three. Exact, O(1).
    pub fn watched(&self) -> usize {
        self.inner.watched.load(Ordering::Acquire)
    }

    /// How many operations are watched and have not ended. Exact, O(1).
    pub fn delayed(&self) -> usize {
        self.inner.delayed.load(Ordering::Acquire)
    }
}

/// Panics with `error`, for the methods whose `try_` twin returns it.
#[cold]
#[track_caller]
fn could_not_watch(error: &Error) -> ! {
    panic!("tickless: a purgatory's deadline could not be scheduled on its timer: {error}")
}
