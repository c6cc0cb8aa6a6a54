//! `tracing` events and spans of the durable queue (cargo feature `tracing`); without the
//! feature the macro expands to nothing, so no call site costs anything.
//!
//! Target `tickless_durable`. Events: `schedule` (debug), `promote` (debug, per tick that
//! moved jobs), `deliver`, `ack` (debug), `retry` and `dead` (warn), leader `acquired` and
//! `lost` (info), a leader's `not working` (warn: its first failed round, then every 30 s
//! while they fail) and `working again` (info), a worker's `stopping` and `stopped` (info,
//! with what its stop did). Each handler run by [`Worker::run`](crate::Worker::run) is in a span
//! `job` with the queue, id and attempt, so the handler's own events carry them.

/// `event!(level, fields..., "message")`: a `tracing` event under the feature, else
/// nothing (the arguments are not evaluated).
macro_rules! event {
    ($level:ident, $($rest:tt)*) => {
        #[cfg(feature = "tracing")]
        {
            tracing::$level!(target: "tickless_durable", $($rest)*);
        }
    };
}
pub(crate) use event;

/// The handler's future inside a `job` span of job `id`'s `attempt` (under the feature).
#[cfg(feature = "tracing")]
pub(crate) fn in_job_span<F: std::future::Future>(
    queue: &str,
    id: &str,
    attempt: u32,
    work: F,
) -> tracing::instrument::Instrumented<F> {
    use tracing::Instrument;
    work.instrument(tracing::info_span!(
        target: "tickless_durable",
        "job",
        queue,
        id,
        attempt
    ))
}

/// The handler's future as it is (without the feature).
#[cfg(not(feature = "tracing"))]
pub(crate) fn in_job_span<F: std::future::Future>(_: &str, _: &str, _: u32, work: F) -> F {
    work
}
