//! How a queue reaches Redis: [`ConnectOptions`] (one server or a cluster, TLS, `WAIT`),
//! which opens a queue's [`Rdb`]: the shared connection every call of a queue uses but
//! the schedules that `WAIT` (they have one of their own: a `WAIT` holds up its
//! connection), and what makes the dedicated connections of a leader's subscription and
//! a worker's blocking wait.
//!
//! One server: one multiplexed connection (the `redis` crate's connection manager), which
//! reconnects when a call finds it broken (see `single.rs`). A cluster: the `redis`
//! crate's async cluster connection, which follows `MOVED` and `ASK` and refreshes its map
//! of slots. The dedicated connections are made in `nodes.rs`.

use super::link::{check_queue_name, Rdb};
use super::nodes::Nodes;
use super::single::Single;
use super::tls::{self, ClientIdentity};
use crate::contract::{self, queue_of_meta, Key, META_PATTERN};
use crate::error::{plain, Error};
use crate::redact::{redact, scrub};
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture};
use redis::{TlsCertificates, Value};
use std::fmt;
use std::time::Duration;

/// How to reach Redis: one server or a cluster, which CA to trust over TLS, which client
/// certificate to present, and whether writes wait for replicas.
/// [`Queue::connect`](crate::Queue::connect) is
/// `ConnectOptions::new(url).connect(name)`.
///
/// URLs are `redis://[user:password@]host[:port][/db]` or, for TLS, `rediss://...`;
/// `rediss://host/#insecure` skips checking the server's certificate (for tests only).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::ConnectOptions;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let ca = std::fs::read("/etc/redis/ca.crt").expect("the CA");
/// let queue = ConnectOptions::cluster(["rediss://app:secret@10.0.0.1:6379", "rediss://app:secret@10.0.0.2:6379"])
///     .tls_ca_pem(ca)
///     .wait_for_replicas(1, Duration::from_millis(500))
///     .connect("reviews")
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ConnectOptions {
    seeds: Vec<String>,
    cluster: bool,
    ca_pem: Option<Vec<u8>>,
    client: Option<ClientIdentity>,
    replicas: Option<(u32, Duration)>,
    /// See [`ConnectOptions::retry_schedules_for`].
    schedule_retry: Duration,
}

/// How long a schedule is sent again while a cluster's master for the queue is away, by
/// default (see [`ConnectOptions::retry_schedules_for`]).
const CLUSTER_SCHEDULE_RETRY: Duration = Duration::from_secs(10);

/// The pause between two tries of a schedule while the queue's master is away: about
/// what a promotion's news takes to reach the client (its slot map is refreshed on the
/// `MOVED` or refused connect that ended the try before).
pub(super) const SCHEDULE_RETRY_PAUSE: Duration = Duration::from_millis(50);

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seeds: Vec<String> = self.seeds.iter().map(|url| redact(url)).collect();
        f.debug_struct("ConnectOptions")
            .field("seeds", &seeds)
            .field("cluster", &self.cluster)
            .field("tls_ca", &self.ca_pem.is_some())
            .field("tls_client_cert", &self.client.is_some())
            .field("replicas", &self.replicas)
            .field("schedule_retry", &self.schedule_retry)
            .finish()
    }
}

impl ConnectOptions {
    /// One Redis server (or a proxy that looks like one) at `url`.
    pub fn new(url: &str) -> ConnectOptions {
        ConnectOptions {
            seeds: vec![url.to_string()],
            cluster: false,
            ca_pem: None,
            client: None,
            replicas: None,
            schedule_retry: Duration::ZERO,
        }
    }

