//! The handlers. Each one checks the token, then every field of the request, and only
//! then calls the library: a refused request has sent nothing to Redis.

use super::auth::{self, Scope};
use super::extract::{parse, Body, JsonBytes, PathOf, QueryOf};
use super::model::{
    self, Ack, BatchScheduled, Claim, Claimed, Count, Counts, DeadJobs, Delivery, Done, Due,
    Extend, Fail, FailOutcome, JobView, NewDue, NewJob, NewJobs, NewSchedule, Outcome, Page,
    ScheduleView, Scheduled, Schedules,
};
use super::problem::Problem;
use super::State;
use crate::contract::MAX_BATCH;
use crate::{Queue, When, WorkerOptions};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

type Shared = axum::extract::State<Arc<State>>;
type Answer = Result<Response, Problem>;

/// The most jobs one claim takes.
const MAX_CLAIM: u32 = 1000;
/// The longest a claim waits for a job.
const MAX_WAIT_MS: u64 = 30_000;
/// The most dead jobs a page lists.
const MAX_PAGE: u32 = 1000;

pub(super) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/queues/{queue}/jobs", post(schedule))
        .route("/queues/{queue}/jobs/batch", post(schedule_batch))
        .route("/queues/{queue}/jobs/{id}", get(job).delete(cancel))
        .route("/queues/{queue}/jobs/{id}/reschedule", post(reschedule))
        .route("/queues/{queue}/schedules", get(schedules))
        .route(
            "/queues/{queue}/schedules/{id}",
            put(set_schedule).delete(unschedule),
        )
        .route("/queues/{queue}/counts", get(counts))
        .route("/queues/{queue}/dead", get(dead))
        .route("/queues/{queue}/dead/{id}/retry", post(retry_dead))
        .route("/queues/{queue}/claim", post(claim))
        .route("/queues/{queue}/ack", post(ack))
        .route("/queues/{queue}/fail", post(fail))
        .route("/queues/{queue}/extend", post(extend))
        .with_state(state)
}

/// The token of a request, checked before its body is read: a request without a valid
/// token is refused whatever its body.
pub(super) struct Caller(usize);

impl axum::extract::FromRequestParts<Arc<State>> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<State>,
    ) -> Result<Caller, Problem> {
        let caller = auth::caller(&state.tokens, &parts.headers)?;
        if let Some(name) = parts.extensions.get::<super::track::TokenName>() {
            let _ = name.0.set(state.tokens[caller].shared_name());
        }
        Ok(Caller(caller))
    }
}

/// The queue, once the caller's token may do `scope` on it.
async fn open(state: &State, caller: Caller, queue: &str, scope: Scope) -> Result<Queue, Problem> {
    auth::check(&state.tokens[caller.0], scope, queue)?;
    state.queue(queue).await
}

fn ok<T: serde::Serialize>(value: T) -> Answer {
    Ok(Json(value).into_response())
}

/// A checked job: its id, payload and due time (borrowed from the body when they were).
type Checked<'a> = (Cow<'a, str>, Cow<'a, [u8]>, When);

/// `job`, once its id, due time and payload are checked.
fn checked(job: NewJob<'_>) -> Result<Checked<'_>, Problem> {
    crate::queue::check_id(&job.id)?;
    let when = Due {
        delay_ms: job.delay_ms,
        at: job.at.as_deref(),
    }
    .when()?;
    let payload = model::decode(job.payload, job.encoding)?;
    if payload.len() > crate::MAX_PAYLOAD_BYTES {
        return Err(crate::Error::payload_too_large(
            &job.id,
            payload.len(),
            crate::MAX_PAYLOAD_BYTES,
        )
        .into());
    }
    Ok((job.id, payload, when))
}

fn outcome(added: bool) -> Outcome {
    if added {
        Outcome::Added
    } else {
        Outcome::Exists
    }
}

/// Schedule one job.
#[utoipa::path(post, path = "/v1/queues/{queue}/jobs", tag = "jobs",
    params(("queue" = String, Path, description = "The queue's name")),
    request_body = NewJob<'_>,
    responses(
        (status = 201, description = "Added", body = Scheduled<'_>),
        (status = 200, description = "A job with this id exists: nothing changed", body = Scheduled<'_>),
    ))]
pub(super) async fn schedule(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    JsonBytes(body): JsonBytes,
) -> Answer {
    let job: NewJob<'_> = parse(&body)?;
    let queue = open(&state, caller, &queue, Scope::Schedule).await?;
    let (id, payload, when) = checked(job)?;
    let added = queue.schedule(&id, &payload, when).await?;
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(Scheduled {
            id,
            result: outcome(added),
        }),
    )
        .into_response())
}

