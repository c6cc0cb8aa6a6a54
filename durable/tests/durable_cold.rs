//! The cold tier (feature `cold`) against a real `redis-server` and a real directory, on
//! the queue's manual clock: far jobs leave Redis for segments and come back before
//! their window, each delivered once, never early and not late; every promise of `Queue`
//! holds for a cold job (idempotent schedule, cancel, reschedule, lookup); a store that
//! fails (errors, a read-only directory, a full one, damage) loses nothing; a leader that
//! dies between the steps of a move or a load (its task stopped where the store hangs) is
//! replaced and nothing is lost or doubled.

use tickless_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::{at, RedisServer, T0};
use tickless_durable::{ColdTier, JobState, LeaderOptions, Queue, When};

#[cfg(feature = "dashboard")]
mod in_process;
mod cold {
    pub mod common;
    pub mod faulty;
    pub mod tmpfs;
    // What the metrics, the dashboard, `inspect` and the counters say of the tier.
    #[cfg(feature = "dashboard")]
    pub mod surfaces;
}
use cold::common::*;
use cold::faulty::{Fault, Faulty};
use cold::tmpfs::Tmpfs;

fn tier(dir: &Path) -> ColdTier {
    ColdTier::local(dir)
        .expect("a local tier")
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_jobs_go_cold_keep_every_promise_and_come_back_once_on_time() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-promises");
    let (queue, mut leader, worker) = setup(&server, "cold-promises", tier(&dir.0)).await;
    let jobs_key = jobs_key(&queue);
    let mut due = schedule_far(&queue, T0, 3000).await;
    // Near jobs stay in Redis: due within the horizon.
    for i in 0..20u64 {
        let id = format!("near:{i}");
        assert!(queue
            .schedule(&id, b"n", When::At(at(T0 + 10_000 + i)))
            .await
            .unwrap());
        due.insert(id, T0 + 10_000 + i);
    }
    assert_eq!(hlen(&server, &jobs_key).await, 3020);

    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 3000);
    assert_eq!(
        hlen(&server, &jobs_key).await,
        20,
        "only the near jobs left in `jobs`"
    );
    assert_eq!(index_entries(&server, &queue).await, 3000);
    let windows = queue.cold_windows().await.unwrap();
    assert_eq!(windows.iter().map(|w| w.jobs).sum::<u64>(), 3000);
    assert_eq!(
        windows.iter().map(|w| w.segments).sum::<u64>() as usize,
        files(&dir.0).len()
    );
    for w in &windows {
        let start = w
            .start
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert_eq!(start % HOUR, 0, "windows start on the hour");
        assert!(
            start >= T0 + 6 * HOUR,
            "a window within the horizon went cold"
        );
    }
    // A second pass moves nothing more.
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 3000);

    keep_promises(&queue, &mut due).await;
    // Without the tier, what Redis knows: cold, due within its window, no payload; a
    // reschedule, which needs the record, says what it lacks.
    let plain = Queue::connect(&server.url(), queue.name()).await.unwrap();
    let info = plain
        .job("far:200")
        .await
        .unwrap()
        .expect("a cold job is a job");
    assert_eq!(info.state, JobState::Cold);
    assert!(info.due <= at(due["far:200"]) && info.due > at(due["far:200"] - HOUR));
    assert!(info.payload.is_empty());
    let err = plain
        .reschedule("far:200", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        err.is_store() && err.to_string().contains("with_cold_tier"),
        "{err}"
    );
    // A cancelled cold id is free again; scheduled anew, it is a new (hot) job.
    assert!(queue
        .schedule("far:99", b"new", When::At(at(T0 + 30_000)))
        .await
        .unwrap());
    due.insert("far:99".into(), T0 + 30_000);
    let windows = queue.cold_windows().await.unwrap();
    assert_eq!(windows.iter().map(|w| w.jobs).sum::<u64>(), 2850);

    // Each job comes once, with its due time, in the first stride whose end reaches it:
    // never early, and not late (a load that filed its jobs behind their due times, or
    // handed them out before, fails a stride).
    let mut owed = due.clone();
    let first = stride_to(&queue, &mut leader, &worker, T0 + 61_000, &mut owed).await;
    assert_eq!(
        first.len(),
        20 + 1 + 50,
        "near, far:99 anew, the 50 rescheduled: {first:?}"
    );

    // Nothing loads before its window is within the lead (3 h)...
    let before_load = T0 + FAR - 4 * HOUR;
    assert!(
        stride_to(&queue, &mut leader, &worker, before_load, &mut owed)
            .await
            .is_empty()
    );
    assert_eq!(leader.stats().cold_loaded, 0);
    // ... then every remaining job comes back into Redis, and the store empties.
    assert!(
        stride_to(&queue, &mut leader, &worker, T0 + FAR - 2 * HOUR, &mut owed)
            .await
            .is_empty()
    );
    assert_eq!(leader.stats().cold_loaded, 2850);
    assert!(queue.cold_windows().await.unwrap().is_empty());
    assert_eq!(index_entries(&server, &queue).await, 0);
    assert!(
        files(&dir.0).is_empty(),
        "segments left: {:?}",
        files(&dir.0)
    );
    // Each window's folder (and the queue's, the deployment's) goes with its last segment.
    let folders: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert!(folders.is_empty(), "folders left in the store: {folders:?}");
    assert_eq!(
        queue.job("far:2000").await.unwrap().unwrap().state,
        JobState::Scheduled
    );

    // Then each is delivered at its due time: step through in 10-minute strides, each job
    // in the stride that reaches its due time.
    let mut t = T0 + FAR - 2 * HOUR;
    while t < T0 + FAR + 3000 * 1000 {
        t += 600_000;
        stride_to(&queue, &mut leader, &worker, t, &mut owed).await;
    }
    assert!(owed.is_empty(), "never delivered: {owed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_the_tier_says_it_cannot_load_a_window_that_comes_near() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-untiered");
    let (queue, mut leader, _worker) = setup(&server, "cold-untiered", tier(&dir.0)).await;
    schedule_far(&queue, T0, 10).await;
    leader.step().await.unwrap();
    drop(leader);
    // A leader of the same queue without the tier: far from the window, nothing to say.
    let plain = Queue::connect(&server.url(), queue.name()).await.unwrap();
    queue
        .advance_manual_clock(Duration::from_secs(61))
        .await
        .unwrap();
    let mut untiered = plain.leader(LeaderOptions::default());
    untiered.step().await.unwrap();
    assert!(untiered.is_leading());
    // Within the hour before the window: its rounds fail, saying why.
    queue
        .set_manual_clock(Some(at(T0 + FAR - HOUR / 2)))
        .await
        .unwrap();
    let err = untiered.step().await.unwrap_err();
    assert!(
        err.is_store() && err.to_string().contains("with_cold_tier"),
        "{err}"
    );
    assert_eq!(
        queue.stats().await.unwrap().cold,
        10,
        "nothing was loaded or lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_loses_nothing_and_the_leader_goes_on() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-faults");
    let faulty = Faulty::new(&dir.0);
    let tier = ColdTier::new(Arc::new(faulty.clone()))
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600));
    let (queue, mut leader, worker) = setup(&server, "cold-faults", tier).await;
    let jobs_key = jobs_key(&queue);
    let due = schedule_far(&queue, T0, 500).await;

    // PUT fails: the pass fails, every job stays in Redis, nothing is in the store.
    faulty.set(Fault::FailPut);
    let err = leader.step().await.unwrap_err();
    assert!(err.is_store() && err.to_string().contains("PUT"), "{err}");
    assert_eq!(hlen(&server, &jobs_key).await, 500);
    assert!(files(&dir.0).is_empty());

    // The store works again: the next pass moves them.
    faulty.set(Fault::None);
    leader.step().await.unwrap();
    assert_eq!(hlen(&server, &jobs_key).await, 0);
    assert_eq!(index_entries(&server, &queue).await, 500);

    // GET fails at load time: nothing is loaded, nothing lost; then it works.
    faulty.set(Fault::FailGet);
    queue
        .set_manual_clock(Some(at(T0 + FAR - 2 * HOUR)))
        .await
        .unwrap();
    assert!(leader.step().await.unwrap_err().is_store());
    assert_eq!(index_entries(&server, &queue).await, 500);
    faulty.set(Fault::None);
    leader.step().await.unwrap();
    assert_eq!(index_entries(&server, &queue).await, 0);
    assert_eq!(hlen(&server, &jobs_key).await, 500);
    let mut delivered = BTreeSet::new();
    for (id, d) in run_to(&queue, &mut leader, &worker, T0 + FAR + 600_000).await {
        assert_eq!(d, due[&id]);
        assert!(delivered.insert(id.clone()), "{id} twice");
    }
    assert_eq!(delivered.len(), due.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_segment_is_refused_not_loaded() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-damage");
    let (queue, mut leader, _worker) = setup(&server, "cold-damage", tier(&dir.0)).await;
    schedule_far(&queue, T0, 100).await;
    leader.step().await.unwrap();
    let segment = files(&dir.0).pop().expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    queue
        .set_manual_clock(Some(at(T0 + FAR - 2 * HOUR)))
        .await
        .unwrap();
    let err = leader.step().await.unwrap_err();
    assert!(
        err.is_store() && err.to_string().contains("checksum"),
        "{err}"
    );
    // Its jobs are still named by the index: not lost, not loaded half.
    assert_eq!(index_entries(&server, &queue).await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_or_full_store_is_a_clear_error_and_nothing_leaves_redis() {
    use std::os::unix::fs::PermissionsExt;
    let server = RedisServer::start();

    // Read-only: as root (CI) a tmpfs remounted read-only, which refuses root too;
    // otherwise a directory of mode 0o555.
    let tmpfs = Tmpfs::mount("cold-readonly", 1 << 20);
    let plain = tmpfs.is_none().then(|| Dir::new("cold-readonly"));
    let dir = tmpfs
        .as_ref()
        .map_or_else(|| plain.as_ref().unwrap(), |t| &t.dir);
    let (queue, mut leader, _worker) = setup(&server, "cold-readonly", tier(&dir.0)).await;
    let readonly_jobs = jobs_key(&queue);
    schedule_far(&queue, T0, 50).await;
    let result = match &tmpfs {
        Some(tmpfs) => {
            tmpfs.read_only();
            leader.step().await
        }
        None => {
            eprintln!("not root: the read-only store is a 0o555 directory, not a read-only mount");
            std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o555)).unwrap();
            let result = leader.step().await;
            std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
            result
        }
    };
    let err = result.unwrap_err();
    let reason = if tmpfs.is_some() {
        "Read-only file system"
    } else {
        "Permission denied"
    };
    assert!(
        err.is_store() && err.to_string().contains("PUT") && err.to_string().contains(reason),
        "{err}"
    );
    assert_eq!(hlen(&server, &readonly_jobs).await, 50);
    assert!(files(&dir.0).is_empty(), "{:?}", files(&dir.0));
    drop((queue, leader, _worker, tmpfs, plain));

    // Full: as root a tmpfs filled to its last byte; otherwise the filesystem's own
    // ENOSPC, injected (Faulty).
    let tmpfs = Tmpfs::mount("cold-full", 256 << 10);
    let plain = tmpfs.is_none().then(|| Dir::new("cold-full"));
    let faulty = plain.as_ref().map(|dir| {
        eprintln!("not root: the full store is an injected ENOSPC, not a full filesystem");
        let faulty = Faulty::new(&dir.0);
        faulty.set(Fault::Full);
        faulty
    });
    let store = match (&tmpfs, &faulty) {
        (Some(tmpfs), _) => {
            tmpfs.fill();
            tier(&tmpfs.dir.0)
        }
        (None, Some(faulty)) => ColdTier::new(Arc::new(faulty.clone())),
        (None, None) => unreachable!("one of the two"),
    };
    let (queue, mut leader, _worker) = setup(&server, "cold-full", store).await;
    let jobs_key = jobs_key(&queue);
    schedule_far(&queue, T0, 50).await;
    let err = leader.step().await.unwrap_err();
    assert!(
        err.is_store() && err.to_string().contains("No space left"),
        "{err}"
    );
    assert_eq!(
        hlen(&server, &jobs_key).await,
        50,
        "a job left Redis for a store that failed"
    );
    if let Some(tmpfs) = &tmpfs {
        // Nothing half-written left beside the filler.
        assert_eq!(files(&tmpfs.dir.0), vec![tmpfs.dir.0.join("filler")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_between_any_two_steps_is_replaced_and_nothing_is_lost_or_doubled() {
    // The store hangs at one step, as a leader killed there would stop: the PUT of a
    // move (before and after the object is written), the GET of a load, the DELETE after
    // a retire. The first leader's pass is left hanging; the clock passes its lease; a
    // second leader takes over and finishes. Each step in turn.
    for fault in [
        Fault::HangBeforePut,
        Fault::HangAfterPut,
        Fault::HangGet,
        Fault::HangDelete,
    ] {
        let server = RedisServer::start();
        let dir = Dir::new("cold-takeover");
        let faulty = Faulty::new(&dir.0);
        let tier = ColdTier::new(Arc::new(faulty.clone()))
            .horizon(Duration::from_secs(6 * 3600))
            .window(Duration::from_secs(3600))
            .check_every(Duration::from_millis(10));
        let (queue, mut first, worker) = setup(&server, "cold-takeover", tier).await;
        let due = schedule_far(&queue, T0, 2500).await;
        let loading = matches!(fault, Fault::HangGet | Fault::HangDelete);
        if loading {
            first.step().await.unwrap();
            queue
                .set_manual_clock(Some(at(T0 + FAR - 2 * HOUR)))
                .await
                .unwrap();
        }
        faulty.set(fault);
        // The first leader's round, with its pass, stops in the store.
        let stale = tokio::spawn(async move {
            let result = first.step().await;
            (first, result)
        });
        faulty
            .wait_hung(Duration::from_secs(10), &format!("{fault:?}"))
            .await;
        faulty.set(Fault::None);
        // Its lease ends; a second leader takes over and does the whole pass.
        queue
            .advance_manual_clock(Duration::from_secs(61))
            .await
            .unwrap();
        let mut second = queue.leader(LeaderOptions::default());
        second.step().await.unwrap();
        assert!(second.is_leading(), "{fault:?}: no takeover");
        // The first wakes up with a stale token: whatever it writes to Redis is refused;
        // what it writes to the store, no segment of Redis names.
        faulty.release();
        let (mut first, _) = tokio::time::timeout(Duration::from_secs(10), stale)
            .await
            .unwrap_or_else(|_| panic!("{fault:?}: the stale round did not end within 10 s"))
            .unwrap();
        // Its round may have failed (its GET finds the segment loaded and gone); its next
        // one finds it no longer leads.
        first.step().await.unwrap();
        assert!(!first.is_leading(), "{fault:?}: two leaders");
        if !loading {
            queue
                .set_manual_clock(Some(at(T0 + FAR - 2 * HOUR)))
                .await
                .unwrap();
        }
        second.step().await.unwrap();
        assert_eq!(
            index_entries(&server, &queue).await,
            0,
            "{fault:?}: jobs left cold"
        );
        assert!(queue.cold_windows().await.unwrap().is_empty(), "{fault:?}");
        assert!(
            files(&dir.0).is_empty(),
            "{fault:?}: left in the store: {:?}",
            files(&dir.0)
        );
        let mut delivered = BTreeSet::new();
        for (id, d) in run_to(&queue, &mut second, &worker, T0 + FAR + 3000 * 1000).await {
            assert_eq!(d, due[&id], "{fault:?}");
            assert!(delivered.insert(id.clone()), "{fault:?}: {id} twice");
        }
        assert_eq!(delivered.len(), due.len(), "{fault:?}: lost jobs");
    }
}

/// `Leader::step` runs its cold pass inline, so nothing renews the lease while the pass
/// runs. A new leadership starts on the busy lease (100 ms): its first pass, if slower
/// than that (10,000-job segments written with fsync on a loaded machine), was fenced
/// at its commit, moved nothing, and the leader was a candidate again, whose next round
/// took the lease anew and met the same end. In BENCHMARKS.md's cold run this left
/// 21,000 far jobs in Redis ("a pass that moves nothing while far jobs are left"). Here
/// the pass is held in the store while the queue's clock passes the first lease's end:
/// the round renews the lease before its pass, so the pass's writes are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_pass_slower_than_the_first_lease_still_moves_its_jobs() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-slow-first-pass");
    let faulty = Faulty::new(&dir.0);
    let tier = ColdTier::new(Arc::new(faulty.clone()))
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600));
    let queue = Queue::connect(&server.url(), &support::queue_name("cold-slow-first-pass"))
        .await
        .expect("connect")
        .with_cold_tier(tier);
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let due = schedule_far(&queue, T0, 2500).await;
    faulty.set(Fault::HangBeforePut);
    // A new leader's first round: it takes the lease, then its pass stops in the store.
    let mut leader = queue.leader(LeaderOptions::default());
    let round = tokio::spawn(async move {
        let result = leader.step().await;
        (leader, result)
    });
    faulty
        .wait_hung(Duration::from_secs(10), "the first pass's PUT")
        .await;
    faulty.set(Fault::None);
    // A second of the queue's time: ten busy leases, far less than an idle one.
    queue
        .advance_manual_clock(Duration::from_secs(1))
        .await
        .unwrap();
    faulty.release();
    let (leader, result) = tokio::time::timeout(Duration::from_secs(10), round)
        .await
        .expect("the round ended within 10 s of the store's release")
        .unwrap();
    result.unwrap();
    assert!(
        leader.is_leading(),
        "the leader lost its lease in its own pass"
    );
    assert_eq!(leader.stats().cold_moved, due.len() as u64, "jobs moved");
    assert_eq!(index_entries(&server, &queue).await, due.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_removes_index_entries_of_lost_segments_and_mends_the_window_set() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-repair");
    let (queue, mut leader, _worker) = setup(&server, "cold-repair", tier(&dir.0)).await;
    // Two windows: 600 jobs an hour apart from the rest.
    schedule_far(&queue, T0, 600).await;
    let late: Vec<String> = (0..50).map(|i| format!("late:{i}")).collect();
    queue
        .schedule_batch(
            late.iter()
                .map(|id| (id.as_str(), b"l", When::At(at(T0 + FAR + 5 * HOUR)))),
        )
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(index_entries(&server, &queue).await, 650);
    assert_eq!(
        queue.repair().await.unwrap(),
        Default::default(),
        "a sound tier needs nothing"
    );

    let cseg = format!("tickless:{{{}}}:cseg", queue.name());
    let cwin = format!("tickless:{{{}}}:cwin", queue.name());
    let mut admin = server.admin().await;
    let segs: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(&cseg)
        .query_async(&mut admin)
        .await
        .unwrap();
    let lost = segs
        .iter()
        .find(|(_, v)| v.split('|').nth(1) == Some("50"))
        .map(|(k, _)| k.clone())
        .expect("the late window's segment");
    // The late window's segment is forgotten by hand, another segment's `cwin` member
    // deleted, and a late id given a live job in the wheel beside its entry.
    let _: () = redis::cmd("HDEL")
        .arg(&cseg)
        .arg(&lost)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("ZREM")
        .arg(&cwin)
        .arg(&lost)
        .query_async(&mut admin)
        .await
        .unwrap();
    let other = segs.keys().find(|k| **k != lost).unwrap().clone();
    let _: () = redis::cmd("ZREM")
        .arg(&cwin)
        .arg(&other)
        .query_async(&mut admin)
        .await
        .unwrap();
    let jobs = jobs_key(&queue);
    let _: () = redis::cmd("HSET")
        .arg(&jobs)
        .arg("far:1")
        .arg(format!("{}|s|0|5|0|hand", T0))
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg(format!("tickless:{{{}}}:ready", queue.name()))
        .arg("far:1")
        .query_async(&mut admin)
        .await
        .unwrap();

    let repaired = queue.repair().await.unwrap();
    assert_eq!(repaired.removed, 50 + 1, "{repaired:?}");
    assert_eq!(repaired.placed, 1, "{repaired:?}");
    assert_eq!(index_entries(&server, &queue).await, 600 - 1);
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&cwin)
        .arg(0)
        .arg(-1)
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut known: Vec<String> = segs.keys().filter(|k| **k != lost).cloned().collect();
    known.sort();
    let mut members = members;
    members.sort();
    assert_eq!(members, known);
    // The lost jobs' ids are free again; the wheel's far:1 is the one job of that id.
    assert!(queue
        .schedule("late:3", b"again", Duration::from_secs(60))
        .await
        .unwrap());
    assert_eq!(queue.job("far:1").await.unwrap().unwrap().payload, b"hand");
    assert_eq!(
        queue.repair().await.unwrap(),
        Default::default(),
        "repaired twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_changed_while_its_segment_is_written_stays_in_the_wheel() {
    // The move is held between its PUT and its commit; meanwhile some of the jobs it
    // took are cancelled, rescheduled, or cancelled and scheduled anew with another
    // payload. The commit moves only the jobs whose record is still the one written.
    let server = RedisServer::start();
    let dir = Dir::new("cold-race");
    let faulty = Faulty::new(&dir.0);
    let tier = ColdTier::new(Arc::new(faulty.clone()))
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600));
    let (queue, leader, worker) = setup(&server, "cold-race", tier).await;
    let mut due = schedule_far(&queue, T0, 300).await;
    faulty.set(Fault::HangAfterPut);
    let held = tokio::spawn(async move {
        let mut leader = leader;
        let result = leader.step().await;
        (leader, result)
    });
    faulty
        .wait_hung(Duration::from_secs(10), "the move's PUT")
        .await;
    faulty.set(Fault::None);
    for i in 0..10 {
        assert!(queue.cancel(&format!("far:{i}")).await.unwrap());
        due.remove(&format!("far:{i}"));
    }
    for i in 10..20 {
        let id = format!("far:{i}");
        assert!(queue
            .reschedule(&id, When::At(at(T0 + 5_000 + i)))
            .await
            .unwrap());
        due.insert(id, T0 + 5_000 + i);
    }
    for i in 20..30 {
        let id = format!("far:{i}");
        assert!(queue.cancel(&id).await.unwrap());
        assert!(queue
            .schedule(&id, b"anew", When::At(at(T0 + FAR + i * 1000)))
            .await
            .unwrap());
    }
    faulty.release();
    let (mut leader, result) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the held move did not end within 10 s")
        .unwrap();
    result.unwrap();
    assert_eq!(leader.stats().cold_moved, 270, "only unchanged jobs move");
    for i in 20..30 {
        let info = queue.job(&format!("far:{i}")).await.unwrap().unwrap();
        assert_eq!(
            (info.state, info.payload.as_slice()),
            (JobState::Scheduled, &b"anew"[..])
        );
    }
    let mut delivered = BTreeMap::new();
    for t in [T0 + 6_000, T0 + FAR - 2 * HOUR, T0 + FAR + 400_000] {
        for (id, d) in run_to(&queue, &mut leader, &worker, t).await {
            assert_eq!(d, due[&id], "{id}");
            *delivered.entry(id).or_insert(0) += 1;
        }
    }
    assert!(delivered.values().all(|&n| n == 1), "{delivered:?}");
    assert_eq!(delivered.len(), due.len(), "lost jobs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_segment_does_not_hold_up_the_others() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-lost");
    let (queue, mut leader, worker) = setup(&server, "cold-lost", tier(&dir.0)).await;
    // Two windows, one segment each: the earlier one's object is lost.
    let due = schedule_far(&queue, T0, 100).await;
    let late: Vec<String> = (0..50).map(|i| format!("late:{i}")).collect();
    let late_due = T0 + FAR + 2 * HOUR;
    queue
        .schedule_batch(
            late.iter()
                .map(|id| (id.as_str(), b"l", When::At(at(late_due)))),
        )
        .await
        .unwrap();
    leader.step().await.unwrap();
    let mut segments = files(&dir.0);
    segments.sort();
    assert_eq!(segments.len(), 2, "{segments:?}");
    std::fs::remove_file(&segments[0]).unwrap();
    queue.set_manual_clock(Some(at(T0 + FAR))).await.unwrap();
    let err = leader.step().await.unwrap_err();
    // The error names the lost segment's object, as the README promises.
    let object = segments[0]
        .strip_prefix(&dir.0)
        .unwrap()
        .display()
        .to_string();
    assert!(
        err.is_store() && err.to_string().contains(&format!("GET {object}")),
        "not naming {object}: {err}"
    );
    // The later window was loaded all the same, and its jobs run on time.
    assert_eq!(leader.stats().cold_loaded, 50);
    assert_eq!(queue.stats().await.unwrap().cold, due.len() as u64);
    // Each round still fails on the lost one (said, counted), and still ticks first.
    queue.set_manual_clock(Some(at(late_due))).await.unwrap();
    assert!(leader.step().await.unwrap_err().is_store());
    let jobs = worker.try_claim(100).await.unwrap();
    assert_eq!(jobs.len(), 50);
    assert!(jobs
        .iter()
        .all(|j| j.id().starts_with("late:") && j.due() == at(late_due)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_fills_its_segments_across_the_takes_of_a_pass() {
    // 11,000 jobs in one hour-window and 1,000 in the next, in one bucket of the wheel:
    // each take (a few hundred ids) meets both windows; the pass still writes full
    // segments: two for the first window (10,000 + 1,000), one for the second.
    let server = RedisServer::start();
    let dir = Dir::new("cold-fill");
    let (queue, mut leader, _worker) = setup(&server, "cold-fill", tier(&dir.0)).await;
    let first = (T0 + FAR) / HOUR * HOUR + HOUR;
    let ids: Vec<(String, u64)> = (0..12_000u64)
        .map(|i| {
            let due = if i < 11_000 {
                first + i * 300 % HOUR
            } else {
                first + HOUR + i % 1000
            };
            (format!("j{i}"), due)
        })
        .collect();
    queue
        .schedule_batch(
            ids.iter()
                .map(|(id, due)| (id.as_str(), b"p", When::At(at(*due)))),
        )
        .await
        .unwrap();
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 12_000);
    let windows = queue.cold_windows().await.unwrap();
    let per: Vec<(u64, u64)> = windows.iter().map(|w| (w.jobs, w.segments)).collect();
    assert_eq!(
        per,
        [(11_000, 2), (1_000, 1)],
        "jobs and segments per window"
    );
    assert_eq!(files(&dir.0).len(), 3);
}

/// Two deployments (two redis-servers: production and staging) each with a queue of the
/// same name on one shared directory and root: each moves its own 3,000 far jobs, then
/// each gets a new leadership (whose first pass sweeps the store), then each drains.
/// Every job of each is delivered once, with its own payload, none of the other's; the
/// store ends empty. Segments were named by queue, window and a per-Redis number alone,
/// so each sweep deleted the other's segments (production delivered 0 of 3,000) and the
/// two wrote to the same paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deployments_sharing_a_store_keep_to_their_own_segments() {
    const N: u64 = 3_000;
    let dir = Dir::new("cold-shared");
    let name = support::queue_name("orders");
    let mut sides = Vec::new();
    for side in ["production", "staging"] {
        let server = RedisServer::start();
        let queue = Queue::connect(&server.url(), &name)
            .await
            .unwrap()
            .with_cold_tier(tier(&dir.0));
        queue.set_manual_clock(Some(at(T0))).await.unwrap();
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
        assert!(leader.is_leading(), "{side}: no leader");
        // The same ids and due times on both sides, told apart by their payloads.
        let jobs: Vec<(String, Vec<u8>, u64)> = (0..N)
            .map(|i| {
                (
                    format!("far:{i}"),
                    format!("{side} {i}").into_bytes(),
                    T0 + FAR + i * 1000,
                )
            })
            .collect();
        queue
            .schedule_batch(
                jobs.iter()
                    .map(|(id, p, due)| (id.as_str(), p.as_slice(), When::At(at(*due)))),
            )
            .await
            .unwrap();
        sides.push((side, server, queue, leader));
    }
    // Each moves its jobs out, in turn, so that both have segments in the store.
    for (side, server, queue, leader) in &mut sides {
        leader.step().await.unwrap();
        assert_eq!(leader.stats().cold_moved, N, "{side}: not all moved");
        assert_eq!(index_entries(server, queue).await, N, "{side}");
    }
    let moved = files(&dir.0).len();
    // A new leadership on each side, whose first pass sweeps: neither may take the
    // other's segments for orphans.
    for (side, _, queue, leader) in &mut sides {
        drop(std::mem::replace(
            leader,
            queue.leader(LeaderOptions::default()),
        ));
        queue
            .advance_manual_clock(Duration::from_secs(61))
            .await
            .unwrap();
        leader.step().await.unwrap();
        assert!(leader.is_leading(), "{side}: no new leadership");
    }
    assert_eq!(
        files(&dir.0).len(),
        moved,
        "a sweep deleted segments it did not own"
    );
    for (side, _, queue, leader) in &mut sides {
        let worker = queue.worker(tickless_durable::WorkerOptions::default());
        let end = T0 + FAR + N * 1000;
        queue.set_manual_clock(Some(at(end))).await.unwrap();
        leader.step().await.unwrap();
        leader.step().await.unwrap();
        let mut delivered = BTreeSet::new();
        loop {
            let jobs = worker.try_claim(1000).await.unwrap();
            if jobs.is_empty() {
                break;
            }
            for job in jobs {
                let id = job.id().to_string();
                let i: u64 = id.strip_prefix("far:").unwrap().parse().unwrap();
                assert_eq!(
                    ms(job.due()),
                    T0 + FAR + i * 1000,
                    "{side}: {id} at the wrong time"
                );
                assert_eq!(
                    job.payload(),
                    format!("{side} {i}").as_bytes(),
                    "{side}: {id} is the other deployment's"
                );
                assert!(delivered.insert(id), "{side}: a job twice");
                worker.ack(&job).await.unwrap();
            }
        }
        assert_eq!(delivered.len() as u64, N, "{side}: lost jobs");
        assert_eq!(leader.stats().errors, 0, "{side}: {:?}", leader.stats());
    }
    assert!(
        files(&dir.0).is_empty(),
        "left in the store: {:?}",
        files(&dir.0)
    );
}

/// A cold job rescheduled to another far time (a day later): it leaves its window (whose
/// count drops), goes cold again in the new window at the next pass, is not delivered
/// with its old window, and is delivered once, at its new time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_job_rescheduled_to_another_far_window_comes_once_at_its_new_time() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-far-again");
    let (queue, mut leader, worker) = setup(&server, "cold-far-again", tier(&dir.0)).await;
    let due = schedule_far(&queue, T0, 100).await;
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 100);
    let old_window = due["far:7"] - due["far:7"] % HOUR;
    let later = T0 + FAR + 24 * HOUR + 123;
    assert!(queue
        .reschedule("far:7", When::At(at(later)))
        .await
        .unwrap());
    let count = |windows: &[tickless_durable::ColdWindow], start: u64| {
        windows
            .iter()
            .find(|w| w.start == at(start))
            .map_or(0, |w| w.jobs)
    };
    let windows = queue.cold_windows().await.unwrap();
    assert_eq!(
        count(&windows, old_window),
        99,
        "its old window still counts it"
    );
    assert_eq!(
        index_entries(&server, &queue).await,
        99,
        "its old index entry is gone"
    );
    // The next pass moves it out again, into its new window.
    leader.step().await.unwrap();
    let windows = queue.cold_windows().await.unwrap();
    assert_eq!(count(&windows, old_window), 99);
    assert_eq!(count(&windows, later - later % HOUR), 1, "{windows:?}");
    assert_eq!(index_entries(&server, &queue).await, 100);
    // Its old window comes, and the others with it; it does not.
    let got = run_to(&queue, &mut leader, &worker, T0 + FAR + 100 * 1000).await;
    assert_eq!(got.len(), 99);
    assert!(got.iter().all(|(id, d)| id != "far:7" && *d == due[id]));
    // Then at its new time, once.
    let got = run_to(&queue, &mut leader, &worker, later - 1).await;
    assert!(got.is_empty(), "early: {got:?}");
    let got = run_to(&queue, &mut leader, &worker, later).await;
    assert_eq!(got, [("far:7".to_string(), later)]);
    assert!(run_to(&queue, &mut leader, &worker, later + HOUR)
        .await
        .is_empty());
    assert!(queue.cold_windows().await.unwrap().is_empty());
}

