//! Entries, and the doubly linked lists threaded through their slab keys.
//!
//! Every list (the ready list, one lane of a bucket) is just a head and a tail; the links
//! live in the entries, so pushing and unlinking are O(1) and allocate nothing. Keys are
//! stored in 32 bits to keep an entry small; [`NIL`] ends a list.
//!
//! A bucket is [`LANES`] lists side by side ([`Lanes`]), an entry's lane fixed by its key.
//! Walking one long list is a chain of cache misses, each waiting for the last, because
//! the next key is known only once the entry is loaded: flushing a 64,000-entry bucket of a
//! 1,000,000-entry wheel that way took ~9 ms. With lanes, a flush takes one entry from
//! every lane at a time ([`Lanes::take_round`]), so up to [`LANES`] misses are under way at
//! once (see [`Wheel::advance`](super::Wheel::advance)).

use slab::Slab;

/// The end of a list. Slab keys at or above it are refused at insert.
pub(super) const NIL: u32 = u32::MAX;

/// Lists per bucket: how many cache misses a flush keeps in flight.
pub(super) const LANES: usize = 8;

/// Which list holds an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// In the bucket with this index (`level * wheel_size + slot`).
    Bucket(u32),
    /// Due, in the ready list, not yet taken by [`pop_ready`](super::Wheel::pop_ready).
    Ready,
    /// Due and taken from the ready list; in no list. Still owned by whoever inserted it.
    Fired,
}

/// One timer: its deadline, its links, where it is, and the caller's value.
#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) deadline_tick: u64,
    prev: u32,
    next: u32,
    pub(super) place: Place,
    pub(super) value: T,
}

impl<T> Entry<T> {
    pub(super) fn new(deadline_tick: u64, value: T) -> Self {
        Entry {
            deadline_tick,
            prev: NIL,
            next: NIL,
            place: Place::Fired,
            value,
        }
    }
}

/// A doubly linked list of entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct List {
    head: u32,
    tail: u32,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
        }
    }
}

impl List {
    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// The first key, if any.
    pub(super) fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The keys from head to tail.
    pub(super) fn iter<'a, T>(
        &self,
        entries: &'a Slab<Entry<T>>,
    ) -> impl Iterator<Item = u32> + 'a {
        let mut key = self.head;
        std::iter::from_fn(move || {
            let current = key;
            (current != NIL).then(|| {
                key = entries[current as usize].next;
                current
            })
        })
    }

    pub(super) fn push_back<T>(&mut self, entries: &mut Slab<Entry<T>>, key: u32) {
        let entry = &mut entries[key as usize];
        debug_assert!(
            entry.prev == NIL && entry.next == NIL,
            "entry already linked"
        );
        entry.prev = self.tail;
        if self.tail == NIL {
            self.head = key;
        } else {
            entries[self.tail as usize].next = key;
        }
        self.tail = key;
    }

    pub(super) fn pop_front<T>(&mut self, entries: &mut Slab<Entry<T>>) -> Option<u32> {
        let key = self.head;
        if key == NIL {
            return None;
        }
        self.unlink(entries, key);
        Some(key)
    }

    /// Removes `key`, which must be in this list.
    pub(super) fn unlink<T>(&mut self, entries: &mut Slab<Entry<T>>, key: u32) {
        let entry = &mut entries[key as usize];
        let (prev, next) = (entry.prev, entry.next);
        entry.prev = NIL;
        entry.next = NIL;
        if prev == NIL {
            debug_assert_eq!(self.head, key, "entry is not in this list");
            self.head = next;
        } else {
            entries[prev as usize].next = next;
        }
        if next == NIL {
            debug_assert_eq!(self.tail, key, "entry is not in this list");
            self.tail = prev;
        } else {
            entries[next as usize].prev = prev;
        }
    }

    /// Takes the first entry of a list that is being dismantled, leaving the entry
    /// unlinked but not fixing its successor's back link (which is about to be taken too):
    /// one store fewer, to a line that may not be in cache yet.
    fn take_front<T>(&mut self, entries: &mut Slab<Entry<T>>) -> Option<u32> {
        let key = self.head;
        if key == NIL {
            return None;
        }
        let entry = &mut entries[key as usize];
        self.head = entry.next;
        entry.prev = NIL;
        entry.next = NIL;
        if self.head == NIL {
            self.tail = NIL;
        }
        Some(key)
    }

    /// The keys from head to tail, checking every link on the way (tests only).
    #[cfg(test)]
    pub(super) fn keys<T>(&self, entries: &Slab<Entry<T>>) -> Vec<u32> {
        let mut keys = Vec::new();
        let mut prev = NIL;
        let mut key = self.head;
        while key != NIL {
            let entry = &entries[key as usize];
            assert_eq!(entry.prev, prev, "broken back link at {key}");
            keys.push(key);
            prev = key;
            key = entry.next;
            assert!(keys.len() <= entries.len(), "cycle in list");
        }
        assert_eq!(self.tail, prev, "tail is not the last entry");
        keys
    }
}

