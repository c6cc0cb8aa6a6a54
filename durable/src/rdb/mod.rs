//! The Redis layer: how a queue reaches Redis ([`ConnectOptions`], `connect.rs`, with
//! `single.rs`, `nodes.rs` and `tls.rs`), one queue's connections and key names and how a
//! script call runs ([`Rdb`], `link.rs`), the Lua scripts ([`scripts`], `lua_lib.rs`,
//! `script_acl.rs`), and one typed function per script: the only code that builds a
//! script's `ARGV` or reads its reply. The roles above read with plain commands
//! (`HGETALL`, `ZRANGE`, ...) through [`Rdb::key`] and [`Rdb::conn`]; every change to
//! more than one key is a script, run from here.
//!
//! Named after asynq's `internal/rdb`, which keeps the same rule: each method that runs
//! a script documents its `KEYS`/`ARGV` right above it, and callers see typed arguments
//! and answers, never positions. The keys come from [`contract`](crate::contract) (which
//! writes each script's header); the `.lua` file's own header says what the script keeps.
//! Each function runs its script through [`Rdb::call`] and friends, decodes the reply,
//! and answers [`Error::is_garbage`](crate::Error::is_garbage) for a reply of the wrong
//! shape.
//!
//! By group: [`schedule`] (schedule, cancel, reschedule, retry dead), [`deliver`] (claim
//! and ack, fail, extend, give back), [`lead`] (acquire, renew, tick, release),
//! [`recur`] (set, delete, refill recurring schedules), [`cold`] (the cold tier's
//! moves and look-ups), [`repair`] (repair passes).

pub(crate) mod cold;
mod connect;
pub(crate) mod deliver;
pub(crate) mod lead;
mod link;
mod lua_lib;
mod nodes;
pub(crate) mod recur;
pub(crate) mod repair;
pub(crate) mod schedule;
mod script_acl;
pub(crate) mod scripts;
mod single;
mod tls;

pub use connect::ConnectOptions;
pub(crate) use link::Rdb;
pub use link::MAX_QUEUE_NAME_BYTES;

use crate::error::Error;
use redis::Value;

/// A script's answer: a flat array of integers and strings, read by position only in
/// this module.
pub(crate) struct Reply {
    items: Vec<Value>,
    key: String,
    script: &'static str,
}

impl Reply {
    pub(crate) fn new(value: Value, key: &str, script: &'static str) -> Result<Reply, Error> {
        let items = match value {
            Value::Array(items) => items,
            single @ Value::Int(_) => vec![single],
            other => {
                return Err(Error::garbage(
                    key,
                    format!("script {script} answered {other:?}, not an array"),
                ))
            }
        };
        Ok(Reply {
            items,
            key: key.to_string(),
            script,
        })
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn bad(&self, i: usize, what: &str) -> Error {
        Error::garbage(
            &self.key,
            format!(
                "script {} answered {:?} at {i}, not {what}",
                self.script,
                self.items.get(i)
            ),
        )
    }

    fn int(&self, i: usize) -> Result<i64, Error> {
        match self.items.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            Some(Value::BulkString(bytes)) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.bad(i, "an integer")),
            _ => Err(self.bad(i, "an integer")),
        }
    }

    fn take_bytes(&mut self, i: usize) -> Result<Vec<u8>, Error> {
        match self.items.get_mut(i) {
            Some(Value::BulkString(bytes)) => Ok(std::mem::take(bytes)),
            _ => Err(self.bad(i, "a string")),
        }
    }
}

/// A number as the scripts take it: decimal text.
fn num(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// The arguments of one call, as [`Rdb::call`] takes them.
fn refs(args: &[Vec<u8>]) -> Vec<&[u8]> {
    args.iter().map(Vec::as_slice).collect()
}
