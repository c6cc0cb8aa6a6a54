//! The contract between the Rust side and the Lua scripts, in one place: the queue's key
//! names, the formats of bucket keys and `due` members, the wheel's constants, which keys
//! each script declares, and how times are written.
//!
//! Nothing here is written twice. The Rust side builds key names and members with these
//! items; the scripts get them from the one-line header that [`lua_header`] writes in
//! front of each script when `rdb/scripts.rs` builds it (see there for the layout):
//!
//! - **Keys** come to a script in `KEYS`, in the order of its list below
//!   ([`script_keys`]), and the header names them (`local META, JOBS = KEYS[1],
//!   KEYS[2]`). A key a script does not declare is `nil` in it, so a script that touches
//!   an undeclared key fails loudly (Redis refuses a `nil` argument) instead of reaching a
//!   key by a name of its own. Declared keys are what Redis Cluster, proxies and ACL key
//!   patterns rely on: on a slot half migrated, a script whose declared keys moved is
//!   answered `ASK`/`TRYAGAIN`, which the `redis` crate follows.
//! - **Bucket keys** (`<prefix>b:<level>:<start>`) are the one exception: which buckets a
//!   tick drains is known only once it has read `due`, so the scripts build them from the
//!   prefix of `KEYS[1]`. On a cluster whose slot is being migrated, a script that meets a
//!   bucket already moved fails (`Script attempted to access a non local key`); the
//!   leader reports it, backs off and tries again, and the slot's migration ends it.
//! - **Constants** of the format (the wheel's level width, fan-out and depth, the lead and
//!   drain sizes, member prefixes) are Lua constants in the header, generated from the
//!   Rust constants here. They are not script arguments because they are not tunables: a
//!   queue's buckets are laid out by them, and two processes that disagreed on them would
//!   misplace each other's jobs. Everything a user may tune (leases, batch sizes,
//!   backoffs) is a script argument, and the leader's busy lease also lives in meta's
//!   `busy`, where schedulers read it ([`DEFAULT_BUSY_LEASE_MS`] only stands in for a meta
//!   written before that field existed).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Every key of queue `name` starts with this: `tickless:{<name>}:`. The braces make the
/// name a hash tag, so on Redis Cluster the whole queue lives in one slot.
pub(crate) fn prefix(name: &str) -> String {
    format!("tickless:{{{name}}}:")
}

/// The pattern of every queue's meta key, for `SCAN`.
pub(crate) const META_PATTERN: &str = "tickless:{*}:meta";

/// The queue name in a meta key's name, if it is one.
pub(crate) fn queue_of_meta(key: &str) -> Option<&str> {
    key.strip_prefix("tickless:{")?.strip_suffix("}:meta")
}

/// One of the queue's keys (besides its buckets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    /// Hash: the leader lease, the fencing token, `armed`, `busy`, the last delivery number
    /// (`delivery`), the counters.
    Meta,
    /// Hash: id -> `due|loc|attempts|max|skip|payload`, loc `s<n>` in flight
    /// (lib/jobs.lua's I1).
    Jobs,
    /// Sorted set: one member per non-empty bucket, staged job, recurring schedule, and
    /// the lease marker.
    Due,
    /// List: ids of due jobs, oldest first.
    Ready,
    /// Sorted set: ids of jobs in flight, scored by their lease's end.
    Flight,
    /// Sorted set: ids of dead jobs, scored by when they died.
    Dead,
    /// Hash: id -> the last error of a job that failed.
    Errors,
    /// Hash: id -> a recurring schedule's record.
    Recur,
    /// Hash: id -> a recurring schedule's next occurrences.
    Rnext,
    /// Set: ids of cron schedules that run low on known occurrences.
    Rlow,
    /// Hash: the cold tier's segments: number -> `window|left|bytes` (lib/cold.lua's C1,
    /// C2).
    ColdSegs,
    /// Sorted set: the cold tier's segment numbers, scored by their window's start.
    ColdWindows,
    /// Sorted set: `<token>:<id>` of jobs due soon that a schedule call which may be sent
    /// again added, scored by when (schedule.lua: a resend that finds its own member adds
    /// nothing, though the job has completed since).
    Sent,
}

