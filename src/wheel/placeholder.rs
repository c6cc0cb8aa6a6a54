//! Keys taken ahead: an entry held under a key before its deadline is known (a
//! placeholder, due never and linked nowhere), filled later, and made a placeholder again
//! when its timer is cancelled. The driver's shard owner keeps a reserve of these, so that
//! its registers need no slab insert under the lock (`driver::owner`).

use super::bucket::{Entry, END};
use super::{Placed, Wheel};

impl<T> Wheel<T> {
    /// Takes a key for a later [`fill`](Self::fill): an entry due never and linked
    /// nowhere (as a fired one handed out), so no advance, flush or ready list sees it.
    pub(crate) fn placeholder(&mut self, value: T) -> usize {
        let key = self.entries.vacant_key();
        assert!(
            key < END as usize,
            "tickless: more than {} timers held at once",
            END - 1
        );
        #[cfg(debug_assertions)]
        {
            self.keyed_ahead = true;
        }
        self.entries.insert(Entry::new(u64::MAX, value))
    }

    /// Fills a placeholder (an entry linked nowhere) with a deadline and a value, and places
    /// it as [`insert`](Self::insert) would; hands back the value it held.
    pub(crate) fn fill(&mut self, key: usize, deadline_tick: u64, value: T) -> (T, Placed) {
        let entry = &mut self.entries[key];
        debug_assert!(!entry.is_linked(), "filled a placed entry");
        entry.deadline_tick = deadline_tick;
        let old = std::mem::replace(&mut entry.value, value);
        (old, self.place(key as u32))
    }

    /// Makes a held entry a placeholder again (unlinked, due never, holding `value`), and
    /// hands back the value it held. O(1).
    pub(crate) fn vacate(&mut self, key: usize, value: T) -> T {
        self.unlink(key as u32);
        let entry = &mut self.entries[key];
        entry.deadline_tick = u64::MAX;
        std::mem::replace(&mut entry.value, value)
    }
}
