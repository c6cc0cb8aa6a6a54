//! Issue 30's cold tier against today's hot-only queue, on one redis-server, in one run.
//!
//! For each payload size (200 B and 2 KB) the program starts its own redis-server
//! (`appendfsync everysec`, no RDB saves) on a free loopback port and measures, through
//! the crate's public API only:
//!
//! - **A, hot-only**: `N` jobs `trip:<n>` due in one hour-window 48 h ahead, scheduled with
//!   `schedule_batch` in batches of 1,000 (one batch in flight), then `S` single
//!   `schedule` calls with 100 in flight: jobs/s, Redis CPU per job (`INFO cpu`) and
//!   script time per job (`INFO commandstats`, `evalsha`); `used_memory` per job.
//! - **B, with the tier, a leader passing**: the same schedules into a queue with a cold
//!   tier while a leader does `Leader::step` passes back to back (each a whole pass:
//!   moves, then loads); then the leader finishes the move and `used_memory` per job is
//!   read with every job cold.
//! - **C, the move and the load**: `N` jobs scheduled with no leader passing (memory per
//!   job hot), then moved by `Leader::step` passes (jobs/s, Redis CPU per job, memory per
//!   job cold), then, on the queue's manual clock brought to the window's load time, loaded
//!   back into the wheel by one `Leader::step` (jobs/s, Redis CPU per job, the scripts'
//!   calls and time).
//! - **D, delivery lag**: `L` jobs moved cold and loaded back, and `L` jobs scheduled hot
//!   due at the same times (in the tier's queue, once the clock is within the horizon);
//!   the manual clock steps 100 ms at a time through their minute, the leader steps, a
//!   worker claims and acks everything due: lag = claimed_at - due, on the queue's clock.
//! - **Redis held** (in C): the longest command Redis ran during the move and during the
//!   load (`SLOWLOG`, every command of 200 µs or more), and another client's `PING`
//!   round trip (a thread with a socket of its own, one a millisecond) idle, during the
//!   move and during the load: p50, p99, max.
//!
//! - **E, spread due times** (`SPREAD` jobs, default 0: skipped; first round only):
//!   due evenly over 30 days from 7 h ahead, moved by `Leader::step` passes: the segment
//!   objects written against the fewest that could hold them (one per started 10,000 jobs
//!   of each window).
//!
//! Between the phases the server is emptied (`FLUSHALL`), so each memory figure is a
//! delta on an empty queue. The tier is `ColdTier::local` on a fresh temporary directory
//! (fsync on), 6 h horizon, 1 h windows, 3 h lead (the defaults).
//!
//! Run: `cargo run --release -p tickless-bench --features cold --bin cold`.
//! `N` (default 1,000,000), `N2K` (jobs of the 2 KB row, default 200,000), `S` (single
//! calls, default 100,000), `L` (lag jobs of each kind, default 20,000), `ROUNDS` (of
//! the three rounds, how many: 0 with `SPREAD` runs E alone).

