//! `repair.lua` and `cold_repair.lua`: putting the queue's structures back in line.

use super::refs;
use super::Rdb;
use crate::error::Error;
use crate::rdb::scripts::scripts;

/// What one [`repair`] step did.
pub(crate) struct Repairing {
    /// Jobs put back (or records corrected).
    pub(crate) placed: u64,
    /// Entries removed.
    pub(crate) removed: u64,
    /// The cursor of `jobs`' next page (`0`: the last; always `0` for other steps).
    pub(crate) cursor: Vec<u8>,
    /// For `jobs`: id, stale entries to skip, whether a live one follows, for each job
    /// whose entries in `ready` the caller counts.
    pub(crate) expected: Vec<(Vec<u8>, i64, bool)>,
}

/// `repair.lua`: one step `what` of a repair pass over `items` (ids or members), fenced
/// by `token` (`-`: an operator's pass); `None` when fenced out.
///
/// `ARGV` token, what, items. Reply `{ 0 }` fenced, else `{ 1, placed, removed, cursor,
/// id_1, skip_1, live_1, ... }`.
pub(crate) async fn repair(
    rdb: &Rdb,
    token: &str,
    what: &str,
    items: Vec<Vec<u8>>,
) -> Result<Option<Repairing>, Error> {
    let mut args = vec![token.as_bytes().to_vec(), what.as_bytes().to_vec()];
    args.extend(items);
    let mut reply = rdb.call(&scripts().repair, &refs(&args)).await?;
    if reply.int(0)? != 1 {
        return Ok(None);
    }
    let placed = reply.int(1)?.max(0) as u64;
    let removed = reply.int(2)?.max(0) as u64;
    // A string for `jobs` (HSCAN's cursor, which can pass i64), else the integer 0.
    let cursor = match reply.take_bytes(3) {
        Ok(cursor) => cursor,
        Err(_) => {
            reply.int(3)?;
            b"0".to_vec()
        }
    };
    let mut expected = Vec::new();
    let mut i = 4;
    while i + 2 < reply.len() {
        let id = reply.take_bytes(i)?;
        let skip = reply.int(i + 1)?;
        let live = reply.int(i + 2)? == 1;
        expected.push((id, skip, live));
        i += 3;
    }
    Ok(Some(Repairing {
        placed,
        removed,
        cursor,
        expected,
    }))
}

/// `cold_repair.lua`, an operator's pass: judges `pairs` (id, seg, flat) of the cold
/// index, or with none compares `cseg` and `cwin`; `(placed, removed)`.
///
/// `ARGV` `-`, then id, seg pairs. Reply `{ 1, placed, removed }`.
pub(crate) async fn cold_repair(rdb: &Rdb, pairs: Vec<Vec<u8>>) -> Result<(u64, u64), Error> {
    let mut args = vec![b"-".to_vec()];
    args.extend(pairs);
    let reply = rdb.call(&scripts().cold_repair, &refs(&args)).await?;
    Ok((reply.int(1)?.max(0) as u64, reply.int(2)?.max(0) as u64))
}
