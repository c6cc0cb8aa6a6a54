//! [`Queue`]: a handle to one queue's keys, for scheduling, cancelling and looking.

pub(crate) mod merge;
pub(crate) mod recur;
pub(crate) mod repair;

use crate::error::Error;
use crate::rdb::schedule::{self, Rescheduled};
use crate::rdb::{ConnectOptions, Rdb};
use crate::when::{CatchUp, When};
use std::sync::Arc;
use std::time::Instant;

/// The largest payload a job may carry: 1 MiB. Larger ones are refused with an error for
/// which [`Error::is_payload_too_large`] is true; keep large data elsewhere and put its
/// key in the payload.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The longest job id, in bytes: 512.
pub const MAX_ID_BYTES: usize = 512;

/// Jobs per script call when scheduling in a batch; calls are pipelined in groups.
pub(crate) const SCHEDULE_CHUNK: usize = 128;
const PIPELINE_CALLS: usize = 32;

/// How often `reschedule` looks again for a cold job that moved while it read it.
const COLD_TRIES: usize = 5;

/// A handle to one durable queue: schedule, cancel and reschedule jobs by id, and look at
/// the queue. Cheap to clone; clones share one multiplexed connection, which reconnects
/// when a call finds it broken.
///
/// All keys of a queue start with `tickless:{<name>}:`: the braces make the name a hash
/// tag, so on Redis Cluster the whole queue lives in one slot and different queues spread
/// over the cluster.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::Queue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
/// let added = queue.schedule("order:42", b"5 stars", Duration::from_secs(48 * 3600)).await?;
/// assert!(added);
/// // The same id again is the same job: nothing is added.
/// assert!(!queue.schedule("order:42", b"5 stars", Duration::from_secs(1)).await?);
/// assert!(queue.cancel("order:42").await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    /// The connections and key names, and how calls are run.
    rdb: Rdb,
    max_attempts: u32,
    catch_up: CatchUp,
    /// Concurrent single schedules, merged (merge.rs).
    merger: crate::queue::merge::Merger,
    /// Where far jobs go (cold.rs): the leader moves and loads them, `reschedule` and
    /// `job` read a cold job's record from it (none without feature `cold`).
    cold: Option<crate::cold::ColdTier>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("url", &self.url())
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// Connects to the Redis server at `url` and opens the queue `name`.
    ///
    /// The first connection is tried once, with a 5 s timeout, so that a wrong address
    /// fails fast. After that, a call that finds the connection broken starts a new one:
    /// a call made while Redis is down fails at once with [`Error::is_redis`] (calling
    /// again later is the answer; leaders and workers do, every 100 ms). The queue's
    /// keys are checked for the types this crate writes.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_url`] for a URL that does not parse,
    /// [`Error::is_invalid_queue_name`] for an empty or too long name or one with braces,
    /// [`Error::is_connect`] when the server cannot be reached, and
    /// [`Error::is_garbage`] when a key of the queue holds something else, and
    /// [`Error::is_permission`] when the Redis user may not read the queue's keys or
    /// publish on its channel (checked here, so that no job is stored that no leader
    /// would hear of).
    ///
    /// # Examples
    ///
    /// ```
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = Queue::connect("redis://127.0.0.1:1/", "orders").await.unwrap_err();
    /// assert!(err.is_connect());
    /// assert!(err.to_string().contains("127.0.0.1:1"));
    /// # }
    /// ```
    pub async fn connect(url: &str, name: &str) -> Result<Queue, Error> {
        Queue::connect_with(&ConnectOptions::new(url), name).await
    }

    /// [`connect`](Queue::connect) with [`ConnectOptions`]: a cluster, a CA for TLS, `WAIT`
    /// for replicas.
    ///
    /// # Errors
    ///
    /// As [`connect`](Queue::connect).
    pub async fn connect_with(options: &ConnectOptions, name: &str) -> Result<Queue, Error> {
        let queue = Queue {
            inner: Arc::new(Inner {
                rdb: options.open_queue(name).await?,
                max_attempts: 5,
                catch_up: CatchUp::default(),
                merger: Default::default(),
                cold: None,
            }),
        };
        Ok(queue)
    }

    /// The same queue with another number of attempts for jobs it schedules from now on
    /// (default 5): after that many deliveries without success a job goes to the dead
    /// set. At least 1.
    pub fn with_max_attempts(&self, attempts: u32) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.max_attempts = attempts.max(1));
        queue
    }

    /// The same queue with another policy for occurrences of recurring schedules it sets
    /// from now on ([`every`](Queue::every), [`cron`](Queue::cron)) that came due while
    /// no leader ran: see [`CatchUp`] (default [`CatchUp::Skip`]).
    pub fn with_catch_up(&self, catch_up: CatchUp) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.catch_up = catch_up);
        queue
    }

    /// A queue of its own (the same connections), changed by `change`; its merger of
    /// single schedules is its own, since a merged call carries one queue's settings.
    fn change(&mut self, change: impl FnOnce(&mut Inner)) {
        let inner = &self.inner;
        let mut new = Inner {
            rdb: inner.rdb.clone(),
            max_attempts: inner.max_attempts,
            catch_up: inner.catch_up,
            merger: Default::default(),
            cold: inner.cold.clone(),
        };
        change(&mut new);
        self.inner = Arc::new(new);
    }

    #[cfg(feature = "cold")]
    pub(crate) fn with_cold(&self, cold: Option<crate::cold::ColdTier>) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.cold = cold);
        queue
    }

    /// The queue's cold tier, if it has one (see `with_cold_tier`).
    pub(crate) fn cold_tier(&self) -> Option<&crate::cold::ColdTier> {
        self.inner.cold.as_ref()
    }

    pub(crate) fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    pub(crate) fn catch_up(&self) -> CatchUp {
        self.inner.catch_up
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        self.inner.rdb.name()
    }

    /// The URL this queue was opened with, its password shown as `***`
    /// (`redis://app:***@host:6379/`): fit for logs and screens.
    pub fn url(&self) -> &str {
        self.inner.rdb.url()
    }

    /// The queue's link to Redis: every script call goes through it.
    pub(crate) fn rdb(&self) -> &Rdb {
        &self.inner.rdb
    }

    pub(crate) fn merger(&self) -> &crate::queue::merge::Merger {
        &self.inner.merger
    }

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
                self.rdb().schedule_through_failover(started, move || {
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
            if crate::cold::view::thaw(self.rdb(), self.cold_tier(), id, seg, window, &when).await? {
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

impl ConnectOptions {
    /// Connects and opens the queue `name`: see [`Queue::connect`].
    ///
    /// # Errors
    ///
    /// As [`Queue::connect`]; [`Error::is_invalid_url`] also for a cluster without seeds
    /// or with seeds of different users or schemes, and for TLS options that do not parse
    /// (a CA or client certificate that is not PEM, a client key that is no PEM private
    /// key) or are given with a `redis://` URL.
    pub async fn connect(&self, name: &str) -> Result<Queue, Error> {
        Queue::connect_with(self, name).await
    }
}

#[cfg(feature = "cold")]
impl Queue {
    /// The same queue with a cold tier: its leader moves jobs due beyond the tier's
    /// horizon out of Redis into the tier's store, and loads them back before they are
    /// due; [`reschedule`](Queue::reschedule) and [`job`](Queue::job) read a cold job
    /// from the store. Every leader of the queue needs the tier (a leader without one
    /// moves and loads nothing, so cold jobs would wait for one that has it); schedulers
    /// and workers do not.
    pub fn with_cold_tier(&self, tier: crate::ColdTier) -> Queue {
        self.with_cold(Some(tier))
    }
}

impl Queue {
    /// The queue's cold windows, earliest first (empty for a queue without a cold tier):
    /// what the store holds, as Redis counts it.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn cold_windows(&self) -> Result<Vec<crate::ColdWindow>, Error> {
        crate::cold::view::windows(self.rdb()).await
    }
}
