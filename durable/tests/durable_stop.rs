//! Stopping a worker with `Worker::run_until`, against a real `redis-server` and no
//! leader (so nothing but the stop itself can bring a job back from flight): a clean
//! stop acks every handler that ran and leaves nothing in flight; a stop at its deadline
//! cancels the handlers still running and gives their jobs back; a stop that comes
//! while a claim is on its way gives that claim's jobs back unstarted.

use tickless_test_support as support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{queue_name, RedisServer};
use tickless_durable::{Queue, Stopped, When, WorkerOptions};
use tokio::sync::{mpsc, oneshot};

async fn queue(server: &RedisServer, test: &str) -> Queue {
    Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect")
}

/// Schedules `ids`, due now: ready on arrival.
async fn schedule_now(queue: &Queue, ids: &[String]) {
    let jobs = ids
        .iter()
        .map(|id| (id.as_str(), b"".as_slice(), When::After(Duration::ZERO)));
    queue.schedule_batch(jobs).await.expect("schedule");
}

/// Waits for `n` ids on `rx`, each within `limit`; what they were.
async fn receive(rx: &mut mpsc::UnboundedReceiver<String>, n: usize, what: &str) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    while ids.len() < n {
        let id = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: {} of {n} within 10 s each", ids.len()))
            .expect("the handlers are gone");
        ids.push(id);
    }
    ids
}

/// The ready jobs, taken by another worker: their ids and attempts.
async fn drain(queue: &Queue) -> Vec<(String, u32)> {
    let worker = queue.worker(WorkerOptions::default());
    let mut seen = Vec::new();
    loop {
        let jobs = worker.try_claim(1000).await.expect("claim");
        if jobs.is_empty() {
            return seen;
        }
        for job in &jobs {
            assert!(worker.ack(job).await.expect("ack"), "{}", job.id());
        }
        seen.extend(jobs.iter().map(|j| (j.id().to_string(), j.attempt())));
    }
}

/// `run_until`'s answer within `limit` of the stop, asked for at `asked`; how long
/// after that it came.
async fn stopped_within(
    run: tokio::task::JoinHandle<Result<Stopped, tickless_durable::Error>>,
    asked: Instant,
    limit: Duration,
) -> (Stopped, Duration) {
    let stopped = tokio::time::timeout(limit, run)
        .await
        .unwrap_or_else(|_| panic!("the worker did not stop within {limit:?} of the stop"))
        .expect("the worker's task")
        .expect("run_until");
    (stopped, asked.elapsed())
}

/// 3,000 jobs, 32 handlers at a time of 1 to 5 ms each; the stop comes once 500 have
/// started. Every handler that started finishes and its ack reaches Redis; none is in
/// flight after; the others are ready, none lost, their attempt not counted (a job of a
/// claim on its way at the stop was given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_acks_every_handler_that_ran_and_leaves_nothing_in_flight() {
    const JOBS: usize = 3_000;
    let server = RedisServer::start();
    let queue = queue(&server, "clean-stop").await;
    let ids: Vec<String> = (0..JOBS).map(|i| format!("job:{i}")).collect();
    schedule_now(&queue, &ids).await;

    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let finished = Arc::new(Mutex::new(Vec::new()));
    let done = finished.clone();
    let (stop, shutdown) = oneshot::channel::<()>();
    let run = tokio::spawn(queue.worker(WorkerOptions::default()).run_until(
        move |job| {
            let (started, done) = (started_tx.clone(), done.clone());
            async move {
                let id = job.id().to_string();
                let _ = started.send(id.clone());
                let ms = 1 + id.len() as u64 % 5;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                done.lock().unwrap().push(id);
                Ok::<(), String>(())
            }
        },
        shutdown,
    ));
    let mut started = receive(&mut started_rx, 500, "handlers started before the stop").await;
    let asked = Instant::now();
    stop.send(()).unwrap();
    let (stopped, took) = stopped_within(run, asked, Duration::from_secs(10)).await;
    eprintln!("clean stop: {stopped:?} in {took:?}");

    assert_eq!((stopped.cancelled, stopped.left_in_flight), (0, 0));
    // Every handler that started has sent its id by now: it finished.
    while let Ok(id) = started_rx.try_recv() {
        started.push(id);
    }
    let finished = finished.lock().unwrap().clone();
    let started: BTreeSet<String> = started.into_iter().collect();
    assert_eq!(
        finished.iter().cloned().collect::<BTreeSet<_>>(),
        started,
        "a handler that started did not finish"
    );
    let stats = queue.stats().await.unwrap();
    let counters = queue.counters().await.unwrap();
    assert_eq!(stats.in_flight, 0, "left in flight by a clean stop");
    assert_eq!(counters.acked as usize, finished.len(), "acks not sent");
    assert_eq!(stats.ready as usize, JOBS - finished.len(), "jobs lost");

    let rest = drain(&queue).await;
    let rest_ids: BTreeSet<String> = rest.iter().map(|(id, _)| id.clone()).collect();
    let all: BTreeSet<String> = ids.into_iter().collect();
    assert_eq!(&rest_ids | &started, all, "a job neither handled nor ready");
    assert!(
        rest_ids.is_disjoint(&started),
        "a handled job is ready again"
    );
    assert!(
        rest.iter().all(|(_, attempt)| *attempt == 1),
        "a job given back had its attempt counted"
    );
}

