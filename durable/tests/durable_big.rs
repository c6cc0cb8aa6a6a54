//! Big batches against a real `redis-server`, on the queue's manual clock: a claim, a
//! tick, an extend, a `cancel_batch`, a recurring schedule's catch-up and a repair pass
//! of 4,000 or more jobs, past the ~8,000 values Lua 5.1's `unpack` takes (two per job
//! in most writes), move every job and strand none; batch sizes above the most one script
//! call takes (10,000) are clamped, not sent. What each script call carried is read back
//! from Redis's `SLOWLOG` (every command logged), not taken from the library.

use tickless_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{CatchUp, Job, Leader, LeaderOptions, Queue, Worker, WorkerOptions};

/// More jobs than one unpack of two values per job takes (~8,000 values).
const MANY: usize = 4100;

async fn queue(server: &RedisServer, test: &str) -> Queue {
    let queue = Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect");
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue
}

/// Schedules `ids`, each due at `due(i)`.
async fn schedule(queue: &Queue, ids: &[String], due: impl Fn(usize) -> u64) {
    let jobs = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), b"", at(due(i)).into()));
    let added = queue.schedule_batch(jobs).await.unwrap();
    assert!(added.iter().all(|&a| a));
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("j{i}")).collect()
}

/// A leader ticking up to `batch` jobs per call, whose lease outlives any manual clock
/// move of these tests.
async fn leader(queue: &Queue, batch: usize) -> Leader {
    let mut options = LeaderOptions::default();
    options.busy_lease = Duration::from_secs(86_400);
    options.idle_lease = options.busy_lease;
    options.batch = batch;
    let mut leader = queue.leader(options);
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    leader
}

fn llen(server: &RedisServer, queue: &Queue, key: &str) -> usize {
    let key = format!("tickless:{{{}}}:{key}", queue.name());
    let command = if key.ends_with(":ready") {
        "LLEN"
    } else {
        "ZCARD"
    };
    server.cli(&[command, &key]).trim().parse().unwrap()
}

/// The most jobs one script call takes (contract.rs's `MAX_BATCH`).
const MAX_BATCH: usize = 10_000;

/// One script call as Redis logged it (`EVALSHA`/`EVAL`/`FCALL` and their `_RO` forms:
/// a name or hash, the number of keys, the keys, then `ARGV`), of which the `ARGV`.
#[derive(Debug)]
struct ScriptCall {
    /// How many `ARGV` values it carried.
    argv_len: usize,
    /// The first of them (the log keeps 32 arguments of a command in all).
    argv: Vec<String>,
}

/// Makes Redis log every command from now on (`SLOWLOG` with a threshold of 0), from an
/// empty log.
async fn log_every_command(admin: &mut redis::aio::MultiplexedConnection) {
    for (name, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "1000000"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(admin)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(admin)
        .await
        .unwrap();
}

/// The script calls Redis logged since [`log_every_command`], oldest first; the log is
/// emptied.
async fn script_calls(admin: &mut redis::aio::MultiplexedConnection) -> Vec<ScriptCall> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(admin)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(admin)
        .await
        .unwrap();
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let mut calls = Vec::new();
    for entry in entries.iter().rev() {
        let redis::Value::Array(fields) = entry else {
            panic!("a SLOWLOG entry: {entry:?}")
        };
        let redis::Value::Array(args) = &fields[3] else {
            panic!("a SLOWLOG entry's arguments: {entry:?}")
        };
        let mut args: Vec<String> = args.iter().map(text).collect();
        let command = args[0].to_uppercase();
        if ![
            "EVALSHA",
            "EVAL",
            "FCALL",
            "EVALSHA_RO",
            "EVAL_RO",
            "FCALL_RO",
        ]
        .contains(&command.as_str())
        {
            continue;
        }
        // The log keeps 31 arguments and then `... (N more arguments)`.
        let mut total = args.len();
        if let Some(more) = args.last().and_then(|last| {
            last.strip_prefix("... (")?
                .strip_suffix(" more arguments)")?
                .parse::<usize>()
                .ok()
        }) {
            args.pop();
            total = args.len() + more;
        }
        let numkeys: usize = args[2].parse().unwrap();
        calls.push(ScriptCall {
            argv_len: total - 3 - numkeys,
            argv: args[3 + numkeys..].to_vec(),
        });
    }
    calls
}

