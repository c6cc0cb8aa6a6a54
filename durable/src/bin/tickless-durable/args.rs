//! The command line: its commands and arguments (clap), `REDIS_URL` put where a command
//! gives no URL, and the seeds of a cluster's URL.

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use tickless_durable::ConnectOptions;

/// An operator's look at tickless-durable queues on Redis.
#[derive(Debug, Parser)]
#[command(
    name = "tickless-durable",
    version,
    after_help = "Each command's <URL> may be left out when REDIS_URL is set (as redis-cli reads it)."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the queues are.
#[derive(Debug, Args)]
pub(crate) struct Redis {
    /// One server's URL (`redis://`, `rediss://` for TLS), or a Redis Cluster's seed URLs
    /// separated by commas (`redis://10.0.0.1:6379,redis://10.0.0.2:6379`; one seed and a
    /// comma for a single one). A comma separates seeds only before a scheme or at the
    /// end, so a password may hold one. May be left out when REDIS_URL is set: the first
    /// argument is the URL only if it holds `://` (so a queue name holding `://` needs the
    /// URL given before it).
    #[arg(env = "REDIS_URL", hide_env_values = true)]
    pub(crate) url: String,
    /// A PEM file of the CA to trust for `rediss://` URLs (else the system's roots).
    #[arg(long, env = "TICKLESS_REDIS_CA", value_name = "FILE")]
    pub(crate) ca: Option<PathBuf>,
    /// A PEM file of the client certificate to present to a server that asks for one
    /// (mutual TLS, Redis's `tls-auth-clients yes`); needs `--key`.
    #[arg(
        long,
        env = "TICKLESS_REDIS_CERT",
        value_name = "FILE",
        requires = "key"
    )]
    pub(crate) cert: Option<PathBuf>,
    /// A PEM file of the client certificate's private key; needs `--cert`.
    #[arg(
        long,
        env = "TICKLESS_REDIS_KEY",
        value_name = "FILE",
        requires = "cert"
    )]
    pub(crate) key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The queues on one server, a name a line: every queue a job or recurring schedule was
    /// ever set on, or a leader ran for (a `SCAN`: the Redis user needs `+scan`).
    #[command(override_usage = "tickless-durable queues [OPTIONS] [URL]")]
    Queues {
        #[command(flatten)]
        redis: Redis,
    },
    /// Counts by state, the leader (a warning when jobs are due and none runs), promotion
    /// lag, recurring schedules, the latest dead jobs (exit 3 if no such queue).
    #[command(override_usage = "tickless-durable inspect [OPTIONS] [URL] <QUEUE>")]
    Inspect {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
    },
    /// One job's state, due time, attempts, last error and payload (exit 3 if none).
    #[command(override_usage = "tickless-durable job [OPTIONS] [URL] <QUEUE> <ID>")]
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
    #[command(override_usage = "tickless-durable retry-dead [OPTIONS] [URL] <QUEUE> <ID|--all>")]
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
    #[command(override_usage = "tickless-durable repair [OPTIONS] [URL] <QUEUE>")]
    Repair {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
    },
    /// Shows a queue's stream outlet; with `--on` or `--stream`, sets it: due jobs are then
    /// appended to that Redis Stream (fields id, delivery, attempt, due, payload) instead
    /// of the ready list, for consumer groups in any language; `--off` removes it. The
    /// setting is kept in Redis: every leader, scheduler and worker of the queue applies it.
    #[command(override_usage = "tickless-durable stream-outlet [OPTIONS] [URL] <QUEUE>")]
    StreamOutlet {
        #[command(flatten)]
        redis: Redis,
        /// The queue's name.
        queue: String,
        /// Sets the outlet into the queue's default stream, `tickless:{<queue>}:stream`.
        #[arg(long, conflicts_with_all = ["stream", "off"])]
        on: bool,
        /// Sets the outlet into this stream; its hash tag must be the queue's name
        /// (`tickless:{<queue>}:stream:<name>`, `out:{<queue>}`), so it lives in the
        /// queue's hash slot.
        #[arg(long, value_name = "KEY", conflicts_with = "off")]
        stream: Option<String>,
        /// The bound each XADD trims the stream to (`MAXLEN ~`): an entry trimmed is
        /// lost, acknowledged by its consumer group or not.
        #[arg(long, default_value_t = 100_000)]
        max_len: u64,
        /// Removes the outlet: due jobs go to the ready list again.
        #[arg(long)]
        off: bool,
    },
    /// Serves the web dashboard and Prometheus `/metrics` (cargo feature `dashboard`).
    #[command(override_usage = "tickless-durable serve [OPTIONS] [URL] [QUEUES]...")]
    Serve(Serve),
}

