//! `tickless-durable`: an operator's look at durable queues.
//!
//! ```text
//! tickless-durable inspect <URL> <QUEUE>          counts, leader, lag, recurring schedules, dead jobs
//! tickless-durable job <URL> <QUEUE> <ID>         one job's state, due time, attempts, error
//! tickless-durable retry-dead <URL> <QUEUE> <ID>  a dead job gets a new set of attempts (--all: every one)
//! tickless-durable repair <URL> <QUEUE>           jobs put back where their records say
//! tickless-durable serve <URL> [QUEUE]...         the web dashboard and /metrics
//! ```
//!
//! `--help` on the binary and on each command says the rest. `<URL>` is one server's URL,
//! or a Redis Cluster's seed URLs separated by commas; `--ca`, `--cert` and `--key` (or
//! `TICKLESS_REDIS_CA`, `_CERT`, `_KEY`) name PEM files for TLS. Exit codes: 0 done, 1 an error
//! (Redis unreachable, a permission, a bad reply), 2 a usage error, 3 no such job (`job`,
//! `retry-dead`).
//!
//! (The leader, worker and scheduler processes the crash tests kill are the crash tests'
//! own: `durable/tests/durable_crash/roles.rs`.)

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickless_durable::{ConnectOptions, Error, Queue, Recurrence};

/// An operator's look at tickless-durable queues on Redis.
#[derive(Debug, Parser)]
#[command(name = "tickless-durable", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the queues are.
#[derive(Debug, Args)]
struct Redis {
    /// One server's URL (`redis://`, `rediss://` for TLS), or a Redis Cluster's seed URLs
    /// separated by commas (`redis://10.0.0.1:6379,redis://10.0.0.2:6379`; one seed and a
    /// comma for a single one). A comma separates seeds only before a scheme or at the
    /// end, so a password may hold one.
    url: String,
    /// A PEM file of the CA to trust for `rediss://` URLs (else the system's roots).
    #[arg(long, env = "TICKLESS_REDIS_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// A PEM file of the client certificate to present to a server that asks for one
    /// (mutual TLS, Redis's `tls-auth-clients yes`); needs `--key`.
    #[arg(
        long,
        env = "TICKLESS_REDIS_CERT",
        value_name = "FILE",
        requires = "key"
    )]
    cert: Option<PathBuf>,
    /// A PEM file of the client certificate's private key; needs `--cert`.
    #[arg(
        long,
        env = "TICKLESS_REDIS_KEY",
        value_name = "FILE",
        requires = "cert"
    )]
    key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Counts by state, the leader, promotion lag, recurring schedules, the latest dead jobs.
    Inspect {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
    },
    /// One job's state, due time, attempts, last error and payload (exit 3 if none).
    Job {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
        /// The job's id.
        id: String,
    },
    /// Gives a dead job a new set of attempts, due now (exit 3 if no such dead job); with
    /// `--all`, every dead job, 10,000 per script call.
    RetryDead {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
        /// The dead job's id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every dead job (quarantined records stay dead).
        #[arg(long)]
        all: bool,
    },
    /// Puts jobs back where their records say, and removes entries that name no job.
    Repair {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
    },
    /// Serves the web dashboard and Prometheus `/metrics` (cargo feature `dashboard`).
    Serve(Serve),
}

#[derive(Debug, Args)]
struct Serve {
    #[command(flatten)]
    redis: Redis,
    /// The queues to show; every queue on the server when none is named (on a cluster,
    /// name them).
    queues: Vec<String>,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(
        long,
        env = "TICKLESS_DASHBOARD_ADDR",
        default_value = "127.0.0.1:8025"
    )]
    addr: String,
    /// The access token that actions (cancel, run now, retry) and reading payloads and job
    /// errors need. Prefer the environment variable: a flag's value shows in the process
    /// list. Without a token the dashboard is read-only and shows no payloads.
    #[arg(long, env = "TICKLESS_DASHBOARD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// No actions, even with a token.
    #[arg(long, env = "TICKLESS_DASHBOARD_READ_ONLY", value_parser = clap::builder::FalseyValueParser::new())]
    read_only: bool,
    /// Payloads and job errors shown to anyone who can reach the dashboard, not only to
    /// those with the token.
    #[arg(long, env = "TICKLESS_DASHBOARD_PUBLIC_READ", value_parser = clap::builder::FalseyValueParser::new())]
    public_read: bool,
    /// The login cookie marked `Secure`: set it when browsers reach the dashboard over
    /// HTTPS (a proxy's TLS).
    #[arg(long, env = "TICKLESS_DASHBOARD_SECURE_COOKIE", value_parser = clap::builder::FalseyValueParser::new())]
    secure_cookie: bool,
}

/// Exit code of a command that found no such job.
const NOT_FOUND: u8 = 3;

/// What a command ends with, apart from success.
enum Failure {
    /// An error: exit 1.
    Error(String),
    /// The named job is not there: exit 3.
    NotFound(String),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        Failure::Error(err.to_string())
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Error(message)
    }
}

fn main() -> ExitCode {
    // Usage errors and --help exit here (2 and 0).
    let cli = Cli::parse();
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
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Error(message)) => {
            eprintln!("tickless-durable: {message}");
            ExitCode::FAILURE
        }
        Err(Failure::NotFound(message)) => {
            println!("{message}");
            ExitCode::from(NOT_FOUND)
        }
    }
}

