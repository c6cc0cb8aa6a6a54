//! [`Leader`]: the one process that moves a queue's cursor, elected with a fenced lease.
//!
//! Any number of processes run a `Leader` for a queue; one holds the lease and the others
//! are candidates. The leader waits (with a tickless timer, so no polling) for the head
//! of the queue's `due` sorted set, runs `tick.lua` when it comes, and renews its lease
//! at half its length. Scripts that add an earlier wake publish it on the queue's
//! channel, to which every leader and candidate subscribes.
//!
//! The lease is as long as the quiet time ahead allows: `busy_lease` (100 ms) when work is
//! near, up to `idle_lease` (60 s) when the next due work is further away than that, and
//! never ending later than that work. A candidate sleeps until the lease it last saw
//! ends, then tries to take it; a script that adds earlier work shortens a long lease
//! to `max(wake, now + busy_lease)` and publishes the new end. So a leader killed with work
//! near is replaced within `busy_lease` plus a few milliseconds, and an idle queue costs
//! one renewal per 30 s and one look per candidate per 30 s.

use crate::contract::MAX_BATCH;
use crate::error::Error;
use crate::leader::handle::{stats, LeaderHandle, LeaderStats, Shared};
use crate::queue::Queue;
use crate::rdb::lead as rdb;
use futures_core::Stream;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

// The cold tier's share of the leader: its passes, and a leader without one noticing cold
// jobs it cannot load.
mod cold;
pub(crate) mod handle;
mod lease;
mod session;
#[cfg(feature = "cold")]
use cold::ColdRun;

/// Settings of a [`Leader`].
///
/// # Examples
///
/// The struct is `#[non_exhaustive]`: start from the defaults and change fields.
///
/// ```
/// use std::time::Duration;
/// use tickless_durable::{Leader, LeaderOptions, Queue};
///
/// /// A leader named after its host, so that `inspect` and the dashboard say who leads.
/// fn leader(queue: &Queue, host: &str) -> Leader {
///     let mut options = LeaderOptions::default();
///     options.name = Some(format!("{host}-{}", std::process::id()));
///     options.busy_lease = Duration::from_secs(1); // fewer renewals, slower takeover
///     queue.leader(options)
/// }
///
/// assert_eq!(LeaderOptions::default().idle_lease, Duration::from_secs(60));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LeaderOptions {
    /// The lease while work is near: a killed leader is replaced within this (100 ms).
    /// While work is near, the leader renews it every half of it (one small script
    /// call, 20 a second at the default), and a candidate looks at it about as often;
    /// jobs due while a killed leader's lease runs out wait up to this long. An idle
    /// queue's lease is `idle_lease`, so this costs nothing while the queue is idle.
    pub busy_lease: Duration,
    /// The longest lease, taken when the next due work is further away (60 s). Both
    /// leases are kept within 10 ms and one day, the idle one no shorter than the busy.
    pub idle_lease: Duration,
    /// Jobs touched per `tick.lua` call (1,000), which bounds how long one call holds
    /// Redis. Kept within 1 and 10,000.
    pub batch: usize,
    /// This process's name in the lease; `None` makes one from the pid and a random
    /// number.
    pub name: Option<String>,
}

impl Default for LeaderOptions {
    fn default() -> LeaderOptions {
        LeaderOptions {
            busy_lease: Duration::from_millis(crate::contract::DEFAULT_BUSY_LEASE_MS),
            idle_lease: Duration::from_secs(60),
            batch: 1000,
            name: None,
        }
    }
}

/// A candidate for a queue's leadership, and the mover when elected.
///
/// [`spawn`](Leader::spawn) runs it as a task; [`step`](Leader::step) does one round by
/// hand (tests with a manual clock).
///
/// # Examples
///
/// ```no_run
/// use tickless_durable::{LeaderOptions, Queue};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
/// let leader = queue.leader(LeaderOptions::default()).spawn();
/// // ... workers run elsewhere ...
/// leader.stop().await; // steps down at once, so a candidate takes over without waiting
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Leader {
    queue: Queue,
    options: LeaderOptions,
    name: String,
    shared: Arc<Shared>,
    role: Role,
    last_map: Option<ClockMap>,
    /// The cold tier's passes (cold.rs), beside the ticks.
    #[cfg(feature = "cold")]
    cold: ColdRun,
    /// A leader without a cold tier: when it next looks whether the queue has cold jobs
    /// near, and whether it saw some at its last look (then it looks every round).
    cold_look: (Instant, bool),
}

