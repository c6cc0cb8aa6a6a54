//! [`Worker::run`] and [`Worker::run_until`]: a handler on every job, and a stop that
//! leaves no job to wait out its lease.
//!
//! A stop follows Sidekiq's (quiet, then stop within a timeout) and asynq's `Shutdown`:
//! the worker claims no more; running handlers may finish until
//! [`WorkerOptions::shutdown_timeout`], their acks and failure reports sent as they end
//! and their leases still extended; the jobs of a claim that was on its way when the stop
//! came are given back unstarted; at the deadline the handlers still running are
//! cancelled and their jobs given back (`give_back.lua`: ready at once, the attempt not
//! counted); the last acks are sent. Without a stop, a worker's deliveries wait out
//! their lease (30 s by default) and come back only if a leader runs.

use crate::error::{away, Error};
use crate::retry::Retry;
use crate::worker::job::Job;
use crate::worker::{Wait, Worker};
#[cfg(doc)]
use crate::WorkerOptions;
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// How long a finished job's ack may wait for a claim to ride on.
const ACK_DELAY: Duration = Duration::from_millis(5);

/// How long the handlers cancelled at a stop's deadline have to report that they ended:
/// a cancelled task ends when next polled, but one blocked outside an `.await` runs on,
/// and the stop does not wait for it.
const CANCEL_WAIT: Duration = Duration::from_millis(100);

/// What [`Worker::run_until`] did once its stop had come.
///
/// A clean stop has `cancelled` and `left_in_flight` at 0: every handler finished and
/// its ack or failure report reached Redis. `given_back` counts only the jobs of a claim
/// that was on its way when the stop came (and those of cancelled handlers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stopped {
    /// Handlers still running at the deadline ([`WorkerOptions::shutdown_timeout`]):
    /// cancelled, and their jobs given back.
    pub cancelled: usize,
    /// Deliveries given back, ready again at once with their attempt not counted: those
    /// of a claim that was on its way when the stop came (never started), and those of
    /// cancelled handlers.
    pub given_back: usize,
    /// Deliveries whose ack, failure report or give back did not reach Redis during the
    /// stop (it was away): delivered again when their lease ends, if a leader runs.
    pub left_in_flight: usize,
}

/// How a handler's run ended.
enum Outcome {
    Done,
    Failed(String),
    /// Cancelled at a stop's deadline (or with the runtime).
    Cancelled,
}

/// A running handler: the delivery it runs, and how to cancel it.
struct Running {
    delivery: u64,
    abort: AbortHandle,
}

/// What a running worker keeps of its deliveries.
#[derive(Default)]
struct Books {
    /// By job id: the latest delivery of an id whose handler runs.
    running: HashMap<String, Running>,
    /// Finished deliveries whose ack has not been sent, and when it is due.
    acks: Vec<(String, u64)>,
    ack_due: Option<Instant>,
    /// Deliveries of cancelled handlers, given back when the stop ends.
    back: Vec<(String, u64)>,
    /// Whether the stop has come.
    stopping: bool,
    stopped: Stopped,
}

impl Books {
    /// Takes note of how `job`'s handler ended.
    async fn settle(&mut self, worker: &Worker, job: Job, outcome: Outcome) {
        if self.running.get(&job.id).map(|r| r.delivery) == Some(job.delivery) {
            self.running.remove(&job.id);
        }
        match outcome {
            Outcome::Done => {
                self.acks.push((job.id, job.delivery));
                self.ack_due
                    .get_or_insert_with(|| Instant::now() + ACK_DELAY);
            }
            Outcome::Failed(error) => {
                // A lost answer leaves the job in flight: its lease ends and it is
                // delivered again.
                if let Err(err) = worker.fail(&job, &error).await {
                    worker.queue.report("worker", &err).await;
                    if self.stopping {
                        self.stopped.left_in_flight += 1;
                    }
                }
            }
            Outcome::Cancelled => {
                self.stopped.cancelled += 1;
                self.back.push((job.id, job.delivery));
            }
        }
    }

