//! The one error type of [`crate`].

use crate::redact::{redact, scrub};
use std::fmt;

/// What went wrong in a call to Redis-backed jobs: an opaque error with `is_*` predicates.
///
/// Its `Display` names what failed and where (the URL, the queue's key, the job id), in
/// lowercase, e.g. `cannot connect to redis at redis://127.0.0.1:1/: connection refused`.
/// A URL's password never appears: it reads `***` (`redis://app:***@host/`).
///
/// `Debug` shows the same message (so a `main` returning `Result<(), Error>` prints it
/// as is), and `{:#?}` the fields behind it.
///
/// # Examples
///
/// ```
/// use tickless_durable::{Error, Queue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let err: Error = Queue::connect("127.0.0.1:6379", "orders").await.unwrap_err();
/// assert!(err.is_invalid_url());
/// assert_eq!(
///     err.to_string(),
///     "invalid redis url \"127.0.0.1:6379\": it has no scheme; expected \
///      redis://[user:password@]host[:port][/db], rediss://... for TLS, or \
///      redis+unix:///path/to/socket[?db=N&user=U&pass=P]",
/// );
/// assert_eq!(format!("{err:?}"), err.to_string());
/// # }
/// ```
pub struct Error {
    kind: Kind,
    message: String,
    /// Redis could not be reached, or is not serving yet (see [`Error::is_away`]).
    away: bool,
    /// Redis ran a script of the queue and it raised (see [`Error::is_script_failure`]).
    script_failed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    InvalidUrl,
    Connect,
    Redis,
    PayloadTooLarge,
    InvalidId,
    InvalidQueueName,
    InvalidSchedule,
    InvalidOutlet,
    Garbage,
    Permission,
    Replication,
    Store,
}

impl Error {
    fn new(kind: Kind, message: String) -> Error {
        Error {
            kind,
            message,
            away: false,
            script_failed: false,
        }
    }

    pub(crate) fn invalid_url(url: &str, why: impl fmt::Display) -> Error {
        let (shown, why) = (redact(url), scrub(&why.to_string(), url));
        Error::new(
            Kind::InvalidUrl,
            format!("invalid redis url {shown:?}: {why}"),
        )
    }

    /// The `redis` crate could not read `url` (`err`): what is wrong with it, and the
    /// forms a URL takes. The crate says only "Redis URL did not parse" for most
    /// mistakes (no scheme, another scheme, a port out of range), so those are told
    /// apart here.
    pub(crate) fn unreadable_url(url: &str, err: &redis::RedisError) -> Error {
        Error::invalid_url(url, format!("{}; {URL_FORMS}", url_fault(url, err)))
    }

    pub(crate) fn connect(url: &str, err: redis::RedisError) -> Error {
        let (shown, why) = (redact(url), scrub(&connect_fault(&err), url));
        Error::new(
            Kind::Connect,
            format!("cannot connect to redis at {shown}: {why}"),
        )
    }

    pub(crate) fn payload_too_large(id: &str, len: usize, max: usize) -> Error {
        Error::new(
            Kind::PayloadTooLarge,
            format!("payload of job {id:?} is {len} bytes, above the limit of {max} bytes"),
        )
    }

    pub(crate) fn invalid_id(id: &str, why: &str) -> Error {
        let shown: String = id.chars().take(64).collect();
        let cut = if shown.len() < id.len() { "..." } else { "" };
        Error::new(
            Kind::InvalidId,
            format!("invalid job id {shown:?}{cut}: {why}"),
        )
    }

    pub(crate) fn invalid_schedule(id: &str, why: impl fmt::Display) -> Error {
        let shown: String = id.chars().take(64).collect();
        let cut = if shown.len() < id.len() { "..." } else { "" };
        Error::new(
            Kind::InvalidSchedule,
            format!("invalid recurring schedule {shown:?}{cut}: {why}"),
        )
    }

    pub(crate) fn invalid_outlet(key: &str, why: impl fmt::Display) -> Error {
        let shown: String = key.chars().take(64).collect();
        let cut = if shown.len() < key.len() { "..." } else { "" };
        Error::new(
            Kind::InvalidOutlet,
            format!("invalid stream outlet {shown:?}{cut}: {why}"),
        )
    }

    pub(crate) fn invalid_queue_name(name: &str, why: &str) -> Error {
        let shown: String = name.chars().take(64).collect();
        let cut = if shown.len() < name.len() { "..." } else { "" };
        Error::new(
            Kind::InvalidQueueName,
            format!("invalid queue name {shown:?}{cut}: {why}"),
        )
    }

