//! A master of a Redis Cluster killed with SIGKILL while jobs flow and schedules keep
//! coming, from clients with `wait_for_replicas` and without: what its replica had is
//! what survives. A job is lost only if its schedule was the last its queue sent before
//! the master died, answered without `WAIT`; a job comes twice only if a write the dead
//! master made for it never reached the replica (its ack: again when its lease ends; its
//! claim: again at once; its schedule, after the dead master handed the job out: stored
//! again by the call in flight at the kill), each told by what the replica held; and
//! deliveries resume soon after the promotion.
//! Real time: the failover is the cluster's own (node timeout 1 s).

use super::cluster::{
    assert_none_early, assert_same_clock, by_job, master_of_queue, run_queues, schedule_spread,
    spread_names, Due, Key,
};
use super::failover_model::{replica_view, why_repeated, Kill, LostWrite};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tickless_durable::{ConnectOptions, Queue, WorkerOptions};
use tickless_test_support::{self as support, RedisCluster};

/// From the promotion of the dead master's replica (the last moment it was not yet
/// promoted, as the replica itself tells) to the first delivery, on each of its queues,
/// of a job that came due while no master served it; and the latest a schedule sent
/// after the promotion may still be refused. A call sent while the master was dead waits
/// in the cluster client's retries, which back off up to 200 ms (`max_retry_wait`), then
/// finds the promoted replica; the leader and the worker try again every 100 ms, the
/// leader subscribes again (it asks for the slot's master every 100 ms) and ticks, and
/// the worker claims (a schedule's `WAIT`, which runs to its limit on the promoted master,
/// has a connection of its own and holds none of them up). Measured 1.0 to 2.7 s on a
/// loaded 2-core machine before schedules stopped holding them up, 0.95-1.80 s after in
/// twelve runs (the surviving masters learn of the promotion 0.7-1.6 s after the replica:
/// `isolation.rs`).
const RESUME_BOUND: Duration = Duration::from_millis(3_000);

/// The workers' lease: short, so that a delivery whose ack died with the master comes
/// again within the test, where it is counted (no earlier than its lease's end); longer
/// than the cluster stays down (the survivors refuse every call from the kill's detection
/// to the promotion, ~1.5 s) plus the client's backoff, so that no ack on a surviving
/// master comes after its lease.
pub(super) const LEASE: Duration = Duration::from_secs(5);

/// What became of one call of `schedule`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Answer {
    /// `Ok(added)`.
    Stored(bool),
    /// [`Error::is_replication`](tickless_durable::Error::is_replication): stored on the
    /// master, fewer replicas have it than asked.
    FewReplicas(String),
    /// [`Error::is_redis`](tickless_durable::Error::is_redis): the master could not be
    /// reached, or its answer was lost; sent again.
    Away(String),
}

/// One call of `schedule`, as its caller saw it.
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub queue: String,
    pub id: String,
    pub sent: SystemTime,
    pub answered: SystemTime,
    answer: Answer,
}

/// Schedules jobs `live0`, `live1`, .. on `queue` one after another until `stop`, each
/// sent again while the answer is [`Answer::Away`] (scheduling is idempotent on the id);
/// every call into `calls`.
async fn keep_scheduling(queue: Queue, stop: Arc<AtomicBool>, calls: Arc<Mutex<Vec<Call>>>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("live{n}");
        let delay = Duration::from_millis(n % 3 * 100);
        for tries in 0.. {
            assert!(
                tries < 500,
                "{}/{id}: still refused after 500 tries",
                queue.name()
            );
            let sent = SystemTime::now();
            let result =
                tokio::time::timeout(Duration::from_secs(10), queue.schedule(&id, b"x", delay))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("{}/{id}: a schedule not answered within 10 s", queue.name())
                    });
            let answer = match result {
                Ok(added) => Answer::Stored(added),
                Err(err) if err.is_replication() => Answer::FewReplicas(err.to_string()),
                Err(err) if err.is_redis() => Answer::Away(err.to_string()),
                Err(err) => panic!("{}/{id}: {err}", queue.name()),
            };
            let away = matches!(answer, Answer::Away(_));
            calls.lock().unwrap().push(Call {
                queue: queue.name().to_string(),
                id: id.clone(),
                sent,
                answered: SystemTime::now(),
                answer,
            });
            if !away {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many jobs of each queue got their last answer after `since`.
fn answered_after(calls: &[Call], since: SystemTime) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for call in calls {
        if call.answered > since && !matches!(call.answer, Answer::Away(_)) {
            *count.entry(call.queue.clone()).or_default() += 1;
        }
    }
    count
}

