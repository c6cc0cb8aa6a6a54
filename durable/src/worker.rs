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
//! A worker that stops before it runs jobs it claimed hands them back
//! ([`give_back`](Worker::give_back)): they are ready again at once, not at their lease
//! end.

use super::backoff::Backoff;
use super::contract::{Key, MAX_BATCH};
use super::error::away;
use super::error::Error;
use super::job::{job, Failed, Job};
use super::queue::Queue;
use super::retry::Retry;
use super::scripts::scripts;
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
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
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            lease: Duration::from_secs(30),
            concurrency: 32,
            backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(3600))
                .with_jitter(1.0),
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
    queue: Queue,
    options: WorkerOptions,
    waiter: Option<redis::aio::MultiplexedConnection>,
}

type Wait = Pin<Box<dyn Future<Output = redis::RedisResult<()>> + Send>>;

/// How long a finished job's ack may wait for a claim to ride on.
const ACK_DELAY: Duration = Duration::from_millis(5);

impl Queue {
    /// A worker for this queue (see [`Worker`]).
    pub fn worker(&self, mut options: WorkerOptions) -> Worker {
        // A lease between 10 ms and a day: timers and the scripts' arithmetic stay sane.
        options.lease = options
            .lease
            .clamp(Duration::from_millis(10), Duration::from_secs(86_400));
        options.concurrency = options.concurrency.clamp(1, MAX_BATCH);
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
                Error::redis(self.queue.key(Key::Ready), "BLMOVE", err)
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
        let delivery = job.delivery.to_string();
        let backoff = self
            .options
            .backoff
            .delay_of(&job.id, job.attempt)
            .as_millis()
            .to_string();
        let error: String = error.chars().take(1024).collect();
        let reply = self
            .queue
            .call(
                &scripts().fail,
                &[
                    job.id.as_bytes(),
                    delivery.as_bytes(),
                    backoff.as_bytes(),
                    error.as_bytes(),
                ],
            )
            .await?;
        let failed = match reply.int(1)? {
            1 => Failed::Retried,
            2 => Failed::Dead,
            _ => Failed::LeaseLost,
        };
        super::trace::event!(
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
        let deliveries: Vec<(&str, u64)> = jobs
            .into_iter()
            .map(|job| (job.id.as_str(), job.delivery))
            .collect();
        self.extend_deliveries(&deliveries).await
    }

    /// Hands back `jobs`' deliveries that still hold their job, without completing or
    /// failing them; returns how many did. Each is ready again at once (at the end of
    /// the ready list, due as it was), and its attempt is not counted: its next
    /// delivery has the same [`Job::attempt`]. For a worker that stops before it runs
    /// jobs it claimed. A delivery
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
        let deliveries: Vec<(&str, u64)> = jobs
            .into_iter()
            .map(|job| (job.id.as_str(), job.delivery))
            .collect();
        self.give_back_deliveries(&deliveries).await
    }

    pub(crate) async fn give_back_deliveries(
        &self,
        deliveries: &[(&str, u64)],
    ) -> Result<usize, Error> {
        let mut given = 0;
        for chunk in deliveries.chunks(MAX_BATCH) {
            let numbers: Vec<String> = chunk.iter().map(|(_, d)| d.to_string()).collect();
            let mut args: Vec<&[u8]> = Vec::with_capacity(2 * chunk.len());
            for ((id, _), number) in chunk.iter().zip(&numbers) {
                args.push(id.as_bytes());
                args.push(number.as_bytes());
            }
            let reply = self.queue.call(&scripts().give_back, &args).await?;
            given += reply.int(1)?.max(0) as usize;
        }
        if given > 0 {
            super::trace::event!(debug, queue = self.queue.name(), given, "given back");
        }
        Ok(given)
    }