#[derive(Debug, Clone, Copy)]
enum Role {
    Candidate {
        retry_at: Instant,
    },
    Leading {
        token: u64,
        /// The lease's end, on the queue's clock (ms).
        expires: u64,
        renew_at: Instant,
        next_wake: Instant,
        /// The head of `due` after the last tick, on the queue's clock (None: empty).
        next_ms: Option<u64>,
    },
}

/// Maps the queue's clock (ms) to this process's `Instant`s, from the last script answer.
#[derive(Debug, Clone, Copy)]
struct ClockMap {
    local: Instant,
    queue_ms: u64,
}

impl ClockMap {
    fn at(&self, ms: u64) -> Instant {
        match ms.checked_sub(self.queue_ms) {
            Some(ahead) => self.local + Duration::from_millis(ahead.min(1 << 40)),
            None => self.local,
        }
    }
}

/// Far enough to mean "never" for a sleep.
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// How long a new subscription's probe may take to come back (see
/// `Leader::confirm_subscription`): a round trip through Redis, with room for a busy one.
const CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// How often a leader whose rounds keep failing warns again (`tracing`): its first
/// failure warns at once.
const WARN_EVERY: Duration = Duration::from_secs(30);

impl Queue {
    /// A leadership candidate for this queue (see [`Leader`]).
    pub fn leader(&self, mut options: LeaderOptions) -> Leader {
        let name = options.name.clone().unwrap_or_else(default_name);
        // A lease between 10 ms and a day: timers and the scripts' arithmetic stay sane.
        let (shortest, longest) = (Duration::from_millis(10), Duration::from_secs(86_400));
        options.busy_lease = options.busy_lease.clamp(shortest, longest);
        options.idle_lease = options.idle_lease.clamp(options.busy_lease, longest);
        // At least one job per tick, and no more than a script call takes.
        options.batch = options.batch.clamp(1, MAX_BATCH);
        Leader {
            queue: self.clone(),
            options,
            name,
            shared: Arc::default(),
            role: Role::Candidate {
                retry_at: Instant::now(),
            },
            last_map: None,
            cold_look: (Instant::now(), false),
            #[cfg(feature = "cold")]
            cold: ColdRun::new(),
        }
    }
}

fn default_name() -> String {
    format!(
        "pid{}-{:08x}",
        std::process::id(),
        crate::random::random_u64() as u32
    )
}

impl Leader {
    /// What this leader has done so far.
    pub fn stats(&self) -> LeaderStats {
        stats(&self.shared)
    }

    /// Runs the candidate on the current tokio runtime until stopped; after any error
    /// (Redis away, a permission missing, garbage in a key of the queue) backs off
    /// and tries again, keeping its lease if it is still live; it never stops on an error.
    /// While Redis is away (down, restarting, loading) it tries every 100 ms, so it
    /// resumes within about that of Redis answering; after other errors it waits 100 ms
    /// doubling to 2 s. [`LeaderStats::errors`] counts them, and
    /// [`LeaderHandle::last_error`] says the last; [`LeaderStats::failing`] counts the
    /// rounds failed in a row, and [`LeaderHandle::stop`] returns the last round's error
    /// if it failed.
    pub fn spawn(self) -> LeaderHandle {
        let shared = self.shared.clone();
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(self.run(stopped));
        LeaderHandle {
            shared,
            stop,
            task: Some(task),
        }
    }

