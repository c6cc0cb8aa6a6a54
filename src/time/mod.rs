//! The public futures, with the names and meaning of `tokio::time`.

pub mod delay_queue;
pub mod error;
mod interval;
mod sleep;
mod timeout;

pub use interval::{interval, interval_at, Interval, MissedTickBehavior};
pub use sleep::{sleep, sleep_until, Sleep};
pub use timeout::{timeout, timeout_at, Timeout};
