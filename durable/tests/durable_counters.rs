//! The running totals the scripts keep in Redis for `/metrics` ([`Queue::counters`]):
//! each counted where the counted thing happens, and the promotion lag histogram.

use tickless_test_support as support;

use std::time::Duration;
use support::{at, RedisServer, T0};
use tickless_durable::{Backoff, LeaderOptions, Queue, WorkerOptions};

#[tokio::test]
async fn counters_follow_schedules_promotions_deliveries_and_outcomes() {
    let server = RedisServer::start();
    let queue = Queue::connect(&server.url(), "counted").await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let fresh = queue.counters().await.unwrap();
    assert_eq!(
        (fresh.scheduled, fresh.promoted, fresh.lag_sum_ms),
        (0, 0, 0)
    );

    // Three new ids and one taken: three schedules.
    for id in ["a", "b", "c", "a"] {
        queue.schedule(id, b"x", at(T0 + 5_000)).await.unwrap();
    }
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    assert_eq!(queue.counters().await.unwrap().leaderships, 1);
    // Promoted 7 ms late: all three in the (5, 10] ms range.
    queue
        .advance_manual_clock(Duration::from_millis(5_007))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let c = queue.counters().await.unwrap();
    assert_eq!(c.scheduled, 3);
    assert_eq!(c.promoted, 3);
    assert_eq!(c.lag_sum_ms, 21);
    let in_range: Vec<u64> = c.lag.iter().map(|&(_, n)| n).collect();
    assert_eq!(c.lag[2].0, Some(10));
    assert_eq!(in_range, [0, 0, 3, 0, 0, 0, 0, 0, 0]);

    // One acked, one retried, one dead.
    let mut options = WorkerOptions::default();
    options.backoff = Backoff::fixed(Duration::from_secs(1));
    let worker = queue.worker(options);
    let jobs = worker.try_claim(3).await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(worker.ack(&jobs[0]).await.unwrap());
    worker.fail(&jobs[1], "again").await.unwrap();
    let once = queue.with_max_attempts(1);
    once.schedule("d", b"x", at(T0)).await.unwrap();
    let last = worker.try_claim(1).await.unwrap();
    worker.fail(&last[0], "no").await.unwrap();
    let c = queue.counters().await.unwrap();
    assert_eq!(
        (c.scheduled, c.delivered, c.acked, c.retried, c.died),
        (4, 4, 1, 1, 1),
        "{c:?}"
    );
}

/// A script a leader or worker runs that raises (here: `ready` holds a string) changes
/// nothing and cannot count itself; the process that met it counts it in the queue, with
/// the message, for `/metrics` and the dashboard.
#[tokio::test]
async fn script_failures_met_by_leaders_and_workers_are_counted_in_the_queue() {
    let server = RedisServer::start();
    let queue = Queue::connect(&server.url(), "failing").await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue.schedule("due", b"x", at(T0)).await.unwrap();
    queue.schedule("later", b"x", at(T0 + 100)).await.unwrap();
    let mut admin = server.admin().await;
    let ready = "tickless:{failing}:ready";
    let _: () = redis::pipe()
        .del(ready)
        .set(ready, "not a list")
        .query_async(&mut admin)
        .await
        .unwrap();
    queue
        .advance_manual_clock(Duration::from_millis(200))
        .await
        .unwrap();
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    let counted = loop {
        let c = queue.counters().await.unwrap();
        if c.script_errors > 0 {
            break c;
        }
        assert!(std::time::Instant::now() < give_up, "never counted: {c:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let message = counted.last_script_error.unwrap();
    assert!(
        message.contains(ready) && message.contains("garbage"),
        "{message}"
    );
    // Stopped while its rounds fail, it returns why.
    let err = leader.stop().await.unwrap_err();
    assert!(err.is_garbage(), "{err}");
    let by_leader = queue.counters().await.unwrap().script_errors;

    // A worker's claim meets it too: counted, then `run` ends on the garbage.
    let worker = queue.worker(WorkerOptions::default());
    let err = worker
        .run(|_job| async { Ok::<(), std::io::Error>(()) })
        .await
        .unwrap_err();
    assert!(err.is_garbage(), "{err}");
    assert_eq!(queue.counters().await.unwrap().script_errors, by_leader + 1);
}
