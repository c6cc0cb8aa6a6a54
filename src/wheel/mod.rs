//! The one timing wheel: a Kafka-style hierarchy of bucket rings over integer ticks.
//!
//! This module is synchronous and knows nothing of clocks, threads or wakers: it stores a
//! value per timer, and moves timers from bucket to bucket as its time is advanced. The
//! driver puts a lock and a clock around it; `DelayQueue` can use it as it is.
//!
//! # Shape
//!
//! With `W = 2^shift` buckets per level (64 by default), level `k` has `W` buckets, each
//! `W^k` ticks wide, so the level spans `W^(k+1)` ticks:
//!
//! | level | bucket width (ticks) | span (ticks) | span at a 1 ms tick, `W = 64` |
//! | ----- | -------------------- | ------------ | ----------------------------- |
//! | 0     | 1                    | `W`          | 64 ms                         |
//! | 1     | `W`                  | `W^2`        | 4.1 s                         |
//! | 2     | `W^2`                | `W^3`        | 4.4 min                       |
//! | 3     | `W^3`                | `W^4`        | 4.7 h                         |
//! | k     | `W^k`                | `W^(k+1)`    | ... up to level 10, all of `u64` |
//!
//! Level 0 is made by the first insert; a level is added the first time a deadline does
//! not fit the levels below it (Kafka's overflow wheel), so a wheel holding only near
//! timers stays one level deep, and any `u64` deadline fits once `ceil(64 / shift)` levels
//! exist.
//!
//! Level `k` sees the wheel's time rounded down to its bucket width, `now_k`, and holds a
//! deadline `d` when `d - now_k < W^(k+1)` (see [`level::fits`]). An entry goes to the
//! lowest level that holds it. Its bucket's *expiration* is `d` rounded down to the bucket
//! width: the first tick at which the entry might be due. The bucket numbers a level holds
//! at one time lie in a window of `W - 1` consecutive values, so two live buckets never
//! share a slot.
//!
//! Entries live in a [`Slab`]; each bucket is a few doubly linked lists (lanes) threaded
//! through slab keys (see [`bucket`]), so insert and cancel are O(1) and allocate nothing
//! once the slab has grown, and a flush can walk the lanes side by side. Entries of one
//! bucket come out in no particular order; buckets come out in expiration order. A
//! min-queue holds one item per queued bucket, keyed by expiration (see [`queue`]):
//! [`Wheel::next_expiration`] is its head, so whoever drives the wheel waits for the next
//! *non-empty* bucket, never for a tick at which nothing can happen.
//!
//! # Advancing
//!
//! [`Wheel::advance`]`(now)` takes every bucket whose expiration is `<= now` out of the
//! queue, moves the wheel's time to `now`, then places each of their entries again: an
//! entry with `deadline <= now` goes to the ready list (it has fired), any other goes to
//! the lowest level that holds it now, always lower than where it was. A cancelled
//! timer's bucket may be left empty and still queued; its item is dropped when it reaches
//! the head of the queue, so the queue never holds two items for one bucket.
//!
//! # A worked example
//!
//! `W = 64`, the wheel at tick 0, one timer inserted with deadline 5000:
//!
//! 1. 5000 does not fit level 0 (span 64) nor level 1 (span 4096); level 2 holds it. Levels
//!    1 and 2 are created. Its bucket is `5000 >> 12 = 1`, slot 1, expiration 4096. The
//!    bucket is queued at 4096: `next_expiration() == Some(4096)`.
//! 2. `advance(4096)` flushes that bucket. Relative to 4096, 5000 is 904 ticks away: level
//!    1 holds it (`now_1 = 4096`, `904 < 4096`), in bucket `5000 >> 6 = 78`, slot 14,
//!    expiration `78 * 64 = 4992`. One demotion; next expiration 4992.
//! 3. `advance(4992)`: 8 ticks away, level 0 holds it, slot `5000 & 63 = 8`, expiration 5000.
//! 4. `advance(5000)`: the deadline has come; the entry moves to the ready list and
//!    [`Wheel::pop_ready`] hands it out.
//!
//! Three advances for one timer 5000 ticks away; with 1,000 timers in the same buckets,
//! still three. Had the driver woken late, at 4999, step 2 would have placed the entry
//! straight into level 0.

mod bucket;
mod level;
mod placeholder;
mod queue;