/// Claims every ready job, `MAX_BATCH` at a time: the ids, each with how often it came.
async fn claim_all(worker: &Worker) -> BTreeMap<String, usize> {
    let mut got = BTreeMap::new();
    loop {
        let jobs = worker.try_claim(MAX_BATCH).await.unwrap();
        if jobs.is_empty() {
            return got;
        }
        for job in jobs {
            *got.entry(job.id().to_string()).or_default() += 1;
        }
    }
}

/// Claims `n` jobs a thousand at a time (below any limit), for the tests of what follows.
async fn claim_in_thousands(worker: &Worker, n: usize) -> Vec<Job> {
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(worker.try_claim(1000).await.unwrap());
    }
    assert_eq!(got.len(), n);
    got
}

/// One claim of 4,100 ready jobs takes them all. (It used to take `ready` apart and then
/// fail writing the records, 8,200 values in one unpack: every popped job stranded.)
#[tokio::test]
async fn a_claim_of_4100_jobs_takes_every_one() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigclaim").await;
    let all = ids(MANY);
    schedule(&queue, &all, |_| T0).await;
    let worker = queue.worker(WorkerOptions::default());
    let jobs = worker.try_claim(MANY).await.unwrap();
    let got: BTreeSet<&str> = jobs.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
    assert_eq!(llen(&server, &queue, "ready"), 0);
    assert_eq!(llen(&server, &queue, "flight"), MANY);
}

/// A tick whose batch takes 4,100 ended leases puts every job back in `ready`, and each
/// is delivered again. (It used to take them out of `flight` and then fail writing their
/// notes to `errors`: every one stranded, a batch more at each retry.)
#[tokio::test]
async fn a_tick_of_4100_ended_leases_delivers_every_job_again() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigtick").await;
    let all = ids(MANY);
    schedule(&queue, &all, |_| T0).await;
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(10);
    let worker = queue.worker(options);
    claim_in_thousands(&worker, MANY).await;
    let mut leader = leader(&queue, 5000).await;
    queue
        .advance_manual_clock(Duration::from_secs(20))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(llen(&server, &queue, "flight"), 0);
    assert_eq!(llen(&server, &queue, "ready"), MANY);
    let again = worker.try_claim(MANY).await.unwrap();
    assert!(again.iter().all(|j| j.attempt() == 2));
    let got: BTreeSet<&str> = again.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
}

/// A tick that drains 17 due buckets of 256 jobs (4,352 jobs, more than 16 buckets' worth
/// of records in one write) promotes every job. (It used to empty the buckets and then
/// fail writing the records.)
#[tokio::test]
async fn a_tick_draining_17_full_buckets_promotes_every_job() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigdrain").await;
    let all = ids(17 * 256);
    // Bucket k's jobs at T0 + 2048 + k * 1024: 17 level-0 buckets of 256 jobs (past the
    // staged window, within T0's level-1 bucket).
    schedule(&queue, &all, |i| T0 + 2048 + (i as u64 / 256) * 1024).await;
    assert_eq!(llen(&server, &queue, "due"), 17);
    let mut leader = leader(&queue, 5000).await;
    queue
        .advance_manual_clock(Duration::from_secs(30))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(llen(&server, &queue, "ready"), all.len());
    let worker = queue.worker(WorkerOptions::default());
    let jobs = worker.try_claim(all.len()).await.unwrap();
    let got: BTreeSet<&str> = jobs.iter().map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
}

/// One extend of 4,100 running jobs extends every lease. (It used to fail outright:
/// 8,200 values in one unpack.)
#[tokio::test]
async fn extending_4100_running_jobs_extends_every_lease() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigextend").await;
    let all = ids(MANY);
    schedule(&queue, &all, |_| T0).await;
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(10);
    let worker = queue.worker(options);
    let jobs = claim_in_thousands(&worker, MANY).await;
    queue
        .advance_manual_clock(Duration::from_secs(9))
        .await
        .unwrap();
    let extended = worker.extend(&jobs).await.unwrap();
    assert_eq!(extended, MANY);
    // Every lease now ends at T0 + 19 s: none has ended at T0 + 15 s.
    let mut leader = leader(&queue, 5000).await;
    queue
        .advance_manual_clock(Duration::from_secs(6))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(llen(&server, &queue, "flight"), MANY);
    assert_eq!(llen(&server, &queue, "ready"), 0);
}