    /// A Redis Cluster, found from one or more of its nodes (`seeds`); the rest of the
    /// cluster is learnt from them. All seeds share the user, password and scheme.
    pub fn cluster<I>(seeds: I) -> ConnectOptions
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        ConnectOptions {
            seeds: seeds
                .into_iter()
                .map(|url| url.as_ref().to_string())
                .collect(),
            cluster: true,
            ca_pem: None,
            client: None,
            replicas: None,
            schedule_retry: CLUSTER_SCHEDULE_RETRY,
        }
    }

    /// Trusts the CA certificate(s) in `pem` (PEM text) for `rediss://` URLs, instead of
    /// the system's roots.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> ConnectOptions {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Presents the client certificate chain `cert_pem` (PEM text, the client's own
    /// certificate first) and its private key `key_pem` (PEM: PKCS#8, PKCS#1 or SEC1) to
    /// servers that ask for one: mutual TLS, Redis's `tls-auth-clients yes`. Every
    /// connection of the queue presents it: to one server or to each node of a cluster,
    /// and the leader's and workers' own connections. For `rediss://` URLs only.
    ///
    /// The key is handed to rustls and shown nowhere: not in `Debug` (which says only
    /// whether a client certificate is set), not in errors (a key or certificate that
    /// does not parse is named, not quoted), and no accessor returns it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tickless_durable::ConnectOptions;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// let ca = std::fs::read("/etc/redis/ca.crt").expect("the CA");
    /// let cert = std::fs::read("/etc/app/redis-client.crt").expect("the certificate");
    /// let key = std::fs::read("/etc/app/redis-client.key").expect("the key");
    /// let queue = ConnectOptions::new("rediss://app:secret@redis.internal:6380/")
    ///     .tls_ca_pem(ca)
    ///     .tls_client_pem(cert, key)
    ///     .connect("reviews")
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls_client_pem(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> ConnectOptions {
        self.client = Some(ClientIdentity::new(cert_pem.into(), key_pem.into()));
        self
    }

    /// Makes [`schedule`](crate::Queue::schedule) (and its batch form) wait until
    /// `replicas` replicas have the write (Redis `WAIT`), at most `timeout`; fewer is an
    /// error for which [`Error::is_replication`] is true (the job was stored on the
    /// master, and may be lost with it). A schedule that returned `Ok` is then on the
    /// master and `replicas` replicas: a failover to one of them keeps it.
    ///
    /// Only schedules wait: they are the one write whose loss nobody would notice (a job
    /// lost so is never delivered). Acks, fails, extends, cancels and the leader's moves
    /// do not: a master that dies before a replica has one of them makes a job run again
    /// (an ack or a fail lost: delivered again once its lease ends, which at-least-once
    /// delivery allows), come back (a cancel lost: cancel it again) or its lease shorten
    /// (an extend lost), never a job lost; and a move lost is made again by the next
    /// leader from what the replica has.
    ///
    /// Without this option Redis replicates asynchronously: a master that dies can take
    /// schedules it acknowledged in its last moments with it. `WAIT` is not a transaction
    /// either: a replica that had the write may still lose it if it was not the one
    /// promoted.
    ///
    /// The schedules that wait have a connection of their own (per queue and its clones):
    /// a `WAIT` holds up the connection it is sent on, and runs to `timeout` while fewer
    /// replicas than asked are connected (after a failover, until the promoted master has
    /// a replica again). Then those schedules, one after another, wait `timeout` each; the
    /// queue's leader, workers and other calls do not wait behind them.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> ConnectOptions {
        self.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Sends a [`schedule`](crate::Queue::schedule) (or a batch) again while it fails
    /// because the queue's master is away ([`Error::is_redis`]: refused, reset, timed out,
    /// `CLUSTERDOWN`, `TRYAGAIN`, or `MOVED`/`ASK` to a node that cannot be reached), for
    /// at most `limit` from the first try, a try every 50 ms; past that the last error is
    /// returned. A resend is exact: a job the try before stored (its answer lost) is not
    /// added twice, and the call then answers `false`, even if that job has already run
    /// and been acked (or was cancelled) when the next try arrives (a job due at once,
    /// its answer lost in a failover): each call carries a token, and the script
    /// remembers, for the limit plus a second, which jobs due within that time each
    /// token added (the queue's `sent` key; about 1 µs of Redis CPU per such job, none
    /// for later jobs, none for acks). Exact as far as the master that answers the
    /// resend had the try before: a try that only a master killed under it had stored
    /// (not yet sent to its replica, `WAIT` or not), whose job it had already handed
    /// out, is stored again on the promoted replica, and that job runs twice. The limit
    /// covers the whole call, its `WAIT`
    /// included. Default: 10 s on a cluster, where a master's failover moves the
    /// queue to a replica and the client's map of slots catches up (measured here from
    /// the kill to the first schedule answered again: 2.7 to 4.5 s with
    /// `cluster-node-timeout 1000`; in general the node timeout, the replica's election
    /// and the news reaching the other masters: set more than the node timeout plus 3 s
    /// to ride out a whole failover); none (`Duration::ZERO`, one try) on one server.
    ///
    /// Only schedules: a worker's and a leader's calls are tried again by their own loops.
    pub fn retry_schedules_for(mut self, limit: Duration) -> ConnectOptions {
        self.schedule_retry = limit;
        self
    }
}

