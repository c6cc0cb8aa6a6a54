//! The public futures, with the names and meaning of `tokio::time`.

pub mod error;
mod sleep;
mod timeout;

pub use sleep::{sleep, sleep_until, Sleep};
pub use timeout::{timeout, timeout_at, Timeout};
