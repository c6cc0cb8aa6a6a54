//! What a master's failover costs, measured as a user feels it: the lateness of jobs due
//! a moment after they were scheduled (due time by the test's clock before the call, to
//! the handler's own reading), on the queues of the masters that were never touched and
//! on the dead master's queues after its replica's promotion, and the errors `schedule`
//! returned to its callers. The cluster runs with `cluster-require-full-coverage no`, as
//! the README asks for a cluster whose masters should not stall with one another (with
//! the default `yes` every master refuses every call from the failure's detection to the
//! promotion: no client can help that). Real time: the failover is the cluster's own
//! (node timeout 1 s).

use super::cluster::{assert_same_clock, master_of_queue, run_queues, spread_names, Delivery};
use super::failover::{promotion_seen, replica_of};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tickless_durable::{ConnectOptions, Queue, When, WorkerOptions};
use tickless_test_support::{self as support, RedisCluster};

/// Each job's delay: due this long after its schedule was sent.
const DELAY: Duration = Duration::from_millis(200);

/// How often each queue gets a new job.
const EVERY: Duration = Duration::from_millis(100);

/// `WAIT`'s limit on the queues that wait for a replica: after the promotion every
/// `WAIT` runs to it (the promoted master has no replica).
const WAIT_LIMIT: Duration = Duration::from_secs(1);

/// The most a job may be late on a queue whose master was never touched, at any time,
/// and on the dead master's queues for jobs due 1 s or more after the promotion as the
/// cluster tells it (the last surviving master to learn of it: clients ask them; they
/// learn some 1.2 s after the replica itself here). Before the fixes of issue 29 the
/// first went up to 1.2 s with `cluster-require-full-coverage yes` (every master answers
/// `CLUSTERDOWN` from the failure's detection to the promotion) and the second to 3.4 to
/// 5 s (each ack's `WAIT` running to its limit ahead of the worker's claims); now both
/// stay near what the queues see with no failover (see the figures printed). Generous
/// for a loaded 2-core machine running six Redis servers.
const LATE_BOUND: Duration = Duration::from_millis(500);

/// One call of `schedule`, as its caller saw it.
#[derive(Debug)]
struct Call {
    queue: String,
    id: String,
    sent: SystemTime,
    answered: SystemTime,
    /// `Ok(())` if stored (with `WAIT`: also with too few replicas); the error otherwise.
    answer: Result<(), String>,
}

/// Schedules `s0`, `s1`, .. on `queue`, one every [`EVERY`], each due [`DELAY`] after it
/// was sent, until `stop`; never sends one again: an error is what a caller would see.
async fn keep_scheduling(queue: Queue, stop: Arc<AtomicBool>, calls: Arc<Mutex<Vec<Call>>>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("s{n}");
        let sent = SystemTime::now();
        let result =
            tokio::time::timeout(Duration::from_secs(20), queue.schedule(&id, b"x", DELAY))
                .await
                .unwrap_or_else(|_| {
                    panic!("{}/{id}: a schedule not answered within 20 s", queue.name())
                });
        let answer = match result {
            Ok(_) => Ok(()),
            Err(err) if err.is_replication() => Ok(()),
            Err(err) => Err(err.to_string()),
        };
        calls.lock().unwrap().push(Call {
            queue: queue.name().to_string(),
            id,
            sent,
            answered: SystemTime::now(),
            answer,
        });
        n += 1;
        tokio::time::sleep(EVERY).await;
    }
}

/// When the node on `port` first sees `replica` as `slot`'s master (polled every 10 ms,
/// for at most 30 s): the cluster's own news of a promotion, which the client asks for.
fn learned_by(port: u16, replica: u16, slot: u16) -> std::thread::JoinHandle<Option<SystemTime>> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if support::master_of_slot_seen_by(port, slot) == Some(replica) {
                return Some(SystemTime::now());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    })
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The `p`th percentile (0..=100) of `sorted`.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