/// Schedule up to 10,000 jobs. All or nothing on the checks: one bad job refuses the
/// batch and nothing is scheduled. On a Redis error (503) a prefix of the jobs may have
/// been added: sending the same batch again is safe.
#[utoipa::path(post, path = "/v1/queues/{queue}/jobs/batch", tag = "jobs",
    params(("queue" = String, Path, description = "The queue's name")),
    request_body = NewJobs<'_>,
    responses((status = 200, description = "Each job's outcome, in order", body = BatchScheduled<'_>)))]
pub(super) async fn schedule_batch(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    JsonBytes(body): JsonBytes,
) -> Answer {
    let batch: NewJobs<'_> = parse(&body)?;
    let queue = open(&state, caller, &queue, Scope::Schedule).await?;
    if batch.jobs.len() > MAX_BATCH {
        return Err(Problem::too_many(format!(
            "{} jobs in one batch, above the limit of {MAX_BATCH}",
            batch.jobs.len()
        )));
    }
    let mut jobs = Vec::with_capacity(batch.jobs.len());
    for (n, job) in batch.jobs.into_iter().enumerate() {
        jobs.push(checked(job).map_err(|problem| problem.in_batch(n))?);
    }
    let added = queue
        .schedule_batch(
            jobs.iter()
                .map(|(id, payload, when)| (id.as_ref(), payload, *when)),
        )
        .await?;
    let results = jobs
        .into_iter()
        .zip(added)
        .map(|((id, _, _), added)| Scheduled {
            id,
            result: outcome(added),
        })
        .collect();
    ok(BatchScheduled { results })
}

/// Look a job up.
#[utoipa::path(get, path = "/v1/queues/{queue}/jobs/{id}", tag = "jobs",
    params(("queue" = String, Path, description = "The queue's name"),
           ("id" = String, Path, description = "The job's id (percent-encoded)")),
    responses((status = 200, description = "The job", body = JobView)))]
pub(super) async fn job(
    state: Shared,
    caller: Caller,
    PathOf((queue, id)): PathOf<(String, String)>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Read).await?;
    match queue.job(&id).await? {
        Some(info) => ok(JobView::from(info)),
        None => Err(Problem::not_found(format!(
            "no job {id:?} in queue {:?}",
            queue.name()
        ))),
    }
}

/// Cancel a job wherever it is (scheduled, ready, in flight or dead).
#[utoipa::path(delete, path = "/v1/queues/{queue}/jobs/{id}", tag = "jobs",
    params(("queue" = String, Path, description = "The queue's name"),
           ("id" = String, Path, description = "The job's id (percent-encoded)")),
    responses((status = 200, description = "`done`: there was such a job", body = Done)))]
pub(super) async fn cancel(
    state: Shared,
    caller: Caller,
    PathOf((queue, id)): PathOf<(String, String)>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Schedule).await?;
    ok(Done {
        done: queue.cancel(&id).await?,
    })
}

/// Move a waiting job (scheduled or ready, not in flight) to a new due time.
#[utoipa::path(post, path = "/v1/queues/{queue}/jobs/{id}/reschedule", tag = "jobs",
    params(("queue" = String, Path, description = "The queue's name"),
           ("id" = String, Path, description = "The job's id (percent-encoded)")),
    request_body = NewDue,
    responses((status = 200, description = "`done`: the job was waiting and moved", body = Done)))]
pub(super) async fn reschedule(
    state: Shared,
    caller: Caller,
    PathOf((queue, id)): PathOf<(String, String)>,
    Body(due): Body<NewDue>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Schedule).await?;
    let when = Due {
        delay_ms: due.delay_ms,
        at: due.at.as_deref(),
    }
    .when()?;
    ok(Done {
        done: queue.reschedule(&id, when).await?,
    })
}

/// List the recurring schedules.
#[utoipa::path(get, path = "/v1/queues/{queue}/schedules", tag = "schedules",
    params(("queue" = String, Path, description = "The queue's name")),
    responses((status = 200, description = "The schedules", body = Schedules)))]
pub(super) async fn schedules(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Read).await?;
    let schedules = queue
        .schedules()
        .await?
        .into_iter()
        .map(ScheduleView::from)
        .collect();
    ok(Schedules { schedules })
}