use futures::stream::{self, StreamExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tickless_durable::{ColdTier, Leader, LeaderOptions, Queue, When, WorkerOptions};
use tickless_test_support::{command_stats, RedisServer};

const HOUR_MS: u64 = 3_600_000;
const BATCH: usize = 1_000;
const IN_FLIGHT: usize = 100;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn now_ms(server: &RedisServer) -> u64 {
    server
        .time()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// Redis's counters at one moment.
#[derive(Clone, Copy)]
struct Counters {
    at: Instant,
    cpu_s: f64,
    script_calls: f64,
    script_us: f64,
}

fn field(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn used_memory(server: &RedisServer) -> f64 {
    field(&server.cli(&["INFO", "memory"]), "used_memory")
}

fn counters(server: &RedisServer) -> Counters {
    let cpu = server.cli(&["INFO", "cpu"]);
    let stats = command_stats(&server.cli(&["INFO", "commandstats"]));
    let evalsha = stats.iter().find(|s| s.name == "evalsha");
    Counters {
        at: Instant::now(),
        cpu_s: field(&cpu, "used_cpu_user") + field(&cpu, "used_cpu_sys"),
        script_calls: evalsha.map_or(0.0, |s| s.calls as f64),
        script_us: evalsha.map_or(0.0, |s| s.usec),
    }
}

/// One measured phase.
struct Phase {
    name: String,
    jobs: usize,
    secs: f64,
    cpu_us: f64,
    script_us: f64,
    calls: f64,
}

impl Phase {
    fn between(name: &str, jobs: usize, before: Counters, after: Counters) -> Phase {
        let n = jobs.max(1) as f64;
        Phase {
            name: name.to_string(),
            jobs,
            secs: (after.at - before.at).as_secs_f64(),
            cpu_us: (after.cpu_s - before.cpu_s) * 1e6 / n,
            script_us: (after.script_us - before.script_us) / n,
            calls: after.script_calls - before.script_calls,
        }
    }

    fn rate(&self) -> f64 {
        self.jobs as f64 / self.secs
    }

    /// Redis CPU (`INFO cpu`) per script call, µs: what a call holds Redis for, less
    /// moved by other processes taking the cores than its wall time (`SLOWLOG`).
    fn cpu_per_call_us(&self) -> f64 {
        self.cpu_us * self.jobs as f64 / self.calls.max(1.0)
    }

    fn row(&self) -> String {
        format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.0} |",
            self.name,
            self.jobs,
            self.rate(),
            self.cpu_us,
            self.script_us,
            self.calls
        )
    }
}

fn payload(bytes: usize, i: usize) -> Vec<u8> {
    let mut p = format!("trip {i} ").into_bytes();
    p.resize(bytes, b'.');
    p
}

/// Job `i` of `n` due in the hour from `window` (ms), evenly spread.
fn due(window: u64, i: usize, n: usize) -> u64 {
    window + (i as u64 * HOUR_MS) / n as u64
}

/// `n` jobs `<prefix><i>` in batches of 1,000 (one in flight), due in `window`.
async fn schedule_batches(queue: &Queue, prefix: &str, bytes: usize, n: usize, window: u64) {
    let p = payload(bytes, 0);
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    for (c, chunk) in ids.chunks(BATCH).enumerate() {
        let jobs = chunk.iter().enumerate().map(|(x, id)| {
            let i = c * BATCH + x;
            (id.as_str(), p.as_slice(), When::At(at(due(window, i, n))))
        });
        let added = queue.schedule_batch(jobs).await.expect("schedule_batch");
        assert!(added.iter().all(|&a| a), "a batch's ids were new");
    }
}

/// `n` single `schedule` calls, 100 in flight, ids `<prefix><i>`, due in `window`.
async fn schedule_singles(queue: &Queue, prefix: &str, bytes: usize, n: usize, window: u64) {
    let p = Arc::new(payload(bytes, 0));
    stream::iter(0..n)
        .map(|i| {
            let (q, p) = (queue.clone(), p.clone());
            let id = format!("{prefix}{i}");
            async move {
                let when = When::At(at(due(window, i, n)));
                assert!(q.schedule(&id, p.as_slice(), when).await.expect("schedule"));
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
}

/// Leader passes back to back until `stop`; the passes made and those that failed.
fn passing(
    mut leader: Leader,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Leader, u64, u64)> {
    tokio::spawn(async move {
        let (mut passes, mut failed) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            passes += 1;
            if let Err(err) = leader.step().await {
                failed += 1;
                eprintln!("pass {passes}: {err}");
            }
        }
        (leader, passes, failed)
    })
}

/// Passes until one moves nothing more; how many passes it took.
async fn move_all(leader: &mut Leader) -> usize {
    let mut passes = 0;
    loop {
        let before = leader.stats().cold_moved;
        leader.step().await.expect("a pass");
        passes += 1;
        if leader.stats().cold_moved == before {
            return passes;
        }
        assert!(passes < 10_000, "the move ended within 10,000 passes");
    }
}

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("tickless-cold-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tier(dir: &Dir) -> ColdTier {
    ColdTier::local(&dir.0).expect("a local tier")
}

fn flush(server: &RedisServer) {
    server.cli(&["FLUSHALL"]);
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let n = env("N", 1_000_000);
    let n2k = env("N2K", 200_000);
    let s = env("S", 100_000);
    let l = env("L", 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!("# The cold tier against hot-only (issue 30)\n");
    println!(
        "redis-server (appendfsync everysec, no RDB saves) started by this program; ids `trip:<n>` \
         (6 to {} bytes); jobs due in one hour-window starting 48 to 49 h ahead; tier: \
         ColdTier::local on a temporary directory (fsync), 6 h horizon, 1 h windows, 3 h lead.\n",
        5 + (n.max(n2k).saturating_sub(1)).to_string().len()
    );
    // 200 B again at the 2 KB row's count: the index's density (jobs per `ci:` hash)
    // depends on the job count, so payload sizes are compared at one count.
    let spread = env("SPREAD", 0);
    if spread > 0 {
        runtime.block_on(spread_round(spread));
    }
    // ROUNDS=0: the spread round alone.
    let rounds = env("ROUNDS", 3);
    for (bytes, jobs) in [(200, n), (2_048, n2k), (200, n2k)]
        .into_iter()
        .take(rounds)
    {
        runtime.block_on(round(bytes, jobs, s, l));
    }
}

async fn round(bytes: usize, n: usize, s: usize, l: usize) {
    let server = RedisServer::start_with_args(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ]);
    println!("## {bytes}-byte payloads, {n} jobs batched, {s} single calls\n");
    let window = (now_ms(&server) + 48 * HOUR_MS).div_ceil(HOUR_MS) * HOUR_MS;
    let mut rows = Vec::new();

    // A: hot-only.
    let hot = Queue::connect(&server.url(), "hot").await.expect("connect");
    hot.schedule("warm", b"", When::At(at(window)))
        .await
        .expect("warm");
    let m0 = used_memory(&server);
    let c0 = counters(&server);
    schedule_batches(&hot, "trip:", bytes, n, window).await;
    let c1 = counters(&server);
    let hot_bytes = (used_memory(&server) - m0) / n as f64;
    schedule_singles(&hot, "one:", bytes, s, window).await;
    let c2 = counters(&server);
    rows.push(Phase::between(
        "hot-only: schedule_batch (1,000 per batch)",
        n,
        c0,
        c1,
    ));
    rows.push(Phase::between(
        "hot-only: schedule (single, 100 in flight)",
        s,
        c1,
        c2,
    ));
    drop(hot);
    flush(&server);

    // B: with the tier, a leader passing all the while.
    let dir_b = Dir::new(&format!("b{bytes}"));
    let queue = Queue::connect(&server.url(), "cold")
        .await
        .expect("connect")
        .with_cold_tier(tier(&dir_b));
    queue
        .schedule("warm", b"", When::At(at(window)))
        .await
        .expect("warm");
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.expect("the first pass");
    assert!(leader.is_leading(), "the leader leads");
    let m0 = used_memory(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let task = passing(leader, stop.clone());
    let c0 = counters(&server);
    schedule_batches(&queue, "trip:", bytes, n, window).await;
    let c1 = counters(&server);
    schedule_singles(&queue, "one:", bytes, s, window).await;
    let c2 = counters(&server);
    stop.store(true, Ordering::Relaxed);
    let (mut leader, passes, failed) = task.await.expect("the passing task");
    let during = leader.stats().cold_moved;
    let more = move_all(&mut leader).await;
    let cold_b = (used_memory(&server) - m0) / (n + s) as f64;
    rows.push(Phase::between(
        "tier, leader passing: schedule_batch",
        n,
        c0,
        c1,
    ));
    rows.push(Phase::between(
        "tier, leader passing: schedule (single)",
        s,
        c1,
        c2,
    ));
    println!(
        "B: {passes} leader passes ({failed} failed) during the schedules moved {during} of {} jobs; \
         {more} more passes moved the rest ({} in all); used_memory per job then {cold_b:.1} B.",
        n + s,
        leader.stats().cold_moved
    );
    println!(
        "B: left in Redis after the passes: {} jobs in `jobs`; leading: {}; `due`: {}; meta's cscan: {}",
        server.cli(&["HLEN", "tickless:{cold}:jobs"]).trim(),
        leader.is_leading(),
        server
            .cli(&["ZRANGE", "tickless:{cold}:due", "0", "-1", "WITHSCORES"])
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        server.cli(&["HGET", "tickless:{cold}:meta", "cscan"]).trim(),
    );
    drop((leader, queue));
    flush(&server);
    drop(dir_b);

    // C: the move and the load of one window.
    let dir_c = Dir::new(&format!("c{bytes}"));
    let queue = Queue::connect(&server.url(), "cold")
        .await
        .expect("connect")
        .with_cold_tier(tier(&dir_c));
    let mut leader = queue.leader(LeaderOptions::default());
    queue
        .set_manual_clock(Some(at(now_ms(&server))))
        .await
        .expect("clock");
    leader.step().await.expect("the first pass");
    let m0 = used_memory(&server);
    let c0 = counters(&server);
    schedule_batches(&queue, "trip:", bytes, n, window).await;
    let c1 = counters(&server);
    let hot_c = (used_memory(&server) - m0) / n as f64;
    // The lag sample's cold half: the hour before, its first minute.
    let lag_window = window - HOUR_MS;
    schedule_lag(&queue, "lag-cold:", bytes, l, lag_window).await;
    let m1 = used_memory(&server);
    let c2 = counters(&server);
    let s2 = per_command(&server);
    let idle = Probe::start(&server);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = idle.finish();
    slowlog_reset(&server);
    let during_move = Probe::start(&server);
    let passes = move_all(&mut leader).await;
    let during_move = during_move.finish();
    let move_log = slowlog(&server).await;
    let c3 = counters(&server);
    let s3 = per_command(&server);
    let moved = leader.stats().cold_moved as usize;
    let cold_c = (used_memory(&server) - m0) / (n + l) as f64;
    let lag_cold_bytes = (m1 - m0) / (n + l) as f64;
    rows.push(Phase::between("tier: schedule_batch, no leader", n, c0, c1));
    rows.push(Phase::between(
        "tier: the leader's move (Leader::step)",
        moved,
        c2,
        c3,
    ));
    let files = count_files(&dir_c.0);
    let mut sizes = Vec::new();
    walk(&dir_c.0, &mut sizes);
    sizes.sort_unstable();
    println!(
        "C: segment objects' sizes: smallest {} B, median {} B, largest {} B.",
        sizes.first().copied().unwrap_or(0),
        percentile(&sizes, 0.5),
        sizes.last().copied().unwrap_or(0)
    );
    println!(
        "C: moved {moved} jobs in {passes} passes into {files} segment objects ({:.0} bytes on disk, {:.1} per job).",
        dir_bytes(&dir_c.0),
        dir_bytes(&dir_c.0) / moved.max(1) as f64
    );
    println!(
        "Memory per job: hot-only {hot_bytes:.1} B; tier before the move {hot_c:.1} B ({lag_cold_bytes:.1} B with the lag jobs); \
         tier after the move {cold_c:.1} B (C), {cold_b:.1} B (B).",
    );
    // The lag sample's segments first (their window starts an hour earlier).
    queue
        .set_manual_clock(Some(at(lag_window - 3 * HOUR_MS + 60_000)))
        .await
        .expect("clock");
    leader.step().await.expect("the lag sample's load");
    let lag_loaded = leader.stats().cold_loaded as usize;
    // The big window: its load time.
    queue
        .set_manual_clock(Some(at(window - 3 * HOUR_MS + 60_000)))
        .await
        .expect("clock");
    let c4 = counters(&server);
    let s4 = per_command(&server);
    slowlog_reset(&server);
    let during_load = Probe::start(&server);
    leader.step().await.expect("the load");
    let during_load = during_load.finish();
    let load_log = slowlog(&server).await;
    let c5 = counters(&server);
    let s5 = per_command(&server);
    let loaded = leader.stats().cold_loaded as usize - lag_loaded;
    rows.push(Phase::between(
        "tier: the load of one window (Leader::step)",
        loaded,
        c4,
        c5,
    ));
    let after_load = (used_memory(&server) - m0) / (n + l) as f64;
    println!(
        "C: the load: {loaded} jobs of the window ({lag_loaded} of the lag sample before it); \
         used_memory per job after the load {after_load:.1} B; windows left cold: {}.",
        queue
            .cold_windows()
            .await
            .map(|w| w.len())
            .unwrap_or(usize::MAX)
    );
    for (name, rtt) in [
        ("idle, 2 s", idle),
        ("during the move", during_move),
        ("during the load", during_load),
    ] {
        println!(
            "C: another client's PING round trip {name}: {}",
            rtt.summary()
        );
    }
    for row in rows.iter().filter(|r| r.name.contains("Leader::step")) {
        println!(
            "C: Redis CPU per script call, {}: {:.0} µs ({:.0} calls)",
            row.name,
            row.cpu_per_call_us(),
            row.calls
        );
    }
    println!("C: SLOWLOG during the move: {move_log}");
    println!("C: SLOWLOG during the load: {load_log}");
    println!(
        "C: the move's commands per job: {}",
        command_delta(&s2, &s3, moved)
    );
    println!(
        "C: the load's commands per job: {}",
        command_delta(&s4, &s5, loaded)
    );
    println!("\n| phase | jobs | jobs/s | Redis CPU µs/job (INFO cpu) | script µs/job (evalsha usec) | script calls |");
    println!("|---|---:|---:|---:|---:|---:|");
    for row in &rows {
        println!("{}", row.row());
    }
    println!();

    // D: lag, loaded against hot, due at the same times.
    schedule_lag(&queue, "lag-hot:", bytes, l, lag_window).await;
    lag(&queue, &mut leader, lag_window, l).await;
    println!();
    drop((leader, queue));
    drop(dir_c);
}

/// `l` jobs `<prefix><i>` due in the first minute of `window`, batches of 1,000.
async fn schedule_lag(queue: &Queue, prefix: &str, bytes: usize, l: usize, window: u64) {
    let p = payload(bytes, 0);
    let ids: Vec<String> = (0..l).map(|i| format!("{prefix}{i}")).collect();
    for (c, chunk) in ids.chunks(BATCH).enumerate() {
        let jobs = chunk.iter().enumerate().map(|(x, id)| {
            let i = c * BATCH + x;
            (
                id.as_str(),
                p.as_slice(),
                When::At(at(window + (i as u64 * 60_000) / l as u64)),
            )
        });
        queue.schedule_batch(jobs).await.expect("schedule_batch");
    }
}

async fn lag(queue: &Queue, leader: &mut Leader, window: u64, l: usize) {
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(3600);
    let worker = queue.worker(options);
    let (mut hot, mut cold) = (Vec::with_capacity(l), Vec::with_capacity(l));
    let mut t = window - 100;
    while t <= window + 60_000 + 1_000 {
        queue.set_manual_clock(Some(at(t))).await.expect("clock");
        leader.step().await.expect("a step");
        leader.step().await.expect("a step");
        loop {
            let jobs = worker.try_claim(1_000).await.expect("claim");
            if jobs.is_empty() {
                break;
            }
            for job in jobs {
                let lag = job
                    .claimed_at()
                    .duration_since(job.due())
                    .expect("never early")
                    .as_millis() as u64;
                if job.id().starts_with("lag-hot:") {
                    hot.push(lag);
                } else if job.id().starts_with("lag-cold:") {
                    cold.push(lag);
                }
                worker.ack(&job).await.expect("ack");
            }
        }
        t += 100;
    }
    for (name, v) in [
        ("hot (scheduled within the horizon)", &mut hot),
        ("loaded (moved cold, loaded back)", &mut cold),
    ] {
        v.sort_unstable();
        println!(
            "D: lag {name}: {} of {l} delivered, p50 {} ms, p99 {} ms, max {} ms (manual clock, 100 ms steps)",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            v.last().copied().unwrap_or(0)
        );
    }
}

/// `INFO commandstats` as (command, calls, usec).
fn per_command(server: &RedisServer) -> Vec<(String, f64, f64)> {
    command_stats(&server.cli(&["INFO", "commandstats"]))
        .into_iter()
        .map(|s| (s.name, s.calls as f64, s.usec))
        .collect()
}

/// The commands run between two readings, per job: `name calls/job usec/job`, the
/// costliest first (the scripts' inner commands have lines of their own).
fn command_delta(
    before: &[(String, f64, f64)],
    after: &[(String, f64, f64)],
    jobs: usize,
) -> String {
    let n = jobs.max(1) as f64;
    let mut out: Vec<(String, f64, f64)> = after
        .iter()
        .filter(|(name, _, _)| name != "info")
        .map(|(name, calls, usec)| {
            let (c0, u0) = before
                .iter()
                .find(|(b, _, _)| b == name)
                .map_or((0.0, 0.0), |(_, c, u)| (*c, *u));
            (name.clone(), (calls - c0) / n, (usec - u0) / n)
        })
        .filter(|(_, calls, _)| *calls > 0.0)
        .collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2));
    out.iter()
        .map(|(name, calls, usec)| format!("{name} {calls:.3} calls {usec:.2} µs"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn walk(dir: &std::path::Path, out: &mut Vec<u64>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if let Ok(meta) = entry.metadata() {
            out.push(meta.len());
        }
    }
}

fn count_files(dir: &std::path::Path) -> usize {
    let mut sizes = Vec::new();
    walk(dir, &mut sizes);
    sizes.len()
}

fn dir_bytes(dir: &std::path::Path) -> f64 {
    let mut sizes = Vec::new();
    walk(dir, &mut sizes);
    sizes.iter().sum::<u64>() as f64
}

/// Another client of the same Redis: a thread with a socket of its own sends `PING`, one
/// a millisecond, and times each round trip.
struct Probe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

/// Round trips (µs), sorted.
struct Rtt(Vec<u64>);

impl Rtt {
    fn summary(&self) -> String {
        format!(
            "{} PINGs, p50 {} µs, p99 {} µs, max {} µs",
            self.0.len(),
            percentile(&self.0, 0.5),
            percentile(&self.0, 0.99),
            self.0.last().copied().unwrap_or(0)
        )
    }
}

impl Probe {
    fn start(server: &RedisServer) -> Probe {
        use std::io::{Read, Write};
        let url = server.url();
        let addr = url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut socket = std::net::TcpStream::connect(&addr).expect("the probe's connection");
            socket.set_nodelay(true).expect("nodelay");
            let mut out = Vec::new();
            let mut reply = [0u8; 7];
            while !flag.load(Ordering::Relaxed) {
                let sent = Instant::now();
                socket.write_all(b"PING\r\n").expect("PING");
                socket.read_exact(&mut reply).expect("+PONG");
                out.push(sent.elapsed().as_micros() as u64);
                assert_eq!(&reply, b"+PONG\r\n");
                std::thread::sleep(Duration::from_millis(1));
            }
            out
        });
        Probe { stop, thread }
    }

    fn finish(self) -> Rtt {
        self.stop.store(true, Ordering::Relaxed);
        let mut v = self.thread.join().expect("the probe");
        v.sort_unstable();
        Rtt(v)
    }
}

/// Logs every command of 200 µs or more from now on.
fn slowlog_reset(server: &RedisServer) {
    server.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "200"]);
    server.cli(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    server.cli(&["SLOWLOG", "RESET"]);
}

/// The commands logged since [`slowlog_reset`]: how many took 1 ms or more and 2 ms or
/// more, and the three longest (µs, the command, its keys and argument count: a
/// script's keys tell which it is, its arguments how many jobs it carried).
async fn slowlog(server: &RedisServer) -> String {
    let client = redis::Client::open(server.url()).expect("a client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("SLOWLOG GET");
    let mut logged: Vec<(u64, String)> = entries
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let us: u64 = redis::from_redis_value(fields.get(2)?).ok()?;
            let args: Vec<Vec<u8>> = redis::from_redis_value(fields.get(3)?).ok()?;
            // SLOWLOG keeps 32 arguments, the last saying how many more there were.
            let more: usize = args
                .last()
                .and_then(|a| {
                    let text = String::from_utf8_lossy(a);
                    text.strip_prefix("... (")?
                        .strip_suffix(" more arguments)")?
                        .parse()
                        .ok()
                })
                .map_or(0, |n: usize| n.saturating_sub(1));
            let count = args.len() + more;
            let word = |i: usize| {
                args.get(i)
                    .map(|a| String::from_utf8_lossy(&a[..a.len().min(24)]).into_owned())
                    .unwrap_or_default()
            };
            let what = if word(0).eq_ignore_ascii_case("evalsha") {
                let keys: usize = word(2).parse().unwrap_or(0);
                let key = |i: usize| word(3 + i).rsplit(':').next().unwrap_or("").to_string();
                format!(
                    "evalsha keys [{}] {} args",
                    (0..keys).map(key).collect::<Vec<_>>().join(" "),
                    count.saturating_sub(3 + keys)
                )
            } else {
                format!("{} ({count} args)", word(0))
            };
            Some((us, what))
        })
        .collect();
    // The log's entries are in used_memory (a few KB each): gone before memory is read.
    server.cli(&["SLOWLOG", "RESET"]);
    logged.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let over = |ms: u64| logged.iter().filter(|(us, _)| *us >= ms * 1000).count();
    format!(
        "{} commands of 200 µs or more, {} of 1 ms or more, {} of 2 ms or more; longest: {}",
        logged.len(),
        over(1),
        over(2),
        logged
            .iter()
            .take(3)
            .map(|(us, what)| format!("{us} µs {what}"))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// E: `n` jobs due evenly over 30 days from 7 h ahead, moved; segments written against
/// the fewest possible.
async fn spread_round(n: usize) {
    let server = RedisServer::start_with_args(&["--save", ""]);
    let dir = Dir::new("spread");
    let queue = Queue::connect(&server.url(), "spread")
        .await
        .expect("connect")
        .with_cold_tier(tier(&dir));
    let now = now_ms(&server);
    queue.set_manual_clock(Some(at(now))).await.expect("clock");
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.expect("the first pass");
    let first = now + 7 * HOUR_MS;
    let span = 30 * 24 * HOUR_MS;
    let p = payload(200, 0);
    let ids: Vec<String> = (0..n).map(|i| format!("spread:{i}")).collect();
    let due = |i: usize| first + (i as u64 * span) / n as u64;
    let mut per_window = std::collections::BTreeMap::<u64, usize>::new();
    for (c, chunk) in ids.chunks(BATCH).enumerate() {
        let jobs = chunk.iter().enumerate().map(|(x, id)| {
            let d = due(c * BATCH + x);
            *per_window.entry(d / HOUR_MS).or_default() += 1;
            (id.as_str(), p.as_slice(), When::At(at(d)))
        });
        queue.schedule_batch(jobs).await.expect("schedule_batch");
    }
    let started = Instant::now();
    let passes = move_all(&mut leader).await;
    let secs = started.elapsed().as_secs_f64();
    let moved = leader.stats().cold_moved;
    let minimal: usize = per_window.values().map(|&j| j.div_ceil(10_000)).sum();
    let objects = count_files(&dir.0);
    println!(
        "E: {n} jobs due evenly over 30 days ({} windows): moved {moved} in {passes} passes, {secs:.1} s; \
         {objects} segment objects, the fewest possible {minimal}: {:.2}x.\n",
        per_window.len(),
        objects as f64 / minimal.max(1) as f64
    );
}
