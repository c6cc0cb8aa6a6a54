//! Threshold waits: wait until a key's value reaches a threshold (Kafka raft's
//! `ThresholdPurgatory`; the `acks=all` case: "until the high watermark passes my
//! offset").
//!
//! See [`ThresholdPurgatory`].

use super::{Key, Outcome};
use crate::callback::Expiry;
use crate::error::Error;
use crate::sync::{lock, AtomicU8, Mutex, Ordering};
use crate::Timer;
use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

const WAITING: u8 = 0;
const DONE: u8 = 1;

/// A waiter as the key index holds it, whatever its outcome goes to.
type Listed<K> = Arc<Waiter<K, dyn Then>>;

/// A key's value and its waiters, by `(threshold, sequence)`.
struct KeyState<K> {
    value: u64,
    waiters: BTreeMap<(u64, u64), Listed<K>>,
}

impl<K> Default for KeyState<K> {
    fn default() -> Self {
        KeyState {
            value: 0,
            waiters: BTreeMap::new(),
        }
    }
}

/// Where a waiter's outcome goes: its future, or its callback.
trait Then: Send + Sync {
    /// Hands the outcome over (once), running no user code under a lock.
    fn deliver(&self, outcome: Outcome<u64>);

    /// Where a future finds the outcome: `None` for a callback.
    fn slot(&self) -> Option<&Mutex<Slot>> {
        None
    }
}

/// To a [`ThresholdWait`].
struct ToFuture(Mutex<Slot>);

struct Slot {
    /// Set with `outcome`, so the future sees both or neither.
    ended: bool,
    outcome: Option<Outcome<u64>>,
    waker: Option<Waker>,
}

impl Then for ToFuture {
    fn slot(&self) -> Option<&Mutex<Slot>> {
        Some(&self.0)
    }

    fn deliver(&self, outcome: Outcome<u64>) {
        let waker = {
            let mut slot = lock(&self.0);
            slot.ended = true;
            slot.outcome = Some(outcome);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
        }
    }
}

/// To a callback (`wait_then`).
struct ToCallback<F>(Mutex<Option<F>>);

impl<F: FnOnce(Outcome<u64>) + Send> Then for ToCallback<F> {
    fn deliver(&self, outcome: Outcome<u64>) {
        let callback = lock(&self.0).take();
        if let Some(callback) = callback {
            let _ = catch_unwind(AssertUnwindSafe(|| callback(outcome)));
        }
    }
}

/// One wait, in one allocation: its key and threshold, the state that decides how it
/// ends, its expiry, and where its outcome goes. It is its own timer callback: the
/// driver wakes it when its deadline comes.
struct Waiter<K, D: ?Sized> {
    /// The purgatory, for the expiry (weak: waits pending do not keep a dropped
    /// purgatory alive; they still expire).
    inner: Weak<Inner<K>>,
    key: K,
    order: (u64, u64),
    state: AtomicU8,
    expiry: Mutex<Option<Expiry>>,
    then: D,
}

impl<K, D: ?Sized> Waiter<K, D> {
    /// The data pointer of its expiry's waker.
    fn data(&self) -> *const () {
        (self as *const Self).cast()
    }

    fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }
}

