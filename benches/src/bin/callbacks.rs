//! Issue 39's targets: due jobs handed over by signed webhooks (to a receiver in this
//! program) and by the Redis Stream outlet (to a consumer group read here), each against
//! the Rust `Worker` of the `durable` section's D2 workload, on one redis-server, in one
//! run, rounds interleaved (worker, webhooks, stream), medians at the end.
//!
//! - **Delivery** (D2): `JOBS` jobs (default 20,000) due uniformly over 5 s from 1 s
//!   ahead, one leader; the jobs' payload is their due time (ms since the Unix epoch) and
//!   each is scheduled `When::At` that time, so that every path's lateness is read the
//!   same way: the wall clock where the job is handed over (the worker's handler starts,
//!   the receiver's handler starts, the consumer's `XREADGROUP` answers) minus the due
//!   time. The worker is `Worker::run` with default options (32 handlers); the webhook
//!   dispatcher is `Webhooks::spawn` on a target with `concurrency=32` (the worker's
//!   handlers; `CONCURRENCY`), no rate, posting to an axum receiver on loopback that
//!   answers 200 (`LOOPS` > 1 routes the queue that many times: more claim loops); the
//!   stream reader is one consumer of a group, `XREADGROUP COUNT 200 BLOCK 500`, the
//!   `XACK` of what it read sent on a second connection without waiting for it. Redis CPU per delivered job: `INFO cpu` deltas
//!   (`used_cpu_sys + used_cpu_user`) from before the schedule to after the last ack.
//! - **Failures**: the same jobs posted to a receiver that answers 500 to every tenth
//!   request; target backoff 100 ms doubling, no jitter, 10 attempts. Every job must
//!   reach a 200, and each retry of a job must arrive no earlier than its backoff after
//!   the failed request's answer (both read from the receiver's clock).
//! - **Rate**: `RATE_JOBS` jobs (default 5,000) due at once, posted to a target with
//!   `rate=RATE` (default 500); the rate at the receiver, whole run and past the
//!   limiter's documented burst (its first second), and the most requests in any 1 s.
//!
//! Run: `cargo run --release -p tickless-bench --features callbacks --bin callbacks`
//! (about 2 minutes; `ROUNDS`, `JOBS`, `RATE`, `RATE_JOBS` in the environment).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tickless_bench::durable::{cpu_us, ids, info_field};
use tickless_bench::median;
use tickless_durable::hook::Webhooks;
use tickless_durable::{LeaderOptions, Queue, StreamOutlet, When, WorkerOptions};
use tickless_test_support::RedisServer;

/// The target's secret (the module docs' example; this receiver does not verify).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPREAD_MS: u64 = 5_000;
const BACKOFF_MS: f64 = 100.0;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The wall clock, ms since the Unix epoch.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1e3
}

/// A job handed over: its id, when (wall clock, ms), its due time (ms), its attempt, and
/// the status the receiver answered (200 for the worker and the stream).
#[derive(Clone)]
struct Arrival {
    id: String,
    at_ms: f64,
    due_ms: f64,
    attempt: u32,
    status: u16,
}

type Arrivals = Arc<Mutex<Vec<Arrival>>>;

fn due_of(payload: &[u8]) -> f64 {
    std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------------------------------
// The receiver

struct Receiver {
    arrivals: Arrivals,
    answered: AtomicU64,
    /// Answers 500 to every `fail_every`th request (0: never).
    fail_every: u64,
}

async fn hook(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let at_ms = now_ms();
    let n = r.answered.fetch_add(1, Ordering::Relaxed);
    let status = if r.fail_every > 0 && n % r.fail_every == r.fail_every - 1 {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    r.arrivals.lock().unwrap().push(Arrival {
        id: header("tickless-job-id"),
        at_ms,
        due_ms: due_of(&body),
        attempt: header("tickless-attempt").parse().unwrap_or(0),
        status: status.as_u16(),
    });
    status
}

/// A receiver on a free loopback port, noting requests in `arrivals`: its URL and its
/// server's task.
async fn receiver(fail_every: u64, arrivals: Arrivals) -> (String, tokio::task::JoinHandle<()>) {
    let state = Arc::new(Receiver {
        arrivals: arrivals.clone(),
        answered: AtomicU64::new(0),
        fail_every,
    });
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!(
        "http://{}/hook",
        listener.local_addr().expect("its address")
    );
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("the receiver");
    });
    (url, task)
}