use bucket::{Entry, Lanes, List, END, LANES, NIL, READY};
use queue::BucketQueue;
use slab::Slab;

/// Where an inserted (or reset) entry went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// Its deadline had already come: it is in the ready list.
    Ready,
    /// It is in a bucket. `queued` is the bucket's expiration when this call queued the
    /// bucket, which is when the wheel's [`next_expiration`](Wheel::next_expiration) may
    /// have moved earlier; `None` when the bucket was already queued.
    Pending { queued: Option<u64> },
}

/// What the wheel has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Non-empty buckets taken out of the queue by [`Wheel::advance`].
    pub(crate) buckets_flushed: u64,
    /// Entries moved to the ready list.
    pub(crate) entries_fired: u64,
    /// Entries moved from a flushed bucket to a lower level.
    pub(crate) entries_demoted: u64,
}

#[derive(Debug, Default)]
struct Bucket {
    entries: Lanes,
    /// The expiration this bucket has an item for in the queue, if it has one.
    queued: Option<u64>,
}

/// A hierarchical timing wheel of values of type `T`, keyed by slab keys.
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    entries: Slab<Entry<T>>,
    /// `level * wheel_size + slot`; grows a level at a time.
    buckets: Vec<Bucket>,
    queue: BucketQueue,
    /// Fired entries that [`Wheel::pop_ready`] has not yet handed out.
    ready: List,
    /// Scratch for [`Wheel::advance`]: the buckets it took out, kept for their capacity.
    due: Vec<Lanes>,
    /// The wheel's time: the tick of the last [`Wheel::advance`].
    elapsed_tick: u64,
    /// `log2(wheel_size)`.
    shift: u32,
    counters: Counters,
    /// Whether [`placeholder`](Wheel::placeholder) has handed out a key: keys are then
    /// held outside the wheel (a shard owner's reserve and log), and
    /// [`compact`](Wheel::compact), which moves keys, must never run.
    #[cfg(debug_assertions)]
    keyed_ahead: bool,
}

impl<T> Wheel<T> {
    /// A wheel of `wheel_size` buckets per level, at tick 0.
    ///
    /// # Panics
    ///
    /// If `wheel_size` is not a power of two of at least 2 (the timer's builder checks this
    /// first and returns an error instead).
    pub(crate) fn new(wheel_size: usize) -> Self {
        assert!(
            wheel_size >= 2 && wheel_size.is_power_of_two(),
            "wheel_size must be a power of two >= 2, got {wheel_size}"
        );
        // Levels, level 0 included, are made by the first insert that needs them: a
        // timer has a wheel per shard, and a shard no thread uses costs no buckets.
        Wheel {
            entries: Slab::new(),
            buckets: Vec::new(),
            queue: BucketQueue::default(),
            ready: List::default(),
            due: Vec::new(),
            elapsed_tick: 0,
            shift: wheel_size.trailing_zeros(),
            counters: Counters::default(),
            #[cfg(debug_assertions)]
            keyed_ahead: false,
        }
    }

    fn wheel_size(&self) -> usize {
        1 << self.shift
    }

    /// How many levels exist so far.
    pub(crate) fn levels(&self) -> usize {
        self.buckets.len() >> self.shift
    }

    fn add_level(&mut self) {
        debug_assert!(
            self.levels() < level::max_levels(self.shift),
            "level past u64"
        );
        let size = self.wheel_size();
        debug_assert!(
            self.buckets.len() + size <= READY as usize,
            "bucket indices must stay below the ready list's id in end markers"
        );
        self.buckets
            .resize_with(self.buckets.len() + size, Bucket::default);
    }

