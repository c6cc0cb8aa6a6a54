//! `tickless-durable`: an operator's look at durable queues.
//!
//! ```text
//! tickless-durable queues [URL]                     the queues on a server, one name a line
//! tickless-durable inspect [URL] <QUEUE>            counts, leader, lag, recurring schedules, dead jobs
//! tickless-durable job [URL] <QUEUE> <ID>           one job's state, due time, attempts, error
//! tickless-durable retry-dead [URL] <QUEUE> <ID>    a dead job gets a new set of attempts (--all: every one)
//! tickless-durable repair [URL] <QUEUE>             jobs put back where their records say
//! tickless-durable serve [URL] [QUEUE]...           the web dashboard and /metrics
//! ```
//!
//! `--help` on the binary and on each command says the rest. `<URL>` is one server's URL,
//! or a Redis Cluster's seed URLs separated by commas; left out, it is `REDIS_URL`'s (as
//! `redis-cli` reads its environment): a command's first argument is its URL when it holds
//! `://`. `--ca`, `--cert` and `--key` (or `TICKLESS_REDIS_CA`, `_CERT`, `_KEY`) name PEM
//! files for TLS. Exit codes: 0 done, 1 an error (Redis unreachable, a permission, a bad
//! reply), 2 a usage error, 3 no such queue (`inspect`, `job`, `retry-dead`, `repair`) or
//! job (`job`, `retry-dead`).
//!
//! (The leader, worker and scheduler processes the crash tests kill are the crash tests'
//! own: `durable/tests/durable_crash/roles.rs`.)

#[cfg(feature = "api")]
mod api;
mod args;
#[cfg(feature = "webhooks")]
mod hook;
#[cfg(feature = "dashboard")]
mod stop;

use args::{options, with_env_url, Cli, Command, Redis, Serve};
use clap::{CommandFactory, Parser};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickless_durable::{Error, Queue, Recurrence, StreamOutlet};

/// mimalloc, not glibc's malloc: `serve` allocates and frees many small blocks per HTTP
/// request (hyper's and axum's, the JSON); under load glibc's allocator took 15 % of its
/// CPU samples, mimalloc 8 % (BENCHMARKS.md, "The HTTP API (issue 38)").
#[cfg(feature = "api")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code of a command that found no such queue or job.
const NOT_FOUND: u8 = 3;

/// What a command ends with, apart from success.
enum Failure {
    /// An error: exit 1.
    Error(String),
    /// The named queue or job is not there: exit 3.
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
    let env_url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty());
    let args = match with_env_url(std::env::args_os().collect(), env_url.as_deref()) {
        Ok(args) => args,
        Err(message) => Cli::command()
            .error(clap::error::ErrorKind::MissingRequiredArgument, message)
            .exit(),
    };
    // Usage errors and --help exit here (2 and 0).
    let cli = Cli::parse_from(args);
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

async fn connect(redis: &Redis, name: &str) -> Result<Queue, String> {
    options(redis)?
        .connect(name)
        .await
        .map_err(|e| e.to_string())
}

/// How many of a server's queues "no such queue" names.
const SHOWN_NAMES: usize = 20;

/// "No such queue", with the queues the server has (when they can be listed).
async fn no_queue(redis: &Redis, queue: &Queue) -> Failure {
    let mut message = format!(
        "no queue {:?} on {}: nothing was ever scheduled on it",
        queue.name(),
        queue.url()
    );
    let names = match options(redis) {
        Ok(options) => options.queue_names().await.map_err(|err| err.to_string()),
        Err(err) => Err(err),
    };
    match names {
        Ok(names) if names.is_empty() => message += "\nthe server has no queue yet",
        Ok(names) => {
            let shown: Vec<String> = names
                .iter()
                .take(SHOWN_NAMES)
                .map(|name| format!("{name:?}"))
                .collect();
            message += &format!("\nthe queues there: {}", shown.join(", "));
            if names.len() > SHOWN_NAMES {
                message += &format!(
                    " and {} more (`tickless-durable queues` lists them all)",
                    names.len() - SHOWN_NAMES
                );
            }
        }
        Err(err) => message += &format!("\n(the queues there could not be listed: {err})"),
    }
    Failure::NotFound(message)
}

