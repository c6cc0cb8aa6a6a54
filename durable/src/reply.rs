//! The records the scripts keep, as the crate shows them (a script's answer is read in
//! [`rdb`](crate::rdb)).

use crate::contract::system_time;
use crate::error::Error;
use std::time::SystemTime;

/// Where a job is.
///
/// # Examples
///
/// An operator's look at a job that failed its last attempt, and a second chance:
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{JobState, Queue, WorkerOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "exports").await?.with_max_attempts(1);
/// queue.schedule("export:9", b"s3://bucket/9.csv", Duration::ZERO).await?;
/// let mut worker = queue.worker(WorkerOptions::default());
/// let job = worker.claim(1).await?.remove(0);
/// worker.fail(&job, "access denied").await?; // its only attempt
///
/// let info = queue.job("export:9").await?.expect("dead jobs are kept");
/// match info.state {
///     JobState::Dead => println!("{} died: {:?}", info.id, info.last_error),
///     JobState::InFlight => println!("{} is running until {:?}", info.id, info.lease_ends),
///     state => println!("{} is {state:?}, due {:?}", info.id, info.due),
/// }
/// assert_eq!(info.state, JobState::Dead);
/// assert!(queue.retry_dead("export:9").await?);
/// assert_eq!(queue.job("export:9").await?.unwrap().state, JobState::Ready);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobState {
    /// Waiting in a bucket of the Redis wheel, or in the staged window just before its
    /// due time.
    Scheduled,
    /// Due, in the ready list, waiting for a worker.
    Ready,
    /// Delivered to a worker whose lease has not ended.
    InFlight,
    /// Failed on its last attempt; kept in the dead set until retried or cancelled.
    Dead,
    /// Due far ahead, kept in the queue's cold tier (a store, not Redis memory) until its
    /// window comes near (see `ColdTier`).
    Cold,
}

/// What the queue holds for one job (see [`Queue::job`](crate::Queue::job)).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{JobState, Queue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "surveys").await?;
/// queue.schedule("survey:42", b"order 42", Duration::from_secs(7 * 86_400)).await?;
///
/// let info = queue.job("survey:42").await?.expect("just scheduled");
/// assert_eq!(info.state, JobState::Scheduled);
/// assert_eq!((info.attempts, info.max_attempts), (0, 5));
/// assert_eq!(info.payload, b"order 42");
/// assert!(queue.job("survey:43").await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's id.
    pub id: String,
    /// Where it is.
    pub state: JobState,
    /// Its due time on the queue's clock (for a retry: when the retry is due).
    pub due: SystemTime,
    /// Deliveries so far.
    pub attempts: u32,
    /// Deliveries allowed before it goes to the dead set.
    pub max_attempts: u32,
    /// When its current lease ends, if in flight.
    pub lease_ends: Option<SystemTime>,
    /// The error of its last failed attempt, if any.
    pub last_error: Option<String>,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Parses a `jobs` record (`due|loc|attempts|max|skip|payload`, lib/jobs.lua's I1; loc `s`
/// may carry a delivery number, `s<n>`); `None` for a tombstone.
pub(crate) fn parse_record(
    key: &str,
    id: &str,
    record: &[u8],
    last_error: Option<String>,
    staged: bool,
    lease: Option<f64>,
) -> Result<Option<JobInfo>, Error> {
    let bad = || Error::garbage(key, format!("field {id:?} is not a job record"));
    let fields: Vec<&[u8]> = record.splitn(6, |&b| b == b'|').collect();
    let [due, loc, attempts, max_attempts, _skip, payload] = fields[..] else {
        return Err(bad());
    };
    let number = |field: &[u8]| -> Result<u64, Error> {
        std::str::from_utf8(field)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)
    };
    let (due, attempts, max_attempts) = (number(due)?, number(attempts)?, number(max_attempts)?);
    let payload = payload.to_vec();
    let (loc, delivery) = match loc {
        [b's', delivery @ ..] => (b's', delivery),
        [loc] => (*loc, &[][..]),
        _ => return Err(bad()),
    };
    if !delivery.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let state = match loc {
        b'x' => return Ok(None),
        b'd' => JobState::Dead,
        b'0'..=b'9' => JobState::Scheduled,
        b's' if staged => JobState::Scheduled,
        b's' if lease.is_some() => JobState::InFlight,
        b's' => JobState::Ready,
        _ => return Err(bad()),
    };
    Ok(Some(JobInfo {
        id: id.to_string(),
        state,
        due: system_time(due),
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        max_attempts: u32::try_from(max_attempts).unwrap_or(u32::MAX),
        lease_ends: lease.map(|ms| system_time(ms.max(0.0) as u64)),
        last_error,
        payload,
    }))
}
