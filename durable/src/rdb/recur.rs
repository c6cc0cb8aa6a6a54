//! `recur_set.lua`, `recur_del.lua`, `recur_fill.lua`: recurring schedules.

use super::Rdb;
use super::{num, refs};
use crate::error::Error;
use crate::rdb::scripts::scripts;

/// `recur_set.lua`: sets schedule `id` to `record` (`kind|policy|max|period|spec|payload`)
/// with its first occurrences `first` (`r<us>` or `c<t1>,...`); `false` if it already had
/// this very record.
///
/// `ARGV` id, record, first. Reply `{ now, set }`.
pub(crate) async fn set(rdb: &Rdb, id: &str, record: &[u8], first: &str) -> Result<bool, Error> {
    let reply = rdb
        .call(
            &scripts().recur_set,
            &[id.as_bytes(), record, first.as_bytes()],
        )
        .await?;
    Ok(reply.int(1)? == 1)
}

/// `recur_del.lua`: removes schedule `id`; whether there was one.
///
/// `ARGV` ids. Reply: per id 1 removed, 0 none.
pub(crate) async fn del(rdb: &Rdb, id: &str) -> Result<bool, Error> {
    let reply = rdb.call(&scripts().recur_del, &[id.as_bytes()]).await?;
    Ok(reply.int(0)? == 1)
}

/// One schedule's refill: its id, the `rnext` value `times` were computed from (empty if
/// none), the times to append (empty: none computable).
pub(crate) struct Fill<'a> {
    pub(crate) id: &'a str,
    pub(crate) next: Vec<u8>,
    pub(crate) times: String,
}

/// `recur_fill.lua`: appends occurrences to schedules, fenced by leadership `token`; how
/// many each gained (none at all when fenced out).
///
/// `ARGV` token, then triples id, next, times. Reply `{ 0 }` fenced, else
/// `{ 1, appended_1, ... }`.
pub(crate) async fn fill(rdb: &Rdb, token: u64, fills: Vec<Fill<'_>>) -> Result<Vec<i64>, Error> {
    let mut args = Vec::with_capacity(1 + 3 * fills.len());
    args.push(num(token));
    for fill in fills {
        args.extend([
            fill.id.as_bytes().to_vec(),
            fill.next,
            fill.times.into_bytes(),
        ]);
    }
    let reply = rdb.call(&scripts().recur_fill, &refs(&args)).await?;
    (1..reply.len()).map(|i| reply.int(i)).collect()
}
