//! The repair pass: [`Queue::repair`], and what a leader runs when it takes over.
//!
//! Every script keeps each job where its record says (lib/jobs.lua's I1-I5) or changes
//! nothing. Repair is for what scripts cannot prevent: keys deleted or overwritten by
//! hand, a failover that lost some of a script's writes, a bug. It reads the queue's
//! structures with `ZSCAN`/`SSCAN`/`HSCAN` from here, a page at a time, and sends each
//! page to `repair.lua`, one atomic script per page (so Redis is held briefly, and each
//! page is judged on the state at that moment: safe while a leader and workers run).
//! `jobs` is the exception: its values are the records, payloads included, so the
//! script reads each page itself (`HSCAN` inside the script, by a cursor from here) and
//! no payload leaves Redis (`HSCAN ... NOVALUES` would need Redis 7.4):
//!
//! 1. `jobs`: a job whose record names a bucket that does not hold it is inserted anew
//!    by its due time; a bucket that holds its job but has no `due` member gets it back;
//!    a dead job not in `dead` goes there; an unreadable record is quarantined. A job
//!    neither staged nor in flight should be in `ready`; a job elsewhere with stale
//!    entries in `ready` (its skip count, lib/jobs.lua's I5), and a tombstone, should have
//!    exactly those there: all are collected here,
//! 2. `ready` is read once (`LRANGE`, pages), and the jobs not seen in it as their
//!    records say are counted again by the script, one pass over `ready` per page of
//!    them: it appends the missing ones, corrects skip counts, and removes tombstones
//!    with no entry left. A job in flight is never moved: repair delivers nothing
//!    twice.
//! 3. Entries that name no job are removed: `due` members (a staged job whose record is
//!    gone or elsewhere, an empty bucket, a schedule that is gone, a member that is not
//!    ours), `dead` and `errors` entries with no record, `rnext` and `rlow` entries
//!    with no schedule; a schedule whose next occurrences are lost is counted on from
//!    now, and one with no `due` member gets it; the lease marker is put back if
//!    `flight` holds jobs. Stale entries of `ready`, `flight` and buckets are left to the
//!    claim and the tick, which drop them already.
//!
//! A leader's pass carries its fencing token: once the leadership ends, its next page
//! changes nothing and the pass stops.

use crate::contract::Key;
use crate::error::Error;
use crate::queue::Queue;
use crate::rdb::repair as rdb;
use std::collections::{HashMap, HashSet};

/// Entries per page read and per script call.
const PAGE: usize = 256;
/// Entries of `ready` read per `LRANGE`.
const READY_PAGE: isize = 10_000;

/// What a repair pass fixed (see [`Queue::repair`]).
///
/// # Examples
///
/// ```no_run
/// use tickless_durable::{Queue, Repaired};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// # let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
/// let queue = Queue::connect(&url, "reviews").await?;
/// let repaired = queue.repair().await?;
/// if repaired != Repaired::default() {
///     println!("put back {} jobs, removed {} stale entries", repaired.placed, repaired.removed);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Repaired {
    /// Jobs (and schedules, buckets' `due` members, the lease marker) put back where
    /// their records say, or inserted anew by their due time; records whose count of
    /// stale `ready` entries was corrected.
    pub placed: u64,
    /// Entries removed because they named no job (or no schedule).
    pub removed: u64,
}

