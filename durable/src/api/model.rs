//! The JSON bodies of the API, and their checks: every field of a request is read and
//! checked before anything is sent to Redis.

use super::problem::Problem;
use crate::contract::MAX_DUE_MS;
use crate::{Failed, JobInfo, JobState, Recurrence, ScheduleInfo, When};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use utoipa::ToSchema;

/// How a payload is written in JSON.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Encoding {
    /// UTF-8 text, as it is.
    #[default]
    Text,
    /// Standard base64 with padding.
    Base64,
}

/// A job to schedule.
// Its id and payload borrow from the request's body when they hold no JSON escape.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewJob<'a> {
    /// The job's id, 1 to 512 bytes. Scheduling an id that names a job adds nothing
    /// (the answer says `exists`).
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 512)]
    pub(crate) id: Cow<'a, str>,
    /// The payload (at most 1 MiB once decoded); empty if left out.
    #[serde(default, borrow)]
    #[schema(value_type = String)]
    pub(crate) payload: Cow<'a, str>,
    /// How `payload` is written (default `text`).
    #[serde(default)]
    pub(crate) encoding: Encoding,
    /// Due this many milliseconds from now (give this or `at`; neither: due now).
    #[serde(default)]
    pub(crate) delay_ms: Option<u64>,
    /// Due at this RFC 3339 instant (`2026-12-01T09:00:00Z`); one in the past is due now.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub(crate) at: Option<String>,
}

/// A new due time for a waiting job: `delay_ms` from now, or `at`; neither: now.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewDue {
    /// Due this many milliseconds from now.
    #[serde(default)]
    pub(crate) delay_ms: Option<u64>,
    /// Due at this RFC 3339 instant.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub(crate) at: Option<String>,
}

/// When a job is due, as a request gave it (not yet checked).
pub(crate) struct Due<'a> {
    pub(crate) delay_ms: Option<u64>,
    pub(crate) at: Option<&'a str>,
}

/// Many jobs to schedule at once.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewJobs<'a> {
    /// At most 10,000 jobs. Every job is checked before any is sent: one bad job refuses
    /// the whole batch and nothing is scheduled.
    #[serde(borrow)]
    pub(crate) jobs: Vec<NewJob<'a>>,
}

/// What a schedule did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Scheduled<'a> {
    /// The job's id.
    #[schema(value_type = String)]
    pub(crate) id: Cow<'a, str>,
    /// `added`, or `exists`: a job with this id was already there, nothing changed.
    pub(crate) result: Outcome,
}

/// `added` or `exists`.
#[derive(Debug, Serialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    /// The job was added.
    Added,
    /// A job with this id was already there: nothing changed.
    Exists,
}

/// What a batch did, in the order of the request.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BatchScheduled<'a> {
    pub(crate) results: Vec<Scheduled<'a>>,
}

/// A job as the queue holds it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JobView {
    pub(crate) id: String,
    /// `scheduled`, `ready`, `in_flight`, `dead` or `cold`.
    pub(crate) state: String,
    /// Due time, RFC 3339 (UTC, milliseconds).
    pub(crate) due: String,
    pub(crate) attempts: u32,
    pub(crate) max_attempts: u32,
    /// When the lease of its delivery ends (in flight only).
    pub(crate) lease_ends: Option<String>,
    pub(crate) last_error: Option<String>,
    pub(crate) payload: String,
    pub(crate) encoding: Encoding,
}

/// Whether a job was cancelled, rescheduled, retried, or a schedule removed or set.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Done {
    /// `true` if there was such a job (or schedule) and it was changed.
    pub(crate) done: bool,
}

/// A recurring schedule to set: `every_ms`, or `cron` (with `zone`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewSchedule {
    /// Every this many milliseconds, counted from when it is set.
    #[serde(default)]
    pub(crate) every_ms: Option<u64>,
    /// A cron expression (5 or 6 fields, Vixie-cron rules for daylight saving).
    #[serde(default)]
    pub(crate) cron: Option<String>,
    /// The IANA time zone of `cron` (default `UTC`).
    #[serde(default)]
    pub(crate) zone: Option<String>,
    /// Each occurrence's job's payload.
    #[serde(default)]
    pub(crate) payload: String,
    #[serde(default)]
    pub(crate) encoding: Encoding,
}

/// A recurring schedule.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ScheduleView {
    /// Its jobs are named `<id>@<occurrence in ms since the epoch>`.
    pub(crate) id: String,
    pub(crate) every_ms: Option<u64>,
    pub(crate) cron: Option<String>,
    pub(crate) zone: Option<String>,
    /// Its next occurrence, RFC 3339, if one is known.
    pub(crate) next: Option<String>,
    pub(crate) max_attempts: u32,
    pub(crate) payload: String,
    pub(crate) encoding: Encoding,
}

