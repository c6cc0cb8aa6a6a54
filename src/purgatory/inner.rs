//! An operation's entry (its own timer callback) and the purgatory's key index: how
//! operations are linked under their keys, checked, and unlinked when they end.

use super::op::{Claim, Condition, Ended, Ending, Op};
use super::Key;
use crate::callback::Expiry;
use crate::error::Error;
use crate::sync::{lock, waker, Arc, Mutex};
use crate::Timer;
use slab::Slab;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc as Shared, Weak};
use tokio::time::Instant;

/// An operation in the purgatory, as the key index and its handles see it. It is its
/// own timer callback: the driver wakes it when its deadline comes.
pub(super) struct Entry<K, T> {
    /// The purgatory, for the expiry (weak: operations pending do not keep a dropped
    /// purgatory alive; they still expire).
    pub(super) inner: Weak<Inner<K, T>>,
    pub(super) op: Op<T>,
    pub(super) keys: Box<[K]>,
    /// Where it is linked under each key (`(shard, slot)`, in `keys`' order), once it
    /// is; taken by whoever unlinks it.
    pub(super) links: Mutex<Vec<Option<(u32, u32)>>>,
    /// Its expiry on the timer, until it ends.
    pub(super) expiry: Mutex<Option<Expiry>>,
}

impl<K, T> Entry<K, T> {
    /// The data pointer of its expiry's waker.
    pub(super) fn data(&self) -> *const () {
        (self as *const Self).cast()
    }
}

impl<K, T> Entry<K, T>
where
    K: Key,
    T: Send + 'static,
{
    /// The deadline came (its expiry's waker was woken).
    fn expired(&self) {
        if self.op.expire().is_some() {
            // Unless the purgatory is gone, and its key index with it.
            if let Some(inner) = self.inner.upgrade() {
                inner.finish(self, Ended::Expired);
            }
        }
    }
}

#[cfg(not(tickless_loom))]
impl<K, T> std::task::Wake for Entry<K, T>
where
    K: Key,
    T: Send + 'static,
{
    fn wake(self: Arc<Self>) {
        self.expired();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.expired();
    }
}

#[cfg(tickless_loom)]
impl<K, T> crate::sync::Wake for Entry<K, T>
where
    K: Key,
    T: Send + 'static,
{
    fn wake_by_ref(this: &Arc<Self>) {
        this.expired();
    }
}

/// One shard of the key index.
pub(super) type Shard<K, T> = HashMap<K, Slab<Arc<Entry<K, T>>>>;

pub(super) struct Inner<K, T> {
    pub(super) timer: Timer,
    pub(super) hasher: RandomState,
    pub(super) shards: Box<[Mutex<Shard<K, T>>]>,
    /// Links of operations under keys.
    pub(super) watched: AtomicUsize,
    /// Operations watched and not ended.
    pub(super) delayed: AtomicUsize,
}

impl<K, T> Inner<K, T>
where
    K: Key,
    T: Send + 'static,
{
    pub(super) fn shard_of(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    /// The operations watching `key` now.
    pub(super) fn watching(&self, key: &K) -> Vec<Arc<Entry<K, T>>> {
        let shard = lock(&self.shards[self.shard_of(key)]);
        shard
            .get(key)
            .map(|slab| slab.iter().map(|(_, entry)| entry.clone()).collect())
            .unwrap_or_default()
    }

    pub(super) fn watch(
        self: &Shared<Self>,
        keys: Box<[K]>,
        deadline: Instant,
        condition: Box<dyn Condition<T>>,
    ) -> Result<Arc<Entry<K, T>>, Error> {
        let entry = Arc::new(Entry {
            inner: Shared::downgrade(self),
            op: Op::new(condition),
            links: Mutex::new(vec![None; keys.len()]),
            keys,
            expiry: Mutex::new(None),
        });
        // First try: nobody else knows of the operation yet.
        if entry.op.try_complete().is_some() {
            return Ok(entry);
        }
        // From here to the second try this thread is the operation's runner: a check that
        // finds it linked meanwhile asks it to run the condition again, and an expiry only
        // flags it, so nothing else can end it (and unlink it) before every link and its
        // expiry are in place. That is what lets a check run what it claimed without a
        // reference of its own: only the runner ends an operation, only its ender unlinks.
        let claimed = entry.op.claim();
        debug_assert_eq!(
            claimed,
            Claim::Runner,
            "nobody else knows of the operation yet"
        );
        // The expiry first, so that a timer at its limit refuses with nothing linked
        // (the operation, claimed and never linked, is dropped with the error). A
        // deadline that has passed only flags the operation: this thread runs it.
        let expiry = self.timer.expire_at(deadline, waker(entry.clone()))?;
        *lock(&entry.expiry) = Some(expiry);
        // Counted once per operation, not per link: the counters are shared by every
        // thread that watches and ends operations.
        self.delayed.fetch_add(1, Ordering::AcqRel);
        self.watched.fetch_add(entry.keys.len(), Ordering::AcqRel);
        for (i, key) in entry.keys.iter().enumerate() {
            let shard = self.shard_of(key);
            let slot = lock(&self.shards[shard])
                .entry(key.clone())
                .or_default()
                .insert(entry.clone());
            lock(&entry.links)[i] = Some((shard as u32, slot as u32));
        }
        // Second try, which also takes the checks, expiry or cancel that came meanwhile.
        // SAFETY: claimed above, by this thread, and not run since.
        #[allow(unsafe_code)]
        let ended = unsafe { entry.op.run() };
        if let Some(ended) = ended {
            self.finish(&entry, ended);
        }
        Ok(entry)
    }

    /// After an operation ended (called once, by whoever ended it, saying how): unlinks
    /// it from every key it is linked under and cancels its expiry.
    pub(super) fn finish(&self, entry: &Entry<K, T>, ended: Ended) {
        // Every link was made before the operation could end (its watcher was its runner
        // until then); the links' lock is never taken after a shard's.
        let mut links = lock(&entry.links);
        let mut unlinked = 0;
        for (key, link) in entry.keys.iter().zip(links.iter_mut()) {
            if let Some(link) = link.take() {
                self.unlink(key, link);
                unlinked += 1;
            }
        }
        drop(links);
        self.watched.fetch_sub(unlinked, Ordering::AcqRel);
        let expiry = lock(&entry.expiry).take();
        // An expiry that fired has left the wheel already.
        if let (Some(expiry), false) = (expiry, ended == Ended::Expired) {
            self.timer.cancel_expiry(expiry, entry.data());
        }
        self.delayed.fetch_sub(1, Ordering::AcqRel);
    }

    fn unlink(&self, key: &K, (shard, slot): (u32, u32)) {
        let removed = {
            let mut shard = lock(&self.shards[shard as usize]);
            let slab = shard.get_mut(key).expect("a linked key is in the index");
            let removed = slab.remove(slot as usize);
            if slab.is_empty() {
                shard.remove(key);
            }
            removed
        };
        // Dropped unlocked: it may be the last reference, dropping the user's condition.
        drop(removed);
    }
}

pub(super) fn cancel<K: Key, T: Send + 'static>(inner: &Inner<K, T>, entry: &Entry<K, T>) -> bool {
    let ending = entry.op.cancel();
    if ending == Ending::Here {
        inner.finish(entry, Ended::Cancelled);
    }
    ending.decided()
}