/// A claim of `usize::MAX` and a leader batch of `usize::MAX` are clamped to what one
/// script call takes, and work: with more jobs than that (10,050), each tick call takes
/// 10,000 (its `limit` as Redis logged it) and the leader calls again for the rest; a
/// claim takes exactly 10,000, the next one the other 50. (They used to be sent as is,
/// and refused by Redis; a test of 3 jobs passed whatever the clamp.)
#[tokio::test]
async fn batches_above_the_most_a_call_takes_are_clamped() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let queue = queue(&server, "clamped").await;
    let all = ids(MAX_BATCH + 50);
    // Due over 8 s, in level-0 buckets past the staged window.
    schedule(&queue, &all, |i| T0 + 2048 + (i as u64 % 8) * 1024).await;
    let mut leader = leader(&queue, usize::MAX).await;
    let token = queue.stats().await.unwrap().token.to_string();
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    log_every_command(&mut admin).await;
    leader.step().await.unwrap();
    // The tick calls: `ARGV` is the leader's token and the limit.
    let limits: Vec<String> = script_calls(&mut admin)
        .await
        .into_iter()
        .filter(|c| c.argv_len == 2 && c.argv[0] == token)
        .map(|c| c.argv[1].clone())
        .filter(|limit| limit.parse::<u64>().is_ok())
        .collect();
    assert!(
        limits.len() >= 2,
        "one tick call cannot move them all: {limits:?}"
    );
    assert!(
        limits.iter().all(|l| l == "10000"),
        "tick limits {limits:?}"
    );
    assert_eq!(llen(&server, &queue, "ready"), all.len());
    let mut options = WorkerOptions::default();
    options.concurrency = usize::MAX;
    let worker = queue.worker(options);
    let first = worker.try_claim(usize::MAX).await.unwrap();
    assert_eq!(
        first.len(),
        MAX_BATCH,
        "one claim takes the most a call takes"
    );
    let rest = worker.try_claim(usize::MAX).await.unwrap();
    assert_eq!(rest.len(), 50);
    let got: BTreeSet<&str> = first.iter().chain(&rest).map(|j| j.id()).collect();
    assert_eq!(got, all.iter().map(String::as_str).collect());
}

/// A `cancel_batch` of 10,120 ids (4,100 jobs in one bucket, 6,000 ready, 10 unknown ids,
/// 10 given twice): every job is removed wherever it was, the answers come in order
/// (`false` for an unknown id and a repeat), and no script call carried more than the
/// 128 ids `cancel_batch` promises (Redis's own log of the calls), so no call comes near
/// the unpack limit whatever the batch.
#[tokio::test]
async fn a_cancel_batch_of_10_120_ids_removes_every_job_128_ids_per_call() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let queue = queue(&server, "bigcancel").await;
    let in_bucket = ids(4100);
    let ready: Vec<String> = (0..6000).map(|i| format!("r{i}")).collect();
    schedule(&queue, &in_bucket, |_| T0 + 5_000).await;
    schedule(&queue, &ready, |_| T0).await;
    assert_eq!(llen(&server, &queue, "due"), 1, "one bucket");
    let unknown: Vec<String> = (0..10).map(|i| format!("nope{i}")).collect();
    let mut given: Vec<&str> = in_bucket.iter().chain(&ready).map(String::as_str).collect();
    // Unknown ids and repeats in the middle, across script calls and pipelines.
    let repeats: Vec<&str> = given[..10].to_vec();
    for (i, id) in unknown
        .iter()
        .map(String::as_str)
        .chain(repeats)
        .enumerate()
    {
        given.insert(4096 + i * 300, id);
    }
    let expected: Vec<bool> = {
        let mut seen = BTreeSet::new();
        given
            .iter()
            .map(|id| !id.starts_with("nope") && seen.insert(*id))
            .collect()
    };
    // Redis knows the script already: a first pipeline refused `NOSCRIPT` would be
    // logged, and sent again, too.
    assert!(!queue.cancel("not-a-job").await.unwrap());
    log_every_command(&mut admin).await;
    let answers = queue.cancel_batch(given.iter().copied()).await.unwrap();
    let calls = script_calls(&mut admin).await;
    assert_eq!(answers, expected);
    let sizes: Vec<usize> = calls.iter().map(|c| c.argv_len).collect();
    assert_eq!(sizes.iter().sum::<usize>(), given.len(), "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 128), "{sizes:?}");
    // Nothing left: no bucket, no `due` member, no job to claim now or later.
    assert_eq!(llen(&server, &queue, "due"), 0);
    let buckets = server.cli(&["KEYS", &format!("tickless:{{{}}}:b:*", queue.name())]);
    assert_eq!(buckets.trim(), "", "bucket keys left");
    let worker = queue.worker(WorkerOptions::default());
    assert!(worker.try_claim(MAX_BATCH).await.unwrap().is_empty());
    let mut leader = leader(&queue, MAX_BATCH).await;
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert!(worker.try_claim(MAX_BATCH).await.unwrap().is_empty());
    let jobs = format!("tickless:{{{}}}:jobs", queue.name());
    assert_eq!(server.cli(&["HLEN", &jobs]).trim(), "0", "records left");
}