// Connecting: what the options above make.
impl ConnectOptions {
    /// Connects and opens the queue `name`'s keys (checking their types and the user's
    /// rights): what [`Queue::connect`](crate::Queue::connect) holds.
    pub(crate) async fn open_queue(&self, name: &str) -> Result<Rdb, Error> {
        check_queue_name(name)?;
        let (conn, waits, nodes) = self.open().await?;
        let prefix = contract::prefix(name);
        let rdb = Rdb {
            conn,
            waits,
            nodes,
            url: self.shown_url(),
            name: name.to_string(),
            keys: Key::ALL
                .iter()
                .map(|key| format!("{prefix}{}", key.suffix()))
                .collect(),
            prefix,
            replicas: self.replicas,
            schedule_retry: self.schedule_retry,
        };
        rdb.check_keys().await?;
        Ok(rdb)
    }

    /// The first seed, redacted: what errors and `Queue::url` show.
    pub(crate) fn shown_url(&self) -> String {
        self.seeds
            .first()
            .map_or_else(String::new, |url| redact(url))
    }

    /// The shared connection, and what makes dedicated ones.
    /// What rustls is given (see [`tls::certificates`]).
    fn certificates(&self, url: &str) -> Result<Option<TlsCertificates>, Error> {
        tls::certificates(self.ca_pem.as_deref(), self.client.as_ref(), url)
    }

