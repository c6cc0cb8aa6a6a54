//! `tickless-durable`: an operator's look at a durable queue.
//!
//! ```text
//! tickless-durable inspect <url> <queue>             counts, leader, lag, recurring schedules, dead jobs
//! tickless-durable job <url> <queue> <id>            one job's state, due time, attempts, error
//! tickless-durable retry-dead <url> <queue> <id>     a dead job gets a new set of attempts
//! tickless-durable repair <url> <queue>              jobs put back where their records say
//! tickless-durable serve <url> [queue...]            the web dashboard and /metrics
//! ```
//!
//! `<url>` is one server's URL, or a Redis Cluster's seed URLs separated by commas
//! (`redis://10.0.0.1:6379,redis://10.0.0.2:6379`; one seed and a comma for a single
//! one). `TICKLESS_REDIS_CA` names a PEM file of the CA to trust for `rediss://` URLs.
//!
//! `serve` (cargo feature `dashboard`) shows the named queues, or every queue on the
//! server when none is named. It listens on `TICKLESS_DASHBOARD_ADDR` (default
//! `127.0.0.1:8025`); actions (cancel, run now, retry) need the access token in
//! `TICKLESS_DASHBOARD_TOKEN` (an environment variable, so that no other user reads it
//! in the process list); without it, or with `TICKLESS_DASHBOARD_READ_ONLY=1`, the
//! dashboard is read-only.
//!
//! (The leader, worker and scheduler processes the crash tests kill are the crash tests'
//! own: `tests/durable_crash/roles.rs`.)

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickless::durable::{ConnectOptions, Error, Queue, Recurrence};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tickless-durable: cannot start a runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tickless-durable: {message}");
            ExitCode::FAILURE
        }
    }
}

/// One server, or a cluster when `url` holds commas; a CA from `TICKLESS_REDIS_CA`.
async fn connect(url: &str, name: &str) -> Result<Queue, String> {
    let mut options = if url.contains(',') {
        ConnectOptions::cluster(url.split(',').filter(|seed| !seed.is_empty()))
    } else {
        ConnectOptions::new(url)
    };
    if let Some(path) = std::env::var_os("TICKLESS_REDIS_CA") {
        let pem = std::fs::read(&path)
            .map_err(|err| format!("cannot read TICKLESS_REDIS_CA {path:?}: {err}"))?;
        options = options.tls_ca_pem(pem);
    }
    options.connect(name).await.map_err(|e| e.to_string())
}

const USAGE: &str = "usage: tickless-durable (inspect|job|retry-dead|repair) <url> <queue> ... \
                     | tickless-durable serve <url> [queue...]";