/// An `every` schedule with `CatchUp::Burst` that missed 8,200 occurrences while no
/// leader ran: one tick call (a batch of 10,000) makes all 8,200 jobs, more than one
/// `unpack` of their ids takes, each once, none early, and the schedule counts on from
/// the last.
#[tokio::test]
async fn a_burst_catch_up_of_8200_occurrences_makes_each_job_once() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigburst").await;
    queue
        .with_catch_up(CatchUp::Burst)
        .every("e", Duration::from_secs(1), b"")
        .await
        .unwrap();
    let mut leader = leader(&queue, MAX_BATCH).await;
    let missed = 8200;
    queue
        .advance_manual_clock(Duration::from_secs(missed))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    let mut got = BTreeMap::new();
    loop {
        let jobs = worker.try_claim(MAX_BATCH).await.unwrap();
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            assert!(job.due() <= job.claimed_at(), "{} early", job.id());
            *got.entry(job.id().to_string()).or_insert(0) += 1;
        }
    }
    let want: BTreeMap<String, usize> = (1..=missed)
        .map(|i| (format!("e@{}", T0 + i * 1000), 1))
        .collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let next = queue.schedules().await.unwrap()[0].next;
    assert_eq!(next, Some(at(T0 + (missed + 1) * 1000)));
}

/// A repair pass over more than a page of everything: 10,350 ready jobs of which the
/// last 300 lost their entries (`ready` still longer than one 10,000-entry read), and a
/// bucket of 4,100 jobs deleted. Every lost job is put back once: each of the 14,450
/// jobs is claimed exactly once, and a second pass finds nothing to fix.
#[tokio::test]
async fn a_repair_of_14450_jobs_puts_each_lost_one_back_once() {
    let server = RedisServer::start();
    let queue = queue(&server, "bigrepair").await;
    let ready: Vec<String> = (0..10_350).map(|i| format!("r{i}")).collect();
    let in_bucket = ids(4100);
    schedule(&queue, &ready, |_| T0).await;
    schedule(&queue, &in_bucket, |_| T0 + 5_000).await;
    let key = |suffix: &str| format!("tickless:{{{}}}:{suffix}", queue.name());
    assert_eq!(
        server.cli(&["LTRIM", &key("ready"), "0", "10049"]).trim(),
        "OK"
    );
    let buckets = server.cli(&["KEYS", &key("b:*")]);
    let buckets: Vec<&str> = buckets.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    assert_eq!(server.cli(&["DEL", buckets[0]]).trim(), "1");
    let repaired = queue.repair().await.unwrap();
    assert!(repaired.placed >= 4_400, "{repaired:?}");
    assert_eq!(queue.repair().await.unwrap().placed, 0, "a second pass");
    let mut leader = leader(&queue, MAX_BATCH).await;
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    let got = claim_all(&worker).await;
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let want: BTreeSet<&str> = ready.iter().chain(&in_bucket).map(String::as_str).collect();
    let got: BTreeSet<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}
