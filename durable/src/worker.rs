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

use super::contract::{system_time, Key, MAX_BATCH};
use super::error::away;
use super::error::Error;
use super::queue::Queue;
use super::reply::Reply;
use super::retry::Retry;
use super::scripts::scripts;
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long to wait before a failed job's next attempt.
///
/// A delay grows (or not) with the attempt, and with [`with_jitter`](Backoff::with_jitter)
/// is drawn from a range below it, so that jobs which failed together (a database down
/// for a minute) do not all come back in the same millisecond. The draw is a hash of
/// the job's id and attempt: different jobs spread over the range, and the same job and
/// attempt always get the same delay, so tests (on a manual clock) are deterministic. A
/// worker's backoff is [`WorkerOptions::backoff`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickless_durable::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
/// assert_eq!(backoff.delay(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay(3), Duration::from_secs(4));
/// assert_eq!(backoff.delay(10), Duration::from_secs(60));
///
/// // Full jitter: anywhere from 0 to the delay, by a hash of the id and attempt.
/// let jittered = backoff.with_jitter(1.0);
/// let a = jittered.delay_of("order:1", 3);
/// let b = jittered.delay_of("order:2", 3);
/// assert!(a <= Duration::from_secs(4) && b <= Duration::from_secs(4));
/// assert_ne!(a, b);
/// assert_eq!(a, jittered.delay_of("order:1", 3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    exponential: bool,
    /// The share of the delay that jitter may take off, in millionths (0: none).
    jitter_ppm: u32,
}

/// Millionths in one: [`Backoff`]'s jitter unit.
const PPM: u32 = 1_000_000;

impl Backoff {
    /// The same delay before every retry.
    pub fn fixed(delay: Duration) -> Backoff {
        Backoff {
            base: delay,
            max: delay,
            exponential: false,
            jitter_ppm: 0,
        }
    }

    /// `base` before the second attempt, doubling each time, never more than `max`.
    pub fn exponential(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max,
            exponential: true,
            jitter_ppm: 0,
        }
    }

    /// The same backoff with jitter: each delay is drawn from
    /// `[(1 - fraction) × delay, delay]`. `1.0` is "full jitter" (anywhere from 0 to the
    /// delay), `0.0` none; a fraction outside `0.0..=1.0` (or NaN) is clamped into it
    /// (NaN to 0).
    pub fn with_jitter(self, fraction: f64) -> Backoff {
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        Backoff {
            jitter_ppm: (fraction * f64::from(PPM)).round() as u32,
            ..self
        }
    }

    /// The delay after failed attempt `attempt` (1 for the first delivery), before jitter:
    /// the most that [`delay_of`](Backoff::delay_of) returns.
    pub fn delay(&self, attempt: u32) -> Duration {
        if !self.exponential {
            return self.base;
        }
        let doublings = attempt.saturating_sub(1).min(62);
        self.base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// The delay after job `id`'s failed attempt `attempt`, jitter taken off: what
    /// [`Worker::fail`] waits. Without jitter it is [`delay`](Backoff::delay).
    pub fn delay_of(&self, id: &str, attempt: u32) -> Duration {
        let delay = self.delay(attempt);
        if self.jitter_ppm == 0 {
            return delay;
        }
        // The share taken off: uniform in [0, jitter] by a hash of (id, attempt).
        let draw = spread(id, attempt) as f64 / u64::MAX as f64;
        let off = draw * f64::from(self.jitter_ppm) / f64::from(PPM);
        delay.mul_f64(1.0 - off)
    }
}

