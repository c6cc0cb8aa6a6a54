//! One queue's link to Redis: its connections, its keys' full names, and how a script
//! call is run (one call, a pipeline, a pipeline that `WAIT`s for replicas, schedules
//! sent again through a failover). The functions of the sibling modules run their
//! scripts through it; [`Queue`](crate::Queue) holds one.

use super::connect::{send_again, Conn, SCHEDULE_RETRY_PAUSE};
use super::nodes::Nodes;
#[cfg(doc)]
use super::ConnectOptions;
use super::Reply;
use crate::contract::{self, Key};
use crate::error::Error;
use crate::rdb::scripts::Script;
use redis::Value;
use std::time::{Duration, Instant};

/// The longest queue name, in bytes: 128.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;

/// A queue's connections and key names; clones share the connections.
#[derive(Clone)]
pub(crate) struct Rdb {
    pub(super) conn: Conn,
    /// The connection of the calls that `WAIT` for replicas, so that a `WAIT` holds up
    /// only them (see [`ConnectOptions::wait_for_replicas`]);
    /// `None` without the option.
    pub(super) waits: Option<Conn>,
    pub(super) nodes: Nodes,
    /// Redacted (see [`redact`](crate::redact::redact)): the client keeps the credentials.
    pub(super) url: String,
    pub(super) name: String,
    pub(super) prefix: String,
    /// Every key's full name, by [`Key::index`].
    pub(super) keys: Vec<String>,
    /// `WAIT` for this many replicas, at most this long, after writes that must survive a
    /// master's death (see [`ConnectOptions::wait_for_replicas`]).
    pub(super) replicas: Option<(u32, Duration)>,
    /// See [`ConnectOptions::retry_schedules_for`].
    pub(super) schedule_retry: Duration,
}

impl Rdb {
    /// The queue's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The URL the queue was opened with, redacted.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The full name of one of the queue's keys.
    pub(crate) fn key(&self, key: Key) -> &str {
        &self.keys[key.index()]
    }

    /// The full name of a bucket's key, from [`contract::bucket_key`].
    pub(crate) fn bucket(&self, level: u8, start_ms: u64) -> String {
        format!("{}{}", self.prefix, contract::bucket_key(level, start_ms))
    }

    /// The full name of the cold index's bucket `n` (lib/cold.lua's `cold_key`: the first
    /// four hex digits of SHA-1 of an id).
    pub(crate) fn cold_index_key(&self, n: u16) -> String {
        format!("{}{}{n:04x}", self.prefix, contract::COLD_INDEX_KEY)
    }

    /// The queue's wake channel.
    pub(crate) fn channel(&self) -> String {
        format!("{}{}", self.prefix, contract::CHANNEL)
    }

    /// A client for the server holding the queue's keys, for a connection of its own (a
    /// subscription, a blocking `BLMOVE`): on a cluster, the master that owns the queue's
    /// slot now.
    pub(crate) async fn node_client(&self) -> redis::RedisResult<redis::Client> {
        self.nodes.owner_of(self.meta_key()).await
    }

    /// A subscription of its own to the server holding the queue's keys (on a cluster,
    /// the slot's master, waited for through a failover).
    pub(crate) async fn subscriber(&self) -> redis::RedisResult<redis::aio::PubSub> {
        self.nodes.subscriber(self.meta_key()).await
    }

    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// The connection of the calls that `WAIT` for replicas (see [`Rdb::waits`]).
    fn waits_conn(&self) -> Option<Conn> {
        self.waits.clone()
    }

    /// The meta key's name.
    pub(crate) fn meta_key(&self) -> &str {
        self.key(Key::Meta)
    }
}

// Running scripts.
impl Rdb {
    /// Runs one script with the keys it declares and `args`.
    pub(crate) async fn call(&self, script: &Script, args: &[&[u8]]) -> Result<Reply, Error> {
        self.call_retrying(script, args, script.idempotent).await
    }

