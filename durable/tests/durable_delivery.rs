//! Deliveries against a real `redis-server`: each claim's own number, which acks,
//! failure reports, extensions and give backs match on; records of the format before
//! numbers; a worker that meets a job it cannot hand to a handler.

use tickless_test_support as support;

use std::time::Duration;
use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{Failed, JobState, LeaderOptions, Queue, When, WorkerOptions};

async fn queue(server: &RedisServer, test: &str) -> Queue {
    Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect")
}

/// The case: a job cancelled in flight, scheduled again under the same id and
/// delivered again; the first handler's late ack and failure report must not touch the
/// second delivery (both have attempt 1: only the delivery tells them apart).
#[tokio::test]
async fn a_late_ack_of_a_cancelled_delivery_does_not_complete_the_next() {
    let server = RedisServer::start();
    let queue = queue(&server, "late-ack").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    queue
        .schedule("order", b"v1", Duration::ZERO)
        .await
        .unwrap();
    let first = worker.try_claim(1).await.unwrap().remove(0);
    assert!(queue.cancel("order").await.unwrap(), "cancelled in flight");
    queue
        .schedule("order", b"v2", Duration::ZERO)
        .await
        .unwrap();
    let second = worker.try_claim(1).await.unwrap().remove(0);
    assert_eq!((first.attempt(), second.attempt()), (1, 1));
    assert_eq!(second.payload(), b"v2");

    assert!(
        !worker.ack(&first).await.unwrap(),
        "the first delivery's late ack completed the second"
    );
    let info = queue.job("order").await.unwrap().expect("still there");
    assert_eq!(info.state, JobState::InFlight);
    assert_eq!(
        worker.fail(&first, "late failure").await.unwrap(),
        Failed::LeaseLost,
        "the first delivery's late failure report moved the second"
    );
    let info = queue.job("order").await.unwrap().expect("still there");
    assert_eq!((info.state, info.last_error), (JobState::InFlight, None));

    assert!(
        worker.ack(&second).await.unwrap(),
        "its own ack completes it"
    );
    assert!(queue.job("order").await.unwrap().is_none());
    assert_eq!(queue.stats().await.unwrap().in_flight, 0);
}

/// Extensions match on the delivery too, and any number of them can be sent (more than
/// one script call takes).
#[tokio::test]
async fn extend_keeps_only_deliveries_that_hold_their_job_and_takes_any_number() {
    let server = RedisServer::start();
    let queue = queue(&server, "extend").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(30);
    let worker = queue.worker(options);

    // A stale delivery does not keep the new one's lease.
    queue.schedule("x", b"", Duration::ZERO).await.unwrap();
    let first = worker.try_claim(1).await.unwrap().remove(0);
    assert!(queue.cancel("x").await.unwrap());
    queue.schedule("x", b"", Duration::ZERO).await.unwrap();
    let second = worker.try_claim(1).await.unwrap().remove(0);
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(worker.extend([&first]).await.unwrap(), 0);
    let info = queue.job("x").await.unwrap().unwrap();
    assert_eq!(
        info.lease_ends,
        Some(at(T0 + 30_000)),
        "extended by a stale delivery"
    );
    assert_eq!(worker.extend([&second]).await.unwrap(), 1);
    let info = queue.job("x").await.unwrap().unwrap();
    assert_eq!(info.lease_ends, Some(at(T0 + 40_000)));
    assert!(worker.ack(&second).await.unwrap());

    // 10,001 deliveries: more than one call's most (10,000).
    let n = 10_001;
    let ids: Vec<String> = (0..n).map(|i| format!("j{i}")).collect();
    for chunk in ids.chunks(2_000) {
        let jobs = chunk
            .iter()
            .map(|id| (id.as_str(), &b""[..], When::After(Duration::ZERO)));
        queue.schedule_batch(jobs).await.unwrap();
    }
    let mut claimed = worker.try_claim(10_000).await.unwrap();
    claimed.extend(worker.try_claim(10).await.unwrap());
    assert_eq!(claimed.len(), n);
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(worker.extend(&claimed).await.unwrap(), n);
    for job in [&claimed[0], &claimed[n - 1]] {
        let info = queue.job(job.id()).await.unwrap().unwrap();
        assert_eq!(info.lease_ends, Some(at(T0 + 50_000)), "{}", job.id());
    }
}