impl Queue {
    /// Finds jobs whose record names a place that does not hold them and puts them back,
    /// and removes entries of the queue's structures that name no job; returns what it
    /// fixed. Safe while leaders and workers run (each page is one atomic script): meant
    /// for after an operator's mistake, a lost write or a bug; a queue that only this
    /// crate wrote needs none. A leader runs it when it takes over.
    ///
    /// It reads every key of the queue once, a page at a time, so its cost grows with
    /// the number of jobs: measured on 1,000,000 jobs, 7 µs of Redis CPU each with
    /// 16-byte payloads, 12 µs with 1 KB ones (BENCHMARKS.md, "Repair after a
    /// takeover"). Job records are read inside the scripts: no payload leaves Redis.
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`] when a key holds the wrong type (fix or
    /// delete it, then repair again).
    ///
    /// A queue that has had a cold tier gets its index checked too (see `ColdTier`): an
    /// entry naming a segment Redis no longer knows (its job cannot be loaded, and its
    /// id would stay taken) or an id the wheel holds a live job of is removed, and
    /// `cwin` is brought in line with `cseg`; about 5 µs of Redis CPU per cold job. The
    /// store is not touched: its orphans (objects no segment names) are the leader's to
    /// delete, since only it knows which of its moves are between the PUT and the commit.
    pub async fn repair(&self) -> Result<Repaired, Error> {
        let mut done = run(self, None).await?.unwrap_or_default();
        repair_cold(self, &mut done).await?;
        Ok(done)
    }
}

/// The pass; `token`: a leader's, which fences it. `None` when fenced out.
pub(crate) async fn run(queue: &Queue, token: Option<u64>) -> Result<Option<Repaired>, Error> {
    let token = token.map_or_else(|| "-".to_string(), |t| t.to_string());
    let mut pass = Pass {
        queue,
        token,
        done: Repaired::default(),
        missing: Vec::new(),
    };
    if !pass.jobs().await? || !pass.ready().await? {
        return Ok(None);
    }
    let scans = [
        ("due", "ZSCAN", Key::Due),
        ("dead", "ZSCAN", Key::Dead),
        ("errors", "HSCAN", Key::Errors),
        ("recur", "HSCAN", Key::Recur),
        ("rnext", "HSCAN", Key::Rnext),
        ("rlow", "SSCAN", Key::Rlow),
    ];
    for (what, command, key) in scans {
        if !pass.scan(what, command, key).await? {
            return Ok(None);
        }
    }
    if pass.call("flight", Vec::new()).await?.is_none() {
        return Ok(None);
    }
    Ok(Some(pass.done))
}

struct Pass<'a> {
    queue: &'a Queue,
    token: String,
    done: Repaired,
    /// Jobs whose entries in `ready` are to be counted (step 2 of the module docs).
    missing: Vec<Expected>,
}

/// What `ready` should hold of a job: `skip` stale entries, then a live one if `live`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expected {
    id: Vec<u8>,
    skip: i64,
    live: bool,
}

/// The ids of `missing` that `ready` does not hold as expected (`seen`: how often each
/// appears there), each once: a scan may report an id twice, and one page with an id
/// twice would ask the script to count it twice (it takes each once, too).
fn to_count_again(missing: &[Expected], seen: &HashMap<&[u8], i64>) -> Vec<Vec<u8>> {
    let mut sent = HashSet::new();
    missing
        .iter()
        .filter(|e| {
            let n = seen.get(e.id.as_slice()).copied().unwrap_or(0);
            // Seen more often than its stale entries: live in `ready` (or seen while
            // workers moved the list: the script, which counts itself, would too).
            if e.live {
                n <= e.skip
            } else {
                n != e.skip
            }
        })
        .filter(|e| sent.insert(e.id.as_slice()))
        .map(|e| e.id.clone())
        .collect()
}

impl Pass<'_> {
    /// Sends every page of `key` (read with `command`) to the script as `what`. False
    /// when fenced out.
    async fn scan(&mut self, what: &str, command: &str, key: Key) -> Result<bool, Error> {
        let name = self.queue.rdb().key(key).to_string();
        // HSCAN and ZSCAN answer field-value (member-score) pairs; SSCAN members.
        let stride = if command == "SSCAN" { 1 } else { 2 };
        let mut cursor: u64 = 0;
        loop {
            let (next, items): (u64, Vec<Vec<u8>>) = redis::cmd(command)
                .arg(&name)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut self.queue.rdb().conn())
                .await
                .map_err(|err| Error::redis(&name, command, err))?;
            let page: Vec<Vec<u8>> = items.into_iter().step_by(stride).collect();
            if !page.is_empty() && self.call(what, page).await?.is_none() {
                return Ok(false);
            }
            if next == 0 {
                return Ok(true);
            }
            cursor = next;
        }
    }

    /// Step 1 of the module docs: every page of `jobs`, read by the script itself. False
    /// when fenced out.
    async fn jobs(&mut self) -> Result<bool, Error> {
        let mut cursor = b"0".to_vec();
        loop {
            let Some(next) = self.call("jobs", vec![cursor]).await? else {
                return Ok(false);
            };
            if next == b"0" {
                return Ok(true);
            }
            cursor = next;
        }
    }

    /// Step 2 of the module docs: the jobs that `jobs` reported and that `ready` does not
    /// hold as their records say are counted there again by the script.
    async fn ready(&mut self) -> Result<bool, Error> {
        if self.missing.is_empty() {
            return Ok(true);
        }
        let mut seen: HashMap<&[u8], i64> =
            self.missing.iter().map(|e| (e.id.as_slice(), 0)).collect();
        let name = self.queue.rdb().key(Key::Ready).to_string();
        let mut start: isize = 0;
        loop {
            let ids: Vec<Vec<u8>> = redis::cmd("LRANGE")
                .arg(&name)
                .arg(start)
                .arg(start + READY_PAGE - 1)
                .query_async(&mut self.queue.rdb().conn())
                .await
                .map_err(|err| Error::redis(&name, "LRANGE", err))?;
            for id in &ids {
                if let Some(n) = seen.get_mut(id.as_slice()) {
                    *n += 1;
                }
            }
            if (ids.len() as isize) < READY_PAGE {
                break;
            }
            start += READY_PAGE;
        }
        let lost = to_count_again(&self.missing, &seen);
        self.missing.clear();
        for page in lost.chunks(PAGE) {
            if self.call("ready", page.to_vec()).await?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One script call: the cursor of `jobs`' next page (`0` when done, or for other
    /// steps); `None` when fenced out.
    async fn call(&mut self, what: &str, items: Vec<Vec<u8>>) -> Result<Option<Vec<u8>>, Error> {
        let Some(step) = rdb::repair(self.queue.rdb(), &self.token, what, items).await? else {
            return Ok(None);
        };
        self.done.placed += step.placed;
        self.done.removed += step.removed;
        self.missing
            .extend(
                step.expected
                    .into_iter()
                    .map(|(id, skip, live)| Expected { id, skip, live }),
            );
        Ok(Some(step.cursor))
    }
}

/// Index buckets read per pipeline, and entries judged per `cold_repair.lua` call.
const INDEX_PAGE: u32 = 1024;
const REPAIR_ENTRIES: usize = 1000;

/// `Queue::repair`'s share of the cold tier (`cold_repair.lua`'s docs): every entry of
/// the index, a page at a time, then `cseg` against `cwin`. Nothing for a queue that
/// never had a cold tier.
async fn repair_cold(queue: &Queue, done: &mut Repaired) -> Result<(), Error> {
    let meta = queue.rdb().meta_key();
    let cold: Option<String> = redis::cmd("HGET")
        .arg(meta)
        .arg("cold")
        .query_async(&mut queue.rdb().conn())
        .await
        .map_err(|err| Error::redis(meta, "HGET", err))?;
    if cold.is_none() {
        return Ok(());
    }
    let mut entries: Vec<Vec<u8>> = Vec::new();
    for first in (0..1u32 << 16).step_by(INDEX_PAGE as usize) {
        let mut pipe = redis::pipe();
        for n in first..first + INDEX_PAGE {
            pipe.cmd("HGETALL")
                .arg(queue.rdb().cold_index_key(n as u16));
        }
        let pages: Vec<Vec<(Vec<u8>, Vec<u8>)>> =
            pipe.query_async(&mut queue.rdb().conn())
                .await
                .map_err(|err| Error::redis(meta, "HGETALL of the cold index", err))?;
        for (id, seg) in pages.into_iter().flatten() {
            entries.push(id);
            entries.push(seg);
            if entries.len() >= 2 * REPAIR_ENTRIES {
                repair_call(queue, std::mem::take(&mut entries), done).await?;
            }
        }
    }
    if !entries.is_empty() {
        repair_call(queue, entries, done).await?;
    }
    repair_call(queue, Vec::new(), done).await
}

async fn repair_call(queue: &Queue, pairs: Vec<Vec<u8>>, done: &mut Repaired) -> Result<(), Error> {
    let (placed, removed) = rdb::cold_repair(queue.rdb(), pairs).await?;
    done.placed += placed;
    done.removed += removed;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WorkerOptions;
    use std::time::Duration;

    fn expected(id: &str, skip: i64, live: bool) -> Expected {
        Expected {
            id: id.as_bytes().to_vec(),
            skip,
            live,
        }
    }

    #[test]
    fn ids_not_held_as_their_records_say_are_counted_again_each_once() {
        let missing = [
            expected("lost", 0, true),
            expected("lost", 0, true),
            expected("live", 1, true),
            expected("stale-ok", 2, false),
            expected("stale-off", 2, false),
            expected("tomb", 1, false),
        ];
        let seen: HashMap<&[u8], i64> = [
            (&b"live"[..], 2),
            (&b"stale-ok"[..], 2),
            (&b"stale-off"[..], 3),
        ]
        .into_iter()
        .collect();
        let again = to_count_again(&missing, &seen);
        let again: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
        assert_eq!(again, [&b"lost"[..], b"stale-off", b"tomb"]);
    }

    /// HSCAN may report an id twice; a page of the `ready` step that holds it twice must
    /// put the job back once (the script reads before it writes, so both copies would
    /// find it missing).
    #[tokio::test]
    async fn a_lost_job_named_twice_in_one_page_is_put_back_once() {
        let server = tickless_test_support::RedisServer::start();
        let queue = Queue::connect(&server.url(), "twice").await.unwrap();
        assert!(queue.schedule("a", b"", Duration::ZERO).await.unwrap());
        // Its live entry lost (what repair is for).
        let _ = server.cli(&["DEL", "tickless:{twice}:ready"]);
        let mut pass = Pass {
            queue: &queue,
            token: "-".into(),
            done: Repaired::default(),
            missing: Vec::new(),
        };
        assert!(pass
            .call("ready", vec![b"a".to_vec(), b"a".to_vec()])
            .await
            .unwrap()
            .is_some());
        assert_eq!(
            server
                .cli(&["LRANGE", "tickless:{twice}:ready", "0", "-1"])
                .trim(),
            "a"
        );
        let worker = queue.worker(WorkerOptions::default());
        assert_eq!(worker.try_claim(1).await.unwrap().len(), 1);
        assert!(worker.try_claim(1).await.unwrap().is_empty());
        assert_eq!(pass.done.placed, 1);
    }
}
