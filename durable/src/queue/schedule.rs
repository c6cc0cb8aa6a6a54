//! Scheduling, cancelling and rescheduling jobs by id: each a typed call of the layer
//! (`rdb::schedule`), single schedules merged with concurrent ones (`merge.rs`).

use super::{Queue, MAX_ID_BYTES, MAX_PAYLOAD_BYTES};
use crate::error::Error;
use crate::rdb::schedule::{self, Rescheduled};
use crate::when::When;
use std::time::Instant;

/// Jobs per script call when scheduling in a batch; calls are pipelined in groups.
pub(crate) const SCHEDULE_CHUNK: usize = 128;
const PIPELINE_CALLS: usize = 32;

/// How often `reschedule` looks again for a cold job that moved while it read it.
const COLD_TRIES: usize = 5;

impl Queue {
    /// Schedules job `id` with `payload`, due at or after `when`; returns `true` if it was
    /// added, `false` if a job with this id already exists (scheduled, ready, in flight
    /// or dead): scheduling is idempotent on the id, and the existing job is left as it
    /// is. Once a job completes (or is cancelled) its id is free again.
    ///
    /// A job due now or in the past is ready at once. The call is one atomic script of
    /// O(1) Redis work; see [`schedule_batch`](Queue::schedule_batch) for throughput.
    ///
    /// Calls made on one queue (or its clones) while another is on its way to Redis are
    /// sent together, up to 128 jobs in one script call, when that one answers: a call
    /// with no other on its way goes at once, and each caller still gets its own answer
    /// and its own error, as if alone (an id named by two callers is added once). A
    /// `When::After` delay counts from the call, not from when it was sent.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes disturbs no other call. The job may have
    /// been added or not (as with any call whose answer was not waited for), unless it
    /// was still waiting to be sent: then it is not sent.
    ///
    /// # Examples
    ///
    /// The payload is bytes; the job id is what makes a retried call safe:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "carts").await?;
    /// let payload = format!("cart=7;items={}", 3);
    /// let added = queue.schedule("abandoned-cart:7", payload, Duration::from_secs(3600)).await?;
    /// assert!(added);
    /// // A retry after a lost answer (or a second event) adds nothing:
    /// assert!(!queue.schedule("abandoned-cart:7", "cart=7", Duration::from_secs(3600)).await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_payload_too_large`], [`Error::is_redis`] when
    /// the call did not reach Redis or its answer was lost (calling again is safe: the id
    /// makes it idempotent), [`Error::is_garbage`] when the id's record is not ours.
    pub async fn schedule(
        &self,
        id: &str,
        payload: impl AsRef<[u8]>,
        when: impl Into<When>,
    ) -> Result<bool, Error> {
        let payload = payload.as_ref();
        check_job(id, payload)?;
        crate::queue::merge::schedule(self, id, payload, when.into()).await
    }

    /// Schedules many jobs: 128 per script call, calls pipelined 32 at a time. Returns,
    /// in order, whether each was added (see [`schedule`](Queue::schedule)); an id given
    /// twice is added once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::{Queue, When};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "renewals").await?;
    /// let ids: Vec<String> = (1..=1000).map(|n| format!("renewal:{n}")).collect();
    /// let in_a_day = When::After(Duration::from_secs(86_400));
    /// let added = queue
    ///     .schedule_batch(ids.iter().map(|id| (id.as_str(), b"renew", in_a_day)))
    ///     .await?;
    /// assert_eq!(added.iter().filter(|&&added| added).count(), 1000);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule`](Queue::schedule); every job is checked before any is sent. On an
    /// error from Redis, a prefix of the jobs may have been added: calling again with the
    /// same jobs is safe.
    pub async fn schedule_batch<'a, P>(
        &self,
        jobs: impl IntoIterator<Item = (&'a str, P, When)>,
    ) -> Result<Vec<bool>, Error>
    where
        P: AsRef<[u8]>,
    {
        let jobs: Vec<(&str, P, When)> = jobs.into_iter().collect();
        for (id, payload, _) in &jobs {
            check_job(id, payload.as_ref())?;
        }
        let jobs: Vec<(&str, &[u8], When)> = jobs
            .iter()
            .map(|(id, payload, when)| (*id, payload.as_ref(), *when))
            .collect();
        // One resend token for the batch's calls (rdb::schedule::resend_token).
        let token = schedule::resend_token(self.rdb());
        let calls: Vec<schedule::ScheduleCall> = jobs
            .chunks(SCHEDULE_CHUNK)
            .map(|chunk| schedule::ScheduleCall::new(self.max_attempts(), chunk, token.as_ref()))
            .collect();
        let mut added = Vec::new();
        let started = Instant::now();
        for group in calls.chunks(PIPELINE_CALLS) {
            added.extend(
                self.rdb()
                    .schedule_through_failover(started, move || {
                        schedule::schedule_pipelined(self.rdb(), group)
                    })
                    .await?,
            );
        }
        Ok(added)
    }

