//! [`When`] a job is due, and [`CatchUp`]: what a recurring schedule does about the
//! occurrences it missed.

use crate::contract::{unix_ms_ceil, MAX_DUE_MS};
use std::time::{Duration, SystemTime};

/// When a job is due: at a time, or after a delay from now on the queue's clock.
///
/// `From<SystemTime>` and `From<Duration>` make either one an argument of
/// [`Queue::schedule`](crate::Queue::schedule) as it is. A job is never due earlier than
/// asked: a time is rounded up to the millisecond; a delay is counted from Redis `TIME`
/// to the microsecond, then rounded up.
///
/// # Examples
///
/// ```no_run
/// use std::time::{Duration, SystemTime};
/// use tickless_durable::{Queue, When};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "trials").await?;
/// // A time, or a delay from now on the queue's clock: both convert into a `When`.
/// let trial_ends = SystemTime::now() + Duration::from_secs(14 * 86_400);
/// queue.schedule("trial-ends:7", b"user 7", trial_ends).await?;
/// queue.schedule("trial-reminder:7", b"user 7", Duration::from_secs(13 * 86_400)).await?;
///
/// // Chosen at run time:
/// let urgent = true;
/// let when = if urgent { When::After(Duration::ZERO) } else { When::At(trial_ends) };
/// queue.schedule("welcome:7", b"user 7", when).await?;
/// assert_eq!(When::from(trial_ends), When::At(trial_ends));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Due at this time, judged by the queue's clock (Redis `TIME`).
    At(SystemTime),
    /// Due this long after Redis's clock as the call's script reads it (once the call
    /// has arrived), to the microsecond, rounded up to the millisecond. `ZERO` is due at
    /// once: ready on arrival, its due time that clock rounded down to the millisecond.
    After(Duration),
}

impl From<SystemTime> for When {
    fn from(at: SystemTime) -> When {
        When::At(at)
    }
}

impl From<Duration> for When {
    fn from(after: Duration) -> When {
        When::After(after)
    }
}

impl When {
    /// The script argument: `a<ms>`, or `r<us>` counted by the script from Redis `TIME`'s
    /// microseconds; rounded up, saturated.
    pub(crate) fn arg(self) -> String {
        match self {
            When::At(at) => format!("a{}", unix_ms_ceil(at)),
            When::After(after) => {
                let us = u64::try_from(after.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX);
                format!("r{}", us.min(MAX_DUE_MS * 1_000))
            }
        }
    }
}

/// What a recurring schedule does about occurrences that came due while no leader ran
/// (Redis down, every leader stopped): named after tokio's
/// [`MissedTickBehavior`](tickless::MissedTickBehavior), whose meanings it follows.
///
/// An occurrence is *missed* when the leader reaches it only after the next occurrence
/// is due as well (it is late by a whole period or more). One that is merely late (a
/// leader taking over, a busy Redis) runs under every policy, late.
///
/// Worked example: `every(60 s)` with occurrences at 10:00, 10:01, ...; no leader from
/// 09:59:30 to 11:00:30. At 11:00:30 the leader finds 10:00 ... 11:00 due (61
/// occurrences, 60 of them missed):
///
/// | policy | jobs made at 11:00:30 | next occurrence |
/// | --- | --- | --- |
/// | `Burst` | 61: `id@10:00`, ..., `id@11:00` | 11:01 |
/// | `Delay` | 1: `id@11:00` | 11:01:30 (a period from now: the grid moves) |
/// | `Skip` | 1: `id@11:00` | 11:01 (the grid stays) |
///
/// For a cron schedule `Delay` and `Skip` do the same (one job, for the latest due
/// occurrence; then the expression's next time after now): a cron grid cannot move.
///
/// # Examples
///
/// An hourly usage sweep for billing must run for every hour, even those missed while no
/// leader ran:
///
/// ```no_run
/// use std::time::Duration;
/// use tickless_durable::{CatchUp, Queue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "billing").await?;
/// let hour = Duration::from_secs(3600);
/// queue.with_catch_up(CatchUp::Burst).every("usage-sweep", hour, b"").await?;
///
/// let schedules = queue.schedules().await?;
/// let sweep = schedules.iter().find(|s| s.id == "usage-sweep").expect("just set");
/// assert_eq!(sweep.catch_up, CatchUp::Burst);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CatchUp {
    /// Every missed occurrence runs: one job each, all due at once.
    Burst,
    /// The missed occurrences run once, as one job (for the latest); an `every` schedule
    /// then counts its next occurrence a period from now.
    Delay,
    /// The missed occurrences do not run; the latest due one does, and the schedule
    /// keeps its grid. The default.
    #[default]
    Skip,
}

impl CatchUp {
    pub(crate) fn code(self) -> char {
        match self {
            CatchUp::Burst => 'b',
            CatchUp::Delay => 'd',
            CatchUp::Skip => 's',
        }
    }

    pub(crate) fn from_code(code: &str) -> Option<CatchUp> {
        match code {
            "b" => Some(CatchUp::Burst),
            "d" => Some(CatchUp::Delay),
            "s" => Some(CatchUp::Skip),
            _ => None,
        }
    }
}
