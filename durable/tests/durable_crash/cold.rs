//! The cold tier's fault matrix (feature `cold`): its leader process `kill -9`-ed at
//! every step of a move and of a load, and Redis killed and restarted from its AOF in the
//! middle of each, on the queue's manual clock (which the leader processes obey: it is in
//! Redis). Each leader process stops exactly at the step named on its command line
//! (`cold_role.rs`), and the state the kill left is checked to be that step's.
//!
//! 40,000 far jobs (200-byte payloads) due in one 1 h window 48 h ahead, so that the
//! leader's takes fill segments of 10,000 jobs, committed and loaded in calls of 200
//! (four in flight: the proxy holds the one it stops at and those behind it). After the kills, every job is delivered exactly once to a worker of this
//! process (no handler is killed here, so no repeat is allowed), on time: the manual clock
//! moves in 10-minute strides and each job comes in the stride that reaches its due time,
//! neither before nor after; the index, `cseg`, `cwin` and the store's directory end
//! empty.

use super::cold_common::{files, ms};
use super::log::{args, Proc};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickless_durable::{Queue, When, WorkerOptions};
use tickless_test_support::{at, RedisServer, T0};

const HOUR: u64 = 3_600_000;
const JOBS: u64 = 40_000;
/// Jobs per segment at most.
const PER_SEGMENT: u64 = 10_000;
/// Jobs per `cold_commit.lua` / `cold_load.lua` call (pass.rs's `CALL_JOBS`).
const CALL_JOBS: u64 = 64;
/// Past any lease a killed leader held (`LeaderOptions::idle_lease`, 60 s, when the
/// next work is hours away; 100 ms when it is near), on the manual clock.
const PAST_THE_LEASE: Duration = Duration::from_secs(61);
/// The most any one wait below takes.
const LIMIT: Duration = Duration::from_secs(30);

/// Job `i`'s due time (ms): 80 ms apart from the first whole hour 48 h after T0, all
/// in that hour's window.
fn due_of(i: u64) -> u64 {
    (T0 + 48 * HOUR).div_ceil(HOUR) * HOUR + i * 80
}

fn payload(i: u64) -> Vec<u8> {
    let mut p = format!("job {i} ").into_bytes();
    p.resize(200, b'.');
    p
}

/// What Redis and the store hold of the cold tier.
#[derive(Debug, Default)]
struct Seen {
    /// Jobs in `jobs` (the wheel and the ready list).
    wheel: u64,
    /// Entries of the `ci:*` hashes.
    index: u64,
    /// `cseg`: segment -> jobs its index entries still name (`left`).
    segs: BTreeMap<u64, u64>,
    /// Members of `cwin`.
    windows: u64,
    /// Segment objects in the directory: segment number -> jobs it holds.
    objects: BTreeMap<u64, u64>,
}

impl Seen {
    fn left(&self) -> u64 {
        self.segs.values().sum()
    }

    /// Objects no segment of Redis names (a move cut between PUT and commit, a retire
    /// before its delete).
    fn orphans(&self) -> usize {
        self.objects
            .keys()
            .filter(|seg| !self.segs.contains_key(seg))
            .count()
    }
}

/// The scenario's Redis, directory and queue (the parent's: scheduler, clock, worker).
struct Scene {
    server: RedisServer,
    dir: PathBuf,
    queue: Queue,
    rt: tokio::runtime::Runtime,
    spawned: u32,
}

impl Scene {
    fn key(&self, suffix: &str) -> String {
        format!("tickless:{{{}}}:{suffix}", self.queue.name())
    }

    /// A leader process that stops at `stop` (`<step>:<n>`, see `cold_role.rs`).
    fn leader(&mut self, stop: &str) -> (Proc, PathBuf) {
        self.spawned += 1;
        let go = self.dir.with_extension(format!("go{}", self.spawned));
        let _ = std::fs::remove_file(&go);
        let name = format!("cold-leader{}", self.spawned);
        let proc = Proc::spawn(
            &name,
            &args(&[
                "cold-lead",
                &self.server.url(),
                self.queue.name(),
                self.dir.to_str().expect("a UTF-8 temp dir"),
                stop,
                go.to_str().expect("a UTF-8 temp dir"),
            ]),
        );
        (proc, go)
    }