    pub(crate) fn garbage(key: &str, what: impl fmt::Display) -> Error {
        Error::new(Kind::Garbage, format!("garbage in {key}: {what}"))
    }

    /// The Redis user may not do `what` on the queue whose meta key is `key`.
    pub(crate) fn permission(key: &str, what: &str, detail: &str) -> Error {
        Error::new(
            Kind::Permission,
            format!(
                "the redis user may not {what} for {key} ({detail}); a queue's user needs \
                 keys ~tickless:*, channels &tickless:* and the commands the README's \
                 ACL section lists"
            ),
        )
    }

    /// Fewer replicas than asked acknowledged a write within the `WAIT` timeout.
    pub(crate) fn replication(key: &str, what: &str, acked: i64, wanted: u32) -> Error {
        Error::new(
            Kind::Replication,
            format!(
                "{what} on {key}: {acked} of {wanted} replicas acknowledged the write in time; \
                 it is on the master and may be lost with it"
            ),
        )
    }

    /// The cold tier's store failed `what` (a PUT, GET, list or delete of `path`), or a
    /// segment read back is not what was written. The store's own message is kept: an
    /// `object_store` error names the path and the store's answer, never its credentials
    /// (they are not part of a request's URL).
    #[cfg_attr(not(feature = "cold"), allow(dead_code))]
    pub(crate) fn store(what: &str, path: &str, why: impl fmt::Display) -> Error {
        Error::new(Kind::Store, format!("cold store: {what} {path}: {why}"))
    }

    /// A call merged with others (see `queue/merge.rs`) got no answer: the task that was to
    /// send it ended with its runtime (a call still waiting was not sent).
    pub(crate) fn not_sent(key: &str, what: &str) -> Error {
        let mut error = Error::new(
            Kind::Redis,
            format!("redis error on {key} ({what}): no answer, the task sending it ended with its runtime"),
        );
        error.away = true;
        error
    }

    /// The same error, for another caller of one merged call (see `queue/merge.rs`).
    pub(crate) fn duplicate(&self) -> Error {
        Error {
            kind: self.kind,
            message: self.message.clone(),
            away: self.away,
            script_failed: self.script_failed,
        }
    }

    /// Maps an error of the redis client met while doing `what` on queue key `key`.
    pub(crate) fn redis(key: &str, what: &str, err: redis::RedisError) -> Error {
        if err.code() == Some("GARBAGE") {
            let detail = err.detail().unwrap_or_default();
            // The script's position in Redis's suffix says nothing to a user.
            let detail = detail.split(" script: ").next().unwrap_or(detail);
            let detail = detail.strip_prefix("in ").unwrap_or(detail);
            return Error::new(Kind::Garbage, format!("garbage in {detail}"));
        }
        if err.code() == Some("NOPERM") {
            // lib/acl.lua's acl_refused names the command and the grant; where it was
            // raised (`script: <sha>, on lib/acl.lua:<line>`) says nothing more.
            let detail = err.detail().unwrap_or_default();
            let detail = detail.split(" script: ").next().unwrap_or(detail);
            return Error::permission(key, what, detail);
        }
        // A command a script runs that the user may not (Redis answers ERR, not NOPERM).
        let detail = err.detail().unwrap_or_default();
        if err.code() == Some("ERR") && detail.starts_with("The user executing the script") {
            return Error::permission(key, &format!("run script {what}"), detail);
        }
        if err.code() == Some("WRONGTYPE") {
            return Error::new(
                Kind::Garbage,
                format!(
                    "garbage in {key}: a key of the queue holds the wrong type of value ({what})"
                ),
            );
        }
        let mut error = Error::new(Kind::Redis, format!("redis error on {key} ({what}): {err}"));
        error.away = away(&err);
        error
    }

    /// Whether Redis was away: not reachable (refused, reset, timed out, closed) or not
    /// serving yet (loading its data, a cluster without a master for the slot). The
    /// background loops try again after such an error at a steady pace, not a growing
    /// one, so that they resume as soon as Redis does (see `durable::retry`).
    pub(crate) fn is_away(&self) -> bool {
        self.away
    }

    /// [`redis`](Error::redis) for an error of `script`, with Redis's `user_script:<line>`
    /// named after the file the line is in (`tick.lua:40`, `lib/reads.lua:12`).
    /// `relabel` is the script's `Script::relabel`.
    pub(crate) fn script(
        key: &str,
        script: &'static str,
        relabel: impl FnOnce(&str) -> String,
        err: redis::RedisError,
    ) -> Error {
        // An answer with an error code, not a connection that failed: Redis ran it.
        let answered = err.code().is_some();
        let mut error = Error::redis(key, script, err);
        error.message = relabel(&error.message);
        error.script_failed = answered && !error.away;
        error
    }

