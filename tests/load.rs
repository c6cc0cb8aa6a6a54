//! Many timers at once: multi-thread runtimes and one huge `FuturesUnordered`.

use tickless_test_support as support;

use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickless::{Instant, Timer};

#[test]
fn ten_thousand_sleeps_on_a_multi_thread_runtime_all_fire_exactly_once() {
    support::multi_thread().block_on(async {
        const N: usize = 10_000;
        let fired: Arc<Vec<AtomicU8>> = Arc::new((0..N).map(|_| AtomicU8::new(0)).collect());
        let early = Arc::new(AtomicUsize::new(0));
        let timer = Timer::current();
        let before = timer.stats().entries_fired;
        let mut tasks = Vec::with_capacity(N);
        for i in 0..N {
            let (fired, early) = (fired.clone(), early.clone());
            tasks.push(tokio::spawn(async move {
                let deadline =
                    Instant::now() + Duration::from_millis(support::Rng(i as u64).below(50));
                tickless::sleep_until(deadline).await;
                if Instant::now() < deadline {
                    early.fetch_add(1, Ordering::SeqCst);
                }
                fired[i].fetch_add(1, Ordering::SeqCst);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert!(fired.iter().all(|count| count.load(Ordering::SeqCst) == 1));
        assert_eq!(early.load(Ordering::SeqCst), 0);
        // Zero-length sleeps complete without the wheel; every other one fired once.
        assert!(timer.stats().entries_fired - before <= N as u64);
        assert_eq!(timer.stats().registered, 0);
    })
}

#[tokio::test(start_paused = true)]
async fn a_million_sleeps_in_one_futures_unordered_all_complete_on_time() {
    // tokio's own sleeps stall here under its cooperative budget; tickless has no budget
    // to exhaust. On the paused clock every sleep must complete by its deadline + 2 ms.
    const N: u64 = 1_000_000;
    let start = Instant::now();
    let mut all: FuturesUnordered<_> = (0..N)
        .map(|i| {
            let deadline = start + Duration::from_micros(support::Rng(i).below(1_000_000));
            async move {
                tickless::sleep_until(deadline).await;
                Instant::now() - deadline
            }
        })
        .collect();
    let (mut done, mut worst) = (0_u64, Duration::ZERO);
    while let Some(late) = all.next().await {
        done += 1;
        worst = worst.max(late);
    }
    assert_eq!(done, N);
    assert!(
        worst <= Duration::from_millis(2),
        "worst lateness {worst:?}"
    );
    assert!(Instant::now() - start <= Duration::from_millis(1002));
    let stats = Timer::current().stats();
    assert_eq!(stats.registered, 0);
    assert!(
        stats.driver_wakeups <= 2_000,
        "{} wakeups",
        stats.driver_wakeups
    );
}