    fn seen(&self) -> Seen {
        let mut seen = Seen::default();
        self.rt.block_on(async {
            let mut admin = self.server.admin().await;
            seen.wheel = redis::cmd("HLEN")
                .arg(self.key("jobs"))
                .query_async(&mut admin)
                .await
                .unwrap();
            let index: Vec<String> = redis::cmd("KEYS")
                .arg(self.key("ci:*"))
                .query_async(&mut admin)
                .await
                .unwrap();
            let mut lens = redis::pipe();
            for key in &index {
                lens.cmd("HLEN").arg(key);
            }
            let lens: Vec<u64> = lens.query_async(&mut admin).await.unwrap();
            seen.index = lens.iter().sum();
            let segs: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(self.key("cseg"))
                .query_async(&mut admin)
                .await
                .unwrap();
            for (seg, value) in segs {
                // window|left|bytes
                let left: i64 = value
                    .split('|')
                    .nth(1)
                    .and_then(|l| l.parse().ok())
                    .unwrap_or_else(|| panic!("cseg {seg}: {value:?} is not window|left|bytes"));
                assert!(
                    left >= 0,
                    "segment {seg} names {left} jobs: more loaded than it named"
                );
                seen.segs.insert(seg.parse().unwrap(), left as u64);
            }
            seen.windows = redis::cmd("ZCARD")
                .arg(self.key("cwin"))
                .query_async(&mut admin)
                .await
                .unwrap();
        });
        for file in files(&self.dir) {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let Some(seg) = name.strip_suffix(".seg").and_then(|s| s.parse().ok()) else {
                continue;
            };
            // The job count, after the 8-byte magic (cold.rs's `encode`).
            let bytes = std::fs::read(&file).unwrap_or_default();
            let count = bytes
                .get(8..12)
                .map_or(0, |n| u32::from_le_bytes(n.try_into().unwrap()));
            seen.objects.insert(seg, u64::from(count));
        }
        seen
    }