/// The horizon, pinned: with now + horizon inside a window, exactly the jobs whose window
/// starts at or after now + horizon move; those just below it stay in Redis, even one due
/// after now + horizon whose window starts before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_windows_at_or_past_the_horizon_move() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-horizon");
    let (queue, mut leader, _worker) = setup(&server, "cold-horizon", tier(&dir.0)).await;
    let horizon = T0 + 6 * HOUR;
    assert_ne!(horizon % HOUR, 0, "now + horizon inside a window");
    let first = horizon - horizon % HOUR + HOUR; // the first window starting past it
    let jobs = [
        ("below", horizon - 1, false),
        ("straddling", horizon + 1, false),
        ("last-below", first - 1, false),
        ("first", first, true),
        ("first-end", first + HOUR - 1, true),
    ];
    queue
        .schedule_batch(
            jobs.iter()
                .map(|(id, due, _)| (*id, b"h".as_slice(), When::At(at(*due)))),
        )
        .await
        .unwrap();
    leader.step().await.unwrap();
    for (id, _, moves) in jobs {
        let state = queue.job(id).await.unwrap().unwrap().state;
        let want = if moves {
            JobState::Cold
        } else {
            JobState::Scheduled
        };
        assert_eq!(state, want, "{id}");
    }
    assert_eq!(leader.stats().cold_moved, 2);
    let windows = queue.cold_windows().await.unwrap();
    assert_eq!(windows.len(), 1, "{windows:?}");
    assert_eq!((windows[0].start, windows[0].jobs), (at(first), 2));
}