/// Waits until every queue of `names` has at least `n` jobs answered after `since`.
async fn until_answered(
    calls: &Mutex<Vec<Call>>,
    names: &[String],
    n: usize,
    since: SystemTime,
    limit: Duration,
    what: &str,
) {
    let deadline = Instant::now() + limit;
    loop {
        let count = answered_after(&calls.lock().unwrap(), since);
        if names
            .iter()
            .all(|q| count.get(q).copied().unwrap_or(0) >= n)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not {n} schedules answered {what} on every queue within {limit:?}: {count:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The port of the replica of the master on `master`.
pub(super) fn replica_of(cluster: &RedisCluster, master: u16) -> u16 {
    let ports: Vec<u16> = cluster
        .seeds()
        .iter()
        .map(|url| {
            url.trim_end_matches('/')
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    let line = format!("master_port:{master}\r");
    ports
        .into_iter()
        .find(|&port| {
            port != master && {
                let info = cluster.node(port).cli(&["INFO", "replication"]);
                info.contains("role:slave") && info.contains(&line)
            }
        })
        .expect("a replica of the master")
}

/// When the replica on `replica` took `slot` over from `victim`, bracketed: `after` is
/// when the last poll that still saw `victim` began, `seen` when the first that saw the
/// replica ended. The replica is asked (it knows it was promoted before anyone it tells),
/// and the true moment lies between the two: a delivery from the promoted master can
/// start before `seen` (the poll is a `redis-cli` process every 10 ms), never before
/// `after`. Fails after 20 s.
#[derive(Clone, Copy, Debug)]
pub(super) struct Promotion {
    pub after: SystemTime,
    pub seen: SystemTime,
}

pub(super) fn promotion_seen(
    victim: u16,
    replica: u16,
    slot: u16,
) -> std::thread::JoinHandle<Promotion> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut after = SystemTime::now();
        loop {
            let asked = SystemTime::now();
            match support::master_of_slot_seen_by(replica, slot) {
                Some(port) if port == replica => {
                    let seen = SystemTime::now();
                    return Promotion { after, seen };
                }
                Some(port) if port == victim => after = asked,
                // No owner for a moment, or an unreadable reply: nothing learned.
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "no replica promoted for slot {slot} within 20 s of the kill"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masters_kill_9_fails_over_and_deliveries_resume_none_lost_none_promoted_twice() {
    let mut cluster = RedisCluster::start(3, 1);
    assert_same_clock(&cluster);
    // Half the queues' clients wait for a replica after each schedule, half do not.
    let waiting = spread_names(&cluster, "w", 8);
    let plain = spread_names(&cluster, "p", 8);
    let names: Vec<String> = waiting.iter().chain(&plain).cloned().collect();
    // WAIT's limit: a live replica answers well within it. The promoted one has no
    // replica, so every schedule's WAIT then runs to the limit (on the schedules' own
    // connection: the leader and worker do not wait behind it).
    let with_wait =
        ConnectOptions::cluster(cluster.seeds()).wait_for_replicas(1, Duration::from_millis(300));
    let without = ConnectOptions::cluster(cluster.seeds());
    let mut worker = WorkerOptions::default();
    worker.lease = LEASE;
    let mut running = run_queues(&with_wait, &waiting, worker.clone()).await;
    running.add(&without, &plain, worker).await;
    let victim = master_of_queue(&cluster, &waiting[0]);
    let on_victim: BTreeSet<&String> = names
        .iter()
        .filter(|n| master_of_queue(&cluster, n) == victim)
        .collect();
    let replica = replica_of(&cluster, victim);
    let slot = cluster.slot_of(&format!("tickless:{{{}}}:meta", waiting[0]));

    // Jobs due over 6 s, and schedules coming all along on every queue.
    let mut due = schedule_spread(&running.queues, 25, Duration::from_secs(6)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let schedulers: Vec<_> = running
        .queues
        .iter()
        .map(|q| tokio::spawn(keep_scheduling(q.clone(), stop.clone(), calls.clone())))
        .collect();
    let start = SystemTime::now();
    let before = running
        .take(40, Duration::from_secs(20), "40 deliveries before the kill")
        .await;
    until_answered(
        &calls,
        &names,
        3,
        start,
        Duration::from_secs(20),
        "before the kill",
    )
    .await;

    // The master dies: between `killed_at` and `dead_at` (the kill waits for the exit).
    let killed_at = SystemTime::now();
    cluster.kill(victim);
    let dead_at = SystemTime::now();
    let promoted = promotion_seen(victim, replica, slot);
    let victims: Vec<String> = on_victim.iter().map(|n| n.to_string()).collect();
    let view = tokio::task::block_in_place(|| replica_view(&cluster, replica, &victims));
    let promoted = tokio::task::spawn_blocking(move || promoted.join())
        .await
        .unwrap()
        .expect("the promotion watcher");
    let promotion = promoted.seen.duration_since(killed_at).unwrap();
    let kill = Kill {
        killed_at,
        dead_at,
        promoted,
    };
    // Shown with a failure's output: which queues the kill could explain.
    eprintln!(
        "killed {victim} at {killed_at:?}, dead at {dead_at:?}, serving {on_victim:?}; \
         promoted {promoted:?}; its replica held {} of their jobs, {} in flight: {:?}, \
         last deliveries {:?}",
        view.records.len(),
        view.in_flight.len(),
        view.in_flight,
        view.last_delivery
    );
    until_answered(
        &calls,
        &names,
        3,
        promoted.seen,
        Duration::from_secs(20),
        "after the promotion",
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for scheduler in schedulers {
        tokio::time::timeout(Duration::from_secs(15), scheduler)
            .await
            .expect("the schedulers stop within 15 s")
            .unwrap();
    }
    let calls = std::mem::take(&mut *calls.lock().unwrap());

    // Every job whose schedule was answered `Ok` or stored without enough replicas.
    let mut first_sent: BTreeMap<Key, SystemTime> = BTreeMap::new();
    for call in &calls {
        first_sent
            .entry((call.queue.clone(), call.id.clone()))
            .or_insert(call.sent);
    }
    let mut last_answer: BTreeMap<Key, &Call> = BTreeMap::new();
    for call in &calls {
        last_answer.insert((call.queue.clone(), call.id.clone()), call);
    }
    for (key, call) in &last_answer {
        let n: u64 = key.1["live".len()..].parse().unwrap();
        let delay = Duration::from_millis(n % 3 * 100);
        assert!(!matches!(call.answer, Answer::Away(_)), "{call:?}");
        due.insert(key.clone(), first_sent[key] + delay);
    }
    // A job the replica never had, whose last call the dead master may have answered
    // (sent before it died), may be lost with it; the rest are delivered. How many were
    // lost is checked once every job is accounted for.
    let may_lose: BTreeSet<Key> = due
        .keys()
        .filter(|key| on_victim.contains(&key.0) && !view.records.contains(*key))
        .filter(|key| match last_answer.get(*key) {
            Some(call) => call.sent < dead_at,
            // The spread's jobs, scheduled with no kill near.
            None => false,
        })
        .cloned()
        .collect();
    let expected: Due = due
        .iter()
        .filter(|(key, _)| !may_lose.contains(*key))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let after = running
        .until_delivered(&expected, Duration::from_secs(30), before)
        .await;
    running.until_empty(Duration::from_secs(30)).await;
    let mut all = after;
    all.extend(running.drain());
    assert_none_early(&all, &due);
    let jobs = by_job(&all);
    let lost: Vec<&Key> = may_lose.iter().filter(|k| !jobs.contains_key(*k)).collect();
    // A loss is a schedule the dead master answered in its last pass through its event
    // loop, which would have sent the write to its replica too (over loopback a write
    // sent is received), and only without `WAIT`, which answers once the replica has the
    // write. A queue's calls come one at a time, each 50 ms after the answer before: the
    // dead master answered none after it, so the promoted one answered all that came
    // after it (refusals are sent again). At most one per queue.
    for key in &lost {
        let call = last_answer[*key];
        let later: Vec<&Call> = calls
            .iter()
            .filter(|c| c.queue == key.0 && c.sent > call.sent)
            .collect();
        assert!(
            !waiting.contains(&key.0) && later.iter().all(|c| c.answered >= promoted.after),
            "{key:?} lost: {call:?}; with WAIT, or answered before a later call of its queue \
             that the dead master answered: {:?} (promoted {promoted:?})",
            later.iter().find(|c| c.answered < promoted.after)
        );
    }

    // Only jobs of the dead master's queues come twice, at most once more, the second
    // time from the promoted master: each because a write for it died with the dead
    // master, which one told apart by what the replica had (`why_repeated`).
    let mut repeats: BTreeMap<LostWrite, usize> = BTreeMap::new();
    let mut schedule_lost: BTreeMap<&str, usize> = BTreeMap::new();
    for (key, ds) in &jobs {
        if ds.len() == 1 {
            continue;
        }
        let key_calls: Vec<&Call> = calls
            .iter()
            .filter(|c| (&c.queue, &c.id) == (&key.0, &key.1))
            .collect();
        let why = why_repeated(key, ds, &view, &kill, &key_calls);
        let Some(why) = why else {
            panic!(
                "delivered {} times with no kill to explain it: {ds:?}; its schedules: \
                 {key_calls:?}; killed at {killed_at:?}, dead at {dead_at:?}, promoted \
                 {promoted:?}; the replica's record: {}, in flight: {:?}, last delivery: \
                 {:?}",
                ds.len(),
                view.records.contains(key),
                view.in_flight.get(key),
                view.last_delivery.get(&key.0)
            )
        };
        *repeats.entry(why).or_default() += 1;
        if why == LostWrite::Schedule {
            *schedule_lost.entry(&key.0).or_default() += 1;
        }
    }
    // A queue's calls come one at a time: one in flight at the kill, at most.
    for (queue, n) in &schedule_lost {
        assert!(
            *n <= 1,
            "{queue}: {n} jobs scheduled again after the dead master handed them out"
        );
    }
    // And the other way: a delivery the replica never knew of, of a job it had, comes
    // again (its job waits in `ready`, or `due`, on the promoted master).
    for d in &all {
        let key = d.key();
        let unknown = view
            .last_delivery
            .get(&d.queue)
            .is_some_and(|last| d.delivery > *last);
        if unknown
            && d.started < promoted.after
            && view.records.contains(&key)
            && !view.in_flight.contains_key(&key)
        {
            assert_eq!(
                jobs[&key].len(),
                2,
                "{key:?}: its claim died with the master, yet it came {:?}",
                jobs[&key]
            );
        }
    }

    // Deliveries resume on each of the dead master's queues within the bound: the first
    // of a job that came due while no master served it (scheduled before the kill, due
    // after it), which takes the promoted master, the leader's tick and the worker.
    let mut resumed = Vec::new();
    for queue in &on_victim {
        let first = all
            .iter()
            .filter(|d| d.queue == **queue && d.id.starts_with('j'))
            .filter(|d| (killed_at..promoted.after).contains(&due[&d.key()]))
            .map(|d| d.started)
            .min()
            .expect("a job due during the failover");
        resumed.push(
            first
                .duration_since(promoted.after)
                .expect("no delivery from the promoted master before its promotion"),
        );
    }
    let slowest = *resumed.iter().max().unwrap();
    assert!(
        slowest <= RESUME_BOUND,
        "deliveries resumed {slowest:?} after the promotion (bound {RESUME_BOUND:?}): {resumed:?}"
    );

    // What the schedules were answered: refused (and sent again) only from the kill to
    // the promotion and the bound; a client with WAIT was never told `Ok` by the promoted
    // replica, which has no replica of its own.
    let mut resent = 0;
    for call in &calls {
        let victim_queue = on_victim.contains(&call.queue);
        let waits = waiting.contains(&call.queue);
        match &call.answer {
            Answer::Stored(_) => assert!(
                !(victim_queue && waits && call.sent >= killed_at),
                "`Ok` with WAIT from a master without a replica: {call:?}"
            ),
            Answer::FewReplicas(message) => assert!(
                victim_queue
                    && waits
                    && call.answered >= killed_at
                    && message.contains("0 of 1 replicas"),
                "too few replicas without a failover to explain it: {call:?}"
            ),
            // The others are refused too while the cluster is down (a slot without a
            // master: `cluster-require-full-coverage`), from the kill's detection to
            // the promotion.
            Answer::Away(message) => {
                resent += 1;
                assert!(
                    (victim_queue || message.contains("ClusterDown"))
                        && call.answered >= killed_at
                        && call.sent <= promoted.seen + RESUME_BOUND,
                    "refused with no kill to explain it: {call:?}"
                );
            }
        }
    }
    for queue in on_victim.iter().filter(|q| waiting.contains(*q)) {
        assert!(
            calls.iter().any(|c| c.queue == **queue
                && c.sent >= promoted.seen
                && matches!(c.answer, Answer::FewReplicas(_))),
            "{queue}: WAIT was never answered short by the promoted replica"
        );
    }
    eprintln!(
        "failover: victim {victim} served {} queues; promoted {} ms after the kill; \
         deliveries resumed {:?} ms after it (bound {} ms); {} schedules, {resent} sent \
         again; jobs delivered twice: {repeats:?}; {} lost of {} that could be",
        on_victim.len(),
        ms(promotion),
        resumed.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        ms(RESUME_BOUND),
        calls.len(),
        lost.len(),
        may_lose.len()
    );
    running.stop().await;
}
