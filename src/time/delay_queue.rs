//! [`DelayQueue`]: values that come back out once their deadline has passed, on the one
//! timing wheel; with its [`Key`] and [`Expired`] types (tokio-util's `time::delay_queue`).

use super::sleep::Sleep;
use crate::driver::clock::{deadline_after, Clock};
use crate::wheel::{Placed, Wheel};
use crate::Timer;
use futures_core::Stream;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Names an item of one [`DelayQueue`]. A key carries a generation: once its item has been
/// removed or has expired, the key stays stale even when its slot is reused, so
/// [`try_remove`](DelayQueue::try_remove) gives `None` rather than another item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    index: usize,
    generation: u64,
}

/// An item whose deadline has passed, from [`DelayQueue::poll_expired`] or
/// [`DelayQueue::remove`].
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
    deadline: Instant,
    generation: u64,
}

/// A queue of values, each with a deadline, that yields each value once its deadline has
/// passed. Same API and meaning as `tokio_util::time::DelayQueue`, and better in three
/// ways: keys carry a generation (a stale key is `None`, not another item); any deadline
/// up to `Duration::MAX` is accepted; and polling allocates nothing (one `Sleep` is reused).
///
/// Items live in a timing wheel of the queue's own (the same wheel type as the timer's),
/// converted to ticks by its timer's clock; one [`Sleep`] on that timer wakes the polling
/// task when the next bucket expires. Items are yielded in the order their buckets
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
    timer: Timer,
    /// Armed for the next bucket expiry; reset, never re-created.
    delay: Sleep,
    /// The tick `delay` is armed for, if it is.
    armed: Option<u64>,
    next_generation: u64,
}

impl<T> DelayQueue<T> {
    /// An empty queue on the [current timer](Timer::current).
    pub fn new() -> DelayQueue<T> {
        DelayQueue::with_timer(Timer::current(), 0)
    }

    /// An empty queue with room for `capacity` items, on the current timer.
    pub fn with_capacity(capacity: usize) -> DelayQueue<T> {
        DelayQueue::with_timer(Timer::current(), capacity)
    }

    /// An empty queue with room for `capacity` items, on `timer`: its tick and its driver.
    pub fn with_timer(timer: Timer, capacity: usize) -> DelayQueue<T> {
        let delay = timer.sleep(Duration::MAX);
        let mut wheel = Wheel::new(64);
        wheel.reserve(capacity);
        DelayQueue {
            wheel,
            timer,
            delay,
            armed: None,
            next_generation: 0,
        }
    }

    fn clock(&self) -> &Clock {
        &self.timer.shared.clock
    }

    /// Inserts `value`, to expire `timeout` from now. Any duration is accepted.
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        self.insert_at(value, deadline_after(self.clock().now(), timeout))
    }

    /// Inserts `value`, to expire at `deadline`. A past deadline expires on the next poll.
    pub fn insert_at(&mut self, value: T, deadline: Instant) -> Key {
        let generation = self.next_generation;
        self.next_generation += 1;
        let slot = Slot {
            data: value,
            deadline,
            generation,
        };
        let (index, placed) = self
            .wheel
            .insert(self.clock().deadline_tick(deadline), slot);
        self.rearm_if_earlier(placed);
        Key { index, generation }
    }

    /// Removes the item of `key`, if the key is current.
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        self.slot(key)?;
        let slot = self.wheel.try_remove(key.index)?;
        Some(Expired {
            data: slot.data,
            deadline: slot.deadline,
            key: *key,
        })
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
        self.reset_at(key, deadline_after(self.clock().now(), timeout));
    }

    /// Gives the item of `key` a new deadline.
    ///
    /// # Panics
    ///
    /// If the key is stale.
    #[track_caller]
    pub fn reset_at(&mut self, key: &Key, deadline: Instant) {
        let tick = self.clock().deadline_tick(deadline);
        match self.wheel.get_mut(key.index) {
            Some(slot) if slot.generation == key.generation => slot.deadline = deadline,
            _ => panic!("{}", StaleKey(*key)),
        }
        let placed = self.wheel.reset(key.index, tick);
        self.rearm_if_earlier(placed);
    }

    /// The deadline of the item of `key`.
    ///
    /// # Panics
    ///
    /// If the key is stale.
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        match self.slot(key) {
            Some(slot) => slot.deadline,
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
                let key = Key {
                    index,
                    generation: slot.generation,
                };
                return Poll::Ready(Some(Expired {
                    data: slot.data,
                    deadline: slot.deadline,
                    key,
                }));
            }
            let Some(next_tick) = self.wheel.next_expiration() else {
                // Every held item is handed out as soon as it is ready, so none is left.
                return Poll::Ready(None);
            };
            if self.armed != Some(next_tick) {
                self.arm(next_tick);
            }
            if Pin::new(&mut self.delay).poll(cx).is_pending() {
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

    /// Gives back unused memory.
    pub fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
    }

    /// Removes every item. Their keys become stale.
    pub fn clear(&mut self) {
        self.wheel.clear();
    }

    fn slot(&self, key: &Key) -> Option<&Slot<T>> {
        self.wheel
            .get(key.index)
            .filter(|slot| slot.generation == key.generation)
    }

    fn arm(&mut self, tick: u64) {
        let at = self.clock().instant_at(tick);
        Pin::new(&mut self.delay).reset(at);
        self.armed = Some(tick);
    }

    /// After an insert or reset: if the item needs the polling task earlier than the delay
    /// is armed for, move the delay (which wakes that task at the new time, or now).
    fn rearm_if_earlier(&mut self, placed: Placed) {
        let Some(armed) = self.armed else {
            // Not waiting on anything: the next poll computes it.
            return;
        };
        match placed {
            Placed::Ready => self.arm(0),
            Placed::Pending {
                queued: Some(expiration),
            } if expiration < armed => self.arm(expiration),
            Placed::Pending { .. } => {}
        }
    }
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        DelayQueue::new()
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