/// The periodic sweep: an object of the deployment that no segment names, which lands
/// after the leadership's first sweep (the late PUT of a leader cut off from its lease),
/// is deleted by the live leader (no new leadership) at its next sweep, one
/// `sweep_every` after the last. The spawned leader's passes run on this process's clock
/// (a pass every 10 ms, a sweep every 200 ms; the queue's clock stays manual), so each wait
/// has a limit that names it; what is asserted is counted in sweeps (the store's LISTs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_leader_sweeps_an_orphan_within_one_sweep_period() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-sweep");
    let faulty = Faulty::new(&dir.0);
    let period = Duration::from_millis(200);
    let tier = ColdTier::new(Arc::new(faulty.clone()))
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600))
        .check_every(Duration::from_millis(10))
        .sweep_every(period);
    let queue = Queue::connect(&server.url(), &support::queue_name("cold-sweep"))
        .await
        .unwrap()
        .with_cold_tier(tier);
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    schedule_far(&queue, T0, 100).await;
    let spawned = std::time::Instant::now();
    let leader = queue.leader(LeaderOptions::default()).spawn();
    wait_until(Duration::from_secs(10), "the far jobs to move", || {
        let moved = leader.stats().cold_moved;
        async move { moved == 100 }
    })
    .await;
    let segments = files(&dir.0);
    assert_eq!(segments.len(), 1, "{segments:?}");

    // The orphan, landing after the leadership's first sweep (which came before its
    // move): a copy of the segment under a number Redis never gave out.
    let orphan = segments[0].with_file_name("999999.seg");
    std::fs::copy(&segments[0], &orphan).unwrap();
    let lists_before = faulty.lists();
    wait_until(
        Duration::from_secs(10),
        "the orphan to be swept by the live leader",
        || {
            let gone = !orphan.exists();
            async move { gone }
        },
    )
    .await;
    // Within one period: by the sweep listing as it landed, or else the next one (the
    // first LIST asked after it landed).
    let sweeps = faulty.lists() - lists_before;
    assert!(sweeps <= 1, "{sweeps} sweeps listed it before it went");
    // Periodic, not every pass: at most one sweep per period since the leader started.
    let periods = (spawned.elapsed().as_millis() / period.as_millis()) as u64;
    assert!(
        faulty.lists() <= periods + 1,
        "{} sweeps in {periods} periods",
        faulty.lists()
    );
    let stats = leader.stats();
    assert_eq!(
        (stats.leaderships, stats.errors),
        (1, 0),
        "one leadership, no error: {stats:?}"
    );
    // The segment Redis names stays, and its jobs with it.
    assert_eq!(files(&dir.0), segments);
    assert_eq!(index_entries(&server, &queue).await, 100);
    leader.stop().await.unwrap();
}

