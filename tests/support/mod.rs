//! What the durable tests share.

#![allow(dead_code)]

mod redis_server;

pub use redis_server::RedisServer;

use std::sync::atomic::{AtomicU32, Ordering};

/// A queue name no other test of this process uses.
pub fn queue_name(test: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{test}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