    /// Waits until what is seen satisfies `done`; fails naming `what` after `LIMIT`.
    fn wait(&self, what: &str, done: impl Fn(&Seen) -> bool) -> Seen {
        let start = Instant::now();
        loop {
            let seen = self.seen();
            if done(&seen) {
                return seen;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{what}: not within {LIMIT:?}; seen {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The manual clock moved past the lease of a leader just killed.
    fn past_the_lease(&self) {
        self.rt
            .block_on(self.queue.advance_manual_clock(PAST_THE_LEASE))
            .unwrap();
    }

    /// Waits until `proc` says it stopped at `stop`.
    fn wait_at(&self, proc: &Proc, stop: &str) {
        let (step, n) = stop.split_once(':').unwrap();
        let line = format!("at {step} {n}");
        let start = Instant::now();
        while !proc.lines().contains(&line) {
            assert!(
                start.elapsed() < LIMIT,
                "{} did not stop at {stop} within {LIMIT:?}; it said {:?}; seen {:?}",
                proc.name,
                proc.lines(),
                self.seen()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A leader process stopped at `stop`, killed there with SIGKILL; what it left.
    fn kill_at(&mut self, stop: &str) -> Seen {
        let (mut proc, _go) = self.leader(stop);
        self.wait_at(&proc, stop);
        proc.kill();
        let seen = self.seen();
        self.past_the_lease();
        seen
    }

    /// Redis killed and restarted from its AOF while a leader process is stopped at
    /// `stop`, which then goes on: the leader process, and what was seen at the stop.
    fn restart_redis_at(&mut self, stop: &str) -> (Proc, Seen) {
        let (proc, go) = self.leader(stop);
        self.wait_at(&proc, stop);
        let seen = self.seen();
        self.server.kill();
        self.server.restart();
        std::fs::write(&go, b"go").unwrap();
        // This process's connection found closed (once) and made again.
        let start = Instant::now();
        while self.rt.block_on(self.queue.stats()).is_err() {
            assert!(start.elapsed() < LIMIT, "Redis not back within {LIMIT:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        (proc, seen)
    }
}

pub fn cold_leaders_killed_at_every_step_and_redis_restarted_lose_and_double_nothing() {
    let started = Instant::now();
    // Plain TCP: the leader processes' proxy reads the commands (cold_role.rs).
    let server = RedisServer::start_plain(&[]);
    let rt = tickless_test_support::multi_thread();
    let queue = rt
        .block_on(Queue::connect(&server.url(), "cold-crash"))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("tickless-cold-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut scene = Scene {
        server,
        dir,
        queue,
        rt,
        spawned: 0,
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut scene)));
    let _ = std::fs::remove_dir_all(&scene.dir);
    for i in 1..=scene.spawned {
        let _ = std::fs::remove_file(scene.dir.with_extension(format!("go{i}")));
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    eprintln!(
        "cold crash test: {JOBS} jobs, {} leader processes, finished in {:.2} s",
        scene.spawned,
        started.elapsed().as_secs_f64()
    );
}

fn run(scene: &mut Scene) {
    let queue = scene.queue.clone();
    scene
        .rt
        .block_on(queue.set_manual_clock(Some(at(T0))))
        .unwrap();
    let due: BTreeMap<String, u64> = (0..JOBS).map(|i| (format!("c{i}"), due_of(i))).collect();
    scene.rt.block_on(async {
        for first in (0..JOBS).step_by(PER_SEGMENT as usize) {
            let jobs: Vec<(String, Vec<u8>, u64)> = (first..first + PER_SEGMENT)
                .map(|i| (format!("c{i}"), payload(i), due_of(i)))
                .collect();
            let added = queue
                .schedule_batch(
                    jobs.iter()
                        .map(|(id, p, due)| (id.as_str(), p.as_slice(), When::At(at(*due)))),
                )
                .await
                .unwrap();
            assert!(added.iter().all(|&a| a));
        }
    });

    // The move. Killed before its first PUT writes: nothing written, nothing moved.
    let seen = scene.kill_at("put:1");
    assert_eq!(
        (seen.wheel, seen.index, seen.segs.len(), seen.objects.len()),
        (JOBS, 0, 0, 0),
        "killed before the PUT: {seen:?}"
    );
    // Killed after its second PUT wrote, before Redis heard of it: one segment
    // committed whole, one object no segment names.
    let seen = scene.kill_at("put-done:2");
    assert!(
        seen.segs.len() == 1
            && seen.orphans() == 1
            && seen.index == seen.left()
            && seen.index + seen.wheel == JOBS
            && seen
                .segs
                .iter()
                .all(|(seg, &left)| seen.objects.get(seg) == Some(&left)),
        "killed between the PUT and the commit: {seen:?}"
    );
    // Killed between the first and the second commit call of a segment (after its first
    // pass swept the orphan): a segment named by CALL_JOBS of the jobs it holds.
    let before = seen.index;
    let seen = scene.kill_at("commit:2");
    assert!(
        seen.orphans() == 0
            && seen.index == before + CALL_JOBS
            && seen.index == seen.left()
            && seen.index + seen.wheel == JOBS,
        "killed between two commit calls: {seen:?}"
    );
    assert!(
        seen.segs
            .iter()
            .any(|(seg, &left)| left == CALL_JOBS && seen.objects[seg] > CALL_JOBS),
        "a segment holding more jobs than the {CALL_JOBS} it names: {seen:?}"
    );
    // Redis restarted from its AOF between a PUT and its commit; the same leader goes on
    // and moves everything.
    let (mut mover, at_stop) = scene.restart_redis_at("put-done:2");
    assert_eq!(at_stop.orphans(), 1, "stopped after a PUT: {at_stop:?}");
    let moved = scene.wait("every job moved after the restart", |s| {
        s.wheel == 0 && s.index == JOBS && s.left() == JOBS && s.orphans() == 0
    });
    assert_eq!(moved.windows, moved.segs.len() as u64);
    mover.kill();
    scene.past_the_lease();
    // Per segment, the jobs its index entries name once every job is cold.
    let named: BTreeMap<u64, u64> = moved.segs.clone();

    // The load: every window starts within the lead (6 h) of T0 + 46 h, and no job is
    // due yet.
    scene
        .rt
        .block_on(queue.set_manual_clock(Some(at(T0 + 46 * HOUR))))
        .unwrap();
    // Killed between the first and the second load call of a segment.
    let seen = scene.kill_at("load:2");
    assert_eq!(
        (seen.wheel, seen.index),
        (CALL_JOBS, JOBS - CALL_JOBS),
        "killed between two load calls: {seen:?}"
    );
    let cut = seen
        .segs
        .iter()
        .find(|(seg, &left)| left + CALL_JOBS == named[seg])
        .map(|(seg, _)| *seg)
        .unwrap_or_else(|| panic!("a segment loaded in part: {seen:?}"));
    // Killed after its loads, before its first retire: that segment's entries all gone,
    // the segment still named.
    let seen = scene.kill_at("retire:1");
    assert_eq!(
        seen.segs.get(&cut),
        Some(&0),
        "killed before the retire: {seen:?}"
    );
    assert!(seen.objects.contains_key(&cut) && seen.wheel >= named[&cut]);
    // Killed after its first retire, before the object's delete: an object no segment
    // names.
    let seen = scene.kill_at("delete:1");
    assert!(
        !seen.segs.contains_key(&cut) && seen.objects.contains_key(&cut),
        "killed between the retire and the delete: {seen:?}"
    );
    assert_eq!(seen.orphans(), 1);
    assert_eq!(seen.wheel + seen.index, JOBS);
    // Redis restarted from its AOF between two load calls of a segment; the same leader
    // goes on and loads everything.
    // The first segment this leader loads (the lowest number left, as `cwin` orders
    // them: all of one window) takes all its calls, even those of ids loaded already;
    // stop at the third call of the next.
    let now = scene.seen();
    let first = now
        .segs
        .keys()
        .min_by_key(|seg| seg.to_string())
        .expect("segments left");
    let calls = now.objects[first].div_ceil(CALL_JOBS);
    let (mut loader, at_stop) = scene.restart_redis_at(&format!("load:{}", calls + 3));
    assert!(
        at_stop
            .segs
            .iter()
            .any(|(seg, &left)| left > 0 && left < named[seg]),
        "stopped between two load calls of a segment: {at_stop:?}"
    );
    let loaded = scene.wait("every job loaded after the restart", |s| {
        s.wheel == JOBS
            && s.index == 0
            && s.segs.is_empty()
            && s.windows == 0
            && s.objects.is_empty()
    });
    assert_eq!(loaded.orphans(), 0);

    // Then the clock in strides, past every due time: each job once, in the stride that
    // reaches its due time (never before, never after).
    let delivered = drain(scene, &due);
    loader.kill();
    assert_eq!(delivered, JOBS);
    let end = scene.seen();
    assert_eq!(
        (
            end.wheel,
            end.index,
            end.segs.len(),
            end.windows,
            end.objects.len()
        ),
        (0, 0, 0, 0, 0),
        "after the drain: {end:?}"
    );
    assert!(files(&scene.dir).is_empty(), "{:?}", files(&scene.dir));
}

/// How far the manual clock moves per stride of the drain.
const STRIDE: u64 = 10 * 60_000;

/// Moves the manual clock in strides, from just before the first due time to past the
/// last, 10 minutes at a time; at each stride's end `t` the leader process (which follows
/// the clock: moving it publishes a wake) promotes, and a worker of this process claims
/// and acks, exactly the jobs due in the stride: each once, with the due time it was
/// scheduled for, none before its due time (a load that put jobs straight into `ready`)
/// and none after the stride that reaches it (a load that filed them behind their due
/// times). A stride ends when the leader has caught up with `t` (no member of `due` at
/// or before it but the lease marker, `ready` empty) and a claim finds nothing. How many
/// came.
fn drain(scene: &Scene, due: &BTreeMap<String, u64>) -> u64 {
    let worker = Arc::new(scene.queue.worker(WorkerOptions::default()));
    let first = *due.values().min().expect("jobs");
    let last = *due.values().max().expect("jobs");
    let mut owed = due.clone();
    let mut delivered = 0;
    let mut t = first - 1;
    scene.rt.block_on(async {
        let mut admin = scene.server.admin().await;
        loop {
            scene.queue.set_manual_clock(Some(at(t))).await.unwrap();
            let start = Instant::now();
            let mut came: BTreeSet<String> = BTreeSet::new();
            loop {
                assert!(
                    start.elapsed() < LIMIT,
                    "the stride to {t}: the leader not caught up within {LIMIT:?}; {} came",
                    came.len()
                );
                let jobs = worker.try_claim(1000).await.unwrap();
                for job in &jobs {
                    let id = job.id().to_string();
                    let asked = *due.get(&id).unwrap_or_else(|| panic!("unknown job {id}"));
                    assert_eq!(ms(job.due()), asked, "{id}'s due time");
                    assert!(
                        asked <= t && ms(job.claimed_at()) >= asked,
                        "{id} handed out at {} (the stride to {t}) before its due time {asked}",
                        ms(job.claimed_at())
                    );
                    assert!(
                        owed.remove(&id).is_some(),
                        "{id} delivered twice (again in the stride to {t})"
                    );
                    came.insert(id);
                }
                let acks = jobs.iter().map(|job| worker.ack(job));
                for acked in futures::future::join_all(acks).await {
                    assert!(acked.unwrap(), "an ack of a live delivery");
                }
                if !jobs.is_empty() {
                    continue;
                }
                let due_now: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                    .arg(scene.key("due"))
                    .arg("-inf")
                    .arg(t)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let ready: u64 = redis::cmd("LLEN")
                    .arg(scene.key("ready"))
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                // The lease marker (contract.rs's LEASE_MARKER) is no job.
                if ready == 0 && due_now.iter().all(|m| m == "l") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let late: Vec<(&String, &u64)> = owed.iter().filter(|(_, &d)| d <= t).collect();
            assert!(
                late.is_empty(),
                "{} jobs due by {t} did not come in its stride (late), the first: {:?}",
                late.len(),
                &late[..late.len().min(5)]
            );
            delivered += came.len() as u64;
            if t >= last {
                break;
            }
            t += STRIDE;
        }
        // Nothing more comes: every job's record is gone.
        let stats = scene.queue.stats().await.unwrap();
        assert_eq!(
            stats.scheduled + stats.ready + stats.in_flight + stats.dead,
            0,
            "{stats:?}"
        );
        assert!(worker.try_claim(1000).await.unwrap().is_empty());
    });
    assert!(owed.is_empty(), "never delivered: {owed:?}");
    delivered
}