impl<K, D> Wake for Waiter<K, D>
where
    K: Key,
    D: Then + 'static,
{
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    /// The deadline came.
    fn wake_by_ref(self: &Arc<Self>) {
        match self.inner.upgrade() {
            Some(inner) => {
                inner.end(&**self, Outcome::Expired, true);
            }
            // The purgatory is gone, and its keys with it: it only remains to end it.
            None => {
                let ended = self
                    .state
                    .compare_exchange(WAITING, DONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
                if ended {
                    self.then.deliver(Outcome::Expired);
                }
            }
        }
    }
}

/// One shard of the keys.
type Shard<K> = Mutex<HashMap<K, KeyState<K>>>;

struct Inner<K> {
    timer: Timer,
    hasher: RandomState,
    shards: Box<[Shard<K>]>,
    sequence: AtomicU64,
    waiting: AtomicUsize,
}

/// Waiters for a key's value to reach a threshold (Kafka raft's `ThresholdPurgatory`; the
/// `acks=all` case: "until the high watermark passes my offset").
///
/// Each key has a value, which only rises, and its waiters ordered by threshold. Raising
/// the value takes exactly the waiters it satisfies off the front, in O(log n) each: no
/// condition is run for the others. Each wait ends exactly once (reached, expired or
/// cancelled) by one compare-and-swap; it is one allocation, and its own timer callback
/// for its deadline.
///
/// Cheap to clone: every clone is the same purgatory.
///
/// ```
/// use std::time::Duration;
/// use tickless::purgatory::{Outcome, ThresholdPurgatory};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let high_watermark = ThresholdPurgatory::new();
/// // A produce request waits until partition 0's high watermark passes offset 42.
/// let acked = high_watermark.wait(0_u32, 43, Duration::from_millis(200));
/// assert_eq!(high_watermark.advance(&0, 40), 0);
/// assert_eq!(high_watermark.advance(&0, 45), 1);
/// assert_eq!(acked.await, Outcome::Completed(45));
/// # }
/// ```
pub struct ThresholdPurgatory<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for ThresholdPurgatory<K> {
    fn clone(&self) -> Self {
        ThresholdPurgatory {
            inner: self.inner.clone(),
        }
    }
}

impl<K> fmt::Debug for ThresholdPurgatory<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThresholdPurgatory")
            .field("waiting", &self.inner.waiting.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<K> Default for ThresholdPurgatory<K>
where
    K: Key,
{
    fn default() -> Self {
        ThresholdPurgatory::new()
    }
}

impl<K> ThresholdPurgatory<K>
where
    K: Key,
{
    /// An empty purgatory whose deadlines are kept by the [current timer](Timer::current).
    pub fn new() -> Self {
        ThresholdPurgatory::with_timer(Timer::current())
    }

    /// An empty purgatory whose deadlines are kept by `timer`.
    pub fn with_timer(timer: Timer) -> Self {
        let shards = Timer::default_shards();
        ThresholdPurgatory {
            inner: Arc::new(Inner {
                timer,
                hasher: RandomState::new(),
                shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
                sequence: AtomicU64::new(0),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// Waits until `key`'s value reaches `threshold`, or `timeout` passes. Resolves to
    /// `Completed(value)`, with the value that reached it, at once if it already has.
    /// Dropping the future withdraws the wait.
    ///
    /// # Panics
    ///
    /// Where [`try_wait`](Self::try_wait) returns an error: each deadline is a callback
    /// on the timer, which may have a [`max_pending`](crate::Builder::max_pending) limit.
    pub fn wait(&self, key: K, threshold: u64, timeout: Duration) -> ThresholdWait<K> {
        self.try_wait(key, threshold, timeout)
            .unwrap_or_else(|error| could_not_wait(&error))
    }

    /// [`wait`](Self::wait), or an error if the purgatory's timer cannot take the wait's
    /// deadline: it is at its [`max_pending`](crate::Builder::max_pending) limit, or shut
    /// down. A threshold already reached needs no deadline: `Ok` even then.
    pub fn try_wait(
        &self,
        key: K,
        threshold: u64,
        timeout: Duration,
    ) -> Result<ThresholdWait<K>, Error> {
        let slot = ToFuture(Mutex::new(Slot {
            ended: false,
            outcome: None,
            waker: None,
        }));
        let waiter = self.inner.wait(key, threshold, timeout, slot)?;
        Ok(ThresholdWait {
            handle: ThresholdHandle {
                waiter,
                inner: self.inner.clone(),
            },
        })
    }

    /// As [`wait`](Self::wait), but `then` is called with the outcome (Kafka's callback
    /// style, with no future to poll): on the thread that ends the wait, with no lock
    /// held. Dropping the handle leaves the wait in place.
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_then<F>(
        &self,
        key: K,
        threshold: u64,
        timeout: Duration,
        then: F,
    ) -> ThresholdHandle<K>
    where
        F: FnOnce(Outcome<u64>) + Send + 'static,
    {
        self.try_wait_then(key, threshold, timeout, then)
            .unwrap_or_else(|error| could_not_wait(&error))
    }

    /// [`wait_then`](Self::wait_then), or an error as [`try_wait`](Self::try_wait)
    /// returns one (then `then` is dropped uncalled).
    pub fn try_wait_then<F>(
        &self,
        key: K,
        threshold: u64,
        timeout: Duration,
        then: F,
    ) -> Result<ThresholdHandle<K>, Error>
    where
        F: FnOnce(Outcome<u64>) + Send + 'static,
    {
        let callback = ToCallback(Mutex::new(Some(then)));
        Ok(ThresholdHandle {
            waiter: self.inner.wait(key, threshold, timeout, callback)?,
            inner: self.inner.clone(),
        })
    }

    /// Raises `key`'s value to `value` (a lower one changes nothing) and completes exactly
    /// the waiters it now satisfies, each with `value`; returns how many. O(completed):
    /// the others are not looked at.
    pub fn advance(&self, key: &K, value: u64) -> usize {
        let reached: Vec<Listed<K>> = {
            let mut shard = lock(&self.inner.shards[self.inner.shard_of(key)]);
            let state = match shard.get_mut(key) {
                Some(state) => state,
                None => shard.entry(key.clone()).or_default(),
            };
            if value <= state.value {
                return 0;
            }
            state.value = value;
            let mut reached = Vec::new();
            while let Some(entry) = state.waiters.first_entry() {
                if entry.key().0 > value {
                    break;
                }
                reached.push(entry.remove());
            }
            reached
        };
        reached
            .into_iter()
            .filter(|waiter| self.inner.end(waiter, Outcome::Completed(value), false))
            .count()
    }

    /// `key`'s value now (0 until advanced).
    pub fn value(&self, key: &K) -> u64 {
        lock(&self.inner.shards[self.inner.shard_of(key)])
            .get(key)
            .map_or(0, |state| state.value)
    }

    /// How many waits have not ended. Exact, O(1).
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Acquire)
    }
}

impl<K> Inner<K>
where
    K: Key,
{
    fn shard_of(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    fn wait<D: Then + 'static>(
        self: &Arc<Self>,
        key: K,
        threshold: u64,
        timeout: Duration,
        then: D,
    ) -> Result<Listed<K>, Error> {
        let order = (threshold, self.sequence.fetch_add(1, Ordering::Relaxed));
        let waiter = Arc::new(Waiter {
            inner: Arc::downgrade(self),
            key,
            order,
            state: AtomicU8::new(WAITING),
            expiry: Mutex::new(None),
            then,
        });
        let reached = {
            let mut shard = lock(&self.shards[self.shard_of(&waiter.key)]);
            let state = shard.entry(waiter.key.clone()).or_default();
            if state.value >= threshold {
                Some(state.value)
            } else {
                // Counted before it is listed (an advance on another thread may end it
                // as soon as it is), so that `waiting` never counts an end before its
                // start: never below zero, never above what was made.
                self.waiting.fetch_add(1, Ordering::AcqRel);
                state.waiters.insert(order, waiter.clone());
                None
            }
        };
        if let Some(value) = reached {
            // Already there: ended at once, never watched.
            waiter.state.store(DONE, Ordering::Release);
            waiter.then.deliver(Outcome::Completed(value));
            return Ok(waiter);
        }
        let deadline = self.timer.deadline_after(timeout);
        let expiry = match self.timer.expire_at(deadline, Waker::from(waiter.clone())) {
            Ok(expiry) => expiry,
            Err(error) => {
                // Never handed out: withdrawn as if it had not been made (its `then` is
                // dropped uncalled).
                let listed = {
                    let mut shard = lock(&self.shards[self.shard_of(&waiter.key)]);
                    shard
                        .get_mut(&waiter.key)
                        .and_then(|state| state.waiters.remove(&waiter.order))
                };
                if waiter
                    .state
                    .compare_exchange(WAITING, DONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    drop(listed);
                    return Err(error);
                }
                // An advance reached it meanwhile: it has its outcome, and needs no
                // deadline.
                drop(listed);
                return Ok(waiter);
            }
        };
        *lock(&waiter.expiry) = Some(expiry);
        if waiter.is_done() {
            // Reached before its expiry was stored: whoever ended it found none to cancel.
            if let Some(expiry) = lock(&waiter.expiry).take() {
                self.timer.cancel_expiry(expiry, waiter.data());
            }
        }
        Ok(waiter)
    }

    /// Ends `waiter` with `outcome` if it has not ended: `true` if this call did. `listed`
    /// says it may still be in its key's waiters (an advance takes it out first).
    fn end(&self, waiter: &Waiter<K, dyn Then>, outcome: Outcome<u64>, listed: bool) -> bool {
        let ended = waiter
            .state
            .compare_exchange(WAITING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !ended {
            return false;
        }
        if listed {
            let removed = {
                let mut shard = lock(&self.shards[self.shard_of(&waiter.key)]);
                shard
                    .get_mut(&waiter.key)
                    .and_then(|state| state.waiters.remove(&waiter.order))
            };
            drop(removed);
        }
        let expiry = lock(&waiter.expiry).take();
        // An expiry that fired has left the wheel already.
        if let (Some(expiry), false) = (expiry, outcome.is_expired()) {
            self.timer.cancel_expiry(expiry, waiter.data());
        }
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        waiter.then.deliver(outcome);
        true
    }
}

/// Panics with `error`, for the methods whose `try_` twin returns it.
#[cold]
fn could_not_wait(error: &Error) -> ! {
    panic!("tickless: a threshold wait's deadline could not be scheduled on its timer: {error}")
}

/// A handle to a threshold wait: cancel it, ask whether it ended. Made by
/// [`ThresholdPurgatory::wait_then`]; dropping it leaves the wait in place. A
/// [`ThresholdWait`] (the future of [`ThresholdPurgatory::wait`]) derefs to one.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use tickless::purgatory::{Outcome, ThresholdPurgatory};
///
/// let timer = tickless::Timer::builder().manual_clock().build()?;
/// let committed = ThresholdPurgatory::with_timer(timer);
/// let (tx, rx) = mpsc::channel();
/// let respond = move |outcome| drop(tx.send(outcome));
///
/// let commit = committed.wait_then("log", 10, Duration::from_secs(1), respond.clone());
/// committed.advance(&"log", 12);
/// assert!(commit.is_done());
/// assert_eq!(rx.try_recv(), Ok(Outcome::Completed(12)));
///
/// let later = committed.wait_then("log", 20, Duration::from_secs(1), respond);
/// assert!(later.cancel());
/// assert_eq!(rx.try_recv(), Ok(Outcome::Cancelled));
/// # Ok::<(), tickless::BuildError>(())
/// ```
pub struct ThresholdHandle<K: Key> {
    waiter: Listed<K>,
    inner: Arc<Inner<K>>,
}

impl<K: Key> ThresholdHandle<K> {
    /// Withdraws the wait: `true` if this ended it (its outcome is then `Cancelled`).
    pub fn cancel(&self) -> bool {
        self.inner.end(&*self.waiter, Outcome::Cancelled, true)
    }

    /// Whether the wait has ended.
    pub fn is_done(&self) -> bool {
        self.waiter.is_done()
    }
}

impl<K: Key> fmt::Debug for ThresholdHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThresholdHandle")
            .field("threshold", &self.waiter.order.0)
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

/// A threshold wait's future: resolves to `Completed(value)`, `Expired` or `Cancelled`.
/// Made by [`ThresholdPurgatory::wait`]; dropping it before it resolves withdraws the wait.
/// It derefs to its [`ThresholdHandle`], for [`cancel`](ThresholdHandle::cancel) and
/// [`is_done`](ThresholdHandle::is_done).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickless::purgatory::{Outcome, ThresholdPurgatory};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let high_watermark = ThresholdPurgatory::new();
/// high_watermark.advance(&"orders-0", 90);
/// let acked = high_watermark.wait("orders-0", 100, Duration::from_millis(50));
/// assert_eq!(high_watermark.waiting(), 1);
/// // No replica catches up within 50 ms:
/// assert_eq!(acked.await, Outcome::Expired);
/// assert_eq!(high_watermark.waiting(), 0);
/// assert_eq!(high_watermark.value(&"orders-0"), 90);
/// # }
/// ```
#[must_use = "dropping it withdraws the wait"]
pub struct ThresholdWait<K: Key> {
    handle: ThresholdHandle<K>,
}

impl<K: Key> std::ops::Deref for ThresholdWait<K> {
    type Target = ThresholdHandle<K>;

    fn deref(&self) -> &ThresholdHandle<K> {
        &self.handle
    }
}

impl<K: Key> Future for ThresholdWait<K> {
    type Output = Outcome<u64>;

    /// # Panics
    ///
    /// If polled again after it resolved.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<u64>> {
        let mut slot = lock(self.handle.waiter.then.slot().expect("a future's wait"));
        if slot.ended {
            let outcome = slot.outcome.take();
            return Poll::Ready(outcome.expect("a threshold wait polled after it resolved"));
        }
        let old = if slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            None
        } else {
            slot.waker.replace(cx.waker().clone())
        };
        drop(slot);
        drop(old);
        Poll::Pending
    }
}

impl<K: Key> Drop for ThresholdWait<K> {
    fn drop(&mut self) {
        if !self.is_done() {
            self.cancel();
        }
    }
}

impl<K: Key> fmt::Debug for ThresholdWait<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThresholdWait")
            .field("threshold", &self.waiter.order.0)
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}