    /// One round by hand, for tests on a manual clock: takes the lease if it is free,
    /// renews it if due, and ticks (moves everything due on the queue's clock) whatever
    /// this process's timers say.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`] when Redis cannot be reached, [`Error::is_garbage`] when the
    /// queue's keys hold something else.
    ///
    /// With a cold tier ([`Queue::with_cold_tier`]), it also does a whole pass of the
    /// tier before it returns, whatever the tier's `check_every` says: the store's
    /// orphans swept, then moves, then loads.
    pub async fn step(&mut self) -> Result<(), Error> {
        #[cfg(feature = "cold")]
        self.cold_by_hand();
        self.wake_now();
        self.due_step().await?;
        if !self.is_leading() {
            // The lease ended on the queue's clock (a manual clock jumps): take it again.
            self.wake_now();
            self.due_step().await?;
        }
        #[cfg(feature = "cold")]
        self.cold_pass_now().await?;
        self.look_for_cold_jobs(true).await?;
        Ok(())
    }

    /// Does whatever this process's timers say is due: take the lease, renew it, tick.
    async fn due_step(&mut self) -> Result<(), Error> {
        let now = Instant::now();
        if let Role::Candidate { retry_at } = self.role {
            if now < retry_at {
                return Ok(());
            }
            self.acquire().await?;
        }
        // Tick first: the lease renewed after it is sized by the head the tick saw.
        if let Role::Leading { next_wake, .. } = self.role {
            if Instant::now() >= next_wake {
                self.tick().await?;
            }
        }
        if let Role::Leading { renew_at, .. } = self.role {
            if Instant::now() >= renew_at {
                self.renew().await?;
            }
        }
        #[cfg(feature = "cold")]
        self.cold_step().await;
        self.look_for_cold_jobs(false).await
    }

    /// Whether this candidate holds the lease (as of its last call to Redis).
    pub fn is_leading(&self) -> bool {
        matches!(self.role, Role::Leading { .. })
    }

    async fn tick(&mut self) -> Result<(), Error> {
        loop {
            let Role::Leading { token, .. } = self.role else {
                return Ok(());
            };
            let ticked = rdb::tick(self.queue.rdb(), token, self.options.batch).await?;
            let local = Instant::now();
            let Some(rdb::Ticked {
                now,
                next,
                flags,
                lags: promoted_lags,
            }) = ticked
            else {
                self.lose();
                return Ok(());
            };
            let more = flags & 1 == 1;
            let promoted = promoted_lags.len();
            if promoted > 0 {
                let mut lags = self.shared.lags.lock().unwrap_or_else(|e| e.into_inner());
                for lag in promoted_lags {
                    lags.record(lag);
                }
                self.shared
                    .promoted
                    .fetch_add(promoted as u64, Ordering::Relaxed);
                crate::trace::event!(debug, queue = self.queue.name(), promoted, "promote");
            }
            let map = ClockMap {
                local,
                queue_ms: now,
            };
            self.last_map = Some(map);
            let next_ms = u64::try_from(next).ok();
            if let Role::Leading {
                next_wake,
                next_ms: head,
                expires,
                renew_at,
                ..
            } = &mut self.role
            {
                *head = next_ms;
                *next_wake = match next_ms {
                    Some(ms) => map.at(ms),
                    None => local + FAR,
                };
                // Work nearer than the lease's end: shorten the lease now, so that a
                // dead leader is replaced before the work is due.
                let latest = next_ms.map_or(u64::MAX, |ms| {
                    ms.max(now + self.options.busy_lease.as_millis() as u64)
                });
                if *expires > latest.saturating_add(50) {
                    *renew_at = local;
                }
            }
            // Cron schedules running low on known occurrences get more (fenced); some
            // may be due at once, so the leader ticks again when any gained.
            let refilled =
                flags & 2 == 2 && crate::queue::recur::refill(&self.queue, token, now).await?;
            if !more && !refilled {
                return Ok(());
            }
            // A long drain (a backlog after an outage) keeps the lease it needs: a
            // short busy lease could end between two calls.
            if let Role::Leading { renew_at, .. } = self.role {
                if Instant::now() >= renew_at {
                    self.renew().await?;
                }
            }
        }
    }
}

async fn next_message(messages: &mut (impl Stream<Item = redis::Msg> + Unpin)) -> Option<String> {
    let message =
        std::future::poll_fn(|cx: &mut Context<'_>| Pin::new(&mut *messages).poll_next(cx)).await?;
    Some(message.get_payload::<String>().unwrap_or_default())
}
