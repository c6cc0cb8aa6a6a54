//! Scripts that change nothing or finish, and the repair pass: every key of a queue
//! corrupted in turn while jobs are due, with every role running against it.

use tickless_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{Job, JobState, LeaderOptions, Queue, When, WorkerOptions};

async fn cmd<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(conn)
        .await
        .unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

/// Every key of queue `name` and its `DUMP`: what "changes nothing" compares.
async fn snapshot(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
) -> BTreeMap<String, Vec<u8>> {
    let keys: Vec<String> = cmd(conn, &["KEYS", &format!("tickless:{{{name}}}:*")]).await;
    let mut out = BTreeMap::new();
    for key in keys {
        let dump: Vec<u8> = cmd(conn, &["DUMP", &key]).await;
        out.insert(key, dump);
    }
    out
}

/// The roles that must fail, for each key corrupted (S: scheduler, L: leader, W: worker).
/// A role that does not touch the key goes on (`dead` is touched only by the cancel of
/// a dead job, `errors` by that cancel and by the leader's note on an ended lease).
const CASES: &[(&str, &str)] = &[
    ("meta", "SLW"),
    ("jobs", "SLW"),
    ("due", "SLW"),
    ("ready", "SLW"),
    ("flight", "LW"),
    ("dead", "S"),
    ("errors", "SL"),
    ("bucket", "L"),
    ("recur", "L"),
    ("rnext", "L"),
    ("rlow", "L"),
];

