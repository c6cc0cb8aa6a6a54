//! [`Queue`]: a handle to one queue's keys, for scheduling, cancelling and looking.

pub(crate) mod admin;
pub(crate) mod merge;
pub(crate) mod outlet;
pub(crate) mod recur;
pub(crate) mod repair;
pub(crate) mod schedule;

pub(crate) use schedule::{check_id, SCHEDULE_CHUNK};

use crate::error::Error;
use crate::rdb::{ConnectOptions, Rdb};
use crate::when::CatchUp;
use std::sync::Arc;

/// The largest payload a job may carry: 1 MiB. Larger ones are refused with an error for
/// which [`Error::is_payload_too_large`] is true; keep large data elsewhere and put its
/// key in the payload.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The longest job id, in bytes: 512.
pub const MAX_ID_BYTES: usize = 512;

/// A handle to one durable queue: schedule, cancel and reschedule jobs by id, and look at
/// the queue. Cheap to clone; clones share one multiplexed connection, which reconnects
/// when a call finds it broken.
///
/// All keys of a queue start with `tickless:{<name>}:`: the braces make the name a hash
/// tag, so on Redis Cluster the whole queue lives in one slot and different queues spread
/// over the cluster.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::Queue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
/// let added = queue.schedule("order:42", b"5 stars", Duration::from_secs(48 * 3600)).await?;
/// assert!(added);
/// // The same id again is the same job: nothing is added.
/// assert!(!queue.schedule("order:42", b"5 stars", Duration::from_secs(1)).await?);
/// assert!(queue.cancel("order:42").await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    /// The connections and key names, and how calls are run.
    rdb: Rdb,
    max_attempts: u32,
    catch_up: CatchUp,
    /// Concurrent single schedules, merged (`merge.rs`).
    merger: crate::queue::merge::Merger,
    /// Where far jobs go (`cold/`): the leader moves and loads them, `reschedule` and
    /// `job` read a cold job's record from it (none without feature `cold`).
    cold: Option<crate::cold::ColdTier>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("url", &self.url())
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// Connects to the Redis server at `url` and opens the queue `name`.
    ///
    /// The first connection is tried once, with a 5 s timeout, so that a wrong address
    /// fails fast. After that, a call that finds the connection broken starts a new one:
    /// a call made while Redis is down fails at once with [`Error::is_redis`] (calling
    /// again later is the answer; leaders and workers do, every 100 ms). The queue's
    /// keys are checked for the types this crate writes.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_url`] for a URL that does not parse,
    /// [`Error::is_invalid_queue_name`] for an empty or too long name or one with braces,
    /// [`Error::is_connect`] when the server cannot be reached, and
    /// [`Error::is_garbage`] when a key of the queue holds something else, and
    /// [`Error::is_permission`] when the Redis user may not read the queue's keys or
    /// publish on its channel (checked here, so that no job is stored that no leader
    /// would hear of).
    ///
    /// # Examples
    ///
    /// ```
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = Queue::connect("redis://127.0.0.1:1/", "orders").await.unwrap_err();
    /// assert!(err.is_connect());
    /// assert!(err.to_string().contains("127.0.0.1:1"));
    /// # }
    /// ```
    pub async fn connect(url: &str, name: &str) -> Result<Queue, Error> {
        Queue::connect_with(&ConnectOptions::new(url), name).await
    }

    /// [`connect`](Queue::connect) with [`ConnectOptions`]: a cluster, a CA for TLS, `WAIT`
    /// for replicas.
    ///
    /// # Errors
    ///
    /// As [`connect`](Queue::connect).
    pub async fn connect_with(options: &ConnectOptions, name: &str) -> Result<Queue, Error> {
        let queue = Queue {
            inner: Arc::new(Inner {
                rdb: options.open_queue(name).await?,
                max_attempts: 5,
                catch_up: CatchUp::default(),
                merger: Default::default(),
                cold: None,
            }),
        };
        Ok(queue)
    }

    /// The same queue with another number of attempts for jobs it schedules from now on
    /// (default 5): after that many deliveries without success a job goes to the dead
    /// set. At least 1.
    pub fn with_max_attempts(&self, attempts: u32) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.max_attempts = attempts.max(1));
        queue
    }

    /// The same queue with another policy for occurrences of recurring schedules it sets
    /// from now on ([`every`](Queue::every), [`cron`](Queue::cron)) that came due while
    /// no leader ran: see [`CatchUp`] (default [`CatchUp::Skip`]).
    pub fn with_catch_up(&self, catch_up: CatchUp) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.catch_up = catch_up);
        queue
    }

    /// A queue of its own (the same connections), changed by `change`; its merger of
    /// single schedules is its own, since a merged call carries one queue's settings.
    fn change(&mut self, change: impl FnOnce(&mut Inner)) {
        let inner = &self.inner;
        let mut new = Inner {
            rdb: inner.rdb.clone(),
            max_attempts: inner.max_attempts,
            catch_up: inner.catch_up,
            merger: Default::default(),
            cold: inner.cold.clone(),
        };
        change(&mut new);
        self.inner = Arc::new(new);
    }

    #[cfg(feature = "cold")]
    fn with_cold(&self, cold: Option<crate::cold::ColdTier>) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.cold = cold);
        queue
    }

    /// The queue's cold tier, if it has one (see `with_cold_tier`).
    pub(crate) fn cold_tier(&self) -> Option<&crate::cold::ColdTier> {
        self.inner.cold.as_ref()
    }

    pub(crate) fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    pub(crate) fn catch_up(&self) -> CatchUp {
        self.inner.catch_up
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        self.inner.rdb.name()
    }

    /// The URL this queue was opened with, its password shown as `***`
    /// (`redis://app:***@host:6379/`): fit for logs and screens.
    pub fn url(&self) -> &str {
        self.inner.rdb.url()
    }

    /// The queue's link to Redis: every script call goes through it.
    pub(crate) fn rdb(&self) -> &Rdb {
        &self.inner.rdb
    }

    pub(crate) fn merger(&self) -> &crate::queue::merge::Merger {
        &self.inner.merger
    }
}

impl ConnectOptions {
    /// Connects and opens the queue `name`: see [`Queue::connect`].
    ///
    /// # Errors
    ///
    /// As [`Queue::connect`]; [`Error::is_invalid_url`] also for a cluster without seeds
    /// or with seeds of different users or schemes, and for TLS options that do not parse
    /// (a CA or client certificate that is not PEM, a client key that is no PEM private
    /// key) or are given with a `redis://` URL.
    pub async fn connect(&self, name: &str) -> Result<Queue, Error> {
        Queue::connect_with(self, name).await
    }
}

#[cfg(feature = "cold")]
impl Queue {
    /// The same queue with a cold tier: its leader moves jobs due beyond the tier's
    /// horizon out of Redis into the tier's store, and loads them back before they are
    /// due; [`reschedule`](Queue::reschedule) and [`job`](Queue::job) read a cold job
    /// from the store. Every leader of the queue needs the tier (a leader without one
    /// moves and loads nothing, so cold jobs would wait for one that has it); schedulers
    /// and workers do not.
    pub fn with_cold_tier(&self, tier: crate::ColdTier) -> Queue {
        self.with_cold(Some(tier))
    }
}

impl Queue {
    /// The queue's cold windows, earliest first (empty for a queue without a cold tier):
    /// what the store holds, as Redis counts it.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn cold_windows(&self) -> Result<Vec<crate::ColdWindow>, Error> {
        crate::cold::view::windows(self.rdb()).await
    }
}
