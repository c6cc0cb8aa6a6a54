//! The stream outlet against a real `redis-server`: due jobs appended to a Redis Stream
//! in the script that takes them from the wheel, once each, never early, with their id
//! and delivery number; the bound; every other path that makes a job due; bad settings.
//! The Python and Node consumer groups are in `durable_stream_clients.rs`.

use tickless_test_support as support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use support::{at, queue_name, RedisServer, Rng, T0};
use tickless_durable::{LeaderOptions, Queue, StreamOutlet, When, WorkerOptions};

async fn queue(server: &RedisServer, test: &str) -> Queue {
    Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect")
}

/// One entry of the outlet's stream, as a consumer reads it.
#[derive(Debug)]
struct Entry {
    id: String,
    delivery: u64,
    attempt: u64,
    due: u64,
    payload: Vec<u8>,
}

/// Every entry of the stream at `key`, oldest first (read as the admin: the test's own
/// reads need no grant of README's ACL user).
async fn entries(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<Entry> {
    let reply: Vec<(String, Vec<Vec<u8>>)> = redis::Cmd::new()
        .arg("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(admin)
        .await
        .expect("XRANGE");
    reply
        .into_iter()
        .map(|(entry, fields)| {
            let fields: HashMap<String, Vec<u8>> = fields
                .chunks(2)
                .map(|f| (String::from_utf8(f[0].clone()).unwrap(), f[1].clone()))
                .collect();
            let text = |f: &str| -> String {
                let value = fields
                    .get(f)
                    .unwrap_or_else(|| panic!("entry {entry} has no field {f}"));
                String::from_utf8(value.clone()).unwrap()
            };
            Entry {
                id: text("id"),
                delivery: text("delivery").parse().unwrap(),
                attempt: text("attempt").parse().unwrap(),
                due: text("due").parse().unwrap(),
                payload: fields["payload"].clone(),
            }
        })
        .collect()
}

async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.admin_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Steps the leader until the stream holds `want` entries (each step moves what is due
/// on the queue's clock, one level of the wheel at a time for a far jump), at most 20
/// steps.
async fn step_until(
    leader: &mut tickless_durable::Leader,
    admin: &mut redis::aio::MultiplexedConnection,
    key: &str,
    want: usize,
    now: u64,
) {
    for _ in 0..20 {
        leader.step().await.unwrap();
        let len: usize = redis::Cmd::new()
            .arg("XLEN")
            .arg(key)
            .query_async(admin)
            .await
            .unwrap();
        assert!(
            len <= want,
            "{len} entries at {now}, {want} due: one came early"
        );
        if len == want {
            return;
        }
    }
    panic!("waited 20 leader steps for {want} entries in {key} at {now}");
}

/// The case: every job of a 48-hour schedule (due times spread over two days,
/// some due at once, some cancelled before due) is one entry of the stream, with its id,
/// payload and a delivery number of its own, appended once its due time has come on the
/// queue's clock and not before; a cancelled job never appears; each delivered job leaves
/// the queue.
#[tokio::test]
async fn every_job_of_a_48_hour_schedule_lands_in_the_stream_once_and_never_early() {
    let server = RedisServer::start_with_fsync("everysec");
    let queue = queue(&server, "two-days").await;
    let mut admin = admin(&server).await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let key = queue.default_stream_key();
    queue
        .set_stream_outlet(Some(&StreamOutlet::new(&key)))
        .await
        .unwrap();
    let mut rng = Rng(39);
    let horizon = 48 * 3_600_000;
    let mut due: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..600 {
        let id = format!("job-{i}");
        let offset = match i % 10 {
            0 => 0,
            1 => rng.below(2_000),
            _ => rng.below(horizon),
        };
        queue
            .schedule(&id, id.as_bytes(), at(T0 + offset))
            .await
            .unwrap();
        due.insert(id, T0 + offset);
    }
    // Cancelled before due: never in the stream.
    let cancelled: Vec<String> = due
        .iter()
        .filter(|(_, &t)| t > T0 + 10_000)
        .map(|(id, _)| id.clone())
        .step_by(7)
        .collect();
    for id in &cancelled {
        assert!(queue.cancel(id).await.unwrap(), "{id}");
        due.remove(id);
    }
    let mut leader = queue.leader(LeaderOptions::default());
    let mut now = T0;
    let mut steps = 0;
    let mut checked = 0;
    loop {
        let due_now = due.values().filter(|&&t| t <= now).count();
        step_until(&mut leader, &mut admin, &key, due_now, now).await;
        // The entries appended since the last step (the earlier ones were checked then).
        for e in entries(&mut admin, &key).await.iter().skip(checked) {
            assert!(e.due <= now, "{} due {} appended at {now}", e.id, e.due);
        }
        checked = due_now;
        if now >= T0 + horizon {
            break;
        }
        // Steps of up to an hour, some of a millisecond.
        let by = if steps % 5 == 0 {
            1
        } else {
            1 + rng.below(3_600_000)
        };
        queue
            .advance_manual_clock(Duration::from_millis(by))
            .await
            .unwrap();
        now += by;
        steps += 1;
    }
    let all = entries(&mut admin, &key).await;
    assert_eq!(all.len(), due.len());
    let mut seen: HashMap<&str, u64> = HashMap::new();
    for e in &all {
        assert_eq!(Some(&e.due), due.get(&e.id), "{}: its own due time", e.id);
        assert_eq!(e.payload, e.id.as_bytes());
        assert_eq!(e.attempt, 1);
        assert!(seen.insert(&e.id, e.delivery).is_none(), "{} twice", e.id);
        assert!(!cancelled.contains(&e.id), "{} was cancelled", e.id);
    }
    let mut deliveries: Vec<u64> = seen.values().copied().collect();
    deliveries.sort_unstable();
    deliveries.dedup();
    assert_eq!(deliveries.len(), all.len(), "delivery numbers are unique");
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.ready, stats.in_flight), (0, 0, 0));
    assert_eq!(queue.counters().await.unwrap().streamed, due.len() as u64);
    assert!(
        queue.job("job-0").await.unwrap().is_none(),
        "left the queue"
    );
}

/// Each `XADD` trims the stream to about its bound (`MAXLEN ~`: whole nodes of
/// `stream-node-max-entries`, 100 here), whatever the number of jobs due at once.
#[tokio::test]
async fn the_stream_is_kept_near_its_bound() {
    let server = RedisServer::start_with_fsync("everysec");
    let queue = queue(&server, "bound").await;
    let mut admin = admin(&server).await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let key = format!("{}:orders", queue.default_stream_key());
    let outlet = StreamOutlet::new(&key).with_max_len(150);
    queue.set_stream_outlet(Some(&outlet)).await.unwrap();
    assert_eq!(queue.stream_outlet().await.unwrap(), Some(outlet));
    let ids: Vec<String> = (0..2_000).map(|i| format!("j{i}")).collect();
    queue
        .schedule_batch(
            ids.iter()
                .map(|id| (id.as_str(), b"", When::from(at(T0 + 1_000)))),
        )
        .await
        .unwrap();
    queue
        .advance_manual_clock(Duration::from_secs(1))
        .await
        .unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    for _ in 0..5 {
        leader.step().await.unwrap();
    }
    assert_eq!(queue.counters().await.unwrap().streamed, 2_000);
    let all = entries(&mut admin, &key).await;
    assert!(
        (150..=250).contains(&all.len()),
        "{} entries for a bound of 150",
        all.len()
    );
    // The entries kept are the newest: the last delivery numbers.
    assert_eq!(all.last().unwrap().delivery, 2_000);
}

/// Every path that makes a job due appends it to the stream: a schedule due at once, a
/// failure retried, a lease that ended, a give back, a reschedule,
/// a recurring occurrence; each with the attempt it is and a new delivery number.
#[tokio::test]
async fn every_path_that_makes_a_job_due_appends_it() {
    let server = RedisServer::start_with_fsync("everysec");
    let queue = queue(&server, "paths").await;
    let mut admin = admin(&server).await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let key = queue.default_stream_key();
    let mut leader = queue.leader(LeaderOptions::default());
    let worker = queue.worker(WorkerOptions::default());
    // Claimed by a worker before the outlet is set: these come back through it.
    let queue = queue.with_max_attempts(2);
    for id in ["fails", "lease", "given"] {
        queue.schedule(id, id.as_bytes(), at(T0)).await.unwrap();
    }
    queue
        .schedule("later", b"later", at(T0 + 60_000))
        .await
        .unwrap();
    let claimed = worker.try_claim(10).await.unwrap();
    assert_eq!(claimed.len(), 3);
    queue
        .set_stream_outlet(Some(&StreamOutlet::new(&key)))
        .await
        .unwrap();
    queue.schedule("now", b"now", at(T0)).await.unwrap();
    let by_id = |id: &str| claimed.iter().find(|j| j.id() == id).unwrap();
    worker.fail(by_id("fails"), "no").await.unwrap();
    worker.give_back([by_id("given")]).await.unwrap();
    queue.reschedule("later", at(T0)).await.unwrap();
    queue
        .every("tick", Duration::from_secs(10), b"tick")
        .await
        .unwrap();
    // Past every lease and backoff.
    queue
        .advance_manual_clock(Duration::from_secs(600))
        .await
        .unwrap();
    for _ in 0..5 {
        leader.step().await.unwrap();
    }
    let all = entries(&mut admin, &key).await;
    let find = |id: &str| {
        all.iter()
            .find(|e| e.id == id)
            .unwrap_or_else(|| panic!("{id} not in the stream: {all:?}"))
    };
    assert_eq!(find("now").attempt, 1);
    assert_eq!(find("given").attempt, 1, "a give back is no attempt");
    assert_eq!(find("fails").attempt, 2);
    assert_eq!(find("lease").attempt, 2);
    assert_eq!(find("later").payload, b"later");
    assert!(all.iter().any(|e| e.id.starts_with("tick@")), "{all:?}");
    let mut deliveries: Vec<u64> = all.iter().map(|e| e.delivery).collect();
    deliveries.sort_unstable();
    deliveries.dedup();
    assert_eq!(deliveries.len(), all.len());
    assert!(
        all.iter().all(|e| e.delivery > 3),
        "after the worker's three claims"
    );
    assert_eq!(queue.stats().await.unwrap().in_flight, 0);
    for id in ["now", "given", "fails", "lease", "later"] {
        assert!(
            queue.job(id).await.unwrap().is_none(),
            "{id} left the queue"
        );
    }
}

/// A dead job retried goes to the stream, and its error with it.
#[tokio::test]
async fn a_dead_job_retried_goes_to_the_stream() {
    let server = RedisServer::start_with_fsync("everysec");
    let queue = queue(&server, "dead").await.with_max_attempts(1);
    let mut admin = admin(&server).await;
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let key = queue.default_stream_key();
    let worker = queue.worker(WorkerOptions::default());
    queue.schedule("d", b"d", at(T0)).await.unwrap();
    let job = worker.try_claim(1).await.unwrap().remove(0);
    worker.fail(&job, "broken").await.unwrap();
    assert_eq!(queue.stats().await.unwrap().dead, 1);
    queue
        .set_stream_outlet(Some(&StreamOutlet::new(&key)))
        .await
        .unwrap();
    assert!(queue.retry_dead("d").await.unwrap());
    let all = entries(&mut admin, &key).await;
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].id.as_str(), all[0].attempt), ("d", 1));
    assert!(queue.job("d").await.unwrap().is_none());
    let errors: usize = redis::Cmd::new()
        .arg("HLEN")
        .arg(format!("tickless:{{{}}}:errors", queue.name()))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(errors, 0, "its last error left with it");
    assert_eq!(queue.stats().await.unwrap().dead, 0);
}

