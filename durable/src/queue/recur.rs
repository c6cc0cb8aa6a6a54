//! Recurring jobs: [`Queue::every`], [`Queue::cron`], [`Queue::unschedule`],
//! [`Queue::schedules`], and the leader's refill of cron occurrences (see the module
//! docs, "Recurring jobs", for the design).

use crate::contract::{system_time, Key, MAX_DUE_MS};
use crate::error::Error;
use crate::queue::{check_id, Queue, MAX_ID_BYTES, MAX_PAYLOAD_BYTES};
use crate::rdb::recur as rdb;
use crate::when::CatchUp;
use chrono::TimeZone as _;
use std::collections::HashMap;
use std::str::FromStr as _;
use std::time::{Duration, SystemTime};

/// How a recurring schedule recurs.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{Queue, Recurrence};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "reports").await?;
/// queue.cron("nightly", "0 2 * * *", "Europe/Paris", b"").await?;
/// queue.every("heartbeat", Duration::from_secs(60), b"").await?;
///
/// for schedule in queue.schedules().await? {
///     let how = match &schedule.recurrence {
///         Recurrence::Every(period) => format!("every {period:?}"),
///         Recurrence::Cron { expression, zone } => format!("at {expression} in {zone}"),
///         _ => "another way".to_string(),
///     };
///     println!("{}: {how}", schedule.id);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recurrence {
    /// Every this long (whole milliseconds), counted from when it was set.
    Every(Duration),
    /// At the times a cron expression names, in an IANA time zone.
    Cron {
        /// The expression as given: `"0 2 * * *"`.
        expression: String,
        /// The zone as given: `"Europe/Paris"`.
        zone: String,
    },
}

/// One recurring schedule, from [`Queue::schedules`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{CatchUp, Queue, Recurrence};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "monitoring").await?;
/// queue.every("heartbeat", Duration::from_secs(60), b"ping").await?;
///
/// let schedules = queue.schedules().await?;
/// let heartbeat = schedules.iter().find(|s| s.id == "heartbeat").expect("just set");
/// assert_eq!(heartbeat.recurrence, Recurrence::Every(Duration::from_secs(60)));
/// assert_eq!((heartbeat.catch_up, heartbeat.max_attempts), (CatchUp::Skip, 5));
/// assert_eq!(heartbeat.payload, b"ping");
/// let next = heartbeat.next.expect("a period from when it was set");
/// assert!(next.duration_since(heartbeat.last).unwrap() >= Duration::from_secs(60));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The schedule's id; its jobs are named `<id>@<occurrence in ms since the epoch>`.
    pub id: String,
    /// How it recurs.
    pub recurrence: Recurrence,
    /// What it does about missed occurrences.
    pub catch_up: CatchUp,
    /// Attempts each of its jobs gets.
    pub max_attempts: u32,
    /// Its next occurrence, if one is known (a cron schedule whose next times the leader
    /// has not yet computed has none for a moment; one whose expression matches no more
    /// times has none for good).
    pub next: Option<SystemTime>,
    /// The latest occurrence made into a job, or when the schedule was set.
    pub last: SystemTime,
    /// The payload each of its jobs carries.
    pub payload: Vec<u8>,
}

/// Occurrences a cron schedule is given at a time; the leader gives more when fewer
/// than `RLOW_AT` (8, contract.rs) remain.
const FILL: usize = 32;
/// `@` and the 16 digits of an occurrence up to `MAX_DUE_MS`.
const SUFFIX_BYTES: usize = 17;

/// A parsed cron schedule.
struct CronSpec {
    cron: croner::Cron,
    zone: chrono_tz::Tz,
}

impl CronSpec {
    fn parse(id: &str, expression: &str, zone: &str) -> Result<CronSpec, Error> {
        if expression.contains('|') {
            return Err(Error::invalid_schedule(id, "a cron expression has no '|'"));
        }
        let cron = croner::Cron::from_str(expression).map_err(|err| {
            Error::invalid_schedule(id, format!("cron expression {expression:?}: {err}"))
        })?;
        let zone = chrono_tz::Tz::from_str(zone).map_err(|_| {
            Error::invalid_schedule(id, format!("{zone:?} is not an IANA time zone name"))
        })?;
        Ok(CronSpec { cron, zone })
    }

    /// From the record's spec field, `<zone> <expression>`.
    fn from_spec(spec: &str) -> Option<CronSpec> {
        let (zone, expression) = spec.split_once(' ')?;
        CronSpec::parse("", expression, zone).ok()
    }

    fn at(&self, ms: u64) -> Option<chrono::DateTime<chrono_tz::Tz>> {
        self.zone
            .timestamp_millis_opt(i64::try_from(ms).ok()?)
            .single()
    }