/// A key of the queue replaced by a string while jobs are due: each role that touches it
/// fails with an error naming it and changes nothing, the others go on, the leader keeps
/// running; then the key is restored (`jobs`, `meta`, `flight`, `recur`: data nobody
/// else has, kept aside with RENAME) or deleted (the rest: repair rebuilds them from the
/// records, or they held nothing a job needs), `Queue::repair` runs, and every job is
/// delivered as the oracle says: each once, none early, none lost, none cancelled, the
/// dead job still dead.
#[tokio::test]
async fn every_key_corrupted_in_turn_stops_only_its_users_and_repair_loses_no_job() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    for &(corrupt, must_fail) in CASES {
        let name = queue_name(&format!("corrupt-{corrupt}"));
        let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
        let queue = Queue::connect(&server.url(), &name).await.unwrap();
        queue.set_manual_clock(Some(at(T0))).await.unwrap();
        // A lease of a day: the manual clock's jumps do not end it.
        let mut options = LeaderOptions::default();
        options.busy_lease = Duration::from_secs(86_400);
        options.idle_lease = options.busy_lease;
        let mut leader = queue.leader(options);
        leader.step().await.unwrap();
        let mut worker_options = WorkerOptions::default();
        worker_options.lease = Duration::from_secs(200);
        let worker = queue.worker(worker_options);
        // In flight (its lease ends at T0 + 200 s), dead, ready, staged, in buckets.
        let mut due: BTreeMap<&str, u64> = BTreeMap::new();
        for (id, ms) in [("flying", T0), ("doomed", T0)] {
            let q = if id == "doomed" {
                queue.with_max_attempts(1)
            } else {
                queue.clone()
            };
            assert!(q.schedule(id, b"", at(ms)).await.unwrap());
            let claimed = worker.try_claim(1).await.unwrap();
            assert_eq!(claimed[0].id(), id);
            if id == "doomed" {
                worker.fail(&claimed[0], "boom").await.unwrap();
            }
        }
        due.insert("flying", T0);
        for (id, ms) in [
            ("ready1", T0),
            ("staged", T0 + 100),
            ("cancel-me", T0 + 2_000),
            ("near", T0 + 5_000),
            ("far", T0 + 200_000),
            ("later", T0 + 400_000),
        ] {
            assert!(queue.schedule(id, b"", at(ms)).await.unwrap());
            due.insert(id, ms);
        }
        queue
            .every("tick", Duration::from_secs(1), b"")
            .await
            .unwrap();
        queue
            .cron("nightly", "0 2 * * *", "UTC", b"")
            .await
            .unwrap();
        assert_eq!(
            queue.job("doomed").await.unwrap().unwrap().state,
            JobState::Dead
        );
        queue
            .advance_manual_clock(Duration::from_secs(300))
            .await
            .unwrap();
        let now = T0 + 300_000;

        // The corruption.
        let bad = if corrupt == "bucket" {
            let buckets: Vec<String> = cmd(&mut admin, &["KEYS", &key("b:*")]).await;
            let mut holding = Vec::new();
            for b in buckets {
                let far: bool = cmd(&mut admin, &["SISMEMBER", &b, "far"]).await;
                if far {
                    holding.push(b);
                }
            }
            assert_eq!(holding.len(), 1, "{holding:?}");
            holding.remove(0)
        } else {
            key(corrupt)
        };
        let aside = format!("{bad}.aside");
        let keep = ["meta", "jobs", "flight", "recur"].contains(&corrupt);
        // `rlow` is empty here (the cron schedule knows enough occurrences): a string
        // in its place is what a leader meets all the same.
        let exists: bool = cmd(&mut admin, &["EXISTS", &bad]).await;
        assert!(exists || corrupt == "rlow", "{corrupt}: nothing to corrupt");
        if keep {
            let _: () = cmd(&mut admin, &["RENAME", &bad, &aside]).await;
        } else {
            let _: () = cmd(&mut admin, &["DEL", &bad]).await;
        }
        let _: () = cmd(&mut admin, &["SET", &bad, "x"]).await;

        // Every role, one call at a time: an error names the key and changed nothing.
        let mut failed = String::new();
        let mut scheduled = Vec::new();
        let mut cancelled = Vec::new();
        let mut early_claims: Vec<Job> = Vec::new();
        for (role, call) in [
            ('S', "schedule ready"),
            ('S', "schedule far"),
            ('S', "cancel cancel-me"),
            ('S', "cancel doomed"),
            ('L', "step"),
            ('W', "claim"),
        ] {
            let before = snapshot(&mut admin, &name).await;
            let result = match call {
                "schedule ready" => queue
                    .schedule("s-ready", b"", at(now))
                    .await
                    .map(|added| scheduled.extend(added.then_some(("s-ready", now)))),
                "schedule far" => queue
                    .schedule("s-far", b"", at(now + 500_000))
                    .await
                    .map(|added| scheduled.extend(added.then_some(("s-far", now + 500_000)))),
                "cancel cancel-me" | "cancel doomed" => {
                    let id = call.strip_prefix("cancel ").unwrap();
                    queue
                        .cancel(id)
                        .await
                        .map(|gone| cancelled.extend(gone.then_some(id)))
                }
                "step" => leader.step().await,
                _ => worker
                    .try_claim(20)
                    .await
                    .map(|jobs| early_claims.extend(jobs)),
            };
            if let Err(err) = result {
                assert!(err.is_garbage(), "{corrupt}, {call}: {err}");
                assert!(err.to_string().contains(&bad), "{corrupt}, {call}: {err}");
                let after = snapshot(&mut admin, &name).await;
                assert!(
                    before == after,
                    "{corrupt}, {call}: failed and changed the queue"
                );
                if !failed.contains(role) {
                    failed.push(role);
                }
            }
        }
        assert_eq!(failed, must_fail, "{corrupt}: the roles that failed");

        // The leader, running, counts the error and goes on.
        let handle = leader.spawn();
        if must_fail.contains('L') {
            let give_up = Instant::now() + Duration::from_secs(10);
            while handle.stats().errors == 0 {
                assert!(Instant::now() < give_up, "{corrupt}: no error seen");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(handle.last_error().unwrap().contains(&bad), "{corrupt}");
        }

        // Restored or deleted, then repaired.
        let _: () = cmd(&mut admin, &["DEL", &bad]).await;
        if keep {
            let _: () = cmd(&mut admin, &["RENAME", &aside, &bad]).await;
        }
        // The operator's command for one key, the API for the others.
        if corrupt == "ready" {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
                .args(["repair", &server.url(), &name])
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{said} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // At least ready1, which was there before the running leader could move more.
            let placed: u64 = said.split(' ').next().unwrap().parse().unwrap();
            assert!(placed > 0 && said.contains(" put back, "), "{said}");
        } else {
            let repaired = queue.repair().await.unwrap();
            if ["due", "dead", "bucket", "rnext"].contains(&corrupt) {
                assert!(repaired.placed > 0, "{corrupt}: {repaired:?}");
            }
        }
        // A second on: a schedule whose next occurrences were lost counts on from the
        // repair, so its next one is a period later.
        queue
            .advance_manual_clock(Duration::from_secs(1))
            .await
            .unwrap();

        // Delivery, by the oracle.
        let mut expected: BTreeMap<&str, u64> = due
            .iter()
            .filter(|(id, ms)| **ms <= now && !cancelled.contains(id))
            .map(|(id, ms)| (*id, *ms))
            .collect();
        expected.extend(scheduled.iter().filter(|(_, ms)| *ms <= now).copied());
        let mut delivered: BTreeMap<String, u32> = BTreeMap::new();
        let check = |job: &Job, delivered: &mut BTreeMap<String, u32>| {
            assert!(
                job.claimed_at() >= job.due(),
                "{corrupt}: {} early",
                job.id()
            );
            if let Some(&ms) = expected.get(job.id()) {
                assert_eq!(job.due(), at(ms), "{corrupt}: {}'s due time", job.id());
            }
            *delivered.entry(job.id().to_string()).or_default() += 1;
        };
        for job in &early_claims {
            check(job, &mut delivered);
            worker.ack(job).await.unwrap();
        }
        let give_up = Instant::now() + Duration::from_secs(10);
        let wanted: BTreeSet<&str> = expected.keys().copied().collect();
        loop {
            for job in worker.try_claim(20).await.unwrap() {
                check(&job, &mut delivered);
                worker.ack(&job).await.unwrap();
            }
            let got: BTreeSet<&str> = delivered
                .keys()
                .map(String::as_str)
                .filter(|id| !id.contains('@'))
                .collect();
            if got == wanted {
                break;
            }
            assert!(
                Instant::now() < give_up && got.is_subset(&wanted),
                "{corrupt}: delivered {got:?}, expected {wanted:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Once each (the recurring schedule's occurrences too), nothing else.
        tokio::time::sleep(Duration::from_millis(100)).await;
        for job in worker.try_claim(20).await.unwrap() {
            check(&job, &mut delivered);
        }
        for (id, n) in &delivered {
            assert_eq!(*n, 1, "{corrupt}: {id} delivered {n} times");
        }
        assert!(
            delivered.keys().any(|id| id.starts_with("tick@")),
            "{corrupt}: the recurring schedule ran no occurrence: {delivered:?}"
        );
        let doomed = queue.job("doomed").await.unwrap();
        if cancelled.contains(&"doomed") {
            assert!(doomed.is_none(), "{corrupt}");
        } else {
            assert_eq!(doomed.unwrap().state, JobState::Dead, "{corrupt}");
            assert_eq!(queue.dead(0, 10).await.unwrap().len(), 1, "{corrupt}");
        }
        assert_eq!(
            queue.job("later").await.unwrap().unwrap().state,
            JobState::Scheduled,
            "{corrupt}"
        );
        // A second pass finds nothing to fix.
        assert_eq!(
            queue.repair().await.unwrap(),
            Default::default(),
            "{corrupt}"
        );
        handle.stop().await.unwrap();
    }
}

/// A leader with a lease of a day (the manual clock's jumps do not end it), led.
async fn day_leader(queue: &Queue) -> tickless_durable::Leader {
    let mut options = LeaderOptions::default();
    options.busy_lease = Duration::from_secs(86_400);
    options.idle_lease = options.busy_lease;
    let mut leader = queue.leader(options);
    leader.step().await.unwrap();
    leader
}

fn ids(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(|j| j.id().to_string()).collect()
}

/// `ready` deleted by hand: the skip counts of jobs elsewhere (a ready job rescheduled
/// later keeps one stale entry counted) and of tombstones no longer match it. Repair
/// corrects them and removes the tombstone, so the rescheduled job is delivered when
/// due and a job scheduled again under the cancelled one's id is delivered at once.
#[tokio::test]
async fn repair_after_ready_is_deleted_corrects_the_stale_counts_of_jobs_elsewhere() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let name = queue_name("skip");
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut leader = day_leader(&queue).await;
    assert!(queue.schedule("moved", b"", at(T0)).await.unwrap());
    assert!(queue.reschedule("moved", at(T0 + 10_000)).await.unwrap());
    assert!(queue.schedule("gone", b"", at(T0)).await.unwrap());
    assert!(queue.cancel("gone").await.unwrap());
    let _: i64 = cmd(&mut admin, &["DEL", &key("ready")]).await;
    let repaired = queue.repair().await.unwrap();
    assert_eq!((repaired.placed, repaired.removed), (1, 1), "{repaired:?}");
    let tomb: Option<String> = cmd(&mut admin, &["HGET", &key("jobs"), "gone"]).await;
    assert_eq!(tomb, None);
    assert!(queue.schedule("gone", b"", at(T0)).await.unwrap());
    let worker = queue.worker(WorkerOptions::default());
    assert_eq!(ids(&worker.try_claim(10).await.unwrap()), ["gone"]);
    queue.set_manual_clock(Some(at(T0 + 10_000))).await.unwrap();
    leader.step().await.unwrap();
    assert_eq!(ids(&worker.try_claim(10).await.unwrap()), ["moved"]);
    assert_eq!(queue.repair().await.unwrap(), Default::default());
}

/// A cron schedule whose `rnext` entry and `due` member are both lost: repair counts
/// it on from now and wakes the leader (an idle one would sleep on), whose next tick
/// has its occurrences computed.
#[tokio::test]
async fn repair_of_a_cron_schedule_that_lost_its_times_wakes_the_leader_to_compute_them() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let name = queue_name("cron-lost");
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue.cron("c", "* * * * *", "UTC", b"").await.unwrap();
    let mut leader = day_leader(&queue).await;
    leader.step().await.unwrap();
    let _: i64 = cmd(&mut admin, &["HDEL", &key("rnext"), "c"]).await;
    let _: i64 = cmd(&mut admin, &["ZREM", &key("due"), "rc"]).await;
    queue.repair().await.unwrap();
    // Woken now: a script that wakes the leader earlier than it is armed for lowers
    // `armed` and publishes that time (lib/batch.lua's flush).
    let armed: String = cmd(&mut admin, &["HGET", &key("meta"), "armed"]).await;
    assert_eq!(armed, T0.to_string());
    leader.step().await.unwrap();
    let next: String = cmd(&mut admin, &["HGET", &key("rnext"), "c"]).await;
    assert!(
        next.starts_with(&format!("{T0}:{},", T0 + 40_000)),
        "{next}"
    );
    let head: Vec<String> = cmd(&mut admin, &["ZRANGE", &key("due"), "0", "0"]).await;
    assert_eq!(head, ["rc"]);
}