impl Key {
    /// Every key, in the order of [`script_keys::ALL`].
    pub(crate) const ALL: [Key; 13] = [
        Key::Meta,
        Key::Jobs,
        Key::Due,
        Key::Ready,
        Key::Flight,
        Key::Dead,
        Key::Errors,
        Key::Recur,
        Key::Rnext,
        Key::Rlow,
        Key::ColdSegs,
        Key::ColdWindows,
        Key::Sent,
    ];

    /// The key's name after the queue's prefix.
    pub(crate) const fn suffix(self) -> &'static str {
        match self {
            Key::Meta => "meta",
            Key::Jobs => "jobs",
            Key::Due => "due",
            Key::Ready => "ready",
            Key::Flight => "flight",
            Key::Dead => "dead",
            Key::Errors => "errors",
            Key::Recur => "recur",
            Key::Rnext => "rnext",
            Key::Rlow => "rlow",
            Key::ColdSegs => "cseg",
            Key::ColdWindows => "cwin",
            Key::Sent => "sent",
        }
    }

    /// The name the scripts know it by.
    const fn lua_name(self) -> &'static str {
        match self {
            Key::Meta => "META",
            Key::Jobs => "JOBS",
            Key::Due => "DUE",
            Key::Ready => "READY",
            Key::Flight => "FLIGHT",
            Key::Dead => "DEAD",
            Key::Errors => "ERRORS",
            Key::Recur => "RECUR",
            Key::Rnext => "RNEXT",
            Key::Rlow => "RLOW",
            Key::ColdSegs => "CSEG",
            Key::ColdWindows => "CWIN",
            Key::Sent => "SENT",
        }
    }

    /// The Redis type this crate writes there (what `TYPE` answers).
    pub(crate) const fn redis_type(self) -> &'static str {
        match self {
            Key::Meta | Key::Jobs | Key::Errors | Key::Recur | Key::Rnext | Key::ColdSegs => "hash",
            Key::Due | Key::Flight | Key::Dead | Key::ColdWindows | Key::Sent => "zset",
            Key::Ready => "list",
            Key::Rlow => "set",
        }
    }

    /// The position of this key in [`Key::ALL`].
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

/// The default stream outlet's key after the queue's prefix (`queue/outlet.rs`): a
/// Redis Stream that due jobs are appended to instead of `ready`, when the queue has an
/// outlet. Its name is kept in meta (the scripts reach it from there, as they reach
/// bucket keys from the prefix), and it must carry the queue's hash tag, so it lives in
/// the queue's slot.
pub(crate) const STREAM_KEY: &str = "stream";
/// The meta fields holding the queue's stream outlet: the stream's full key name, and
/// the `MAXLEN ~` bound each `XADD` trims to. Absent: due jobs go to `ready`.
pub(crate) const OUTLET_KEY_FIELD: &str = "outlet";
pub(crate) const OUTLET_MAX_FIELD: &str = "outlet_max";

/// The wake channel's name after the queue's prefix (a channel, not a key).
pub(crate) const CHANNEL: &str = "wake";

/// A cold index bucket's key after the queue's prefix: `ci:<4 hex digits>` (lib/cold.lua's
/// `cold_key`).
pub(crate) const COLD_INDEX_KEY: &str = "ci:";

/// A bucket's key after the queue's prefix: `b:<level>:<start>`.
pub(crate) const BUCKET_KEY: &str = "b:";
/// A bucket's member in `due`: `b<level>:<start>`.
pub(crate) const BUCKET_MEMBER: &str = "b";
/// A staged job's member in `due`: `j<id>`.
pub(crate) const STAGED_MEMBER: &str = "j";
/// A recurring schedule's member in `due`: `r<id>`.
pub(crate) const RECUR_MEMBER: &str = "r";
/// The lease marker in `due`: scored at or before the earliest lease end in `flight`.
pub(crate) const LEASE_MARKER: &str = "l";

/// The `due` member of staged job `id`.
pub(crate) fn staged_member(id: &str) -> String {
    format!("{STAGED_MEMBER}{id}")
}

/// The key suffix of the bucket of level `level` starting at `start_ms`.
pub(crate) fn bucket_key(level: u8, start_ms: u64) -> String {
    format!("{BUCKET_KEY}{level}:{start_ms}")
}

/// A bucket's `due` member as (level, start in ms), or `None` if `member` is not one.
pub(crate) fn parse_bucket_member(member: &str) -> Option<(u8, u64)> {
    let rest = member.strip_prefix(BUCKET_MEMBER)?;
    let (level, start) = rest.split_once(':')?;
    let level: u8 = level.parse().ok()?;
    (level <= KMAX).then_some(())?;
    Some((level, start.parse().ok()?))
}