    /// [`call`](Self::call), sent once more on a new connection if `retry` and the
    /// connection turns out closed (Redis's `timeout`, `CLIENT KILL` or a proxy closed it
    /// while the queue was idle: the connection manager notices only then). Only for
    /// calls that leave the queue the same when run twice: the first may have run.
    pub(super) async fn call_retrying(
        &self,
        script: &Script,
        args: &[&[u8]],
        retry: bool,
    ) -> Result<Reply, Error> {
        let mut invocation = script.script.prepare_invoke();
        for key in script.keys {
            invocation.key(self.key(*key));
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut result: redis::RedisResult<Value> = invocation.invoke_async(&mut self.conn()).await;
        if matches!(&result, Err(err) if send_again(retry, err)) {
            result = invocation.invoke_async(&mut self.conn()).await;
        }
        let value = result.map_err(|err| script.error(self.meta_key(), err))?;
        Reply::new(value, self.meta_key(), script.name)
    }

    /// Adds one `EVALSHA` of `script` with its keys and `args` to `pipe`.
    fn add_call(&self, pipe: &mut redis::Pipeline, script: &Script, args: &[Vec<u8>]) {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(script.script.get_hash())
            .arg(script.keys.len());
        for key in script.keys {
            cmd.arg(self.key(*key));
        }
        for arg in args {
            cmd.arg(arg.as_slice());
        }
    }

    /// Runs `calls` (argument lists of `script`) in one pipeline; loads the script and
    /// tries again once if Redis does not know it, and sends it once more on a new
    /// connection when an idempotent script's finds its connection closed.
    pub(super) async fn call_many<C: AsRef<[Vec<u8>]>>(
        &self,
        script: &Script,
        calls: &[C],
    ) -> Result<Vec<Reply>, Error> {
        let mut pipe = redis::pipe();
        for args in calls {
            self.add_call(&mut pipe, script, args.as_ref());
        }
        let mut conn = self.conn();
        let mut result: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut conn).await;
        if matches!(&result, Err(err) if send_again(script.idempotent, err)) {
            conn = self.conn();
            result = pipe.query_async(&mut conn).await;
        }
        if matches!(&result, Err(err) if err.kind() == redis::ErrorKind::NoScriptError) {
            script
                .script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(|err| script.error(self.meta_key(), err))?;
            result = pipe.query_async(&mut conn).await;
        }
        let values = result.map_err(|err| script.error(self.meta_key(), err))?;
        values
            .into_iter()
            .map(|value| Reply::new(value, self.meta_key(), script.name))
            .collect()
    }

    /// How long a schedule is sent again while the queue's master is away
    /// ([`ConnectOptions::retry_schedules_for`]).
    pub(crate) fn schedule_retry(&self) -> Duration {
        self.schedule_retry
    }

    /// `WAIT` for this many replicas, at most this long, after schedules
    /// ([`ConnectOptions::wait_for_replicas`]).
    pub(crate) fn replicas(&self) -> Option<(u32, Duration)> {
        self.replicas
    }

    /// Whether writes wait for replicas ([`ConnectOptions::wait_for_replicas`]).
    pub(super) fn waits_for_replicas(&self) -> bool {
        self.replicas().is_some()
    }

