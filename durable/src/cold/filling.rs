//! Jobs taken from the wheel but not yet in a segment, by window: a take meets several
//! windows (a level-3 bucket of the wheel spans 74.5 h, ~74 one-hour windows), so a
//! window's segment is filled across the takes of a pass rather than cut at every take.
//!
//! A window is written when it is full ([`SEGMENT_JOBS`]), or whole: the walk has passed
//! every bucket that can hold its jobs (`cold_take.lua` says where it stands, and no
//! bucket still to read holds a job due before that bucket's start). Only when more than
//! [`MAX_HELD_BYTES`] are held is a window written before it is whole (the largest), so
//! that jobs spread evenly over many windows still make about one object per window, not
//! one per window per take.

use crate::contract::MAX_BATCH;

/// Jobs per segment at most.
pub(super) const SEGMENT_JOBS: usize = MAX_BATCH;

/// Bytes of ids and records a pass holds at most before it writes its largest window's
/// segment, whole or not: a level-3 bucket of 1,000,000 200-byte jobs spread evenly over
/// 30 days holds ~103,000 of them, ~27 MB.
pub(super) const MAX_HELD_BYTES: usize = 64 << 20;

/// A taken job: id, record.
pub(super) type Job = (Vec<u8>, Vec<u8>);

pub(super) struct Filling {
    /// The windows' width (ms).
    width: u64,
    windows: std::collections::BTreeMap<u64, Vec<Job>>,
    held: std::collections::HashSet<Vec<u8>>,
    /// Bytes of ids and records held.
    bytes: usize,
}

impl Filling {
    pub(super) fn new(width: u64) -> Filling {
        Filling {
            width: width.max(1),
            windows: Default::default(),
            held: Default::default(),
            bytes: 0,
        }
    }

    /// Adds a taken job, unless it is held already (SSCAN can return an id twice in a
    /// walk, and a held job is still in the wheel).
    pub(super) fn add(&mut self, window: u64, id: Vec<u8>, record: Vec<u8>) {
        if self.held.insert(id.clone()) {
            self.bytes += id.len() + record.len();
            self.windows.entry(window).or_default().push((id, record));
        }
    }

    /// The next segment to write, as (window, jobs): a full one; else the earliest window
    /// that is whole, every bucket that can hold its jobs read (its end at or before
    /// `walked_to`, the start of the first bucket the walk has still to read); else,
    /// with `all` or when more than [`MAX_HELD_BYTES`] are held, the largest window's
    /// jobs.
    pub(super) fn next(&mut self, all: bool, walked_to: u64) -> Option<(u64, Vec<Job>)> {
        let width = self.width;
        let full = self
            .windows
            .iter()
            .find(|(_, jobs)| jobs.len() >= SEGMENT_JOBS)
            .map(|(&w, _)| w);
        let whole = || {
            self.windows
                .keys()
                .next()
                .copied()
                .filter(|&w| w.saturating_add(width) <= walked_to)
        };
        let largest = || {
            self.windows
                .iter()
                .max_by_key(|(_, jobs)| jobs.len())
                .map(|(&w, _)| w)
                .filter(|_| all || self.bytes > MAX_HELD_BYTES)
        };
        let window = full.or_else(whole).or_else(largest)?;
        let list = self.windows.get_mut(&window)?;
        let jobs = if list.len() > SEGMENT_JOBS {
            list.split_off(list.len() - SEGMENT_JOBS)
        } else {
            self.windows.remove(&window).unwrap_or_default()
        };
        for (id, rec) in &jobs {
            self.held.remove(id);
            self.bytes -= id.len() + rec.len();
        }
        Some((window, jobs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: usize, bytes: usize) -> (Vec<u8>, Vec<u8>) {
        (format!("j{n}").into_bytes(), vec![b'r'; bytes])
    }

    #[test]
    fn a_window_is_written_whole_once_the_walk_has_passed_it_and_not_before() {
        let mut f = Filling::new(10);
        for n in 0..5 {
            let (id, rec) = job(n, 100);
            f.add(n as u64 % 3 * 10, id, rec);
        }
        // Windows 0 (jobs 0, 3), 10 (1, 4), 20 (2). The walk stands at 5: none whole.
        assert!(f.next(false, 5).is_none());
        // At 15, window 0 is: all of it, once.
        let (w, jobs) = f.next(false, 15).expect("window 0 whole");
        assert_eq!((w, jobs.len()), (0, 2));
        assert!(f.next(false, 15).is_none());
        let (w, jobs) = f.next(false, 20).expect("window 10 whole");
        assert_eq!((w, jobs.len()), (10, 2));
        assert!(f.next(false, 20).is_none());
        // A repeat of a held id is held once; the end of the walk writes the rest.
        let (id, rec) = job(2, 100);
        f.add(20, id, rec);
        let (w, jobs) = f.next(true, 20).expect("the rest");
        assert_eq!((w, jobs.len()), (20, 1));
        assert!(f.next(true, 20).is_none());
        assert_eq!(f.bytes, 0);
    }

    #[test]
    fn a_full_segment_goes_first_and_too_much_held_writes_the_largest_window() {
        let mut f = Filling::new(10);
        for n in 0..SEGMENT_JOBS + 1 {
            let (id, rec) = job(n, 1);
            f.add(30, id, rec);
        }
        let (w, jobs) = f.next(false, 0).expect("a full segment");
        assert_eq!((w, jobs.len()), (30, SEGMENT_JOBS));
        assert!(f.next(false, 0).is_none(), "one left, not whole");
        // Past the bytes held at most: the largest window goes, whole or not.
        let (id, rec) = job(SEGMENT_JOBS + 1, MAX_HELD_BYTES / 2);
        f.add(40, id, rec);
        let (id, rec) = job(SEGMENT_JOBS + 2, MAX_HELD_BYTES / 2);
        f.add(40, id, rec);
        let (w, jobs) = f.next(false, 0).expect("held too much");
        assert_eq!((w, jobs.len()), (40, 2));
        assert!(f.next(false, 0).is_none());
    }
}