    /// Cancels job `id` wherever it is (scheduled, ready, in flight or dead); returns
    /// `true` if there was such a job. O(1) Redis work: a job already in the ready list
    /// is not searched for there, but marked so that the worker that pops it drops it.
    ///
    /// Cancelling a job in flight does not stop its handler; that delivery's ack then
    /// finds nothing to complete. Acks match a delivery by its number
    /// ([`Job::delivery`](crate::Job::delivery)), so even if the id is scheduled again
    /// and delivered before the old handler acks, the old ack completes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn cancel(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        Ok(schedule::cancel(self.rdb(), &[id]).await?[0])
    }

    /// Cancels many jobs: 128 per script call, calls pipelined 32 at a time. Returns, in
    /// order, whether each existed (an id given twice is cancelled once).
    ///
    /// # Errors
    ///
    /// As [`cancel`](Queue::cancel); every id is checked before any is sent.
    pub async fn cancel_batch<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<bool>, Error> {
        let mut calls: Vec<Vec<&str>> = Vec::new();
        for id in ids {
            check_id(id)?;
            match calls.last_mut() {
                Some(call) if call.len() < SCHEDULE_CHUNK => call.push(id),
                _ => calls.push(vec![id]),
            }
        }
        let mut removed = Vec::new();
        for group in calls.chunks(PIPELINE_CALLS) {
            removed.extend(schedule::cancel_pipelined(self.rdb(), group).await?);
        }
        Ok(removed)
    }

    /// Moves waiting job `id` to a new due time, keeping its payload and attempts;
    /// returns `true` if it was waiting (scheduled or ready, not yet delivered) and
    /// `false` if the id names no job, a job whose handler has it (in flight) or a dead
    /// job (see [`retry_dead`](Queue::retry_dead)). O(1) Redis work.
    ///
    /// # Examples
    ///
    /// An abandoned-cart reminder pushed back each time the customer comes back:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "carts").await?;
    /// queue.schedule("abandoned-cart:8", b"cart=8", Duration::from_secs(3600)).await?;
    /// // The customer is back: an hour from now, not from the first visit.
    /// assert!(queue.reschedule("abandoned-cart:8", Duration::from_secs(3600)).await?);
    /// assert!(!queue.reschedule("abandoned-cart:9", Duration::from_secs(3600)).await?, "no such job");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn reschedule(&self, id: &str, when: impl Into<When>) -> Result<bool, Error> {
        check_id(id)?;
        let when = when.into().arg();
        // A cold job is read from its segment and moved by a second call; if it moved in
        // between (loaded, cancelled), the first call is asked again.
        for _ in 0..COLD_TRIES {
            let (seg, window) = match schedule::reschedule(self.rdb(), id, &when).await? {
                Rescheduled::Moved => return Ok(true),
                Rescheduled::NotWaiting => return Ok(false),
                Rescheduled::Cold { seg, window } => (seg, window),
            };
            if crate::cold::view::thaw(self.rdb(), self.cold_tier(), id, seg, window, &when).await?
            {
                return Ok(true);
            }
        }
        Err(Error::store(
            "reschedule",
            id,
            format!("the cold job moved between each of {COLD_TRIES} tries"),
        ))
    }
}

pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::invalid_id(id, "empty"));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(Error::invalid_id(
            id,
            "longer than MAX_ID_BYTES (512 bytes)",
        ));
    }
    Ok(())
}

fn check_job(id: &str, payload: &[u8]) -> Result<(), Error> {
    check_id(id)?;
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::payload_too_large(
            id,
            payload.len(),
            MAX_PAYLOAD_BYTES,
        ));
    }
    Ok(())
}