/// A bucket's entries: [`LANES`] lists, the lane of an entry given by its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Lanes {
    lanes: [List; LANES],
}

fn lane(key: u32) -> usize {
    key as usize % LANES
}

impl Lanes {
    pub(super) fn is_empty(&self) -> bool {
        self.lanes.iter().all(List::is_empty)
    }

    pub(super) fn push_back<T>(&mut self, entries: &mut Slab<Entry<T>>, key: u32) {
        self.lanes[lane(key)].push_back(entries, key);
    }

    /// Removes `key`, which must be in one of these lanes.
    pub(super) fn unlink<T>(&mut self, entries: &mut Slab<Entry<T>>, key: u32) {
        self.lanes[lane(key)].unlink(entries, key);
    }

    /// Every key, lane after lane.
    pub(super) fn iter<'a, T>(
        &self,
        entries: &'a Slab<Entry<T>>,
    ) -> impl Iterator<Item = u32> + 'a {
        let lanes = self.lanes;
        (0..LANES).flat_map(move |lane| lanes[lane].iter(entries))
    }

    /// Takes the first entry of every non-empty lane into `batch` and returns how many it
    /// took. The loads are independent of each other, so their cache misses overlap;
    /// placing the batch afterwards finds the entries in cache.
    pub(super) fn take_round<T>(
        &mut self,
        entries: &mut Slab<Entry<T>>,
        batch: &mut [u32; LANES],
    ) -> usize {
        let mut taken = 0;
        for lane in &mut self.lanes {
            if let Some(key) = lane.take_front(entries) {
                batch[taken] = key;
                taken += 1;
            }
        }
        taken
    }

    /// Every key, lane after lane, checking every link on the way (tests only).
    #[cfg(test)]
    pub(super) fn keys<T>(&self, entries: &Slab<Entry<T>>) -> Vec<u32> {
        self.lanes
            .iter()
            .flat_map(|lane| lane.keys(entries))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slab_of(n: u32) -> Slab<Entry<()>> {
        let mut entries = Slab::new();
        for i in 0..n {
            entries.insert(Entry::new(u64::from(i), ()));
        }
        entries
    }

    #[test]
    fn push_pop_is_fifo() {
        let mut entries = slab_of(4);
        let mut list = List::default();
        for key in 0..4 {
            list.push_back(&mut entries, key);
        }
        assert_eq!(list.keys(&entries), [0, 1, 2, 3]);
        assert_eq!(list.pop_front(&mut entries), Some(0));
        assert_eq!(list.keys(&entries), [1, 2, 3]);
    }

    #[test]
    fn unlink_head_middle_tail_and_only() {
        let mut entries = slab_of(4);
        let mut list = List::default();
        for key in 0..4 {
            list.push_back(&mut entries, key);
        }
        list.unlink(&mut entries, 2);
        assert_eq!(list.keys(&entries), [0, 1, 3]);
        list.unlink(&mut entries, 0);
        assert_eq!(list.keys(&entries), [1, 3]);
        list.unlink(&mut entries, 3);
        assert_eq!(list.keys(&entries), [1]);
        list.unlink(&mut entries, 1);
        assert!(list.is_empty());
        assert_eq!(list.keys(&entries), Vec::<u32>::new());
        // An unlinked entry can be linked again.
        list.push_back(&mut entries, 2);
        assert_eq!(list.keys(&entries), [2]);
    }

    #[test]
    fn lanes_hand_out_one_key_per_lane_per_round_until_empty() {
        let n = 3 * LANES as u32 + 2;
        let mut entries = slab_of(n);
        let mut lanes = Lanes::default();
        for key in 0..n {
            lanes.push_back(&mut entries, key);
        }
        lanes.unlink(&mut entries, 1);
        let mut batch = [NIL; LANES];
        let mut rounds = Vec::new();
        loop {
            let taken = lanes.take_round(&mut entries, &mut batch);
            if taken == 0 {
                break;
            }
            rounds.push(batch[..taken].to_vec());
        }
        assert!(lanes.is_empty());
        let lanes_n = LANES as u32;
        let mut first: Vec<u32> = (0..lanes_n).collect();
        first[1] = 1 + lanes_n; // key 1 was unlinked: its lane starts at the next key
        assert_eq!(rounds[0], first, "one key from each lane, in lane order");
        assert_eq!(
            rounds.len(),
            4,
            "the longest lane sets the number of rounds"
        );
        assert_eq!(
            rounds[3],
            [3 * lanes_n],
            "lane 1 lost key 1, so it ends a round early"
        );
        let mut all: Vec<u32> = rounds.concat();
        all.sort_unstable();
        let expected: Vec<u32> = (0..n).filter(|&key| key != 1).collect();
        assert_eq!(all, expected, "every key exactly once");
        // Taken entries are unlinked and can be linked again.
        lanes.push_back(&mut entries, 5);
        assert_eq!(lanes.keys(&entries), [5]);
    }
}