    /// Up to `count` occurrences strictly after `after` (ms), in order.
    fn after(&self, after: u64, count: usize) -> Vec<u64> {
        let Some(start) = self.at(after) else {
            return Vec::new();
        };
        self.cron
            .iter_after(start)
            .map(|t| t.timestamp_millis())
            .map_while(|ms| u64::try_from(ms).ok().filter(|&ms| ms < MAX_DUE_MS))
            .filter(|&ms| ms > after)
            .take(count)
            .collect()
    }

    /// The latest occurrence at or before `at` (ms).
    fn latest(&self, at: u64) -> Option<u64> {
        let t = self
            .cron
            .find_previous_occurrence(&self.at(at)?, true)
            .ok()?;
        u64::try_from(t.timestamp_millis()).ok()
    }
}

/// A schedule record's fields: `kind|policy|max|period|spec|payload`.
struct Record<'a> {
    kind: &'a str,
    policy: &'a str,
    max: &'a str,
    period: &'a str,
    spec: &'a str,
    payload: &'a [u8],
}

impl Record<'_> {
    fn parse(rec: &[u8]) -> Option<Record<'_>> {
        let mut parts = rec.splitn(6, |&b| b == b'|');
        let mut text = || std::str::from_utf8(parts.next()?).ok();
        let (kind, policy, max, period, spec) = (text()?, text()?, text()?, text()?, text()?);
        let payload = parts.next()?;
        Some(Record {
            kind,
            policy,
            max,
            period,
            spec,
            payload,
        })
    }
}

/// `last:t1,t2,...`.
fn parse_times(s: &str) -> Option<(u64, Vec<u64>)> {
    let (last, rest) = s.split_once(':')?;
    let times = rest
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    Some((last.parse().ok()?, times))
}

fn join(times: &[u64]) -> String {
    times
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn check_schedule(id: &str, payload: &[u8]) -> Result<(), Error> {
    check_id(id)?;
    if id.len() > MAX_ID_BYTES - SUFFIX_BYTES {
        return Err(Error::invalid_id(
            id,
            "longer than MAX_ID_BYTES - 17 (a schedule's jobs add `@<ms>` to its id)",
        ));
    }
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::payload_too_large(
            id,
            payload.len(),
            MAX_PAYLOAD_BYTES,
        ));
    }
    Ok(())
}