/// The queue named, if it is on the server.
async fn existing(redis: &Redis, name: &str) -> Result<Queue, Failure> {
    let queue = connect(redis, name).await?;
    if !queue.exists().await? {
        return Err(no_queue(redis, &queue).await);
    }
    Ok(queue)
}

async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Serve(serve_args) => serve(serve_args).await.map_err(Failure::Error),
        Command::Queues { redis } => {
            let names = options(&redis)?.queue_names().await?;
            if names.is_empty() {
                eprintln!(
                    "no queue on this server yet: a queue is there once a job is scheduled on it"
                );
            }
            for name in names {
                println!("{name}");
            }
            Ok(())
        }
        Command::Inspect { redis, queue } => Ok(inspect(&existing(&redis, &queue).await?).await?),
        Command::Job { redis, queue, id } => {
            let queue = existing(&redis, &queue).await?;
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
            let queue = existing(&redis, &queue).await?;
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
        Command::StreamOutlet {
            redis,
            queue,
            on,
            stream,
            max_len,
            off,
        } => {
            let queue = connect(&redis, &queue).await?;
            let key = stream.or_else(|| on.then(|| queue.default_stream_key()));
            if let Some(key) = key {
                let outlet = StreamOutlet::new(key).with_max_len(max_len);
                queue.set_stream_outlet(Some(&outlet)).await?;
            } else if off {
                queue.set_stream_outlet(None).await?;
            }
            match queue.stream_outlet().await? {
                Some(outlet) => println!(
                    "stream outlet {} (MAXLEN ~ {}): due jobs go to the stream",
                    outlet.key(),
                    outlet.max_len()
                ),
                None => println!("no stream outlet: due jobs go to the ready list"),
            }
            Ok(())
        }
        Command::Repair { redis, queue } => {
            let fixed = existing(&redis, &queue).await?.repair().await?;
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
    // Only a leader moves due jobs to the ready list: without one, none is delivered.
    let (buckets, _) = queue.due_buckets().await?;
    let due: u64 = buckets
        .iter()
        .filter(|b| b.start <= stats.now)
        .map(|b| b.jobs)
        .sum();
    if stats.leader.is_none() && due > 0 {
        let are = if due == 1 { "job is" } else { "jobs are" };
        println!(
            "  WARNING: no leader: {due} {are} due, and none is delivered until a leader runs \
             (Queue::leader, in any process connected to this queue)"
        );
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
    if let Some(outlet) = queue.stream_outlet().await? {
        println!(
            "  stream outlet {} (MAXLEN ~ {}): {} jobs streamed",
            outlet.key(),
            outlet.max_len(),
            queue.counters().await?.streamed
        );
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
    // Before anything starts that a signal should stop cleanly.
    let stop = stop::on_signal()?;
    let (dashboard, shown) = if args.queues.is_empty() && args::is_cluster(&args.redis.url) {
        return Err("on a cluster, name the queues to show (each node has its own keys)".into());
    } else if args.queues.is_empty() {
        // A first look now, so that a wrong URL or a missing `+scan` fails here, not on
        // every page; the dashboard looks again for queues created later.
        let options = options(&args.redis)?;
        let names = options.queue_names().await.map_err(|e| e.to_string())?;
        let shown = format!("{} queue(s), and of those created later,", names.len());
        (Dashboard::new([]).every_queue(options), shown)
    } else {
        let mut queues = Vec::new();
        for name in &args.queues {
            queues.push(connect(&args.redis, name).await?);
        }
        (
            Dashboard::new(queues),
            format!("{} queue(s)", args.queues.len()),
        )
    };
    #[cfg(feature = "api")]
    let (api, api_shown, leaders) = api::router(&args).await?;
    #[cfg(feature = "api")]
    let dashboard = api::show_tokens(dashboard, &api);
    #[cfg(feature = "api")]
    let tls = api::tls(&args)?;
    #[cfg(feature = "webhooks")]
    let hooks = hook::start(&args).await?;
    #[cfg(feature = "webhooks")]
    let dashboard = hook::show(dashboard, &hooks);
    let token = args.token.clone().unwrap_or_default();
    let actions = !args.read_only && !token.is_empty();
    let app = dashboard
        .action_token(token)
        .read_only(args.read_only)
        .public_read(args.public_read)
        .secure_cookie(args.secure_cookie)
        .router();
    // The figures' layers wrap the dashboard's routes (`/metrics` among them) before the
    // API's routes join them, which they would otherwise wrap too.
    #[cfg(feature = "api")]
    let app = api::metrics(app, &api);
    #[cfg(feature = "webhooks")]
    let app = hook::metrics(app, &hooks);
    #[cfg(feature = "api")]
    let app = api::mount(app, api);
    #[cfg(not(feature = "webhooks"))]
    if args.webhooks_file.is_some() {
        return Err("--webhooks-file needs the `webhooks` feature".into());
    }
    #[cfg(not(feature = "api"))]
    let tls: Option<()> = match args.tls_cert {
        Some(_) => return Err("--tls-cert needs the `api` feature".into()),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let addr = &args.addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // The tests read this line for the port (--addr 127.0.0.1:0).
    println!(
        "dashboard of {shown} on {scheme}://{local}/ ({})",
        if actions {
            "actions need the token"
        } else {
            "read-only"
        }
    );
    #[cfg(feature = "api")]
    // A reader of the first line only may have closed the pipe: not a reason to stop.
    let _ = std::io::Write::write_fmt(
        &mut std::io::stdout(),
        format_args!("{api_shown} on {scheme}://{local}/v1/\n"),
    );
    #[cfg(feature = "webhooks")]
    if let Some((_, shown)) = &hooks {
        let _ = std::io::Write::write_fmt(&mut std::io::stdout(), format_args!("{shown}\n"));
    }
    type Served = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>>>>;
    #[cfg(feature = "api")]
    let mut http: Served = match tls {
        Some(tls) => Box::pin(api::serve_tls(listener, app, tls, stop.clone())),
        None => Box::pin(plain(listener, app, stop.clone())),
    };
    #[cfg(not(feature = "api"))]
    let mut http: Served = Box::pin(plain(listener, app, stop.clone()));
    // The server ends by itself only on an error: once it ends because of the signal
    // (its graceful end), the signal is there to be seen first.
    let signal = tokio::select! {
        biased;
        signal = stop::signalled(stop) => signal,
        ended = &mut http => return ended,
    };
    // Stopping (module `stop`): the server, the leaders and the dispatchers side by side.
    let grace = Duration::from_secs(args.stop_grace);
    let deadline = tokio::time::Instant::now() + grace;
    let served = async {
        match tokio::time::timeout_at(deadline, http).await {
            Ok(ended) => ended,
            Err(_) => Err(format!("connections still open after {}s", grace.as_secs())),
        }
    };
    #[cfg(feature = "api")]
    let led = async {
        // Every leader steps down at once, not one after another.
        let mut stepping = tokio::task::JoinSet::new();
        for leader in leaders {
            stepping.spawn(tokio::time::timeout_at(deadline, leader.stop()));
        }
        let mut failed = Vec::new();
        while let Some(stepped) = stepping.join_next().await {
            if let Ok(Ok(Err(err))) = stepped {
                failed.push(err.to_string());
            }
        }
        failed
    };
    #[cfg(not(feature = "api"))]
    let led = async { Vec::<String>::new() };
    #[cfg(feature = "webhooks")]
    let dispatched = {
        // Claims end here, before the line below says so.
        let stopping = hooks.map(|(dispatchers, _)| dispatchers.stop(grace));
        async {
            match stopping {
                Some(stopping) => stopping.await,
                None => 0,
            }
        }
    };
    #[cfg(not(feature = "webhooks"))]
    let dispatched = async { 0 };
    eprintln!("stopping on {signal}: {}s of grace", grace.as_secs());
    let (served, failed, left) = tokio::join!(served, led, dispatched);
    for err in failed {
        eprintln!("a leader's last round failed: {err}");
    }
    if left > 0 {
        eprintln!(
            "{left} webhook deliveries still in flight after {}s: delivered again at \
             their lease end",
            grace.as_secs()
        );
    }
    if let Err(err) = served {
        eprintln!("{err}");
    }
    eprintln!("stopped");
    Ok(())
}

/// Serves `app` over plain HTTP until `stop`, then ends each connection after its
/// request in flight.
#[cfg(feature = "dashboard")]
async fn plain(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: tokio::sync::watch::Receiver<Option<&'static str>>,
) -> Result<(), String> {
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            stop::signalled(stop).await;
        })
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
