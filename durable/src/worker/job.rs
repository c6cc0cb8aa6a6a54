//! [`Job`]: one delivery of a job, as a worker's claim answered it; and [`Failed`]: what
//! became of a failed one.

use crate::contract::system_time;
use crate::rdb::deliver::{Delivered, Fell};
#[cfg(doc)]
use crate::Worker;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

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
    // The worker's acks, failure reports and extends read these directly.
    pub(crate) id: String,
    payload: Vec<u8>,
    pub(crate) attempt: u32,
    pub(crate) delivery: u64,
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

    /// Which delivery this is: 1 for the first, more after failures or lease ends (not
    /// after a delivery given back: [`Worker::give_back`]).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// This delivery's number, unique within the queue: each claim of a job gets the next
    /// one. [`Worker::ack`], [`Worker::fail`] and [`Worker::extend`] act only if this
    /// delivery still holds the job, so a late handler of a job cancelled and scheduled
    /// again under the same id can neither complete, fail nor keep the new delivery.
    pub fn delivery(&self) -> u64 {
        self.delivery
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

/// The job a claim handed over; or, if its id is not UTF-8, the id's bytes and the
/// delivery, for `Worker::quarantine`.
pub(crate) fn job(
    delivered: Delivered,
    now: u64,
    received: Instant,
) -> Result<Job, (Vec<u8>, u64)> {
    let Delivered {
        id,
        attempt,
        delivery,
        due_ms,
        payload,
    } = delivered;
    let id = match String::from_utf8(id) {
        Ok(id) => id,
        Err(err) => return Err((err.into_bytes(), delivery)),
    };
    Ok(Job {
        id,
        attempt,
        delivery,
        due_ms,
        payload,
        claimed_ms: now,
        received,
    })
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

impl From<Fell> for Failed {
    fn from(fell: Fell) -> Failed {
        match fell {
            Fell::Retried => Failed::Retried,
            Fell::Dead => Failed::Dead,
            Fell::LeaseLost => Failed::LeaseLost,
        }
    }
}
