//! [`DelayQueue`]: values that come back out once their deadline has passed, on the one
//! timing wheel; with its [`Key`] and [`Expired`] types (tokio-util's `time::delay_queue`).

use crate::driver::clock::Clock;
use crate::driver::registration::{Registration, IDLE};
use crate::driver::shard::Shard;
use crate::wheel::{Placed, Wheel};
use futures_core::Stream;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Names an item of one [`DelayQueue`]. A key carries a generation: once its item has been
/// removed or has expired, the key stays stale even when its slot is reused, so
/// [`try_remove`](DelayQueue::try_remove) gives `None` rather than another item. Keys stay
/// valid through [`compact`](DelayQueue::compact). Two keys are equal when they name the
/// same item.
///
/// # Examples
///
/// A cache whose entries expire 10 s after their last use keeps each entry's key, to
/// push its deadline back:
///
/// ```
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use tickless::delay_queue::{DelayQueue, Key};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut expiries = DelayQueue::new();
/// let mut cache: HashMap<&str, (u32, Key)> = HashMap::new();
/// let key = expiries.insert("user:1", Duration::from_secs(10));
/// cache.insert("user:1", (42, key));
///
/// // A hit: ten more seconds.
/// let (_, key) = cache["user:1"];
/// expiries.reset(&key, Duration::from_secs(10));
///
/// // Evicted by hand: the key is stale from now on, even if its slot is reused.
/// let (_, key) = cache.remove("user:1").unwrap();
/// assert_eq!(expiries.remove(&key).into_inner(), "user:1");
/// expiries.insert("user:2", Duration::from_secs(10));
/// assert!(expiries.try_remove(&key).is_none());
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// Where the item was when the key was made; after a compaction, a hint only.
    index: usize,
    /// Unique in its queue: what names the item.
    generation: u64,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.generation == other.generation
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.generation.hash(state);
    }
}

/// An item whose deadline has passed, from [`DelayQueue::poll_expired`] or
/// [`DelayQueue::remove`].
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use std::time::Duration;
/// use tickless::{DelayQueue, Instant};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut retries = DelayQueue::new();
/// let deadline = Instant::now() + Duration::from_millis(250);
/// let key = retries.insert_at(("GET /orders", 2), deadline);
///
/// let expired = retries.next().await.expect("one item");
/// assert_eq!(expired.deadline(), deadline);
/// assert_eq!(expired.key(), key);
/// let (request, attempt) = expired.into_inner();
/// assert_eq!((request, attempt), ("GET /orders", 2));
/// # }
/// ```
#[derive(Debug)]
pub struct Expired<T> {
    data: T,
    deadline: Instant,
    key: Key,
}

impl<T> Expired<T> {
    /// The item.
    pub fn get_ref(&self) -> &T {
        &self.data
    }

    /// The item, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.data
    }

    /// The item, by value.
    pub fn into_inner(self) -> T {
        self.data
    }

    /// The deadline the item was given.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key the item had (now stale).
    pub fn key(&self) -> Key {
        self.key
    }
}

/// What the wheel holds for each item.
struct Slot<T> {
    data: T,
    /// Nanoseconds on the timer's own timeline (see
    /// [`Clock::nanos`](crate::driver::clock::Clock::nanos)), so that a deadline stays
    /// right when the timer's clock is handed over from a runtime that shut down.
    deadline: Nanos,
    generation: u64,
}

/// An `i128` stored as two 8-byte halves: aligned to 8, not 16, so a slot holding an
/// `Instant` is 40 bytes instead of 48 and its wheel entry, with the slab's tag, 56
/// instead of 80 (DQ2 drains a million of them: fewer cache lines, fewer page faults).
#[derive(Clone, Copy)]
struct Nanos {
    high: i64,
    low: u64,
}

impl Nanos {
    fn new(nanos: i128) -> Nanos {
        Nanos {
            high: (nanos >> 64) as i64,
            low: nanos as u64,
        }
    }

    fn get(self) -> i128 {
        (i128::from(self.high) << 64) | i128::from(self.low)
    }
}

/// A queue of values, each with a deadline, that yields each value once its deadline has
/// passed. Same API and meaning as `tokio_util::time::DelayQueue`, and better in three
/// ways: keys carry a generation (a stale key is `None`, not another item); any deadline
/// up to `Duration::MAX` is accepted; and polling allocates nothing (one `Sleep` is reused).
///
/// Items live in a timing wheel of the queue's own (the same wheel type as the timer's),
/// converted to ticks by its timer's clock; one registration on that timer wakes the
/// polling task when the next bucket expires. Items are yielded in the order their buckets
/// expire: items due at the same tick come in no particular order (tokio-util promises
/// none either), and items found due together by a late poll may come a little out of
/// deadline order (never out of bucket order).
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use std::time::Duration;
/// use tickless::DelayQueue;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut queue = DelayQueue::new();
/// let late = queue.insert("late", Duration::from_millis(20));
/// queue.insert("early", Duration::from_millis(10));
/// assert_eq!(queue.next().await.unwrap().into_inner(), "early");
/// queue.remove(&late);
/// assert!(queue.next().await.is_none(), "empty: the stream ends");
/// # }
/// ```
pub struct DelayQueue<T> {
    wheel: Wheel<Slot<T>>,
    /// Armed for the next bucket expiry, by tick; reset, never re-created.
    delay: Registration,
    /// The tick `delay` is armed for, if it is.
    armed: Option<u64>,
    next_generation: u64,
    /// Where [`compact`](Self::compact) moved items, by generation: consulted only when a
    /// key's index no longer holds its item.
    moved: HashMap<u64, usize>,
}

