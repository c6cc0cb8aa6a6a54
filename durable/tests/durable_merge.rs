//! Concurrent single schedules of one queue are merged into batched script calls (issue
//! 28): each caller still gets its own answer, its own error, and a caller that gives up
//! disturbs no other.
//!
//! The call on its way is held by `CLIENT PAUSE WRITE` (Redis holds a script call that
//! may write until the pause ends), so the calls made meanwhile wait for the next merged
//! call whatever the host's speed; `CLIENT UNPAUSE` lets them go. A replica stopped
//! (`SIGSTOP`) holds a call's `WAIT` the same way.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime};
use tickless_durable::{ConnectOptions, Error, Queue};
use tickless_test_support::{queue_name, RedisServer};

const DUE: Duration = Duration::from_secs(3600);

async fn queue(server: &RedisServer, test: &str) -> Queue {
    let queue = Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect");
    // The script loaded and the keys made, then the counts start from zero.
    queue.schedule("warm", "", DUE).await.expect("warm");
    server.cli(&["CONFIG", "RESETSTAT"]);
    queue
}

/// `EVALSHA` calls since the last `CONFIG RESETSTAT`.
fn script_calls(server: &RedisServer) -> u64 {
    tickless_test_support::calls_of(&server.cli(&["INFO", "commandstats"]), &["evalsha"])
}

/// Pauses the server's writes (scripts included) until [`unpause`].
fn pause(server: &RedisServer) {
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]).trim(),
        "OK"
    );
}

fn unpause(server: &RedisServer) {
    assert_eq!(server.cli(&["CLIENT", "UNPAUSE"]).trim(), "OK");
}

/// Polls `call` once, so that it has started (taken the queue's call on its way, or
/// joined the next merged one), and gives it back.
async fn started<F: Future + Unpin>(mut call: F) -> F {
    let first = tokio::time::timeout(Duration::ZERO, &mut call).await;
    assert!(first.is_err(), "the call answered while writes were paused");
    call
}

/// Spawns a schedule of `id`, polled once (so that it has started).
async fn spawn_one(queue: &Queue, id: &str) -> tokio::task::JoinHandle<Result<bool, Error>> {
    let (queue, id) = (queue.clone(), id.to_string());
    tokio::spawn(started(Box::pin(async move { queue.schedule(&id, "", DUE).await })).await)
}

/// Spawns one schedule per id, each polled once before the next is made (so all have
/// joined before the server is let go); their answers, by spawn order.
async fn spawn_all(
    queue: &Queue,
    ids: &[String],
) -> Vec<tokio::task::JoinHandle<Result<bool, Error>>> {
    let mut tasks = Vec::new();
    for id in ids {
        let (queue, id) = (queue.clone(), id.clone());
        let call = Box::pin(async move { queue.schedule(&id, id.as_bytes(), DUE).await });
        let call = started(call).await;
        tasks.push(tokio::spawn(call));
    }
    tasks
}

async fn answers(
    tasks: Vec<tokio::task::JoinHandle<Result<bool, Error>>>,
) -> Vec<Result<bool, Error>> {
    let mut out = Vec::new();
    for task in tasks {
        let answer = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("a merged schedule's answer within 20 s")
            .expect("a caller task");
        out.push(answer);
    }
    out
}

