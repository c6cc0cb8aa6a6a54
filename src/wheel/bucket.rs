//! Entries, and the doubly linked lists threaded through their slab keys.
//!
//! Every list (the ready list, one lane of a bucket) is just a head and a tail; the links
//! live in the entries, so pushing and unlinking are O(1) and allocate nothing. Keys are
//! stored in 32 bits to keep an entry small.
//!
//! An entry does not record which list holds it: the ends of a list say it instead. The
//! head's `prev` and the tail's `next` are an *end marker* ([`END`] plus the list's id: a
//! bucket index, or [`READY`]); every other link is a key. Unlinking a middle entry needs no
//! list; unlinking an end finds its list in the marker. An entry in no list has both links
//! [`NIL`]. So an entry is its deadline, two links and its value: 32 bytes for a waker.
//!
//! A bucket is [`LANES`] lists side by side ([`Lanes`]), an entry's lane fixed by its key.
//! Walking one long list is a chain of cache misses, each waiting for the last, because
//! the next key is known only once the entry is loaded: flushing a 64,000-entry bucket of a
//! 1,000,000-entry wheel that way took ~9 ms. With lanes, a flush takes one entry from
//! every lane at a time ([`Lanes::take_round`]), so up to [`LANES`] misses are under way at
//! once (see [`Wheel::advance`](super::Wheel::advance)).

use slab::Slab;

/// Both links of an entry in no list; the head and tail of an empty list.
pub(super) const NIL: u32 = u32::MAX;

/// Set in a link that names a list rather than an entry. Keys are below it.
pub(super) const END: u32 = 1 << 31;

/// The id of the ready list in end markers; bucket indices are below it.
pub(super) const READY: u32 = END - 2;

/// Lists per bucket: how many cache misses a flush keeps in flight.
pub(super) const LANES: usize = 8;

/// Whether a link of a linked entry is an end marker (`NIL` also has the bit, but is never
/// a link of a linked entry).
fn is_end(link: u32) -> bool {
    link & END != 0
}

/// One timer: its deadline, its links and the caller's value.
#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) deadline_tick: u64,
    prev: u32,
    next: u32,
    pub(super) value: T,
}

impl<T> Entry<T> {
    pub(super) fn new(deadline_tick: u64, value: T) -> Self {
        Entry {
            deadline_tick,
            prev: NIL,
            next: NIL,
            value,
        }
    }

    /// Whether the entry is in a list.
    pub(super) fn is_linked(&self) -> bool {
        self.prev != NIL
    }

    /// The id of the list of which this entry is the head or the tail; `None` for a
    /// middle entry, or one in no list.
    pub(super) fn end_of(&self) -> Option<u32> {
        if !self.is_linked() {
            return None;
        }
        [self.prev, self.next]
            .into_iter()
            .find(|&link| is_end(link))
            .map(|link| link & !END)
    }
}