/// `p50/p99/max` of `lateness`, in ms, with their count.
fn summary(mut lateness: Vec<Duration>) -> String {
    lateness.sort();
    format!(
        "p50 {} p99 {} max {} ms of {}",
        ms(percentile(&lateness, 50)),
        ms(percentile(&lateness, 99)),
        ms(lateness.last().copied().unwrap_or_default()),
        lateness.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masters_failover_slows_no_other_master_and_its_queues_are_back_within_a_second_of_the_news(
) {
    let mut cluster = RedisCluster::start(3, 1);
    assert_same_clock(&cluster);
    for url in cluster.seeds() {
        let port: u16 = url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let set = ["CONFIG", "SET", "cluster-require-full-coverage", "no"];
        assert_eq!(cluster.node(port).cli(&set).trim(), "OK");
    }
    // Half the queues' schedules wait for a replica, half do not.
    let waiting = spread_names(&cluster, "iw", 6);
    let plain = spread_names(&cluster, "ip", 6);
    let with_wait = ConnectOptions::cluster(cluster.seeds()).wait_for_replicas(1, WAIT_LIMIT);
    let without = ConnectOptions::cluster(cluster.seeds());
    let mut running = run_queues(&with_wait, &waiting, WorkerOptions::default()).await;
    running
        .add(&without, &plain, WorkerOptions::default())
        .await;
    let victim = master_of_queue(&cluster, &waiting[0]);
    let replica = replica_of(&cluster, victim);
    let slot = cluster.slot_of(&format!("tickless:{{{}}}:meta", waiting[0]));
    let on_victim: Vec<String> = running
        .queues
        .iter()
        .map(|q| q.name().to_string())
        .filter(|n| master_of_queue(&cluster, n) == victim)
        .collect();

    // On each queue a job due every 100 ms over the next 12 s, scheduled well before the
    // kill (a replica has them): lateness right from the promotion, whatever becomes of
    // the schedules sent meanwhile.
    let mut due: BTreeMap<(String, String), SystemTime> = BTreeMap::new();
    let grid_start = SystemTime::now() + Duration::from_millis(500);
    for queue in &running.queues {
        let jobs: Vec<(String, SystemTime)> = (0..120u32)
            .map(|k| (format!("t{k}"), grid_start + EVERY * k))
            .collect();
        let added = queue
            .schedule_batch(
                jobs.iter()
                    .map(|(id, at)| (id.as_str(), b"x", When::At(*at))),
            )
            .await
            .expect("the grid of jobs");
        assert!(added.iter().all(|&added| added));
        for (id, at) in jobs {
            due.insert((queue.name().to_string(), id), at);
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let schedulers: Vec<_> = running
        .queues
        .iter()
        .map(|q| tokio::spawn(keep_scheduling(q.clone(), stop.clone(), calls.clone())))
        .collect();
    let mut deliveries: Vec<Delivery> = running
        .take(
            120,
            Duration::from_secs(20),
            "120 deliveries before the kill",
        )
        .await;

    let killed_at = SystemTime::now();
    let others: Vec<u16> = cluster
        .masters()
        .into_iter()
        .filter(|&m| m != victim)
        .collect();
    cluster.kill(victim);
    let survivors: Vec<_> = others
        .into_iter()
        .map(|m| learned_by(m, replica, slot))
        .collect();
    let promoted =
        tokio::task::spawn_blocking(move || promotion_seen(victim, replica, slot).join())
            .await
            .unwrap()
            .expect("the promotion watcher");
    // Jobs keep coming for 4 s after the promotion.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        deliveries.extend(running.drain());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for scheduler in schedulers {
        tokio::time::timeout(Duration::from_secs(25), scheduler)
            .await
            .expect("the schedulers stop within 25 s")
            .unwrap();
    }
    let calls = std::mem::take(&mut *calls.lock().unwrap());
    let learned_at: Vec<SystemTime> = survivors
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap()
                .expect("a surviving master learns of the promotion")
        })
        .collect();
    let learned: Vec<u64> = learned_at
        .iter()
        .map(|at| ms(at.duration_since(promoted.after).unwrap_or_default()))
        .collect();
    // The promotion as the cluster tells it to a client that asks any master.
    let known = learned_at.iter().copied().max().unwrap();

    // Every stored job is delivered (a delivery the dead master handed out, whose ack
    // died with it, comes again only after its lease: the first one counts).
    for call in calls.iter().filter(|c| c.answer.is_ok()) {
        due.insert((call.queue.clone(), call.id.clone()), call.sent + DELAY);
    }
    // A schedule stored only on the dead master just before the kill may be lost with it.
    let expected = due
        .iter()
        .filter(|((q, id), at)| {
            !on_victim.contains(q) || id.starts_with('t') || **at >= promoted.after
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    deliveries.extend(running.drain());
    let deliveries = running
        .until_delivered(&expected, Duration::from_secs(30), deliveries)
        .await;
    let mut first: BTreeMap<(String, String), SystemTime> = BTreeMap::new();
    for d in &deliveries {
        first.entry(d.key()).or_insert(d.started);
    }

    // Lateness, per group of queues and window of due times.
    let late = |victims: bool, from: SystemTime, to: SystemTime| -> Vec<Duration> {
        first
            .iter()
            .filter(|((q, _), _)| on_victim.contains(q) == victims)
            .filter_map(|(key, started)| due.get(key).map(|at| (*at, *started)))
            .filter(|(at, _)| (from..to).contains(at))
            .map(|(at, started)| started.duration_since(at).unwrap_or_default())
            .collect()
    };
    let begin = SystemTime::UNIX_EPOCH;
    let end = SystemTime::now() + Duration::from_secs(3_600);
    let calm = late(false, begin, killed_at);
    let others_during = late(false, killed_at, promoted.seen + Duration::from_secs(1));
    let victims_first_second = late(
        true,
        promoted.after,
        promoted.after + Duration::from_secs(1),
    );
    let victims_after = late(true, promoted.after + Duration::from_secs(1), end);
    let victims_known = late(true, known + Duration::from_secs(1), end);
    // The longest time without a delivery on each untouched queue, from the kill to 1 s
    // after the promotion.
    let mut gap = Duration::ZERO;
    for queue in running
        .queues
        .iter()
        .map(|q| q.name())
        .filter(|n| !on_victim.iter().any(|v| v == n))
    {
        let mut times: Vec<SystemTime> = deliveries
            .iter()
            .filter(|d| d.queue == queue)
            .map(|d| d.started)
            .filter(|t| (killed_at..promoted.seen + Duration::from_secs(1)).contains(t))
            .collect();
        times.insert(0, killed_at);
        times.sort();
        for pair in times.windows(2) {
            gap = gap.max(pair[1].duration_since(pair[0]).unwrap_or_default());
        }
    }
    let errors: Vec<&Call> = calls.iter().filter(|c| c.answer.is_err()).collect();
    // On each of the dead master's queues, the first schedule answered after the
    // promotion (those sent in the outage wait in `schedule`'s retries until then).
    let resumed: Vec<u64> = on_victim
        .iter()
        .map(|q| {
            calls
                .iter()
                .filter(|c| &c.queue == q && c.answer.is_ok() && c.answered >= promoted.after)
                .map(|c| ms(c.answered.duration_since(promoted.after).unwrap()))
                .min()
                .expect("a schedule answered after the promotion")
        })
        .collect();
    let promotion = promoted.seen.duration_since(killed_at).unwrap();
    eprintln!(
        "isolation: promoted {} ms after the kill (the other masters learned of it {:?} ms later); lateness on untouched masters before the \
         kill {}, from the kill to 1 s after the promotion {} (longest gap between \
         deliveries {} ms); on the dead master's queues in the first second after the \
         promotion {}, after it {}, from 1 s after the other masters learned of it {}; \
         schedules answered again {:?} ms after the promotion; {} \
         schedules, {} errors seen by the callers",
        ms(promotion),
        learned,
        summary(calm.clone()),
        summary(others_during.clone()),
        ms(gap),
        summary(victims_first_second),
        summary(victims_after),
        summary(victims_known.clone()),
        resumed,
        calls.len(),
        errors.len()
    );
    assert!(
        errors.is_empty(),
        "{} schedules failed with their callers, e.g. {:?}",
        errors.len(),
        errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        !others_during.is_empty() && !victims_known.is_empty(),
        "jobs in every window"
    );
    let worst = |l: &[Duration]| l.iter().max().copied().unwrap_or_default();
    assert!(
        worst(&others_during) <= LATE_BOUND,
        "a job on an untouched master {} ms late during the failover (bound {} ms)",
        ms(worst(&others_during)),
        ms(LATE_BOUND)
    );
    assert!(
        worst(&victims_known) <= LATE_BOUND,
        "a job on the dead master's queues {} ms late 1 s or more after the cluster knew \
         of the promotion (bound {} ms)",
        ms(worst(&victims_known)),
        ms(LATE_BOUND)
    );
    running.stop().await;
}