    /// Runs `calls` of `script` in one pipeline followed by `WAIT` for the replicas asked
    /// for in [`ConnectOptions::wait_for_replicas`] (none: no `WAIT`), on the connection
    /// kept for them. One pipeline is one connection, so the `WAIT` covers these writes; on
    /// a cluster it is routed with them, by their key, to the queue's master. Sent once
    /// more if `retry` and the connection turns out closed; loads the script if Redis does
    /// not know it.
    ///
    /// # Errors
    ///
    /// As [`call_many`](Rdb::call_many), and [`Error::is_replication`] when fewer
    /// replicas acknowledged than asked (the writes were made on the master).
    pub(super) async fn call_replicated<C: AsRef<[Vec<u8>]>>(
        &self,
        script: &Script,
        calls: &[C],
        retry: bool,
    ) -> Result<Vec<Reply>, Error> {
        let meta = self.meta_key();
        let mut pipe = redis::pipe();
        for args in calls {
            self.add_call(&mut pipe, script, args.as_ref());
        }
        if let Some((replicas, timeout)) = self.replicas() {
            let ms = u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            pipe.cmd("WAIT").arg(replicas).arg(ms);
        }
        let conn = || self.waits_conn().unwrap_or_else(|| self.conn());
        let mut conn_now = conn();
        let mut result: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut conn_now).await;
        if matches!(&result, Err(err) if send_again(retry, err)) {
            conn_now = conn();
            result = pipe.query_async(&mut conn_now).await;
        }
        if matches!(&result, Err(err) if err.kind() == redis::ErrorKind::NoScriptError) {
            script
                .script
                .prepare_invoke()
                .load_async(&mut conn_now)
                .await
                .map_err(|err| script.error(meta, err))?;
            result = pipe.query_async(&mut conn_now).await;
        }
        let mut values = result.map_err(|err| script.error(meta, err))?;
        if let Some((replicas, _)) = self.replicas() {
            let acked = match values.pop() {
                Some(Value::Int(acked)) => acked,
                other => {
                    return Err(Error::garbage(
                        meta,
                        format!("WAIT answered {other:?}, not a number"),
                    ))
                }
            };
            if acked < i64::from(replicas) {
                return Err(Error::replication(meta, script.name, acked, replicas));
            }
        }
        values
            .into_iter()
            .map(|value| Reply::new(value, meta, script.name))
            .collect()
    }

    /// Runs `schedule` (one or more schedules: idempotent on their ids) again while it
    /// fails because the queue's master is away, until the queue's retry limit has passed
    /// since `started` (see [`ConnectOptions::retry_schedules_for`]); a try still running
    /// then is given up (its schedules may have been stored: sending them again is safe).
    pub(crate) async fn schedule_through_failover<T, F>(
        &self,
        started: Instant,
        mut schedule: impl FnMut() -> F,
    ) -> Result<T, Error>
    where
        F: std::future::Future<Output = Result<T, Error>>,
    {
        let limit = self.schedule_retry();
        if limit.is_zero() {
            return schedule().await;
        }
        loop {
            let left = limit.saturating_sub(started.elapsed());
            let result = match tickless::timeout(left, schedule()).await {
                Ok(result) => result,
                Err(_) => {
                    let err = redis::RedisError::from((
                        redis::ErrorKind::IoError,
                        "no answer within the schedule's retry limit",
                    ));
                    return Err(Error::redis(self.meta_key(), "schedule", err));
                }
            };
            match result {
                Err(err) if err.is_away() && started.elapsed() + SCHEDULE_RETRY_PAUSE < limit => {
                    tickless::sleep(SCHEDULE_RETRY_PAUSE).await;
                }
                result => return result,
            }
        }
    }

    /// Checks that every key of the queue that exists has the type this crate writes, and
    /// that the user may read the keys and publish on the queue's channel.
    pub(super) async fn check_keys(&self) -> Result<(), Error> {
        let mut pipe = redis::pipe();
        for key in Key::ALL {
            pipe.cmd("TYPE").arg(self.key(key));
        }
        let types: Vec<String> = pipe
            .query_async(&mut self.conn())
            .await
            .map_err(|err| Error::redis(self.meta_key(), "read the queue's keys (TYPE)", err))?;
        // The wake channel: a user without it (Redis 7 gives new ACL users no channel)
        // would store jobs that no leader hears of. "0 0" only makes a leader look again.
        let _: i64 = redis::cmd("PUBLISH")
            .arg(self.channel())
            .arg("0 0")
            .query_async(&mut self.conn())
            .await
            .map_err(|err| {
                Error::redis(self.meta_key(), "publish to the queue's wake channel", err)
            })?;
        for (key, found) in Key::ALL.into_iter().zip(types) {
            let want = key.redis_type();
            if found != "none" && found != want {
                return Err(Error::garbage(
                    self.key(key),
                    format!("expected a {want}, found a {found}"),
                ));
            }
        }
        Ok(())
    }
}

pub(super) fn check_queue_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_queue_name(name, "empty"));
    }
    if name.len() > MAX_QUEUE_NAME_BYTES {
        return Err(Error::invalid_queue_name(
            name,
            "longer than MAX_QUEUE_NAME_BYTES (128)",
        ));
    }
    if name.contains(['{', '}']) {
        return Err(Error::invalid_queue_name(
            name,
            "holds a brace; the name becomes the keys' hash tag",
        ));
    }
    Ok(())
}