/// A bucket of the wheel that holds near jobs and far ones (a level-3 bucket, 74.5 h
/// wide, straddling now + horizon + window): one pass moves every far job of it, however
/// many takes its walk needs. A take used to read a page of SSCAN from such a bucket, and
/// a pass ended at the first take of fewer than 10,000 jobs, which such a page is: of 500
/// far jobs among 15,000 near ones, a pass moved ~200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_moves_every_far_job_of_a_bucket_mostly_near() {
    const L3: u64 = 1024 * 64 * 64 * 64;
    let server = RedisServer::start();
    let dir = Dir::new("cold-mixed");
    let (queue, mut leader, worker) = setup(&server, "cold-mixed", tier(&dir.0)).await;
    // A level-3 bucket starts an hour from now: every job below is due inside it.
    let start = (T0 / L3 + 2) * L3;
    let now = start - HOUR;
    queue.set_manual_clock(Some(at(now))).await.unwrap();
    let near = (0..15_000u64).map(|i| (format!("near:{i}"), start + 360_000 + i * 800));
    let far = (0..500u64).map(|i| (format!("far:{i}"), start + 8 * HOUR + i * 7_000));
    let jobs: Vec<(String, u64)> = near.chain(far).collect();
    assert!(jobs.iter().all(|(_, due)| *due < start + L3));
    for chunk in jobs.chunks(5_000) {
        queue
            .schedule_batch(
                chunk
                    .iter()
                    .map(|(id, due)| (id.as_str(), b"m".as_slice(), When::At(at(*due)))),
            )
            .await
            .unwrap();
    }
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    assert_eq!(
        leader.stats().cold_moved,
        500,
        "one pass moved every far job"
    );
    assert_eq!(index_entries(&server, &queue).await, 500);
    assert_eq!(hlen(&server, &jobs_key(&queue)).await, 15_000);
    // And they come back: all 500 at their window's load, each once.
    let got = run_to(&queue, &mut leader, &worker, start + 9 * HOUR).await;
    let far_got: BTreeSet<String> = got
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| id.starts_with("far:"))
        .collect();
    assert_eq!(far_got.len(), 500);
}

