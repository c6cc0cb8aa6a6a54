//! The dispatcher: for each queue routed to a target, a loop that claims due jobs as a
//! [`Worker`] does and POSTs each to the target, then acks or fails the delivery.
//!
//! A target's limits hold across every queue routed to it: its semaphore bounds the
//! requests in flight (a job is claimed only with a permit in hand, so no job waits
//! claimed for a slot), its limiter the requests per second, its client's timeout each
//! request. The lease of a claim covers the timeout and the wait for the limiter, so a
//! slow target never loses a delivery to its lease while the request still runs.
//!
//! A delivered job's ack joins the queue's next ack call ([`send_acks`]), which leaves as
//! soon as the one before it has answered: one Redis call per round trip, not per job,
//! as a [`Worker`]'s acks ride its claims. An ack lost there (a crash, Redis down, a
//! stop past its grace) leaves the job to be delivered again at its lease end: at least
//! once.
//!
//! A stop ([`Dispatchers::stop`](super::Dispatchers::stop)) moves a [`Stage`] along: at
//! `Stopping` the claim loops end at their next wait for a permit and the ack senders
//! at their first empty batch; at `Aborted` the deliveries still in flight drop their
//! requests.

use super::guard::{Guard, Resolver};
use super::metrics::{HookMetrics, Outcome};
use super::sign::{signature, webhook_id};
use super::Target;
use crate::queue::Queue;
use crate::worker::job::Job;
use crate::worker::{Worker, WorkerOptions};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

/// The most jobs one claim takes.
const MAX_CLAIM: usize = 100;
/// The most acks one call sends (a call stays short; more wait for the next).
const MAX_ACKS: usize = 500;
/// The most bytes of a failed answer's body kept in the job's error.
const EXCERPT_BYTES: usize = 200;
/// What a header's value percent-encodes: controls, space, `%`; non-ASCII always.
const HEADER_ESCAPED: &AsciiSet = &CONTROLS.add(b' ').add(b'%');

/// A target as the dispatcher uses it: its client (connections reused), its limits.
pub(crate) struct Live {
    pub(crate) target: Target,
    guard: Arc<Guard>,
    client: reqwest::Client,
    limiter: Option<governor::DefaultDirectRateLimiter>,
    /// One per request in flight: a delivery holds its permit to its end (ack pushed or
    /// fail sent), so all of them back means no delivery is left.
    pub(crate) permits: Arc<Semaphore>,
}

impl Live {
    pub(crate) fn new(
        target: Target,
        guard: Arc<Guard>,
        tls: rustls::ClientConfig,
    ) -> Result<Live, String> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .dns_resolver(Resolver(guard.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(target.timeout)
            .connect_timeout(target.timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(target.concurrency)
            .user_agent(concat!(
                "tickless-durable/",
                env!("CARGO_PKG_VERSION"),
                " webhooks"
            ))
            .build()
            .map_err(|e| format!("webhook target {}: {e}", target.name))?;
        let limiter = target
            .rate
            .map(|rate| governor::RateLimiter::direct(governor::Quota::per_second(rate)));
        let permits = Arc::new(Semaphore::new(target.concurrency));
        Ok(Live {
            target,
            guard,
            client,
            limiter,
            permits,
        })
    }

    /// The lease a delivery needs: the request's timeout, the wait for the limiter when
    /// a whole claim is queued behind it, and room for the ack.
    fn lease(&self) -> Duration {
        let queued = match self.target.rate {
            Some(rate) => Duration::from_secs_f64(MAX_CLAIM as f64 / f64::from(rate.get())),
            None => Duration::ZERO,
        };
        self.target.timeout + queued + Duration::from_secs(30)
    }
}

/// Where a stop has got to, in the order it goes ([`watch`]ed by every task).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Stage {
    Running,
    /// No more claims; deliveries in flight go on, and their acks are sent.
    Stopping,
    /// Deliveries still in flight drop their requests (their jobs are delivered again at
    /// their lease end).
    Aborted,
}

/// A queue's acks on their way to Redis ([`send_acks`]).
#[derive(Default)]
pub(crate) struct Acks {
    pending: Mutex<Vec<(String, u64)>>,
    ready: Notify,
    closed: AtomicBool,
}

impl Acks {
    fn push(&self, id: &str, delivery: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.push((id.to_owned(), delivery));
        self.ready.notify_one();
    }

    /// [`send_acks`] ends once it has sent every ack pushed before this.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
    }
}

/// Sends `queue`'s acks as they come, every ack that came during a call in the next
/// one, until [`Acks::close`] and then the last of them.
pub(crate) async fn send_acks(queue: Queue, acks: Arc<Acks>) {
    let worker = queue.worker(WorkerOptions::default());
    loop {
        let batch =
            std::mem::take(&mut *acks.pending.lock().unwrap_or_else(PoisonError::into_inner));
        if batch.is_empty() {
            // `close` stores before it notifies, and a notification waits for the next
            // `notified` when none is waiting: a close never goes unseen.
            if acks.closed.load(Ordering::Acquire) {
                return;
            }
            acks.ready.notified().await;
            continue;
        }
        for chunk in batch.chunks(MAX_ACKS) {
            if let Err(err) = worker.claim_and_ack(chunk, 0).await {
                queue.report("webhooks", &err).await;
            }
        }
    }
}

