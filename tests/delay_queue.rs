//! `DelayQueue`: expiry order and timing, keys with generations, far deadlines, resets,
//! the collection API, and no allocation per poll. On tokio's paused clock.

use futures::StreamExt;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::task::Poll;
use std::time::Duration;
use tickless::delay_queue::Expired;
use tickless::{DelayQueue, Instant};
use tokio_test::task;

const MS: Duration = Duration::from_millis(1);

/// Counts this thread's allocations, so a test can prove a loop allocates nothing.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every allocation and deallocation is passed to `System` unchanged; the count is
// a thread-local `Cell`, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[tokio::test(start_paused = true)]
async fn items_come_out_in_deadline_order_never_early_within_a_tick() {
    let start = Instant::now();
    let mut queue = DelayQueue::new();
    for millis in [300_u64, 5, 70, 64, 1, 4096, 65] {
        queue.insert(millis, Duration::from_millis(millis));
    }
    let mut order = Vec::new();
    while let Some(expired) = queue.next().await {
        let now = Instant::now();
        assert!(now >= expired.deadline(), "early");
        assert!(now - expired.deadline() <= 2 * MS, "late");
        order.push(expired.into_inner());
    }
    assert_eq!(order, [1, 5, 64, 65, 70, 300, 4096]);
    assert!(Instant::now() - start >= Duration::from_millis(4096));
}

#[tokio::test(start_paused = true)]
async fn poll_expired_is_ready_none_when_empty() {
    let mut queue: DelayQueue<()> = DelayQueue::new();
    let mut poll = task::spawn(());
    assert!(matches!(
        poll.enter(|cx, _| queue.poll_expired(cx)),
        Poll::Ready(None)
    ));
    queue.insert((), MS);
    assert!(poll.enter(|cx, _| queue.poll_expired(cx)).is_pending());
}

#[tokio::test(start_paused = true)]
async fn a_stale_key_is_none_never_another_item_even_when_its_slot_is_reused() {
    let mut queue = DelayQueue::new();
    let first = queue.insert("first", Duration::from_secs(5));
    assert_eq!(queue.remove(&first).into_inner(), "first");
    // The slab reuses the slot; the key's generation tells them apart.
    let second = queue.insert("second", Duration::from_secs(5));
    assert!(queue.try_remove(&first).is_none());
    assert_eq!(
        queue.deadline(&second),
        queue.peek().map(|k| queue.deadline(&k)).unwrap()
    );

    let expired = queue.next().await.unwrap();
    assert_eq!(expired.key(), second);
    assert!(
        queue.try_remove(&second).is_none(),
        "expired keys are stale too"
    );
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "its item was removed or has expired")]
async fn remove_with_a_stale_key_panics_clearly() {
    let mut queue = DelayQueue::new();
    let key = queue.insert((), MS);
    queue.remove(&key);
    queue.remove(&key);
}

#[tokio::test(start_paused = true)]
async fn any_deadline_up_to_duration_max_is_accepted() {
    let mut queue = DelayQueue::new();
    let max = queue.insert("max", Duration::MAX);
    let far = queue.insert("far", Duration::from_secs(1 << 40));
    queue.insert("soon", MS);
    assert_eq!(queue.next().await.unwrap().into_inner(), "soon");
    let wait = tokio::time::timeout(Duration::from_secs(86_400 * 365), queue.next()).await;
    assert!(wait.is_err(), "nothing else expires within a year");
    assert_eq!(queue.len(), 2);
    assert!(queue.deadline(&max) > queue.deadline(&far));
}

#[tokio::test(start_paused = true)]
async fn reset_earlier_wakes_the_waiting_task_and_reset_later_holds_the_item() {
    let start = Instant::now();
    let mut queue = DelayQueue::new();
    let key = queue.insert("item", Duration::from_secs(3600));
    let mut waiting = task::spawn(());
    assert!(waiting.enter(|cx, _| queue.poll_expired(cx)).is_pending());

    queue.reset_at(&key, start + 10 * MS);
    assert_eq!(queue.deadline(&key), start + 10 * MS);
    tokio::time::sleep(10 * MS).await;
    tokio::task::yield_now().await;
    assert!(waiting.is_woken(), "woken at the new, earlier deadline");

    queue.reset(&key, 50 * MS);
    assert!(waiting.enter(|cx, _| queue.poll_expired(cx)).is_pending());
    let expired = queue.next().await.unwrap();
    assert_eq!(Instant::now() - start, 60 * MS);
    assert_eq!(expired.deadline(), start + 60 * MS);
}