/// A queue's recurring schedules.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Schedules {
    pub(crate) schedules: Vec<ScheduleView>,
}

/// Jobs by state.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Counts {
    pub(crate) scheduled: u64,
    pub(crate) ready: u64,
    pub(crate) in_flight: u64,
    pub(crate) dead: u64,
    /// In the cold tier (a subset of `scheduled`).
    pub(crate) cold: u64,
}

/// A page of dead jobs, oldest death first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeadJobs {
    pub(crate) jobs: Vec<JobView>,
}

/// A claim: take up to `max` ready jobs, waiting up to `wait_ms` for one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Claim {
    /// 1 to 1000 (default 1).
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 1000)]
    pub(crate) max: u32,
    /// How long to wait for a ready job, 0 to 30,000 ms (default 0: answer at once).
    #[serde(default)]
    #[schema(maximum = 30000)]
    pub(crate) wait_ms: u64,
    /// How long each delivery holds its job before it is delivered again to another
    /// claim: 10 to 86,400,000 ms (default 30,000). Extend it while working.
    #[serde(default = "lease")]
    #[schema(minimum = 10, maximum = 86400000)]
    pub(crate) lease_ms: u64,
}

fn one() -> u32 {
    1
}

fn lease() -> u64 {
    30_000
}

/// Jobs claimed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Claimed {
    pub(crate) jobs: Vec<Delivery>,
}

/// One delivery of a job: ack, fail or extend it by `id` and `delivery`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Delivery {
    pub(crate) id: String,
    /// This delivery's number: acks, fails and extends name it.
    pub(crate) delivery: u64,
    /// 1 for the first delivery, more after failures or lease ends.
    pub(crate) attempt: u32,
    /// When the job was due, RFC 3339.
    pub(crate) due: String,
    pub(crate) payload: String,
    pub(crate) encoding: Encoding,
}

/// A delivery, by job id and delivery number.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeliveryRef {
    #[schema(min_length = 1, max_length = 512)]
    pub(crate) id: String,
    #[schema(minimum = 1, maximum = 9007199254740992_u64)]
    pub(crate) delivery: u64,
}

/// Deliveries to ack.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Ack {
    /// At most 10,000.
    pub(crate) deliveries: Vec<DeliveryRef>,
}

/// Deliveries to extend.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Extend {
    /// At most 10,000.
    pub(crate) deliveries: Vec<DeliveryRef>,
    /// The new lease, from now: 10 to 86,400,000 ms (default 30,000).
    #[serde(default = "lease")]
    #[schema(minimum = 10, maximum = 86400000)]
    pub(crate) lease_ms: u64,
}

/// How many deliveries an ack or extend found still holding their job.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Count {
    pub(crate) count: u64,
}

/// A failed delivery.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fail {
    #[schema(min_length = 1, max_length = 512)]
    pub(crate) id: String,
    #[schema(minimum = 1, maximum = 9007199254740992_u64)]
    pub(crate) delivery: u64,
    /// Why (kept as the job's last error; at most 1024 characters are kept).
    #[serde(default)]
    pub(crate) error: String,
    /// Retry after this many ms (default 1000), unless this was the job's last attempt:
    /// then it goes to the dead set.
    #[serde(default = "second")]
    pub(crate) delay_ms: u64,
    /// `true`: to the dead set now, whatever attempts remain (`delay_ms` is not used).
    #[serde(default)]
    pub(crate) dead: bool,
}

fn second() -> u64 {
    1_000
}

/// What became of a failed delivery.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FailOutcome {
    /// `retried`, `dead` (it was the last attempt) or `lease_lost` (this delivery no
    /// longer held the job: nothing changed).
    pub(crate) outcome: String,
}

/// `offset` and `limit` of a page.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Page {
    /// Jobs to skip (default 0).
    #[serde(default)]
    #[param(maximum = 1000000000)]
    pub(crate) offset: u64,
    /// At most this many, 1 to 1000 (default 100).
    #[serde(default = "hundred")]
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: u32,
}

fn hundred() -> u32 {
    100
}

// ---- checks and conversions ----