    /// The names of the queues on the one server these options reach: every
    /// `tickless:{<name>}:meta` key, found with `SCAN`, sorted (a queue gets its meta key
    /// when a leader first runs on it). For tools such as `tickless-durable serve`: as
    /// [`queue_names`](crate::queue_names), with the TLS options (a CA, a client
    /// certificate) applied.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), and [`Error::is_invalid_url`] for a cluster's
    /// options (each node holds its own keys: name the queues instead);
    /// [`Error::is_redis`] when the `SCAN` fails.
    pub async fn queue_names(&self) -> Result<Vec<String>, Error> {
        let Some(url) = self.seeds.first() else {
            return Err(Error::invalid_url("", "no URL"));
        };
        if self.cluster {
            return Err(Error::invalid_url(
                url,
                "queue names are listed for one server; on a cluster, name the queues",
            ));
        }
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|err| Error::unreadable_url(url, &err))?;
        if matches!(info.addr, ConnectionAddr::TcpTls { .. }) {
            ensure_crypto_provider();
        }
        let certs = self.certificates(url)?;
        let client = single_client(info, &certs, url)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Duration::from_secs(5))
            .set_response_timeout(Duration::from_secs(5));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|err| Error::connect(url, err))?;
        scan_queue_names(&mut conn).await
    }

    /// Connects: the queue's shared connection, the one of the calls that `WAIT` (with
    /// [`wait_for_replicas`](Self::wait_for_replicas) only), and what makes dedicated
    /// ones.
    pub(crate) async fn open(&self) -> Result<(Conn, Option<Conn>, Nodes), Error> {
        let Some(first) = self.seeds.first() else {
            return Err(Error::invalid_url(
                "",
                "a cluster needs at least one seed URL",
            ));
        };
        let certs = self.certificates(first)?;
        let mut infos = Vec::with_capacity(self.seeds.len());
        for url in &self.seeds {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|err| Error::unreadable_url(url, &err))?;
            if matches!(info.addr, ConnectionAddr::TcpTls { .. }) {
                ensure_crypto_provider();
            }
            infos.push(info);
        }
        if !self.cluster {
            let client = single_client(infos.swap_remove(0), &certs, first)?;
            let conn = Single::connect(&client, first).await?;
            let waits = match self.replicas {
                Some(_) => Some(Conn::Single(Single::connect(&client, first).await?)),
                None => None,
            };
            return Ok((Conn::Single(conn), waits, Nodes::Single(client)));
        }
        let template = infos[0].clone();
        // The client's own retries of a call (`CLUSTERDOWN`, `TRYAGAIN`: after a pause that
        // doubles from 50 ms) stop growing at 200 ms: a call asleep in them when the
        // cluster serves again waits that much more (with 1 s, deliveries on every master
        // resumed up to 1.8 s after `CLUSTERDOWN` began, 0.9 to 1.3 s with 200 ms). Past
        // the 6 retries (~0.75 s) the callers' own loops try again at a steady pace.
        let mut builder = redis::cluster::ClusterClientBuilder::new(infos)
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(5))
            .retries(6)
            .min_retry_wait(50)
            .max_retry_wait(200);
        if let Some(certs) = &certs {
            builder = builder.certs(certs.clone());
        }
        let client = builder
            .build()
            .map_err(|err| Error::invalid_url(first, plain(&err)))?;
        let mut conn = client
            .get_async_connection()
            .await
            .map_err(|err| Error::connect(first, err))?;
        let _: () = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|err| ping_error(first, err))?;
        let waits = match self.replicas {
            Some(_) => Some(Conn::Cluster(
                client
                    .get_async_connection()
                    .await
                    .map_err(|err| Error::connect(first, err))?,
            )),
            None => None,
        };
        Ok((
            Conn::Cluster(conn.clone()),
            waits,
            Nodes::Cluster {
                conn,
                template,
                certs,
            },
        ))
    }
}

/// A client for one server, with the TLS certificates if any.
fn single_client(
    info: ConnectionInfo,
    certs: &Option<TlsCertificates>,
    url: &str,
) -> Result<redis::Client, Error> {
    match certs {
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        None => redis::Client::open(info),
    }
    .map_err(|err| Error::invalid_url(url, plain(&err)))
}

/// A failed first `PING`: a user refused the command is a permission error, the rest a
/// connect error.
pub(super) fn ping_error(url: &str, err: redis::RedisError) -> Error {
    match err.code() {
        Some("NOPERM") => Error::permission(
            &redact(url),
            "PING",
            &scrub(err.detail().unwrap_or_default(), url),
        ),
        _ => Error::connect(url, err),
    }
}

/// The `redis` crate builds rustls without a crypto provider of its own; ours is ring,
/// installed as the process default only if the program has not chosen one.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first: either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A queue's shared connection: to one server, or to a cluster. Clones share it.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(Single),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Whether `err` says the connection was closed under the call (a broken pipe, a reset):
/// the connection manager starts a new connection, so the call may be sent again at once.
fn closed(err: &redis::RedisError) -> bool {
    err.is_connection_dropped() || err.kind() == redis::ErrorKind::IoError
}

/// Whether a call that failed with `err` is sent once more, on the new connection its
/// failure started: if it may run twice (`idempotent`) and the connection was closed
/// under it, or whatever it is if it was never sent (the connection it waited for was
/// refused: the attempt before was made while Redis was down; the new one may not be).
pub(super) fn send_again(idempotent: bool, err: &redis::RedisError) -> bool {
    err.is_connection_refusal() || (idempotent && closed(err))
}

/// `SCAN` for every queue's meta key on the server `conn` reaches; the names, sorted.
async fn scan_queue_names(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(META_PATTERN)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(|err| Error::redis(META_PATTERN, "SCAN", err))?;
        names.extend(
            keys.iter()
                .filter_map(|key| queue_of_meta(key).map(str::to_string)),
        );
        if next == 0 {
            break;
        }
        cursor = next;
    }
    names.sort();
    names.dedup();
    Ok(names)
}