/// One server, or a cluster when the URL names several seeds; the CA and client
/// certificate files if given.
fn options(redis: &Redis) -> Result<ConnectOptions, String> {
    let mut options = if is_cluster(&redis.url) {
        ConnectOptions::cluster(seeds(&redis.url))
    } else {
        ConnectOptions::new(&redis.url)
    };
    let read = |what: &str, path: &PathBuf| {
        std::fs::read(path).map_err(|err| format!("cannot read the {what} file {path:?}: {err}"))
    };
    if let Some(path) = &redis.ca {
        options = options.tls_ca_pem(read("CA", path)?);
    }
    if let (Some(cert), Some(key)) = (&redis.cert, &redis.key) {
        options =
            options.tls_client_pem(read("client certificate", cert)?, read("client key", key)?);
    }
    Ok(options)
}

/// The seed URLs of `<URL>`: split at each comma that a scheme follows (`,redis://`,
/// `,rediss://`, `,redis+unix://`) or that ends it. A comma elsewhere is part of a URL (a
/// password may hold one), so that no piece of a password is ever taken for a URL and
/// shown in an error.
fn seeds(url: &str) -> Vec<&str> {
    let mut seeds = Vec::new();
    let mut start = 0;
    for (at, _) in url.match_indices(',') {
        let next = &url[at + 1..];
        if next.is_empty()
            || next.starts_with("redis://")
            || next.starts_with("rediss://")
            || next.starts_with("redis+unix://")
        {
            seeds.push(&url[start..at]);
            start = at + 1;
        }
    }
    seeds.push(&url[start..]);
    seeds.retain(|seed| !seed.is_empty());
    seeds
}

/// Whether `<URL>` names a cluster: several seeds, or one and a comma.
fn is_cluster(url: &str) -> bool {
    url.ends_with(',') || seeds(url).len() > 1
}

async fn connect(redis: &Redis, name: &str) -> Result<Queue, String> {
    options(redis)?
        .connect(name)
        .await
        .map_err(|e| e.to_string())
}

async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Serve(serve_args) => serve(serve_args).await.map_err(Failure::Error),
        Command::Inspect { redis, queue } => Ok(inspect(&connect(&redis, &queue).await?).await?),
        Command::Job { redis, queue, id } => {
            let queue = connect(&redis, &queue).await?;
            let now = queue.now().await?;
            let Some(info) = queue.job(&id).await? else {
                return Err(Failure::NotFound(format!(
                    "no job {id:?} in queue {:?}",
                    queue.name()
                )));
            };
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
            Ok(())
        }
        Command::RetryDead {
            redis,
            queue,
            id,
            all,
        } => {
            let queue = connect(&redis, &queue).await?;
            let Some(id) = id.filter(|_| !all) else {
                println!("retried {}", queue.retry_all_dead().await?);
                return Ok(());
            };
            if queue.retry_dead(&id).await? {
                println!("retried");
                Ok(())
            } else {
                Err(Failure::NotFound(format!(
                    "no dead job {id:?} in queue {:?}",
                    queue.name()
                )))
            }
        }
        Command::Repair { redis, queue } => {
            let fixed = connect(&redis, &queue).await?.repair().await?;
            println!(
                "{} put back, {} entries naming no job removed",
                fixed.placed, fixed.removed
            );
            Ok(())
        }
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
    let windows = queue.cold_windows().await?;
    if let Some(first) = windows.first() {
        let bytes: u64 = windows.iter().map(|w| w.bytes).sum();
        println!(
            "  cold {} jobs in {} windows ({bytes} bytes in the store), the next starting {}",
            stats.cold,
            windows.len(),
            ago(stats.now, first.start)
        );
    }
    for w in &windows {
        println!(
            "  cold window starting {}: {} jobs, {} segments, {} bytes",
            ago(stats.now, w.start),
            w.jobs,
            w.segments,
            w.bytes
        );
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
    for info in queue.dead(0, 10).await? {
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
async fn serve(args: Serve) -> Result<(), String> {
    use tickless_durable::dashboard::Dashboard;
    let names = if args.queues.is_empty() && is_cluster(&args.redis.url) {
        return Err("on a cluster, name the queues to show (each node has its own keys)".into());
    } else if args.queues.is_empty() {
        options(&args.redis)?
            .queue_names()
            .await
            .map_err(|e| e.to_string())?
    } else {
        args.queues.clone()
    };
    if names.is_empty() {
        return Err("no queue on this server yet: name the queues to show".to_string());
    }
    let mut queues = Vec::new();
    for name in &names {
        queues.push(connect(&args.redis, name).await?);
    }
    let token = args.token.unwrap_or_default();
    let actions = !args.read_only && !token.is_empty();
    let app = Dashboard::new(queues)
        .action_token(token)
        .read_only(args.read_only)
        .public_read(args.public_read)
        .secure_cookie(args.secure_cookie)
        .router();
    let addr = &args.addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // The tests read this line for the port (--addr 127.0.0.1:0).
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
async fn serve(_: Serve) -> Result<(), String> {
    Err(
        "serve needs tickless-durable built with the `dashboard` feature \
         (cargo install tickless-durable --features dashboard)"
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::{is_cluster, seeds};

    #[test]
    fn seeds_split_only_at_commas_before_a_scheme_or_at_the_end() {
        let cases: [(&str, &[&str], bool); 6] = [
            ("redis://h:1/", &["redis://h:1/"], false),
            ("redis://h:1/,", &["redis://h:1/"], true),
            (
                "redis://a:1,redis://b:2",
                &["redis://a:1", "redis://b:2"],
                true,
            ),
            (
                "rediss://u:p,w@a:1,rediss://u:p,w@b:2,",
                &["rediss://u:p,w@a:1", "rediss://u:p,w@b:2"],
                true,
            ),
            ("redis://:p,w@h:1/", &["redis://:p,w@h:1/"], false),
            ("redis://:p,redis@h:1/", &["redis://:p,redis@h:1/"], false),
        ];
        for (url, want, cluster) in cases {
            assert_eq!(seeds(url), want, "{url}");
            assert_eq!(is_cluster(url), cluster, "{url}");
        }
    }
}