/// A payload's bytes: text as it is (borrowed if it was), base64 decoded.
pub(crate) fn decode(payload: Cow<'_, str>, encoding: Encoding) -> Result<Cow<'_, [u8]>, Problem> {
    match encoding {
        Encoding::Text => Ok(match payload {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        }),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(payload.as_bytes())
            .map(Cow::Owned)
            .map_err(|err| {
                Problem::invalid(
                    "invalid-payload",
                    "Payload is not base64",
                    format!("payload: {err}"),
                )
            }),
    }
}

/// A payload as JSON: text if it is UTF-8, base64 if not.
pub(crate) fn encode(payload: Vec<u8>) -> (String, Encoding) {
    match String::from_utf8(payload) {
        Ok(text) => (text, Encoding::Text),
        Err(err) => (
            base64::engine::general_purpose::STANDARD.encode(err.as_bytes()),
            Encoding::Base64,
        ),
    }
}

impl Due<'_> {
    /// The due time: within the queue's range (up to 2^52 ms since the epoch).
    pub(crate) fn when(&self) -> Result<When, Problem> {
        let bad = |detail: String| Problem::invalid("invalid-due", "Invalid due time", detail);
        match (self.delay_ms, self.at) {
            (Some(_), Some(_)) => Err(bad("give delay_ms or at, not both".into())),
            (None, None) => Ok(When::After(Duration::ZERO)),
            (Some(ms), None) => {
                let now_ms = unix_ms(SystemTime::now());
                if ms > MAX_DUE_MS.saturating_sub(now_ms) {
                    return Err(bad(format!(
                        "delay_ms {ms} is beyond the latest due time (2^52 ms since 1970)"
                    )));
                }
                Ok(When::After(Duration::from_millis(ms)))
            }
            (None, Some(at)) => {
                let parsed = chrono::DateTime::parse_from_rfc3339(at)
                    .map_err(|err| bad(format!("at {at:?} is not an RFC 3339 instant: {err}")))?;
                let ms = parsed.timestamp_millis();
                let ms = u64::try_from(ms)
                    .ok()
                    .filter(|&ms| ms <= MAX_DUE_MS)
                    .ok_or_else(|| bad(format!("at {at:?} is before 1970 or after 2^52 ms")))?;
                Ok(When::At(UNIX_EPOCH + Duration::from_millis(ms)))
            }
        }
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// RFC 3339 in UTC with milliseconds.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let ms = i64::try_from(unix_ms(at)).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The largest delivery number: the scripts count in Lua's doubles.
const MAX_DELIVERY: u64 = 1 << 53;

/// A delivery number a claim could have answered, or a problem.
pub(crate) fn check_delivery(delivery: u64) -> Result<(), Problem> {
    if !(1..=MAX_DELIVERY).contains(&delivery) {
        return Err(Problem::invalid(
            "invalid-delivery",
            "Invalid delivery number",
            format!("delivery {delivery}: not between 1 and 2^53"),
        ));
    }
    Ok(())
}

/// A lease within the library's bounds, or a problem.
pub(crate) fn lease_of(ms: u64) -> Result<Duration, Problem> {
    if !(10..=86_400_000).contains(&ms) {
        return Err(Problem::invalid(
            "invalid-lease",
            "Invalid lease",
            format!("lease_ms {ms}: not between 10 and 86400000"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

impl From<JobInfo> for JobView {
    fn from(info: JobInfo) -> JobView {
        let state = match info.state {
            JobState::Scheduled => "scheduled",
            JobState::Ready => "ready",
            JobState::InFlight => "in_flight",
            JobState::Dead => "dead",
            JobState::Cold => "cold",
        };
        let (payload, encoding) = encode(info.payload);
        JobView {
            id: info.id,
            state: state.to_string(),
            due: rfc3339(info.due),
            attempts: info.attempts,
            max_attempts: info.max_attempts,
            lease_ends: info.lease_ends.map(rfc3339),
            last_error: info.last_error,
            payload,
            encoding,
        }
    }
}

impl From<ScheduleInfo> for ScheduleView {
    fn from(info: ScheduleInfo) -> ScheduleView {
        let (every_ms, cron, zone) = match info.recurrence {
            Recurrence::Every(period) => (Some(period.as_millis() as u64), None, None),
            Recurrence::Cron { expression, zone } => (None, Some(expression), Some(zone)),
        };
        let (payload, encoding) = encode(info.payload);
        ScheduleView {
            id: info.id,
            every_ms,
            cron,
            zone,
            next: info.next.map(rfc3339),
            max_attempts: info.max_attempts,
            payload,
            encoding,
        }
    }
}

pub(crate) fn failed_name(failed: Failed) -> &'static str {
    match failed {
        Failed::Retried => "retried",
        Failed::Dead => "dead",
        _ => "lease_lost",
    }
}
