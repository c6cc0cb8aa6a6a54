//! Durable delayed jobs on Redis: a hierarchical timing wheel whose buckets are Redis keys.
//!
//! `tickless-durable` is the Redis-kept sibling of the [`tickless`] timer: the same wheel
//! (levels of buckets, one queue entry per non-empty bucket, a driver that wakes only
//! when a bucket is due), with the buckets as Redis keys and one fenced leader turning
//! it. It depends on `tickless` like any user does, for the leader's and workers' waits.
//!
//! In-process timers die with their process, and one process cannot hold every pending
//! job of a large shop. A [`Queue`] keeps jobs in Redis, where they survive restarts and
//! are shared by many machines: schedulers [`schedule`](Queue::schedule),
//! [`cancel`](Queue::cancel) and [`reschedule`](Queue::reschedule) by job id; one elected
//! [`Leader`] moves due jobs to a ready list; [`Worker`]s take them under a lease and
//! acknowledge them. Or a queue hands its due jobs to a Redis Stream, for consumer
//! groups in any language ([`Queue::set_stream_outlet`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use tickless_durable::{LeaderOptions, Queue, WorkerOptions};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), tickless_durable::Error> {
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
//! - **Idempotent on id**: scheduling an id that names a job adds nothing. Once the job
//!   completes its id is free: a schedule sent again after its answer was lost, and
//!   after the job it stored already ran, schedules it again.
//! - **Never early**: a job reaches the ready list only when the queue's clock (Redis
//!   `TIME`, one clock for every machine) has reached its due time.
//! - **At least once**: a job leaves Redis only when a worker acks the delivery that
//!   holds it. A worker that dies loses its deliveries' leases, and the leader puts the
//!   jobs back when the leases end; so a handler may run again for a job whose earlier
//!   run had started. Handlers should be idempotent. A queue with a stream outlet hands
//!   a due job to its stream in the script that makes it due, and is done with it:
//!   acknowledging it is then the consumer group's (`XACK`), as is delivering again an
//!   entry a consumer left pending (`XAUTOCLAIM`); an entry trimmed by the stream's
//!   bound is lost, acknowledged or not.
//! - **One mover, fenced**: the leader holds a lease with a fencing token that grows on
//!   every new leadership; every move checks it, so a leader that paused past its lease
//!   moves nothing. A job moves from its bucket exactly once (`SREM`/`ZREM` inside one
//!   script), so none is promoted twice.
//! - **Retries and dead letters**: a failed delivery is retried after a backoff; after
//!   its last attempt (5 by default) the job goes to the dead set, with its last error.
//! - **Durable** as far as Redis is: with `appendonly yes` and `appendfsync always`, a
//!   job whose `schedule` returned is kept through a crash of Redis; with `everysec`,
//!   through a crash of the Redis process but not always of the machine. A job in the
//!   cold tier (feature `cold`: jobs due beyond a horizon kept in a directory or object
//!   storage, see `ColdTier`) is as durable as its store: it is there alone, written
//!   with `fsync` (a directory) or a returned PUT (S3) before Redis let it go. Every
//!   guarantee above holds for it.
//!
//! # Connecting
//!
//! [`Queue::connect`] takes one URL (`redis://`, or `rediss://` for TLS);
//! [`ConnectOptions`] says the rest: a Redis Cluster from seed URLs, a CA of your own for
//! TLS, and `WAIT` for replicas after each schedule
//! ([`ConnectOptions::wait_for_replicas`], which states what is kept with and without
//! it).
//!
//! # Keys
//!
//! Every key of queue `q` starts with `tickless:{q}:`; `{q}` is the hash tag, so a
//! queue lives in one Redis Cluster slot and queues spread over the cluster.
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `meta` | hash | the lease (`holder`, `token`, `expires`), `armed` (when the leader next wakes), the manual clock, the stream outlet (`outlet`, `outlet_max`), the cold tier's deployment id (`cdep`), segment counter (`cseq`) and scan cursor (`cscan`), promotion lag figures, counters `n_*` (one `HINCRBY` in the script that does the counted thing; see [`Counters`]) |
//! | `jobs` | hash | id → `due\|loc\|attempts\|max\|skip\|payload` |
//! | `b:<k>:<start>` | set | ids of the jobs in a bucket of level k |
//! | `due` | sorted set | `b<k>:<start>` per non-empty bucket, scored start − 256 ms; `j<id>` per staged job, scored by its due time; `l`, scored at or before the earliest lease end |
//! | `ready` | list | ids of due jobs, in order |
//! | `flight` | sorted set | id → lease end |
//! | `dead` | sorted set | id → when it died |
//! | `errors` | hash | id → last error |
//! | `recur` | hash | recurring schedule id → `kind\|policy\|max\|period\|spec\|payload` |
//! | `rnext` | hash | schedule id → `last:t1,t2,...`: the latest occurrence made into a job, then the known next ones |
//! | `rlow` | set | ids of cron schedules with fewer than 8 known occurrences, for the leader to refill |
//! | `ci:<hhhh>` | hash | the cold tier's index (feature `cold`): cold job id → its segment's number; `hhhh` the first four hex digits of SHA-1(id) |
//! | `cseg` | hash | cold segment number → `window\|left\|bytes` |
//! | `cwin` | sorted set | cold segment numbers, scored by their window's start |
//! | `sent` | sorted set | `<token>:<id>` of jobs due within the resend window that a schedule call which may be sent again added, scored by when (`ConnectOptions::retry_schedules_for`); older members are removed by later calls |
//! | `stream` | stream | the default key of the stream outlet: one entry per job made due (`id`, `delivery`, `attempt`, `due`, `payload`), trimmed with `MAXLEN ~`; an outlet may name another key with the queue's hash tag, which the scripts reach through `meta` as they reach buckets through the prefix |
//! | `wake` | channel | earlier wakes and shortened leases, for the leader and candidates |
//!
//! # The scripts
//!
//! Every change that touches more than one key is one Lua script (`src/rdb/scripts/`).
//! What the Rust side and the scripts must agree on has one source, `contract.rs`: the
//! key suffixes above, the member and bucket formats, the wheel's constants, and which
//! keys each script declares. Every script gets every key it touches in `KEYS` (as Redis
//! Cluster, proxies and ACL key patterns require), except bucket keys: which bucket a
//! tick drains is known only once it has read `due`, so scripts build bucket keys from
//! the prefix of `meta`. On a cluster whose slot is being migrated, a script whose
//! declared keys moved is answered `ASK`/`TRYAGAIN`, which the `redis` crate follows; one
//! that meets a bucket already moved fails, and the leader's backoff (or the caller,
//! for a schedule: it is idempotent on the id) tries again until the slot has moved.
//! Tunables (leases, batch sizes, backoffs) are script arguments; the leader's busy lease
//! also sits in `meta`'s `busy` for the scripts that shorten its lease.
//!
//! **A script changes nothing or finishes.** Redis does not undo a script's writes when
//! a later command of it fails, so every script checks every argument and the type of
//! every key it will write (a wrong one is an [`Error::is_garbage`] naming the key)
//! before its first write. A leader that meets such a key counts the error, backs off and
//! goes on ([`LeaderStats::errors`]); an error in a script names its line as
//! `<script>.lua:<line>` or `lib/<file>.lua:<line>`.
//!
//! # Repair
//!
//! [`Queue::repair`] (and `tickless-durable repair <url> <queue>`, and every new leader
//! when it takes over, fenced by its token) finds jobs whose record names a place that
//! does not hold them (a bucket that lost them or has no `due` member, a staged or ready
//! job in neither place nor in flight, a dead job not in `dead`, a schedule with no `r`
//! member) and puts them back, and removes entries that name no job. It reads the keys
//! a page at a time and judges each page in one atomic script, so it is safe while
//! leaders and workers run; jobs in flight are never touched, so it delivers nothing
//! twice. After an operator's mistake (a key overwritten or deleted), fix or delete the
//! key and run it: no job whose record survived is lost.
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
//! commands), and `tick.lua` drains due buckets (`SRANDMEMBER`, then `SREM`) into the
//! staged window or finer buckets, and promotes due staged jobs to `ready`. A job moves down at most six
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
//! # Recurring jobs
//!
//! [`Queue::every`] and [`Queue::cron`] set a schedule by id (setting the same one again
//! changes nothing, so an application can set its schedules at every start);
//! [`Queue::unschedule`] removes it; [`Queue::schedules`] lists them with their next
//! occurrence. Each occurrence `t` becomes an ordinary job named `<id>@<t in ms>`,
//! delivered, retried and dead-lettered like any other.
//!
//! **One job per occurrence.** A schedule's next occurrence is the `due` member `r<id>`,
//! so the leader's timer wakes for it like for a staged job. `tick.lua` makes the job
//! and moves the schedule's `last` past it (in `rnext`) in the same script, fenced by
//! the leader's token: a leader that dies before the script made nothing, one that dies
//! after left the schedule moved on; a paused leader whose lease ended makes nothing.
//! `rnext` only holds times after `last`, and only later times are ever appended.
//!
//! **Cron in Rust, the move in Lua.** Lua cannot read a cron expression, and the leader
//! must not wait for Rust between handing out an occurrence and recording it. So
//! [`Queue::cron`] computes the next 32 occurrences (with the `croner` crate, in the
//! schedule's IANA zone) into `rnext`; the tick consumes them; when fewer than 8 remain it
//! adds the id to `rlow` and tells the leader, which computes 32 more after the last known
//! one and appends them with `recur_fill.lua`, fenced by its token and only if `rnext`
//! still holds the list it computed from. An `every` schedule needs none of this: Lua
//! adds the period.
//!
//! Worked example: at 2026-03-27 12:00 UTC, `cron("nightly", "0 2 * * *", "Europe/Paris",
//! ..)`. `rnext` is `<now>:1774659600000,1774746000000,...` (28 March 01:00 UTC = 02:00
//! CET; 29 March 01:00 UTC = 03:00 CEST, because that night has no 02:00: Vixie cron's
//! rule, run right after the gap; then 00:00 UTC = 02:00 CEST from the 30th), and `due`
//! holds `rnightly` scored 1774659600000. At that millisecond the leader's tick reads
//! both hashes, appends the job `nightly@1774659600000` to `ready`, writes
//! `1774659600000:1774746000000,...` and scores `rnightly` at the next time. After the
//! 25th night, 7 times are left: the tick adds `nightly` to `rlow` and flags its reply;
//! the leader computes 32 more and appends them. In October the night with two 02:00s
//! runs once, at the first (02:00 CEST, 00:00 UTC).
//!
//! **Downtime.** When a tick finds several occurrences of a schedule due (no leader ran
//! for a while), [`CatchUp`] says what runs: every one ([`CatchUp::Burst`], one job
//! each, a bounded number per tick call), or one job for the latest due occurrence
//! ([`CatchUp::Delay`]: an `every` schedule then counts on from now; [`CatchUp::Skip`],
//! the default: the grid stays). A cron schedule whose known times are all due (say a
//! day of downtime for `*/5 * * * *`) runs nothing until the leader has appended times
//! from the latest due occurrence on, so `Skip` and `Delay` still run exactly one job.
//!
//! Schedules are not jobs: an occurrence whose job is still running does not stop the
//! next one (jobs may overlap); make the handler skip if that matters.
//!
//! # The clock
//!
//! Due times, lease ends and leadership leases are judged by each script on Redis
//! `TIME`, never by a machine's clock. Tests can give a queue a manual clock
//! ([`Queue::set_manual_clock`]): a field of `meta` that every script reads instead.

