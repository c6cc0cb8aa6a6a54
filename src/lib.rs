//! An async timer on a Kafka-style hierarchical timing wheel.
//!
//! `tickless` has the names and meaning of [`tokio::time`]: [`sleep`], [`sleep_until`],
//! [`timeout`], [`timeout_at`], [`Sleep`], [`Timeout`], [`error::Elapsed`], [`Instant`].
//! Underneath is one timing wheel whose driver sleeps until the next *non-empty* bucket
//! expires and never ticks through empty ones:
//!
//! - timers live in a slab; each bucket is a linked list through slab keys, so registering
//!   and cancelling are O(1) and allocate nothing;
//! - levels of coarser buckets are added only when a deadline needs them, so any deadline,
//!   up to `Duration::MAX`, fits;
//! - a queue of non-empty buckets tells the driver when to wake: one timer at 10 ms and one
//!   at an hour cost a handful of wakeups, not 3.6 million ticks;
//! - the clock is tokio's, so `tokio::time::pause`, `advance` and
//!   `#[tokio::test(start_paused = true)]` drive it;
//! - [`Sleep`] is `Unpin` and 24 bytes.
//!
//! # Callbacks
//!
//! [`Timer::schedule`] runs a closure when its deadline comes, and returns a [`Scheduled`]
//! handle that cancels it, exactly once against a racing driver: Netty's
//! `HashedWheelTimer` and Kafka's `SystemTimer`, on the same wheel and driver as every
//! `Sleep` (see the [`Timer`] docs on callbacks).
//!
//! # Purgatory
//!
//! [`purgatory::Purgatory`] keeps operations waiting under several keys for a condition or
//! a deadline, each ending exactly once, and leaving every key the moment it ends (Kafka's
//! `DelayedOperationPurgatory`, with no purge); [`purgatory::ThresholdPurgatory`] waits for
//! a key's value to reach a threshold in O(completed).
//!
//! # Switching from `tokio::time`
//!
//! The crate root mirrors `tokio::time`: `sleep`, `sleep_until`, `Sleep`, `timeout`,
//! `timeout_at`, `Timeout`, `interval`, `interval_at`, `Interval`, `MissedTickBehavior`,
//! `Instant`, `Duration` and `error::Elapsed` have the same names, signatures and meaning,
//! so code written against `tokio::time` compiles against tickless by changing only its
//! `use` lines (`use tokio::time::{...}` becomes `use tickless::{...}`, and
//! `use tokio::time;` becomes `use tickless as time;`). `DelayQueue` and its
//! `delay_queue::{Key, Expired}` mirror `tokio_util::time`.
//!
//! The types are tickless's own, not tokio's, so what names tokio's types does not switch
//! with the `use` line: an error type's `From<tokio::time::error::Elapsed>`, or a library
//! API taking tokio's `Interval` or `Sleep`. Across that line: [`error::Elapsed`] converts
//! from tokio's (and into `std::io::Error`, as tokio's does), [`MissedTickBehavior`] both
//! ways, and [`Interval::from_tokio`] and [`Sleep::from_tokio`] build ours from tokio's.
//!
//! # Which timer
//!
//! The free functions use [`Timer::current`]: an [entered](Timer::enter) timer, else the
//! current tokio runtime's default timer (turned inside that runtime's own timer
//! processing, so tickless timers fire in the same pass as tokio's), else a process-wide
//! timer driven by a thread of its own, so they work with no setup inside
//! `#[tokio::main]`, `#[tokio::test]` and `futures::executor::block_on` alike. Every timer
//! is sharded by thread: worker threads sharing one do not contend for one lock. Build a
//! [`Timer`] to choose the tick, the wheel size, the shards or the [`Driver`].
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! tickless::sleep(Duration::from_millis(10)).await;
//!
//! let result = tickless::timeout(Duration::from_millis(10), async { "done" }).await;
//! assert_eq!(result, Ok("done"));
//! # }
//! ```
#![deny(missing_docs, unsafe_code, unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod callback;
mod driver;
pub mod purgatory;
mod sync;
mod time;
mod timer;
mod wheel;

pub use callback::Scheduled;
/// `std::time::Duration`, re-exported as `tokio::time` does, so that a `use` line naming
/// `tokio::time::{Duration, ...}` switches over unchanged.
pub use std::time::Duration;
pub use time::delay_queue::{self, DelayQueue};
pub use time::error;
pub use time::{Interval, MissedTickBehavior, Sleep, Timeout};
pub use timer::{
    interval, interval_at, sleep, sleep_until, timeout, timeout_at, BuildError, Builder, Driver,
    EnterGuard, Stats, Timer, MAX_SHARDS, MAX_WHEEL_SIZE,
};
/// tokio's `Instant`, so a paused tokio clock is the timer's clock too.
pub use tokio::time::Instant;
/// tokio's clock controls (feature `test-util`): they move the clock of tickless's timers
/// driven by that runtime too, so `use tickless as time;` covers `time::pause()` as well.
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use tokio::time::{advance, pause, resume};