/// Set a recurring schedule: `every_ms`, or `cron` in `zone`. Setting it again as it is
/// changes nothing.
#[utoipa::path(put, path = "/v1/queues/{queue}/schedules/{id}", tag = "schedules",
    params(("queue" = String, Path, description = "The queue's name"),
           ("id" = String, Path, description = "The schedule's id (percent-encoded)")),
    request_body = NewSchedule,
    responses((status = 200, description = "`done`: it was new or changed", body = Done)))]
pub(super) async fn set_schedule(
    state: Shared,
    caller: Caller,
    PathOf((queue, id)): PathOf<(String, String)>,
    Body(body): Body<NewSchedule>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Schedule).await?;
    let payload = model::decode(Cow::Owned(body.payload), body.encoding)?;
    let bad = |detail: &str| {
        Problem::invalid(
            "invalid-schedule",
            "Invalid recurring schedule",
            detail.to_string(),
        )
    };
    let done = match (body.every_ms, body.cron) {
        (Some(ms), None) if body.zone.is_none() => {
            queue
                .every(&id, Duration::from_millis(ms), &payload)
                .await?
        }
        (Some(_), None) => return Err(bad("zone goes with cron, not every_ms")),
        (None, Some(cron)) => {
            let zone = body.zone.as_deref().unwrap_or("UTC");
            queue.cron(&id, &cron, zone, &payload).await?
        }
        _ => return Err(bad("give every_ms or cron, one of them")),
    };
    ok(Done { done })
}

/// Remove a recurring schedule (its jobs already made stay).
#[utoipa::path(delete, path = "/v1/queues/{queue}/schedules/{id}", tag = "schedules",
    params(("queue" = String, Path, description = "The queue's name"),
           ("id" = String, Path, description = "The schedule's id (percent-encoded)")),
    responses((status = 200, description = "`done`: there was such a schedule", body = Done)))]
pub(super) async fn unschedule(
    state: Shared,
    caller: Caller,
    PathOf((queue, id)): PathOf<(String, String)>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Schedule).await?;
    ok(Done {
        done: queue.unschedule(&id).await?,
    })
}

/// Jobs by state.
#[utoipa::path(get, path = "/v1/queues/{queue}/counts", tag = "queues",
    params(("queue" = String, Path, description = "The queue's name")),
    responses((status = 200, description = "Counts", body = Counts)))]
pub(super) async fn counts(state: Shared, PathOf(queue): PathOf<String>, caller: Caller) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Read).await?;
    let stats = queue.stats().await?;
    ok(Counts {
        scheduled: stats.scheduled,
        ready: stats.ready,
        in_flight: stats.in_flight,
        dead: stats.dead,
        cold: stats.cold,
    })
}

/// A page of dead jobs, oldest death first.
#[utoipa::path(get, path = "/v1/queues/{queue}/dead", tag = "dead",
    params(("queue" = String, Path, description = "The queue's name"), Page),
    responses((status = 200, description = "Dead jobs", body = DeadJobs)))]
pub(super) async fn dead(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    QueryOf(page): QueryOf<Page>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Read).await?;
    if !(1..=MAX_PAGE).contains(&page.limit) {
        return Err(Problem::invalid(
            "invalid-page",
            "Invalid page",
            format!("limit {}: not between 1 and {MAX_PAGE}", page.limit),
        ));
    }
    if page.offset > 1_000_000_000 {
        return Err(Problem::invalid(
            "invalid-page",
            "Invalid page",
            format!("offset {}: above 1000000000", page.offset),
        ));
    }
    let jobs = queue
        .dead(page.offset as usize, page.limit as usize)
        .await?;
    ok(DeadJobs {
        jobs: jobs.into_iter().map(JobView::from).collect(),
    })
}

/// Give a dead job a new set of attempts, due now.
#[utoipa::path(post, path = "/v1/queues/{queue}/dead/{id}/retry", tag = "dead",
    params(("queue" = String, Path, description = "The queue's name"),
           ("id" = String, Path, description = "The job's id (percent-encoded)")),
    responses((status = 200, description = "`done`: there was such a dead job", body = Done)))]
pub(super) async fn retry_dead(
    state: Shared,
    caller: Caller,
    PathOf((queue, id)): PathOf<(String, String)>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Admin).await?;
    ok(Done {
        done: queue.retry_dead(&id).await?,
    })
}

/// Claim up to `max` ready jobs, waiting up to `wait_ms` for one (long poll). Each
/// delivery holds its job for `lease_ms`: ack, fail or extend it before then, or it is
/// delivered again.
#[utoipa::path(post, path = "/v1/queues/{queue}/claim", tag = "workers",
    params(("queue" = String, Path, description = "The queue's name")),
    request_body = Claim,
    responses((status = 200, description = "The jobs claimed (none if the wait ended first)", body = Claimed)))]