async fn run(args: &[String]) -> Result<(), String> {
    if let (Some("serve"), Some(url)) = (args.first().map(String::as_str), args.get(1)) {
        return serve(url, &args[2..]).await;
    }
    let (Some(command), Some(url), Some(name)) = (args.first(), args.get(1), args.get(2)) else {
        return Err(USAGE.to_string());
    };
    let queue = connect(url, name).await?;
    match command.as_str() {
        "inspect" => inspect(&queue).await.map_err(|e| e.to_string()),
        "job" => {
            let id = args.get(3).ok_or("job needs an id")?;
            let now = queue.now().await.map_err(|e| e.to_string())?;
            match queue.job(id).await.map_err(|e| e.to_string())? {
                Some(info) => {
                    println!(
                        "job {:?}: {:?}, due {}",
                        info.id,
                        info.state,
                        ago(now, info.due)
                    );
                    println!("  attempts {} of {}", info.attempts, info.max_attempts);
                    if let Some(ends) = info.lease_ends {
                        println!("  lease ends {}", ago(now, ends));
                    }
                    if let Some(error) = &info.last_error {
                        println!("  last error: {error}");
                    }
                    let shown: String = String::from_utf8_lossy(&info.payload)
                        .chars()
                        .take(200)
                        .collect();
                    println!("  payload ({} bytes): {shown:?}", info.payload.len());
                }
                None => println!("no job {id:?} in queue {name:?}"),
            }
            Ok(())
        }
        "retry-dead" => {
            let id = args.get(3).ok_or("retry-dead needs an id")?;
            let retried = queue.retry_dead(id).await.map_err(|e| e.to_string())?;
            println!(
                "{}",
                if retried {
                    "retried"
                } else {
                    "no such dead job"
                }
            );
            Ok(())
        }
        "repair" => {
            let fixed = queue.repair().await.map_err(|e| e.to_string())?;
            println!(
                "{} put back, {} entries naming no job removed",
                fixed.placed, fixed.removed
            );
            Ok(())
        }
        other => Err(format!("unknown command {other:?}; {USAGE}")),
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ago(now: SystemTime, t: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {ahead:.3?}"),
        Err(past) => format!("{:.3?} ago", past.duration()),
    }
}

async fn inspect(queue: &Queue) -> Result<(), Error> {
    let stats = queue.stats().await?;
    println!("queue {:?} at {}", queue.name(), queue.url());
    println!(
        "  scheduled {}  ready {}  in flight {}  dead {}",
        stats.scheduled, stats.ready, stats.in_flight, stats.dead
    );
    match (&stats.leader, stats.lease_ends) {
        (Some(leader), Some(ends)) => println!(
            "  leader {leader} (token {}), lease ends {}",
            stats.token,
            ago(stats.now, ends)
        ),
        _ => println!("  no leader (last token {})", stats.token),
    }
    let lag = |d: Option<Duration>| d.map_or("n/a".to_string(), |d| format!("{d:?}"));
    println!(
        "  promoted {} by the leader, lag p50 {} p99 {}",
        stats.promoted,
        lag(stats.promotion_lag_p50),
        lag(stats.promotion_lag_p99)
    );
    if stats.manual_clock {
        println!("  manual clock at {} ms", ms(stats.now));
    }
    for s in queue.schedules().await? {
        let every = match &s.recurrence {
            Recurrence::Every(period) => format!("every {period:?}"),
            Recurrence::Cron { expression, zone } => format!("cron {expression:?} in {zone}"),
            other => format!("{other:?}"),
        };
        let next = s
            .next
            .map_or("none known yet".to_string(), |t| ago(stats.now, t));
        println!(
            "  recurring {:?}: {every}, catch-up {:?}, next {next}",
            s.id, s.catch_up
        );
    }
    for info in queue.dead(10).await? {
        println!(
            "  dead {:?} after {} attempts: {}",
            info.id,
            info.attempts,
            info.last_error.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

#[cfg(feature = "dashboard")]
async fn serve(url: &str, names: &[String]) -> Result<(), String> {
    use tickless::durable::dashboard::Dashboard;
    let names = if names.is_empty() && url.contains(',') {
        return Err("on a cluster, name the queues to show (each node has its own keys)".into());
    } else if names.is_empty() {
        tickless::durable::queue_names(url)
            .await
            .map_err(|e| e.to_string())?
    } else {
        names.to_vec()
    };
    if names.is_empty() {
        return Err("no queue on this server yet: name the queues to show".to_string());
    }
    let mut queues = Vec::new();
    for name in &names {
        queues.push(connect(url, name).await?);
    }
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let addr = env("TICKLESS_DASHBOARD_ADDR").unwrap_or_else(|| "127.0.0.1:8025".to_string());
    let read_only = env("TICKLESS_DASHBOARD_READ_ONLY").is_some_and(|v| v != "0");
    let token = env("TICKLESS_DASHBOARD_TOKEN").unwrap_or_default();
    let actions = !read_only && !token.is_empty();
    let app = Dashboard::new(queues)
        .action_token(token)
        .read_only(read_only)
        .router();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // The tests read this line for the port (TICKLESS_DASHBOARD_ADDR=127.0.0.1:0).
    println!(
        "dashboard of {} queue(s) on http://{local}/ ({})",
        names.len(),
        if actions {
            "actions need the token"
        } else {
            "read-only"
        }
    );
    axum::serve(listener, app)
        .await
        .map_err(|e| format!("the server stopped: {e}"))
}

#[cfg(not(feature = "dashboard"))]
async fn serve(_: &str, _: &[String]) -> Result<(), String> {
    Err("serve needs tickless built with the `dashboard` feature".to_string())
}