    /// Entries held, pending or fired.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn counters(&self) -> Counters {
        self.counters
    }

    /// Inserts a value due at `deadline_tick` and returns its key and where it went.
    ///
    /// # Panics
    ///
    /// If more than `2^31 - 1` entries are held at once.
    #[inline]
    pub(crate) fn insert(&mut self, deadline_tick: u64, value: T) -> (usize, Placed) {
        let key = self.entries.vacant_key();
        assert!(
            key < END as usize,
            "tickless: more than {} timers held at once",
            END - 1
        );
        self.entries.insert(Entry::new(deadline_tick, value));
        let placed = self.place(key as u32);
        (key, placed)
    }

    /// Removes an entry wherever it is (bucket, ready list or fired) and returns its value.
    /// O(1). Returns `None` if `key` holds nothing.
    #[inline]
    pub(crate) fn try_remove(&mut self, key: usize) -> Option<T> {
        if !self.entries.contains(key) {
            return None;
        }
        self.unlink(key as u32);
        Some(self.entries.remove(key).value)
    }

    /// Gives an entry a new deadline, moving it (back) into the wheel; the key stays valid.
    ///
    /// # Panics
    ///
    /// If `key` holds nothing.
    pub(crate) fn reset(&mut self, key: usize, deadline_tick: u64) -> Placed {
        self.unlink(key as u32);
        self.entries[key].deadline_tick = deadline_tick;
        self.place(key as u32)
    }

    /// The wheel's time: the tick of its last advance.
    pub(crate) fn elapsed_tick(&self) -> u64 {
        self.elapsed_tick
    }

    /// A lower bound of the expiration of the bucket that an insert due at `deadline_tick`
    /// would queue in a wheel of `2^shift` buckets per level, when the wheel's time is
    /// `elapsed_tick` or later (`deadline_tick > elapsed_tick`): a later time picks the same
    /// or a lower level, whose bucket starts the same or later.
    pub(crate) fn expiration_bound(shift: u32, elapsed_tick: u64, deadline_tick: u64) -> u64 {
        let level = level::level_for(shift, elapsed_tick, deadline_tick);
        level::bucket_start(shift, level, deadline_tick)
    }

    /// Whether the entry's deadline has come (it is ready or fired).
    ///
    /// # Panics
    ///
    /// If `key` holds nothing.
    pub(crate) fn has_fired(&self, key: usize) -> bool {
        // Every advance flushes each bucket that could hold a deadline it passes, so an
        // entry is in a bucket exactly while its deadline is ahead of the wheel's time.
        self.entries[key].deadline_tick <= self.elapsed_tick
    }

    /// The entry's deadline.
    ///
    /// # Panics
    ///
    /// If `key` holds nothing.
    pub(crate) fn deadline_tick(&self, key: usize) -> u64 {
        self.entries[key].deadline_tick
    }

    /// The entry's value, if `key` holds one.
    pub(crate) fn get(&self, key: usize) -> Option<&T> {
        self.entries.get(key).map(|entry| &entry.value)
    }

    /// The entry's value, mutably, if `key` holds one.
    pub(crate) fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        self.entries.get_mut(key).map(|entry| &mut entry.value)
    }

    /// The key of the entry with the earliest deadline: the head of the ready list if it
    /// has one, else the earliest among the buckets that could hold it (those expiring
    /// before the best deadline found so far). Ties go to the entry found first.
    pub(crate) fn peek_earliest(&self) -> Option<usize> {
        if let Some(key) = self.ready.front() {
            return Some(key as usize);
        }
        let mut best: Option<(u64, u32)> = None;
        for bucket in &self.buckets {
            let Some(expiration) = bucket.queued else {
                continue;
            };
            if best.is_some_and(|(deadline, _)| deadline <= expiration) {
                continue;
            }
            for key in bucket.entries.iter(&self.entries) {
                let deadline = self.entries[key as usize].deadline_tick;
                if best.is_none_or(|(best, _)| deadline < best) {
                    best = Some((deadline, key));
                }
            }
        }
        best.map(|(_, key)| key as usize)
    }

    /// Slots the slab has room for without reallocating.
    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Makes room for `additional` more entries.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// Gives back unused slab memory.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
    }

    /// Removes every entry; the wheel's time and levels stay.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        for bucket in &mut self.buckets {
            *bucket = Bucket::default();
        }
        self.queue = BucketQueue::default();
        self.ready = List::default();
    }

    /// Moves every entry to the lowest slab keys, so the slab's memory can shrink to the
    /// entries held, and returns each move as `(old key, new key)`. Entries keep their
    /// deadlines, buckets and fired state; O(entries).
    ///
    /// Never on a wheel that has handed out [placeholder](Self::placeholder) keys (a
    /// shard's): their holders would keep the old keys (checked in debug builds).
    pub(crate) fn compact(&mut self) -> Vec<(usize, usize)> {
        #[cfg(debug_assertions)]
        debug_assert!(
            !self.keyed_ahead,
            "compacted a wheel whose keys are held outside it (placeholders)"
        );
        let counters = self.counters;
        let old = std::mem::take(&mut self.entries);
        self.entries = Slab::with_capacity(old.len());
        for bucket in &mut self.buckets {
            *bucket = Bucket::default();
        }
        self.queue = BucketQueue::default();
        self.ready = List::default();
        let mut moves = Vec::new();
        for (old_key, entry) in old {
            let was_linked = entry.is_linked();
            let key = self
                .entries
                .insert(Entry::new(entry.deadline_tick, entry.value));
            if was_linked {
                self.place(key as u32);
            }
            if key != old_key {
                moves.push((old_key, key));
            }
        }
        // Placing again is not firing again.
        self.counters = counters;
        moves
    }

    /// Calls `f` with every entry's key and value, pending or fired.
    pub(crate) fn for_each(&mut self, mut f: impl FnMut(usize, &mut T)) {
        for (key, entry) in self.entries.iter_mut() {
            f(key, &mut entry.value);
        }
    }

    /// Whether the ready list is empty.
    pub(crate) fn ready_is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// Takes the oldest entry of the ready list and marks it fired. The entry stays in the
    /// wheel until it is removed, so its key is not reused while its owner may look at it.
    pub(crate) fn pop_ready(&mut self) -> Option<(usize, &mut T)> {
        let key = self.ready.pop_front(&mut self.entries)?;
        Some((key as usize, &mut self.entries[key as usize].value))
    }

    /// The expiration of the earliest non-empty bucket: the first tick at which
    /// [`advance`](Self::advance) can do anything. Drops queue items of emptied buckets on
    /// the way.
    pub(crate) fn next_expiration(&mut self) -> Option<u64> {
        while let Some((expiration, bucket)) = self.queue.peek() {
            let bucket = &mut self.buckets[bucket as usize];
            debug_assert_eq!(bucket.queued, Some(expiration));
            if !bucket.entries.is_empty() {
                return Some(expiration);
            }
            bucket.queued = None;
            self.queue.pop();
        }
        None
    }

    /// Moves the wheel's time to `now_tick` and moves every entry with `deadline <= now_tick`
    /// to the ready list. Entries of flushed buckets that are not yet due move down to the
    /// level that holds them now. Time never goes back: an earlier `now_tick` does nothing.
    pub(crate) fn advance(&mut self, now_tick: u64) {
        self.advance_inner(now_tick, None::<fn(usize, &mut T)>);
    }

    /// As [`advance`](Self::advance), but each entry found due is handed to `fired`, in
    /// the order `advance` would have put it in the ready list, instead of going there: it
    /// is then fired and unlinked, as [`pop_ready`](Self::pop_ready) leaves an entry. Each
    /// is handed out while its line is still in cache from the flush; popping a long
    /// ready list afterwards is a chain of cache misses, each waiting for the last (the
    /// driver's turn in W2). Entries already in the ready list stay there.
    pub(crate) fn advance_handing_out(&mut self, now_tick: u64, fired: impl FnMut(usize, &mut T)) {
        self.advance_inner(now_tick, Some(fired));
    }

    fn advance_inner(&mut self, now_tick: u64, mut fired: Option<impl FnMut(usize, &mut T)>) {
        if now_tick <= self.elapsed_tick {
            return;
        }
        // Take all due buckets out first: placing an entry while a due bucket still sits in
        // its slot could append it to a bucket of an older round.
        let mut due = std::mem::take(&mut self.due);
        while let Some((expiration, bucket)) = self.queue.peek() {
            if expiration > now_tick {
                break;
            }
            self.queue.pop();
            let bucket = &mut self.buckets[bucket as usize];
            debug_assert_eq!(bucket.queued, Some(expiration));
            bucket.queued = None;
            if !bucket.entries.is_empty() {
                self.counters.buckets_flushed += 1;
                due.push(std::mem::take(&mut bucket.entries));
            }
        }
        self.elapsed_tick = now_tick;
        // Bucket after bucket, in expiration order, so that a late advance still hands out
        // earlier buckets first; within a bucket, lane by lane (see `bucket`).
        let mut batch = [NIL; LANES];
        for lanes in &mut due {
            loop {
                let taken = lanes.take_round(&mut self.entries, &mut batch);
                if taken == 0 {
                    break;
                }
                for &key in &batch[..taken] {
                    if let Some(fired) = fired.as_mut() {
                        let entry = &mut self.entries[key as usize];
                        if entry.deadline_tick <= now_tick {
                            self.counters.entries_fired += 1;
                            fired(key as usize, &mut entry.value);
                            continue;
                        }
                    }
                    if let Placed::Pending { .. } = self.place(key) {
                        self.counters.entries_demoted += 1;
                    }
                }
            }
        }
        due.clear();
        self.due = due;
    }

    /// Links an unlinked entry into the ready list or the bucket that holds its deadline.
    fn place(&mut self, key: u32) -> Placed {
        let deadline_tick = self.entries[key as usize].deadline_tick;
        if deadline_tick <= self.elapsed_tick {
            self.ready.push_back(&mut self.entries, key, READY);
            self.counters.entries_fired += 1;
            return Placed::Ready;
        }
        let level = level::level_for(self.shift, self.elapsed_tick, deadline_tick);
        while level >= self.levels() {
            self.add_level();
        }
        let index = (level << self.shift) + level::slot(self.shift, level, deadline_tick);
        let expiration = level::bucket_start(self.shift, level, deadline_tick);
        let bucket = &mut self.buckets[index];
        bucket
            .entries
            .push_back(&mut self.entries, key, index as u32);
        // A queued bucket in this slot has the same expiration (one window per level), so
        // it is queued once however many entries come and go.
        debug_assert!(bucket.queued.is_none_or(|queued| queued == expiration));
        let queued = if bucket.queued.is_none() {
            bucket.queued = Some(expiration);
            self.queue.push(expiration, index as u32);
            Some(expiration)
        } else {
            None
        };
        Placed::Pending { queued }
    }

    /// Unlinks an entry from whichever list holds it, if any; the entry stays in the slab.
    fn unlink(&mut self, key: u32) {
        let entry = &self.entries[key as usize];
        if !entry.is_linked() {
            return; // fired and handed out
        }
        let list = match entry.end_of() {
            None => None, // a middle entry: its list's ends do not change
            Some(READY) => Some(&mut self.ready),
            Some(index) => Some(self.buckets[index as usize].entries.lane_mut(key)),
        };
        bucket::unlink(&mut self.entries, key, list);
    }

    /// Checks every structural invariant; panics with a description of the first broken one.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        use std::collections::HashSet;
        let mut linked = HashSet::new();
        for (index, bucket) in self.buckets.iter().enumerate() {
            let level = index >> self.shift;
            let slot = index & (self.wheel_size() - 1);
            let keys = bucket.entries.keys(&self.entries, index as u32);
            if !keys.is_empty() {
                assert!(
                    bucket.queued.is_some(),
                    "non-empty bucket {index} not queued"
                );
            }
            for key in keys {
                let entry = &self.entries[key as usize];
                let deadline = entry.deadline_tick;
                assert!(
                    deadline > self.elapsed_tick,
                    "due entry {key} left in a bucket"
                );
                assert_eq!(level::slot(self.shift, level, deadline), slot);
                assert_eq!(
                    Some(level::bucket_start(self.shift, level, deadline)),
                    bucket.queued,
                    "entry {key} in a bucket of another expiration"
                );
                assert!(level::fits(self.shift, level, self.elapsed_tick, deadline));
                assert!(linked.insert(key));
            }
            if let Some(expiration) = bucket.queued {
                assert!(
                    expiration > self.elapsed_tick,
                    "due bucket {index} left queued"
                );
            }
        }
        for key in self.ready.keys(&self.entries, READY) {
            let entry = &self.entries[key as usize];
            assert!(entry.deadline_tick <= self.elapsed_tick);
            assert!(linked.insert(key));
        }
        for (key, entry) in &self.entries {
            if !entry.is_linked() {
                assert!(
                    entry.deadline_tick <= self.elapsed_tick,
                    "fired early: {key}"
                );
                assert!(linked.insert(key as u32));
            }
        }
        assert_eq!(linked.len(), self.entries.len(), "entry in no list");
        let mut items = HashSet::new();
        for (expiration, index) in self.queue.items() {
            assert!(items.insert(index), "bucket {index} queued twice");
            assert_eq!(self.buckets[index as usize].queued, Some(expiration));
        }
        let queued = self.buckets.iter().filter(|b| b.queued.is_some()).count();
        assert_eq!(
            items.len(),
            queued,
            "bucket marked queued with no queue item"
        );
        assert!(self.levels() <= level::max_levels(self.shift));
    }
}

#[cfg(test)]
mod tests;
