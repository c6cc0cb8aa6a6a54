//! One server's shared connection: the `redis` crate's connection manager, which makes a
//! new connection when a call finds its connection broken, and which is itself replaced
//! when that reconnect failed in a way the manager never tries again.
//!
//! The manager starts a new attempt after a failed one only if that one failed on I/O
//! (refused, reset). One refused at `AUTH` (Redis came back without the user, or the
//! password was changed and changed back) is kept and answered to every later call: a
//! queue would fail with "Password authentication failed" until its process restarted,
//! long after the user was back. So a call answered so starts a new manager in the
//! background, once at a time, and the calls after it use that one when it connects.

use super::connect::ping_error;
use crate::error::Error;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// See the module docs. Clones share it.
#[derive(Clone)]
pub(crate) struct Single(Arc<Inner>);

struct Inner {
    client: redis::Client,
    /// The manager calls are sent on; replaced (under the write lock, never held across
    /// an `await`) when a new one has connected.
    manager: RwLock<ConnectionManager>,
    /// A new manager is being connected: no second one is started meanwhile.
    renewing: AtomicBool,
}

/// The manager's settings. The first connection is tried once, with a 5 s timeout, so
/// that a wrong address fails fast. After that, a call that finds the connection broken
/// makes one new attempt (the connection manager's reconnect), with no retries of the
/// manager's own: its retries start at a second and grow (the `redis` crate's backoff has
/// no shorter first delay), and every call waits behind them, which held deliveries up to
/// ~1.3 s after a restarted Redis answered. The callers' loops set the pace instead
/// (`durable::retry`), and a call that met a refused connection (never sent) is sent
/// again at once on the new attempt (`Rdb::call_retrying`).
fn config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Duration::from_secs(5))
        .set_number_of_retries(0)
}

impl Single {
    /// Connects to the server of `client` (whose URL is `url`), checking it with `PING`.
    pub(crate) async fn connect(client: &redis::Client, url: &str) -> Result<Single, Error> {
        let probe = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Duration::from_secs(5))
            .set_response_timeout(Duration::from_secs(5));
        let mut first = client
            .get_multiplexed_async_connection_with_config(&probe)
            .await
            .map_err(|err| Error::connect(url, err))?;
        let _: () = redis::cmd("PING")
            .query_async(&mut first)
            .await
            .map_err(|err| ping_error(url, err))?;
        let manager = ConnectionManager::new_with_config(client.clone(), config())
            .await
            .map_err(|err| Error::connect(url, err))?;
        Ok(Single(Arc::new(Inner {
            client: client.clone(),
            manager: RwLock::new(manager),
            renewing: AtomicBool::new(false),
        })))
    }

    fn manager(&self) -> ConnectionManager {
        // A poisoned lock still holds a usable manager: nothing panics while writing it.
        match self.0.manager.read() {
            Ok(manager) => manager.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// After a call answered `result`: if the manager's reconnect was refused at `AUTH`,
    /// a new manager is started (see the module docs).
    fn renew_after<T>(&self, result: &RedisResult<T>) {
        if !matches!(result, Err(err) if refused_at_auth(err)) {
            return;
        }
        if self.0.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.0.clone();
        tokio::spawn(async move {
            let renewed = ConnectionManager::new_with_config(inner.client.clone(), config()).await;
            if let Ok(manager) = renewed {
                match inner.manager.write() {
                    Ok(mut slot) => *slot = manager,
                    Err(poisoned) => *poisoned.into_inner() = manager,
                }
            }
            inner.renewing.store(false, Ordering::Release);
        });
    }
}

/// Whether `err` is a connection's `AUTH` refused: it comes only from making a
/// connection (the queue sends no `AUTH` of its own).
fn refused_at_auth(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
}

impl ConnectionLike for Single {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut manager = self.manager();
        Box::pin(async move {
            let result = manager.req_packed_command(cmd).await;
            self.renew_after(&result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut manager = self.manager();
        Box::pin(async move {
            let result = manager.req_packed_commands(cmd, offset, count).await;
            self.renew_after(&result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.0.client.get_connection_info().redis.db
    }
}
