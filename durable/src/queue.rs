//! [`Queue`]: a handle to one queue's keys, for scheduling, cancelling and looking.

use super::connection::{send_again, Conn, ConnectOptions, Nodes};
use super::contract::{self, Key};
use super::error::Error;
use super::rdb::schedule::{self, Rescheduled};
use super::rdb::Reply;
use super::scripts::Script;
use super::when::{CatchUp, When};
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest payload a job may carry: 1 MiB. Larger ones are refused with an error for
/// which [`Error::is_payload_too_large`] is true; keep large data elsewhere and put its
/// key in the payload.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The longest job id, in bytes: 512.
pub const MAX_ID_BYTES: usize = 512;

/// The longest queue name, in bytes: 128.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;

/// Jobs per script call when scheduling in a batch; calls are pipelined in groups.
pub(crate) const SCHEDULE_CHUNK: usize = 128;
const PIPELINE_CALLS: usize = 32;

/// How often `reschedule` looks again for a cold job that moved while it read it.
const COLD_TRIES: usize = 5;

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
    conn: Conn,
    /// The connection of the calls that `WAIT` for replicas, so that a `WAIT` holds up
    /// only them (see [`ConnectOptions::wait_for_replicas`]); `None` without the option.
    waits: Option<Conn>,
    nodes: Nodes,
    /// Redacted (see [`redact`](super::redact::redact)): the client keeps the credentials.
    url: String,
    name: String,
    prefix: String,
    /// Every key's full name, by [`Key::index`].
    keys: Vec<String>,
    max_attempts: u32,
    /// `WAIT` for this many replicas, at most this long, after writes that must survive a
    /// master's death (see [`ConnectOptions::wait_for_replicas`]).
    replicas: Option<(u32, Duration)>,
    /// See [`ConnectOptions::retry_schedules_for`].
    schedule_retry: Duration,
    catch_up: CatchUp,
    /// Concurrent single schedules, merged (merge.rs).
    merger: super::merge::Merger,
    /// Where far jobs go (cold.rs): the leader moves and loads them, `reschedule` and
    /// `job` read a cold job's record from it.
    #[cfg(feature = "cold")]
    cold: Option<super::cold::ColdTier>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("url", &self.inner.url)
            .field("name", &self.inner.name)
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
        check_queue_name(name)?;
        let (conn, waits, nodes) = options.open().await?;
        let prefix = contract::prefix(name);
        let queue = Queue {
            inner: Arc::new(Inner {
                nodes,
                conn,
                waits,
                url: options.shown_url(),
                name: name.to_string(),
                keys: Key::ALL
                    .iter()
                    .map(|key| format!("{prefix}{}", key.suffix()))
                    .collect(),
                prefix,
                max_attempts: 5,
                replicas: options.replicas(),
                schedule_retry: options.schedule_retry(),
                catch_up: CatchUp::default(),
                merger: Default::default(),
                #[cfg(feature = "cold")]
                cold: None,
            }),
        };
        queue.check_keys().await?;
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
            conn: inner.conn.clone(),
            waits: inner.waits.clone(),
            nodes: inner.nodes.clone(),
            url: inner.url.clone(),
            name: inner.name.clone(),
            prefix: inner.prefix.clone(),
            keys: inner.keys.clone(),
            max_attempts: inner.max_attempts,
            replicas: inner.replicas,
            schedule_retry: inner.schedule_retry,
            catch_up: inner.catch_up,
            merger: Default::default(),
            #[cfg(feature = "cold")]
            cold: inner.cold.clone(),
        };
        change(&mut new);
        self.inner = Arc::new(new);
    }

    #[cfg(feature = "cold")]
    pub(crate) fn with_cold(&self, cold: Option<super::cold::ColdTier>) -> Queue {
        let mut queue = self.clone();
        queue.change(|inner| inner.cold = cold);
        queue
    }

    /// The queue's cold tier, if it has one (see `with_cold_tier`).
    #[cfg(feature = "cold")]
    pub(crate) fn cold_tier(&self) -> Option<&super::cold::ColdTier> {
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
        &self.inner.name
    }

    /// The URL this queue was opened with, its password shown as `***`
    /// (`redis://app:***@host:6379/`): fit for logs and screens.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The full name of one of the queue's keys.
    pub(crate) fn key(&self, key: Key) -> &str {
        &self.inner.keys[key.index()]
    }

    /// The full name of a bucket's key, from [`contract::bucket_key`].
    pub(crate) fn bucket(&self, level: u8, start_ms: u64) -> String {
        format!(
            "{}{}",
            self.inner.prefix,
            contract::bucket_key(level, start_ms)
        )
    }

    /// The full name of the cold index's bucket `n` (lib/cold.lua's `cold_key`: the first
    /// four hex digits of SHA-1 of an id).
    pub(crate) fn cold_index_key(&self, n: u16) -> String {
        format!("{}{}{n:04x}", self.inner.prefix, contract::COLD_INDEX_KEY)
    }

    /// The queue's wake channel.
    pub(crate) fn channel(&self) -> String {
        format!("{}{}", self.inner.prefix, contract::CHANNEL)
    }

    /// A client for the server holding the queue's keys, for a connection of its own (a
    /// subscription, a blocking `BLMOVE`): on a cluster, the master that owns the queue's
    /// slot now.
    pub(crate) async fn node_client(&self) -> redis::RedisResult<redis::Client> {
        self.inner.nodes.owner_of(self.meta_key()).await
    }

    /// A subscription of its own to the server holding the queue's keys (on a cluster,
    /// the slot's master, waited for through a failover).
    pub(crate) async fn subscriber(&self) -> redis::RedisResult<redis::aio::PubSub> {
        self.inner.nodes.subscriber(self.meta_key()).await
    }

    pub(crate) fn merger(&self) -> &super::merge::Merger {
        &self.inner.merger
    }

    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    /// The connection of the calls that `WAIT` for replicas (see [`Inner::waits`]).
    pub(crate) fn waits_conn(&self) -> Option<Conn> {
        self.inner.waits.clone()
    }

    /// The meta key's name.
    pub(crate) fn meta_key(&self) -> &str {
        self.key(Key::Meta)
    }

    /// Runs one script with the keys it declares and `args`.
    pub(crate) async fn call(&self, script: &Script, args: &[&[u8]]) -> Result<Reply, Error> {
        self.call_retrying(script, args, script.idempotent).await
    }

    /// [`call`](Self::call), sent once more on a new connection if `retry` and the
    /// connection turns out closed (Redis's `timeout`, `CLIENT KILL` or a proxy closed it
    /// while the queue was idle: the connection manager notices only then). Only for
    /// calls that leave the queue the same when run twice: the first may have run.
    pub(crate) async fn call_retrying(
        &self,
        script: &Script,
        args: &[&[u8]],
        retry: bool,
    ) -> Result<Reply, Error> {
        let mut invocation = script.script.prepare_invoke();
        for key in script.keys {
            invocation.key(self.key(*key));
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut result: redis::RedisResult<Value> = invocation.invoke_async(&mut self.conn()).await;
        if matches!(&result, Err(err) if send_again(retry, err)) {
            result = invocation.invoke_async(&mut self.conn()).await;
        }
        let value = result.map_err(|err| Error::script(self.meta_key(), script, err))?;
        Reply::new(value, self.meta_key(), script.name)
    }

    /// Adds one `EVALSHA` of `script` with its keys and `args` to `pipe`.
    pub(crate) fn add_call(&self, pipe: &mut redis::Pipeline, script: &Script, args: &[Vec<u8>]) {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(script.script.get_hash())
            .arg(script.keys.len());
        for key in script.keys {
            cmd.arg(self.key(*key));
        }
        for arg in args {
            cmd.arg(arg.as_slice());
        }
    }

    /// Runs `calls` (argument lists of `script`) in one pipeline; loads the script and
    /// tries again once if Redis does not know it, and sends it once more on a new
    /// connection when an idempotent script's finds its connection closed.
    pub(crate) async fn call_many<C: AsRef<[Vec<u8>]>>(
        &self,
        script: &Script,
        calls: &[C],
    ) -> Result<Vec<Reply>, Error> {
        let mut pipe = redis::pipe();
        for args in calls {
            self.add_call(&mut pipe, script, args.as_ref());
        }
        let mut conn = self.conn();
        let mut result: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut conn).await;
        if matches!(&result, Err(err) if send_again(script.idempotent, err)) {
            conn = self.conn();
            result = pipe.query_async(&mut conn).await;
        }
        if matches!(&result, Err(err) if err.kind() == redis::ErrorKind::NoScriptError) {
            script
                .script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(|err| Error::script(self.meta_key(), script, err))?;
            result = pipe.query_async(&mut conn).await;
        }
        let values = result.map_err(|err| Error::script(self.meta_key(), script, err))?;
        values
            .into_iter()
            .map(|value| Reply::new(value, self.meta_key(), script.name))
            .collect()
    }

    /// How long a schedule is sent again while the queue's master is away
    /// ([`ConnectOptions::retry_schedules_for`]).
    pub(crate) fn schedule_retry(&self) -> Duration {
        self.inner.schedule_retry
    }

    /// `WAIT` for this many replicas, at most this long, after schedules
    /// ([`ConnectOptions::wait_for_replicas`]).
    pub(crate) fn replicas(&self) -> Option<(u32, Duration)> {
        self.inner.replicas
    }

    /// Schedules job `id` with `payload`, due at or after `when`; returns `true` if it was
    /// added, `false` if a job with this id already exists (scheduled, ready, in flight
    /// or dead): scheduling is idempotent on the id, and the existing job is left as it
    /// is. Once a job completes (or is cancelled) its id is free again.
    ///
    /// A job due now or in the past is ready at once. The call is one atomic script of
    /// O(1) Redis work; see [`schedule_batch`](Queue::schedule_batch) for throughput.
    ///
    /// Calls made on one queue (or its clones) while another is on its way to Redis are
    /// sent together, up to 128 jobs in one script call, when that one answers: a call
    /// with no other on its way goes at once, and each caller still gets its own answer
    /// and its own error, as if alone (an id named by two callers is added once). A
    /// `When::After` delay counts from the call, not from when it was sent.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes disturbs no other call. The job may have
    /// been added or not (as with any call whose answer was not waited for), unless it
    /// was still waiting to be sent: then it is not sent.
    ///
    /// # Examples
    ///
    /// The payload is bytes; the job id is what makes a retried call safe:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "carts").await?;
    /// let payload = format!("cart=7;items={}", 3);
    /// let added = queue.schedule("abandoned-cart:7", payload, Duration::from_secs(3600)).await?;
    /// assert!(added);
    /// // A retry after a lost answer (or a second event) adds nothing:
    /// assert!(!queue.schedule("abandoned-cart:7", "cart=7", Duration::from_secs(3600)).await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_payload_too_large`], [`Error::is_redis`] when
    /// the call did not reach Redis or its answer was lost (calling again is safe: the id
    /// makes it idempotent), [`Error::is_garbage`] when the id's record is not ours.
    pub async fn schedule(
        &self,
        id: &str,
        payload: impl AsRef<[u8]>,
        when: impl Into<When>,
    ) -> Result<bool, Error> {
        let payload = payload.as_ref();
        check_job(id, payload)?;
        super::merge::schedule(self, id, payload, when.into()).await
    }

    /// Schedules many jobs: 128 per script call, calls pipelined 32 at a time. Returns,
    /// in order, whether each was added (see [`schedule`](Queue::schedule)); an id given
    /// twice is added once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::{Queue, When};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "renewals").await?;
    /// let ids: Vec<String> = (1..=1000).map(|n| format!("renewal:{n}")).collect();
    /// let in_a_day = When::After(Duration::from_secs(86_400));
    /// let added = queue
    ///     .schedule_batch(ids.iter().map(|id| (id.as_str(), b"renew", in_a_day)))
    ///     .await?;
    /// assert_eq!(added.iter().filter(|&&added| added).count(), 1000);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule`](Queue::schedule); every job is checked before any is sent. On an
    /// error from Redis, a prefix of the jobs may have been added: calling again with the
    /// same jobs is safe.
    pub async fn schedule_batch<'a, P>(
        &self,
        jobs: impl IntoIterator<Item = (&'a str, P, When)>,
    ) -> Result<Vec<bool>, Error>
    where
        P: AsRef<[u8]>,
    {
        let jobs: Vec<(&str, P, When)> = jobs.into_iter().collect();
        for (id, payload, _) in &jobs {
            check_job(id, payload.as_ref())?;
        }
        let jobs: Vec<(&str, &[u8], When)> = jobs
            .iter()
            .map(|(id, payload, when)| (*id, payload.as_ref(), *when))
            .collect();
        // One resend token for the batch's calls (rdb::schedule::resend_token).
        let token = schedule::resend_token(self);
        let calls: Vec<schedule::ScheduleCall> = jobs
            .chunks(SCHEDULE_CHUNK)
            .map(|chunk| schedule::ScheduleCall::new(self, chunk, token.as_ref()))
            .collect();
        let mut added = Vec::new();
        let started = Instant::now();
        for group in calls.chunks(PIPELINE_CALLS) {
            added.extend(
                self.schedule_through_failover(started, move || {
                    schedule::schedule_pipelined(self, group)
                })
                .await?,
            );
        }
        Ok(added)
    }

    /// Cancels job `id` wherever it is (scheduled, ready, in flight or dead); returns
    /// `true` if there was such a job. O(1) Redis work: a job already in the ready list
    /// is not searched for there, but marked so that the worker that pops it drops it.
    ///
    /// Cancelling a job in flight does not stop its handler; that delivery's ack then
    /// finds nothing to complete. Acks match a delivery by its number
    /// ([`Job::delivery`](super::Job::delivery)), so even if the id is scheduled again
    /// and delivered before the old handler acks, the old ack completes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn cancel(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        Ok(schedule::cancel(self, &[id]).await?[0])
    }

    /// Cancels many jobs: 128 per script call, calls pipelined 32 at a time. Returns, in
    /// order, whether each existed (an id given twice is cancelled once).
    ///
    /// # Errors
    ///
    /// As [`cancel`](Queue::cancel); every id is checked before any is sent.
    pub async fn cancel_batch<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<bool>, Error> {
        let mut calls: Vec<Vec<&str>> = Vec::new();
        for id in ids {
            check_id(id)?;
            match calls.last_mut() {
                Some(call) if call.len() < SCHEDULE_CHUNK => call.push(id),
                _ => calls.push(vec![id]),
            }
        }
        let mut removed = Vec::new();
        for group in calls.chunks(PIPELINE_CALLS) {
            removed.extend(schedule::cancel_pipelined(self, group).await?);
        }
        Ok(removed)
    }

    /// Moves waiting job `id` to a new due time, keeping its payload and attempts;
    /// returns `true` if it was waiting (scheduled or ready, not yet delivered) and
    /// `false` if the id names no job, a job whose handler has it (in flight) or a dead
    /// job (see [`retry_dead`](Queue::retry_dead)). O(1) Redis work.
    ///
    /// # Examples
    ///
    /// An abandoned-cart reminder pushed back each time the customer comes back:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "carts").await?;
    /// queue.schedule("abandoned-cart:8", b"cart=8", Duration::from_secs(3600)).await?;
    /// // The customer is back: an hour from now, not from the first visit.
    /// assert!(queue.reschedule("abandoned-cart:8", Duration::from_secs(3600)).await?);
    /// assert!(!queue.reschedule("abandoned-cart:9", Duration::from_secs(3600)).await?, "no such job");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn reschedule(&self, id: &str, when: impl Into<When>) -> Result<bool, Error> {
        check_id(id)?;
        let when = when.into().arg();
        // A cold job is read from its segment and moved by a second call; if it moved in
        // between (loaded, cancelled), the first call is asked again.
        for _ in 0..COLD_TRIES {
            let (seg, window) = match schedule::reschedule(self, id, &when).await? {
                Rescheduled::Moved => return Ok(true),
                Rescheduled::NotWaiting => return Ok(false),
                Rescheduled::Cold { seg, window } => (seg, window),
            };
            if self.thaw(id, seg, window, &when).await? {
                return Ok(true);
            }
        }
        Err(Error::store(
            "reschedule",
            id,
            format!("the cold job moved between each of {COLD_TRIES} tries"),
        ))
    }
}

fn check_queue_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_queue_name(name, "empty"));
    }
    if name.len() > MAX_QUEUE_NAME_BYTES {
        return Err(Error::invalid_queue_name(
            name,
            "longer than MAX_QUEUE_NAME_BYTES (128)",
        ));
    }
    if name.contains(['{', '}']) {
        return Err(Error::invalid_queue_name(
            name,
            "holds a brace; the name becomes the keys' hash tag",
        ));
    }
    Ok(())
}

pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::invalid_id(id, "empty"));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(Error::invalid_id(
            id,
            "longer than MAX_ID_BYTES (512 bytes)",
        ));
    }
    Ok(())
}

fn check_job(id: &str, payload: &[u8]) -> Result<(), Error> {
    check_id(id)?;
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::payload_too_large(
            id,
            payload.len(),
            MAX_PAYLOAD_BYTES,
        ));
    }
    Ok(())
}