pub(super) async fn claim(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    Body(claim): Body<Claim>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Work).await?;
    if !(1..=MAX_CLAIM).contains(&claim.max) {
        return Err(Problem::invalid(
            "invalid-claim",
            "Invalid claim",
            format!("max {}: not between 1 and {MAX_CLAIM}", claim.max),
        ));
    }
    if claim.wait_ms > MAX_WAIT_MS {
        return Err(Problem::invalid(
            "invalid-claim",
            "Invalid claim",
            format!("wait_ms {}: above {MAX_WAIT_MS}", claim.wait_ms),
        ));
    }
    let options = WorkerOptions {
        lease: model::lease_of(claim.lease_ms)?,
        ..WorkerOptions::default()
    };
    let mut worker = queue.worker(options);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(claim.wait_ms);
    let jobs = worker.claim_until(claim.max as usize, deadline).await?;
    let jobs = jobs
        .into_iter()
        .map(|job| {
            let (payload, encoding) = model::encode(job.payload().to_vec());
            Delivery {
                id: job.id().to_string(),
                delivery: job.delivery(),
                attempt: job.attempt(),
                due: model::rfc3339(job.due()),
                payload,
                encoding,
            }
        })
        .collect();
    ok(Claimed { jobs })
}

fn deliveries(refs: &[model::DeliveryRef]) -> Result<Vec<(&str, u64)>, Problem> {
    if refs.len() > MAX_BATCH {
        return Err(Problem::too_many(format!(
            "{} deliveries, above the limit of {MAX_BATCH}",
            refs.len()
        )));
    }
    refs.iter()
        .map(|d| {
            crate::queue::check_id(&d.id)?;
            model::check_delivery(d.delivery)?;
            Ok((d.id.as_str(), d.delivery))
        })
        .collect()
}

/// Complete deliveries; `count` says how many still held their job (the others' leases
/// ended, or their jobs were cancelled: they are, or will be, delivered again).
#[utoipa::path(post, path = "/v1/queues/{queue}/ack", tag = "workers",
    params(("queue" = String, Path, description = "The queue's name")),
    request_body = Ack,
    responses((status = 200, description = "How many were acked", body = Count)))]
pub(super) async fn ack(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    Body(body): Body<Ack>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Work).await?;
    let acks: Vec<(String, u64)> = deliveries(&body.deliveries)?
        .into_iter()
        .map(|(id, delivery)| (id.to_string(), delivery))
        .collect();
    let worker = queue.worker(WorkerOptions::default());
    let (acked, _) = worker.claim_and_ack(&acks, 0).await?;
    ok(Count {
        count: acked as u64,
    })
}

/// Report a failed delivery: retried after `delay_ms`, or dead after its last attempt
/// (or now, with `dead`).
#[utoipa::path(post, path = "/v1/queues/{queue}/fail", tag = "workers",
    params(("queue" = String, Path, description = "The queue's name")),
    request_body = Fail,
    responses((status = 200, description = "What became of it", body = FailOutcome)))]
pub(super) async fn fail(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    Body(body): Body<Fail>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Work).await?;
    crate::queue::check_id(&body.id)?;
    model::check_delivery(body.delivery)?;
    Due {
        delay_ms: Some(body.delay_ms),
        at: None,
    }
    .when()?;
    let worker = queue.worker(WorkerOptions::default());
    let failed = worker
        .fail_delivery(
            &body.id,
            body.delivery,
            Duration::from_millis(body.delay_ms),
            body.dead,
            &body.error,
        )
        .await?;
    ok(FailOutcome {
        outcome: model::failed_name(failed).to_string(),
    })
}

/// Extend deliveries' leases to `lease_ms` from now; `count` says how many still held
/// their job.
#[utoipa::path(post, path = "/v1/queues/{queue}/extend", tag = "workers",
    params(("queue" = String, Path, description = "The queue's name")),
    request_body = Extend,
    responses((status = 200, description = "How many were extended", body = Count)))]
pub(super) async fn extend(
    state: Shared,
    caller: Caller,
    PathOf(queue): PathOf<String>,
    Body(body): Body<Extend>,
) -> Answer {
    let queue = open(&state, caller, &queue, Scope::Work).await?;
    let options = WorkerOptions {
        lease: model::lease_of(body.lease_ms)?,
        ..WorkerOptions::default()
    };
    let deliveries = deliveries(&body.deliveries)?;
    let extended = queue.worker(options).extend_deliveries(&deliveries).await?;
    ok(Count {
        count: extended as u64,
    })
}