/// Level 0's bucket width, in ms: level k's buckets are `W0_MS * SPAN^k` wide.
pub(crate) const W0_MS: u64 = 1024;
/// How many buckets of level k one bucket of level k + 1 spans.
pub(crate) const SPAN: u64 = 64;
/// The top level.
pub(crate) const KMAX: u8 = 6;
/// A bucket is drained this many ms before its start, into the staged window.
pub(crate) const LEAD_MS: u64 = 256;
/// A bucket is drained at most this many jobs per script call.
pub(crate) const DRAIN: u64 = 256;
/// A cron schedule with fewer known occurrences than this is in `rlow`.
pub(crate) const RLOW_AT: u64 = 8;
/// The most jobs one script call takes or moves: a claim's `max`
/// (`Worker::claim`/`try_claim`, `WorkerOptions::concurrency`) and a tick's `limit`
/// (`LeaderOptions::batch`) are kept at or below it in Rust, and the scripts refuse more
/// before they write. It bounds how long one call holds Redis (a tick of 10,000 jobs
/// takes some tens of ms); lib/calls.lua's `call_all` keeps any batch clear of Lua's
/// `unpack` limit.
pub(crate) const MAX_BATCH: usize = 10_000;
/// `LeaderOptions::busy_lease`'s default, in ms; the scripts use it only for a meta
/// written before meta had its `busy` field.
pub(crate) const DEFAULT_BUSY_LEASE_MS: u64 = 100;

/// The width in ms of a bucket of `level`.
pub(crate) fn level_width_ms(level: u8) -> u64 {
    W0_MS.saturating_mul(SPAN.saturating_pow(u32::from(level)))
}

/// The keys each script declares, in `KEYS` order: every key it may touch besides
/// buckets. Meta is always first (the scripts find the queue's prefix in it).
pub(crate) mod script_keys {
    use super::Key::{self, *};

    /// Every key: the leader's tick and the repair pass touch them all.
    pub(crate) const ALL: &[Key] = &Key::ALL;
    pub(crate) const SCHEDULE: &[Key] = &[Meta, Jobs, Due, Ready, Sent];
    pub(crate) const CANCEL: &[Key] = &[Meta, Jobs, Due, Flight, Dead, Errors, ColdSegs];
    pub(crate) const RESCHEDULE: &[Key] = &[Meta, Jobs, Due, Ready, Flight, ColdSegs, Errors];
    pub(crate) const CLAIM: &[Key] = &[Meta, Jobs, Due, Ready, Flight, Dead, Errors];
    pub(crate) const FAIL: &[Key] = &[Meta, Jobs, Due, Ready, Flight, Dead, Errors];
    pub(crate) const EXTEND: &[Key] = &[Meta, Jobs, Flight];
    pub(crate) const GIVE_BACK: &[Key] = &[Meta, Jobs, Ready, Flight, Errors];
    pub(crate) const LEASE: &[Key] = &[Meta];
    pub(crate) const RETRY_DEAD: &[Key] = &[Meta, Jobs, Due, Ready, Dead, Errors];
    pub(crate) const RECUR: &[Key] = &[Meta, Recur, Rnext, Due, Rlow];
    pub(crate) const COLD_TAKE: &[Key] = &[Meta, Jobs, Due];
    pub(crate) const COLD_COMMIT: &[Key] = &[Meta, Jobs, Due, ColdSegs, ColdWindows];
    /// A load, and a thaw (a cold job rescheduled).
    pub(crate) const COLD_LOAD: &[Key] = &[Meta, Jobs, Due, Ready, ColdSegs, Errors];
    pub(crate) const COLD_RETIRE: &[Key] = &[Meta, ColdSegs, ColdWindows];
    pub(crate) const COLD_FIND: &[Key] = &[Meta, ColdSegs];
    pub(crate) const COLD_REPAIR: &[Key] = &[Meta, Jobs, ColdSegs, ColdWindows];
}