/// A record written before deliveries had numbers (`s` alone in flight) is not lost:
/// no number matches it, and when its lease ends it is delivered again, with a number.
#[tokio::test]
async fn an_in_flight_record_of_the_old_format_is_delivered_again_at_lease_end() {
    let server = RedisServer::start();
    let name = queue_name("old-format");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    let mut conn = server.admin().await;
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
    let ends = T0 + 1_000;
    let _: () = redis::pipe()
        .hset(key("jobs"), "old", format!("{T0}|s|1|5|0|old payload"))
        .zadd(key("flight"), "old", ends)
        .zadd(key("due"), "l", ends)
        .query_async(&mut conn)
        .await
        .unwrap();
    let info = queue.job("old").await.unwrap().expect("readable");
    assert_eq!((info.state, info.attempts), (JobState::InFlight, 1));

    queue
        .advance_manual_clock(Duration::from_millis(1_000))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    let job = worker.try_claim(1).await.unwrap().remove(0);
    assert_eq!((job.id(), job.attempt()), ("old", 2));
    assert_eq!(job.payload(), b"old payload");
    assert!(worker.ack(&job).await.unwrap());
    assert!(queue.job("old").await.unwrap().is_none());
}

/// A job whose id is not UTF-8 (written by something else than this crate) cannot be
/// handed to a handler: `Worker::run` sets it aside, counts it and goes on delivering.
#[tokio::test]
async fn a_worker_sets_aside_a_job_it_cannot_read_and_goes_on() {
    let server = RedisServer::start();
    let name = queue_name("worker-quarantine");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    let mut conn = server.admin().await;
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
    let bad: &[u8] = b"bad-\xff\xfe";
    let _: () = redis::pipe()
        .hset(key("jobs"), bad, "0|s|0|5|0|payload")
        .rpush(key("ready"), bad)
        .query_async(&mut conn)
        .await
        .unwrap();
    queue.schedule("before", b"", Duration::ZERO).await.unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(job.id().to_string());
            Ok::<(), std::io::Error>(())
        }
    }));
    assert_eq!(next(&mut rx, "the job beside the bad one").await, "before");
    queue.schedule("after", b"", Duration::ZERO).await.unwrap();
    assert_eq!(next(&mut rx, "a job scheduled later").await, "after");
    assert!(!run.is_finished(), "the worker ended: {:?}", run.await);
    run.abort();

    let dead: Option<f64> = redis::cmd("ZSCORE")
        .arg(key("dead"))
        .arg(bad)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(dead.is_some(), "the bad job is not in the dead set");
    let error: String = redis::cmd("HGET")
        .arg(key("errors"))
        .arg(bad)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        error.contains("not UTF-8") && error.contains(&key("jobs")),
        "{error}"
    );
    let counters = queue.counters().await.unwrap();
    assert_eq!((counters.quarantined, counters.died), (1, 0));
    let in_flight: Option<f64> = redis::cmd("ZSCORE")
        .arg(key("flight"))
        .arg(bad)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(in_flight, None, "the bad job is still in flight");
}

/// A delivery given back is ready again at once (no leader runs here to end a lease),
/// and its attempt is not counted; the given-back delivery then holds nothing: a second
/// give back, an ack or a failure report of it does nothing.
#[tokio::test]
async fn a_delivery_given_back_is_ready_at_once_and_its_attempt_not_counted() {
    let server = RedisServer::start();
    let queue = queue(&server, "give-back").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    for id in ["a", "b"] {
        queue.schedule(id, b"p", Duration::ZERO).await.unwrap();
    }
    let first = worker.try_claim(10).await.unwrap();
    let twice = [&first[0], &first[1], &first[0]];
    assert_eq!(
        worker.give_back(twice).await.unwrap(),
        2,
        "a delivery named twice is given back once"
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.ready, stats.in_flight), (2, 0));
    let info = queue.job("a").await.unwrap().expect("still there");
    assert_eq!((info.state, info.attempts), (JobState::Ready, 0));

    assert_eq!(worker.give_back(&first).await.unwrap(), 0);
    assert!(!worker.ack(&first[0]).await.unwrap());
    assert_eq!(
        worker.fail(&first[1], "late").await.unwrap(),
        Failed::LeaseLost
    );

    let again = worker.try_claim(10).await.unwrap();
    let seen: Vec<(&str, u32, &[u8])> = again
        .iter()
        .map(|j| (j.id(), j.attempt(), j.payload()))
        .collect();
    assert_eq!(seen, [("a", 1, &b"p"[..]), ("b", 1, &b"p"[..])]);
    assert!(again[0].delivery() > first[1].delivery());
    for job in &again {
        assert!(worker.ack(job).await.unwrap(), "{}", job.id());
    }
    assert_eq!(queue.stats().await.unwrap().in_flight, 0);
}

/// The next id a handler saw, waiting at most 10 s for it.
async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, what: &str) -> String {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap_or_else(|_| panic!("no delivery of {what} within 10 s"))
        .expect("the worker's handler is gone")
}