/// The target's settings in the delivery rounds: `concurrency=CONCURRENCY` (default 32,
/// the worker's handlers), else the defaults.
fn settings() -> String {
    format!("concurrency={}", env("CONCURRENCY", 32))
}

fn config(url: &str, queue: &str, settings: &str) -> Webhooks {
    Webhooks::parse(&format!(
        "target bench {url} secret={SECRET} {settings}\n{}\
         allow-scheme http\nallow-host 127.0.0.1\nallow-net 127.0.0.0/8\n",
        // LOOPS > 1: the queue routed that many times, one claim loop per route.
        format!("queue {queue} bench\n").repeat(env("LOOPS", 1))
    ))
    .expect("the webhooks configuration")
}

// ---------------------------------------------------------------------------------------
// The stream's consumer group

fn bulk(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// The entries of an `XREADGROUP` answer (one stream): (entry id, job id, payload).
fn entries(reply: &Value) -> Vec<(Vec<u8>, String, Vec<u8>)> {
    let mut out = Vec::new();
    let Value::Array(streams) = reply else {
        return out;
    };
    for stream in streams {
        let Value::Array(pair) = stream else { continue };
        let Some(Value::Array(items)) = pair.get(1) else {
            continue;
        };
        for item in items {
            let Value::Array(entry) = item else { continue };
            let (Some(id), Some(Value::Array(fields))) =
                (entry.first().and_then(bulk), entry.get(1))
            else {
                continue;
            };
            let (mut job, mut payload) = (String::new(), Vec::new());
            for kv in fields.chunks(2) {
                match (kv.first().and_then(bulk), kv.get(1).and_then(bulk)) {
                    (Some(b"id"), Some(v)) => job = String::from_utf8_lossy(v).into_owned(),
                    (Some(b"payload"), Some(v)) => payload = v.to_vec(),
                    _ => {}
                }
            }
            out.push((id.to_vec(), job, payload));
        }
    }
    out
}

/// One consumer of group `g`: reads, notes the arrivals, acks (on `acks`, a connection
/// of its own, without waiting: as the worker's acks ride on its next claim, the next
/// read does not wait for them), for ever.
async fn consume(
    mut conn: MultiplexedConnection,
    acks: MultiplexedConnection,
    key: String,
    arrivals: Arrivals,
) {
    loop {
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg("c1")
            .arg("COUNT")
            .arg(200)
            .arg("BLOCK")
            .arg(500)
            .arg("STREAMS")
            .arg(&key)
            .arg(">")
            .query_async(&mut conn)
            .await
            .expect("XREADGROUP");
        let at_ms = now_ms();
        let read = entries(&reply);
        if read.is_empty() {
            continue;
        }
        let mut ack = redis::cmd("XACK");
        ack.arg(&key).arg("g");
        {
            let mut arrivals = arrivals.lock().unwrap();
            for (entry, id, payload) in &read {
                ack.arg(entry);
                arrivals.push(Arrival {
                    id: id.clone(),
                    at_ms,
                    due_ms: due_of(payload),
                    attempt: 1,
                    status: 200,
                });
            }
        }
        let mut acks = acks.clone();
        tokio::spawn(async move {
            let _: u64 = ack.query_async(&mut acks).await.expect("XACK");
        });
    }
}

// ---------------------------------------------------------------------------------------
// Rounds

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Worker,
    Webhooks,
    Stream,
}

/// What one delivery round gave.
#[derive(Clone, Copy)]
struct Round {
    delivered: usize,
    repeated: usize,
    early: usize,
    p50: f64,
    p99: f64,
    max: f64,
    cpu_us: f64,
}