fn jobs_key(queue: &Queue) -> String {
    format!("tickless:{{{}}}:jobs", queue.name())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_schedules_are_merged_and_each_caller_gets_its_own_answer() {
    let server = RedisServer::start();
    let queue = queue(&server, "merged").await;
    // 300 calls: 250 ids, 50 of them named by two callers one after the other (so both
    // are in one merged call).
    let mut ids: Vec<String> = Vec::new();
    for i in 0..250 {
        ids.push(format!("m{i}"));
        if i % 5 == 1 {
            ids.push(format!("m{i}"));
        }
    }
    pause(&server);
    let tasks = spawn_all(&queue, &ids).await;
    unpause(&server);
    let answers = answers(tasks).await;
    let mut added: HashMap<&str, usize> = HashMap::new();
    for (id, answer) in ids.iter().zip(&answers) {
        let answer = answer.as_ref().unwrap_or_else(|e| panic!("{id}: {e}"));
        *added.entry(id).or_default() += usize::from(*answer);
    }
    // Each id added once, whichever of its callers was told `true`.
    assert_eq!(added.len(), 250);
    assert!(added.values().all(|&n| n == 1), "{added:?}");
    let jobs = server.cli(&["HLEN", &jobs_key(&queue)]);
    assert_eq!(jobs.trim(), "251", "250 and the warm-up job");
    // One call on its way, the 299 that came meanwhile in merged calls of at most 128.
    let calls = script_calls(&server);
    assert_eq!(calls, 4, "script calls for 300 schedules");
    // Each job is its own caller's.
    let payload = server.cli(&["HGET", &jobs_key(&queue), "m7"]);
    assert!(payload.trim().ends_with("|m7"), "{payload}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_job_among_merged_schedules_fails_its_own_caller_only() {
    let server = RedisServer::start();
    let queue = queue(&server, "merged-bad").await;
    // A record that is not ours: the script refuses the whole call it is in.
    server.cli(&["HSET", &jobs_key(&queue), "bad", "not a record"]);
    server.cli(&["CONFIG", "RESETSTAT"]);
    let mut ids: Vec<String> = (0..20).map(|i| format!("g{i}")).collect();
    ids.insert(10, "bad".to_string());
    pause(&server);
    let mut tasks = spawn_all(&queue, &ids).await;
    // An id refused before anything is sent, while the others wait.
    let invalid = queue.schedule("", "x", DUE).await.unwrap_err();
    assert!(invalid.is_invalid_id(), "{invalid}");
    // More calls after the bad one in the same merged call.
    let more: Vec<String> = (20..40).map(|i| format!("g{i}")).collect();
    tasks.extend(spawn_all(&queue, &more).await);
    ids.extend(more);
    unpause(&server);
    let answers = answers(tasks).await;
    for (id, answer) in ids.iter().zip(&answers) {
        match (id.as_str(), answer) {
            ("bad", Err(err)) => assert!(err.is_garbage(), "{err}"),
            ("bad", Ok(added)) => panic!("bad was {added}"),
            (id, Ok(added)) => assert!(added, "{id}"),
            (id, Err(err)) => panic!("{id}: {err}"),
        }
    }
    let jobs = server.cli(&["HLEN", &jobs_key(&queue)]);
    assert_eq!(
        jobs.trim(),
        "42",
        "40 good, the warm-up job and the bad record"
    );
    // The first alone, then one merged call of the 40 others, refused and so changing
    // nothing, then each of its 40 alone.
    let calls = script_calls(&server);
    assert_eq!(calls, 1 + 1 + 40, "script calls for 41 schedules");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_caller_loses_no_other_callers_answer() {
    let server = RedisServer::start();
    let queue = queue(&server, "merged-drop").await;
    pause(&server);
    // The call on its way: its caller gives up while Redis holds it.
    let first = started(Box::pin(queue.schedule("first", "", DUE))).await;
    let ids: Vec<String> = (0..30).map(|i| format!("d{i}")).collect();
    let tasks = spawn_all(&queue, &ids[..15]).await;
    // A waiting caller gives up before its job is sent.
    let gone = started(Box::pin(queue.schedule("gone", "", DUE))).await;
    drop(gone);
    let more = spawn_all(&queue, &ids[15..]).await;
    drop(first);
    unpause(&server);
    for (id, answer) in ids
        .iter()
        .zip(answers(tasks.into_iter().chain(more).collect()).await)
    {
        assert!(answer.unwrap_or_else(|e| panic!("{id}: {e}")), "{id}");
    }
    let key = jobs_key(&queue);
    // The waiting caller that gave up had its job not sent.
    assert_eq!(server.cli(&["HEXISTS", &key, "gone"]).trim(), "0");
    // The dropped call on its way had reached Redis: it ran.
    assert_eq!(server.cli(&["HEXISTS", &key, "first"]).trim(), "1");
    // Merged: not one call each.
    let calls = script_calls(&server);
    assert_eq!(calls, 2, "script calls for 31 schedules");
    // And the queue is idle again: a lone call goes at once and is answered.
    assert!(queue.schedule("after", "", DUE).await.expect("after"));
}

/// The runtime that holds the call on its way and the ones waiting shuts down: the
/// queue is not left busy with no one to send its calls, and a later call from another
/// runtime goes and is answered.
#[test]
fn a_runtime_shut_down_with_calls_waiting_leaves_the_queue_usable() {
    let server = RedisServer::start();
    let main = tickless_test_support::multi_thread();
    let queue = main.block_on(queue(&server, "merged-runtime"));
    let other = tickless_test_support::multi_thread();
    pause(&server);
    other.block_on(async {
        let q = queue.clone();
        let first = started(Box::pin(async move { q.schedule("first", "", DUE).await })).await;
        tokio::spawn(first);
        let ids: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
        spawn_all(&queue, &ids).await
    });
    // Every task of `other` dropped: the one whose call is on its way among them.
    drop(other);
    unpause(&server);
    let after = main.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), queue.schedule("after", "", DUE)).await
    });
    let after =
        after.expect("a lone schedule answered within 10 s after the other runtime shut down");
    assert!(after.expect("after"));
}

