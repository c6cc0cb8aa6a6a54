//! Looking into a queue without reading its jobs: [`Queue::due_buckets`] (when its jobs
//! come due, from the wheel's buckets) and the first ids of the ready list and the
//! in-flight set.
//!
//! `due` holds one member per non-empty bucket (`b<k>:<start>`) and one per staged job
//! (`j<id>`, scored by its due time). A bucket's name gives its level and start, its
//! `SCARD` its number of jobs: so "how many jobs come due in each time range" is one
//! `ZRANGE` of `due` and one pipelined `SCARD` per bucket, however many jobs the buckets
//! hold. The price is resolution: a level-k bucket tells how many of its jobs are due
//! within its 1,024 × 64^k ms, not when within it. Since a job sits in the coarsest
//! level whose bucket starts after the horizon, near times are seen finely (1 s, then
//! 65 s) and far ones coarsely (70 min, 75 h, ...): fine where it matters.

use crate::contract::{
    level_width_ms, parse_bucket_member, system_time, Key, BUCKET_MEMBER, LAST_SCRIPT_ERROR,
    LEADER_ERROR, LEADER_FAILING, STAGED_MEMBER, W0_MS,
};
use crate::error::Error;
use crate::queue::Queue;
use std::time::{Duration, SystemTime};

/// Most `due` members read by one [`Queue::due_buckets`].
const MAX_MEMBERS: usize = 10_000;

/// The jobs due within one time range of a queue's wheel: see [`Queue::due_buckets`].
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
/// let queue = Queue::connect(&url, "reminders").await?;
/// queue.schedule("reminder:1", b"", Duration::from_secs(3600)).await?;
/// queue.schedule("reminder:2", b"", Duration::from_secs(3600)).await?;
///
/// let (buckets, truncated) = queue.due_buckets().await?;
/// for bucket in &buckets {
///     println!("{} due from {:?} within {:?}", bucket.jobs, bucket.start, bucket.width);
/// }
/// assert_eq!(buckets.iter().map(|b| b.jobs).sum::<u64>(), 2);
/// assert!(!truncated);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DueBucket {
    /// The wheel level of the bucket (0: 1,024 ms wide, each next one 64 times wider);
    /// `None` for jobs of the staged window (due within about a second, or overdue and
    /// waiting for the leader), counted here per 1,024 ms slot.
    pub level: Option<u8>,
    /// The start of the range.
    pub start: SystemTime,
    /// Its width: every job counted is due at or after `start` and before
    /// `start + width`.
    pub width: Duration,
    /// How many jobs.
    pub jobs: u64,
}

impl DueBucket {
    /// The width of every bucket of wheel level `level`: 1,024 ms at level 0, and 64
    /// times wider at each next level (65.5 s, 69.9 min, 74.6 h, ...), saturating.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickless_durable::DueBucket;
    ///
    /// assert_eq!(DueBucket::level_width(0), Duration::from_millis(1024));
    /// assert_eq!(DueBucket::level_width(1), Duration::from_millis(1024 * 64));
    /// ```
    pub fn level_width(level: u8) -> Duration {
        Duration::from_millis(level_width_ms(level))
    }
}

impl Queue {
    /// When the queue's scheduled jobs come due: the non-empty buckets of its wheel with
    /// their counts, and the staged jobs counted per 1,024 ms slot; in order of start.
    ///
    /// Cheap: one `ZRANGE` of the queue's `due` set (one member per non-empty bucket
    /// and per staged job) and one `SCARD` per bucket, pipelined; no job record is
    /// read. A far bucket is wide: it tells how many jobs are due within its range, not
    /// when within it. Reads at most 10,000 members of `due`; `truncated` is `true` when
    /// there were more (a backlog of staged jobs that no leader promotes), and then the
    /// latest ranges are missing.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`] for a member of `due` that is not
    /// ours.
    pub async fn due_buckets(&self) -> Result<(Vec<DueBucket>, bool), Error> {
        let due = self.rdb().key(Key::Due);
        let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(due)
            .arg(0)
            .arg(MAX_MEMBERS)
            .arg("WITHSCORES")
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(due, "ZRANGE", err))?;
        let truncated = members.len() > MAX_MEMBERS;
        let mut staged: Vec<(u64, u64)> = Vec::new(); // slot start, jobs
        let mut buckets: Vec<(u8, u64)> = Vec::new();
        for (member, score) in members.iter().take(MAX_MEMBERS) {
            if member.starts_with(STAGED_MEMBER) {
                let slot = (score.max(0.0) as u64) / W0_MS * W0_MS;
                match staged.last_mut() {
                    Some((start, jobs)) if *start == slot => *jobs += 1,
                    _ => staged.push((slot, 1)),
                }
            } else if member.starts_with(BUCKET_MEMBER) {
                let bucket = parse_bucket_member(member).ok_or_else(|| {
                    Error::garbage(due, format!("member {member:?} names no bucket"))
                })?;
                buckets.push(bucket);
            }
            // `l`: the lease marker, no job.
        }
        let mut pipe = redis::pipe();
        for (level, start) in &buckets {
            pipe.scard(self.rdb().bucket(*level, *start));
        }
        let counts: Vec<u64> = if buckets.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut self.rdb().conn())
                .await
                .map_err(|err| Error::redis(due, "SCARD", err))?
        };
        let mut out: Vec<DueBucket> = staged
            .into_iter()
            .map(|(start, jobs)| DueBucket {
                level: None,
                start: system_time(start),
                width: Duration::from_millis(W0_MS),
                jobs,
            })
            .chain(
                buckets
                    .iter()
                    .zip(counts)
                    .map(|(&(level, start), jobs)| DueBucket {
                        level: Some(level),
                        start: system_time(start),
                        width: Duration::from_millis(level_width_ms(level)),
                        jobs,
                    }),
            )
            .filter(|b| b.jobs > 0)
            .collect();
        out.sort_by_key(|b| (b.start, b.level));
        Ok((out, truncated))
    }
}

