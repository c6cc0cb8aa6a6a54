//! What Redis knows of a queue's cold tier, read without the store (so every build, the
//! operator's binary and the dashboard among them, shows it), and the Redis half of
//! rescheduling a cold job: free functions over the Redis layer, which `Queue` calls.

use super::ColdTier;
use crate::contract::{system_time, Key};
use crate::error::Error;
use crate::rdb::cold as rdb;
use crate::rdb::Rdb;
use crate::reply::{parse_record, JobInfo, JobState};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// One window of a queue's cold tier: jobs due from `start` for the tier's window width,
/// kept in the store (see `ColdTier`).
///
/// # Examples
///
/// ```no_run
/// use tickless_durable::Queue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let queue = Queue::connect("redis://127.0.0.1/", "ratings").await?;
/// for window in queue.cold_windows().await? {
///     println!("{:?}: {} jobs in {} segments, {} bytes", window.start, window.jobs, window.segments, window.bytes);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColdWindow {
    /// The window's start: its jobs are due at or after it, and are loaded into Redis the
    /// tier's lead before it.
    pub start: SystemTime,
    /// Segments (objects in the store) holding its jobs.
    pub segments: u64,
    /// Cold jobs still to load (cancelled and rescheduled ones no longer count).
    pub jobs: u64,
    /// The segments' size in the store (cancelled jobs' bytes included until loaded).
    pub bytes: u64,
}

/// The queue's cold windows, earliest first (empty for a queue without a cold tier):
/// what the store holds, as Redis counts it.
pub(crate) async fn windows(rdb: &Rdb) -> Result<Vec<ColdWindow>, Error> {
    let key = rdb.key(Key::ColdSegs);
    let segs: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut rdb.conn())
        .await
        .map_err(|err| Error::redis(key, "HGETALL", err))?;
    let mut windows: BTreeMap<u64, ColdWindow> = BTreeMap::new();
    for (seg, value) in segs {
        let (window, left, bytes) = parse_segment(&value)
            .ok_or_else(|| Error::garbage(key, format!("field {seg:?} is not a segment")))?;
        let entry = windows.entry(window).or_insert(ColdWindow {
            start: system_time(window),
            segments: 0,
            jobs: 0,
            bytes: 0,
        });
        entry.segments += 1;
        entry.jobs += left;
        entry.bytes += bytes;
    }
    Ok(windows.into_values().collect())
}

/// Cold job `id` as [`JobState::Cold`]: with a `tier`, its record read from its segment;
/// without, what Redis knows (its window's start as `due`, no payload).
pub(crate) async fn job(
    rdb: &Rdb,
    tier: Option<&ColdTier>,
    id: &str,
) -> Result<Option<JobInfo>, Error> {
    let Some((seg, window)) = rdb::find(rdb, id).await? else {
        return Ok(None);
    };
    if let Some(tier) = tier {
        let record = record(rdb, tier, id, seg, window).await?;
        let jobs = rdb.key(Key::Jobs);
        if let Some(mut info) = parse_record(jobs, id, &record, None, false, None)? {
            info.state = JobState::Cold;
            return Ok(Some(info));
        }
    }
    Ok(Some(JobInfo {
        id: id.to_string(),
        state: JobState::Cold,
        due: system_time(window),
        attempts: 0,
        max_attempts: 0,
        lease_ends: None,
        last_error: None,
        payload: Vec::new(),
    }))
}

/// Reschedules cold job `id` of segment `seg` (reschedule.lua's answer 2): reads its
/// record from `tier`'s store and moves it into the wheel at `when`; `false` if the index
/// no longer names that segment (the caller looks again).
pub(crate) async fn thaw(
    rdb: &Rdb,
    tier: Option<&ColdTier>,
    id: &str,
    seg: u64,
    window: u64,
    when: &str,
) -> Result<bool, Error> {
    let Some(tier) = tier else {
        return Err(Error::store(
            "reschedule",
            id,
            "the job is in the queue's cold tier, and this Queue has none to read it from \
             (Queue::with_cold_tier, feature `cold`)",
        ));
    };
    let record = record(rdb, tier, id, seg, window).await?;
    rdb::thaw(rdb, id, seg, &record, when).await
}

/// The record of cold job `id` from segment `seg` of `window`, read from `tier`'s store.
async fn record(
    rdb: &Rdb,
    tier: &ColdTier,
    id: &str,
    seg: u64,
    window: u64,
) -> Result<Vec<u8>, Error> {
    #[cfg(not(feature = "cold"))]
    {
        let _ = (rdb, id, seg, window);
        match *tier {}
    }
    #[cfg(feature = "cold")]
    {
        let meta = rdb.meta_key();
        let dep = rdb::deployment(rdb).await?.ok_or_else(|| {
            Error::garbage(
                meta,
                "a cold job's index entry, yet no field cdep".to_string(),
            )
        })?;
        tier.record_of(rdb.name(), &dep, seg, window, id).await
    }
}

/// A `cseg` value, `window|left|bytes`, as numbers.
pub(crate) fn parse_segment(value: &str) -> Option<(u64, u64, u64)> {
    let mut parts = value.split('|');
    let window = parts.next()?.parse().ok()?;
    let left: i64 = parts.next()?.parse().ok()?;
    let bytes = parts.next()?.parse().ok()?;
    parts
        .next()
        .is_none()
        .then_some((window, left.max(0) as u64, bytes))
}
