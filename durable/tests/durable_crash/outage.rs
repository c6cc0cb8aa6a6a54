//! Redis away for 9 s under a leader and a worker of this process.

use super::log::in_flight;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};
use tickless_durable::Queue;
use tickless_test_support::{self as support, RedisServer};

/// A long outage (9 s): the leader and the worker keep trying (every 100 ms while Redis
/// is away) and carry on when Redis is back. Every delivery is counted: a job comes
/// twice only if its first handler ran before the kill while its lease (2 s, shorter
/// than the outage) was live, so that the lease may have ended before the ack landed.
pub fn leader_and_worker_ride_out_a_long_redis_outage() {
    support::multi_thread().block_on(async {
        use tickless_durable::{LeaderOptions, When, WorkerOptions};
        let mut server = RedisServer::start();
        server.assert_same_clock();
        let queue = Queue::connect(&server.url(), "outage").await.unwrap();
        let n = 300;
        let ids: Vec<String> = (0..n).map(|i| format!("j{i}")).collect();
        let delay = |i: usize| Duration::from_millis(500 + 20 * i as u64);
        // The earliest each may run, by the handler's clock: the delay counted from
        // before the call (Redis receives it later).
        let asked = SystemTime::now();
        let jobs = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), b"".as_slice(), When::After(delay(i))));
        queue.schedule_batch(jobs).await.unwrap();
        let leader = queue.leader(LeaderOptions::default()).spawn();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut options = WorkerOptions::default();
        options.lease = Duration::from_secs(2);
        let worker = tokio::spawn(queue.worker(options).run(move |job| {
            let (tx, id) = (tx.clone(), job.id().to_string());
            async move {
                let _ = tx.send((id, SystemTime::now()));
                Ok::<(), std::io::Error>(())
            }
        }));
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Just before the kill: what is in flight (a job claimed between this and the
        // kill is in flight at the kill too, and told apart by its start).
        let snapshot_at = SystemTime::now();
        let flight = in_flight(&server.admin_url(), "outage");
        let killed_at = SystemTime::now();
        server.kill();
        tokio::time::sleep(Duration::from_secs(9)).await;
        server.restart();
        let restarted_at = SystemTime::now();
        let mut deliveries: Vec<(String, SystemTime)> = Vec::new();
        let mut seen = BTreeSet::new();
        while seen.len() < n {
            let delivery = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{} of {n} jobs not delivered 30 s after the outage",
                        n - seen.len()
                    )
                })
                .unwrap();
            seen.insert(delivery.0.clone());
            deliveries.push(delivery);
        }
        // Every ack landed: nothing is left to come again.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = queue.stats().await;
            if matches!(&stats, Ok(s) if s.scheduled + s.ready + s.in_flight + s.dead == 0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "jobs still held 10 s after the last delivery: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        deliveries.extend(std::iter::from_fn(|| rx.try_recv().ok()));
        let mut by_id: BTreeMap<&str, Vec<SystemTime>> = BTreeMap::new();
        for (id, started) in &deliveries {
            let i: usize = id[1..].parse().unwrap();
            assert!(
                *started >= asked + delay(i),
                "{id} started {:?} before its due time",
                (asked + delay(i)).duration_since(*started).unwrap()
            );
            by_id.entry(id).or_default().push(*started);
        }
        let mut repeated = 0;
        for (id, starts) in &by_id {
            if starts.len() == 1 {
                continue;
            }
            repeated += 1;
            assert!(
                starts.len() == 2
                    && (flight.contains(*id) || starts[0] >= snapshot_at)
                    && starts[0] < restarted_at
                    && starts[1] >= restarted_at,
                "{id} delivered {} times with no outage to explain it: {starts:?} (killed at \
                 {killed_at:?}, restarted at {restarted_at:?})",
                starts.len()
            );
        }
        assert_eq!(deliveries.len(), n + repeated);
        assert!(leader.stats().leading);
        worker.abort();
        eprintln!(
            "outage test: {n} jobs, {} deliveries, {repeated} jobs twice ({} in flight at \
             the kill)",
            deliveries.len(),
            flight.len()
        );
    })
}
