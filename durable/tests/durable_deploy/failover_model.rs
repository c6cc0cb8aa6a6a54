//! What a master's kill may cost its queues, as the failover test (`failover.rs`) checks
//! it: what the replica held when its master died (the state the promoted master starts
//! from), and which write lost with the master explains a job that came twice.

use super::cluster::{Delivery, Key};
use super::failover::{Call, Promotion, LEASE};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};
use tickless_test_support::RedisCluster;

/// From a claim on Redis, where its lease starts, to its handler's first reading of the
/// clock, where the test counts it from: the claim's answer read, the handler spawned.
/// A few ms; this allows for a loaded 2-core machine.
const CLAIM_TO_HANDLER: Duration = Duration::from_millis(250);

/// What the dead master's replica held of its queues: the state the promoted master
/// starts from.
#[derive(Debug, Default)]
pub(super) struct ReplicaView {
    /// Every job with a record (scheduled, ready, in flight or dead).
    pub records: BTreeSet<Key>,
    /// The jobs in `flight`, each with the delivery number its record holds (I1).
    pub in_flight: BTreeMap<Key, u64>,
    /// Per queue, meta's `delivery`: the number of the last delivery it knew handed out.
    pub last_delivery: BTreeMap<String, u64>,
}

/// What the replica on `port` holds of `names`' queues, read once it has seen its master
/// go (so it has applied all it received), before it is promoted.
pub(super) fn replica_view(cluster: &RedisCluster, port: u16, names: &[String]) -> ReplicaView {
    let replica = cluster.node(port);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:down")
    {
        assert!(
            Instant::now() < deadline,
            "the replica did not see its master go within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let client = redis::Client::open(replica.url_by_address()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("READONLY").query(&mut conn).unwrap();
    let mut view = ReplicaView::default();
    for name in names {
        let key = |k: &str| format!("tickless:{{{name}}}:{k}");
        let ids: Vec<String> = redis::cmd("HKEYS")
            .arg(key("jobs"))
            .query(&mut conn)
            .unwrap();
        view.records
            .extend(ids.into_iter().map(|id| (name.clone(), id)));
        let flying: Vec<String> = redis::cmd("ZRANGE")
            .arg(key("flight"))
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        for id in flying {
            let record: String = redis::cmd("HGET")
                .arg(key("jobs"))
                .arg(&id)
                .query(&mut conn)
                .unwrap();
            // `due|s<delivery>|attempts|max|skip|payload`
            let delivery = record
                .split('|')
                .nth(1)
                .and_then(|loc| loc.strip_prefix('s'))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{name}/{id} in flight, its record {record:?}"));
            view.in_flight.insert((name.clone(), id), delivery);
        }
        let last: Option<u64> = redis::cmd("HGET")
            .arg(key("meta"))
            .arg("delivery")
            .query(&mut conn)
            .unwrap();
        view.last_delivery.insert(name.clone(), last.unwrap_or(0));
    }
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).unwrap();
    assert!(
        matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"slave"),
        "read after the promotion, not before: {role:?}"
    );
    view
}

/// The kill as the test saw it: the master died between `killed_at` and `dead_at`, and no
/// master served its queues from then until its replica's promotion.
pub(super) struct Kill {
    pub killed_at: SystemTime,
    pub dead_at: SystemTime,
    pub promoted: Promotion,
}

/// Why a job of the dead master's queues came twice: a write for it that the dead master
/// made never reached its replica (replication is asynchronous, and `WAIT` covers
/// schedules only). Each leaves its own trace in what the replica had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum LostWrite {
    /// Its ack: the replica had the first delivery in flight, and the promoted master
    /// hands the job out again once that delivery's lease has ended (an ack the worker
    /// sends again to the promoted master after the lease's end is too late as well).
    Ack,
    /// Its claim: the replica had the job but not the delivery (its number is past the
    /// replica's count), so the job waits there (`ready`, or `due`) and goes out again at
    /// once.
    Claim,
    /// Its schedule, after the dead master had handed the job out: the replica never had
    /// it, and the call in flight at the kill was sent again (by the queue, or by the test
    /// after an `Away`) to the promoted master, which stored it anew: a resend's token is
    /// remembered only where its first try ran.
    Schedule,
}

/// Which write lost with the master explains the two deliveries `ds` of `key`, whose
/// schedule calls were `calls`; `None` if none does. Either way the first came from the
/// dead master (before the promotion) and the second from the promoted one.
pub(super) fn why_repeated(
    key: &Key,
    ds: &[&Delivery],
    view: &ReplicaView,
    kill: &Kill,
    calls: &[&Call],
) -> Option<LostWrite> {
    let last = *view.last_delivery.get(&key.0)?;
    let [first, second] = ds else {
        return None;
    };
    if first.started >= kill.promoted.after || second.started < kill.promoted.after {
        return None;
    }
    if let Some(&delivery) = view.in_flight.get(key) {
        // Not before the end of the lease the first delivery's claim took.
        let lease_end = first.started + LEASE;
        (delivery == first.delivery && second.started + CLAIM_TO_HANDLER >= lease_end)
            .then_some(LostWrite::Ack)
    } else if view.records.contains(key) {
        (first.delivery > last).then_some(LostWrite::Claim)
    } else {
        // Sent before the master died, answered after it was killed.
        let in_flight_at_kill = calls
            .iter()
            .any(|c| c.sent < kill.dead_at && c.answered >= kill.killed_at);
        (first.delivery > last && in_flight_at_kill).then_some(LostWrite::Schedule)
    }
}
