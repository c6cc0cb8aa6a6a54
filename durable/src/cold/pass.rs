//! The leader's pass over the tier: sweep the store's orphans, move far jobs out, load
//! near ones back (see the module above for the promises).

use super::filling::{Filling, Job};
use super::segment::{decode, encode};
use super::tier::ColdTier;
use crate::contract::{self, Key};
use crate::error::Error;
use crate::rdb::cold as rdb;
use crate::rdb::Rdb;

/// Jobs per `cold_commit.lua` or `cold_load.lua` call at most, and their ids' and
/// records' bytes at most ([`CALL_BYTES`]): a call holds Redis well under 2 ms, so no
/// other client of that Redis waits longer (BENCHMARKS.md, "The cold tier": 2,000 jobs
/// held it ~10 ms, 200 jobs 3.4-3.9 ms on a quiet machine before the scripts stopped
/// parsing whole records per job; 100 jobs 1.6-2.2 ms of Redis CPU on a loaded one).
pub(crate) const CALL_JOBS: usize = 64;

/// Bytes of ids and records per `cold_commit.lua` or `cold_load.lua` call at most (a
/// job's cost grows with its record: 2 KB payloads cost ~2.2x 200-byte ones).
const CALL_BYTES: usize = 64 * 1024;

/// Calls of one segment's commit or load in flight at once on the multiplexed
/// connection, a new one sent as each answers: Redis runs them one after the other,
/// reading other clients' commands between them, and the round trips overlap, so the
/// smaller calls keep the throughput of fewer larger ones.
const IN_FLIGHT: usize = 8;

/// Ids a `cold_take.lua` call reads, about: more than a commit's, since a take does
/// less per job (one `HMGET` and one match of the record's head), and has a fixed cost
/// per call (reading `due`'s members).
const TAKE_JOBS: usize = 200;

/// What one pass of the leader did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Jobs moved out of Redis into the store.
    pub(crate) moved: u64,
    /// Jobs loaded back into the wheel.
    pub(crate) loaded: u64,
    /// Segments retired (loaded whole and deleted).
    pub(crate) retired: u64,
    /// Objects deleted that no segment of Redis named (a move cut short, a retire whose
    /// delete did not happen).
    pub(crate) swept: u64,
    /// The token was refused: another leadership holds the queue.
    pub(crate) fenced: bool,
}

/// One pass of the leader holding `token`: with `sweep_first` (a new leadership's first
/// pass, or the first a [`ColdTier::sweep_every`] after its last sweep), the store's
/// orphans first; then every move due; then every load due. What it
/// did, whether or not it ended in an error (a load that failed at one segment has still
/// loaded the others).
pub(crate) async fn pass(
    rdb: &Rdb,
    tier: &ColdTier,
    token: u64,
    sweep_first: bool,
) -> (Pass, Result<(), Error>) {
    let mut done = Pass::default();
    let result = run_pass(rdb, tier, token, sweep_first, &mut done).await;
    (done, result)
}

async fn run_pass(
    rdb: &Rdb,
    tier: &ColdTier,
    token: u64,
    sweep_first: bool,
    done: &mut Pass,
) -> Result<(), Error> {
    if sweep_first {
        done.swept = sweep(rdb, tier).await?;
    }
    let token = token.to_string();
    let Some((now, dep)) = move_out(rdb, tier, &token, done).await? else {
        done.fenced = true;
        return Ok(());
    };
    if !load_in(rdb, tier, &token, &dep, now, done).await? {
        done.fenced = true;
    }
    Ok(())
}

/// Moves every job due beyond the horizon into segments; the queue's clock (ms) as the
/// last take read it and the queue's deployment id (meta's `cdep`, which the first take
/// sets), or `None` if the token was refused.
async fn move_out(
    rdb: &Rdb,
    tier: &ColdTier,
    token: &str,
    done: &mut Pass,
) -> Result<Option<(u64, String)>, Error> {
    let horizon = contract::ms_ceil(tier.horizon);
    let window = contract::ms_ceil(tier.window).max(1);
    // A candidate: the first take of the queue's first move keeps it (meta's `cdep`).
    let fresh_dep = crate::random::random_hex();
    let mut filling = Filling::new(window);
    let mut dep: String;
    let now = loop {
        let Some(rdb::Taken {
            now,
            dep: taken_dep,
            done: walked,
            walked_to,
            jobs: taken_jobs,
        }) = rdb::take(rdb, token, horizon, window, TAKE_JOBS, &fresh_dep).await?
        else {
            return Ok(None);
        };
        dep = taken_dep;
        for (window, id, rec) in taken_jobs {
            // A job the walk met twice (SSCAN can repeat one) is held once.
            filling.add(window, id, rec);
        }
        while let Some((window, jobs)) = filling.next(false, walked_to) {
            if !write_segment(rdb, tier, token, &dep, window, &jobs, done).await? {
                return Ok(None);
            }
        }
        // The walk over the far buckets ended: every far job there was at its start is
        // held or written (one scheduled behind it is the next pass's).
        if walked {
            break now;
        }
    };
    while let Some((window, jobs)) = filling.next(true, u64::MAX) {
        if !write_segment(rdb, tier, token, &dep, window, &jobs, done).await? {
            return Ok(None);
        }
    }
    Ok(Some((now, dep)))
}