#[derive(Debug, Args)]
pub(crate) struct Serve {
    #[command(flatten)]
    pub(crate) redis: Redis,
    /// The queues to show; every queue on the server when none is named, those created
    /// after the dashboard started too (on a cluster, name them).
    pub(crate) queues: Vec<String>,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(
        long,
        env = "TICKLESS_DASHBOARD_ADDR",
        default_value = "127.0.0.1:8025"
    )]
    pub(crate) addr: String,
    /// The access token that actions (cancel, run now, retry) and reading payloads and job
    /// errors need. Prefer the environment variable: a flag's value shows in the process
    /// list. Without a token the dashboard is read-only and shows no payloads.
    #[arg(long, env = "TICKLESS_DASHBOARD_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// No actions, even with a token.
    #[arg(long, env = "TICKLESS_DASHBOARD_READ_ONLY", value_parser = clap::builder::FalseyValueParser::new())]
    pub(crate) read_only: bool,
    /// Payloads and job errors shown to anyone who can reach the dashboard, not only to
    /// those with the token.
    #[arg(long, env = "TICKLESS_DASHBOARD_PUBLIC_READ", value_parser = clap::builder::FalseyValueParser::new())]
    pub(crate) public_read: bool,
    /// The login cookie marked `Secure`: set it when browsers reach the dashboard over
    /// HTTPS (a proxy's TLS).
    #[arg(long, env = "TICKLESS_DASHBOARD_SECURE_COOKIE", value_parser = clap::builder::FalseyValueParser::new())]
    pub(crate) secure_cookie: bool,
    /// The HTTP API's tokens (cargo feature `api`; the API is under /v1/): a file of one
    /// token a line, `<name> <scopes> <queues> <secret>`, scopes comma-separated from
    /// schedule, work, read, admin; queues comma-separated or `*`; a secret of at least 16
    /// bytes; `#` starts a comment line. Or the same lines in TICKLESS_API_TOKENS (lines
    /// separated by newlines or `;`), never on the command line. Without tokens the API
    /// refuses every request.
    #[arg(long, env = "TICKLESS_API_TOKENS_FILE", value_name = "FILE")]
    pub(crate) api_tokens_file: Option<std::path::PathBuf>,
    /// Also runs a fenced leader for each named queue (cargo feature `api`), so that jobs
    /// scheduled through the API come due with no other process: several `serve`s may
    /// lead the same queues, one at a time is elected.
    #[arg(long, env = "TICKLESS_SERVE_LEAD", value_parser = clap::builder::FalseyValueParser::new())]
    pub(crate) lead: bool,
    /// Serves HTTPS (cargo feature `api`): the certificate chain, PEM (with
    /// --tls-key). Without it, plain HTTP: terminate TLS in a proxy in front.
    #[arg(
        long,
        env = "TICKLESS_SERVE_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "TICKLESS_SERVE_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// Push delivery (cargo feature `webhooks`): a file naming webhook targets (URL,
    /// secrets, limits), which queue delivers to which, and the hosts, schemes and
    /// networks requests may reach; see the crate's README. The queues it names are
    /// dispatched by this process.
    #[arg(long, env = "TICKLESS_WEBHOOKS_FILE", value_name = "FILE")]
    pub(crate) webhooks_file: Option<std::path::PathBuf>,
    /// On SIGTERM or Ctrl-C, the seconds that requests, webhook deliveries in flight and
    /// leaders stepping down have to end before the process exits (what is left then
    /// is dropped, as by a crash, and delivered again at its lease end). Under
    /// Kubernetes' default 30 s before SIGKILL.
    #[arg(
        long,
        env = "TICKLESS_SERVE_STOP_GRACE",
        value_name = "SECS",
        default_value_t = 25
    )]
    pub(crate) stop_grace: u64,
}

