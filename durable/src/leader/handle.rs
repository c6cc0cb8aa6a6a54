//! What a running [`Leader`](crate::Leader) shares with its handle: whether it leads,
//! its counts and its promotion lags.

use crate::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) leading: AtomicBool,
    pub(crate) token: AtomicU64,
    pub(crate) promoted: AtomicU64,
    pub(crate) leaderships: AtomicU64,
    pub(crate) lags: Mutex<Lags>,
    /// Calls that failed (the candidate backed off and went on), and the last one's error.
    pub(crate) errors: AtomicU64,
    pub(crate) last_error: Mutex<Option<String>>,
    /// Rounds failed in a row, up to now (0: the last round worked), and the error of
    /// the last of them, which [`LeaderHandle::stop`] returns.
    pub(crate) failing: AtomicU64,
    pub(crate) failure: Mutex<Option<Error>>,
    /// Whether a round has worked in this process yet.
    pub(crate) worked_once: AtomicBool,
    /// Jobs moved to the cold tier, and loaded back from it.
    pub(crate) cold_moved: AtomicU64,
    pub(crate) cold_loaded: AtomicU64,
}

impl Shared {
    /// Counts `err`, keeps its message as the last error and it as the reason the leader
    /// is not working; the number of rounds failed in a row.
    pub(crate) fn failed(&self, err: Error) -> u64 {
        self.counted(&err);
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(err);
        self.failing.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Counts `err` (of a call beside the rounds: the takeover's repair) and keeps its
    /// message as the last error.
    pub(crate) fn counted(&self, err: &Error) {
        // The count moves while the message is being set, under its lock: whoever sees
        // the count grow and then asks for the message gets this one.
        let mut last = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        *last = Some(err.to_string());
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// A round worked: the rounds failed in a row before it (0 if none), and whether it
    /// is the first that worked in this process.
    pub(crate) fn worked(&self) -> (u64, bool) {
        let failing = self.failing.swap(0, Ordering::Relaxed);
        if failing > 0 {
            *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        (failing, !self.worked_once.swap(true, Ordering::Relaxed))
    }

    /// The error that kept the leader from working, if its last round failed.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        if self.failing.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Promotion lags in whole milliseconds, 0..=60,000 (the last counts anything later),
/// and their exact sum.
#[derive(Debug, Default)]
pub(crate) struct Lags {
    counts: Vec<u64>,
    total: u64,
    sum_ms: u64,
}

impl Lags {
    const MAX_MS: usize = 60_000;

    pub(crate) fn record(&mut self, ms: i64) {
        if self.counts.is_empty() {
            self.counts = vec![0; Lags::MAX_MS + 1];
        }
        let i = usize::try_from(ms.max(0)).unwrap_or(0).min(Lags::MAX_MS);
        self.counts[i] += 1;
        self.total += 1;
        self.sum_ms = self.sum_ms.saturating_add(u64::try_from(ms).unwrap_or(0));
    }

    fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((self.total - 1) as f64 * q).round() as u64;
        let mut seen = 0;
        for (ms, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen > rank {
                return Some(ms as u64);
            }
        }
        Some(Lags::MAX_MS as u64)
    }
}

/// What one leader process saw: see [`LeaderHandle::stats`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{LeaderOptions, Queue, WorkerOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "payouts").await?;
/// let leader = queue.leader(LeaderOptions::default()).spawn();
/// queue.schedule("payout:42", b"acct 42", Duration::from_millis(100)).await?;
/// let _jobs = queue.worker(WorkerOptions::default()).claim(1).await?; // the leader moved it
///
/// let stats = leader.stats();
/// assert!(stats.leading, "the only candidate leads");
/// println!(
///     "token {}, {} jobs promoted, lag p50 {:?} ms, p99 {:?} ms",
///     stats.token, stats.promoted, stats.lag_p50_ms, stats.lag_p99_ms,
/// );
/// leader.stop().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderStats {
    /// Whether this process holds the lease now.
    pub leading: bool,
    /// The fencing token of its current or last leadership (0: never led).
    pub token: u64,
    /// How many times it became leader.
    pub leaderships: u64,
    /// Jobs it moved to the ready list.
    pub promoted: u64,
    /// Median lag from due time to the ready list, in ms, over its promotions.
    pub lag_p50_ms: Option<u64>,
    /// 99th percentile of the same.
    pub lag_p99_ms: Option<u64>,
    /// The sum of the same lags, in ms (with [`promoted`](LeaderStats::promoted), their
    /// mean).
    pub lag_sum_ms: u64,
    /// Calls to Redis that failed: Redis away, a permission missing, or a key of the
    /// queue holding something else (then the script changed nothing). The leader backs
    /// off and tries again; it never stops on an error. See
    /// [`LeaderHandle::last_error`].
    pub errors: u64,
    /// Rounds (take the lease, move due jobs, renew) failed in a row up to now: 0 while
    /// the leader works. A leader that cannot do its work (a grant missing, garbage in a
    /// key, Redis away) counts up here, warns (`tracing`, at its first failure and then
    /// every 30 s), and says so in the queue's meta for the dashboard and `/metrics`
    /// ([`Counters::leader_failing`](crate::Counters::leader_failing)).
    pub failing: u64,
    /// Jobs it moved out of Redis into the queue's cold tier (see `ColdTier`).
    pub cold_moved: u64,
    /// Jobs it loaded back from the cold tier into Redis.
    pub cold_loaded: u64,
}

/// A running [`Leader`](crate::Leader): see what it does, stop it.
///
/// Made by [`Leader::spawn`](crate::Leader::spawn). Dropping it ends the task without
/// releasing the lease (candidates take over when the lease ends, as after a crash);
/// [`stop`](LeaderHandle::stop) steps down at once.
///
/// # Examples
///
/// A health check, then a clean shutdown:
///
/// ```no_run
/// use tickless_durable::{LeaderOptions, Queue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "reviews").await?;
/// let leader = queue.leader(LeaderOptions::default()).spawn();
///
/// // ... in a health check:
/// let stats = leader.stats();
/// if stats.errors > 0 {
///     eprintln!("leader: {} failed calls, the last: {:?}", stats.errors, leader.last_error());
/// }
///
/// // On shutdown: step down, so that a standby takes over without waiting for the lease.
/// leader.stop().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderHandle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) task: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

impl LeaderHandle {
    /// What this leader has done so far.
    pub fn stats(&self) -> LeaderStats {
        stats(&self.shared)
    }

    /// The last error a call to Redis met, if any (counted in
    /// [`LeaderStats::errors`]): what an operator should look at when the count grows.
    pub fn last_error(&self) -> Option<String> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Steps down (releasing the lease, so a candidate takes over at once) and ends the
    /// task.
    ///
    /// # Errors
    ///
    /// The error of the leader's last round, if it failed (then
    /// [`LeaderStats::failing`] was above 0): what kept it from working when it was
    /// stopped, such as a permission missing ([`Error::is_permission`]). `Ok(())` if
    /// its last round worked, whatever failed before.
    pub async fn stop(mut self) -> Result<(), Error> {
        let _ = self.stop.send(true);
        let ended = match self.task.take() {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        ended?;
        match self.shared.take_failure() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

impl Drop for LeaderHandle {
    /// Ends the task without releasing the lease: candidates take over when it ends, as
    /// after a crash. Use [`stop`](LeaderHandle::stop) to step down at once.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

pub(crate) fn stats(shared: &Shared) -> LeaderStats {
    let lags = shared.lags.lock().unwrap_or_else(|e| e.into_inner());
    LeaderStats {
        leading: shared.leading.load(Ordering::Relaxed),
        token: shared.token.load(Ordering::Relaxed),
        leaderships: shared.leaderships.load(Ordering::Relaxed),
        promoted: shared.promoted.load(Ordering::Relaxed),
        lag_p50_ms: lags.quantile(0.5),
        lag_p99_ms: lags.quantile(0.99),
        lag_sum_ms: lags.sum_ms,
        errors: shared.errors.load(Ordering::Relaxed),
        failing: shared.failing.load(Ordering::Relaxed),
        cold_moved: shared.cold_moved.load(Ordering::Relaxed),
        cold_loaded: shared.cold_loaded.load(Ordering::Relaxed),
    }
}