/// Numbers a new segment (meta's `cseq`) and writes and commits it (see
/// [`commit_segment`]); `false` if the token was refused. A stale leader's number is
/// simply never used: numbers only need to be unique.
async fn write_segment(
    rdb: &Rdb,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    window: u64,
    jobs: &[(Vec<u8>, Vec<u8>)],
    done: &mut Pass,
) -> Result<bool, Error> {
    let meta = rdb.meta_key();
    let seg: u64 = redis::cmd("HINCRBY")
        .arg(meta)
        .arg("cseq")
        .arg(1)
        .query_async(&mut rdb.conn())
        .await
        .map_err(|err| Error::redis(meta, "HINCRBY", err))?;
    match commit_segment(rdb, tier, token, dep, seg, window, jobs).await? {
        Some(moved) => {
            done.moved += moved;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Writes segment `seg` and commits it; the jobs moved, or `None` if the token was
/// refused. A segment none of whose jobs moved is deleted again.
async fn commit_segment(
    rdb: &Rdb,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    seg: u64,
    window: u64,
    jobs: &[(Vec<u8>, Vec<u8>)],
) -> Result<Option<u64>, Error> {
    let path = tier.segment_path(rdb.name(), dep, window, seg);
    let bytes = encode(jobs);
    let size = bytes.len();
    tier.put(&path, bytes).await?;
    let commit = |chunk| rdb::commit(rdb, token, seg, window, size, chunk);
    let Some(moved) = in_flight(&calls(jobs), commit).await? else {
        return Ok(None);
    };
    if moved == 0 {
        tier.delete(&path).await?;
    }
    Ok(Some(moved))
}

/// `jobs` cut into calls of at most [`CALL_JOBS`] jobs and [`CALL_BYTES`] bytes (a job
/// larger than that alone in its call).
fn calls(jobs: &[Job]) -> Vec<&[Job]> {
    let (mut out, mut start, mut bytes) = (Vec::new(), 0, 0);
    for (i, (id, rec)) in jobs.iter().enumerate() {
        let size = id.len() + rec.len();
        if i > start && (i - start == CALL_JOBS || bytes + size > CALL_BYTES) {
            out.push(&jobs[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < jobs.len() {
        out.push(&jobs[start..]);
    }
    out
}

/// Runs `call` on every chunk, the first alone and then up to [`IN_FLIGHT`] at a time, the
/// next sent as soon as one answers: the sum of what they counted, or `None` if one was
/// fenced out (the first error, if one failed; the calls still in flight are dropped,
/// and each is whole in Redis or not run). The first goes alone so that a Redis that
/// lost its script cache (restarted) answers `NOSCRIPT` once, not to every call in
/// flight (each would load the script).
async fn in_flight<'a, F, Fut>(chunks: &[&'a [Job]], call: F) -> Result<Option<u64>, Error>
where
    F: Fn(&'a [Job]) -> Fut,
    Fut: std::future::Future<Output = Result<Option<u64>, Error>>,
{
    use std::pin::Pin;
    use std::task::Poll;
    let Some((first, rest)) = chunks.split_first() else {
        return Ok(Some(0));
    };
    let Some(mut sum) = call(first).await? else {
        return Ok(None);
    };
    let mut next = rest.iter();
    let mut running: Vec<Pin<Box<Fut>>> = next
        .by_ref()
        .take(IN_FLIGHT)
        .map(|chunk| Box::pin(call(chunk)))
        .collect();
    while !running.is_empty() {
        // The first of the running calls to answer (each polled until then).
        let reply = std::future::poll_fn(|cx| {
            for i in 0..running.len() {
                if let Poll::Ready(reply) = running[i].as_mut().poll(cx) {
                    drop(running.swap_remove(i));
                    return Poll::Ready(reply);
                }
            }
            Poll::Pending
        })
        .await;
        match reply? {
            Some(n) => sum += n,
            None => return Ok(None),
        }
        if let Some(chunk) = next.next() {
            running.push(Box::pin(call(chunk)));
        }
    }
    Ok(Some(sum))
}

/// Loads every segment whose window starts within the lead of `now`; `false` if the
/// token was refused. A segment that cannot be read (the store failing, an object lost
/// or damaged) does not hold up the others: each is tried, and the first such error is
/// returned once they all were (the leader counts it, and tries that one again at its
/// next pass).
async fn load_in(
    rdb: &Rdb,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    now: u64,
    done: &mut Pass,
) -> Result<bool, Error> {
    let until = now.saturating_add(contract::ms_ceil(tier.lead()));
    let key = rdb.key(Key::ColdWindows);
    // Every segment due (their count is windows x segments per window: hundreds, not
    // millions), so that one that fails is not met again at the head of each page.
    let due: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
        .arg(key)
        .arg("-inf")
        .arg(until)
        .arg("WITHSCORES")
        .query_async(&mut rdb.conn())
        .await
        .map_err(|err| Error::redis(key, "ZRANGEBYSCORE", err))?;
    let mut failed = None;
    for (seg, window) in due {
        let (Ok(seg_no), window) = (seg.parse::<u64>(), window.max(0.0) as u64) else {
            return Err(Error::garbage(
                key,
                format!("member {seg:?} is not a segment number"),
            ));
        };
        match load_segment(rdb, tier, token, dep, seg_no, window, done).await {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(err) if err.is_store() => {
                failed.get_or_insert(err);
            }
            Err(err) => return Err(err),
        }
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(true),
    }
}

async fn load_segment(
    rdb: &Rdb,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    seg: u64,
    window: u64,
    done: &mut Pass,
) -> Result<bool, Error> {
    let path = tier.segment_path(rdb.name(), dep, window, seg);
    let jobs = decode(&tier.get(&path).await?, path.as_ref())?;
    let load = |chunk| rdb::load(rdb, token, seg, chunk);
    let Some(loaded) = in_flight(&calls(&jobs), load).await? else {
        return Ok(false);
    };
    done.loaded += loaded;
    let Some(left) = rdb::retire(rdb, token, seg).await? else {
        return Ok(false);
    };
    tier.delete(&path).await?;
    done.retired += 1;
    if left > 0 {
        // Entries naming ids the segment does not hold: only a hand-made change can do
        // that. `repair` finds them (index entries with no segment).
        return Err(Error::garbage(
            rdb.key(Key::ColdSegs),
            format!("segment {seg} was loaded whole, yet {left} index entries still named it"),
        ));
    }
    Ok(true)
}

/// Deletes the objects of this deployment's part of the store that no segment of Redis
/// names; how many. Run first in a pass (a new leadership's first, then one every
/// [`ColdTier::sweep_every`]), before its moves, so no move of this leader's own is
/// between its PUT and its commit; an older leadership's commit would be refused by its
/// token. Another deployment's objects (another `cdep`) are never listed.
pub(crate) async fn sweep(rdb: &Rdb, tier: &ColdTier) -> Result<u64, Error> {
    let Some(dep) = rdb::deployment(rdb).await? else {
        // No take has run: this deployment has written nothing.
        return Ok(0);
    };
    let objects = tier.list(rdb.name(), &dep).await?;
    if objects.is_empty() {
        return Ok(0);
    }
    let key = rdb.key(Key::ColdSegs);
    let segs: Vec<String> = objects.iter().map(|(_, seg)| seg.to_string()).collect();
    let known: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(key)
        .arg(&segs)
        .query_async(&mut rdb.conn())
        .await
        .map_err(|err| Error::redis(key, "HMGET", err))?;
    let mut swept = 0;
    for ((path, _), known) in objects.iter().zip(known) {
        if known.is_none() {
            tier.delete(path).await?;
            swept += 1;
        }
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_cut_at_their_job_count_and_their_bytes() {
        let small: Vec<Job> = (0..2 * CALL_JOBS + 50)
            .map(|i| (vec![b'a'; 10], vec![i as u8; 90]))
            .collect();
        let cut = calls(&small);
        assert_eq!(
            cut.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [CALL_JOBS, CALL_JOBS, 50]
        );
        let big: Vec<Job> = (0..10).map(|_| (vec![b'b'; 24], vec![0; 50_000])).collect();
        let cut = calls(&big);
        assert!(cut
            .iter()
            .all(|c| c.iter().map(|(i, r)| i.len() + r.len()).sum::<usize>() <= CALL_BYTES));
        assert_eq!(cut.iter().map(|c| c.len()).sum::<usize>(), 10);
        let huge: Vec<Job> = vec![(vec![b'c'], vec![0; CALL_BYTES + 1])];
        assert_eq!(calls(&huge).len(), 1);
        assert!(calls(&[]).is_empty());
    }
}
