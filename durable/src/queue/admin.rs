//! The queue's writes outside scheduling: an operator's (dead jobs retried), a test's
//! (the manual clock), and the failures leaders and workers report for the dashboard.

use crate::contract::{
    ms_ceil, unix_ms_ceil, Key, LAST_SCRIPT_ERROR, LEADER_ERROR, LEADER_FAILING, MAX_BATCH,
    MAX_DUE_MS,
};
use crate::error::Error;
use crate::queue::{check_id, Queue};
use crate::rdb::schedule;
use redis::AsyncCommands;
use std::time::{Duration, SystemTime};

impl Queue {
    /// The time on the queue's clock: Redis `TIME`, or the manual clock if one is set.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn now(&self) -> Result<SystemTime, Error> {
        Ok(self.stats().await?.now)
    }

    /// Gives dead job `id` a fresh set of attempts and makes it ready now; returns
    /// `false` if `id` names no dead job.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`] (also when the
    /// job was quarantined: its record is not one this crate can retry).
    pub async fn retry_dead(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        match schedule::retry_dead(self.rdb(), &[id.as_bytes()]).await?[0] {
            None => Err(Error::garbage(
                self.rdb().key(Key::Jobs),
                format!("field {id:?} is not a job record"),
            )),
            Some(retried) => Ok(retried),
        }
    }

    /// Retries every job that is dead when the call begins, as
    /// [`retry_dead`](Queue::retry_dead) does one, a page of up to 10,000 per script
    /// call (one call's most); returns how many were retried. Quarantined jobs (records
    /// that cannot be read) stay dead. Jobs that die while it runs may be retried too;
    /// it stops after as many as the dead set held at the start.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`]; the pages before the failing one were
    /// retried.
    pub async fn retry_all_dead(&self) -> Result<usize, Error> {
        let dead = self.rdb().key(Key::Dead);
        let total: usize = self
            .rdb()
            .conn()
            .zcard(dead)
            .await
            .map_err(|err| Error::redis(dead, "ZCARD", err))?;
        let (mut seen, mut skipped, mut retried) = (0, 0, 0);
        while seen < total {
            let page = (total - seen).min(MAX_BATCH);
            let ids: Vec<Vec<u8>> = self
                .rdb()
                .conn()
                .zrange(dead, skipped as isize, (skipped + page) as isize - 1)
                .await
                .map_err(|err| Error::redis(dead, "ZRANGE", err))?;
            if ids.is_empty() {
                break;
            }
            let ids: Vec<&[u8]> = ids.iter().map(Vec::as_slice).collect();
            for answer in schedule::retry_dead(self.rdb(), &ids).await? {
                match answer {
                    Some(true) => retried += 1,
                    // Still in `dead` (quarantined): the next page starts after it.
                    None => skipped += 1,
                    Some(false) => {}
                }
            }
            seen += ids.len();
        }
        Ok(retried)
    }

    /// Sets (`Some`) or removes (`None`) this queue's manual clock. For tests and
    /// simulations: while set, every script of the queue reads this time instead of
    /// Redis `TIME`, so time stands still until [`advance_manual_clock`] moves it.
    /// Leaders and candidates are told on the queue's channel.
    ///
    /// [`advance_manual_clock`]: Queue::advance_manual_clock
    ///
    /// # Examples
    ///
    /// A test that a reminder an hour away is delivered after an hour, in no time, with
    /// the leader stepped by hand ([`Leader::step`](crate::Leader::step)):
    ///
    /// ```no_run
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use tickless_durable::{LeaderOptions, Queue, WorkerOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "test-reminders").await?;
    /// queue.set_manual_clock(Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000))).await?;
    /// queue.schedule("reminder:1", b"", Duration::from_secs(3600)).await?;
    /// let mut leader = queue.leader(LeaderOptions::default());
    /// let worker = queue.worker(WorkerOptions::default());
    ///
    /// leader.step().await?;
    /// assert!(worker.try_claim(1).await?.is_empty(), "not due yet");
    ///
    /// queue.advance_manual_clock(Duration::from_secs(3600)).await?;
    /// leader.step().await?;
    /// let jobs = worker.try_claim(1).await?;
    /// assert_eq!(jobs[0].id(), "reminder:1");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`].
    pub async fn set_manual_clock(&self, at: Option<SystemTime>) -> Result<(), Error> {
        let meta = self.rdb().meta_key();
        let mut pipe = redis::pipe();
        match at {
            Some(at) => pipe.hset(meta, "clock", unix_ms_ceil(at)),
            None => pipe.hdel(meta, "clock"),
        };
        pipe.publish(self.rdb().channel(), "0 0");
        pipe.query_async::<()>(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(meta, "set the manual clock", err))
    }

    /// Moves the manual clock forward by `by` (whole milliseconds, rounded up).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`]; [`Error::is_garbage`] if no manual clock is set.
    pub async fn advance_manual_clock(&self, by: Duration) -> Result<(), Error> {
        let meta = self.rdb().meta_key();
        let mut conn = self.rdb().conn();
        let set: bool = conn
            .hexists(meta, "clock")
            .await
            .map_err(|err| Error::redis(meta, "advance the manual clock", err))?;
        if !set {
            return Err(Error::garbage(meta, "no manual clock to advance"));
        }
        let mut pipe = redis::pipe();
        pipe.hincr(meta, "clock", ms_ceil(by).min(MAX_DUE_MS))
            .publish(self.rdb().channel(), "0 0");
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|err| Error::redis(meta, "advance the manual clock", err))
    }
}

impl Queue {
    /// Says in meta that this queue's leader (or candidate) has failed `rounds` rounds in
    /// a row, the last with `message`; `rounds` 0 removes it. Best effort, as `report`:
    /// a user who may not `HSET` leaves nothing here (the process's own
    /// [`LeaderStats::failing`](crate::LeaderStats::failing) and warning still say it).
    pub(crate) async fn leader_failing(&self, rounds: u64, message: &str) {
        let mut conn = self.rdb().conn();
        let meta = self.rdb().meta_key();
        let _: Result<(), _> = if rounds == 0 {
            redis::cmd("HDEL")
                .arg(meta)
                .arg(LEADER_FAILING)
                .arg(LEADER_ERROR)
                .query_async(&mut conn)
                .await
        } else {
            let message: String = message.chars().take(1024).collect();
            redis::cmd("HSET")
                .arg(meta)
                .arg(LEADER_FAILING)
                .arg(rounds)
                .arg(LEADER_ERROR)
                .arg(message)
                .query_async(&mut conn)
                .await
        };
    }

    /// Counts `err` in the queue if Redis ran a script of ours and it raised
    /// ([`Error::is_script_failure`]): `n_script_errors` and `last_script_error` in meta,
    /// what a dashboard in any process shows. Best effort: when meta itself is the key
    /// holding garbage, or Redis is gone, nothing is counted. And a `tracing` warning
    /// (feature `tracing`), whatever the error.
    // `role` only names the warning, which exists with the feature.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) async fn report(&self, role: &'static str, err: &Error) {
        crate::trace::event!(warn, queue = self.name(), role, error = %err, "call failed");
        if !err.is_script_failure() {
            return;
        }
        let message: String = err.to_string().chars().take(1024).collect();
        let _: Result<(), _> = redis::pipe()
            .hincr(self.rdb().meta_key(), "n_script_errors", 1)
            .ignore()
            .hset(self.rdb().meta_key(), LAST_SCRIPT_ERROR, message)
            .ignore()
            .query_async(&mut self.rdb().conn())
            .await;
    }
}
