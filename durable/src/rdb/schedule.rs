//! `schedule.lua`, `cancel.lua`, `reschedule.lua`: putting jobs in and taking them out.

use super::Rdb;
use super::Reply;
use super::{num, refs};
use crate::error::Error;
use crate::rdb::scripts::scripts;
use crate::when::When;

/// A job to schedule: id, payload, due time.
pub(crate) type NewJob<'a> = (&'a str, &'a [u8], When);

/// The token of a schedule call that may be sent again, and how long (ms) it may be
/// ([`ConnectOptions::retry_schedules_for`](crate::ConnectOptions::retry_schedules_for),
/// plus a second for the trip): what makes a resend exact (schedule.lua). `None` on a
/// queue that sends each call once.
pub(crate) fn resend_token(rdb: &Rdb) -> Option<(String, String)> {
    let limit = rdb.schedule_retry();
    (!limit.is_zero()).then(|| {
        let window = limit.as_millis().saturating_add(1000);
        (crate::random::random_hex(), window.to_string())
    })
}

/// One `schedule.lua` call, its `ARGV` built once so that it can be sent again as is.
///
/// `KEYS` meta, jobs, due, ready, sent. `ARGV[1]` n; then n times id, when
/// ([`When::arg`]), max attempts, payload; then, if resendable, token and window (ms).
/// Reply `{ now, added_1..added_n }` (1 added, 0 id in use). See schedule.lua.
pub(crate) struct ScheduleCall {
    args: Vec<Vec<u8>>,
    jobs: usize,
}

impl AsRef<[Vec<u8>]> for ScheduleCall {
    fn as_ref(&self) -> &[Vec<u8>] {
        &self.args
    }
}

impl ScheduleCall {
    /// The call that adds `jobs`, each with `max_attempts`, under resend `token`.
    pub(crate) fn new(
        max_attempts: u32,
        jobs: &[NewJob<'_>],
        token: Option<&(String, String)>,
    ) -> ScheduleCall {
        let attempts = num(max_attempts);
        let mut args = Vec::with_capacity(3 + 4 * jobs.len());
        args.push(num(jobs.len()));
        for (id, payload, when) in jobs {
            args.extend([
                id.as_bytes().to_vec(),
                when.arg().into_bytes(),
                attempts.clone(),
                payload.to_vec(),
            ]);
        }
        if let Some((token, window)) = token {
            args.extend([token.clone().into_bytes(), window.clone().into_bytes()]);
        }
        ScheduleCall {
            args,
            jobs: jobs.len(),
        }
    }

    /// Whether each job was added, in order.
    fn added(&self, reply: &Reply) -> Result<Vec<bool>, Error> {
        (1..=self.jobs)
            .map(|i| reply.int(i).map(|added| added == 1))
            .collect()
    }
}

/// Runs one [`ScheduleCall`], with `WAIT` if the queue waits for replicas: whether each
/// job was added, in order.
pub(crate) async fn schedule(rdb: &Rdb, call: &ScheduleCall) -> Result<Vec<bool>, Error> {
    let reply = if rdb.waits_for_replicas() {
        let mut replies = rdb
            .call_replicated(&scripts().schedule, std::slice::from_ref(call), true)
            .await?;
        replies.remove(0)
    } else {
        rdb.call(&scripts().schedule, &refs(&call.args)).await?
    };
    call.added(&reply)
}

/// Runs `calls` in one pipeline (then `WAIT` if the queue waits for replicas): whether
/// each job of each call was added, in order.
pub(crate) async fn schedule_pipelined(
    rdb: &Rdb,
    calls: &[ScheduleCall],
) -> Result<Vec<bool>, Error> {
    let replies = if rdb.waits_for_replicas() {
        rdb.call_replicated(&scripts().schedule, calls, true)
            .await?
    } else {
        rdb.call_many(&scripts().schedule, calls).await?
    };
    let mut added = Vec::new();
    for (call, reply) in calls.iter().zip(&replies) {
        added.extend(call.added(reply)?);
    }
    Ok(added)
}

/// `cancel.lua`: removes jobs wherever they are.
///
/// `ARGV` ids. Reply: per id, 1 removed, 0 none. Answers whether each existed.
pub(crate) async fn cancel(rdb: &Rdb, ids: &[&str]) -> Result<Vec<bool>, Error> {
    let args: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
    let reply = rdb.call(&scripts().cancel, &args).await?;
    cancelled(&reply, ids.len())
}

/// [`cancel`] for several calls in one pipeline, one per chunk of `calls`.
pub(crate) async fn cancel_pipelined(rdb: &Rdb, calls: &[Vec<&str>]) -> Result<Vec<bool>, Error> {
    let args: Vec<Vec<Vec<u8>>> = calls
        .iter()
        .map(|ids| ids.iter().map(|id| id.as_bytes().to_vec()).collect())
        .collect();
    let mut removed = Vec::new();
    let replies = rdb.call_many(&scripts().cancel, &args).await?;
    for (ids, reply) in calls.iter().zip(&replies) {
        removed.extend(cancelled(reply, ids.len())?);
    }
    Ok(removed)
}

fn cancelled(reply: &Reply, ids: usize) -> Result<Vec<bool>, Error> {
    (0..ids).map(|i| reply.int(i).map(|n| n == 1)).collect()
}

/// What [`reschedule`] found.
pub(crate) enum Rescheduled {
    /// The job was waiting and now waits for the new time.
    Moved,
    /// No job, or one in flight or dead: nothing changed.
    NotWaiting,
    /// A cold job: its record is in segment `seg` of the window starting at `window`.
    Cold { seg: u64, window: u64 },
}

/// `reschedule.lua`: moves waiting job `id` to `when` ([`When::arg`]).
///
/// `ARGV` id, when. Reply `{ now, 1 }` moved, `{ now, 0 }` not waiting,
/// `{ now, 2, seg, window }` cold (moved by cold_thaw.lua).
pub(crate) async fn reschedule(rdb: &Rdb, id: &str, when: &str) -> Result<Rescheduled, Error> {
    let reply = rdb
        .call(&scripts().reschedule, &[id.as_bytes(), when.as_bytes()])
        .await?;
    Ok(match reply.int(1)? {
        2 => Rescheduled::Cold {
            seg: reply.int(2)?.max(0) as u64,
            window: reply.int(3)?.max(0) as u64,
        },
        1 => Rescheduled::Moved,
        _ => Rescheduled::NotWaiting,
    })
}

/// `retry_dead.lua`: gives dead jobs `ids` (at most `MAX_BATCH`) fresh attempts, ready
/// now. Per id: `Some(true)` retried, `Some(false)` no dead job, `None` dead with a
/// record that cannot be read (quarantined).
///
/// `ARGV` ids. Reply: per id 1, 0 or -1.
pub(crate) async fn retry_dead(rdb: &Rdb, ids: &[&[u8]]) -> Result<Vec<Option<bool>>, Error> {
    let reply = rdb.call(&scripts().retry_dead, ids).await?;
    (0..ids.len())
        .map(|i| {
            reply.int(i).map(|n| match n {
                -1 => None,
                n => Some(n == 1),
            })
        })
        .collect()
}