#[tokio::test(start_paused = true)]
async fn an_earlier_insert_wakes_the_waiting_task() {
    let mut queue = DelayQueue::new();
    queue.insert("later", Duration::from_secs(3600));
    let mut waiting = task::spawn(());
    assert!(waiting.enter(|cx, _| queue.poll_expired(cx)).is_pending());
    queue.insert("sooner", 5 * MS);
    tokio::time::sleep(5 * MS).await;
    tokio::task::yield_now().await;
    assert!(waiting.is_woken());
    match waiting.enter(|cx, _| queue.poll_expired(cx)) {
        Poll::Ready(Some(expired)) => assert_eq!(expired.into_inner(), "sooner"),
        other => panic!("{:?}", other.map(|e| e.map(Expired::into_inner))),
    }

    // A past deadline is ready at the next poll.
    queue.insert_at("past", Instant::now() - MS);
    assert_eq!(queue.next().await.unwrap().into_inner(), "past");
}

#[tokio::test(start_paused = true)]
async fn expired_gives_access_to_its_item() {
    let mut queue = DelayQueue::new();
    let key = queue.insert(String::from("a"), MS);
    let mut expired = queue.next().await.unwrap();
    assert_eq!(expired.key(), key);
    expired.get_mut().push('b');
    assert_eq!(expired.get_ref(), "ab");
    assert_eq!(expired.into_inner(), "ab");
}

#[tokio::test(start_paused = true)]
async fn collection_api() {
    let mut queue = DelayQueue::with_capacity(100);
    assert!(queue.capacity() >= 100);
    assert!(queue.is_empty());
    let keys: Vec<_> = (0..10)
        .map(|i| queue.insert(i, Duration::from_secs(i + 1)))
        .collect();
    assert_eq!(queue.len(), 10);
    assert_eq!(queue.peek(), Some(keys[0]));
    queue.reserve(1000);
    assert!(queue.capacity() >= 1010);
    queue.clear();
    assert!(queue.is_empty());
    assert!(queue.try_remove(&keys[3]).is_none());
    assert_eq!(queue.peek(), None);
    queue.shrink_to_fit();
    assert!(queue.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn polling_allocates_nothing() {
    let mut queue = DelayQueue::with_capacity(1000);
    for i in 0..1000_u64 {
        queue.insert(i, Duration::from_millis(1 + i % 200));
    }
    let mut waiting = task::spawn(());
    assert!(waiting.enter(|cx, _| queue.poll_expired(cx)).is_pending());
    let before = allocations();
    drop(std::hint::black_box(Box::new(0_u8)));
    assert_eq!(allocations(), before + 1, "the counter counts");
    let before = allocations();
    for _ in 0..100 {
        assert!(waiting.enter(|cx, _| queue.poll_expired(cx)).is_pending());
    }
    assert_eq!(allocations(), before, "pending polls allocated");

    let mut drained = 0;
    let before = allocations();
    while drained < 1000 {
        tokio::time::advance(MS).await;
        while let Poll::Ready(Some(_)) = waiting.enter(|cx, _| queue.poll_expired(cx)) {
            drained += 1;
        }
    }
    // tokio-util boxes a new Sleep on each pass; the only allocations here are the
    // timer's and the wheel's amortised growth, not one per poll or per item.
    let per_item = (allocations() - before) as f64 / 1000.0;
    assert!(per_item < 0.05, "{per_item} allocations per item");
}

#[tokio::test(start_paused = true)]
async fn a_million_items_drain_all_on_time() {
    const N: u64 = 1_000_000;
    let start = Instant::now();
    let mut queue = DelayQueue::with_capacity(N as usize);
    for i in 0..N {
        queue.insert(i, Duration::from_micros((i * 7_919) % 1_000_000));
    }
    let (mut drained, mut worst) = (0_u64, Duration::ZERO);
    while let Some(expired) = queue.next().await {
        drained += 1;
        let now = Instant::now();
        assert!(now >= expired.deadline());
        worst = worst.max(now - expired.deadline());
    }
    assert_eq!(drained, N);
    assert!(worst <= 2 * MS, "worst lateness {worst:?}");
    assert!(Instant::now() - start <= Duration::from_millis(1002));
}
