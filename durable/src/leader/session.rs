//! A leader's life while it runs: a session per subscription to the queue's wake
//! channel, woken by what it hears there or by its own timer.

use super::next_message;
use super::{Leader, Role};
use super::{CONFIRM_WAIT, WARN_EVERY};
use crate::error::Error;
use crate::retry::Retry;
use futures_core::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

impl Leader {
    pub(super) async fn run(mut self, mut stopped: watch::Receiver<bool>) -> Result<(), Error> {
        let mut retry = Retry::new();
        let mut last_warned = Instant::now();
        loop {
            match self.session(&mut stopped, &mut retry).await {
                Ok(()) => return Ok(()),
                // Whatever failed (Redis away, a permission, garbage in a key, which a
                // script meets before it writes anything), the leader goes on: an
                // operator can repair a key or grant a permission without a restart.
                Err(err) => {
                    self.queue.report("leader", &err).await;
                    let message = err.to_string();
                    let after = retry.after(&err);
                    let failing = self.shared.failed(err);
                    self.queue.leader_failing(failing, &message).await;
                    if failing == 1 || last_warned.elapsed() >= WARN_EVERY {
                        last_warned = Instant::now();
                        crate::trace::event!(
                            warn,
                            queue = self.queue.name(),
                            failing,
                            error = %message,
                            "not working: its rounds fail"
                        );
                    }
                    tokio::select! {
                        _ = tickless::sleep(after) => {}
                        _ = stopped.changed() => {}
                    }
                    if *stopped.borrow() {
                        self.release().await;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One subscription to the queue's channel: campaign or lead until it drops.
    pub(super) async fn session(
        &mut self,
        stopped: &mut watch::Receiver<bool>,
        retry: &mut Retry,
    ) -> Result<(), Error> {
        let channel = self.queue.rdb().channel();
        let mut pubsub = tokio::select! {
            pubsub = self.queue.rdb().subscriber() => {
                pubsub.map_err(|err| Error::redis(&channel, "SUBSCRIBE", err))?
            }
            _ = stopped.changed() => {
                self.release().await;
                return Ok(());
            }
        };
        pubsub
            .subscribe(&channel)
            .await
            .map_err(|err| Error::redis(&channel, "SUBSCRIBE", err))?;
        let mut messages = pubsub.into_on_message();
        self.confirm_subscription(&channel, &mut messages).await?;
        // Whatever was published while unsubscribed is read from the keys now.
        self.wake_now();
        loop {
            self.due_step().await?;
            retry.reset();
            let (failed, first) = self.shared.worked();
            if failed > 0 || first {
                // A working leader serves the queue: what a failing one (this one before,
                // or another process) said in meta no longer holds.
                self.queue.leader_failing(0, "").await;
            }
            if failed > 0 {
                crate::trace::event!(info, queue = self.queue.name(), failed, "working again");
            }
            let deadline = match self.role {
                Role::Candidate { retry_at } => retry_at,
                Role::Leading {
                    renew_at,
                    next_wake,
                    ..
                } => renew_at.min(next_wake).min(self.cold_at()),
            };
            tokio::select! {
                _ = tickless::sleep_until(deadline) => {}
                message = next_message(&mut messages) => match message {
                    Some(payload) => self.heard(&payload),
                    None => return Err(Error::redis(&channel, "the subscription", redis::RedisError::from((redis::ErrorKind::IoError, "connection closed")))),
                },
                _ = stopped.changed() => {
                    self.release().await;
                    return Ok(());
                }
            }
        }
    }

    /// Publishes a probe on the queue's channel and waits (at most [`CONFIRM_WAIT`]) to
    /// hear a message on `messages`, which proves the subscription: the `redis` crate's
    /// `subscribe` answers `Ok` even when Redis refused the `SUBSCRIBE` (a user without
    /// `+subscribe`), and a leader that hears nothing wakes only on its own timers, late
    /// for every job scheduled earlier than its next wake, with no error anywhere. A
    /// message heard is taken as usual; the probe means nothing to a leader or candidate.
    pub(super) async fn confirm_subscription(
        &mut self,
        channel: &str,
        messages: &mut (impl Stream<Item = redis::Msg> + Unpin),
    ) -> Result<(), Error> {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg("probe")
            .query_async(&mut self.queue.rdb().conn())
            .await
            .map_err(|err| Error::redis(channel, "PUBLISH", err))?;
        tokio::select! {
            _ = tickless::sleep(CONFIRM_WAIT) => Err(Error::permission(
                channel,
                "SUBSCRIBE to the queue's wake channel",
                &format!(
                    "its probe was not heard within {CONFIRM_WAIT:?}: a queue's user needs \
                     +subscribe"
                ),
            )),
            message = next_message(messages) => match message {
                Some(payload) => {
                    self.heard(&payload);
                    Ok(())
                }
                None => Err(Error::redis(
                    channel,
                    "the subscription",
                    redis::RedisError::from((redis::ErrorKind::IoError, "connection closed")),
                )),
            },
        }
    }

    pub(super) fn wake_now(&mut self) {
        let now = Instant::now();
        match &mut self.role {
            Role::Candidate { retry_at } => *retry_at = now,
            Role::Leading { next_wake, .. } => *next_wake = now,
        }
    }

    /// A message on the channel: `<wake ms> <lease end ms>` ("-" for no wake).
    pub(super) fn heard(&mut self, payload: &str) {
        let mut parts = payload.split(' ');
        let wake: Option<u64> = parts.next().and_then(|w| w.parse().ok());
        let lease_end: Option<u64> = parts.next().and_then(|e| e.parse().ok());
        let now = Instant::now();
        match &mut self.role {
            Role::Candidate { retry_at } => {
                // Any news may mean the lease ended or was shortened: look again.
                if lease_end.is_some() {
                    *retry_at = now.min(*retry_at);
                }
            }
            Role::Leading {
                expires,
                renew_at,
                next_wake,
                ..
            } => {
                if wake.is_some() {
                    // The clock map is refreshed by the tick this causes.
                    *next_wake = now;
                }
                if let Some(end) = lease_end {
                    if end < *expires {
                        *renew_at = now;
                    }
                }
            }
        }
    }
}