    /// Redis ran one of the queue's scripts and it raised (garbage in a key, a command the
    /// user may not run, a script error), as opposed to Redis being away. Such failures
    /// are counted in the queue (`Counters::script_errors`) by the leader or worker that
    /// met them.
    pub(crate) fn is_script_failure(&self) -> bool {
        self.script_failed
    }
}

// What an error is, for callers.
impl Error {
    /// The URL could not be parsed, or names a scheme other than `redis://`, `rediss://`
    /// (TLS) or `redis+unix://`; or a cluster's seeds were none or disagree; or the TLS
    /// options given with it do not parse (a CA or client certificate that is not PEM, a
    /// client key that is no PEM private key: named, never quoted) or came with a
    /// `redis://` URL.
    pub fn is_invalid_url(&self) -> bool {
        self.kind == Kind::InvalidUrl
    }

    /// No connection could be made to the server the URL names (refused, unreachable,
    /// timed out, or refused our credentials).
    pub fn is_connect(&self) -> bool {
        self.kind == Kind::Connect
    }

    /// A command failed after connecting: the connection dropped (Redis restarting, say)
    /// or the server answered with an error. Retrying later is the usual answer; the
    /// background loops of [`Leader`](crate::Leader) and [`Worker`](crate::Worker) do.
    pub fn is_redis(&self) -> bool {
        self.kind == Kind::Redis
    }

    /// A payload was larger than [`MAX_PAYLOAD_BYTES`](crate::MAX_PAYLOAD_BYTES).
    pub fn is_payload_too_large(&self) -> bool {
        self.kind == Kind::PayloadTooLarge
    }

    /// A job id was empty or longer than [`MAX_ID_BYTES`](crate::MAX_ID_BYTES).
    pub fn is_invalid_id(&self) -> bool {
        self.kind == Kind::InvalidId
    }

    /// A recurring schedule was refused: a cron expression that does not parse or never
    /// matches, an unknown time zone, a zero period (see [`Queue::cron`](crate::Queue::cron)).
    pub fn is_invalid_schedule(&self) -> bool {
        self.kind == Kind::InvalidSchedule
    }

    /// A stream outlet was refused by
    /// [`Queue::set_stream_outlet`](crate::Queue::set_stream_outlet): an empty key, a key
    /// outside the queue's hash slot (without the queue's name as its hash tag) or one of
    /// the queue's own keys, a key holding something other than a stream, a bound of 0.
    pub fn is_invalid_outlet(&self) -> bool {
        self.kind == Kind::InvalidOutlet
    }

    /// A queue name was empty, too long, or held `{` or `}` (it becomes the hash tag).
    pub fn is_invalid_queue_name(&self) -> bool {
        self.kind == Kind::InvalidQueueName
    }

    /// The Redis user lacks a permission the queue needs (a key, its channel, a command):
    /// found by [`Queue::connect`](crate::Queue::connect) before anything is stored, or by
    /// the first call that needs it. The message names what was refused.
    pub fn is_permission(&self) -> bool {
        self.kind == Kind::Permission
    }

    /// Something in the queue's keys is not what this crate writes there: another program
    /// wrote to them, or another version of this crate. The message names the key and
    /// what was found; nothing was changed by the failing call.
    pub fn is_garbage(&self) -> bool {
        self.kind == Kind::Garbage
    }

    /// With [`ConnectOptions::wait_for_replicas`](crate::ConnectOptions::wait_for_replicas):
    /// the write was made on the master, but fewer replicas than asked had it when the
    /// timeout ended. The job is stored; it may be lost if the master dies now.
    pub fn is_replication(&self) -> bool {
        self.kind == Kind::Replication
    }

    /// The cold tier's store (a local directory, S3, ...) failed, or a segment it gave
    /// back is not one this crate wrote (see `ColdTier`). Jobs are never lost to it: a
    /// move that failed leaves its jobs in Redis, a load that failed is tried again.
    pub fn is_store(&self) -> bool {
        self.kind == Kind::Store
    }
}