/// A queue in every healthy state (ready, staged, in buckets, in flight, dead, a job
/// rescheduled out of `ready` and a tombstone with stale entries, schedules of both
/// kinds, one of them with no occurrence left): repair finds nothing to fix, and
/// changes nothing.
#[tokio::test]
async fn repair_of_a_healthy_queue_fixes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let name = queue_name("healthy");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut leader = day_leader(&queue).await;
    let worker = queue.worker(WorkerOptions::default());
    for id in ["flying", "doomed"] {
        let q = if id == "doomed" {
            queue.with_max_attempts(1)
        } else {
            queue.clone()
        };
        assert!(q.schedule(id, b"", at(T0)).await.unwrap());
        let claimed = worker.try_claim(1).await.unwrap();
        if id == "doomed" {
            worker.fail(&claimed[0], "boom").await.unwrap();
        }
    }
    for (id, ms) in [
        ("ready", T0),
        ("moved", T0),
        ("gone", T0),
        ("staged", T0 + 100),
        ("near", T0 + 5_000),
        ("far", T0 + 400_000),
    ] {
        assert!(queue.schedule(id, b"", at(ms)).await.unwrap());
    }
    assert!(queue.reschedule("moved", at(T0 + 60_000)).await.unwrap());
    assert!(queue.cancel("gone").await.unwrap());
    queue
        .every("e", Duration::from_secs(30), b"")
        .await
        .unwrap();
    queue.cron("c", "* * * * *", "UTC", b"").await.unwrap();
    leader.step().await.unwrap();
    let before = snapshot(&mut admin, &name).await;
    assert_eq!(queue.repair().await.unwrap(), Default::default());
    assert_eq!(snapshot(&mut admin, &name).await, before);
}