/// The first caller's call is on its way and held for a measured time (writes paused);
/// each merged caller asked for a delay of its own. Each job is due its own delay after
/// its own call: not after the merged call was sent (the time it waited is not added),
/// and not the first caller's delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_schedules_are_due_their_own_delay_after_their_own_call() {
    // Long enough that a delay counted from the send, not the call, is plainly late.
    const HOLD: Duration = Duration::from_secs(1);
    let server = RedisServer::start();
    let queue = queue(&server, "merged-due").await;
    pause(&server);
    let first = spawn_one(&queue, "first").await;
    // Delays 60 s, 67 s, ...: no two alike, none the first caller's.
    let mut asked = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..12u64 {
        let (id, delay) = (format!("t{i}"), Duration::from_secs(60 + 7 * i));
        let q = queue.clone();
        let call_id = id.clone();
        let before = SystemTime::now();
        let call = Box::pin(async move { q.schedule(&call_id, "", delay).await });
        let call = started(call).await;
        let after = SystemTime::now();
        tasks.push(tokio::spawn(call));
        asked.push((id, delay, before, after));
    }
    tokio::time::sleep(HOLD).await;
    // Before the merged call is sent (after the call on its way has run), and after its
    // script read Redis's clock.
    let unpaused = SystemTime::now();
    unpause(&server);
    first.await.unwrap().expect("the call on its way answered");
    let answers = answers(tasks).await;
    let answered = SystemTime::now();
    for (answer, (id, ..)) in answers.into_iter().zip(&asked) {
        assert!(answer.unwrap_or_else(|e| panic!("{id}: {e}")), "{id}");
    }
    assert_eq!(script_calls(&server), 2, "one call on its way, one merged");
    // The merged call's script read Redis's clock at most this long after the driver read
    // its own (which counts the wait off): a due time counted from the call is late by no
    // more than that.
    let trip = answered.duration_since(unpaused).unwrap();
    assert!(
        trip < HOLD,
        "the merged call took {trip:?}, more than the hold: the test cannot tell"
    );
    for (id, delay, before, after) in &asked {
        let due = queue.job(id).await.unwrap().expect(id).due;
        // Never before the call plus its delay (the record is in whole ms, rounded up);
        // late by at most the trip (and the rounding).
        let earliest = *before + *delay - Duration::from_millis(1);
        let latest = *after + *delay + trip + Duration::from_millis(1);
        let late_ms = match due.duration_since(*before + *delay) {
            Ok(late) => late.as_millis() as i128,
            Err(early) => -(early.duration().as_millis() as i128),
        };
        assert!(
            earliest <= due && due <= latest,
            "{id}: asked {delay:?} after its call, due {late_ms} ms after that (writes held \
             {HOLD:?}, the merged call's trip {trip:?})"
        );
    }
}