/// Claims `queue`'s due jobs and delivers them to `live`'s target until `stage` leaves
/// [`Stage::Running`] (a claim under way ends first, and its jobs are delivered); acks go
/// through `acks`.
pub(crate) async fn run(
    queue: Queue,
    live: Arc<Live>,
    metrics: HookMetrics,
    acks: Arc<Acks>,
    mut stage: watch::Receiver<Stage>,
) {
    let options = WorkerOptions {
        lease: live.lease(),
        concurrency: live.target.concurrency,
        backoff: live.target.backoff,
        ..WorkerOptions::default()
    };
    let mut claimer = queue.worker(options.clone());
    let worker = Arc::new(queue.worker(options));
    loop {
        // A job is claimed only with a permit in hand: this loop takes one (waiting), then
        // every other free one (not waiting), and claims as many jobs; the permits left
        // over go back. Other claim loops of the target wait meanwhile, and take the
        // permits as deliveries end.
        let first = tokio::select! {
            biased;
            _ = stage.wait_for(|s| *s != Stage::Running) => return,
            permit = live.permits.clone().acquire_owned() => permit,
        };
        let Ok(first) = first else {
            return;
        };
        let mut permits = vec![first];
        while permits.len() < MAX_CLAIM {
            match live.permits.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        let jobs = match claimer.claim(permits.len()).await {
            Ok(jobs) => jobs,
            Err(err) => {
                drop(permits);
                queue.report("webhooks", &err).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        for (job, permit) in jobs.into_iter().zip(permits) {
            let delivery = Delivery {
                queue: queue.clone(),
                worker: worker.clone(),
                live: live.clone(),
                metrics: metrics.clone(),
                acks: acks.clone(),
            };
            let mut stage = stage.clone();
            tokio::spawn(async move {
                tokio::select! {
                    biased;
                    _ = stage.wait_for(|s| *s == Stage::Aborted) => {}
                    () = delivery.deliver(job, permit) => {}
                }
            });
        }
    }
}

struct Delivery {
    queue: Queue,
    worker: Arc<Worker>,
    live: Arc<Live>,
    metrics: HookMetrics,
    acks: Arc<Acks>,
}

impl Delivery {
    async fn deliver(self, job: Job, _permit: OwnedSemaphorePermit) {
        if let Some(limiter) = &self.live.limiter {
            limiter.until_ready().await;
        }
        let (outcome, status, took, error) = self.send(&job).await;
        let name = &self.live.target.name;
        let queue = self.queue.name();
        let attempt = job.attempt();
        self.metrics
            .record(queue, name, attempt, (outcome, status), took, &error);
        let done = match outcome {
            Outcome::Delivered => {
                self.acks.push(job.id(), job.delivery());
                Ok(())
            }
            Outcome::Gone => self
                .worker
                .fail_delivery(job.id(), job.delivery(), Duration::ZERO, true, &error)
                .await
                .map(drop),
            _ => self.worker.fail(&job, &error).await.map(drop),
        };
        // The lease ends, and the job is delivered again: at least once.
        if let Err(err) = done {
            self.queue.report("webhooks", &err).await;
        }
    }

    /// One request: what came of it, the status (0: none), how long it took, and the
    /// error for the job (empty when delivered). Errors name the target, never its URL
    /// (which may carry a credential) or a secret.
    async fn send(&self, job: &Job) -> (Outcome, u16, Option<Duration>, String) {
        let target = &self.live.target;
        let name = &target.name;
        if let Err(why) = self.live.guard.check(&target.url) {
            let error = format!("webhook target {name} refused, no request sent: {why}");
            return (Outcome::Refused, 0, None, error);
        }
        let id = webhook_id(self.queue.name(), job.id());
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let request = self
            .live
            .client
            .post(target.url.clone())
            .header("content-type", &target.content_type)
            .header(
                "webhook-signature",
                signature(&target.secrets, &id, timestamp, job.payload()),
            )
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp)
            .header("tickless-queue", header_text(self.queue.name()))
            .header("tickless-job-id", header_text(job.id()))
            .header("tickless-delivery", job.delivery())
            .header("tickless-attempt", job.attempt())
            .body(job.payload().to_vec());
        let started = std::time::Instant::now();
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(err) if err.is_timeout() => {
                let error = format!(
                    "webhook target {name} did not answer within {:?}",
                    target.timeout
                );
                return (Outcome::Timeout, 0, Some(started.elapsed()), error);
            }
            Err(err) => {
                let error = format!("cannot reach webhook target {name}: {}", chain(err));
                return (Outcome::Connect, 0, None, error);
            }
        };
        let status = response.status();
        if status.is_success() {
            return (
                Outcome::Delivered,
                status.as_u16(),
                Some(started.elapsed()),
                String::new(),
            );
        }
        let mut body = Vec::new();
        while body.len() < EXCERPT_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        let took = Some(started.elapsed());
        body.truncate(EXCERPT_BYTES);
        let excerpt: String = String::from_utf8_lossy(&body)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let redirect = if status.is_redirection() {
            " (redirects are not followed)"
        } else {
            ""
        };
        let error = format!(
            "webhook target {name} answered {status}{redirect}: {}",
            excerpt.trim()
        );
        let outcome = if status == reqwest::StatusCode::GONE {
            Outcome::Gone
        } else {
            Outcome::Status
        };
        (outcome, status.as_u16(), took, error)
    }
}

/// A request error and its causes, without the URL.
fn chain(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` as a header's value: visible ASCII as it is, the rest percent-encoded (UTF-8).
fn header_text(text: &str) -> String {
    utf8_percent_encode(text, HEADER_ESCAPED).to_string()
}