/// The one-line header of a script that declares `keys`: its keys named from `KEYS`,
/// the rest `nil`; the queue's prefix and channel; the constants above. It ends without
/// a newline: the script's own first line follows on the same line, so that Redis's
/// line numbers are the script file's.
pub(crate) fn lua_header(keys: &[Key]) -> String {
    let mut out = String::new();
    let meta = Key::Meta.suffix().len();
    let _ = write!(out, "local P = string.sub(KEYS[1], 1, -{}) ", meta + 1);
    let names: Vec<&str> = Key::ALL.iter().map(|k| k.lua_name()).collect();
    let _ = write!(out, "local {} ", names.join(", "));
    for (i, key) in keys.iter().enumerate() {
        let _ = write!(out, "{} = KEYS[{}] ", key.lua_name(), i + 1);
    }
    let _ = write!(
        out,
        "local CHANNEL, BUCKET, M_BUCKET, M_STAGED, M_RECUR, M_LEASE = P .. '{CHANNEL}', \
         '{BUCKET_KEY}', '{BUCKET_MEMBER}', '{STAGED_MEMBER}', '{RECUR_MEMBER}', \
         '{LEASE_MARKER}' "
    );
    let _ = write!(
        out,
        "local W0, SPAN, KMAX, LEAD, DRAIN, RLOW_AT, BUSY, MAX_BATCH = {W0_MS}, {SPAN}, \
         {KMAX}, {LEAD_MS}, {DRAIN}, {RLOW_AT}, {DEFAULT_BUSY_LEASE_MS}, {MAX_BATCH} "
    );
    let _ = write!(out, "local COLD_INDEX = '{COLD_INDEX_KEY}' ");
    let _ = write!(
        out,
        "local OUTLET, OUTLET_MAX = '{OUTLET_KEY_FIELD}', '{OUTLET_MAX_FIELD}' "
    );
    out
}

/// Due times are kept in whole milliseconds since the Unix epoch and saturate at 2^52 ms
/// (about the year 144,000), where Redis's Lua numbers are still exact.
pub(crate) const MAX_DUE_MS: u64 = 1 << 52;

/// `d` in whole milliseconds, rounded up (saturating).
pub(crate) fn ms_ceil(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// `at` in milliseconds since the Unix epoch, rounded up (never early), saturated at
/// [`MAX_DUE_MS`].
pub(crate) fn unix_ms_ceil(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, ms_ceil)
        .min(MAX_DUE_MS)
}

/// A time on the queue's clock, in milliseconds since the Unix epoch.
pub(crate) fn system_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The meta field holding the message of the latest script failure a leader or worker met.
pub(crate) const LAST_SCRIPT_ERROR: &str = "last_script_error";

/// The meta fields where a leader whose rounds fail says how many failed in a row and
/// why (removed when a round works again).
pub(crate) const LEADER_FAILING: &str = "leader_failing";
pub(crate) const LEADER_ERROR: &str = "leader_error";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_members_and_keys_round_trip() {
        assert_eq!(parse_bucket_member("b0:1024"), Some((0, 1024)));
        assert_eq!(parse_bucket_member("b6:0"), Some((6, 0)));
        assert_eq!(parse_bucket_member("jx"), None);
        assert_eq!(parse_bucket_member("b:1"), None);
        assert_eq!(parse_bucket_member("b7:0"), None);
        assert_eq!(parse_bucket_member("bx:0"), None);
        assert_eq!(parse_bucket_member("b1"), None);
        assert_eq!(bucket_key(2, 4096), "b:2:4096");
        assert_eq!(staged_member("a"), "ja");
    }

    #[test]
    fn level_widths_grow_by_span_and_saturate() {
        assert_eq!(level_width_ms(0), 1024);
        assert_eq!(level_width_ms(1), 1024 * 64);
        assert_eq!(level_width_ms(6), 1024 * 64u64.pow(6));
        assert_eq!(level_width_ms(200), u64::MAX);
    }

    #[test]
    fn the_header_is_one_line_and_names_declared_keys_in_order() {
        let header = lua_header(script_keys::SCHEDULE);
        assert!(!header.contains('\n'));
        assert!(header.contains("META = KEYS[1] JOBS = KEYS[2] DUE = KEYS[3] READY = KEYS[4] "));
        assert!(!header.contains("FLIGHT = "));
        assert!(header.contains("'wake'"));
        assert!(header.contains("= 1024, 64, 6, 256, 256, 8, 100, 10000 "));
    }

    #[test]
    fn every_key_is_in_all_at_its_index() {
        for (i, key) in Key::ALL.iter().enumerate() {
            assert_eq!(key.index(), i);
        }
    }
}
