//! [`Worker`]: takes ready jobs under a lease, and completes or fails them.
//!
//! Delivery is at least once. A claim moves each job from the ready list to the `flight`
//! sorted set, scored by its lease end on the queue's clock, and counts the attempt. An
//! ack removes the job only if this delivery still holds it. When a lease ends first
//! (the worker died, or stalled past it), the leader wakes at that very lease end (the
//! lease marker in `due`) and puts the job back in the ready list, or in the dead set
//! after its last attempt: redelivery comes at lease end plus the leader's reaction,
//! not at the next sweep of a poller.
//!
//! A worker waits for work with `BLMOVE ready ready LEFT LEFT 0` on a connection of its
//! own: it blocks until the list is not empty, moves nothing, and claims nothing, so a
//! worker that dies while waiting loses nothing, and an idle worker costs no commands.
//!
//! A worker that stops hands back the deliveries it will not finish
//! ([`give_back`](Worker::give_back)): they are ready again at once, not at their lease
//! end. [`Worker::run`] and [`Worker::run_until`] are in `run.rs`.

pub(crate) mod backoff;
pub(crate) mod job;
#[cfg(feature = "api")]
mod remote;
pub(crate) mod run;

use crate::contract::{Key, MAX_BATCH};
use crate::error::Error;
use crate::queue::Queue;
use crate::rdb::deliver as rdb;
use crate::worker::backoff::Backoff;
use crate::worker::job::{job, Failed, Job};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

/// Settings of a [`Worker`].
///
/// # Examples
///
/// The struct is `#[non_exhaustive]`: start from the defaults and change fields.
///
/// ```
/// use std::time::Duration;
/// use tickless_durable::{Backoff, Queue, Worker, WorkerOptions};
///
/// /// Workers for video transcoding: few at once, minutes each, retried every 5 minutes.
/// fn transcoder(queue: &Queue) -> Worker {
///     let mut options = WorkerOptions::default();
///     options.concurrency = 2;
///     options.lease = Duration::from_secs(10 * 60);
///     options.backoff = Backoff::fixed(Duration::from_secs(5 * 60));
///     queue.worker(options)
/// }
///
/// let defaults = WorkerOptions::default();
/// assert_eq!((defaults.concurrency, defaults.lease), (32, Duration::from_secs(30)));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// How long a delivery holds its job before it is delivered again (30 s).
    /// [`Worker::run`] extends the leases of running handlers every third of this, so
    /// only a worker that died (or stalled that long) loses its jobs. Kept within 10 ms
    /// and one day.
    pub lease: Duration,
    /// Handlers [`Worker::run`] runs at once (32). Kept within 1 and 10,000 (the most
    /// jobs one claim takes).
    pub concurrency: usize,
    /// Delay before each retry of a failed job: 1 s doubling up to 1 h, with full jitter
    /// (each delay anywhere from 0 to that), so jobs that failed together do not retry
    /// together.
    pub backoff: Backoff,
    /// How long [`Worker::run_until`] lets running handlers finish once its stop has
    /// come (25 s, Sidekiq's default: under the 30 s a container gets from Kubernetes
    /// before it is killed). Handlers still running then are cancelled and their jobs
    /// given back. Kept at most a day.
    pub shutdown_timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            lease: Duration::from_secs(30),
            concurrency: 32,
            backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(3600))
                .with_jitter(1.0),
            shutdown_timeout: Duration::from_secs(25),
        }
    }
}

/// Takes a queue's ready jobs: [`run`](Worker::run) a handler on each, or claim and
/// acknowledge by hand.
///
/// # Examples
///
/// ```no_run
/// use tickless_durable::{Queue, WorkerOptions};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
/// queue
///     .worker(WorkerOptions::default())
///     .run(|job| async move {
///         println!("order {} gets its review", job.id());
///         Ok::<(), std::io::Error>(())
///     })
///     .await
/// # }
/// ```
#[derive(Debug)]
pub struct Worker {
    pub(crate) queue: Queue,
    pub(crate) options: WorkerOptions,
    pub(crate) waiter: Option<redis::aio::MultiplexedConnection>,
}

pub(crate) type Wait = Pin<Box<dyn Future<Output = redis::RedisResult<()>> + Send>>;

