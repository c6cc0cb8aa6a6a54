//! Durable delayed jobs on Redis: a hierarchical timing wheel whose buckets are Redis keys
//! (cargo feature `redis`).
//!
//! In-process timers die with their process, and one process cannot hold every pending
//! job of a large shop. A [`Queue`] keeps jobs in Redis, where they survive restarts and
//! are shared by many machines: schedulers [`schedule`](Queue::schedule),
//! [`cancel`](Queue::cancel) and [`reschedule`](Queue::reschedule) by job id; one elected
//! [`Leader`] moves due jobs to a ready list; [`Worker`]s take them under a lease and
//! acknowledge them.
//!
//! ```no_run
//! use std::time::Duration;
//! use tickless::durable::{LeaderOptions, Queue, WorkerOptions};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), tickless::durable::Error> {
//! let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
//! queue.schedule("order:42", b"default review", Duration::from_secs(48 * 3600)).await?;
//! // The customer reviewed in time:
//! queue.cancel("order:42").await?;
//!
//! let _leader = queue.leader(LeaderOptions::default()).spawn();
//! queue
//!     .worker(WorkerOptions::default())
//!     .run(|job| async move {
//!         println!("recording the default review of {}", job.id());
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await
//! # }
//! ```
//!
//! Payloads are bytes, at most [`MAX_PAYLOAD_BYTES`]; encode them with any format (with
//! serde, `serde_json::to_vec` and `from_slice`): this module adds no serde dependency.
//!
//! # Guarantees
//!
//! - **Idempotent on id**: scheduling an id that names a job adds nothing.
//! - **Never early**: a job reaches the ready list only when the queue's clock (Redis
//!   `TIME`, one clock for every machine) has reached its due time.
//! - **At least once**: a job leaves Redis only when a worker acks the delivery that
//!   holds it. A worker that dies loses its deliveries' leases, and the leader puts the
//!   jobs back when the leases end; so a handler may run again for a job whose earlier
//!   run had started. Handlers should be idempotent.
//! - **One mover, fenced**: the leader holds a lease with a fencing token that grows on
//!   every new leadership; every move checks it, so a leader that paused past its lease
//!   moves nothing. A job moves from its bucket exactly once (`SPOP`/`ZREM` inside one
//!   script), so none is promoted twice.
//! - **Retries and dead letters**: a failed delivery is retried after a backoff; after
//!   its last attempt (5 by default) the job goes to the dead set, with its last error.
//! - **Durable** as far as Redis is: with `appendonly yes` and `appendfsync always`, a
//!   job whose `schedule` returned is kept through a crash of Redis; with `everysec`,
//!   through a crash of the Redis process but not always of the machine.
//!
//! # Keys
//!
//! Every key of queue `q` starts with `tickless:{q}:`; `{q}` is the hash tag, so a
//! queue lives in one Redis Cluster slot and queues spread over the cluster.
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `meta` | hash | the lease (`holder`, `token`, `expires`), `armed` (when the leader next wakes), the manual clock, promotion lag figures, counters `n_*` (one `HINCRBY` in the script that does the counted thing; see [`Counters`]) |
//! | `jobs` | hash | id → `due\|loc\|attempts\|max\|skip\|payload` |
//! | `b:<k>:<start>` | set | ids of the jobs in a bucket of level k |
//! | `due` | sorted set | `b<k>:<start>` per non-empty bucket, scored start − 256 ms; `j<id>` per staged job, scored by its due time; `l`, scored at or before the earliest lease end |
//! | `ready` | list | ids of due jobs, in order |
//! | `flight` | sorted set | id → lease end |
//! | `dead` | sorted set | id → when it died |
//! | `errors` | hash | id → last error |
//! | `wake` | channel | earlier wakes and shortened leases, for the leader and candidates |
//!
//! # The wheel
//!
//! Level k has buckets 1,024 × 64^k ms wide (1 s, 65 s, 70 min, 75 h, 199 days, 35
//! years, 2,230 years). Every script computes the *horizon*: the end of the 1 s slot
//! holding now + 256 ms. A job due before the horizon is *staged*: a member of `due`
//! scored by its own due time, so it is promoted at its millisecond. A later job goes to
//! the bucket of the coarsest level whose bucket for it starts at or after the horizon.
//! `due` holds one member per non-empty bucket, scored 256 ms before the bucket's start.
//! The leader waits for the head of `due` (a tickless timer: an idle queue costs no
//! commands), and `tick.lua` drains due buckets with `SPOP` into the staged window or
//! finer buckets, and promotes due staged jobs to `ready`. A job moves down at most six
//! times, each in bulk; cancelling it is an `SREM` or a `ZREM`.
//!
//! Worked example: at 12:00:00.000 a job is scheduled for 13:00:00.000. The horizon is
//! 12:00:01.024-ish; the 70-min bucket holding 13:00 starts at or after it, the 75-hour
//! one does not: the job goes to level 2, whose bucket is drained 256 ms before its
//! start, moving the job to a level-1 bucket (65 s), which is drained 256 ms before its
//! start into a level-0 bucket or straight into the staged window; at 13:00:00.000 the
//! leader's timer fires and the job is appended to `ready`.
//!
//! Why a staged window in Redis rather than in the leader's memory: a new leader, or one
//! that reconnects, finds the window where the last one left it, and a job scheduled
//! into it needs no message to the leader beyond "wake earlier". `BENCHMARKS.md` has the
//! cost (about 5 µs of Redis CPU per job) and the lag it buys (p50 1 ms, p99 4 ms).
//!
//! # The clock
//!
//! Due times, lease ends and leadership leases are judged by each script on Redis
//! `TIME`, never by a machine's clock. Tests can give a queue a manual clock
//! ([`Queue::set_manual_clock`]): a field of `meta` that every script reads instead.

#[cfg(feature = "dashboard")]
pub mod dashboard;
mod error;
mod inspect;
mod leader;
mod leader_handle;
mod peek;
mod queue;
mod redact;
mod reply;
mod scripts;
mod stats;
mod trace;
mod worker;

pub use error::Error;
pub use leader::{Leader, LeaderOptions};
pub use leader_handle::{LeaderHandle, LeaderStats};
pub use peek::{queue_names, Counters, DueBucket};
pub use queue::{Queue, When, MAX_ID_BYTES, MAX_PAYLOAD_BYTES, MAX_QUEUE_NAME_BYTES};
pub use reply::{JobInfo, JobState};
pub use stats::Stats;
pub use worker::{Backoff, Failed, Job, Worker, WorkerOptions};
