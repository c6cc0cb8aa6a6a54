//! Durable jobs against a real `redis-server`: scheduling, delivery, acks, retries,
//! cancel and reschedule, leadership, and bad input.

use tickless_test_support as support;

/// What an idle queue costs, and a running one once idle.
#[path = "durable/idle.rs"]
mod idle;

#[path = "durable/after.rs"]
mod after;

use std::time::{Duration, SystemTime};
use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{Backoff, Failed, JobState, LeaderOptions, Queue, When, WorkerOptions};

async fn queue(server: &RedisServer, test: &str) -> Queue {
    Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect")
}

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

#[tokio::test]
async fn scheduling_an_id_twice_makes_one_job() {
    let server = RedisServer::start();
    let queue = queue(&server, "idem").await;
    assert!(queue
        .schedule("x", b"first", Duration::from_secs(60))
        .await
        .unwrap());
    assert!(!queue
        .schedule("x", b"second", Duration::from_secs(1))
        .await
        .unwrap());
    let added = queue
        .schedule_batch([
            ("x", b"third".as_slice(), Duration::from_secs(1).into()),
            ("y", b"y".as_slice(), Duration::from_secs(1).into()),
            ("y", b"y again".as_slice(), Duration::from_secs(1).into()),
        ])
        .await
        .unwrap();
    assert_eq!(added, [false, true, false]);
    let info = queue.job("x").await.unwrap().unwrap();
    assert_eq!(info.payload, b"first");
    assert_eq!(info.state, JobState::Scheduled);
    assert_eq!(queue.stats().await.unwrap().scheduled, 2);
}

#[tokio::test]
async fn cancel_and_reschedule_of_unknown_ids_say_false() {
    let server = RedisServer::start();
    let queue = queue(&server, "unknown").await;
    assert!(!queue.cancel("nobody").await.unwrap());
    assert!(!queue
        .reschedule("nobody", Duration::from_secs(1))
        .await
        .unwrap());
    assert!(!queue.retry_dead("nobody").await.unwrap());
    assert!(queue.job("nobody").await.unwrap().is_none());
}

#[tokio::test]
async fn cancelled_ready_job_is_never_delivered_and_its_id_can_be_reused() {
    let server = RedisServer::start();
    let queue = queue(&server, "cancel-ready").await;
    let worker = queue.worker(WorkerOptions::default());
    assert!(queue.schedule("r", b"old", Duration::ZERO).await.unwrap());
    assert_eq!(
        queue.job("r").await.unwrap().unwrap().state,
        JobState::Ready
    );
    assert!(queue.cancel("r").await.unwrap());
    assert!(!queue.cancel("r").await.unwrap());
    assert!(queue.job("r").await.unwrap().is_none());
    assert!(queue.schedule("r", b"new", Duration::ZERO).await.unwrap());
    let jobs = worker.try_claim(10).await.unwrap();
    assert_eq!(
        jobs.len(),
        1,
        "the stale entry is dropped, the new job delivered once"
    );
    assert_eq!(jobs[0].payload(), b"new");
    assert!(worker.ack(&jobs[0]).await.unwrap());
    assert!(worker.try_claim(10).await.unwrap().is_empty());
    assert_eq!(queue.stats().await.unwrap().ready, 0);
}

#[tokio::test]
async fn failed_jobs_are_retried_with_backoff_then_dead_lettered() {
    let server = RedisServer::start();
    let queue = queue(&server, "retry").await.with_max_attempts(2);
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    let mut options = WorkerOptions::default();
    options.backoff = Backoff::fixed(Duration::from_secs(10));
    let worker = queue.worker(options);
    queue.schedule("f", b"p", Duration::ZERO).await.unwrap();
    let job = worker.try_claim(1).await.unwrap().remove(0);
    assert_eq!(worker.fail(&job, "boom").await.unwrap(), Failed::Retried);
    assert_eq!(worker.fail(&job, "again").await.unwrap(), Failed::LeaseLost);
    let info = queue.job("f").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Scheduled);
    assert_eq!(info.due, at(T0 + 10_000));
    assert_eq!(info.last_error.as_deref(), Some("boom"));
    queue
        .advance_manual_clock(Duration::from_millis(9_999))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert!(worker.try_claim(1).await.unwrap().is_empty());
    queue
        .advance_manual_clock(Duration::from_millis(1))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let job = worker.try_claim(1).await.unwrap().remove(0);
    assert_eq!(job.attempt(), 2);
    assert_eq!(worker.fail(&job, "last").await.unwrap(), Failed::Dead);
    let dead = queue.dead(0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].state, JobState::Dead);
    assert_eq!(dead[0].last_error.as_deref(), Some("last"));
    assert_eq!(queue.stats().await.unwrap().dead, 1);
    assert!(queue.retry_dead("f").await.unwrap());
    let job = worker.try_claim(1).await.unwrap().remove(0);
    assert_eq!(job.attempt(), 1);
    assert!(worker.ack(&job).await.unwrap());
}

