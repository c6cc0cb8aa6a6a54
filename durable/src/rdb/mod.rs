//! One typed function per Lua script: the only code that builds a script's `ARGV` or
//! reads its reply.
//!
//! Named after asynq's `internal/rdb`, which keeps the same rule: each method that runs
//! a script documents its `KEYS`/`ARGV` right above it, and callers see typed arguments
//! and answers, never positions. The keys come from [`contract`](super::contract) (which
//! writes each script's header); the `.lua` file's own header says what the script keeps.
//! Each function runs its script through [`Queue::call`](super::Queue::call) and friends
//! (the connection layer), decodes the reply, and answers
//! [`Error::is_garbage`](super::Error::is_garbage) for a reply of the wrong shape.
//!
//! By group: [`schedule`] (schedule, cancel, reschedule, retry dead), [`deliver`] (claim
//! and ack, fail, extend, give back), [`lead`] (acquire, renew, tick, release).

pub(crate) mod deliver;
pub(crate) mod lead;
pub(crate) mod schedule;

/// A number as the scripts take it: decimal text.
fn num(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// The arguments of one call, as [`Queue::call`](super::Queue::call) takes them.
fn refs(args: &[Vec<u8>]) -> Vec<&[u8]> {
    args.iter().map(Vec::as_slice).collect()
}
