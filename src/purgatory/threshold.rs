//! Threshold waits: wait until a key's value reaches a threshold (Kafka raft's
//! `ThresholdPurgatory`; the `acks=all` case: "until the high watermark passes my
//! offset").
//!
//! Each key has a value, which only rises, and its waiters ordered by threshold. Raising
//! the value takes exactly the waiters it satisfies off the front, in O(log n) each: no
//! condition is run for the others. Each waiter ends exactly once (reached, expired or
//! cancelled) by one compare-and-swap, and its expiry is a callback on the timer.

use super::Outcome;
use crate::driver::clock::deadline_after;
use crate::driver::sync::{lock, AtomicU8, Mutex, Ordering};
use crate::{Scheduled, Timer};
use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const WAITING: u8 = 0;
const DONE: u8 = 1;

/// A key's value and its waiters, by `(threshold, sequence)`.
struct Key<K> {
    value: u64,
    waiters: BTreeMap<(u64, u64), Arc<Waiter<K>>>,
}

impl<K> Default for Key<K> {
    fn default() -> Self {
        Key {
            value: 0,
            waiters: BTreeMap::new(),
        }
    }
}

/// Where a waiter's outcome goes: its future, or its callback.
enum Then {
    Future {
        outcome: Option<Outcome<u64>>,
        waker: Option<Waker>,
        ended: bool,
    },
    Callback(Option<Box<dyn FnOnce(Outcome<u64>) + Send>>),
}

struct Waiter<K> {
    key: K,
    order: (u64, u64),
    state: AtomicU8,
    then: Mutex<Then>,
    expiry: Mutex<Option<Scheduled>>,
}

/// One shard of the keys.
type Shard<K> = Mutex<HashMap<K, Key<K>>>;

struct Inner<K> {
    timer: Timer,
    hasher: RandomState,
    shards: Box<[Shard<K>]>,
    sequence: AtomicU64,
    waiting: AtomicUsize,
}

/// Waiters for a key's value to reach a threshold; see the [module docs](self).
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
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        ThresholdPurgatory::new()
    }
}

