//! Entries, and the doubly linked lists threaded through their slab keys.
//!
//! Every list (a bucket, the ready list, a batch being flushed) is just a head and a tail;
//! the links live in the entries, so pushing and unlinking are O(1) and allocate nothing.
//! Keys are stored in 32 bits to keep an entry small; [`NIL`] ends a list.

use slab::Slab;

/// The end of a list. Slab keys at or above it are refused at insert.
pub(super) const NIL: u32 = u32::MAX;

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

    /// Moves every entry of `other` to the end of this list in O(1), leaving `other` empty.
    pub(super) fn append<T>(&mut self, entries: &mut Slab<Entry<T>>, other: &mut List) {
        let other = std::mem::take(other);
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = other;
            return;
        }
        entries[self.tail as usize].next = other.head;
        entries[other.head as usize].prev = self.tail;
        self.tail = other.tail;
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
    fn append_joins_and_empties_the_other() {
        let mut entries = slab_of(5);
        let (mut a, mut b) = (List::default(), List::default());
        a.push_back(&mut entries, 0);
        a.push_back(&mut entries, 1);
        for key in 2..5 {
            b.push_back(&mut entries, key);
        }
        a.append(&mut entries, &mut b);
        assert_eq!(a.keys(&entries), [0, 1, 2, 3, 4]);
        assert!(b.is_empty());

        let mut empty = List::default();
        empty.append(&mut entries, &mut a);
        assert_eq!(empty.keys(&entries), [0, 1, 2, 3, 4]);
        empty.append(&mut entries, &mut a);
        assert_eq!(empty.keys(&entries), [0, 1, 2, 3, 4]);
    }
}
