//! Looking at a queue: one job, the dead set, counts, the clock.

use crate::contract::{staged_member, Key, MAX_BATCH};
use crate::error::Error;
use crate::queue::{check_id, Queue};
use crate::reply;
use redis::AsyncCommands;

impl Queue {
    /// Up to `limit` dead jobs (at most 10,000), oldest first, from the `offset`-th: id,
    /// attempts, the last error, payload. A job whose record a leader or worker found
    /// unreadable is here too (with no payload and the error naming the record), so that
    /// one bad record never stops the queue. To see them all, call again with `offset`
    /// raised by what came back, until a page is shorter than `limit`; jobs that leave
    /// the dead set between calls move later ones forward (a job may be missed, none is
    /// shown twice unless it died again).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(queue: &tickless_durable::Queue) -> Result<(), tickless_durable::Error> {
    /// let mut offset = 0;
    /// loop {
    ///     let page = queue.dead(offset, 100).await?;
    ///     for job in &page {
    ///         println!("{}: {:?}", job.id, job.last_error);
    ///     }
    ///     if page.len() < 100 {
    ///         break;
    ///     }
    ///     offset += page.len();
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn dead(&self, offset: usize, limit: usize) -> Result<Vec<crate::JobInfo>, Error> {
        let limit = limit.min(MAX_BATCH);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (dead, jobs, errors) = (
            self.rdb().key(Key::Dead),
            self.rdb().key(Key::Jobs),
            self.rdb().key(Key::Errors),
        );
        let offset = offset.min(isize::MAX as usize - MAX_BATCH);
        let ids: Vec<Vec<u8>> = self
            .rdb()
            .conn()
            .zrange(dead, offset as isize, (offset + limit) as isize - 1)
            .await
            .map_err(|err| Error::redis(dead, "ZRANGE", err))?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Two reads for the whole page, not one per job.
        let (records, last_errors): (Vec<Option<Vec<u8>>>, Vec<Option<String>>) = redis::pipe()
            .cmd("HMGET")
            .arg(jobs)
            .arg(&ids)
            .cmd("HMGET")
            .arg(errors)
            .arg(&ids)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(jobs, "HMGET", err))?;
        let mut out = Vec::with_capacity(ids.len());
        for ((id, record), error) in ids.into_iter().zip(records).zip(last_errors) {
            let id = String::from_utf8(id)
                .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned());
            let Some(record) = record else { continue };
            match reply::parse_record(jobs, &id, &record, error, false, None) {
                Ok(Some(info)) => out.push(info),
                Ok(None) => {}
                // Quarantined by a leader or worker: its record is not ours. It is listed
                // with the error that names it (and can be cancelled).
                Err(err) if err.is_garbage() => out.push(crate::JobInfo {
                    id,
                    state: crate::JobState::Dead,
                    due: std::time::UNIX_EPOCH,
                    attempts: 0,
                    max_attempts: 0,
                    lease_ends: None,
                    last_error: Some(err.to_string()),
                    payload: Vec::new(),
                }),
                Err(err) => return Err(err),
            }
        }
        Ok(out)
    }

    /// What the queue holds under `id`: its state, due time, attempts, last error and
    /// payload; `None` if no job has this id.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`] when the record
    /// is not ours.
    pub async fn job(&self, id: &str) -> Result<Option<crate::JobInfo>, Error> {
        check_id(id)?;
        let (jobs, errors) = (self.rdb().key(Key::Jobs), self.rdb().key(Key::Errors));
        // The record, its last error, its staged and in-flight scores, meta's `cold`.
        type Found = (
            Option<Vec<u8>>,
            Option<String>,
            Option<f64>,
            Option<f64>,
            Option<String>,
        );
        let (record, error, staged, lease, cold): Found = redis::pipe()
            .hget(jobs, id)
            .hget(errors, id)
            .zscore(self.rdb().key(Key::Due), staged_member(id))
            .zscore(self.rdb().key(Key::Flight), id)
            .hget(self.rdb().meta_key(), "cold")
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(jobs, "HGET", err))?;
        let Some(record) = record else {
            // The cold index is looked at once the queue has had a cold tier.
            return match cold {
                Some(_) => crate::cold::view::job(self.rdb(), self.cold_tier(), id).await,
                None => Ok(None),
            };
        };
        let info = reply::parse_record(jobs, id, &record, error, staged.is_some(), lease)?;
        Ok(info)
    }

    /// Whether the queue is on its server: whether any of its keys exists (its jobs, its
    /// recurring schedules, its meta hash of counters and leader), as after its first
    /// `schedule`, `every`, `cron` or leader. A mistyped name is not, where its
    /// [`stats`](Queue::stats) would read as an empty queue's. One `EXISTS`.
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
    /// let queue = Queue::connect(&url, "refunds").await?;
    /// queue.schedule("refund:7", b"", Duration::from_secs(60)).await?;
    /// assert!(queue.exists().await?);
    /// assert!(!Queue::connect(&url, "refundz").await?.exists().await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`].
    pub async fn exists(&self) -> Result<bool, Error> {
        let keys: Vec<&str> = Key::ALL.iter().map(|&key| self.rdb().key(key)).collect();
        let found: u64 = redis::cmd("EXISTS")
            .arg(&keys)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(self.rdb().meta_key(), "EXISTS", err))?;
        Ok(found > 0)
    }
}