    /// Gives `deliveries` back at once.
    async fn give_back(&mut self, worker: &Worker, deliveries: &[(&str, u64)]) {
        match worker.give_back_deliveries(deliveries).await {
            Ok(given) => self.stopped.given_back += given,
            Err(err) => {
                worker.queue.report("worker", &err).await;
                self.stopped.left_in_flight += deliveries.len();
            }
        }
    }
}

impl Worker {
    /// Runs `handler` on every job, up to `concurrency` at once, until an error that
    /// retrying cannot cure ([`Error::is_garbage`]): [`run_until`](Worker::run_until)
    /// with a stop that never comes. A handler's `Ok` acks the job; an `Err` or a panic
    /// fails it (retry after backoff, or dead after the last attempt). Acks ride on the
    /// next claim, waiting at most 5 ms for one. Leases of running handlers are extended
    /// every third of the lease. When Redis goes away (down, restarting, loading), the
    /// worker tries again every 100 ms, so it resumes within about that of Redis
    /// answering; after other errors it waits 100 ms doubling to 2 s. Deliveries whose
    /// ack was lost are delivered again.
    ///
    /// To stop a worker without leaving its jobs in flight, use
    /// [`run_until`](Worker::run_until). Dropping this future (or aborting its task)
    /// stops it at once: handlers already running finish on their own, and their jobs,
    /// whose acks are no longer sent, wait out their lease (30 s by default) in flight
    /// before a leader delivers them again.
    ///
    /// At least once means a handler can run more than once for a job: when a worker dies
    /// after the handler's effect but before the ack, or stalls past its lease. Make
    /// handlers idempotent (the job id is a natural key) or check for the effect first.
    ///
    /// # Errors
    ///
    /// [`Error::is_garbage`] when the queue's keys hold something else.
    pub async fn run<H, F, E>(self, handler: H) -> Result<(), Error>
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.run_until(handler, std::future::pending::<()>())
            .await
            .map(drop)
    }

    /// As [`run`](Worker::run), until `shutdown` ends; then stops without leaving a job
    /// to wait out its lease, as Sidekiq's and asynq's workers stop:
    ///
    /// 1. It claims no more jobs. The jobs of a claim that was on its way are given back
    ///    before any handler starts on them.
    /// 2. Running handlers may finish until [`WorkerOptions::shutdown_timeout`] (25 s)
    ///    has passed: their acks and failure reports are sent as they end, and their
    ///    leases are still extended.
    /// 3. At that deadline, handlers still running are cancelled (their futures dropped
    ///    at their next `.await`) and their jobs given back. A handler blocked outside an
    ///    `.await`, or work it spawned, runs on while its job is delivered again: at
    ///    least once allows it, as for a worker that dies.
    /// 4. The acks not yet sent are sent, and it returns what it did.
    ///
    /// A job given back ([`Worker::give_back`]) is ready again at once, and its attempt
    /// is not counted: being stopped is not a failure of the job (so a job whose handler
    /// always outlasts the timeout is never dead-lettered by stops alone). `shutdown` is
    /// any future: `tokio::signal::ctrl_c()`, a channel's receiver, a cancellation
    /// token's `cancelled()`. It returns within the timeout, plus 100 ms for cancelled
    /// handlers to end and the last calls to Redis.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tickless_durable::{Queue, WorkerOptions};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
    /// // In a service: `tokio::signal::ctrl_c()`, or a SIGTERM handler, in its place.
    /// let (stop, shutdown) = tokio::sync::oneshot::channel::<()>();
    /// let worker = tokio::spawn(queue.worker(WorkerOptions::default()).run_until(
    ///     |job| async move {
    ///         println!("order {} gets its review", job.id());
    ///         Ok::<(), std::io::Error>(())
    ///     },
    ///     shutdown,
    /// ));
    ///
    /// let _ = stop.send(());
    /// let stopped = worker.await.expect("the worker's task")?;
    /// assert_eq!(stopped.cancelled, 0, "every handler finished in time");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_garbage`] when the queue's keys hold something else (then it returns
    /// at once, as [`run`](Worker::run) does). Redis away during the stop is no error:
    /// [`Stopped::left_in_flight`] counts what it kept from Redis.
    pub async fn run_until<H, F, E, S>(mut self, handler: H, shutdown: S) -> Result<Stopped, Error>
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
        S: Future,
    {
        let handler = Arc::new(handler);
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Job, Outcome)>();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut books = Books::default();
        let mut maybe_ready = true;
        let mut wait: Option<Wait> = None;
        let mut extend_at = Instant::now() + self.options.lease / 3;
        let mut retry = Retry::new();
        let concurrency = self.options.concurrency;
        // When running handlers are cancelled; set when the stop comes.
        let mut deadline: Option<Instant> = None;
        loop {
            if let Some(at) = deadline {
                if books.running.is_empty() || Instant::now() >= at {
                    break;
                }
            }
            // Acks wait up to ACK_DELAY for the next claim to ride on, which saves a
            // script call per wave of jobs; a worker with nothing else to do (or
            // stopping) flushes them then.
            let capacity = concurrency.saturating_sub(books.running.len());
            let acks_due = books.ack_due.is_some_and(|due| Instant::now() >= due);
            let claiming = deadline.is_none() && maybe_ready && capacity > 0;
            if acks_due || claiming {
                let asked = if claiming { capacity } else { 0 };
                match self.claim_and_ack(&books.acks, asked).await {
                    Ok((_, jobs)) => {
                        retry.reset();
                        books.acks.clear();
                        books.ack_due = None;
                        if jobs.len() < asked {
                            maybe_ready = false;
                        }
                        if deadline.is_none() && !jobs.is_empty() && ended(shutdown.as_mut()).await
                        {
                            deadline = Some(self.stopping(&mut books));
                        }
                        if deadline.is_some() {
                            // The stop came while the claim was on its way.
                            let deliveries: Vec<(&str, u64)> =
                                jobs.iter().map(|j| (j.id.as_str(), j.delivery)).collect();
                            books.give_back(&self, &deliveries).await;
                            continue;
                        }
                        if books.running.is_empty() && !jobs.is_empty() {
                            extend_at = Instant::now() + self.options.lease / 3;
                        }
                        for job in jobs {
                            let (id, delivery) = (job.id.clone(), job.delivery);
                            let abort =
                                spawn_handler(self.queue.name(), &handler, job, done_tx.clone());
                            books.running.insert(id, Running { delivery, abort });
                        }
                    }
                    Err(err) => {
                        self.queue.report("worker", &err).await;
                        if err.is_garbage() {
                            return Err(err);
                        }
                        let pause = Instant::now() + retry.after(&err);
                        tokio::select! {
                            _ = tickless::sleep_until(deadline.map_or(pause, |at| at.min(pause))) => {}
                            _ = shutdown.as_mut(), if deadline.is_none() => {
                                deadline = Some(self.stopping(&mut books));
                            }
                        }
                    }
                }
                continue;
            }
            if deadline.is_none() && wait.is_none() && capacity > 0 {
                match self.wait().await {
                    Ok(future) => wait = Some(future),
                    Err(err) => {
                        self.queue.report("worker", &err).await;
                        tokio::select! {
                            _ = tickless::sleep(retry.after(&err)) => {}
                            _ = shutdown.as_mut() => {
                                deadline = Some(self.stopping(&mut books));
                            }
                        }
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
            let extending = !books.running.is_empty();
            let stopping = deadline.is_some();
            tokio::select! {
                done = done_rx.recv() => {
                    let Some(first) = done else { continue };
                    let mut finished = vec![first];
                    while let Ok(more) = done_rx.try_recv() {
                        finished.push(more);
                    }
                    for (job, outcome) in finished {
                        books.settle(&self, job, outcome).await;
                    }
                }
                result = waiting, if !stopping => {
                    wait = None;
                    maybe_ready = true;
                    if let Err(err) = result {
                        self.waiter = None;
                        tickless::sleep(retry.after_error(away(&err))).await;
                    }
                }
                _ = tickless::sleep_until(books.ack_due.unwrap_or(extend_at)), if books.ack_due.is_some() => {}
                _ = tickless::sleep_until(extend_at), if extending => {
                    extend_at = Instant::now() + self.options.lease / 3;
                    let deliveries: Vec<(&str, u64)> =
                        books.running.iter().map(|(id, r)| (id.as_str(), r.delivery)).collect();
                    if let Err(err) = self.extend_deliveries(&deliveries).await {
                        self.queue.report("worker", &err).await;
                    }
                }
                _ = shutdown.as_mut(), if !stopping => {
                    // Waiting in BLMOVE moves nothing: dropping the wait loses nothing.
                    wait = None;
                    deadline = Some(self.stopping(&mut books));
                }
                _ = tickless::sleep_until(deadline.unwrap_or(extend_at)), if stopping => {}
            }
        }
        Ok(self.finish(books, done_rx).await)
    }
}

// Stopping: the grace period, then what is still running given back.
impl Worker {
    /// The stop has come: its deadline.
    fn stopping(&self, books: &mut Books) -> Instant {
        books.stopping = true;
        crate::trace::event!(
            info,
            queue = self.queue.name(),
            running = books.running.len(),
            timeout_ms = self.options.shutdown_timeout.as_millis() as u64,
            "stopping"
        );
        Instant::now() + self.options.shutdown_timeout
    }

    /// The end of a stop: cancels the handlers still running, gives their jobs back, and
    /// sends the acks not yet sent.
    async fn finish(
        self,
        mut books: Books,
        mut done_rx: mpsc::UnboundedReceiver<(Job, Outcome)>,
    ) -> Stopped {
        for running in books.running.values() {
            running.abort.abort();
        }
        // A handler that ended as the deadline came is acked or failed as it says.
        let waited = Instant::now() + CANCEL_WAIT;
        while !books.running.is_empty() {
            tokio::select! {
                done = done_rx.recv() => match done {
                    Some((job, outcome)) => books.settle(&self, job, outcome).await,
                    None => break,
                },
                _ = tickless::sleep_until(waited) => break,
            }
        }
        // Blocked outside an `.await`: its job is given back all the same.
        books.stopped.cancelled += books.running.len();
        let back: Vec<(String, u64)> = books
            .running
            .drain()
            .map(|(id, running)| (id, running.delivery))
            .chain(std::mem::take(&mut books.back))
            .collect();
        if !back.is_empty() {
            let deliveries: Vec<(&str, u64)> =
                back.iter().map(|(id, d)| (id.as_str(), *d)).collect();
            books.give_back(&self, &deliveries).await;
        }
        if !books.acks.is_empty() {
            if let Err(err) = self.claim_and_ack(&books.acks, 0).await {
                self.queue.report("worker", &err).await;
                books.stopped.left_in_flight += books.acks.len();
            }
        }
        let stopped = books.stopped;
        crate::trace::event!(
            info,
            queue = self.queue.name(),
            cancelled = stopped.cancelled,
            given_back = stopped.given_back,
            left_in_flight = stopped.left_in_flight,
            "stopped"
        );
        stopped
    }
}

/// Whether `shutdown` has ended, without waiting for it.
async fn ended<S: Future>(mut shutdown: Pin<&mut S>) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(shutdown.as_mut().poll(cx).is_ready())).await
}

/// Runs `handler` on `job` in a task of its own, which a stop can cancel; its outcome is
/// sent on `done`.
fn spawn_handler<H, F, E>(
    queue: &str,
    handler: &Arc<H>,
    job: Job,
    done: mpsc::UnboundedSender<(Job, Outcome)>,
) -> AbortHandle
where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let work = tokio::spawn(crate::trace::in_job_span(
        queue,
        job.id(),
        job.attempt(),
        handler(job.clone()),
    ));
    let abort = work.abort_handle();
    tokio::spawn(async move {
        let outcome = match work.await {
            Ok(Ok(())) => Outcome::Done,
            Ok(Err(error)) => Outcome::Failed(error.to_string()),
            Err(join) if join.is_panic() => Outcome::Failed("handler panicked".to_string()),
            Err(_) => Outcome::Cancelled,
        };
        let _ = done.send((job, outcome));
    });
    abort
}