#![deny(missing_docs, unsafe_code, unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "api")]
#[cfg_attr(docsrs, doc(cfg(feature = "api")))]
pub mod api;
mod cold;
mod contract;
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub mod dashboard;
mod error;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod hook;
#[cfg(test)]
mod layers;
mod leader;
mod queue;
mod random;
mod rdb;
mod read;
mod redact;
mod reply;
mod retry;
mod trace;
mod when;
mod worker;

#[cfg(feature = "cold")]
#[cfg_attr(docsrs, doc(cfg(feature = "cold")))]
pub use cold::ColdTier;
pub use cold::ColdWindow;
pub use error::Error;
pub use leader::handle::{LeaderHandle, LeaderStats};
pub use leader::{Leader, LeaderOptions};
/// The `object_store` crate the cold tier is built with: its stores and builders
/// (`object_store::aws::AmazonS3Builder` with feature `s3`) for [`ColdTier::new`] and
/// [`ColdTier::s3`], without a dependency (and a version to match) of your own.
#[cfg(feature = "cold")]
#[cfg_attr(docsrs, doc(cfg(feature = "cold")))]
pub use object_store;
pub use queue::outlet::StreamOutlet;
pub use queue::recur::{Recurrence, ScheduleInfo};
pub use queue::repair::Repaired;
pub use queue::{Queue, MAX_ID_BYTES, MAX_PAYLOAD_BYTES};
pub use rdb::{ConnectOptions, MAX_QUEUE_NAME_BYTES};
pub use read::counts::{queue_names, Counters, DueBucket};
pub use read::stats::Stats;
pub use read::stream::{StreamGroup, StreamInfo};
pub use reply::{JobInfo, JobState};
pub use when::{CatchUp, When};
pub use worker::backoff::Backoff;
// README.md's examples are doc tests too: the quick start runs against the Redis in
// `REDIS_URL` (scripts/test.sh starts one), the others compile (one needs `dashboard`,
// one `s3`).
#[cfg(all(doctest, feature = "dashboard", feature = "s3"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use worker::job::{Failed, Job};
pub use worker::run::Stopped;
pub use worker::{Worker, WorkerOptions};
