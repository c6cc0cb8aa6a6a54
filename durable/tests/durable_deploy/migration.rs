//! A queue's slot migrated key by key (as `redis-cli --cluster reshard` does) while its
//! jobs flow and schedules keep coming: every job delivered once, none early, and a
//! schedule refused only for what a half-moved slot explains.

use super::cluster::{
    assert_each_once, assert_none_early, assert_same_clock, run_queues, schedule_spread,
};
use std::time::{Duration, Instant, SystemTime};
use tickless_durable::{ConnectOptions, WorkerOptions};
use tickless_test_support::RedisCluster;

/// What a slot being migrated answers a script whose keys are split between the two
/// nodes: `ASK` (the keys went to the target), `TRYAGAIN` (some went, some did not), and,
/// from inside a script, a key it did not declare (a bucket's) already on the target.
/// The `redis` crate follows `ASK` and retries `TRYAGAIN` itself (`retries(6)`, backing
/// off), so these reach the caller only when a slot stays split longer than that. Each
/// as Redis names it and as the crate's error kind shows it.
fn migration_explains(message: &str) -> Option<&'static str> {
    [
        ("TRYAGAIN", "TRYAGAIN"),
        ("TryAgain:", "TRYAGAIN"),
        ("ASK ", "ASK"),
        ("Ask:", "ASK"),
        ("non local key", "non local key"),
    ]
    .into_iter()
    .find(|(shown, _)| message.contains(shown))
    .map(|(_, kind)| kind)
}

/// The most schedules sent again in one migration: 0 in 74 runs of 75 here, 1 (a
/// `TRYAGAIN` past the client's retries) in the other. A client that stopped following
/// `ASK` and `TRYAGAIN` itself would pass them all on.
const MOST_RESENT: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_key_by_key_while_jobs_flow_loses_none() {
    let cluster = RedisCluster::start(3, 0);
    assert_same_clock(&cluster);
    let names = vec!["moving".to_string(), "staying".to_string()];
    let options = ConnectOptions::cluster(cluster.seeds());
    let mut running = run_queues(&options, &names, WorkerOptions::default()).await;
    // Jobs due over 4 s: staged ones and level-0 buckets.
    let mut due = schedule_spread(&running.queues, 60, Duration::from_secs(4)).await;
    let before = running
        .take(
            20,
            Duration::from_secs(20),
            "20 deliveries before the migration",
        )
        .await;
    let slot = cluster.slot_of("tickless:{moving}:meta");
    let from = cluster.master_of_slot(slot);
    let to = *cluster.masters().iter().find(|m| **m != from).unwrap();
    let migrate = tokio::task::spawn_blocking(move || {
        cluster.migrate_slot(slot, from, to, 1);
        cluster
    });
    // Schedules keep coming while the keys move.
    let moving = running.queues[0].clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut more, mut resent) = (0, Vec::new());
    while !migrate.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the slot's migration did not finish within 60 s"
        );
        let id = format!("during{more}");
        let delay = Duration::from_millis(more % 3 * 700);
        let asked = SystemTime::now();
        // Idempotent on the id: a schedule refused while the slot is half moved is sent
        // again, and only then.
        loop {
            let result =
                tokio::time::timeout(Duration::from_secs(10), moving.schedule(&id, b"x", delay))
                    .await
                    .unwrap_or_else(|_| panic!("{id}: a schedule not answered within 10 s"));
            match result {
                Ok(_) => break,
                Err(err) if err.is_redis() && migration_explains(&err.to_string()).is_some() => {
                    resent.push(migration_explains(&err.to_string()).unwrap());
                    assert!(
                        resent.len() <= MOST_RESENT,
                        "more than {MOST_RESENT} schedules refused: {resent:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(err) => panic!("{id}: refused with what no migration explains: {err}"),
            }
        }
        due.insert(("moving".to_string(), id), asked + delay);
        more += 1;
    }
    let cluster = migrate.await.unwrap();
    assert_eq!(cluster.master_of_slot(slot), to, "the slot moved");
    // Once moved, a schedule goes through at once.
    let asked = SystemTime::now();
    assert!(running.queues[0]
        .schedule("after", b"x", Duration::ZERO)
        .await
        .expect("a schedule once the slot has moved"));
    due.insert(("moving".to_string(), "after".to_string()), asked);
    let mut all = running
        .until_delivered(&due, Duration::from_secs(30), before)
        .await;
    running.until_empty(Duration::from_secs(10)).await;
    all.extend(running.drain());
    assert_none_early(&all, &due);
    assert_each_once(&all);
    eprintln!(
        "migration: {more} jobs scheduled while the slot moved, {} calls sent again: {resent:?}",
        resent.len()
    );
    running.stop().await;
}