/// The command line with `env_url` (REDIS_URL) put where the command's URL goes when it
/// gives none: its first argument that is not an option is its URL only if it holds
/// `://`, so `inspect orders` reads as `inspect $REDIS_URL orders`. An error when that
/// argument is not a URL and there is no `env_url` (clap would take it for the URL).
/// Which options take a value is clap's own knowledge of the command, so a new option
/// needs nothing here.
pub(crate) fn with_env_url(
    mut args: Vec<OsString>,
    env_url: Option<&str>,
) -> Result<Vec<OsString>, String> {
    let cli = Cli::command();
    // The program's own options (--help, --version) take no value.
    let Some(at) = args
        .iter()
        .skip(1)
        .position(|arg| !arg.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return Ok(args);
    };
    // `help`, or a word that is no command: clap's to answer.
    let Some(command) = cli.find_subcommand(args[at].to_string_lossy().as_ref()) else {
        return Ok(args);
    };
    let takes_value = |option: &str| {
        command.get_arguments().any(|arg| {
            !arg.is_positional()
                && arg.get_action().takes_values()
                && (arg
                    .get_long()
                    .is_some_and(|long| option == format!("--{long}"))
                    || arg
                        .get_short()
                        .is_some_and(|short| option == format!("-{short}")))
        })
    };
    let mut i = at + 1;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        i += if !arg.contains('=') && takes_value(&arg) {
            2
        } else {
            1
        };
    }
    let first = args.get(i).map(|arg| arg.to_string_lossy().into_owned());
    match (first, env_url) {
        (Some(first), _) if first.contains("://") => {}
        (_, Some(url)) => args.insert(i.min(args.len()), url.into()),
        // Not echoed: a URL typed without its scheme may hold a password.
        (Some(_), None) => {
            return Err(
                "no Redis URL: the command's first argument holds no `://` (a URL is \
                 redis://host:6379/, or rediss:// for TLS), and REDIS_URL is not set"
                    .to_string(),
            );
        }
        (None, None) => {} // clap says the URL is missing
    }
    Ok(args)
}

/// One server, or a cluster when the URL names several seeds; the CA and client
/// certificate files if given.
pub(crate) fn options(redis: &Redis) -> Result<ConnectOptions, String> {
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
pub(crate) fn is_cluster(url: &str) -> bool {
    url.ends_with(',') || seeds(url).len() > 1
}

#[cfg(test)]
mod tests {
    use super::{is_cluster, seeds, with_env_url};

    /// `with_env_url` of a command line given as words, as words.
    fn env_url(line: &str, env: Option<&str>) -> Result<String, String> {
        let args = std::iter::once("tickless-durable")
            .chain(line.split(' '))
            .map(Into::into)
            .collect();
        let args = with_env_url(args, env)?;
        let words: Vec<String> = args[1..]
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        Ok(words.join(" "))
    }

    #[test]
    fn redis_url_goes_where_a_command_gives_no_url() {
        let env = Some("redis://h/");
        let cases = [
            ("inspect orders", "inspect redis://h/ orders"),
            ("inspect redis://x/ orders", "inspect redis://x/ orders"),
            ("job orders 42", "job redis://h/ orders 42"),
            (
                "retry-dead orders --all",
                "retry-dead redis://h/ orders --all",
            ),
            (
                "inspect --ca c.pem orders",
                "inspect --ca c.pem redis://h/ orders",
            ),
            (
                "inspect --ca=c.pem orders",
                "inspect --ca=c.pem redis://h/ orders",
            ),
            ("queues", "queues redis://h/"),
            (
                "serve --read-only --addr :0 a b",
                "serve --read-only --addr :0 redis://h/ a b",
            ),
            ("serve -- a", "serve -- redis://h/ a"),
            ("inspect --help", "inspect --help redis://h/"),
            ("help inspect", "help inspect"),
            ("--version", "--version"),
        ];
        for (line, want) in cases {
            assert_eq!(env_url(line, env).as_deref(), Ok(want), "{line}");
        }
    }

    #[test]
    fn without_redis_url_a_first_argument_that_is_no_url_is_a_usage_error() {
        assert_eq!(
            env_url("inspect redis://x/ orders", None).as_deref(),
            Ok("inspect redis://x/ orders")
        );
        assert_eq!(env_url("queues", None).as_deref(), Ok("queues"));
        let err = env_url("inspect app:s3cret@h:6379 orders", None).unwrap_err();
        assert!(err.contains("REDIS_URL is not set"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }

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