/// On Redis's own clock a retry is due no earlier than its backoff after the failure, to
/// the microsecond: the due time is rounded up, not counted from "now" in whole ms
/// (which made it up to 0.999 ms early, and webhook retries came before their backoff).
#[tokio::test]
async fn a_retry_is_never_due_before_its_backoff_to_the_microsecond() {
    let server = RedisServer::start();
    let queue = queue(&server, "retryus").await.with_max_attempts(100);
    let mut options = WorkerOptions::default();
    options.backoff = Backoff::fixed(Duration::from_millis(100));
    let worker = queue.worker(options);
    queue.schedule("r", b"p", Duration::ZERO).await.unwrap();
    // Redis and this process read the same clock: the failure happens after `before`.
    // Rounded down, a due time would be early whenever both fall in one millisecond.
    for round in 0..20 {
        let job = worker.try_claim(1).await.unwrap().remove(0);
        let before = SystemTime::now();
        assert_eq!(worker.fail(&job, "boom").await.unwrap(), Failed::Retried);
        let due = queue.job("r").await.unwrap().unwrap().due;
        assert!(
            due >= before + Duration::from_millis(100),
            "round {round}: due {due:?}, failed after {before:?}"
        );
        assert!(queue.reschedule("r", Duration::ZERO).await.unwrap());
    }
}

/// Jobs that fail together (a database down) come back spread over the backoff, not in
/// one millisecond: each due time is the failure's time plus the jitter drawn for its id
/// and attempt (deterministic: the manual clock and the ids fix every due time).
#[tokio::test]
async fn jobs_failed_together_retry_at_jittered_times() {
    let server = RedisServer::start();
    let queue = queue(&server, "jitter").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let options = WorkerOptions::default();
    let backoff = options.backoff;
    let worker = queue.worker(options);
    let ids: Vec<String> = (0..50).map(|i| format!("order:{i}")).collect();
    for id in &ids {
        queue.schedule(id, b"p", Duration::ZERO).await.unwrap();
    }
    let jobs = worker.try_claim(50).await.unwrap();
    assert_eq!(jobs.len(), 50);
    for job in &jobs {
        assert_eq!(worker.fail(job, "db down").await.unwrap(), Failed::Retried);
    }
    let mut dues = std::collections::BTreeSet::new();
    for id in &ids {
        let due = queue.job(id).await.unwrap().unwrap().due;
        let wait = due.duration_since(at(T0)).unwrap();
        // The script keeps whole milliseconds of the drawn delay.
        let drawn = Duration::from_millis(backoff.delay_of(id, 1).as_millis() as u64);
        assert_eq!(wait, drawn, "{id}");
        assert!(wait <= Duration::from_secs(1), "{id}: {wait:?}");
        dues.insert(due);
    }
    assert!(
        dues.len() >= 40,
        "only {} distinct retry times of 50",
        dues.len()
    );
}

