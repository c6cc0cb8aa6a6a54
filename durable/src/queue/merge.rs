//! Concurrent single schedules of one queue, merged into batched script calls: a call's
//! Redis CPU is mostly the call's own (one job ~17 µs, 128 jobs ~5 µs each; BENCHMARKS.md).
//! What a caller sees is [`Queue::schedule`]'s to document; here, how it holds.
//!
//! A call that finds none on its way goes at once, alone. One that finds one waits in
//! `pending`; when the call on its way ends ([`Busy`] hands on however its caller's future
//! ends), a driver task sends `pending` as calls of up to [`MAX_MERGED`] jobs, each
//! followed by the queue's `WAIT`, so every caller's write is covered before it returns.
//! A batch that Redis refuses changed nothing, so its jobs go again one call each, for
//! each caller's own answer.
//!
//! # Ground rules
//!
//! - `State` is behind one `std::sync::Mutex`, held only to push, take or flip `busy`:
//!   never across an `.await` nor while an answer is sent.
//! - `busy` is true from the moment a call takes it until whoever sets it false under the
//!   lock has seen `pending` empty, or has taken it and answers every waiter (`abandon`:
//!   a driver dropped with its runtime): no waiter is left behind.
//! - A caller that drops its future while waiting leaves a closed channel, which is
//!   skipped; one dropped while its job is sent loses only its own answer.
//! - An `After` delay counts from the call: the time it waited is taken off
//!   (`durable_merge.rs`: `merged_schedules_are_due_their_own_delay_after_their_own_call`).

use crate::queue::Queue;
use crate::rdb::schedule::{self as rdb, resend_token, ScheduleCall};
use crate::when::When;
use crate::Error;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

/// The most jobs one merged call carries: [`Queue::schedule_batch`]'s per call.
pub(crate) const MAX_MERGED: usize = crate::queue::SCHEDULE_CHUNK;

/// One queue's merging state (see the module docs).
#[derive(Default)]
pub(crate) struct Merger {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A schedule call of this queue is on its way.
    busy: bool,
    /// Calls waiting for the next merged call, oldest first.
    pending: Vec<Waiting>,
}

/// A caller waiting for its job to be sent.
struct Waiting {
    job: Job,
    /// When it started waiting: an `After` due time is counted from then.
    since: Instant,
    answer: oneshot::Sender<Result<bool, Error>>,
}

/// One job of a schedule call.
struct Job {
    id: String,
    payload: Vec<u8>,
    when: When,
}

impl Merger {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held (none of its sections can panic) must not
        // stop every later schedule.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Schedules one job (checked already), merged with concurrent calls: see the module
/// docs.
pub(crate) async fn schedule(
    queue: &Queue,
    id: &str,
    payload: &[u8],
    when: When,
) -> Result<bool, Error> {
    let receiver = {
        let mut state = queue.merger().lock();
        if state.busy {
            let (answer, receiver) = oneshot::channel();
            state.pending.push(Waiting {
                job: Job {
                    id: id.to_string(),
                    payload: payload.to_vec(),
                    when,
                },
                since: Instant::now(),
                answer,
            });
            Some(receiver)
        } else {
            state.busy = true;
            None
        }
    };
    match receiver {
        Some(receiver) => receiver.await.unwrap_or_else(|_| {
            // The driver never drops an answer it was given; only a runtime shutting
            // down drops the driver.
            Err(Error::not_sent(queue.rdb().meta_key(), "schedule"))
        }),
        None => {
            let _busy = Busy(queue);
            let added = send(queue, &[(id, payload, when)]).await?;
            Ok(added[0])
        }
    }
}

/// The caller whose call is on its way: when its future ends (answered or dropped), the
/// calls that came meanwhile are handed to a driver task.
struct Busy<'a>(&'a Queue);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        hand_on(self.0);
    }
}

