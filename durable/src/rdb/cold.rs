//! The cold tier's scripts: `cold_take`, `cold_commit`, `cold_load`, `cold_retire` (the
//! leader's moves, fenced by its token, a decimal string), `cold_find`, `cold_thaw`.

use super::scripts::scripts;
use super::{num, Rdb};
use crate::error::Error;

/// What one [`take`] read.
#[cfg(feature = "cold")]
pub(crate) struct Taken {
    /// The queue's clock (ms).
    pub(crate) now: u64,
    /// The queue's deployment id (meta's `cdep`).
    pub(crate) dep: String,
    /// This take ended a walk over every bucket that can hold far jobs.
    pub(crate) done: bool,
    /// Where the walk stands (when not `done`): the start (ms) of the first bucket it has
    /// still to read; every far job due before it has been read (taken or judged near).
    pub(crate) walked_to: u64,
    /// Each job taken: its window's start (ms), id, record.
    pub(crate) jobs: Vec<(u64, Vec<u8>, Vec<u8>)>,
}

/// `cold_take.lua`: the jobs due at or after now + `horizon_ms`, by window of
/// `window_ms`, among the next ~`limit` ids of its walk over the wheel's far buckets;
/// `fresh_dep` becomes meta's `cdep` if it has none. `None` when fenced out.
///
/// `ARGV` token, horizon, window, limit, deployment. Reply `{ 0 }` fenced, else
/// `{ 1, now, cdep, done, walked, w_1, n_1, id, record, ... (n_1 pairs), w_2, n_2, ... }`.
#[cfg(feature = "cold")]
pub(crate) async fn take(
    rdb: &Rdb,
    token: &str,
    horizon_ms: u64,
    window_ms: u64,
    limit: usize,
    fresh_dep: &str,
) -> Result<Option<Taken>, Error> {
    let (horizon, window, limit) = (num(horizon_ms), num(window_ms), num(limit));
    let args: [&[u8]; 5] = [
        token.as_bytes(),
        &horizon,
        &window,
        &limit,
        fresh_dep.as_bytes(),
    ];
    let mut reply = rdb.call(&scripts().cold_take, &args).await?;
    if reply.int(0)? != 1 {
        return Ok(None);
    }
    let now = reply.int(1)?.max(0) as u64;
    let dep = String::from_utf8_lossy(&reply.take_bytes(2)?).into_owned();
    let done = reply.int(3)? == 1;
    let walked_to = reply.int(4)?.max(0) as u64;
    let mut jobs = Vec::new();
    let mut i = 5;
    while i < reply.len() {
        let window = reply.int(i)?.max(0) as u64;
        let n = reply.int(i + 1)?.max(0) as usize;
        for x in 0..n {
            let id = reply.take_bytes(i + 2 + 2 * x)?;
            let rec = reply.take_bytes(i + 3 + 2 * x)?;
            jobs.push((window, id, rec));
        }
        i += 2 + 2 * n;
    }
    Ok(Some(Taken {
        now,
        dep,
        done,
        walked_to,
        jobs,
    }))
}

/// `cold_commit.lua`: indexes `jobs` (id, record) as held by segment `seg` of `window`
/// (`bytes` long); how many moved, `None` when fenced out.
///
/// `ARGV` token, seg, window, bytes, then id, record pairs. Reply `{ 0 }` fenced, else
/// `{ 1, moved }`.
#[cfg(feature = "cold")]
pub(crate) async fn commit(
    rdb: &Rdb,
    token: &str,
    seg: u64,
    window: u64,
    bytes: usize,
    jobs: &[(Vec<u8>, Vec<u8>)],
) -> Result<Option<u64>, Error> {
    let (seg, window, bytes) = (num(seg), num(window), num(bytes));
    let mut args: Vec<&[u8]> = vec![token.as_bytes(), &seg, &window, &bytes];
    args.extend(pairs(jobs));
    let reply = rdb.call(&scripts().cold_commit, &args).await?;
    if reply.int(0)? != 1 {
        return Ok(None);
    }
    Ok(Some(reply.int(1)?.max(0) as u64))
}