impl Queue {
    /// A worker for this queue (see [`Worker`]).
    pub fn worker(&self, mut options: WorkerOptions) -> Worker {
        // A lease between 10 ms and a day: timers and the scripts' arithmetic stay sane.
        options.lease = options
            .lease
            .clamp(Duration::from_millis(10), Duration::from_secs(86_400));
        options.concurrency = options.concurrency.clamp(1, MAX_BATCH);
        // A deadline that `Instant` arithmetic can always hold.
        options.shutdown_timeout = options.shutdown_timeout.min(Duration::from_secs(86_400));
        Worker {
            queue: self.clone(),
            options,
            waiter: None,
        }
    }
}

impl Worker {
    /// Takes up to `max` ready jobs, waiting (blocked in Redis, not polling) until there
    /// is at least one. A `max` above 10,000 takes at most 10,000 (one script call's
    /// most).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`] when Redis cannot be reached, [`Error::is_garbage`].
    pub async fn claim(&mut self, max: usize) -> Result<Vec<Job>, Error> {
        loop {
            let jobs = self.try_claim(max).await?;
            if !jobs.is_empty() || max == 0 {
                return Ok(jobs);
            }
            self.wait().await?.await.map_err(|err| {
                self.waiter = None;
                Error::redis(self.queue.rdb().key(Key::Ready), "BLMOVE", err)
            })?;
        }
    }