/// The index (`ci:` hashes) is sized to its entries: 3,000 cold jobs in ~125 hashes (24
/// per hash, not 3,000 hashes of one), split one at a time as jobs move in, merged back as
/// they are loaded; at every size each cold job is found (the lookups, the cancels, the
/// load), and nothing is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cold_index_grows_and_shrinks_with_its_jobs_and_finds_each_at_every_size() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-index");
    let (queue, mut leader, worker) = setup(&server, "cold-index", tier(&dir.0)).await;
    let meta = format!("tickless:{{{}}}:meta", queue.name());
    let mut due = schedule_far(&queue, T0, 3000).await;
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 3000);
    assert_eq!(hget(&server, &meta, "cjobs").await, "3000");
    let size: u64 = hget(&server, &meta, "cold").await[1..].parse().unwrap();
    assert!((125..=160).contains(&size), "index size {size}");
    let keys = index_keys(&server, &queue).await;
    assert!(keys.len() as u64 <= size && keys.len() as u64 > size / 2);
    assert_eq!(index_entries(&server, &queue).await, 3000);
    for i in (0..3000).step_by(7) {
        let job = queue.job(&format!("far:{i}")).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Cold, "far:{i}");
    }
    // Cancel every other one: each is found, once.
    let gone: Vec<String> = (0..3000).step_by(2).map(|i| format!("far:{i}")).collect();
    let cancelled = queue
        .cancel_batch(gone.iter().map(String::as_str))
        .await
        .unwrap();
    assert!(cancelled.iter().all(|&c| c));
    for id in &gone {
        due.remove(id);
    }
    assert_eq!(hget(&server, &meta, "cjobs").await, "1500");
    // The load brings back the other 1,500, each once, and the index shrinks to one hash.
    let mut got = Vec::new();
    for to in [T0 + FAR + HOUR, T0 + FAR + 2 * HOUR] {
        got.extend(run_to(&queue, &mut leader, &worker, to).await);
    }
    let ids: BTreeSet<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(got.len(), 1500, "each once");
    assert_eq!(ids, due.keys().map(String::as_str).collect());
    assert_eq!(hget(&server, &meta, "cjobs").await, "0");
    assert_eq!(hget(&server, &meta, "cold").await, "n1");
    assert_eq!(index_entries(&server, &queue).await, 0);
}