impl Queue {
    /// The first `limit` ids of the ready list, in the order workers take them. May hold
    /// ids of jobs cancelled while ready (dropped by the next claim).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`].
    pub async fn ready_ids(&self, limit: usize) -> Result<Vec<String>, Error> {
        let ready = self.rdb().key(Key::Ready);
        if limit == 0 {
            return Ok(Vec::new()); // LRANGE 0 -1 would be everything
        }
        redis::cmd("LRANGE")
            .arg(ready)
            .arg(0)
            .arg(limit as isize - 1)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(ready, "LRANGE", err))
    }

    /// The `limit` jobs in flight whose leases end first, with their lease ends.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`].
    pub async fn in_flight_ids(&self, limit: usize) -> Result<Vec<(String, SystemTime)>, Error> {
        let flight = self.rdb().key(Key::Flight);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(flight)
            .arg(0)
            .arg(limit as isize - 1)
            .arg("WITHSCORES")
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(flight, "ZRANGE", err))?;
        Ok(ids
            .into_iter()
            .map(|(id, ends)| (id, system_time(ends.max(0.0) as u64)))
            .collect())
    }
}

/// Upper bounds (ms) of the promotion lag ranges counted by `tick.lua`; the last range
/// is everything above.
pub(crate) const LAG_BOUNDS_MS: [u64; 8] = [1, 5, 10, 50, 100, 500, 1000, 5000];

/// Running totals of a queue since it was created, kept in Redis by the scripts (so
/// every process sees the same): see [`Queue::counters`].
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
/// let queue = Queue::connect(&url, "receipts").await?;
/// for id in ["receipt:1", "receipt:2", "receipt:1"] {
///     queue.schedule(id, b"", Duration::from_secs(60)).await?;
/// }
/// let counters = queue.counters().await?;
/// assert_eq!(counters.scheduled, 2, "an id already in use adds nothing");
/// let (acked, delivered) = (counters.acked, counters.delivered);
/// println!("{acked} of {delivered} deliveries acked, {} jobs died", counters.died);
/// if counters.promoted > 0 {
///     println!("mean promotion lag: {} ms", counters.lag_sum_ms / counters.promoted);
/// }
/// for (le_ms, n) in &counters.lag {
///     match le_ms {
///         Some(ms) => println!("lag <= {ms} ms: {n}"),
///         None => println!("slower: {n}"),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Jobs added by `schedule` (an id already in use adds nothing).
    pub scheduled: u64,
    /// Deliveries to workers (claims).
    pub delivered: u64,
    /// Deliveries acknowledged: jobs completed.
    pub acked: u64,
    /// Failed deliveries put back for a retry.
    pub retried: u64,
    /// Jobs moved to the dead set (a failed last attempt, or a lease ending after it).
    pub died: u64,
    /// Records a script found unreadable and set aside in the dead set.
    pub quarantined: u64,
    /// Leaderships taken (one per leader change).
    pub leaderships: u64,
    /// Due jobs promoted by the leader to the ready list (or to the stream outlet).
    pub promoted: u64,
    /// Promotions by lag: `(le_ms, n)` with `n` promotions whose lag was at most `le_ms`
    /// and above the previous bound (not cumulative); `le_ms` `None` for the rest.
    pub lag: Vec<(Option<u64>, u64)>,
    /// The sum of the promotion lags, in ms.
    pub lag_sum_ms: u64,
    /// Script calls of a leader or worker that Redis ran and that raised (garbage in a
    /// key, a missing permission): each such call changed nothing, and the loop that made
    /// it backs off and tries again. A script cannot count its own failure (one that
    /// raises has written nothing: each checks before its first write), so the process
    /// that met it adds it.
    pub script_errors: u64,
    /// The message of the latest of those, as that process saw it (no secret: errors
    /// never hold a password).
    pub last_script_error: Option<String>,
    /// Rounds a leader (or candidate) of this queue has failed in a row, as it last said
    /// (0: none is failing); see [`LeaderStats::failing`](crate::LeaderStats::failing).
    pub leader_failing: u64,
    /// Why, as that leader saw it.
    pub leader_error: Option<String>,
    /// Jobs moved out of Redis into the queue's cold tier (see `ColdTier`).
    pub cold_moved: u64,
    /// Jobs loaded back from the cold tier into the wheel.
    pub cold_loaded: u64,
    /// Due jobs appended to the queue's stream outlet (see
    /// [`Queue::set_stream_outlet`](crate::Queue::set_stream_outlet)); each left the
    /// queue then, as an acked job does.
    pub streamed: u64,
}