    async fn extend_deliveries(&self, deliveries: &[(&str, u64)]) -> Result<usize, Error> {
        let lease = self.options.lease.as_millis().to_string();
        let mut extended = 0;
        for chunk in deliveries.chunks(MAX_BATCH) {
            let numbers: Vec<String> = chunk.iter().map(|(_, d)| d.to_string()).collect();
            let mut args: Vec<&[u8]> = Vec::with_capacity(1 + 2 * chunk.len());
            args.push(lease.as_bytes());
            for ((id, _), number) in chunk.iter().zip(&numbers) {
                args.push(id.as_bytes());
                args.push(number.as_bytes());
            }
            let reply = self.queue.call(&scripts().extend, &args).await?;
            extended += reply.int(1)?.max(0) as usize;
        }
        Ok(extended)
    }

    async fn claim_and_ack(
        &self,
        acks: &[(String, u64)],
        max: usize,
    ) -> Result<(usize, Vec<Job>), Error> {
        let lease = self.options.lease.as_millis().max(1).to_string();
        // No more than the script takes (claim.lua refuses more, before any write).
        let max = max.min(MAX_BATCH);
        let max_arg = max.to_string();
        let count = acks.len().to_string();
        let numbers: Vec<String> = acks.iter().map(|(_, d)| d.to_string()).collect();
        let mut args: Vec<&[u8]> = vec![lease.as_bytes(), max_arg.as_bytes(), count.as_bytes()];
        for ((id, _), number) in acks.iter().zip(&numbers) {
            args.push(id.as_bytes());
            args.push(number.as_bytes());
        }
        // Acks alone are by delivery, so idempotent; a claim is not. No `WAIT` after acks
        // (see `ConnectOptions::wait_for_replicas`): an ack lost with its master costs a
        // delivery more, which at-least-once allows.
        let mut reply = self
            .queue
            .call_retrying(&scripts().claim, &args, max == 0)
            .await?;
        let received = Instant::now();
        let now = reply.int(0)?.max(0) as u64;
        let acked = reply.int(1)?.max(0) as usize;
        let mut jobs = Vec::with_capacity(reply.len().saturating_sub(2) / 5);
        let mut i = 2;
        while i + 4 < reply.len() {
            match job(&mut reply, i, now, received)? {
                Ok(job) => jobs.push(job),
                Err((id, delivery)) => self.quarantine(&id, delivery).await,
            }
            i += 5;
        }
        super::trace::event!(
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
            self.queue.key(Key::Jobs)
        );
        let delivery = delivery.to_string();
        let args: [&[u8]; 5] = [id, delivery.as_bytes(), b"0", error.as_bytes(), b"q"];
        match self.queue.call(&scripts().fail, &args).await {
            Ok(_) => {
                super::trace::event!(
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
    async fn wait(&mut self) -> Result<Wait, Error> {
        let ready = self.queue.key(Key::Ready).to_string();
        let mut conn = match self.waiter.clone() {
            Some(conn) => conn,
            None => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Duration::from_secs(5));
                let conn = self
                    .queue
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

    /// Runs `handler` on every job, up to `concurrency` at once, until an error that
    /// retrying cannot cure ([`Error::is_garbage`]). A handler's `Ok` acks the job; an `Err` or a
    /// panic fails it (retry after backoff, or dead after the last attempt). Acks ride on
    /// the next claim, waiting at most 5 ms for one. Leases of
    /// running handlers are extended every third of the lease. When Redis goes away
    /// (down, restarting, loading), the worker tries again every 100 ms, so it resumes
    /// within about that of Redis answering; after other errors it waits 100 ms doubling
    /// to 2 s. Deliveries whose ack was lost are delivered again.
    ///
    /// To stop a worker, drop this future (or abort its task): handlers already running
    /// finish on their own, and jobs whose ack had not reached Redis are delivered again
    /// when their lease ends.
    ///
    /// At least once means a handler can run more than once for a job: when a worker dies
    /// after the handler's effect but before the ack, or stalls past its lease. Make
    /// handlers idempotent (the job id is a natural key) or check for the effect first.
    ///
    /// # Errors
    ///
    /// [`Error::is_garbage`] when the queue's keys hold something else.
    pub async fn run<H, F, E>(mut self, handler: H) -> Result<(), Error>
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let handler = Arc::new(handler);
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Job, Result<(), String>)>();
        let mut running: HashMap<String, u64> = HashMap::new();
        let mut acks: Vec<(String, u64)> = Vec::new();
        let mut maybe_ready = true;
        let mut wait: Option<Wait> = None;
        let mut extend_at = Instant::now() + self.options.lease / 3;
        let mut retry = Retry::new();
        let concurrency = self.options.concurrency;
        // Acks wait up to ACK_DELAY for the next claim to ride on, which saves a script
        // call per wave of jobs; a worker with nothing else to do flushes them then.
        let mut ack_due: Option<Instant> = None;
        loop {
            let capacity = concurrency.saturating_sub(running.len());
            let acks_due = ack_due.is_some_and(|due| Instant::now() >= due);
            if acks_due || (maybe_ready && capacity > 0) {
                let asked = if maybe_ready { capacity } else { 0 };
                match self.claim_and_ack(&acks, asked).await {
                    Ok((_, jobs)) => {
                        retry.reset();
                        acks.clear();
                        ack_due = None;
                        if jobs.len() < asked {
                            maybe_ready = false;
                        }
                        if running.is_empty() && !jobs.is_empty() {
                            extend_at = Instant::now() + self.options.lease / 3;
                        }
                        for job in jobs {
                            running.insert(job.id.clone(), job.delivery);
                            spawn_handler(self.queue.name(), &handler, job, done_tx.clone());
                        }
                    }
                    Err(err) => {
                        self.queue.report("worker", &err).await;
                        if err.is_garbage() {
                            return Err(err);
                        }
                        tickless::sleep(retry.after(&err)).await;
                    }
                }
                continue;
            }
            if wait.is_none() && capacity > 0 {
                match self.wait().await {
                    Ok(future) => wait = Some(future),
                    Err(err) => {
                        self.queue.report("worker", &err).await;
                        tickless::sleep(retry.after(&err)).await;
                        maybe_ready = true;
                        continue;
                    }
                }
            }
            let waiting = async {
                match wait.as_mut() {
                    Some(future) => future.await,
                    None => std::future::pending().await,
                }
            };
            let extending = !running.is_empty();
            tokio::select! {
                done = done_rx.recv() => {
                    let Some(first) = done else { continue };
                    let mut finished = vec![first];
                    while let Ok(more) = done_rx.try_recv() {
                        finished.push(more);
                    }
                    for (job, result) in finished {
                        if running.get(&job.id) == Some(&job.delivery) {
                            running.remove(&job.id);
                        }
                        match result {
                            Ok(()) => {
                                acks.push((job.id, job.delivery));
                                ack_due.get_or_insert_with(|| Instant::now() + ACK_DELAY);
                            }
                            Err(error) => {
                                // A lost answer leaves the job in flight: its lease ends
                                // and it is delivered again.
                                if let Err(err) = self.fail(&job, &error).await {
                                    self.queue.report("worker", &err).await;
                                }
                            }
                        }
                    }
                }
                result = waiting => {
                    wait = None;
                    maybe_ready = true;
                    if let Err(err) = result {
                        self.waiter = None;
                        tickless::sleep(retry.after_error(away(&err))).await;
                    }
                }
                _ = tickless::sleep_until(ack_due.unwrap_or(extend_at)), if ack_due.is_some() => {}
                _ = tickless::sleep_until(extend_at), if extending => {
                    extend_at = Instant::now() + self.options.lease / 3;
                    let deliveries: Vec<(&str, u64)> =
                        running.iter().map(|(id, d)| (id.as_str(), *d)).collect();
                    if let Err(err) = self.extend_deliveries(&deliveries).await {
                        self.queue.report("worker", &err).await;
                    }
                }
            }
        }
    }
}

fn spawn_handler<H, F, E>(
    queue: &str,
    handler: &Arc<H>,
    job: Job,
    done: mpsc::UnboundedSender<(Job, Result<(), String>)>,
) where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let work = tokio::spawn(super::trace::in_job_span(queue, &job, handler(job.clone())));
    tokio::spawn(async move {
        let result = match work.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(join) if join.is_panic() => Err("handler panicked".to_string()),
            Err(_) => Err("handler was cancelled".to_string()),
        };
        let _ = done.send((job, result));
    });
}
