//! Issue 38's HTTP API against the library called directly, on one redis-server, in one
//! run, interleaved (library, then HTTP, `ROUNDS` times), medians and ratios at the end.
//!
//! The program starts its own redis-server (`appendfsync everysec`, no RDB saves) and
//! `tickless-durable serve` (release build with the feature `api`, named by
//! `TICKLESS_DURABLE_BIN`, default `$CARGO_TARGET_DIR/release/tickless-durable`) on a free
//! port with a token file of its own and `--lead` on the HTTP side's queue. The HTTP load
//! comes from `wrk` (Debian's package) with the Lua scripts in `benches/wrk/`:
//!
//! - **single**: the library's `schedule` with 100 calls in flight (`S` calls) against
//!   `POST jobs` over 64 keep-alive connections (`schedule.lua`: a new id on every
//!   request). Jobs are 200-byte payloads due in 48 h.
//! - **batch**: `schedule_batch` of 1,000 jobs, 2 in flight (`B` batches), against
//!   `POST jobs/batch` of the same 1,000 jobs over 2 connections (`batch.lua`).
//! - **work**: `W` ready jobs (`When::After(ZERO)`), worked by the Rust `Worker::run`
//!   (default options: up to 32 handlers, acks riding on the next claim) with a handler
//!   that returns `Ok` at once, against `POST claim` (`max` 10) + `POST ack` of what it
//!   got, over 16 connections (`work.lua`); jobs/s from the queue's counts.
//!
//! With `PIN=1`, `serve` runs on CPU 0 and wrk on CPU 1 (`taskset`), so that the load
//! generator takes no CPU time from `serve`'s core; redis-server and this program float
//! as without it. Each HTTP run lasts `SECS` seconds (default 5). `serve`'s `VmRSS` is sampled every
//! 100 ms during each HTTP run (the peak is reported), and read again after each round
//! and at the end after 5 s idle (`VmHWM` too).
//!
//! Each side's CPU time per job is read too (the figure other processes' load moves
//! least): the library side's is this program's plus Redis's (`INFO cpu`), the HTTP
//! side's `serve`'s, wrk's (this program's waited-for children) and Redis's. The summary
//! gives each side's median rate, the median of the rounds' ratios and the CPU ratio.
//!
//! `TICKLESS_DURABLE_BIN` may name several binaries, separated by commas (a before and
//! an after): each gets a `serve` of its own on a queue of its own, run after the library
//! in every round (their order flips each round), each row of the summary against the
//! same library runs. `WORKLOADS=single` (or any of `single,batch,work`) runs those only.
//! The load average is printed with each single run.
//!
//! Run: `cargo build --release -p tickless-durable --features api --bin tickless-durable
//! && cargo run --release -p tickless-bench --features api --bin api_vs_lib`.

use futures::stream::{self, StreamExt};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickless_durable::{Queue, When, WorkerOptions};
use tickless_test_support::RedisServer;

const IN_FLIGHT: usize = 100;
const CONNECTIONS: usize = 64;
const BATCH: usize = 1_000;
const BATCHES_IN_FLIGHT: usize = 2;
const CLAIM_MAX: usize = 10;
const WORK_CONNECTIONS: usize = 16;
const BYTES: usize = 200;
const DELAY: Duration = Duration::from_secs(48 * 3600);

/// With `PIN=1`, the CPU `serve` runs on (`taskset`), and the one wrk runs on: the load
/// generator no longer takes its CPU time from `serve`'s core. redis-server and this
/// program (the library side, whose load is generated in-process) are not pinned.
const SERVE_CPU: usize = 0;
const WRK_CPU: usize = 1;