/// Schedules `n` jobs due over `SPREAD_MS` from 1 s ahead (`spread` false: due now).
async fn schedule(queue: &Queue, n: usize, spread: bool) {
    let start = (now_ms() / 1e3).ceil() as u64 * 1_000 + 1_000;
    let dues: Vec<u64> = (0..n)
        .map(|i| start + SPREAD_MS * i as u64 / n as u64)
        .collect();
    let payloads: Vec<Vec<u8>> = dues.iter().map(|d| d.to_string().into_bytes()).collect();
    let ids = ids("job", n);
    let jobs = ids
        .iter()
        .zip(&payloads)
        .zip(&dues)
        .map(|((id, payload), due)| {
            let when = if spread {
                When::At(UNIX_EPOCH + Duration::from_millis(*due))
            } else {
                When::After(Duration::ZERO)
            };
            (id.as_str(), payload.as_slice(), when)
        });
    queue.schedule_batch(jobs).await.expect("schedule");
}

/// Waits (the spread + 60 s at most) until `n` distinct jobs got a 200.
async fn wait_for(arrivals: &Arrivals, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_millis(SPREAD_MS) + Duration::from_secs(60);
    loop {
        let ok = {
            let arrivals = arrivals.lock().unwrap();
            let mut ids: Vec<&str> = arrivals
                .iter()
                .filter(|a| a.status == 200)
                .map(|a| a.id.as_str())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids.len()
        };
        if ok >= n {
            return;
        }
        if Instant::now() > deadline {
            eprintln!("{what}: only {ok} of {n} jobs delivered within the limit");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The figures of a round's arrivals: each job's first 200 counts.
fn figures(arrivals: &[Arrival], cpu_us: f64, n: usize) -> Round {
    let mut ok: Vec<&Arrival> = arrivals.iter().filter(|a| a.status == 200).collect();
    ok.sort_by(|a, b| a.id.cmp(&b.id).then(a.at_ms.total_cmp(&b.at_ms)));
    let before = ok.len();
    ok.dedup_by(|a, b| a.id == b.id);
    let mut late: Vec<f64> = ok.iter().map(|a| a.at_ms - a.due_ms).collect();
    late.sort_by(f64::total_cmp);
    let q = |q: f64| {
        late.get(((late.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Round {
        delivered: ok.len(),
        repeated: before - ok.len(),
        early: late.iter().filter(|l| **l < 0.0).count(),
        p50: q(0.5),
        p99: q(0.99),
        max: q(1.0),
        cpu_us: cpu_us / n as f64,
    }
}

async fn deliver(url: &str, admin: &mut MultiplexedConnection, path: Path, round: usize) -> Round {
    let n = env("JOBS", 20_000);
    let name = format!("{path:?}-{round}");
    let queue = Queue::connect(url, &name).await.expect("connect");
    let arrivals = Arrivals::default();
    let mut tasks = Vec::new();
    if path == Path::Stream {
        let key = queue.default_stream_key();
        let outlet = StreamOutlet::new(&key).with_max_len(1_000_000);
        queue
            .set_stream_outlet(Some(&outlet))
            .await
            .expect("outlet");
        let client = redis::Client::open(url).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg("g")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .expect("XGROUP CREATE");
        let acks = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        tasks.push(tokio::spawn(consume(conn, acks, key, arrivals.clone())));
    }
    let cpu0 = cpu_us(admin).await;
    schedule(&queue, n, true).await;
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let mut _dispatchers = None;
    match path {
        Path::Worker => {
            let arrivals = arrivals.clone();
            let worker = queue.worker(WorkerOptions::default()).run(move |job| {
                let at_ms = now_ms();
                arrivals.lock().unwrap().push(Arrival {
                    id: job.id().to_string(),
                    at_ms,
                    due_ms: due_of(job.payload()),
                    attempt: job.attempt(),
                    status: 200,
                });
                async { Ok::<(), std::io::Error>(()) }
            });
            tasks.push(tokio::spawn(async move {
                let _ = worker.await;
            }));
        }
        Path::Webhooks => {
            let (url, server) = receiver(0, arrivals.clone()).await;
            tasks.push(server);
            let hooks = config(&url, &name, &settings());
            _dispatchers = Some(hooks.spawn([queue.clone()]).expect("dispatchers"));
        }
        Path::Stream => {}
    }
    wait_for(&arrivals, n, &name).await;
    // Let the last acks go out before reading Redis's CPU.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cpu1 = cpu_us(admin).await;
    drop(_dispatchers);
    drop(leader);
    for task in tasks {
        task.abort();
    }
    let arrivals = arrivals.lock().unwrap().clone();
    figures(&arrivals, cpu1 - cpu0, n)
}

/// The failures round: (delivered, 500s answered, retries checked, retries early, the
/// least margin of a retry over its backoff in ms, p99 lateness of the 200s).
async fn failures(url: &str, round: usize) -> (usize, usize, usize, usize, f64, f64) {
    let n = env("JOBS", 20_000);
    let name = format!("failing-{round}");
    let queue = Queue::connect(url, &name)
        .await
        .expect("connect")
        .with_max_attempts(10);
    schedule(&queue, n, true).await;
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let arrivals = Arrivals::default();
    let (target, server) = receiver(10, arrivals.clone()).await;
    let hooks = config(&target, &name, &format!("backoff-ms={BACKOFF_MS} jitter=0"));
    let dispatchers = hooks.spawn([queue.clone()]).expect("dispatchers");
    wait_for(&arrivals, n, &name).await;
    drop(dispatchers);
    drop(leader);
    server.abort();
    let mut all = arrivals.lock().unwrap().clone();
    let round = figures(&all, 0.0, n);
    all.sort_by(|a, b| a.id.cmp(&b.id).then(a.attempt.cmp(&b.attempt)));
    let failed = all.iter().filter(|a| a.status == 500).count();
    let (mut checked, mut early, mut margin) = (0, 0, f64::INFINITY);
    for pair in all.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.id != b.id || a.status != 500 {
            continue;
        }
        assert_eq!(b.attempt, a.attempt + 1, "job {} attempts in order", a.id);
        let backoff = BACKOFF_MS * 2f64.powi(a.attempt as i32 - 1);
        let gap = b.at_ms - a.at_ms;
        checked += 1;
        if gap < backoff {
            early += 1;
        }
        margin = margin.min(gap - backoff);
    }
    (round.delivered, failed, checked, early, margin, round.p99)
}

/// The rate round: (requests/s over the whole run, past the first second, most in 1 s).
async fn rate(url: &str, round: usize) -> (f64, f64, usize) {
    let (n, rate) = (env("RATE_JOBS", 5_000), env("RATE", 500));
    let name = format!("rate-{round}");
    let queue = Queue::connect(url, &name).await.expect("connect");
    schedule(&queue, n, false).await;
    let arrivals = Arrivals::default();
    let (target, server) = receiver(0, arrivals.clone()).await;
    let hooks = config(&target, &name, &format!("rate={rate}"));
    let dispatchers = hooks.spawn([queue.clone()]).expect("dispatchers");
    wait_for(&arrivals, n, &name).await;
    drop(dispatchers);
    server.abort();
    let mut at: Vec<f64> = arrivals.lock().unwrap().iter().map(|a| a.at_ms).collect();
    at.sort_by(f64::total_cmp);
    let whole = (at.len() - 1) as f64 / ((at[at.len() - 1] - at[0]) / 1e3);
    let past: Vec<f64> = at.iter().copied().filter(|t| *t >= at[0] + 1e3).collect();
    let steady = match past.as_slice() {
        [first, .., last] => (past.len() - 1) as f64 / ((last - first) / 1e3),
        _ => f64::NAN, // all within the burst: give it more jobs (RATE_JOBS)
    };
    let mut most = 0;
    let mut from = 0;
    for to in 0..at.len() {
        while at[to] - at[from] >= 1e3 {
            from += 1;
        }
        most = most.max(to - from + 1);
    }
    (whole, steady, most)
}

fn median_of(rounds: &[Round], f: fn(&Round) -> f64) -> f64 {
    median(&mut rounds.iter().map(f).collect::<Vec<_>>())
}

fn main() {
    let rounds = env("ROUNDS", 3);
    let server = RedisServer::start_with_fsync("everysec");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let url = server.url();
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut admin = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "# callbacks (issue 39): Redis {}, append-only on, everysec; load average before: {}",
            info_field(&mut admin, "server", "redis_version").await,
            load.trim()
        );
        let n = env("JOBS", 20_000);
        let paths = [Path::Worker, Path::Webhooks, Path::Stream];
        let mut by_path: Vec<Vec<Round>> = vec![Vec::new(); paths.len()];
        for round in 0..rounds {
            for (i, path) in paths.iter().enumerate() {
                let r = deliver(&url, &mut admin, *path, round).await;
                println!(
                    "round {round} {path:?}: delivered {} (repeated {}, early {}), lateness p50 {:.2} p99 {:.2} max {:.2} ms, Redis CPU {:.1} µs/job",
                    r.delivered, r.repeated, r.early, r.p50, r.p99, r.max, r.cpu_us
                );
                by_path[i].push(r);
            }
        }
        println!(
            "\n| {n} jobs due over {} s, median of {rounds} rounds | Rust worker | webhooks | stream outlet |",
            SPREAD_MS / 1000
        );
        println!("|---|---:|---:|---:|");
        let row = |what: &str, f: fn(&Round) -> f64, digits: usize| {
            let [w, h, s] = [0, 1, 2].map(|i| median_of(&by_path[i], f));
            println!("| {what} | {w:.digits$} | {h:.digits$} | {s:.digits$} |");
            [w, h, s]
        };
        let fewest = |i: usize| by_path[i].iter().map(|r| r.delivered).min().unwrap_or(0);
        println!(
            "| delivered (fewest of the rounds) | {} | {} | {} |",
            fewest(0),
            fewest(1),
            fewest(2)
        );
        row("repeated", |r| r.repeated as f64, 0);
        row("early", |r| r.early as f64, 0);
        row("lateness p50 ms", |r| r.p50, 2);
        let p99 = row("lateness p99 ms", |r| r.p99, 2);
        row("lateness max ms", |r| r.max, 2);
        let cpu = row("Redis CPU µs per delivered job", |r| r.cpu_us, 1);
        println!(
            "\nwebhooks p99 / worker p99 = {:.2} (target <= 2); stream p99 / worker p99 = {:.2} (target <= 1); Redis CPU per job: webhooks {:.2}x, stream {:.2}x the worker's",
            p99[1] / p99[0],
            p99[2] / p99[0],
            cpu[1] / cpu[0],
            cpu[2] / cpu[0]
        );

        println!("\n## every tenth response 500 (backoff {BACKOFF_MS} ms doubling, no jitter)");
        let mut margins = Vec::new();
        for round in 0..rounds {
            let (delivered, failed, checked, early, margin, p99) = failures(&url, round).await;
            println!(
                "round {round}: delivered {delivered} of {n}, 500s answered {failed}, retries checked {checked}, earlier than their backoff {early}, least margin {margin:.2} ms, lateness p99 of the 200s {p99:.1} ms"
            );
            margins.push(margin);
        }

        let (jobs, limit) = (env("RATE_JOBS", 5_000), env("RATE", 500));
        println!("\n## rate={limit}/s, {jobs} jobs due at once");
        let (mut whole, mut steady, mut most) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (w, s, m) = rate(&url, round).await;
            println!(
                "round {round}: {w:.1}/s over the whole run, {s:.1}/s past the first second, at most {m} in any 1 s"
            );
            whole.push(w);
            steady.push(s);
            most.push(m as f64);
        }
        let (w, s, m) = (median(&mut whole), median(&mut steady), median(&mut most));
        println!(
            "median: {w:.1}/s whole ({:+.1} %), {s:.1}/s past the burst ({:+.1} %), at most {m:.0} in 1 s",
            (w / limit as f64 - 1.0) * 100.0,
            (s / limit as f64 - 1.0) * 100.0
        );
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("\nload average after: {}", load.trim());
    });
}