/// A well-spread 64-bit hash of a job id and attempt (FNV-1a, then a splitmix64
/// finish): the same on every machine and in every release, unlike `std`'s hashers.
fn spread(id: &str, attempt: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes().chain(attempt.to_le_bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

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

/// One delivery of a job.
///
/// # Examples
///
/// Claiming and acknowledging by hand ([`Worker::run`] does this for a handler):
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{Queue, WorkerOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "reviews").await?;
/// queue.schedule("order:42", b"5 stars", Duration::ZERO).await?; // due now: ready at once
///
/// let mut worker = queue.worker(WorkerOptions::default());
/// for job in worker.claim(10).await? {
///     assert_eq!((job.id(), job.payload(), job.attempt()), ("order:42", &b"5 stars"[..], 1));
///     assert!(job.claimed_at() >= job.due());
///     println!("{} handled {:?} after its due time", job.id(), job.lag());
///     assert!(worker.ack(&job).await?, "this delivery still held the job");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Job {
    id: String,
    payload: Vec<u8>,
    attempt: u32,
    due_ms: u64,
    claimed_ms: u64,
    received: Instant,
}

impl Job {
    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The job's payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Which delivery this is: 1 for the first, more after failures or lease ends.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the job was due, on the queue's clock.
    pub fn due(&self) -> SystemTime {
        system_time(self.due_ms)
    }

    /// When this delivery was claimed, on the queue's clock (never before [`due`]).
    ///
    /// [`due`]: Job::due
    pub fn claimed_at(&self) -> SystemTime {
        system_time(self.claimed_ms)
    }

    /// How late the job is now: from its due time to the claim on the queue's clock, plus
    /// the time since the claim's answer arrived here. Called at the start of a handler,
    /// it is the due-to-handler lag.
    pub fn lag(&self) -> Duration {
        Duration::from_millis(self.claimed_ms.saturating_sub(self.due_ms)) + self.received.elapsed()
    }
}

/// What became of a failed delivery (see [`Worker::fail`]).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{Failed, Queue, WorkerOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "emails").await?.with_max_attempts(2);
/// queue.schedule("welcome:7", b"ann@example.com", Duration::ZERO).await?;
/// let mut worker = queue.worker(WorkerOptions::default());
///
/// let first = worker.claim(1).await?.remove(0);
/// let failed = worker.fail(&first, "smtp: 451 try again later").await?;
/// assert_eq!(failed, Failed::Retried); // attempt 1 of 2: again after the backoff
/// match failed {
///     Failed::Retried => println!("{} retried after the backoff", first.id()),
///     Failed::Dead => println!("{} is in the dead set", first.id()),
///     Failed::LeaseLost => println!("{} is no longer ours", first.id()),
///     _ => {}
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failed {
    /// It will be delivered again after the backoff.
    Retried,
    /// It was the last attempt: the job is in the dead set.
    Dead,
    /// This delivery no longer held the job (its lease ended, or it was cancelled).
    LeaseLost,
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
    /// ended and it was, or will be, delivered again; or it was cancelled).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`] (the ack may or may not have been applied: a job not acked
    /// is delivered again, which at-least-once allows), [`Error::is_garbage`].
    pub async fn ack(&self, job: &Job) -> Result<bool, Error> {
        let acks = [(job.id.clone(), job.attempt)];
        Ok(self.claim_and_ack(&acks, 0).await?.0 == 1)
    }

    /// Reports that `job`'s handler failed with `error`: it is retried after the backoff,
    /// or goes to the dead set if this was its last attempt.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn fail(&self, job: &Job, error: &str) -> Result<Failed, Error> {
        let attempt = job.attempt.to_string();
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
                    attempt.as_bytes(),
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

    /// Extends the leases of deliveries still in flight to a full lease from now;
    /// returns how many were.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn extend<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Result<usize, Error> {
        let lease = self.options.lease.as_millis().to_string();
        let mut args: Vec<&[u8]> = vec![lease.as_bytes()];
        for id in ids {
            args.push(id.as_bytes());
        }
        let reply = self.queue.call(&scripts().extend, &args).await?;
        Ok(reply.int(1)?.max(0) as usize)
    }

    async fn claim_and_ack(
        &self,
        acks: &[(String, u32)],
        max: usize,
    ) -> Result<(usize, Vec<Job>), Error> {
        let lease = self.options.lease.as_millis().max(1).to_string();
        // No more than the script takes (claim.lua refuses more, before any write).
        let max = max.min(MAX_BATCH);
        let max_arg = max.to_string();
        let count = acks.len().to_string();
        let attempts: Vec<String> = acks.iter().map(|(_, a)| a.to_string()).collect();
        let mut args: Vec<&[u8]> = vec![lease.as_bytes(), max_arg.as_bytes(), count.as_bytes()];
        for ((id, _), attempt) in acks.iter().zip(&attempts) {
            args.push(id.as_bytes());
            args.push(attempt.as_bytes());
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
        let mut jobs = Vec::with_capacity(reply.len().saturating_sub(2) / 4);
        let mut i = 2;
        while i + 3 < reply.len() {
            jobs.push(job(&mut reply, i, now, received)?);
            i += 4;
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
        let mut running: HashMap<String, u32> = HashMap::new();
        let mut acks: Vec<(String, u32)> = Vec::new();
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
                            running.insert(job.id.clone(), job.attempt);
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
                        if running.get(&job.id) == Some(&job.attempt) {
                            running.remove(&job.id);
                        }
                        match result {
                            Ok(()) => {
                                acks.push((job.id, job.attempt));
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
                    let ids: Vec<&str> = running.keys().map(String::as_str).collect();
                    if let Err(err) = self.extend(ids).await {
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

fn job(reply: &mut Reply, i: usize, now: u64, received: Instant) -> Result<Job, Error> {
    Ok(Job {
        id: reply.string(i)?,
        attempt: u32::try_from(reply.int(i + 1)?).unwrap_or(u32::MAX),
        due_ms: reply.int(i + 2)?.max(0) as u64,
        payload: reply.take_bytes(i + 3)?,
        claimed_ms: now,
        received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn no_jitter_waits_the_whole_delay() {
        let backoff = Backoff::exponential(S, 60 * S);
        for attempt in 1..10 {
            assert_eq!(backoff.delay_of("a", attempt), backoff.delay(attempt));
        }
        assert_eq!(Backoff::fixed(S).delay_of("a", 7), S);
        // NaN is no jitter; fractions outside 0..=1 are clamped.
        assert_eq!(backoff.with_jitter(f64::NAN), backoff);
        assert_eq!(backoff.with_jitter(-1.0), backoff);
        assert_eq!(backoff.with_jitter(7.0), backoff.with_jitter(1.0));
    }

    #[test]
    fn full_jitter_spreads_jobs_that_failed_together() {
        let backoff = WorkerOptions::default().backoff;
        let delays: Vec<Duration> = (0..1_000)
            .map(|i| backoff.delay_of(&format!("order:{i}"), 3))
            .collect();
        // Attempt 3 of 1 s doubling: at most 4 s, anywhere from 0.
        assert!(delays.iter().all(|d| *d <= 4 * S), "{delays:?}");
        let distinct: std::collections::HashSet<u128> =
            delays.iter().map(Duration::as_millis).collect();
        assert!(
            distinct.len() > 600,
            "only {} distinct delays",
            distinct.len()
        );
        let mean = delays.iter().sum::<Duration>() / 1_000;
        assert!(
            mean > 1800 * Duration::from_millis(1) && mean < 2200 * Duration::from_millis(1),
            "{mean:?}"
        );
        let quarter = delays.iter().filter(|d| **d < S).count();
        assert!(
            (200..300).contains(&quarter),
            "{quarter} of 1,000 below 1 s"
        );
    }

    #[test]
    fn jitter_is_a_function_of_id_and_attempt() {
        let backoff = Backoff::fixed(10 * S).with_jitter(0.25);
        for i in 0..100 {
            let id = format!("job-{i}");
            let d = backoff.delay_of(&id, 2);
            assert_eq!(
                d,
                backoff.delay_of(&id, 2),
                "same id and attempt, same delay"
            );
            assert!(d >= 7500 * Duration::from_millis(1) && d <= 10 * S, "{d:?}");
        }
        assert_ne!(backoff.delay_of("job-1", 2), backoff.delay_of("job-1", 3));
    }
}