/// Repair while a worker claims and acks 20,000 jobs at full speed and a scheduler
/// schedules, cancels and reschedules beside it, with leaderships changing hands (each
/// new leader repairs at takeover): every repair call succeeds and finds nothing to fix,
/// no leader fails a call, and every job not cancelled is delivered. Records acked
/// between the Rust side reading a page of ids and the script running once failed the
/// `ready` step (`attempt to index local 'j' (a boolean value)`: 43 of 45 calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_while_workers_ack_at_full_speed_finds_nothing_and_never_fails() {
    const JOBS: usize = 20_000;
    let server = RedisServer::start();
    let name = queue_name("busy-repair");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    let leader_options = || {
        let mut options = LeaderOptions::default();
        options.busy_lease = Duration::from_millis(200);
        options
    };
    let mut leader = Some(queue.leader(leader_options()).spawn());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut worker_options = WorkerOptions::default();
    worker_options.concurrency = 64;
    let worker = tokio::spawn(queue.worker(worker_options).run(move |job| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(job.id().to_string());
            Ok::<(), std::io::Error>(())
        }
    }));
    // Scheduled in batches spread over the first 2 s; the scheduler's side traffic
    // (schedules, cancels, reschedules of its own ids) runs until the end.
    let batches = (0..JOBS / 500).map(|b| {
        let jobs: Vec<(String, Vec<u8>, Duration)> = (0..500)
            .map(|i| {
                let n = b * 500 + i;
                (
                    format!("j{n}"),
                    Vec::new(),
                    Duration::from_millis((n / 10) as u64),
                )
            })
            .collect();
        jobs
    });
    for jobs in batches {
        let jobs = jobs
            .iter()
            .map(|(id, p, d)| (id.as_str(), p.as_slice(), When::After(*d)));
        queue.schedule_batch(jobs).await.unwrap();
    }
    let side = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut cancelled = BTreeSet::new();
            for n in 0.. {
                let id = format!("s{n}");
                queue.schedule(&id, b"", Duration::from_millis(50)).await?;
                if n % 3 == 0 && queue.cancel(&id).await? {
                    cancelled.insert(id.clone());
                } else if n % 3 == 1 {
                    queue.reschedule(&id, Duration::from_millis(10)).await?;
                }
                if n % 64 == 0 {
                    tokio::task::yield_now().await;
                }
                if n >= 1_500 {
                    break;
                }
            }
            Ok::<_, tickless_durable::Error>(cancelled)
        })
    };

    let limit = Instant::now() + Duration::from_secs(120);
    let mut delivered = BTreeSet::new();
    let mut repairs = 0;
    let mut takeovers = 0;
    let mut leader_errors = 0;
    while delivered.len() < JOBS || !side.is_finished() {
        assert!(
            Instant::now() < limit,
            "all {JOBS} jobs delivered within 120 s: {} were, after {repairs} repairs",
            delivered.len()
        );
        let found = queue
            .repair()
            .await
            .unwrap_or_else(|err| panic!("repair call {repairs} under load failed: {err}"));
        assert_eq!(
            found,
            Default::default(),
            "repair call {repairs} found something to fix"
        );
        repairs += 1;
        if repairs % 5 == 0 {
            // A new leadership, which repairs at takeover while the worker acks.
            let old = leader.take().unwrap();
            leader_errors += old.stats().errors;
            if let Some(err) = old.last_error() {
                panic!("leader {takeovers} failed a call under load: {err}");
            }
            old.stop().await.unwrap();
            leader = Some(queue.leader(leader_options()).spawn());
            takeovers += 1;
        }
        while let Ok(id) = rx.try_recv() {
            if id.starts_with('j') {
                delivered.insert(id);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cancelled = side.await.unwrap().unwrap();
    let old = leader.take().unwrap();
    leader_errors += old.stats().errors;
    assert_eq!(old.last_error(), None, "the last leader failed a call");
    old.stop().await.unwrap();
    worker.abort();
    assert_eq!(leader_errors, 0, "leader calls failed under load");
    assert!(
        repairs >= 10 && takeovers >= 2,
        "{repairs} repairs, {takeovers} takeovers: too few to say"
    );
    assert!(
        cancelled.len() > 250,
        "{} side jobs cancelled",
        cancelled.len()
    );
    println!(
        "{repairs} repairs and {takeovers} takeovers while {JOBS} jobs were acked: none failed"
    );
}
