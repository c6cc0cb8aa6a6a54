//! The min-queue of queued buckets, keyed by expiration (Kafka's `DelayQueue` of buckets).
//!
//! The wheel keeps at most one item per bucket: a bucket records the expiration it was
//! queued with, and is pushed again only after its item has been popped. So the queue never
//! holds more items than there are buckets, however many timers come and go.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Default)]
pub(super) struct BucketQueue {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl BucketQueue {
    pub(super) fn push(&mut self, expiration: u64, bucket: u32) {
        self.heap.push(Reverse((expiration, bucket)));
    }

    /// The earliest `(expiration, bucket)`.
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.heap.peek().map(|Reverse(item)| *item)
    }

    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        self.heap.pop().map(|Reverse(item)| item)
    }

    #[cfg(test)]
    pub(super) fn items(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.heap.iter().map(|Reverse(item)| *item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_expiration_order() {
        let mut queue = BucketQueue::default();
        for (expiration, bucket) in [(30, 1), (10, 7), (20, 2), (10, 3)] {
            queue.push(expiration, bucket);
        }
        assert_eq!(queue.peek(), Some((10, 3)));
        let popped: Vec<_> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(popped, [(10, 3), (10, 7), (20, 2), (30, 1)]);
        assert_eq!(queue.peek(), None);
    }
}
