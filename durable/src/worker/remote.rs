//! What the HTTP API (feature `api`) does as a worker on behalf of one over HTTP: a
//! claim whose wait ends at a deadline, and a failure named by id and delivery.

use super::{Failed, Job, Worker};
use crate::contract::Key;
use crate::error::Error;
use crate::rdb::deliver as rdb;
use std::time::Duration;
use tokio::time::Instant;

impl Worker {
    /// As [`claim`](Worker::claim), but waits for a ready job only until `deadline`
    /// (then answers none): the HTTP API's long-poll claim. Only the wait is cut short;
    /// a claim script once sent is always read, so no job is claimed and then dropped.
    pub(crate) async fn claim_until(
        &mut self,
        max: usize,
        deadline: Instant,
    ) -> Result<Vec<Job>, Error> {
        loop {
            let jobs = self.try_claim(max).await?;
            if !jobs.is_empty() || max == 0 || Instant::now() >= deadline {
                return Ok(jobs);
            }
            let waited = tokio::time::timeout_at(deadline, async {
                let ready = self.queue.rdb().key(Key::Ready).to_string();
                self.wait()
                    .await?
                    .await
                    .map_err(|err| Error::redis(&ready, "BLMOVE", err))
            })
            .await;
            match waited {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    self.waiter = None;
                    return Err(err);
                }
                // The blocked BLMOVE ends with its connection, dropped here.
                Err(_) => {
                    self.waiter = None;
                    return Ok(Vec::new());
                }
            }
        }
    }

    /// As [`fail`](Worker::fail) for delivery `delivery` of job `id`, without its
    /// [`Job`], retried after `delay` (not the worker's backoff), or dead now whatever its
    /// attempts (`dead`): the HTTP API's fail.
    pub(crate) async fn fail_delivery(
        &self,
        id: &str,
        delivery: u64,
        delay: Duration,
        dead: bool,
        error: &str,
    ) -> Result<Failed, Error> {
        let error: String = error.chars().take(1024).collect();
        if dead {
            return Ok(
                rdb::fail_dead(self.queue.rdb(), id.as_bytes(), delivery, &error)
                    .await?
                    .into(),
            );
        }
        Ok(rdb::fail(
            self.queue.rdb(),
            id.as_bytes(),
            delivery,
            delay.as_millis(),
            &error,
            false,
        )
        .await?
        .into())
    }
}