/// Removes linked `key` from its list. `list` must be that list when `key` is one of its
/// ends ([`Entry::end_of`]); a middle entry's list is not touched, and may be `None`.
pub(super) fn unlink<T>(entries: &mut Slab<Entry<T>>, key: u32, list: Option<&mut List>) {
    let entry = &mut entries[key as usize];
    let (prev, next) = (entry.prev, entry.next);
    debug_assert!(prev != NIL && next != NIL, "entry {key} is in no list");
    entry.prev = NIL;
    entry.next = NIL;
    if is_end(prev) || is_end(next) {
        let list = list.expect("the list of an end entry");
        if is_end(prev) {
            debug_assert_eq!(list.head, key, "entry {key} is not this list's head");
            list.head = if is_end(next) { NIL } else { next };
        }
        if is_end(next) {
            debug_assert_eq!(list.tail, key, "entry {key} is not this list's tail");
            list.tail = if is_end(prev) { NIL } else { prev };
        }
    }
    // A neighbour that was a middle entry becomes an end: it takes over the marker.
    if !is_end(prev) {
        entries[prev as usize].next = next;
    }
    if !is_end(next) {
        entries[next as usize].prev = prev;
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
                let next = entries[current as usize].next;
                key = if is_end(next) { NIL } else { next };
                current
            })
        })
    }

    /// Links unlinked `key` at the end of this list, whose id is `id`.
    pub(super) fn push_back<T>(&mut self, entries: &mut Slab<Entry<T>>, key: u32, id: u32) {
        let end = END | id;
        let entry = &mut entries[key as usize];
        debug_assert!(!entry.is_linked(), "entry {key} already linked");
        entry.next = end;
        if self.tail == NIL {
            entry.prev = end;
            self.head = key;
        } else {
            entry.prev = self.tail;
            entries[self.tail as usize].next = key;
        }
        self.tail = key;
    }

    pub(super) fn pop_front<T>(&mut self, entries: &mut Slab<Entry<T>>) -> Option<u32> {
        let key = self.front()?;
        unlink(entries, key, Some(self));
        Some(key)
    }

    /// Takes the first entry of a list that is being dismantled, leaving the entry
    /// unlinked but not fixing its successor's back link (which is about to be taken too):
    /// one store fewer, to a line that may not be in cache yet.
    fn take_front<T>(&mut self, entries: &mut Slab<Entry<T>>) -> Option<u32> {
        let key = self.front()?;
        let entry = &mut entries[key as usize];
        let next = entry.next;
        entry.prev = NIL;
        entry.next = NIL;
        if is_end(next) {
            *self = List::default();
        } else {
            self.head = next;
        }
        Some(key)
    }

    /// The keys from head to tail, checking every link and both end markers on the way
    /// (tests only).
    #[cfg(test)]
    pub(super) fn keys<T>(&self, entries: &Slab<Entry<T>>, id: u32) -> Vec<u32> {
        let end = END | id;
        let mut keys = Vec::new();
        let mut prev = end;
        let mut key = self.head;
        while key != NIL {
            let entry = &entries[key as usize];
            assert_eq!(entry.prev, prev, "broken back link at {key}");
            keys.push(key);
            prev = key;
            key = if entry.next == end { NIL } else { entry.next };
            assert!(
                key == NIL || !is_end(key),
                "end marker of another list at {prev}"
            );
            assert!(keys.len() <= entries.len(), "cycle in list");
        }
        assert_eq!(
            self.tail,
            if keys.is_empty() { NIL } else { prev },
            "tail is not the last entry"
        );
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

    /// Links unlinked `key` into its lane; `id` is the bucket's index.
    pub(super) fn push_back<T>(&mut self, entries: &mut Slab<Entry<T>>, key: u32, id: u32) {
        self.lanes[lane(key)].push_back(entries, key, id);
    }

    /// The lane `key` belongs in.
    pub(super) fn lane_mut(&mut self, key: u32) -> &mut List {
        &mut self.lanes[lane(key)]
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

    /// Every key, lane after lane, checking every link, the end markers and that each key
    /// is in its lane (tests only).
    #[cfg(test)]
    pub(super) fn keys<T>(&self, entries: &Slab<Entry<T>>, id: u32) -> Vec<u32> {
        let mut keys = Vec::new();
        for (index, list) in self.lanes.iter().enumerate() {
            for key in list.keys(entries, id) {
                assert_eq!(lane(key), index, "key {key} in the wrong lane");
                keys.push(key);
            }
        }
        keys
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

    const ID: u32 = 7;

    fn unlink_end_or_middle(list: &mut List, entries: &mut Slab<Entry<()>>, key: u32) {
        let end = entries[key as usize].end_of();
        assert!(
            end.is_none_or(|id| id == ID),
            "end marker names list {end:?}"
        );
        unlink(entries, key, end.map(|_| list));
    }

    #[test]
    fn push_pop_is_fifo() {
        let mut entries = slab_of(4);
        let mut list = List::default();
        for key in 0..4 {
            list.push_back(&mut entries, key, ID);
        }
        assert_eq!(list.keys(&entries, ID), [0, 1, 2, 3]);
        assert_eq!(list.pop_front(&mut entries), Some(0));
        assert_eq!(list.keys(&entries, ID), [1, 2, 3]);
        assert!(!entries[0].is_linked());
    }

    #[test]
    fn unlink_head_middle_tail_and_only() {
        let mut entries = slab_of(4);
        let mut list = List::default();
        for key in 0..4 {
            list.push_back(&mut entries, key, ID);
        }
        assert_eq!(entries[2].end_of(), None, "a middle entry names no list");
        assert_eq!(entries[0].end_of(), Some(ID));
        assert_eq!(entries[3].end_of(), Some(ID));
        unlink_end_or_middle(&mut list, &mut entries, 2);
        assert_eq!(list.keys(&entries, ID), [0, 1, 3]);
        unlink_end_or_middle(&mut list, &mut entries, 0);
        assert_eq!(list.keys(&entries, ID), [1, 3]);
        unlink_end_or_middle(&mut list, &mut entries, 3);
        assert_eq!(list.keys(&entries, ID), [1]);
        assert_eq!(entries[1].end_of(), Some(ID), "the only entry is both ends");
        unlink_end_or_middle(&mut list, &mut entries, 1);
        assert!(list.is_empty());
        assert_eq!(list.keys(&entries, ID), Vec::<u32>::new());
        assert!((0..4).all(|key| !entries[key].is_linked()));
        // An unlinked entry can be linked again.
        list.push_back(&mut entries, 2, ID);
        assert_eq!(list.keys(&entries, ID), [2]);
    }

    #[test]
    fn lanes_hand_out_one_key_per_lane_per_round_until_empty() {
        let n = 3 * LANES as u32 + 2;
        let mut entries = slab_of(n);
        let mut lanes = Lanes::default();
        for key in 0..n {
            lanes.push_back(&mut entries, key, ID);
        }
        unlink_end_or_middle(lanes.lane_mut(1), &mut entries, 1);
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
        lanes.push_back(&mut entries, 5, ID);
        assert_eq!(lanes.keys(&entries, ID), [5]);
    }
}
