//! The leader's lease: taken (with a repair of what a dead leader left), renewed with
//! the figures it publishes, lost, given back.

use super::{ClockMap, Leader, Role};
use crate::error::Error;
use crate::rdb::lead as rdb;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Leader {
    pub(super) async fn acquire(&mut self) -> Result<(), Error> {
        // The busy lease is both the first lease and what schedulers shorten it to.
        let ttl = self.options.busy_lease.as_millis();
        let acquired = rdb::acquire(self.queue.rdb(), &self.name, ttl, ttl).await?;
        let local = Instant::now();
        let (now, expires) = (acquired.now, acquired.expires);
        let map = ClockMap {
            local,
            queue_ms: now,
        };
        self.last_map = Some(map);
        if let Some(token) = acquired.token {
            self.shared.token.store(token, Ordering::Relaxed);
            self.shared.leading.store(true, Ordering::Relaxed);
            self.shared.leaderships.fetch_add(1, Ordering::Relaxed);
            crate::trace::event!(info, queue = self.queue.name(), token, "acquired");
            self.repair_in_background(token);
            self.role = Role::Leading {
                token,
                expires,
                renew_at: local + self.options.busy_lease / 2,
                next_wake: local,
                next_ms: Some(now),
            };
        } else {
            // A millisecond after its end, so that Redis agrees it has ended.
            self.role = Role::Candidate {
                retry_at: map.at(expires + 1),
            };
        }
        Ok(())
    }

    /// A new leadership repairs the queue (see `queue/repair.rs`), beside its moves and fenced
    /// by its token; an error is counted as the leader's own.
    pub(super) fn repair_in_background(&self, token: u64) {
        let (queue, shared) = (self.queue.clone(), Arc::clone(&self.shared));
        tokio::spawn(async move {
            if let Err(err) = crate::queue::repair::run(&queue, Some(token)).await {
                shared.counted(&err);
            }
        });
    }

    pub(super) fn lose(&mut self) {
        crate::trace::event!(info, queue = self.queue.name(), "lost");
        self.shared.leading.store(false, Ordering::Relaxed);
        self.role = Role::Candidate {
            retry_at: Instant::now(),
        };
    }

    /// The lease to ask for: as long as the quiet time ahead, within the two bounds.
    pub(super) fn lease_for(&self, now_ms: u64, next_ms: Option<u64>) -> Duration {
        let quiet = next_ms.map_or(self.options.idle_lease, |next| {
            Duration::from_millis(next.saturating_sub(now_ms))
        });
        quiet.clamp(
            self.options.busy_lease,
            self.options.idle_lease.max(self.options.busy_lease),
        )
    }

    pub(super) async fn renew(&mut self) -> Result<(), Error> {
        let Role::Leading { token, next_ms, .. } = self.role else {
            return Ok(());
        };
        let stats = self.stats();
        let (now_ms, _) = self.queue_now_estimate();
        let ttl = self.lease_for(now_ms, next_ms);
        let lags = rdb::Lags {
            p50_ms: stats.lag_p50_ms.unwrap_or(0),
            p99_ms: stats.lag_p99_ms.unwrap_or(0),
            promoted: stats.promoted,
            sum_ms: stats.lag_sum_ms,
        };
        let renewed = rdb::renew(self.queue.rdb(), token, ttl.as_millis(), &lags).await?;
        let local = Instant::now();
        let Some((now, new_expires)) = renewed else {
            self.lose();
            return Ok(());
        };
        self.last_map = Some(ClockMap {
            local,
            queue_ms: now,
        });
        if let Role::Leading {
            expires, renew_at, ..
        } = &mut self.role
        {
            *expires = new_expires;
            *renew_at = local + ttl / 2;
        }
        Ok(())
    }

    pub(super) fn queue_now_estimate(&self) -> (u64, Instant) {
        let local = Instant::now();
        match self.last_map {
            Some(map) => (
                map.queue_ms + local.saturating_duration_since(map.local).as_millis() as u64,
                local,
            ),
            None => (0, local),
        }
    }

    pub(super) async fn release(&mut self) {
        if let Role::Leading { token, .. } = self.role {
            let _ = rdb::release(self.queue.rdb(), token).await;
            self.lose();
        }
    }
}