impl<T> DelayQueue<T> {
    /// An empty queue with room for `capacity` items, registered on `shard` (the public
    /// constructors, which find the timer, are the `Timer` layer's: `timer/free.rs`).
    pub(crate) fn on_shard(shard: Arc<Shard>, capacity: usize) -> DelayQueue<T> {
        let mut wheel = Wheel::new(shard.core.wheel_size);
        wheel.reserve(capacity);
        DelayQueue {
            wheel,
            delay: Registration::new(shard, IDLE),
            armed: None,
            next_generation: 0,
            moved: HashMap::new(),
        }
    }

    fn clock(&self) -> &Clock {
        self.delay.clock()
    }

    /// Inserts `value`, to expire `timeout` from now. Any duration is accepted.
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        let deadline = self.clock().now_nanos() + timeout.as_nanos() as i128;
        self.insert_nanos(value, deadline)
    }

    /// Inserts `value`, to expire at `deadline`. A past deadline expires on the next poll.
    pub fn insert_at(&mut self, value: T, deadline: Instant) -> Key {
        let deadline = self.clock().nanos(deadline);
        self.insert_nanos(value, deadline)
    }

    fn insert_nanos(&mut self, value: T, deadline: i128) -> Key {
        let generation = self.next_generation;
        self.next_generation += 1;
        let slot = Slot {
            data: value,
            deadline: Nanos::new(deadline),
            generation,
        };
        let (index, placed) = self.wheel.insert(self.clock().nanos_tick(deadline), slot);
        self.rearm_if_earlier(placed);
        Key { index, generation }
    }

    /// An item handed out: its deadline as an `Instant` again.
    fn expired(&self, slot: Slot<T>, key: Key) -> Expired<T> {
        Expired {
            deadline: self.clock().instant_at_nanos(slot.deadline.get()),
            data: slot.data,
            key,
        }
    }

    /// Removes the item of `key`, if the key is current. A task waiting in
    /// [`poll_expired`](Self::poll_expired) is woken when this empties the queue, so it
    /// sees the end of the stream at once.
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        let index = self.index_of(key)?;
        let slot = self.wheel.try_remove(index)?;
        self.forget_move(slot.generation);
        self.wake_if_empty();
        Some(self.expired(slot, *key))
    }

    /// Removes the item of `key`.
    ///
    /// # Panics
    ///
    /// If the key is stale: its item was removed or has expired.
    #[track_caller]
    pub fn remove(&mut self, key: &Key) -> Expired<T> {
        match self.try_remove(key) {
            Some(expired) => expired,
            None => panic!("{}", StaleKey(*key)),
        }
    }

    /// Gives the item of `key` a new deadline, `timeout` from now.
    ///
    /// # Panics
    ///
    /// If the key is stale.
    #[track_caller]
    pub fn reset(&mut self, key: &Key, timeout: Duration) {
        let deadline = self.clock().now_nanos() + timeout.as_nanos() as i128;
        self.reset_nanos(key, deadline);
    }

    /// Gives the item of `key` a new deadline.
    ///
    /// # Panics
    ///
    /// If the key is stale.
    #[track_caller]
    pub fn reset_at(&mut self, key: &Key, deadline: Instant) {
        let deadline = self.clock().nanos(deadline);
        self.reset_nanos(key, deadline);
    }

    #[track_caller]
    fn reset_nanos(&mut self, key: &Key, deadline: i128) {
        let Some(index) = self.index_of(key) else {
            panic!("{}", StaleKey(*key));
        };
        let tick = self.clock().nanos_tick(deadline);
        if let Some(slot) = self.wheel.get_mut(index) {
            slot.deadline = Nanos::new(deadline);
        }
        let placed = self.wheel.reset(index, tick);
        self.rearm_if_earlier(placed);
    }

    /// The deadline of the item of `key`.
    ///
    /// # Panics
    ///
    /// If the key is stale.
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        match self.index_of(key).and_then(|index| self.wheel.get(index)) {
            Some(slot) => self.clock().instant_at_nanos(slot.deadline.get()),
            None => panic!("{}", StaleKey(*key)),
        }
    }

    /// The key of the item that expires next (an expired one if any is waiting).
    pub fn peek(&self) -> Option<Key> {
        let index = self.wheel.peek_earliest()?;
        let generation = self.wheel.get(index)?.generation;
        Some(Key { index, generation })
    }

    /// Takes the next expired item: `Ready(Some)` with it, `Ready(None)` when the queue is
    /// empty, `Pending` until the next item expires (the task is then woken).
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        loop {
            // Items found due by the last advance are handed out first, without a clock
            // read: one advance moves everything due at that moment, so none is skipped.
            if self.wheel.ready_is_empty() {
                self.wheel.advance(self.clock().now_tick());
            }
            if let Some((index, _)) = self.wheel.pop_ready() {
                let slot = self.wheel.try_remove(index).expect("a ready entry is held");
                self.forget_move(slot.generation);
                let key = Key {
                    index,
                    generation: slot.generation,
                };
                return Poll::Ready(Some(self.expired(slot, key)));
            }
            let Some(next_tick) = self.wheel.next_expiration() else {
                // Every held item is handed out as soon as it is ready, so none is left.
                self.disarm();
                return Poll::Ready(None);
            };
            if self.armed != Some(next_tick) {
                self.arm(next_tick);
            }
            if self.delay.poll(cx.waker()).is_pending() {
                return Poll::Pending;
            }
            self.armed = None;
        }
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// Whether no item is held.
    pub fn is_empty(&self) -> bool {
        self.wheel.len() == 0
    }

    /// Items the queue can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.wheel.capacity()
    }

    /// Makes room for `additional` more items.
    pub fn reserve(&mut self, additional: usize) {
        self.wheel.reserve(additional);
    }

    /// Gives back unused memory. The storage cannot shrink below the highest slot in use;
    /// [`compact`](Self::compact) moves items down first.
    pub fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
    }

    /// Moves every item to the lowest slots and shrinks the storage to the items held.
    /// O(items). Keys stay valid: a key whose item moved finds it through a small map
    /// kept until the item leaves the queue (lookups by keys that did not move cost
    /// nothing more).
    pub fn compact(&mut self) {
        let moves = self.wheel.compact();
        for (_, to) in moves {
            if let Some(slot) = self.wheel.get(to) {
                self.moved.insert(slot.generation, to);
            }
        }
        self.moved.shrink_to_fit();
        self.wheel.shrink_to_fit();
    }

    /// Removes every item. Their keys become stale. A waiting task is woken, as by
    /// [`try_remove`](Self::try_remove).
    pub fn clear(&mut self) {
        self.wheel.clear();
        self.moved.clear();
        self.wake_if_empty();
    }

    /// Where the item of `key` is, if the key is current.
    fn index_of(&self, key: &Key) -> Option<usize> {
        let holds = |index: usize| {
            self.wheel
                .get(index)
                .is_some_and(|slot| slot.generation == key.generation)
        };
        if holds(key.index) {
            return Some(key.index);
        }
        let index = *self.moved.get(&key.generation)?;
        holds(index).then_some(index)
    }

    fn forget_move(&mut self, generation: u64) {
        if !self.moved.is_empty() {
            self.moved.remove(&generation);
        }
    }

    fn arm(&mut self, tick: u64) {
        self.delay.reset(tick);
        self.armed = Some(tick);
    }

    fn disarm(&mut self) {
        self.delay.cancel();
        self.armed = None;
    }

    /// When the queue is empty and a task waits on it: wake the task (the registration
    /// fires now), so its next poll sees the end of the stream.
    fn wake_if_empty(&mut self) {
        if self.wheel.len() == 0 && self.armed.take().is_some() {
            self.delay.reset(0);
        }
    }

    /// After an insert or reset: if the item needs the polling task earlier than the delay
    /// is armed for, move the delay (which wakes that task at the new time, or now).
    fn rearm_if_earlier(&mut self, placed: Placed) {
        let Some(armed) = self.armed else {
            // Not waiting on anything: the next poll computes it.
            return;
        };
        match placed {
            Placed::Ready => {
                self.delay.reset(0);
                self.armed = Some(0);
            }
            Placed::Pending {
                queued: Some(expiration),
            } if expiration < armed => self.arm(expiration),
            Placed::Pending { .. } => {}
        }
    }
}

impl<T> Unpin for DelayQueue<T> {}

impl<T> Stream for DelayQueue<T> {
    type Item = Expired<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }
}

impl<T: fmt::Debug> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

struct StaleKey(Key);

impl fmt::Display for StaleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid DelayQueue key {:?}: its item was removed or has expired (try_remove returns None instead of panicking)",
            self.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DQ2 drains a million items: an `i128` field would align the slot to 16 and make it
    /// 48 bytes (the wheel entry 80 with the slab's tag, instead of 56).
    #[test]
    fn a_slot_holding_an_instant_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Slot<Instant>>(), 40);
    }
}
