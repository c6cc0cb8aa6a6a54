//! The command line: its commands and arguments (clap), and the seeds of a cluster's URL.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use tickless_durable::ConnectOptions;

/// An operator's look at tickless-durable queues on Redis.
#[derive(Debug, Parser)]
#[command(name = "tickless-durable", version)]
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
    /// end, so a password may hold one.
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