/// Marks a handler's future dropped (cancelled) when it is.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// 8 handlers that never end among 400 of 1 ms, 16 at a time, a 300 ms timeout and a
/// lease of 30 s: at the deadline the 8 are cancelled (their futures dropped) and their
/// jobs given back, ready at once (not when the lease ends) with their attempt not
/// counted; the short ones that ran were acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_at_its_deadline_cancels_the_handlers_still_running_and_gives_their_jobs_back() {
    let server = RedisServer::start();
    let queue = queue(&server, "deadline-stop").await;
    let stuck: Vec<String> = (0..8).map(|i| format!("stuck:{i}")).collect();
    let quick: Vec<String> = (0..400).map(|i| format!("quick:{i}")).collect();
    // The ready list is first in, first out: the stuck ones are claimed first.
    schedule_now(&queue, &stuck).await;
    schedule_now(&queue, &quick).await;

    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let (dropped, acked) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (dropped_in, acked_in) = (dropped.clone(), acked.clone());
    let mut options = WorkerOptions::default();
    options.concurrency = 16;
    options.shutdown_timeout = Duration::from_millis(300);
    let (stop, shutdown) = oneshot::channel::<()>();
    let run = tokio::spawn(queue.worker(options).run_until(
        move |job| {
            let (started, dropped, acked) =
                (started_tx.clone(), dropped_in.clone(), acked_in.clone());
            async move {
                if job.id().starts_with("stuck:") {
                    let _guard = Dropped(dropped);
                    let _ = started.send(job.id().to_string());
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                acked.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        },
        shutdown,
    ));
    receive(&mut started_rx, stuck.len(), "stuck handlers started").await;
    let asked = Instant::now();
    stop.send(()).unwrap();
    let (stopped, took) = stopped_within(run, asked, Duration::from_secs(5)).await;
    eprintln!("deadline stop: {stopped:?} in {took:?}");

    assert!(
        took >= Duration::from_millis(300),
        "stopped before its deadline: {took:?}"
    );
    assert_eq!((stopped.cancelled, stopped.left_in_flight), (8, 0));
    assert!(stopped.given_back >= 8, "{stopped:?}");
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        8,
        "a stuck handler was not cancelled"
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.in_flight, 0, "given back, not left to its lease");
    let counters = queue.counters().await.unwrap();
    assert_eq!(counters.acked as usize, acked.load(Ordering::SeqCst));

    let rest = drain(&queue).await;
    for id in &stuck {
        assert!(
            rest.contains(&(id.clone(), 1)),
            "{id} not ready again at its first attempt: {rest:?}"
        );
    }
    assert_eq!(
        rest.len() + acked.load(Ordering::SeqCst),
        stuck.len() + quick.len(),
        "jobs lost or handled twice"
    );
}

/// A stop that has come by the time a claim answers: that claim's jobs are given back
/// before any handler starts on them.
#[tokio::test]
async fn a_stop_that_comes_during_a_claim_gives_its_jobs_back_unstarted() {
    let server = RedisServer::start();
    let queue = queue(&server, "claim-stop").await;
    let ids: Vec<String> = (0..5).map(|i| format!("job:{i}")).collect();
    schedule_now(&queue, &ids).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let ran_in = ran.clone();
    let run = tokio::spawn(queue.worker(WorkerOptions::default()).run_until(
        move |_job| {
            ran_in.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), String>(()) }
        },
        // Over before the first claim is sent; looked at once that claim has answered.
        std::future::ready(()),
    ));
    let (stopped, _) = stopped_within(run, Instant::now(), Duration::from_secs(5)).await;
    assert_eq!(
        (
            stopped.given_back,
            stopped.cancelled,
            stopped.left_in_flight
        ),
        (5, 0, 0)
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a handler started");
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.ready, stats.in_flight), (5, 0));
}