#[tokio::test]
async fn lease_end_redelivers_and_the_stale_ack_is_refused() {
    let server = RedisServer::start();
    let queue = queue(&server, "lease").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(30);
    let worker = queue.worker(options);
    queue.schedule("l", b"p", Duration::ZERO).await.unwrap();
    let first = worker.try_claim(1).await.unwrap().remove(0);
    queue
        .advance_manual_clock(Duration::from_millis(29_999))
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert!(
        worker.try_claim(1).await.unwrap().is_empty(),
        "redelivered before its lease ended"
    );
    queue
        .advance_manual_clock(Duration::from_millis(1))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let second = worker.try_claim(1).await.unwrap().remove(0);
    assert_eq!(second.attempt(), 2);
    assert!(
        !worker.ack(&first).await.unwrap(),
        "the first delivery lost its lease"
    );
    assert!(worker.ack(&second).await.unwrap());
    assert!(queue.job("l").await.unwrap().is_none());
}

#[tokio::test]
async fn a_leader_whose_lease_ended_is_fenced_out() {
    let server = RedisServer::start();
    let queue = queue(&server, "fence").await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut old = queue.leader(LeaderOptions::default());
    old.step().await.unwrap();
    let old_token = old.stats().token;
    // The old leader pauses past its lease; another takes over.
    queue
        .advance_manual_clock(Duration::from_secs(5))
        .await
        .unwrap();
    let mut new = queue.leader(LeaderOptions::default());
    new.step().await.unwrap();
    assert!(new.is_leading());
    assert!(
        new.stats().token > old_token,
        "the token grows with every leadership"
    );
    queue.schedule("j", b"p", Duration::ZERO).await.unwrap();
    queue
        .schedule("k", b"p", Duration::from_millis(50))
        .await
        .unwrap();
    // Half the new leader's lease (the default busy lease, 100 ms), which is still live;
    // "k" is due.
    queue
        .advance_manual_clock(Duration::from_millis(50))
        .await
        .unwrap();
    // The old leader wakes up and ticks with its old token: it moves nothing and learns
    // that it lost, and cannot take the live lease back.
    old.step().await.unwrap();
    assert!(!old.is_leading());
    assert_eq!(old.stats().promoted, 0);
    new.step().await.unwrap();
    assert_eq!(new.stats().promoted, 1);
}

/// A scheduler that brings work near shortens the leader's lease to the leader's own
/// `busy_lease`, whatever it is set to (the scripts once used the default, 750 ms), so a
/// dead leader is replaced within it.
#[tokio::test]
async fn near_work_shortens_the_lease_to_the_leaders_own_busy_lease() {
    let server = RedisServer::start();
    let name = queue_name("busy");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut options = LeaderOptions::default();
    options.busy_lease = Duration::from_millis(200);
    options.idle_lease = Duration::from_secs(60);
    let mut leader = queue.leader(options);
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    // Renewed on an idle queue: the lease runs to the idle lease's end.
    tokio::time::sleep(Duration::from_millis(120)).await;
    leader.step().await.unwrap();
    let mut conn = server.admin().await;
    let meta = format!("tickless:{{{name}}}:meta");
    let expires = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let meta = meta.clone();
        async move {
            let expires: u64 = redis::cmd("HGET")
                .arg(&meta)
                .arg("expires")
                .query_async(&mut conn)
                .await
                .unwrap();
            expires
        }
    };
    assert_eq!(expires(&mut conn).await, T0 + 60_000, "an idle lease");
    queue.schedule("near", b"", at(T0 + 50)).await.unwrap();
    assert_eq!(
        expires(&mut conn).await,
        T0 + 200,
        "shortened to the busy lease"
    );
}

