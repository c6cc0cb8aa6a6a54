//! Durable jobs against a real `redis-server`: scheduling, delivery, acks, retries,
//! cancel and reschedule, leadership, and bad input.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, SystemTime};
use support::{queue_name, RedisServer};
use tickless::durable::{Backoff, Failed, JobState, LeaderOptions, Queue, WorkerOptions};

async fn queue(server: &RedisServer, test: &str) -> Queue {
    Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect")
}

fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

const T0: u64 = 1_700_000_000_000;

#[tokio::test]
async fn scheduled_job_is_delivered_after_its_due_time_and_not_before() {
    let server = RedisServer::start();
    let queue = queue(&server, "due").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    assert!(queue
        .schedule("a", b"payload", at(T0 + 5_000))
        .await
        .unwrap());
    let mut leader = queue.leader(LeaderOptions::default());
    let worker = queue.worker(WorkerOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    assert!(worker.try_claim(10).await.unwrap().is_empty());
    queue
        .advance_manual_clock(Duration::from_millis(4_999))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert!(
        worker.try_claim(10).await.unwrap().is_empty(),
        "one millisecond early"
    );
    queue
        .advance_manual_clock(Duration::from_millis(1))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let jobs = worker.try_claim(10).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id(), "a");
    assert_eq!(jobs[0].payload(), b"payload");
    assert_eq!(jobs[0].attempt(), 1);
    assert_eq!(jobs[0].due(), at(T0 + 5_000));
    assert!(worker.ack(&jobs[0]).await.unwrap());
    assert!(queue.job("a").await.unwrap().is_none());
}