    /// Takes up to `max` ready jobs without waiting; at most 10,000, as
    /// [`claim`](Worker::claim).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn try_claim(&self, max: usize) -> Result<Vec<Job>, Error> {
        Ok(self.claim_and_ack(&[], max).await?.1)
    }

    /// Completes `job`; returns `false` if this delivery no longer held it (its lease
    /// ended and it was, or will be, delivered again; or it was cancelled, perhaps
    /// scheduled again under the same id and delivered again: see [`Job::delivery`]).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`] (the ack may or may not have been applied: a job not acked
    /// is delivered again, which at-least-once allows), [`Error::is_garbage`].
    pub async fn ack(&self, job: &Job) -> Result<bool, Error> {
        let acks = [(job.id.clone(), job.delivery)];
        Ok(self.claim_and_ack(&acks, 0).await?.0 == 1)
    }

    /// Reports that `job`'s handler failed with `error`: it is retried after the backoff,
    /// or goes to the dead set if this was its last attempt.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn fail(&self, job: &Job, error: &str) -> Result<Failed, Error> {
        let backoff = self.options.backoff.delay_of(&job.id, job.attempt);
        let error: String = error.chars().take(1024).collect();
        let failed = rdb::fail(
            self.queue.rdb(),
            job.id.as_bytes(),
            job.delivery,
            backoff.as_millis(),
            &error,
            false,
        )
        .await?
        .into();
        crate::trace::event!(
            warn,
            queue = self.queue.name(),
            id = job.id(),
            attempt = job.attempt(),
            outcome = ?failed,
            error = error.as_str(),
            "failed"
        );
        Ok(failed)
    }

    /// Extends the leases of `jobs`' deliveries that still hold their job to a full lease
    /// from now; returns how many did. Sent 10,000 deliveries per script call at most (one
    /// call's most), so any number of jobs can be given.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`]; deliveries of the calls before the
    /// failing one were extended.
    pub async fn extend<'a>(
        &self,
        jobs: impl IntoIterator<Item = &'a Job>,
    ) -> Result<usize, Error> {
        self.extend_deliveries(&deliveries(jobs)).await
    }

    /// Hands back `jobs`' deliveries that still hold their job, without completing or
    /// failing them; returns how many did. Each is ready again at once (at the end of
    /// the ready list, due as it was), and its attempt is not counted: its next
    /// delivery has the same [`Job::attempt`]. For a worker that stops before it runs
    /// jobs it claimed ([`run_until`](Worker::run_until) does this itself). A delivery
    /// that no longer held its job (its lease ended, it was acked, failed, given back
    /// or cancelled) is left alone. Sent 10,000 deliveries per script call at most, as
    /// [`extend`](Worker::extend).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::{Queue, WorkerOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "thumbnails").await?;
    /// queue.schedule("photo:7", b"", Duration::ZERO).await?;
    /// let worker = queue.worker(WorkerOptions::default());
    /// let jobs = worker.try_claim(10).await?;
    ///
    /// // Shutting down before any of them ran: ready again for another worker, now.
    /// assert_eq!(worker.give_back(&jobs).await?, jobs.len());
    /// let again = worker.try_claim(10).await?;
    /// assert_eq!(again[0].attempt(), 1, "the given-back delivery is not counted");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`] (the jobs may or may not have been given back: those not are
    /// delivered again when their lease ends), [`Error::is_garbage`]; deliveries of the
    /// calls before the failing one were given back.
    pub async fn give_back<'a>(
        &self,
        jobs: impl IntoIterator<Item = &'a Job>,
    ) -> Result<usize, Error> {
        self.give_back_deliveries(&deliveries(jobs)).await
    }

    pub(crate) async fn give_back_deliveries(
        &self,
        deliveries: &[(&str, u64)],
    ) -> Result<usize, Error> {
        let given = rdb::give_back(self.queue.rdb(), deliveries).await?;
        if given > 0 {
            crate::trace::event!(debug, queue = self.queue.name(), given, "given back");
        }
        Ok(given)
    }

    pub(crate) async fn extend_deliveries(
        &self,
        deliveries: &[(&str, u64)],
    ) -> Result<usize, Error> {
        rdb::extend(self.queue.rdb(), self.options.lease.as_millis(), deliveries).await
    }

    pub(crate) async fn claim_and_ack(
        &self,
        acks: &[(String, u64)],
        max: usize,
    ) -> Result<(usize, Vec<Job>), Error> {
        let lease = self.options.lease.as_millis().max(1);
        // No more than the script takes (claim.lua refuses more, before any write).
        let max = max.min(MAX_BATCH);
        // Acks alone are by delivery, so idempotent; a claim is not. No `WAIT` after acks
        // (see `ConnectOptions::wait_for_replicas`): an ack lost with its master costs a
        // delivery more, which at-least-once allows.
        let claimed = rdb::claim(self.queue.rdb(), lease, max, acks, max == 0).await?;
        let received = Instant::now();
        let acked = claimed.acked;
        let mut jobs = Vec::with_capacity(claimed.jobs.len());
        for delivered in claimed.jobs {
            match job(delivered, claimed.now, received) {
                Ok(job) => jobs.push(job),
                Err((id, delivery)) => self.quarantine(&id, delivery).await,
            }
        }
        crate::trace::event!(
            debug,
            queue = self.queue.name(),
            acked,
            delivered = jobs.len(),
            "ack and deliver"
        );
        Ok((acked, jobs))
    }

    /// Sets aside a delivery this worker cannot hand to a handler (its id is not UTF-8
    /// text: written by something else than this crate): the job goes to the dead set
    /// with an error naming it, counted as quarantined, as the leader and the claim
    /// script do with a record they cannot read; the worker goes on. If the call fails,
    /// the job's lease ends and it comes back here.
    async fn quarantine(&self, id: &[u8], delivery: u64) {
        let shown = String::from_utf8_lossy(id);
        let error = format!(
            "garbage in {}: field {shown:?} is not UTF-8 text",
            self.queue.rdb().key(Key::Jobs)
        );
        match rdb::fail(self.queue.rdb(), id, delivery, 0, &error, true).await {
            Ok(_) => {
                crate::trace::event!(
                    warn,
                    queue = self.queue.name(),
                    id = %shown,
                    "quarantined a job whose id is not UTF-8"
                );
            }
            Err(err) => self.queue.report("worker", &err).await,
        }
    }

    /// A future that ends when the ready list is not empty.
    pub(crate) async fn wait(&mut self) -> Result<Wait, Error> {
        let ready = self.queue.rdb().key(Key::Ready).to_string();
        let mut conn = match self.waiter.clone() {
            Some(conn) => conn,
            None => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Duration::from_secs(5));
                let conn = self
                    .queue
                    .rdb()
                    .node_client()
                    .await
                    .map_err(|err| Error::redis(&ready, "find the queue's node", err))?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|err| Error::redis(&ready, "connect for BLMOVE", err))?;
                self.waiter = Some(conn.clone());
                conn
            }
        };
        Ok(Box::pin(async move {
            redis::cmd("BLMOVE")
                .arg(&ready)
                .arg(&ready)
                .arg("LEFT")
                .arg("LEFT")
                .arg(0)
                .query_async::<Option<Vec<u8>>>(&mut conn)
                .await
                .map(drop)
        }))
    }
}

/// The deliveries (id, delivery number) that `jobs` hold.
fn deliveries<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Vec<(&'a str, u64)> {
    jobs.into_iter()
        .map(|job| (job.id.as_str(), job.delivery))
        .collect()
}