/// The fencing token never goes back, even when `meta` (which keeps it) is lost: a
/// leadership after that still outranks every one before (it restarted at 1).
#[tokio::test]
async fn the_fencing_token_grows_even_when_meta_is_lost() {
    let server = RedisServer::start();
    let name = queue_name("token");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
        assert!(leader.is_leading());
        tokens.push(leader.stats().token);
        let mut conn = server.admin().await;
        let _: () = redis::cmd("DEL")
            .arg(format!("tickless:{{{name}}}:meta"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// A connection that Redis (or a proxy, or its `timeout`) closed while the queue was idle
/// costs the next idempotent call nothing: it is sent again on a new connection.
#[tokio::test]
async fn idempotent_calls_ride_over_a_connection_closed_while_idle() {
    let server = RedisServer::start();
    let queue = queue(&server, "killed").await;
    let mut admin = server.admin().await;
    let kill_the_others = |admin: &mut redis::aio::MultiplexedConnection| {
        let mut admin = admin.clone();
        async move {
            let killed: u64 = redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
                .query_async(&mut admin)
                .await
                .unwrap();
            assert!(killed > 0);
        }
    };
    kill_the_others(&mut admin).await;
    assert!(queue
        .schedule("a", b"", Duration::from_secs(60))
        .await
        .unwrap());
    kill_the_others(&mut admin).await;
    assert!(queue
        .reschedule("a", Duration::from_secs(30))
        .await
        .unwrap());
    kill_the_others(&mut admin).await;
    assert!(queue.cancel("a").await.unwrap());
    kill_the_others(&mut admin).await;
    let added = queue
        .schedule_batch([("b", b"".as_slice(), When::After(Duration::from_secs(60)))])
        .await
        .unwrap();
    assert_eq!(added, [true]);
    // An ack, by delivery, too.
    assert!(queue.schedule("c", b"", Duration::ZERO).await.unwrap());
    let worker = queue.worker(WorkerOptions::default());
    let claimed = worker.try_claim(1).await.unwrap();
    kill_the_others(&mut admin).await;
    assert!(worker.ack(&claimed[0]).await.unwrap());
}

/// A Redis user without the queue's channel (Redis 7 gives new ACL users none) is turned
/// away at connect, with an error naming the permission, before any job is stored; the
/// README's grant (keys and channels under `tickless:`) is enough for every role.
#[tokio::test]
async fn a_user_without_the_channel_is_refused_at_connect_and_the_readme_grant_works() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let acl = |args: &'static [&'static str]| {
        let mut admin = admin.clone();
        async move {
            let _: () = redis::cmd("ACL")
                .arg(args)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
    };
    acl(&[
        "SETUSER",
        "nochan",
        "on",
        ">pw",
        "resetchannels",
        "~tickless:*",
        "+@all",
    ])
    .await;
    // README's grant, read from README.md (tests/durable_repair.rs runs every role so;
    // in the `acl` variant the server has the user already, and setting it again is
    // harmless).
    let (user, password) = support::readme_user();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg(support::readme_acl())
        .query_async(&mut admin.clone())
        .await
        .unwrap();
    let name = queue_name("acl");
    let err = Queue::connect(&server.url_as("nochan", "pw"), &name)
        .await
        .unwrap_err();
    assert!(err.is_permission(), "{err}");
    assert!(err.to_string().contains("&tickless:*"), "{err}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tickless:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    let queue = Queue::connect(&server.url_as(&user, &password), &name)
        .await
        .unwrap();
    assert!(queue.schedule("j", b"", Duration::ZERO).await.unwrap());
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    let claimed = worker.try_claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(worker.ack(&claimed[0]).await.unwrap());
}

/// A key of the queue corrupted while jobs are due: the leader's call changes nothing
/// (it once took a staged job out of `due`, then failed on the write to `ready`, and the
/// job was lost), the leader counts the error and goes on, and once the key is deleted
/// and the queue repaired every job is delivered, the destroyed bucket's too.
#[tokio::test]
async fn a_corrupted_key_stops_a_move_before_it_writes_and_loses_no_job() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    for corrupt in ["ready", "bucket"] {
        let name = queue_name(&format!("corrupt-{corrupt}"));
        let queue = Queue::connect(&server.url(), &name).await.unwrap();
        queue.set_manual_clock(Some(at(T0))).await.unwrap();
        let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
        // Staged (inside the horizon), in a bucket, and in a later bucket.
        for (id, due) in [
            ("staged", T0 + 100),
            ("near", T0 + 5_000),
            ("far", T0 + 200_000),
        ] {
            assert!(queue.schedule(id, b"", at(due)).await.unwrap());
        }
        let buckets: Vec<String> = redis::cmd("KEYS")
            .arg(key("b:*"))
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(buckets.len(), 2, "{buckets:?}");
        // The later bucket is the one corrupted: what is in it is destroyed with it.
        let mut buckets = buckets;
        buckets.sort_by_key(|b| b.rsplit(':').next().unwrap().parse::<u64>().unwrap());
        let bad = match corrupt {
            "ready" => key("ready"),
            _ => buckets[1].clone(),
        };
        let _: () = redis::cmd("DEL")
            .arg(&bad)
            .query_async(&mut admin)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&bad)
            .arg("x")
            .query_async(&mut admin)
            .await
            .unwrap();
        queue
            .advance_manual_clock(Duration::from_secs(300))
            .await
            .unwrap();
        let mut leader = queue.leader(LeaderOptions::default());
        let err = leader.step().await.unwrap_err();
        assert!(err.is_garbage() && err.to_string().contains(&bad), "{err}");
        let waiting = ["staged", "near"];
        for id in waiting {
            let job = queue.job(id).await.unwrap().unwrap();
            assert_eq!(
                job.state,
                JobState::Scheduled,
                "{corrupt}: {id} moved by a failed call"
            );
        }
        // Running, the leader does not end on it: it counts it and tries again.
        let handle = leader.spawn();
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while handle.stats().errors == 0 {
            assert!(
                std::time::Instant::now() < give_up,
                "{corrupt}: no error seen"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(handle.last_error().unwrap().contains(&bad));
        let _: () = redis::cmd("DEL")
            .arg(&bad)
            .query_async(&mut admin)
            .await
            .unwrap();
        // The repair pass puts the destroyed bucket's job back by its record.
        queue.repair().await.unwrap();
        let worker = queue.worker(WorkerOptions::default());
        let mut delivered = Vec::new();
        let expected: &[&str] = &["far", "near", "staged"];
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while delivered.len() < expected.len() {
            assert!(
                std::time::Instant::now() < give_up,
                "{corrupt}: only {delivered:?}"
            );
            for job in worker.try_claim(10).await.unwrap() {
                delivered.push(job.id().to_string());
                worker.ack(&job).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        delivered.sort();
        assert_eq!(delivered, expected, "{corrupt}");
        handle.stop().await.unwrap();
    }
}

/// A delay counts from Redis `TIME` to the microsecond: the due time is never before the
/// moment Redis received the call plus the delay. (Counted from `TIME` rounded down to the
/// millisecond, jobs came due up to 0.999 ms early: every round here found that.)
#[tokio::test]
async fn a_delay_is_counted_from_the_microsecond_redis_got_the_call() {
    let server = RedisServer::start();
    let queue = queue(&server, "micro").await;
    let mut conn = server.admin().await;
    for round in 0..50_u64 {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let before_us = secs * 1_000_000 + micros;
        let delay = Duration::from_micros(1_000 + 37 * round);
        let id = format!("m{round}");
        queue.schedule(&id, b"", delay).await.unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let after_us = secs * 1_000_000 + micros;
        let due = queue.job(&id).await.unwrap().unwrap().due;
        let due_us = due
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let earliest = before_us + delay.as_micros() as u64;
        assert!(
            due_us >= earliest,
            "round {round}: due {due_us} us, asked for no earlier than {earliest} us"
        );
        // And at most the rounding to the millisecond later than the call's own instant,
        // which Redis read before it answered (`after_us`): a bound by Redis's clock, not
        // by how long a loaded machine took to send the call.
        let latest = after_us + delay.as_micros() as u64 + 1_000;
        assert!(
            due_us <= latest,
            "round {round}: due {due_us} us, later than {latest} us"
        );
    }
}

/// No password reaches an error, `Debug`, `Display` or `Queue::url`, whether the URL
/// parses or not, the server is unreachable or refuses the password, or the queue is
/// open.
#[tokio::test]
async fn a_password_in_the_url_never_shows() {
    const SECRET: &str = "S3cret-xyzzy";
    let server = RedisServer::start();
    let unreachable = [
        format!("redis://:{SECRET}@127.0.0.1:1/"),
        format!("redis://app:{SECRET}@127.0.0.1:1/"),
        format!("redis://{SECRET}@127.0.0.1:1/"),
        format!("redis://app:{SECRET}@[not a host/"),
        format!("http://app:{SECRET}@127.0.0.1:1/"),
        format!("redis+unix:///nowhere.sock?pass={SECRET}"),
        // The server answers but refuses the password: it has no such user, or (`acl`
        // variant) another password for it.
        server.url_as("app", SECRET),
    ];
    for url in &unreachable {
        let err = Queue::connect(url, "q").await.unwrap_err();
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(!shown.contains(SECRET), "{shown}");
        }
    }
    let mut conn = server.admin().await;
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", SECRET])
        .query_async(&mut conn)
        .await
        .unwrap();
    // The default user's password (in the `acl` variant too: README's user keeps its own).
    let url = server.url_as("", SECRET);
    let queue = Queue::connect(&url, &queue_name("secret")).await.unwrap();
    assert_eq!(queue.url(), server.url_as("", "***"));
    let debug = format!("{queue:?}");
    assert!(
        !debug.contains(SECRET) && debug.contains(":***@"),
        "{debug}"
    );
    let err = Queue::connect(&url, "a{b}").await.unwrap_err();
    assert!(!err.to_string().contains(SECRET), "{err}");
}

#[tokio::test]
async fn bad_input_gets_clear_errors() {
    let err = Queue::connect("redis://127.0.0.1:1/", "q")
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err}");
    assert!(err.to_string().contains("redis://127.0.0.1:1/"), "{err}");
    let err = Queue::connect("http://example/", "q").await.unwrap_err();
    assert!(err.is_invalid_url(), "{err}");
    let server = RedisServer::start();
    for name in ["", "a{b}", &"n".repeat(200)] {
        let err = Queue::connect(&server.url(), name).await.unwrap_err();
        assert!(err.is_invalid_queue_name(), "{err}");
    }
    // A huge bad name is not repeated whole in the message.
    let err = Queue::connect(&server.url(), &"{".repeat(1 << 20))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_queue_name() && err.to_string().len() < 300,
        "{err}"
    );
    let queue = queue(&server, "bad").await;
    let big = vec![0u8; tickless_durable::MAX_PAYLOAD_BYTES + 1];
    let err = queue
        .schedule("big", &big, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_payload_too_large(), "{err}");
    assert!(err.to_string().contains("\"big\""), "{err}");
    let err = queue.schedule("", b"", Duration::ZERO).await.unwrap_err();
    assert!(err.is_invalid_id(), "{err}");
    let long = "i".repeat(tickless_durable::MAX_ID_BYTES + 1);
    assert!(queue.cancel(&long).await.unwrap_err().is_invalid_id());
    // Exactly at the limit is fine.
    let max = vec![7u8; tickless_durable::MAX_PAYLOAD_BYTES];
    assert!(queue.schedule("max", &max, Duration::ZERO).await.unwrap());
    let worker = queue.worker(WorkerOptions::default());
    assert_eq!(
        worker.try_claim(1).await.unwrap()[0].payload().len(),
        max.len()
    );
    // Far deadlines saturate instead of failing.
    assert!(queue.schedule("far", b"", Duration::MAX).await.unwrap());
    assert!(queue
        .schedule("past", b"", SystemTime::UNIX_EPOCH)
        .await
        .unwrap());
}

#[tokio::test]
async fn garbage_in_the_queue_keys_is_an_error_naming_the_key() {
    let server = RedisServer::start();
    let name = queue_name("garbage");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    let mut conn = server.admin().await;
    let jobs = format!("tickless:{{{name}}}:jobs");
    let _: () = redis::cmd("HSET")
        .arg(&jobs)
        .arg("junk")
        .arg("not a record")
        .query_async(&mut conn)
        .await
        .unwrap();
    for err in [
        queue.cancel("junk").await.unwrap_err(),
        queue.reschedule("junk", Duration::ZERO).await.unwrap_err(),
        queue
            .schedule("junk", b"", Duration::ZERO)
            .await
            .unwrap_err(),
        queue.job("junk").await.unwrap_err(),
    ] {
        assert!(err.is_garbage(), "{err}");
        assert!(err.to_string().contains(&jobs), "{err}");
        assert!(err.to_string().contains("junk"), "{err}");
    }
    let meta = format!("tickless:{{{name}}}:meta");
    let _: () = redis::cmd("HSET")
        .arg(&meta)
        .arg("clock")
        .arg("tomorrow")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = queue.schedule("ok", b"", Duration::ZERO).await.unwrap_err();
    assert!(
        err.is_garbage() && err.to_string().contains("clock"),
        "{err}"
    );
    let _: () = redis::cmd("HDEL")
        .arg(&meta)
        .arg("clock")
        .query_async(&mut conn)
        .await
        .unwrap();
    // A key of the wrong type is found on connect, and by any script that meets it.
    let due = format!("tickless:{{{name}}}:due");
    let _: () = redis::cmd("SET")
        .arg(&due)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = Queue::connect(&server.url(), &name).await.unwrap_err();
    assert!(err.is_garbage() && err.to_string().contains(&due), "{err}");
    let err = queue
        .schedule("ok", b"", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(err.is_garbage(), "{err}");
}

#[tokio::test]
async fn far_jobs_share_coarse_buckets_with_one_due_member_each() {
    let server = RedisServer::start();
    let name = queue_name("buckets");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    // 10,000 jobs due over one minute, an hour ahead.
    let ids: Vec<String> = (0..10_000).map(|i| format!("f{i}")).collect();
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        (
            id.as_str(),
            b"".as_slice(),
            When::At(at(T0 + 3_600_000 + 6 * i as u64)),
        )
    });
    queue.schedule_batch(jobs).await.unwrap();
    let mut conn = server.admin().await;
    let due: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("tickless:{{{name}}}:due"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(due.len() <= 3, "one member per non-empty bucket: {due:?}");
    // Coarse buckets (70 min or wider, as the slots align), never one per job.
    assert!(
        due.iter()
            .all(|m| m.starts_with("b2:") || m.starts_with("b3:")),
        "{due:?}"
    );
    // Cancelling every job of a bucket removes its member too.
    queue
        .cancel_batch(ids.iter().map(String::as_str))
        .await
        .unwrap();
    let left: u64 = redis::cmd("ZCARD")
        .arg(format!("tickless:{{{name}}}:due"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn unreadable_records_are_set_aside_and_the_queue_goes_on() {
    let server = RedisServer::start();
    let name = queue_name("quarantine");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut conn = server.admin().await;
    let jobs = format!("tickless:{{{name}}}:jobs");
    // One job in a bucket and one in the ready list get their records overwritten.
    queue
        .schedule("bad-bucket", b"", at(T0 + 5_000))
        .await
        .unwrap();
    queue.schedule("good", b"", at(T0 + 5_000)).await.unwrap();
    queue
        .schedule("bad-ready", b"", Duration::ZERO)
        .await
        .unwrap();
    queue
        .schedule("good-ready", b"", Duration::ZERO)
        .await
        .unwrap();
    for id in ["bad-bucket", "bad-ready"] {
        let _: () = redis::cmd("HSET")
            .arg(&jobs)
            .arg(id)
            .arg("???")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let worker = queue.worker(WorkerOptions::default());
    let ready = worker.try_claim(10).await.unwrap();
    assert_eq!(
        ready.iter().map(|j| j.id()).collect::<Vec<_>>(),
        ["good-ready"]
    );
    let mut leader = queue.leader(LeaderOptions::default());
    queue
        .advance_manual_clock(Duration::from_secs(5))
        .await
        .unwrap();
    leader.step().await.unwrap();
    let due = worker.try_claim(10).await.unwrap();
    assert_eq!(due.iter().map(|j| j.id()).collect::<Vec<_>>(), ["good"]);
    let dead = queue.dead(0, 10).await.unwrap();
    let mut ids: Vec<&str> = dead.iter().map(|d| d.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["bad-bucket", "bad-ready"]);
    for info in &dead {
        let error = info.last_error.as_deref().unwrap_or_default();
        assert!(error.contains(&jobs) && error.contains(&info.id), "{error}");
    }
    // Nothing is lost: the records are as found, and can be cancelled.
    assert!(queue.cancel("bad-ready").await.unwrap());
    assert_eq!(queue.stats().await.unwrap().dead, 1);
}