/// `program`, under `taskset -c <cpu>` when `PIN=1`.
fn pinned(program: &str, cpu: usize) -> Command {
    if env("PIN", 0) == 1 {
        let mut command = Command::new("taskset");
        command.args(["-c", &cpu.to_string(), program]);
        command
    } else {
        Command::new(program)
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A secret of 24 random bytes, in hex, from the kernel.
fn secret() -> String {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `tickless-durable serve` on a free loopback port; killed on drop.
struct Serve {
    child: Child,
    base: String,
    dir: PathBuf,
}

impl Serve {
    fn start(bin: &str, redis_url: &str, queue: &str, token: &str) -> Serve {
        let dir = std::env::temp_dir().join(format!("api_vs_lib.{}.{queue}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let tokens = dir.join("tokens");
        std::fs::write(
            &tokens,
            format!("bench schedule,work,read {queue} {token}\n"),
        )
        .expect("the token file");
        let mut child = pinned(bin, SERVE_CPU)
            .args(["serve", "--addr", "127.0.0.1:0", redis_url, queue, "--lead"])
            .env("TICKLESS_API_TOKENS_FILE", &tokens)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (build it with --features api): {e}"));
        let stdout = child.stdout.take().expect("serve's stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next()
            .expect("serve printed its address before exiting")
            .expect("serve's first line");
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in serve's line {line:?}"))
            .trim_end_matches('/')
            .to_string();
        // Keep reading its output so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Serve { child, base, dir }
    }

    /// (`VmRSS`, `VmHWM`) in MiB.
    fn rss(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("serve's /proc status");
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {name} in serve's status"))
        };
        (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one `wrk` run gave: requests/s, bad answers, its seconds, peak `VmRSS` (MiB).
struct WrkRun {
    requests_per_s: f64,
    bad: u64,
    secs: f64,
    peak_rss: f64,
}

/// Runs `wrk` with `script` against `serve`, `vars` in its environment, sampling serve's
/// RSS while it runs; prints wrk's output (the raw figures) indented.
fn wrk(
    serve: &Serve,
    script: &str,
    threads: usize,
    conns: usize,
    vars: &[(&str, String)],
) -> WrkRun {
    let secs = env("SECS", 5);
    let script = format!("{}/wrk/{script}", env!("CARGO_MANIFEST_DIR"));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, pid) = (done.clone(), serve.child.id());
        std::thread::spawn(move || {
            let mut peak = 0.0f64;
            while !done.load(Ordering::Relaxed) {
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    let kib = s
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                        .unwrap_or(0.0);
                    peak = peak.max(kib / 1024.0);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        })
    };
    let started = Instant::now();
    let out = pinned("wrk", WRK_CPU)
        .args([
            &format!("-t{threads}"),
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            "--latency",
            "-s",
            &script,
            &serve.base,
        ])
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("wrk (apt-get install -y wrk)");
    let secs = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let peak_rss = sampler.join().expect("the RSS sampler");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text.lines() {
        println!("    {line}");
    }
    let value = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    WrkRun {
        requests_per_s: value("Requests/sec:").expect("wrk's Requests/sec"),
        bad: value("Non-2xx or 3xx responses:").unwrap_or(0.0) as u64,
        secs,
        peak_rss,
    }
}

/// CPU seconds (user + system) used so far by this program, by its waited-for children
/// (the wrk runs), by `serve` and by redis-server.
#[derive(Clone, Copy)]
struct Cpu {
    own: f64,
    children: f64,
    serve: f64,
    redis: f64,
}

impl Cpu {
    fn now(runtime: &tokio::runtime::Runtime, serve: &Serve, redis: &redis::Client) -> Cpu {
        let (own, children) = proc_cpu("self");
        let (serve, _) = proc_cpu(&serve.child.id().to_string());
        let info: String = runtime
            .block_on(async {
                let mut conn = redis.get_multiplexed_async_connection().await?;
                redis::cmd("INFO").arg("cpu").query_async(&mut conn).await
            })
            .expect("INFO cpu");
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {name} in INFO cpu"))
        };
        Cpu {
            own,
            children,
            serve,
            redis: field("used_cpu_user:") + field("used_cpu_sys:"),
        }
    }
}

/// (its own, its waited-for children's) CPU seconds, from `/proc/<pid>/stat`.
fn proc_cpu(pid: &str) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    // After the command's `)`: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let fields: Vec<f64> = stat[stat.rfind(')').expect("stat's comm") + 2..]
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    let tick = clock_ticks();
    (
        (fields[11] + fields[12]) / tick,
        (fields[13] + fields[14]) / tick,
    )
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU µs per job between two snapshots: the library side's (this program + Redis) or
/// the HTTP side's (serve + wrk + Redis), with its parts.
fn cpu_per_job(before: Cpu, after: Cpu, jobs: u64, http: bool) -> (f64, String) {
    let us = |s: f64| s * 1e6 / jobs.max(1) as f64;
    let redis = us(after.redis - before.redis);
    if http {
        let serve = us(after.serve - before.serve);
        let wrk = us(after.children - before.children);
        (
            serve + wrk + redis,
            format!("serve {serve:.1} + wrk {wrk:.1} + redis {redis:.1}"),
        )
    } else {
        let own = us(after.own - before.own);
        (own + redis, format!("library {own:.1} + redis {redis:.1}"))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `serve` binaries to compare: `TICKLESS_DURABLE_BIN`, several separated by commas
/// (each with a `serve` of its own, on a queue of its own, run in turn in every round,
/// the first one first in odd rounds and last in even ones), by default
/// `$CARGO_TARGET_DIR/release/tickless-durable`.
fn binaries() -> Vec<String> {
    match std::env::var("TICKLESS_DURABLE_BIN") {
        Ok(list) if !list.is_empty() => list.split(',').map(str::to_string).collect(),
        _ => {
            let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
            vec![format!("{target}/release/tickless-durable")]
        }
    }
}

/// One `serve` of the comparison, with what it measured.
struct Side {
    label: String,
    serve: Serve,
    api: Queue,
    queue: String,
    rates: [Vec<f64>; 3],
    ratios: [Vec<f64>; 3],
    cpu_ratios: [Vec<f64>; 3],
    peaks: Vec<f64>,
    after: Vec<f64>,
    rss0: f64,
}

fn main() {
    let rounds = env("ROUNDS", 3);
    let s = env("S", 100_000);
    let b = env("B", 100);
    let w = env("W", 100_000);
    // `WORKLOADS=single` (or `single,work`, ...) runs those only.
    let workloads = std::env::var("WORKLOADS").unwrap_or_else(|_| "single,batch,work".into());
    let runs = |name: &str| workloads.split(',').any(|w| w == name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start_with_args(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ]);
    let token = secret();
    let mut sides: Vec<Side> = binaries()
        .into_iter()
        .enumerate()
        .map(|(i, bin)| {
            let queue = if i == 0 {
                "api".to_string()
            } else {
                format!("api{i}")
            };
            let serve = Serve::start(&bin, &server.url(), &queue, &token);
            let api = runtime
                .block_on(Queue::connect(&server.url(), &queue))
                .expect("connect");
            let rss0 = serve.rss().0;
            let label = std::path::Path::new(&bin)
                .file_name()
                .map_or(bin.clone(), |f| f.to_string_lossy().into_owned());
            Side {
                label,
                serve,
                api,
                queue,
                rates: Default::default(),
                ratios: Default::default(),
                cpu_ratios: Default::default(),
                peaks: Vec::new(),
                after: Vec::new(),
                rss0,
            }
        })
        .collect();
    let lib = runtime
        .block_on(Queue::connect(&server.url(), "lib"))
        .expect("connect");
    println!("# The HTTP API against the library (issue 38)\n");
    println!(
        "redis-server (appendfsync everysec, no RDB saves) and `tickless-durable serve --lead` \
         started by this program; {BYTES}-byte payloads due in 48 h; {rounds} rounds, library \
         then HTTP in each; wrk runs of {} s; {}; workloads {workloads}; serve binaries: {}.\n",
        env("SECS", 5),
        if env("PIN", 0) == 1 {
            format!("serve pinned to CPU {SERVE_CPU}, wrk to CPU {WRK_CPU}")
        } else {
            "nothing pinned".to_string()
        },
        sides
            .iter()
            .map(|side| side.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for side in &sides {
        println!("{}'s VmRSS at start: {:.1} MiB", side.label, side.rss0);
    }
    println!("\nload average at start: {}\n", load_average());
    let names = ["single", "batch", "work"];
    let mut lib_rates: [Vec<f64>; 3] = Default::default();
    let client = redis::Client::open(server.url()).expect("a Redis client");
    let token_var = || ("TOKEN", token.clone());
    for round in 0..rounds {
        println!("## Round {}\n", round + 1);
        // The sides in turn: the first first in odd rounds, last in even ones.
        let mut order: Vec<usize> = (0..sides.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }

        if runs("single") {
            let cpu = Cpu::now(&runtime, &sides[0].serve, &client);
            let t = Instant::now();
            runtime.block_on(singles(&lib, &format!("s{round}"), s));
            let rate = s as f64 / t.elapsed().as_secs_f64();
            let (lib_us, parts) = cpu_per_job(
                cpu,
                Cpu::now(&runtime, &sides[0].serve, &client),
                s as u64,
                false,
            );
            println!(
                "library, schedule, {IN_FLIGHT} in flight: {s} jobs, {rate:.0} jobs/s; CPU µs a \
                 job: {lib_us:.1} ({parts})"
            );
            lib_rates[0].push(rate);
            for &i in &order {
                let side = &mut sides[i];
                let before = runtime.block_on(side.api.stats()).expect("stats").scheduled;
                let cpu = Cpu::now(&runtime, &side.serve, &client);
                let run = wrk(
                    &side.serve,
                    "schedule.lua",
                    2,
                    CONNECTIONS,
                    &[
                        token_var(),
                        ("QUEUE", side.queue.clone()),
                        ("PREFIX", format!("s{round}")),
                        ("BYTES", BYTES.to_string()),
                        ("DELAY_MS", DELAY.as_millis().to_string()),
                    ],
                );
                let added = runtime.block_on(side.api.stats()).expect("stats").scheduled - before;
                let (api_us, parts) =
                    cpu_per_job(cpu, Cpu::now(&runtime, &side.serve, &client), added, true);
                println!(
                    "HTTP ({}), POST jobs, {CONNECTIONS} connections: {:.0} requests/s, {added} \
                     jobs added ({:.0}/s), {} bad answers, serve's peak VmRSS {:.1} MiB; CPU µs a \
                     job: {api_us:.1} ({parts}); load average {}\n",
                    side.label,
                    run.requests_per_s,
                    added as f64 / run.secs,
                    run.bad,
                    run.peak_rss,
                    load_average()
                );
                side.rates[0].push(run.requests_per_s);
                side.ratios[0].push(run.requests_per_s / rate);
                side.cpu_ratios[0].push(lib_us / api_us);
                side.peaks.push(run.peak_rss);
            }
        }

        if runs("batch") {
            let cpu = Cpu::now(&runtime, &sides[0].serve, &client);
            let t = Instant::now();
            runtime.block_on(batches(&lib, &format!("b{round}"), b));
            let rate = (b * BATCH) as f64 / t.elapsed().as_secs_f64();
            let (lib_us, parts) = cpu_per_job(
                cpu,
                Cpu::now(&runtime, &sides[0].serve, &client),
                (b * BATCH) as u64,
                false,
            );
            println!(
                "library, schedule_batch of {BATCH}, {BATCHES_IN_FLIGHT} in flight: {b} batches, \
                 {rate:.0} jobs/s; CPU µs a job: {lib_us:.1} ({parts})"
            );
            lib_rates[1].push(rate);
            for &i in &order {
                let side = &mut sides[i];
                let before = runtime.block_on(side.api.stats()).expect("stats").scheduled;
                let cpu = Cpu::now(&runtime, &side.serve, &client);
                let run = wrk(
                    &side.serve,
                    "batch.lua",
                    BATCHES_IN_FLIGHT,
                    BATCHES_IN_FLIGHT,
                    &[
                        token_var(),
                        ("QUEUE", side.queue.clone()),
                        ("PREFIX", format!("b{round}")),
                        ("BYTES", BYTES.to_string()),
                        ("DELAY_MS", DELAY.as_millis().to_string()),
                        ("BATCH", BATCH.to_string()),
                    ],
                );
                let added = runtime.block_on(side.api.stats()).expect("stats").scheduled - before;
                let (api_us, parts) =
                    cpu_per_job(cpu, Cpu::now(&runtime, &side.serve, &client), added, true);
                let api_rate = run.requests_per_s * BATCH as f64;
                println!(
                    "HTTP ({}), POST jobs/batch of {BATCH}, {BATCHES_IN_FLIGHT} connections: \
                     {api_rate:.0} jobs/s, {added} jobs added, {} bad answers, serve's peak VmRSS \
                     {:.1} MiB; CPU µs a job: {api_us:.1} ({parts})\n",
                    side.label, run.bad, run.peak_rss
                );
                side.rates[1].push(api_rate);
                side.ratios[1].push(api_rate / rate);
                side.cpu_ratios[1].push(lib_us / api_us);
                side.peaks.push(run.peak_rss);
            }
        }

        if runs("work") {
            runtime.block_on(ready_jobs(&lib, &format!("w{round}"), w));
            let cpu = Cpu::now(&runtime, &sides[0].serve, &client);
            let t = Instant::now();
            runtime.block_on(work(&lib, w));
            let rate = w as f64 / t.elapsed().as_secs_f64();
            let (lib_us, parts) = cpu_per_job(
                cpu,
                Cpu::now(&runtime, &sides[0].serve, &client),
                w as u64,
                false,
            );
            println!(
                "library, Worker::run (defaults, handler Ok at once): {w} jobs, {rate:.0} jobs/s; \
                 CPU µs a job: {lib_us:.1} ({parts})"
            );
            lib_rates[2].push(rate);
            for &i in &order {
                let side = &mut sides[i];
                // Enough ready jobs that the run does not drain them.
                let http_jobs = (rate * env("SECS", 5) as f64 * 1.5) as usize;
                runtime.block_on(ready_jobs(&side.api, &format!("w{round}"), http_jobs));
                let before = runtime.block_on(side.api.stats()).expect("stats");
                let cpu = Cpu::now(&runtime, &side.serve, &client);
                let run = wrk(
                    &side.serve,
                    "work.lua",
                    2,
                    WORK_CONNECTIONS,
                    &[
                        token_var(),
                        ("QUEUE", side.queue.clone()),
                        ("MAX", CLAIM_MAX.to_string()),
                    ],
                );
                let stats = runtime.block_on(side.api.stats()).expect("stats");
                // Jobs neither ready nor in flight any more: acked (leftovers of an earlier
                // round, in flight under their lease, count on both sides).
                let acked = (before.ready + before.in_flight) - (stats.ready + stats.in_flight);
                let api_rate = acked as f64 / run.secs;
                let (api_us, parts) =
                    cpu_per_job(cpu, Cpu::now(&runtime, &side.serve, &client), acked, true);
                println!(
                    "HTTP ({}), POST claim (max {CLAIM_MAX}) + POST ack, {WORK_CONNECTIONS} \
                     connections: {acked} jobs acked ({api_rate:.0} jobs/s; {} left ready, {} in \
                     flight), {:.0} requests/s, {} bad answers, serve's peak VmRSS {:.1} MiB; CPU \
                     µs a job: {api_us:.1} ({parts})",
                    side.label,
                    stats.ready,
                    stats.in_flight,
                    run.requests_per_s,
                    run.bad,
                    run.peak_rss
                );
                side.rates[2].push(api_rate);
                side.ratios[2].push(api_rate / rate);
                side.cpu_ratios[2].push(lib_us / api_us);
                side.peaks.push(run.peak_rss);
                // Leave the next round an empty queue to claim from.
                runtime.block_on(drain(&side.api));
            }
        }
        for side in &mut sides {
            let (rss, hwm) = side.serve.rss();
            println!(
                "\n{} after round {}: VmRSS {rss:.1} MiB, VmHWM {hwm:.1} MiB",
                side.label,
                round + 1
            );
            side.after.push(rss);
        }
        println!();
    }
    std::thread::sleep(Duration::from_secs(5));
    println!("load average at the end: {}\n", load_average());
    println!("## Medians of {rounds} rounds\n");
    println!(
        "| workload | serve | library | HTTP | ratio of medians | median of rounds' ratios | jobs per CPU second, HTTP / library |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (i, name) in names.iter().enumerate() {
        if !runs(name) {
            continue;
        }
        let l = median(&mut lib_rates[i]);
        for side in &mut sides {
            let h = median(&mut side.rates[i]);
            println!(
                "| {name} | {} | {l:.0} jobs/s | {h:.0} jobs/s | {:.2}x | {:.2}x | {:.2}x |",
                side.label,
                h / l,
                median(&mut side.ratios[i]),
                median(&mut side.cpu_ratios[i])
            );
        }
    }
    println!();
    for side in &sides {
        let (rss, hwm) = side.serve.rss();
        println!(
            "{}'s VmRSS: {:.1} MiB at start, peaks under load {}, after each round {}, {rss:.1} \
             MiB 5 s after (VmHWM {hwm:.1} MiB)",
            side.label,
            side.rss0,
            side.peaks
                .iter()
                .map(|p| format!("{p:.1}"))
                .collect::<Vec<_>>()
                .join(" / "),
            side.after
                .iter()
                .map(|p| format!("{p:.1}"))
                .collect::<Vec<_>>()
                .join(" / "),
        );
    }
}

/// The machine's load averages (1, 5, 15 minutes), from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn payload() -> Vec<u8> {
    vec![b'x'; BYTES]
}

/// `n` single `schedule` calls, 100 in flight, ids `<prefix>:<i>`.
async fn singles(queue: &Queue, prefix: &str, n: usize) {
    let p = Arc::new(payload());
    stream::iter(0..n)
        .map(|i| {
            let (q, p) = (queue.clone(), p.clone());
            let id = format!("{prefix}:{i}");
            async move {
                let added = q.schedule(&id, p.as_slice(), When::After(DELAY)).await;
                assert!(added.expect("schedule"), "a new id");
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
}

/// `n` batches of 1,000 jobs, 2 in flight, ids `<prefix>:<i>`.
async fn batches(queue: &Queue, prefix: &str, n: usize) {
    let p = Arc::new(payload());
    stream::iter(0..n)
        .map(|c| {
            let (q, p) = (queue.clone(), p.clone());
            let ids: Vec<String> = (0..BATCH)
                .map(|i| format!("{prefix}:{}", c * BATCH + i))
                .collect();
            async move {
                let jobs = ids
                    .iter()
                    .map(|id| (id.as_str(), p.as_slice(), When::After(DELAY)));
                let added = q.schedule_batch(jobs).await.expect("schedule_batch");
                assert!(added.iter().all(|&a| a), "a batch's ids were new");
            }
        })
        .buffer_unordered(BATCHES_IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
}

/// `n` jobs ready now (`When::After(ZERO)`), ids `<prefix>:<i>`.
async fn ready_jobs(queue: &Queue, prefix: &str, n: usize) {
    let p = payload();
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}:{i}")).collect();
    for chunk in ids.chunks(BATCH) {
        let jobs = chunk
            .iter()
            .map(|id| (id.as_str(), p.as_slice(), When::After(Duration::ZERO)));
        queue.schedule_batch(jobs).await.expect("schedule_batch");
    }
    let ready = queue.stats().await.expect("stats").ready;
    assert!(ready >= n as u64, "{n} jobs ready, {ready} found");
}

/// `Worker::run` with default options until `n` handlers have run and every job is
/// acked (nothing ready or in flight).
async fn work(queue: &Queue, n: usize) {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let (stop, shutdown) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(queue.worker(WorkerOptions::default()).run_until(
        move |_job| {
            counter.fetch_add(1, Ordering::Relaxed);
            async { Ok::<(), std::io::Error>(()) }
        },
        shutdown,
    ));
    let limit = Instant::now() + Duration::from_secs(120);
    loop {
        if ran.load(Ordering::Relaxed) >= n {
            let stats = queue.stats().await.expect("stats");
            if stats.ready == 0 && stats.in_flight == 0 {
                break;
            }
        }
        assert!(
            Instant::now() < limit,
            "the worker acked {n} jobs within 120 s ({} handlers ran)",
            ran.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = stop.send(());
    worker
        .await
        .expect("the worker's task")
        .expect("the worker");
}

/// Works the ready jobs the HTTP run left with the library (those it left in flight wait
/// out their 60 s lease; the next round's count takes them out on both sides).
async fn drain(queue: &Queue) {
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(60);
    let worker = queue.worker(options);
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = worker.try_claim(1_000).await.expect("claim");
        if jobs.is_empty() {
            break;
        }
        for job in &jobs {
            worker.ack(job).await.expect("ack");
        }
        assert!(
            Instant::now() < limit,
            "drained the HTTP run's ready jobs within 60 s"
        );
    }
}