impl Queue {
    /// Sets recurring schedule `id`: a job every `period`, the first a period from now
    /// (on the queue's clock), each carrying `payload`. Returns `true` if the schedule is
    /// new or changed (then counted from now), `false` if `id` already had this very
    /// schedule, left as it is: setting every schedule again at each deploy moves none.
    ///
    /// Each occurrence `t` becomes the job `<id>@<t in ms since the epoch>`, made by the
    /// leader in the same script that moves the schedule on: one job per occurrence,
    /// however leaders come and go, and none before its time. Missed occurrences follow
    /// [`with_catch_up`](Queue::with_catch_up) ([`CatchUp::Skip`] by default); jobs get
    /// [`with_max_attempts`](Queue::with_max_attempts)'s attempts.
    ///
    /// # Examples
    ///
    /// Set at every start of the application: only the first call changes anything.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::Queue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    /// let queue = Queue::connect(&url, "cleanup").await?;
    /// let set = queue.every("purge-sessions", Duration::from_secs(15 * 60), b"").await?;
    /// assert!(set, "new");
    /// assert!(!queue.every("purge-sessions", Duration::from_secs(15 * 60), b"").await?);
    /// // Workers get jobs named "purge-sessions@<ms>", one every 15 minutes.
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_schedule`] for a period under 1 ms; [`Error::is_invalid_id`]
    /// (ids are at most [`MAX_ID_BYTES`] − 17 bytes here), [`Error::is_payload_too_large`],
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn every(
        &self,
        id: &str,
        period: Duration,
        payload: impl AsRef<[u8]>,
    ) -> Result<bool, Error> {
        let payload = payload.as_ref();
        check_schedule(id, payload)?;
        let ms = crate::contract::ms_ceil(period);
        if ms == 0 || ms >= MAX_DUE_MS / 2 {
            return Err(Error::invalid_schedule(
                id,
                format!("period {period:?}: not between 1 ms and 2^51 ms"),
            ));
        }
        let first = format!("r{}", ms * 1_000);
        self.set_schedule(id, 'e', ms, "", payload, &first).await
    }

    /// Sets recurring schedule `id`: a job at each time the cron `expression` names in
    /// time `zone` (an IANA name: `"Europe/Paris"`, `"UTC"`), each carrying `payload`.
    /// Returns as [`every`](Queue::every) does, and makes jobs as it does.
    ///
    /// Expressions have five fields (minute, hour, day of month, month, day of week,
    /// Sunday 0 or 7), or six with seconds first; names (`MON`, `JAN`), ranges, steps,
    /// lists, `L`, `#` and nicknames (`@daily`) are understood, as parsed by the `croner`
    /// crate. Daylight-saving changes follow Vixie cron: a time that a spring-forward
    /// skips runs at the first moment after the gap (`0 2 * * *` in Europe/Paris runs at
    /// 03:00 CEST that day); a fixed time that an autumn fall-back repeats runs once, at
    /// its first pass (02:00 CEST, not again at 02:00 CET); wildcard and step fields
    /// (`*/15 * * * *`) run in both passes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tickless_durable::{CatchUp, Queue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// let queue = Queue::connect("redis://127.0.0.1/", "reports").await?;
    /// queue
    ///     .with_catch_up(CatchUp::Delay)
    ///     .cron("nightly", "0 2 * * *", "Europe/Paris", b"build the report")
    ///     .await?;
    /// // Workers get jobs named "nightly@<ms>", one per night.
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_schedule`] for an expression that does not parse or matches
    /// no time ahead, or an unknown zone; otherwise as [`every`](Queue::every).
    pub async fn cron(
        &self,
        id: &str,
        expression: &str,
        zone: &str,
        payload: impl AsRef<[u8]>,
    ) -> Result<bool, Error> {
        let payload = payload.as_ref();
        check_schedule(id, payload)?;
        let spec = CronSpec::parse(id, expression, zone)?;
        let now = crate::contract::unix_ms_ceil(self.now().await?);
        let times = spec.after(now, FILL);
        if times.is_empty() {
            return Err(Error::invalid_schedule(
                id,
                format!("cron expression {expression:?} matches no time ahead"),
            ));
        }
        let first = format!("c{}", join(&times));
        let spec = format!("{zone} {expression}");
        self.set_schedule(id, 'c', 0, &spec, payload, &first).await
    }

    async fn set_schedule(
        &self,
        id: &str,
        kind: char,
        period: u64,
        spec: &str,
        payload: &[u8],
        first: &str,
    ) -> Result<bool, Error> {
        let mut record = format!(
            "{kind}|{}|{}|{period}|{spec}|",
            self.catch_up().code(),
            self.max_attempts()
        )
        .into_bytes();
        record.extend_from_slice(payload);
        rdb::set(self.rdb(), id, &record, first).await
    }

    /// Removes recurring schedule `id`; returns `true` if there was one. Jobs already
    /// made from it stay (cancel them by their ids, `<id>@<ms>`).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn unschedule(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        rdb::del(self.rdb(), id).await
    }

    /// Every recurring schedule of the queue, by id, with its next occurrence. Reads two
    /// hashes whole (`HGETALL`): meant for a few thousand schedules, not millions.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`]; [`Error::is_garbage`] naming a record that is not one.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>, Error> {
        let (recur, rnext) = (self.rdb().key(Key::Recur), self.rdb().key(Key::Rnext));
        type Both = (Vec<(String, Vec<u8>)>, HashMap<String, String>);
        let (records, nexts): Both = redis::pipe()
            .hgetall(recur)
            .hgetall(rnext)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(recur, "read the recurring schedules", err))?;
        let mut out = Vec::with_capacity(records.len());
        for (id, rec) in records {
            let bad = || Error::garbage(recur, format!("field {id:?} is not a schedule"));
            let r = Record::parse(&rec).ok_or_else(bad)?;
            let recurrence = match r.kind {
                "e" => {
                    Recurrence::Every(Duration::from_millis(r.period.parse().map_err(|_| bad())?))
                }
                "c" => {
                    let (zone, expression) = r.spec.split_once(' ').ok_or_else(bad)?;
                    Recurrence::Cron {
                        expression: expression.to_string(),
                        zone: zone.to_string(),
                    }
                }
                _ => return Err(bad()),
            };
            let (last, times) = nexts.get(&id).and_then(|s| parse_times(s)).ok_or_else(|| {
                Error::garbage(rnext, format!("field {id:?} is not a list of times"))
            })?;
            out.push(ScheduleInfo {
                recurrence,
                catch_up: CatchUp::from_code(r.policy).ok_or_else(bad)?,
                max_attempts: r.max.parse().map_err(|_| bad())?,
                next: times.first().map(|&t| system_time(t)),
                last: system_time(last),
                payload: r.payload.to_vec(),
                id,
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// The leader's part: cron schedules in `rlow` get their next occurrences, computed
/// here and appended by `recur_fill.lua` under the leader's `token`. `now` is the
/// queue's clock at the tick that asked. Returns whether any schedule gained times (the
/// leader then ticks again: some may be due).
pub(crate) async fn refill(queue: &Queue, token: u64, now: u64) -> Result<bool, Error> {
    let (recur, rnext, rlow) = (
        queue.rdb().key(Key::Recur),
        queue.rdb().key(Key::Rnext),
        queue.rdb().key(Key::Rlow),
    );
    let ids: Vec<String> = redis::cmd("SRANDMEMBER")
        .arg(rlow)
        .arg(64)
        .query_async(&mut queue.rdb().conn())
        .await
        .map_err(|err| Error::redis(rlow, "read the schedules to refill", err))?;
    if ids.is_empty() {
        return Ok(false);
    }
    type Fields = Vec<Option<Vec<u8>>>;
    let (records, nexts): (Fields, Fields) = redis::pipe()
        .cmd("HMGET")
        .arg(recur)
        .arg(&ids)
        .cmd("HMGET")
        .arg(rnext)
        .arg(&ids)
        .query_async(&mut queue.rdb().conn())
        .await
        .map_err(|err| Error::redis(recur, "read the schedules to refill", err))?;
    let mut fills = Vec::with_capacity(ids.len());
    for ((id, rec), next) in ids.iter().zip(records).zip(nexts) {
        let text = next.as_deref().and_then(|n| std::str::from_utf8(n).ok());
        let times = match (&rec, text) {
            (Some(rec), Some(text)) => fill_times(rec, text, now),
            _ => Vec::new(),
        };
        fills.push(rdb::Fill {
            id,
            next: next.unwrap_or_default(),
            times: join(&times),
        });
    }
    let gained = rdb::fill(queue.rdb(), token, fills).await?;
    Ok(gained.iter().any(|&n| n > 0))
}

/// The times to append to cron schedule record `rec` whose `rnext` is `next`, at `now`:
/// none if it is not a cron schedule this version can read.
fn fill_times(rec: &[u8], next: &str, now: u64) -> Vec<u64> {
    let (Some(r), Some((last, times))) = (Record::parse(rec), parse_times(next)) else {
        return Vec::new();
    };
    let Some(spec) = (r.kind == "c")
        .then(|| CronSpec::from_spec(r.spec))
        .flatten()
    else {
        return Vec::new();
    };
    let tail = times.last().copied().unwrap_or(last);
    if r.policy != "b" && tail <= now {
        // Every known time is due: for Delay and Skip, jump to the latest due one (the
        // tick then runs it alone); the missed ones between are never listed.
        if let Some(latest) = spec.latest(now).filter(|&t| t > tail) {
            let mut out = vec![latest];
            out.extend(spec.after(latest, FILL - 1));
            return out;
        }
    }
    spec.after(tail, FILL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
        chrono::Utc
            .with_ymd_and_hms(y, mo, d, h, mi, 0)
            .unwrap()
            .timestamp_millis() as u64
    }

    #[test]
    fn two_am_in_paris_across_both_changes_of_2026() {
        let spec = CronSpec::parse("t", "0 2 * * *", "Europe/Paris").unwrap();
        // Spring forward on 29 March: no 02:00; 03:00 CEST (01:00 UTC) instead.
        let spring = spec.after(ms(2026, 3, 27, 12, 0), 3);
        assert_eq!(
            spring,
            [
                ms(2026, 3, 28, 1, 0),
                ms(2026, 3, 29, 1, 0),
                ms(2026, 3, 30, 0, 0)
            ]
        );
        // Fall back on 25 October: 02:00 CEST (00:00 UTC) once, not 02:00 CET again.
        let autumn = spec.after(ms(2026, 10, 24, 12, 0), 3);
        assert_eq!(
            autumn,
            [
                ms(2026, 10, 25, 0, 0),
                ms(2026, 10, 26, 1, 0),
                ms(2026, 10, 27, 1, 0)
            ]
        );
    }

    #[test]
    fn fill_jumps_to_the_latest_due_time_unless_burst() {
        let rec = b"c|s|5|0|UTC 0 * * * *|p";
        let next = format!("{}:", ms(2026, 1, 1, 0, 0));
        let now = ms(2026, 1, 1, 5, 30);
        assert_eq!(fill_times(rec, &next, now)[0], ms(2026, 1, 1, 5, 0));
        let rec = b"c|b|5|0|UTC 0 * * * *|p";
        assert_eq!(fill_times(rec, &next, now)[0], ms(2026, 1, 1, 1, 0));
        assert_eq!(fill_times(rec, &next, now).len(), FILL);
    }

    #[test]
    fn records_and_times_parse_back() {
        let r = Record::parse(b"c|d|3|0|Europe/Paris 0 2 * * *|a|b").unwrap();
        assert_eq!((r.kind, r.policy, r.max), ("c", "d", "3"));
        assert_eq!(r.spec, "Europe/Paris 0 2 * * *");
        assert_eq!(r.payload, b"a|b");
        assert_eq!(parse_times("5:6,7"), Some((5, vec![6, 7])));
        assert_eq!(parse_times("5:"), Some((5, vec![])));
        assert_eq!(parse_times("5"), None);
    }
}