/// `cold_load.lua`: puts `jobs` (id, record) read from segment `seg` back into the wheel;
/// how many, `None` when fenced out.
///
/// `ARGV` token, seg, then id, record pairs. Reply `{ 0 }` fenced, else
/// `{ now, loaded, dropped }`.
#[cfg(feature = "cold")]
pub(crate) async fn load(
    rdb: &Rdb,
    token: &str,
    seg: u64,
    jobs: &[(Vec<u8>, Vec<u8>)],
) -> Result<Option<u64>, Error> {
    let seg = num(seg);
    let mut args: Vec<&[u8]> = vec![token.as_bytes(), &seg];
    args.extend(pairs(jobs));
    let reply = rdb.call(&scripts().cold_load, &args).await?;
    if reply.len() == 1 {
        return Ok(None);
    }
    Ok(Some(reply.int(1)?.max(0) as u64))
}

/// `cold_retire.lua`: forgets segment `seg`; the index entries that still named it (-1:
/// retired already), `None` when fenced out.
///
/// `ARGV` token, seg. Reply `{ 0 }` fenced, else `{ 1, left }`.
#[cfg(feature = "cold")]
pub(crate) async fn retire(rdb: &Rdb, token: &str, seg: u64) -> Result<Option<i64>, Error> {
    let seg = num(seg);
    let reply = rdb
        .call(&scripts().cold_retire, &[token.as_bytes(), &seg])
        .await?;
    if reply.int(0)? != 1 {
        return Ok(None);
    }
    Ok(Some(reply.int(1)?))
}

#[cfg(feature = "cold")]
fn pairs(jobs: &[(Vec<u8>, Vec<u8>)]) -> impl Iterator<Item = &[u8]> {
    jobs.iter()
        .flat_map(|(id, rec)| [id.as_slice(), rec.as_slice()])
}

/// `cold_find.lua`: where the cold index puts job `id`: its segment and its window's
/// start (ms; 0 if `cseg` no longer knows the segment), or `None`.
///
/// `ARGV` id. Reply `{ }` or `{ seg, window }`.
pub(crate) async fn find(rdb: &Rdb, id: &str) -> Result<Option<(u64, u64)>, Error> {
    let reply = rdb.call(&scripts().cold_find, &[id.as_bytes()]).await?;
    if reply.len() < 2 {
        return Ok(None);
    }
    Ok(Some((
        reply.int(0)?.max(0) as u64,
        reply.int(1)?.max(0) as u64,
    )))
}

/// `cold_thaw.lua`: moves cold job `id`, whose `record` segment `seg` holds, into the
/// wheel at `when` ([`When::arg`](crate::When)); `false` if the index no longer
/// names `seg` for it.
///
/// `ARGV` id, seg, record, when. Reply `{ now, moved }`.
pub(crate) async fn thaw(
    rdb: &Rdb,
    id: &str,
    seg: u64,
    record: &[u8],
    when: &str,
) -> Result<bool, Error> {
    let seg = num(seg);
    let reply = rdb
        .call(
            &scripts().cold_thaw,
            &[id.as_bytes(), &seg, record, when.as_bytes()],
        )
        .await?;
    Ok(reply.int(1)? == 1)
}

#[cfg(feature = "cold")]
/// The deployment id in the queue's object paths (meta's `cdep`), once a leader's first
/// take has set it.
pub(crate) async fn deployment(rdb: &Rdb) -> Result<Option<String>, Error> {
    let meta = rdb.meta_key();
    redis::cmd("HGET")
        .arg(meta)
        .arg("cdep")
        .query_async(&mut rdb.conn())
        .await
        .map_err(|err| Error::redis(meta, "HGET", err))
}
