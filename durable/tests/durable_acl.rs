//! README's minimal ACL user, tested by what the queue does, not by a list of commands:
//! every role (scheduler, leader with its takeover repair and recurring refill, worker,
//! the inspecting calls, repair, retry of dead jobs, the cold tier's move, load and
//! lookups, a stream outlet) runs as exactly that user and
//! succeeds; the same roles as a user missing any one grant of README's line meet a
//! permission error in a real call (so every grant is needed, and removing one from the
//! README fails this test); README's extra grants (`+wait`, `+scan`) are needed by what it
//! says they are for. A scan of the sources adds the commands no run reaches.

use tickless_test_support as support;

#[path = "durable_acl/atomic.rs"]
mod atomic;
#[cfg(feature = "cold")]
#[path = "durable_acl/cold.rs"]
mod cold;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::{at, queue_name, readme_acl, readme_user, RedisServer, T0};
use tickless_durable::{
    CatchUp, ConnectOptions, Error, Failed, JobState, LeaderOptions, Queue, StreamOutlet,
    WorkerOptions,
};

type Admin = redis::aio::MultiplexedConnection;

/// A command of the test's own, as the default user.
async fn cmd<T: redis::FromRedisValue>(admin: &mut Admin, args: &[&str]) -> T {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(admin)
        .await
        .unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

/// Makes user `user` with `rules` (its password README's), replacing any before.
async fn set_user(admin: &mut Admin, user: &str, rules: &[String]) {
    let (_, password) = readme_user();
    let mut args = vec!["ACL", "SETUSER", user, "reset"];
    args.extend(rules.iter().map(String::as_str));
    let pass = format!(">{password}");
    args.push(&pass);
    let _: () = cmd(admin, &args).await;
}

/// README's rules without its password (which `set_user` adds).
fn readme_rules() -> Vec<String> {
    readme_acl()
        .into_iter()
        .filter(|rule| !rule.starts_with('>'))
        .collect()
}

/// The grants README says to add for some features: every `+...` in the text between
/// the ACL line's block and "A password in the URL".
fn readme_extras() -> Vec<String> {
    let readme = include_str!("../README.md");
    let acl = readme.find("ACL SETUSER app ").expect("README's ACL line");
    let from = acl + readme[acl..].find("```").expect("the end of the ACL block") + 3;
    let to = from
        + readme[from..]
            .find("A password in the URL")
            .expect("README's sentence after the extra grants");
    readme[from..to]
        .split(|c: char| c == '`' || c.is_whitespace())
        .filter(|word| word.starts_with('+') && word.len() > 1)
        .map(str::to_string)
        .collect()
}

/// The first call of a role that failed, and why.
#[derive(Debug)]
#[allow(dead_code)] // `call` and `error` are read through `Debug`, in failures.
struct Failure {
    call: String,
    error: String,
    /// A permission error ([`Error::is_permission`], or a leader's own error saying so).
    permission: bool,
}

type Step<T> = Result<T, Failure>;

/// `result` of `call`, as a step of the roles.
fn step<T>(call: &str, result: Result<T, Error>) -> Step<T> {
    result.map_err(|err| Failure {
        call: call.to_string(),
        permission: err.is_permission(),
        error: err.to_string(),
    })
}

/// `result` of `call`, which must be `Ok(true)`.
fn yes(call: &str, result: Result<bool, Error>) -> Step<()> {
    let answer = step(call, result)?;
    check(call, answer, || "answered false".into())
}

/// A check of the roles' outcome that did not hold (not a permission error).
fn check(call: &str, ok: bool, what: impl FnOnce() -> String) -> Step<()> {
    if ok {
        Ok(())
    } else {
        Err(Failure {
            call: call.to_string(),
            error: what(),
            permission: false,
        })
    }
}

/// The queue's clock, set by the test's own user: the roles' grants are the library's
/// alone (`Queue::set_manual_clock` is a test hook with commands of its own).
async fn set_clock(admin: &mut Admin, name: &str, ms: u64) {
    let meta = format!("tickless:{{{name}}}:meta");
    let _: () = cmd(admin, &["HSET", &meta, "clock", &ms.to_string()]).await;
    let channel = format!("tickless:{{{name}}}:wake");
    let _: i64 = cmd(admin, &["PUBLISH", &channel, "0 0"]).await;
}

/// Every role on queue `name` as `url`'s user, on a manual clock and then running; the
/// first call that failed. `admin` corrupts the queue where a role's path needs it
/// (repair) and sets the clock.
async fn roles(url: &str, name: &str, admin: &mut Admin) -> Step<()> {
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
    // A fresh Redis knows no script: each is loaded by the first call that needs it.
    let _: () = cmd(admin, &["SCRIPT", "FLUSH"]).await;
    #[cfg(feature = "cold")]
    cold::roles(url, name, admin).await?;
    let queue = step("connect", Queue::connect(url, name).await)?;
    set_clock(admin, name, T0).await;

    // Scheduler.
    yes("schedule", queue.schedule("a", b"1", at(T0)).await)?;
    yes("schedule", queue.schedule("b", b"2", at(T0 + 5_000)).await)?;
    yes(
        "schedule",
        queue.schedule("c", b"3", at(T0 + 3_600_000)).await,
    )?;
    yes(
        "reschedule",
        queue.reschedule("c", at(T0 + 7_200_000)).await,
    )?;
    yes("cancel", queue.cancel("c").await)?;
    let batch = [("d", b"4", at(T0).into()), ("e", b"5", at(T0).into())];
    let added = step("schedule_batch", queue.schedule_batch(batch).await)?;
    check("schedule_batch", added == [true, true], || {
        format!("{added:?}")
    })?;
    let gone = step("cancel_batch", queue.cancel_batch(["e", "nope"]).await)?;
    check("cancel_batch", gone == [true, false], || {
        format!("{gone:?}")
    })?;
    let burst = queue.with_catch_up(CatchUp::Burst);
    let minute = Duration::from_secs(60);
    step("every", burst.every("beat", minute, b"").await)?;
    step("cron", queue.cron("nightly", "0 2 * * *", "UTC", b"").await)?;
    step(
        "cron",
        burst.cron("minutely", "* * * * *", "UTC", b"").await,
    )?;

    // Stream outlet: a job due at once is appended to the queue's stream (XADD, checked
    // by the script before it writes), then due jobs go to `ready` again.
    let outlet = StreamOutlet::new(queue.default_stream_key()).with_max_len(10);
    step(
        "set_stream_outlet",
        queue.set_stream_outlet(Some(&outlet)).await,
    )?;
    yes(
        "schedule (outlet)",
        queue.schedule("out", b"", at(T0)).await,
    )?;
    let entries: i64 = cmd(admin, &["XLEN", &key("stream")]).await;
    check("schedule (outlet)", entries == 1, || {
        format!("{entries} entries in the stream")
    })?;
    let info = step("stream_info", queue.stream_info().await)?;
    let (length, groups) = info.map_or((0, 0), |i| (i.length, i.groups.len()));
    check("stream_info", (length, groups) == (1, 0), || {
        format!("stream_info saw {length} entries, {groups} groups")
    })?;
    step("set_stream_outlet", queue.set_stream_outlet(None).await)?;

    // Leader, by hand: takes the lease (and repairs in the background), ticks.
    let mut options = LeaderOptions::default();
    options.busy_lease = Duration::from_secs(86_400);
    options.idle_lease = options.busy_lease;
    let mut leader = queue.leader(options.clone());
    step("leader step", leader.step().await)?;
    check("leader step", leader.is_leading(), || "not leading".into())?;

    // Worker, by hand: claim, give back and claim again, extend, ack, fail (retried,
    // then dead), retry a dead job.
    let worker = queue.worker(WorkerOptions::default());
    let claimed = step("try_claim", worker.try_claim(10).await)?;
    let given = step("give_back", worker.give_back(&claimed).await)?;
    check("give_back", given == 2, || format!("{given} given back"))?;
    let claimed = step("try_claim", worker.try_claim(10).await)?;
    let ids: BTreeSet<&str> = claimed.iter().map(|j| j.id()).collect();
    check("try_claim", ids == BTreeSet::from(["a", "d"]), || {
        format!("{ids:?}")
    })?;
    let extended = step("extend", worker.extend(&claimed).await)?;
    check("extend", extended == 2, || format!("{extended} extended"))?;
    yes("ack", worker.ack(&claimed[0]).await)?;
    let failed = step("fail", worker.fail(&claimed[1], "retry me").await)?;
    check("fail", failed == Failed::Retried, || format!("{failed:?}"))?;
    for id in ["doomed", "dead-cancelled", "doomed2"] {
        let once = queue.with_max_attempts(1);
        step("schedule", once.schedule(id, b"", at(T0)).await)?;
        let jobs = step("try_claim", worker.try_claim(1).await)?;
        check("try_claim", jobs.len() == 1, || {
            format!("{} jobs", jobs.len())
        })?;
        let failed = step("fail", worker.fail(&jobs[0], "boom").await)?;
        check("fail", failed == Failed::Dead, || format!("{failed:?}"))?;
    }
    yes("retry_dead", queue.retry_dead("doomed").await)?;
    let retried = step("retry_dead", queue.retry_dead("a").await)?;
    check("retry_dead", !retried, || {
        "a job not dead was retried".into()
    })?;
    yes("cancel of a dead job", queue.cancel("dead-cancelled").await)?;

    // 40 minutes on: the `every` schedule catches up, the minutely cron schedule runs low
    // on known times and the leader refills it (32 known at first); the worker takes
    // whatever is ready.
    let now = T0 + 2_400_000;
    set_clock(admin, name, now).await;
    step("leader step", leader.step().await)?;
    let drained = drain(&worker).await?;
    let minutely = drained
        .iter()
        .filter(|id| id.starts_with("minutely@"))
        .count();
    check("refill", minutely == 40, || {
        format!("{minutely} minutely jobs, not 40")
    })?;

    // The inspecting calls; the counters the scripts keep count every delivery and ack
    // (2 + 2 + 3 claims and 1 ack by hand, and the drained jobs).
    let counters = step("counters", queue.counters().await)?;
    let (delivered, acked) = (7 + drained.len() as u64, 1 + drained.len() as u64);
    check(
        "counters",
        (counters.delivered, counters.acked) == (delivered, acked),
        || format!("{counters:?}, not {delivered} delivered and {acked} acked"),
    )?;
    step("stats", queue.stats().await)?;
    step("job", queue.job("b").await)?;
    step("dead", queue.dead(0, 10).await)?;
    step("due_buckets", queue.due_buckets().await)?;
    step("ready_ids", queue.ready_ids(10).await)?;
    step("in_flight_ids", queue.in_flight_ids(10).await)?;
    step("schedules", queue.schedules().await)?;
    yes("unschedule", queue.unschedule("beat").await)?;

    // Repair, with something to fix on each of its paths: a job lost from its bucket, a
    // bucket without its `due` member, a dead job out of `dead`, an unreadable record,
    // `ready` lost (a ready job and a tombstone's entry with it), entries naming no job
    // or schedule, a schedule that lost its times, `flight` without its lease marker.
    let (day, later) = (86_400_000, 40 * 86_400_000);
    step("schedule", queue.schedule("flying", b"", at(now)).await)?;
    let flying = step("try_claim", worker.try_claim(1).await)?;
    check("try_claim", flying.len() == 1, || "nothing to fly".into())?;
    step("schedule", queue.schedule("far", b"", at(T0 + day)).await)?;
    step("schedule", queue.schedule("lost", b"", at(T0 + day)).await)?;
    step(
        "schedule",
        queue.schedule("later", b"", at(T0 + later)).await,
    )?;
    step("schedule", queue.schedule("unready", b"", at(now)).await)?;
    step("schedule", queue.schedule("tomb", b"", at(now)).await)?;
    step("cancel", queue.cancel("tomb").await)?;
    // Buckets now: counted one by one.
    let (buckets, _) = step("due_buckets", queue.due_buckets().await)?;
    check(
        "due_buckets",
        buckets.iter().any(|b| b.level.is_some()),
        || format!("no bucket counted: {buckets:?}"),
    )?;
    let lost = bucket_holding(admin, name, "lost").await;
    let later_bucket = bucket_holding(admin, name, "later").await;
    for args in [
        vec!["SREM".to_string(), lost, "lost".into()],
        vec!["ZREM".into(), key("due"), bucket_member(&later_bucket)],
        vec!["ZREM".into(), key("dead"), "doomed2".into()],
        vec!["HSET".into(), key("jobs"), "junk".into(), "x".into()],
        vec!["DEL".into(), key("ready")],
        vec!["ZADD".into(), key("due"), "1".into(), "jghost".into()],
        vec!["HSET".into(), key("errors"), "ghost".into(), "x".into()],
        vec!["HSET".into(), key("rnext"), "ghost".into(), "1:2".into()],
        vec!["SADD".into(), key("rlow"), "ghost".into()],
        vec!["HDEL".into(), key("rnext"), "nightly".into()],
        vec!["ZREM".into(), key("due"), "l".into()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let _: redis::Value = cmd(admin, &args).await;
    }
    let repaired = step("repair", queue.repair().await)?;
    check(
        "repair",
        repaired.placed >= 6 && repaired.removed >= 5,
        || format!("{repaired:?}"),
    )?;
    let dead = step("job", queue.job("doomed2").await)?.map(|j| j.state);
    check("repair", dead == Some(JobState::Dead), || {
        format!("doomed2: {dead:?}")
    })?;
    yes("ack", worker.ack(&flying[0]).await)?;
    drop(leader);

    // Running, a day on (the first leader's lease has ended): a new leader takes over and
    // repairs in the background (`later`'s bucket lost its `due` member again), hears of
    // work on its channel; a worker waits in `BLMOVE`, another runs a handler.
    let _: i64 = cmd(admin, &["ZREM", &key("due"), &bucket_member(&later_bucket)]).await;
    let now = T0 + 2 * day;
    set_clock(admin, name, now).await;
    let leader = queue.leader(options).spawn();
    let limit = Duration::from_secs(10);
    let member = bucket_member(&later_bucket);
    let started = Instant::now();
    loop {
        let back: Option<f64> = cmd(admin, &["ZSCORE", &key("due"), &member]).await;
        if back.is_some() {
            break;
        }
        if leader.stats().errors > 0 || started.elapsed() > limit {
            return Err(leader_failure("takeover repair", &leader));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // `far` and `lost` (due a day on) come; then the list is empty.
    let mut gone: BTreeSet<String> = BTreeSet::new();
    while !(gone.contains("far") && gone.contains("lost")) {
        if leader.stats().errors > 0 || started.elapsed() > limit {
            return Err(leader_failure("promote far and lost", &leader));
        }
        gone.extend(drain(&worker).await?);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut waiting = queue.worker(WorkerOptions::default());
    let claim = tokio::spawn(async move { waiting.claim(1).await });
    // Blocked in Redis (or already failed), before the job comes: a limit of its own, the
    // takeover's time under load left out (it failed 2 of 9 runs at load 7-8 on 2 cores).
    let started = Instant::now();
    loop {
        let clients: String = cmd(admin, &["CLIENT", "LIST"]).await;
        if claim.is_finished() || clients.contains("cmd=blmove") {
            break;
        }
        check("claim (BLMOVE)", started.elapsed() < limit, || {
            "never blocked".into()
        })?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    step("schedule", queue.schedule("now", b"", at(now)).await)?;
    let jobs = match tokio::time::timeout(limit, claim).await {
        Err(_) => return check("claim (BLMOVE)", false, || "nothing in 10 s".into()),
        Ok(joined) => step("claim (BLMOVE)", joined.unwrap())?,
    };
    yes("ack", worker.ack(&jobs[0]).await)?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop, shutdown) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(queue.worker(WorkerOptions::default()).run_until(
        move |job| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(job.id().to_string());
                Ok::<(), String>(())
            }
        },
        shutdown,
    ));
    // Due on the queue's clock a minute on: the leader's channel and timer bring it.
    step(
        "schedule",
        queue.schedule("ran", b"", at(now + 60_000)).await,
    )?;
    set_clock(admin, name, now + 60_000).await;
    let delivered = tokio::time::timeout(limit, async {
        while let Some(id) = rx.recv().await {
            if id == "ran" {
                return true;
            }
        }
        false
    })
    .await;
    let _ = stop.send(());
    let stopped = match tokio::time::timeout(limit, run).await {
        Err(_) => return check("run_until", false, || "not stopped in 10 s".into()),
        Ok(joined) => step("run_until", joined.unwrap())?,
    };
    check("run_until", stopped.left_in_flight == 0, || {
        format!("{stopped:?}")
    })?;
    if leader.stats().errors > 0 {
        return Err(leader_failure("running leader", &leader));
    }
    step("leader stop", leader.stop().await)?;
    check("run", delivered == Ok(true), || {
        "job `ran` not run by a running worker within 10 s".into()
    })
}

/// The running leader's error as a failure of `call`.
fn leader_failure(call: &str, leader: &tickless_durable::LeaderHandle) -> Failure {
    let error = leader
        .last_error()
        .unwrap_or_else(|| "no error, and not done in 10 s".into());
    Failure {
        call: call.into(),
        permission: error.contains("may not"),
        error,
    }
}

/// Claims and acks every ready job; their ids.
async fn drain(worker: &tickless_durable::Worker) -> Step<Vec<String>> {
    let mut ids = Vec::new();
    loop {
        let jobs = step("try_claim", worker.try_claim(100).await)?;
        if jobs.is_empty() {
            return Ok(ids);
        }
        for job in &jobs {
            yes("ack", worker.ack(job).await)?;
            ids.push(job.id().to_string());
        }
    }
}

/// The key of the bucket of queue `name` that holds job `id`.
async fn bucket_holding(admin: &mut Admin, name: &str, id: &str) -> String {
    let buckets: Vec<String> = cmd(admin, &["KEYS", &format!("tickless:{{{name}}}:b:*")]).await;
    for bucket in buckets {
        let held: bool = cmd(admin, &["SISMEMBER", &bucket, id]).await;
        if held {
            return bucket;
        }
    }
    panic!("no bucket of {name} holds {id}")
}

/// A bucket's `due` member: `b<level>:<start>` for key `tickless:{q}:b:<level>:<start>`.
fn bucket_member(bucket: &str) -> String {
    format!("b{}", bucket.rsplit_once(":b:").unwrap().1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_runs_as_exactly_the_readmes_acl_user() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let acl = readme_acl();
    assert!(acl.contains(&"-@all".to_string()), "{acl:?}");
    // Set here whatever the variant (the `acl` variant's server has the user already).
    let (user, password) = readme_user();
    set_user(&mut admin, &user, &readme_rules()).await;
    let url = server.url_as(&user, &password);
    if let Err(failure) = roles(&url, &queue_name("acl-roles"), &mut admin).await {
        panic!("as README's user: {failure:?}");
    }
}

/// Each grant of README's line is needed: as a user with all but that one, the roles
/// fail, and with a permission error in a real call. So removing any grant from README
/// fails a test, and a user missing one is told. Two lists say why a grant is an
/// exception; each is checked to still be one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_grant_of_the_readmes_acl_line_is_needed_by_some_call() {
    // Asked for by the client library, never by a call of the queue's: `CLIENT SETINFO`
    // at connect (a refusal is ignored by the client, but lands in Redis's `ACL LOG`),
    // `HELLO` for URLs that ask for RESP3. The roles run without them.
    let client_only = ["+client", "+hello"];
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let (_, password) = readme_user();
    let rules = readme_rules();
    let mut outcomes: Vec<(String, Option<Failure>)> = Vec::new();
    for grant in rules.iter().filter(|rule| rule.starts_with('+')) {
        let user = format!("minus{}", grant.replace(['+', '|'], "-"));
        let without: Vec<String> = rules.iter().filter(|r| *r != grant).cloned().collect();
        set_user(&mut admin, &user, &without).await;
        let url = server.url_as(&user, &password);
        let name = queue_name(&format!("acl{}", grant.replace(['+', '|'], "-")));
        outcomes.push((grant.clone(), roles(&url, &name, &mut admin).await.err()));
    }
    let wrong: Vec<&(String, Option<Failure>)> = outcomes
        .iter()
        .filter(|(grant, failure)| {
            let (permission, failed) = match failure {
                Some(f) => (f.permission, true),
                None => (false, false),
            };
            if client_only.contains(&grant.as_str()) {
                failed
            } else {
                !permission
            }
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "without each of these grants the roles should fail with a permission error \
         (or, for {client_only:?}, run): {wrong:#?}"
    );
}

/// README's extra grants: `+wait` for `wait_for_replicas`, `+scan` for `queue_names`.
/// Each is refused to exactly README's user and works with the grant added.
#[tokio::test]
async fn the_readmes_extra_grants_are_what_their_features_need() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let extras = readme_extras();
    for extra in ["+wait", "+scan"] {
        assert!(extras.contains(&extra.to_string()), "{extras:?}");
    }
    let (user, password) = readme_user();
    let url = server.url_as(&user, &password);
    for (with, rules) in [
        (false, readme_rules()),
        (true, {
            let mut rules = readme_rules();
            rules.extend(["+wait".to_string(), "+scan".to_string()]);
            rules
        }),
    ] {
        set_user(&mut admin, &user, &rules).await;
        let waiting = ConnectOptions::new(&url)
            .wait_for_replicas(1, Duration::from_millis(10))
            .connect(&queue_name("extras"))
            .await
            .unwrap();
        let schedule = waiting.schedule("w", b"", Duration::ZERO).await;
        let names = tickless_durable::queue_names(&url).await;
        if with {
            // No replica: the write is made, and too few acknowledged it.
            assert!(schedule.unwrap_err().is_replication());
            names.unwrap();
        } else {
            let err = schedule.unwrap_err();
            assert!(err.is_permission(), "{err}");
            let err = names.unwrap_err();
            assert!(
                err.is_permission() || err.to_string().contains("NOPERM"),
                "{err}"
            );
        }
    }
}

/// A command missing from a user's grant is a permission error naming the command and
/// its grant, and the claim that met it took nothing.
#[tokio::test]
async fn a_missing_grant_is_a_permission_error_naming_the_grant_and_takes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let (user, password) = readme_user();
    let mut rules = readme_rules();
    rules.retain(|rule| rule != "+ltrim");
    set_user(&mut admin, &user, &rules).await;
    let queue = Queue::connect(&server.url_as(&user, &password), &queue_name("ltrim"))
        .await
        .unwrap();
    assert!(queue.schedule("f", b"", Duration::ZERO).await.unwrap());
    let worker = queue.worker(WorkerOptions::default());
    let err = worker.try_claim(1).await.unwrap_err();
    assert!(err.is_permission(), "{err}");
    assert!(
        err.to_string().contains("run LTRIM (grant +ltrim)"),
        "{err}"
    );
    assert_eq!(queue.ready_ids(10).await.unwrap(), ["f"]);
}

/// Every Redis command named in the sources is granted (README's line, or its extras for
/// the features they are for): each single-quoted word of the Lua scripts that Redis
/// knows as a command (`redis.call('HSET', ...)`, `read('zset', 'ZMSCORE', ...)`,
/// `{ DEAD, 'ZADD', ... }`, `remove(JOBS, 'HDEL', id)` alike) and each `cmd("...")` of the
/// Rust sources. The roles above meet what their paths reach, including the commands
/// sent through the `redis` crate's typed helpers (`pipe.hlen(...)`), which this scan
/// does not read; this reads what no run reaches.
#[tokio::test]
async fn every_command_named_in_the_sources_is_granted() {
    let server = RedisServer::start_plain(&[]);
    let mut admin = server.admin().await;
    let granted: BTreeSet<String> = readme_rules()
        .into_iter()
        .chain(readme_extras())
        .filter_map(|rule| rule.strip_prefix('+').map(str::to_lowercase))
        // `+cluster|slots` grants part of `cluster`: enough for a name in the sources.
        .flat_map(|rule| [rule.split('|').next().unwrap().to_string(), rule])
        .collect();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut named: BTreeSet<(String, String)> = BTreeSet::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.strip_prefix(&src).unwrap().display().to_string();
        let words: Vec<&str> = match path.extension().and_then(|e| e.to_str()) {
            Some("lua") => text.split('\'').skip(1).step_by(2).collect(),
            Some("rs") => text
                .split("cmd(\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next())
                .collect(),
            _ => continue,
        };
        for word in words {
            if word.len() > 1 && word.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                named.insert((word.to_lowercase(), file.clone()));
            }
        }
    }
    let words: Vec<&str> = named.iter().map(|(w, _)| w.as_str()).collect();
    let infos: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(&words)
        .query_async(&mut admin)
        .await
        .unwrap();
    let commands: Vec<&(String, String)> = named
        .iter()
        .zip(&infos)
        .filter(|(_, info)| !matches!(info, redis::Value::Nil))
        .map(|(named, _)| named)
        .collect();
    assert!(commands.len() > 30, "the scan found too few: {commands:?}");
    for sent in ["zadd", "hdel", "blmove", "lrange"] {
        assert!(
            commands.iter().any(|(c, _)| c == sent),
            "{sent} not found: {commands:?}"
        );
    }
    let missing: Vec<_> = commands
        .iter()
        .filter(|(command, _)| !granted.contains(command))
        .collect();
    assert!(
        missing.is_empty(),
        "named in the sources, not granted: {missing:?}"
    );
}