/// Bad settings are refused before anything is stored, naming why; a stream key that
/// holds something else stops the scripts before they write (nothing moved).
#[tokio::test]
async fn bad_outlets_are_refused_with_a_clear_error() {
    let server = RedisServer::start_with_fsync("everysec");
    let queue = queue(&server, "bad").await;
    let mut admin = admin(&server).await;
    let name = queue.name().to_string();
    let cases = [
        (StreamOutlet::new(""), "empty"),
        (StreamOutlet::new("{other}:out"), "hash tag"),
        (StreamOutlet::new("plain"), "hash tag"),
        (
            StreamOutlet::new(format!("tickless:{{{name}}}:ready")),
            "own keys",
        ),
        (
            StreamOutlet::new(queue.default_stream_key()).with_max_len(0),
            "0",
        ),
    ];
    for (outlet, why) in cases {
        let err = queue.set_stream_outlet(Some(&outlet)).await.unwrap_err();
        assert!(err.is_invalid_outlet(), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    let taken = format!("tickless:{{{name}}}:stream:taken");
    let _: () = redis::Cmd::new()
        .arg("SET")
        .arg(&taken)
        .arg("x")
        .query_async(&mut admin)
        .await
        .unwrap();
    let err = queue
        .set_stream_outlet(Some(&StreamOutlet::new(&taken)))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_outlet() && err.to_string().contains("string"),
        "{err}"
    );
    assert_eq!(queue.stream_outlet().await.unwrap(), None);

    // Set, then the key replaced by another type: a schedule due at once is refused whole.
    let key = queue.default_stream_key();
    queue
        .set_stream_outlet(Some(&StreamOutlet::new(&key)))
        .await
        .unwrap();
    let _: () = redis::Cmd::new()
        .arg("SET")
        .arg(&key)
        .arg("x")
        .query_async(&mut admin)
        .await
        .unwrap();
    let err = queue.schedule("a", b"", Duration::ZERO).await.unwrap_err();
    assert!(
        err.is_garbage() && err.to_string().contains("stream"),
        "{err}"
    );
    assert!(queue.job("a").await.unwrap().is_none(), "nothing written");
    // Removed: due jobs go to the ready list again.
    queue.set_stream_outlet(None).await.unwrap();
    assert_eq!(queue.stream_outlet().await.unwrap(), None);
    queue.schedule("a", b"", Duration::ZERO).await.unwrap();
    assert_eq!(queue.stats().await.unwrap().ready, 1);
}

/// On a Redis Cluster: two queues on two masters, each delivering into a stream in its
/// own hash slot (the default key, and a key of the user's with the queue's hash tag),
/// every job once, the streams on the masters that hold the queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_each_queue_streams_into_its_own_slot() {
    let cluster = support::RedisCluster::start(3, 0);
    let options = tickless_durable::ConnectOptions::cluster(cluster.seeds());
    // Two names whose slots two different masters hold.
    let mut names: Vec<String> = Vec::new();
    let mut masters = Vec::new();
    for i in 0.. {
        let name = queue_name(&format!("cluster-{i}"));
        let master = cluster.master_of_slot(cluster.slot_of(&format!("{{{name}}}")));
        if !masters.contains(&master) {
            masters.push(master);
            names.push(name);
        }
        if names.len() == 2 {
            break;
        }
    }
    let mut keys = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let queue = options.connect(name).await.unwrap();
        queue.set_manual_clock(Some(at(T0))).await.unwrap();
        let key = if n == 0 {
            queue.default_stream_key()
        } else {
            format!("jobs-due:{{{name}}}")
        };
        queue
            .set_stream_outlet(Some(&StreamOutlet::new(&key)))
            .await
            .unwrap();
        let other = format!("jobs-due:{{{}}}", names[1 - n]);
        let err = queue
            .set_stream_outlet(Some(&StreamOutlet::new(&other)))
            .await
            .unwrap_err();
        assert!(err.is_invalid_outlet(), "{err}");
        for i in 0..50u64 {
            let id = format!("{name}-{i}");
            queue
                .schedule(&id, id.as_bytes(), at(T0 + i * 3_600_000 / 50))
                .await
                .unwrap();
        }
        queue
            .advance_manual_clock(Duration::from_secs(3_600))
            .await
            .unwrap();
        let mut leader = queue.leader(LeaderOptions::default());
        for _ in 0..5 {
            leader.step().await.unwrap();
        }
        assert_eq!(queue.counters().await.unwrap().streamed, 50);
        keys.push((key, masters[n]));
    }
    for (key, master) in keys {
        assert_eq!(cluster.master_of_slot(cluster.slot_of(&key)), master);
        let len = cluster.node(master).cli(&["XLEN", &key]);
        assert_eq!(len.trim(), "50", "{key} on {master}");
    }
}