/// Waits until the replica on `replica` is in sync with its master.
fn wait_in_sync(replica: &RedisServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "replica in sync within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A master with one replica in sync, and a queue on the master that waits for it
/// `timeout`.
async fn replicated(test: &str, timeout: Duration) -> (RedisServer, RedisServer, Queue) {
    // Plain whatever the variant: a TLS replica would need TLS replication, and the ACL
    // variant's user has no `+wait`. No wait before the replica's first sync (5 s by
    // default).
    let master =
        RedisServer::start_plain(&["--appendonly", "no", "--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica =
        RedisServer::start_plain(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    wait_in_sync(&replica);
    let name = queue_name(test);
    // The script loaded and the keys made (without WAIT, whose timeout may be short),
    // and on the replica.
    let warm = Queue::connect(&master.url(), &name).await.unwrap();
    warm.schedule("warm", "", DUE).await.expect("warm");
    assert_eq!(
        master.cli(&["WAIT", "1", "10000"]).trim(),
        "1",
        "warm-up replicated"
    );
    let queue = ConnectOptions::new(&master.url())
        .wait_for_replicas(1, timeout)
        .connect(&name)
        .await
        .unwrap();
    master.cli(&["CONFIG", "RESETSTAT"]);
    (master, replica, queue)
}

/// Merged schedules on a queue that waits for a replica answer only once the replica
/// has their jobs: the replica is stopped while they are sent, and none answers before
/// it goes on; then each is on the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_schedules_with_wait_answer_only_once_the_replica_has_them() {
    // The first call's WAIT ends at this timeout (the replica stopped); the merged call's
    // ends when the replica, let go, acknowledges it, well within it.
    let (master, replica, queue) = replicated("merged-wait", Duration::from_millis(1500)).await;
    replica.signal("STOP");
    let first = spawn_one(&queue, "first").await;
    let ids: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
    let tasks = spawn_all(&queue, &ids).await;
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first call's WAIT timed out within 10 s")
        .unwrap();
    assert!(first.unwrap_err().is_replication());
    // The merged call is now sent: it waits in WAIT (a blocked client), or (without WAIT)
    // its callers are answered while the replica is stopped.
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    while !tasks.iter().any(|t| t.is_finished())
        && master
            .cli(&["INFO", "clients"])
            .contains("blocked_clients:0")
    {
        assert!(
            std::time::Instant::now() < limit,
            "the merged call blocked in WAIT or answered within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let answered: Vec<&String> = ids
        .iter()
        .zip(&tasks)
        .filter(|(_, t)| t.is_finished())
        .map(|(id, _)| id)
        .collect();
    replica.signal("CONT");
    assert!(
        answered.is_empty(),
        "answered while the replica was stopped: {answered:?}"
    );
    assert_eq!(script_calls(&master), 2, "one call on its way, one merged");
    for (id, answer) in ids.iter().zip(answers(tasks).await) {
        assert!(answer.unwrap_or_else(|e| panic!("{id}: {e}")), "{id}");
        let held = replica.cli(&["HEXISTS", &jobs_key(&queue), id]);
        assert_eq!(held.trim(), "1", "{id} answered, not on the replica");
    }
}

/// No replica acknowledges a merged call in time: every caller of it is told so, not
/// only one, and the jobs are kept on the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_schedules_that_no_replica_acknowledges_each_get_the_error() {
    let (master, replica, queue) = replicated("merged-unacked", Duration::from_millis(100)).await;
    replica.signal("STOP");
    pause(&master);
    let first = spawn_one(&queue, "first").await;
    let ids: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
    let tasks = spawn_all(&queue, &ids).await;
    unpause(&master);
    let answers = answers(tasks).await;
    replica.signal("CONT");
    assert!(first.await.unwrap().unwrap_err().is_replication());
    assert_eq!(script_calls(&master), 2, "one call on its way, one merged");
    let mut wrong = Vec::new();
    for (id, answer) in ids.iter().zip(&answers) {
        match answer {
            Err(err) if err.is_replication() => {}
            other => wrong.push(format!("{id}: {other:?}")),
        }
        let kept = master.cli(&["HEXISTS", &jobs_key(&queue), id]);
        assert_eq!(kept.trim(), "1", "{id} kept on the master");
    }
    assert!(wrong.is_empty(), "not told of the replicas: {wrong:#?}");
}