/// Starts a driver for `pending`, or marks the queue idle if nothing waits.
fn hand_on(queue: &Queue) {
    let mut state = queue.merger().lock();
    if state.pending.is_empty() {
        state.busy = false;
        return;
    }
    drop(state);
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            // Made before the task, so that a task dropped unpolled drops it too.
            let mut driver = Driver {
                queue: queue.clone(),
                done: false,
            };
            runtime.spawn(async move {
                drive(&driver.queue).await;
                driver.finished();
            });
        }
        // No runtime to send them from (a future dropped outside one).
        Err(_) => abandon(queue),
    }
}

/// The driver task's hold on `busy`. Dropped before the driver found `pending` empty
/// (its runtime shut down), it gives `busy` up and tells the waiters their jobs were not
/// sent: the queue must not stay busy with no one to send for it.
struct Driver {
    queue: Queue,
    done: bool,
}

impl Driver {
    /// The driver found `pending` empty and gave `busy` up itself.
    fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.done {
            abandon(&self.queue);
        }
    }
}

/// Marks the queue idle and answers every waiter that its job was not sent.
fn abandon(queue: &Queue) {
    let pending = {
        let mut state = queue.merger().lock();
        state.busy = false;
        std::mem::take(&mut state.pending)
    };
    for waiting in pending {
        let _ = waiting
            .answer
            .send(Err(Error::not_sent(queue.rdb().meta_key(), "schedule")));
    }
}

/// Sends `pending` in merged calls until none is left (the driver task).
async fn drive(queue: &Queue) {
    loop {
        let batch: Vec<Waiting> = {
            let mut state = queue.merger().lock();
            // Callers that gave up before their job was sent: not sent.
            state.pending.retain(|w| !w.answer.is_closed());
            if state.pending.is_empty() {
                state.busy = false;
                return;
            }
            let n = state.pending.len().min(MAX_MERGED);
            state.pending.drain(..n).collect()
        };
        let now = Instant::now();
        let (waiting, answers): (Vec<Job>, Vec<_>) = batch
            .into_iter()
            .map(|w| {
                let mut job = w.job;
                if let When::After(after) = job.when {
                    job.when =
                        When::After(after.saturating_sub(now.saturating_duration_since(w.since)));
                }
                (job, w.answer)
            })
            .unzip();
        let jobs: Vec<(&str, &[u8], When)> = waiting
            .iter()
            .map(|job| (job.id.as_str(), job.payload.as_slice(), job.when))
            .collect();
        match send(queue, &jobs).await {
            Ok(added) => {
                for (answer, added) in answers.into_iter().zip(added) {
                    let _ = answer.send(Ok(added));
                }
            }
            // Redis refused the call (a record that is not ours, say) and it changed
            // nothing: each job again on its own, for each caller's own answer.
            Err(err) if err.is_script_failure() && jobs.len() > 1 => {
                for (answer, job) in answers.into_iter().zip(jobs) {
                    if answer.is_closed() {
                        continue;
                    }
                    let _ = answer.send(send(queue, &[job]).await.map(|added| added[0]));
                }
            }
            Err(err) => {
                for answer in answers {
                    let _ = answer.send(Err(err.duplicate()));
                }
            }
        }
    }
}

/// One `schedule.lua` call of `jobs` (at most [`MAX_MERGED`]), with `WAIT` if the queue
/// waits for replicas: whether each was added, in order.
async fn send(queue: &Queue, jobs: &[(&str, &[u8], When)]) -> Result<Vec<bool>, Error> {
    let call = ScheduleCall::new(
        queue.max_attempts(),
        jobs,
        resend_token(queue.rdb()).as_ref(),
    );
    let call = &call;
    let added = queue
        .rdb()
        .schedule_through_failover(Instant::now(), move || rdb::schedule(queue.rdb(), call))
        .await?;
    #[cfg(feature = "tracing")]
    for ((id, _, _), added) in jobs.iter().zip(&added) {
        crate::trace::event!(debug, queue = queue.name(), id, added, "schedule");
    }
    Ok(added)
}
