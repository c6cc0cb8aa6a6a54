//! Redis away for 9 s under a leader and a worker of this process.

use std::collections::BTreeSet;
use std::time::Duration;
use tickless_durable::Queue;
use tickless_test_support::{self as support, RedisServer};

/// A long outage (9 s): the leader and the worker keep trying (every 100 ms while Redis
/// is away) and carry on when Redis is back.
pub fn leader_and_worker_ride_out_a_long_redis_outage() {
    support::multi_thread().block_on(async {
        use tickless_durable::{LeaderOptions, When, WorkerOptions};
        let mut server = RedisServer::start();
        let queue = Queue::connect(&server.url(), "outage").await.unwrap();
        let n = 300;
        let ids: Vec<String> = (0..n).map(|i| format!("j{i}")).collect();
        let jobs = ids.iter().enumerate().map(|(i, id)| {
            (
                id.as_str(),
                b"".as_slice(),
                When::After(Duration::from_millis(500 + 20 * i as u64)),
            )
        });
        queue.schedule_batch(jobs).await.unwrap();
        let leader = queue.leader(LeaderOptions::default()).spawn();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut options = WorkerOptions::default();
        options.lease = Duration::from_secs(2);
        let worker = tokio::spawn(queue.worker(options).run(move |job| {
            let _ = tx.send((job.id().to_string(), job.claimed_at() >= job.due()));
            async { Ok::<(), std::io::Error>(()) }
        }));
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.kill();
        tokio::time::sleep(Duration::from_secs(9)).await;
        server.restart();
        let mut seen = BTreeSet::new();
        while seen.len() < n {
            let (id, on_time) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("every job after the outage")
                .unwrap();
            assert!(on_time, "{id} early");
            seen.insert(id);
        }
        assert!(leader.stats().leading);
        worker.abort();
    })
}