impl Queue {
    /// The queue's running totals: schedules, deliveries, acks, retries, deaths, leader
    /// changes, the promotion lag histogram. One `HMGET`; each count costs the script
    /// that does the counted thing one `HINCRBY`.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`] for a field that is not a number.
    pub async fn counters(&self) -> Result<Counters, Error> {
        let names = [
            "scheduled",
            "delivered",
            "acked",
            "retried",
            "died",
            "quarantined",
            "leaderships",
            "promoted",
            "lag_sum_ms",
            "script_errors",
            "cold_out",
            "cold_in",
            "streamed",
        ];
        let lag_fields: Vec<String> = LAG_BOUNDS_MS
            .iter()
            .map(|b| format!("n_lag_le_{b}"))
            .chain(["n_lag_le_inf".to_string()])
            .collect();
        let fields: Vec<String> = names
            .iter()
            .map(|n| format!("n_{n}"))
            .chain(lag_fields)
            .collect();
        let meta = self.rdb().meta_key();
        let mut values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(meta)
            .arg(&fields)
            .arg(LAST_SCRIPT_ERROR)
            .arg(LEADER_FAILING)
            .arg(LEADER_ERROR)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(meta, "HMGET", err))?;
        let leader_error = values.pop().flatten();
        let leader_failing = match values.pop().flatten() {
            None => 0,
            Some(text) => text.parse::<u64>().map_err(|_| {
                Error::garbage(
                    meta,
                    format!("field {LEADER_FAILING} is {text:?}, not a count"),
                )
            })?,
        };
        let last_script_error = values.pop().flatten();
        let mut numbers = Vec::with_capacity(fields.len());
        for (field, value) in fields.iter().zip(&values) {
            numbers.push(match value {
                None => 0,
                Some(text) => text.parse::<u64>().map_err(|_| {
                    Error::garbage(meta, format!("field {field} is {text:?}, not a count"))
                })?,
            });
        }
        let n = |i: usize| numbers.get(i).copied().unwrap_or(0);
        Ok(Counters {
            scheduled: n(0),
            delivered: n(1),
            acked: n(2),
            retried: n(3),
            died: n(4),
            quarantined: n(5),
            leaderships: n(6),
            promoted: n(7),
            lag_sum_ms: n(8),
            script_errors: n(9),
            cold_moved: n(10),
            cold_loaded: n(11),
            streamed: n(names.len() - 1),
            last_script_error,
            leader_failing,
            leader_error,
            lag: LAG_BOUNDS_MS
                .iter()
                .map(|&b| Some(b))
                .chain([None])
                .enumerate()
                .map(|(i, le)| (le, n(names.len() + i)))
                .collect(),
        })
    }
}

/// The names of the queues on the Redis server at `url`: every `tickless:{<name>}:meta`
/// key, found with `SCAN` (a queue gets its meta key at its first schedule, or when a
/// leader first runs on it). For tools such as `tickless-durable queues` and `serve`;
/// sorted. With TLS options (a CA, a client
/// certificate), use [`ConnectOptions::queue_names`](crate::ConnectOptions::queue_names).
///
/// # Examples
///
/// ```no_run
/// use tickless_durable::Queue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// for name in tickless_durable::queue_names(&url).await? {
///     let stats = Queue::connect(&url, &name).await?.stats().await?;
///     println!("{name}: {} scheduled, {} dead", stats.scheduled, stats.dead);
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`Error::is_invalid_url`], [`Error::is_connect`], [`Error::is_redis`].
pub async fn queue_names(url: &str) -> Result<Vec<String>, Error> {
    crate::ConnectOptions::new(url).queue_names().await
}
