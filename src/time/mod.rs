//! The public futures, with the names and meaning of `tokio::time`. They are registered
//! on a shard they are handed; which timer is current is the `Timer` layer's business
//! (`timer/free.rs` holds the free functions), so nothing here imports `timer`, except
//! a lazy [`Timeout`]'s first wait (see `timeout.rs`).

pub mod delay_queue;
pub mod error;
mod interval;
mod sleep;
mod timeout;

pub use interval::{Interval, MissedTickBehavior};
pub use sleep::Sleep;
pub(crate) use timeout::Delay;
pub use timeout::Timeout;
