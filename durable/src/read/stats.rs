//! [`Stats`]: counts of a queue's jobs, its leader, its promotion lag.

use crate::contract::{system_time, Key};
use crate::error::Error;
use std::time::{Duration, SystemTime};

/// A look at one queue, from [`Queue::stats`](crate::Queue::stats).
///
/// The counts come from one pipeline of reads, not one atomic snapshot. `ready` counts
/// entries of the ready list, which may include a few stale ones of jobs cancelled while
/// ready (dropped by the next claim); `scheduled` is what remains of all records.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::Queue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "invoices").await?;
/// queue.schedule("invoice:1001", b"", Duration::from_secs(30 * 86_400)).await?;
///
/// let stats = queue.stats().await?;
/// assert_eq!((stats.scheduled, stats.ready, stats.in_flight, stats.dead), (1, 0, 0, 0));
/// match &stats.leader {
///     Some(name) => println!("led by {name}, lease ends {:?}", stats.lease_ends),
///     None => println!("no leader: due jobs wait for one"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Stats {
    /// Jobs waiting for their due time (in the wheel or the staged window).
    pub scheduled: u64,
    /// Jobs due and waiting for a worker.
    pub ready: u64,
    /// Jobs delivered to a worker whose lease has not ended.
    pub in_flight: u64,
    /// Jobs that failed their last attempt.
    pub dead: u64,
    /// Jobs kept in the queue's cold tier (its store), not in Redis memory: see
    /// `ColdTier` and [`Queue::cold_windows`](crate::Queue::cold_windows).
    pub cold: u64,
    /// The current leader's name, if its lease is live.
    pub leader: Option<String>,
    /// The fencing token of the current (or last) leadership.
    pub token: u64,
    /// When the leader's lease ends.
    pub lease_ends: Option<SystemTime>,
    /// Median lag from due time to the ready list, over the leader's promotions.
    pub promotion_lag_p50: Option<Duration>,
    /// 99th percentile of the same.
    pub promotion_lag_p99: Option<Duration>,
    /// Jobs promoted by the current leader.
    pub promoted: u64,
    /// The sum of the lags of those promotions (with `promoted`, their mean).
    pub promotion_lag_sum: Duration,
    /// The queue's clock at the time of reading.
    pub now: SystemTime,
    /// Whether the queue runs on a manual clock (tests).
    pub manual_clock: bool,
}

fn number(meta: &str, field: &str, value: &Option<String>) -> Result<Option<u64>, Error> {
    match value {
        None => Ok(None),
        Some(text) => text
            .parse::<f64>()
            .map(|n| Some(n.max(0.0) as u64))
            .map_err(|_| Error::garbage(meta, format!("field {field} is {text:?}, not a number"))),
    }
}

pub(crate) fn build(
    meta: &str,
    jobs: u64,
    ready: u64,
    in_flight: u64,
    dead: u64,
    fields: &[Option<String>],
    time: (u64, u64),
) -> Result<Stats, Error> {
    let field = |i: usize| fields.get(i).cloned().flatten();
    let holder = field(0).filter(|h| !h.is_empty());
    let token = number(meta, "token", &field(1))?.unwrap_or(0);
    let expires = number(meta, "expires", &field(2))?.unwrap_or(0);
    let lag = |i: usize, name: &str| -> Result<Option<Duration>, Error> {
        Ok(number(meta, name, &field(i))?.map(Duration::from_millis))
    };
    let manual = number(meta, "clock", &field(6))?;
    let now_ms = manual.unwrap_or(time.0 * 1000 + time.1 / 1000);
    let live = holder.is_some() && expires > now_ms;
    Ok(Stats {
        scheduled: jobs.saturating_sub(ready + in_flight + dead),
        ready,
        in_flight,
        dead,
        cold: 0,
        leader: if live { holder } else { None },
        token,
        lease_ends: live.then(|| system_time(expires)),
        promotion_lag_p50: lag(3, "lag_p50")?,
        promotion_lag_p99: lag(4, "lag_p99")?,
        promoted: number(meta, "promoted", &field(5))?.unwrap_or(0),
        promotion_lag_sum: lag(7, "lag_sum")?.unwrap_or_default(),
        now: system_time(now_ms),
        manual_clock: manual.is_some(),
    })
}

impl crate::Queue {
    /// Counts of the queue's jobs by state, its leader, and the leader's promotion lag.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn stats(&self) -> Result<crate::Stats, Error> {
        let meta = self.rdb().meta_key();
        type Counts = (
            u64,
            u64,
            u64,
            u64,
            Vec<Option<String>>,
            (u64, u64),
            Vec<(String, String)>,
        );
        let (jobs, ready, flight, dead, fields, time, segments): Counts = redis::pipe()
            .hlen(self.rdb().key(Key::Jobs))
            .llen(self.rdb().key(Key::Ready))
            .zcard(self.rdb().key(Key::Flight))
            .zcard(self.rdb().key(Key::Dead))
            .hget(
                meta,
                &[
                    "holder", "token", "expires", "lag_p50", "lag_p99", "promoted", "clock",
                    "lag_sum",
                ],
            )
            .cmd("TIME")
            .hgetall(self.rdb().key(Key::ColdSegs))
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(meta, "stats", err))?;
        let mut stats = crate::read::stats::build(meta, jobs, ready, flight, dead, &fields, time)?;
        for (_, segment) in &segments {
            let (_, left, _) = crate::cold::view::parse_segment(segment).ok_or_else(|| {
                Error::garbage(
                    self.rdb().key(Key::ColdSegs),
                    format!("value {segment:?} is not a segment's"),
                )
            })?;
            stats.cold += left;
        }
        Ok(stats)
    }
}