/// The message, as `Display` shows it: what `fn main() -> Result<(), Error>` prints when
/// it fails. `{:#?}` shows the fields as well.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            f.debug_struct("Error")
                .field("kind", &self.kind)
                .field("message", &self.message)
                .field("away", &self.away)
                .field("script_failed", &self.script_failed)
                .finish()
        } else {
            f.write_str(&self.message)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The forms of URL a queue takes, shown after what is wrong with one.
const URL_FORMS: &str = "expected redis://[user:password@]host[:port][/db], rediss://... for \
    TLS, or redis+unix:///path/to/socket[?db=N&user=U&pass=P]";

/// The schemes the `redis` crate reads.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
];

/// What is wrong with `url`, which the `redis` crate refused with `err`: found by shape
/// where the crate says only that it "did not parse". Quotes only the scheme and the
/// port, never the user part (the message is scrubbed of the URL's secrets as well).
fn url_fault(url: &str, err: &redis::RedisError) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "it has no scheme".into();
    };
    if !SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
        let scheme: String = scheme.chars().take(16).collect();
        return format!("its scheme is {scheme}://");
    }
    // The host part: after the last `@` (as redact.rs reads the user part), up to the
    // path, query or fragment.
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host = host.split(['/', '?', '#']).next().unwrap_or(host);
    let port = match host.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => host.rsplit_once(':').map(|(_, port)| port),
    };
    if let Some(port) = port.filter(|p| !p.is_empty() && p.parse::<u16>().is_err()) {
        let port: String = port.chars().take(16).collect();
        return format!("port {port:?} is not a number from 0 to 65535");
    }
    let fault = plain(err);
    if fault == "Redis URL did not parse" {
        return "it does not parse as a URL (a character of the user or password may need \
                percent-encoding: %40 for @, %2F for /, %23 for #, %3F for ?)"
            .into();
    }
    lowercase_first(&fault)
}

/// Why a connection failed, from `err`: a refused password or a missing one in words of
/// what to do, anything else as the `redis` crate says it (see [`plain`]).
fn connect_fault(err: &redis::RedisError) -> String {
    if err.kind() == redis::ErrorKind::AuthenticationFailed || err.code() == Some("WRONGPASS") {
        // Redis answers a password sent to a server without one as it does a wrong one,
        // and the crate keeps neither answer.
        return "the server refused the user or password in the URL (a wrong password, an \
                unknown or disabled user, or a password sent to a server that has none)"
            .into();
    }
    if err.code() == Some("NOAUTH") {
        return "the server asks for a password and the URL has none: \
                redis://:password@host:port/, or redis://user:password@host:port/ for an \
                ACL user (redis+unix://...?pass=password for a socket)"
            .into();
    }
    plain(err)
}

/// `err` as the `redis` crate writes it, without the name of its `ErrorKind` variant
/// (`Redis URL did not parse- InvalidClientConfig`, `Invalid protocol version -
/// InvalidClientConfig: 9`), which says nothing a user can act on.
pub(crate) fn plain(err: &redis::RedisError) -> String {
    let text = err.to_string();
    let kind = format!("{:?}", err.kind());
    let with_detail = format!(" - {kind}: ");
    if text.contains(&with_detail) {
        return text.replacen(&with_detail, ": ", 1);
    }
    match text.strip_suffix(&kind).and_then(|t| t.strip_suffix("- ")) {
        Some(text) => text.to_string(),
        None => text,
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// See [`Error::is_away`].
pub(crate) fn away(err: &redis::RedisError) -> bool {
    use redis::ErrorKind;
    err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_io_error()
        || err.is_timeout()
        || matches!(
            err.kind(),
            ErrorKind::BusyLoadingError
                | ErrorKind::ClusterDown
                | ErrorKind::MasterDown
                | ErrorKind::TryAgain
                // Left when the cluster client's redirects ran out: during a failover, a
                // live node points at the dead master until the replica is promoted.
                | ErrorKind::Moved
                | ErrorKind::Ask
                | ErrorKind::ClusterConnectionNotFound
        )
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError};

    #[test]
    fn only_an_answer_from_a_script_that_ran_is_a_script_failure() {
        let script = &crate::rdb::scripts::scripts().tick;
        let raised = RedisError::from((
            ErrorKind::ResponseError,
            "An error was signalled by the server",
            "user_script:3: boom".to_string(),
        ));
        assert_eq!(raised.code(), Some("ERR"));
        let err = script.error("meta", raised);
        assert!(err.is_script_failure() && !err.is_away(), "{err}");
        for (kind, text) in [
            (ErrorKind::IoError, "broken pipe"),
            (ErrorKind::BusyLoadingError, "loading"),
        ] {
            let away = script.error("meta", RedisError::from((kind, text)));
            assert!(away.is_away() && !away.is_script_failure(), "{away}");
        }
    }
}
