//! The read side: what a queue holds and how it is doing, read without changing it —
//! counts and the wheel's buckets ([`counts`]), jobs one by one and the dead set
//! ([`jobs`]), the statistics a dashboard shows ([`stats`]), a stream outlet's length and
//! consumer groups ([`stream`]). The cold tier's windows are
//! read in `cold::view`. Writes an operator makes (retrying dead jobs, the manual clock)
//! are with the queue's other writes, in `queue/`.

pub(crate) mod counts;
pub(crate) mod jobs;
pub(crate) mod stats;
pub(crate) mod stream;