impl<K> ThresholdPurgatory<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// An empty purgatory whose deadlines are kept by the [current timer](Timer::current).
    pub fn new() -> Self {
        ThresholdPurgatory::with_timer(Timer::current())
    }

    /// An empty purgatory whose deadlines are kept by `timer`.
    pub fn with_timer(timer: Timer) -> Self {
        let shards = crate::timer::default_shards();
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
    /// If the purgatory's timer has a [`max_pending`](crate::Builder::max_pending) limit
    /// and is at it: each deadline is a callback on the timer.
    pub fn wait(&self, key: K, threshold: u64, timeout: Duration) -> ThresholdWait<K> {
        let then = Then::Future {
            outcome: None,
            waker: None,
            ended: false,
        };
        ThresholdWait {
            waiter: self.inner.wait(key, threshold, timeout, then),
            inner: self.inner.clone(),
        }
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
        let then = Then::Callback(Some(Box::new(then)));
        ThresholdHandle {
            waiter: self.inner.wait(key, threshold, timeout, then),
            inner: self.inner.clone(),
        }
    }

    /// Raises `key`'s value to `value` (a lower one changes nothing) and completes exactly
    /// the waiters it now satisfies, each with `value`; returns how many. O(completed):
    /// the others are not looked at.
    pub fn advance(&self, key: &K, value: u64) -> usize {
        let reached: Vec<Arc<Waiter<K>>> = {
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
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn shard_of(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    fn wait(
        self: &Arc<Self>,
        key: K,
        threshold: u64,
        timeout: Duration,
        then: Then,
    ) -> Arc<Waiter<K>> {
        let order = (threshold, self.sequence.fetch_add(1, Ordering::Relaxed));
        let waiter = Arc::new(Waiter {
            key,
            order,
            state: AtomicU8::new(WAITING),
            then: Mutex::new(then),
            expiry: Mutex::new(None),
        });
        let reached = {
            let mut shard = lock(&self.shards[self.shard_of(&waiter.key)]);
            let state = shard.entry(waiter.key.clone()).or_default();
            if state.value >= threshold {
                Some(state.value)
            } else {
                state.waiters.insert(order, waiter.clone());
                None
            }
        };
        if let Some(value) = reached {
            // Already there: ended at once, never watched.
            waiter.state.store(DONE, Ordering::Release);
            deliver(&waiter, Outcome::Completed(value));
            return waiter;
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let deadline = deadline_after(self.timer.now(), timeout);
        let expiry = {
            let (inner, expiring) = (self.clone(), waiter.clone());
            self.timer.schedule_at(deadline, move || {
                inner.end(&expiring, Outcome::Expired, true);
            })
        };
        let expiry = expiry.unwrap_or_else(|error| {
            panic!("tickless: a threshold wait's deadline could not be scheduled on its timer: {error}")
        });
        *lock(&waiter.expiry) = Some(expiry);
        if waiter.state.load(Ordering::Acquire) == DONE {
            // Reached before its expiry was stored: whoever ended it found none to cancel.
            if let Some(expiry) = lock(&waiter.expiry).take() {
                expiry.cancel();
            }
        }
        waiter
    }

    /// Ends `waiter` with `outcome` if it has not ended: `true` if this call did. `listed`
    /// says it may still be in its key's waiters (an advance takes it out first).
    fn end(&self, waiter: &Waiter<K>, outcome: Outcome<u64>, listed: bool) -> bool {
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
        if let Some(expiry) = lock(&waiter.expiry).take() {
            expiry.cancel();
        }
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        deliver(waiter, outcome);
        true
    }
}

/// Hands `outcome` to the waiter's future or callback, with no lock held while user code
/// runs.
fn deliver<K>(waiter: &Waiter<K>, outcome: Outcome<u64>) {
    let mut then = lock(&waiter.then);
    match &mut *then {
        Then::Future {
            outcome: slot,
            waker,
            ended,
        } => {
            *slot = Some(outcome);
            *ended = true;
            let waker = waker.take();
            drop(then);
            if let Some(waker) = waker {
                let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
            }
        }
        Then::Callback(callback) => {
            let callback = callback.take();
            drop(then);
            if let Some(callback) = callback {
                let _ = catch_unwind(AssertUnwindSafe(|| callback(outcome)));
            }
        }
    }
}

/// A threshold wait's future: resolves to `Completed(value)`, `Expired` or `Cancelled`.
/// Made by [`ThresholdPurgatory::wait`]; dropping it before it resolves withdraws the wait.
#[must_use = "dropping it withdraws the wait"]
pub struct ThresholdWait<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    waiter: Arc<Waiter<K>>,
    inner: Arc<Inner<K>>,
}

impl<K> ThresholdWait<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// Withdraws the wait: `true` if this ended it.
    pub fn cancel(&self) -> bool {
        self.inner.end(&self.waiter, Outcome::Cancelled, true)
    }
}

impl<K> Future for ThresholdWait<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Output = Outcome<u64>;

    /// # Panics
    ///
    /// If polled again after it resolved.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<u64>> {
        let mut then = lock(&self.waiter.then);
        let Then::Future {
            outcome,
            waker,
            ended,
        } = &mut *then
        else {
            unreachable!("a future's waiter delivers to it");
        };
        if *ended {
            let outcome = outcome.take();
            return Poll::Ready(outcome.expect("a threshold wait polled after it resolved"));
        }
        let old = if waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            None
        } else {
            waker.replace(cx.waker().clone())
        };
        drop(then);
        drop(old);
        Poll::Pending
    }
}

impl<K> Drop for ThresholdWait<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if self.waiter.state.load(Ordering::Acquire) != DONE {
            self.inner.end(&self.waiter, Outcome::Cancelled, true);
        }
    }
}

impl<K> fmt::Debug for ThresholdWait<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThresholdWait")
            .field("threshold", &self.waiter.order.0)
            .finish_non_exhaustive()
    }
}

/// A handle to a threshold wait made with [`ThresholdPurgatory::wait_then`]. Dropping it
/// leaves the wait in place.
pub struct ThresholdHandle<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    waiter: Arc<Waiter<K>>,
    inner: Arc<Inner<K>>,
}

impl<K> ThresholdHandle<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// Withdraws the wait: `true` if this ended it (its callback then gets `Cancelled`).
    pub fn cancel(&self) -> bool {
        self.inner.end(&self.waiter, Outcome::Cancelled, true)
    }

    /// Whether the wait has ended.
    pub fn is_done(&self) -> bool {
        self.waiter.state.load(Ordering::Acquire) == DONE
    }
}

impl<K> fmt::Debug for ThresholdHandle<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThresholdHandle")
            .field("threshold", &self.waiter.order.0)
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}
