//! `acquire.lua`, `renew.lua`, `tick.lua`, `release.lua`: the leader's lease and moves.

use super::num;
use super::Rdb;
use crate::error::Error;
use crate::rdb::scripts::scripts;

/// What [`acquire`] answered.
pub(crate) struct Acquired {
    /// The fencing token of the new leadership; `None` if another holder's lease is live.
    pub(crate) token: Option<u64>,
    /// The queue's clock (ms).
    pub(crate) now: u64,
    /// When the lease (ours or the other holder's) ends (ms).
    pub(crate) expires: u64,
}

/// `acquire.lua`: takes the lease as `holder` for `ttl_ms`, if no other holder's is live.
///
/// `ARGV` holder, ttl_ms, busy_ms. Reply `{ 1, token, now, expires }` taken,
/// `{ 0, holder, now, expires }` not.
pub(crate) async fn acquire(
    rdb: &Rdb,
    holder: &str,
    ttl_ms: u128,
    busy_ms: u128,
) -> Result<Acquired, Error> {
    let (ttl, busy) = (num(ttl_ms), num(busy_ms));
    let reply = rdb
        .call(&scripts().acquire, &[holder.as_bytes(), &ttl, &busy])
        .await?;
    let now = reply.int(2)?.max(0) as u64;
    let expires = reply.int(3)?.max(0) as u64;
    let token = match reply.int(0)? {
        1 => Some(reply.int(1)?.max(0) as u64),
        _ => None,
    };
    Ok(Acquired {
        token,
        now,
        expires,
    })
}

/// `renew.lua`: renews leadership `token`'s lease for `ttl_ms`, publishing `lags`
/// and promotions; `(now, expires)`, or `None` if the leadership is lost.
///
/// `ARGV` token, ttl_ms, lag_p50_ms, lag_p99_ms, promoted, lag_sum_ms. Reply
/// `{ 1, now, expires }` renewed, `{ 0, now }` lost.
pub(crate) async fn renew(
    rdb: &Rdb,
    token: u64,
    ttl_ms: u128,
    lags: &Lags,
) -> Result<Option<(u64, u64)>, Error> {
    let args = [
        num(token),
        num(ttl_ms),
        num(lags.p50_ms),
        num(lags.p99_ms),
        num(lags.promoted),
        num(lags.sum_ms),
    ];
    let reply = rdb.call(&scripts().renew, &super::refs(&args)).await?;
    if reply.int(0)? != 1 {
        return Ok(None);
    }
    Ok(Some((
        reply.int(1)?.max(0) as u64,
        reply.int(2)?.max(0) as u64,
    )))
}

/// What a leader publishes with each renewal: its promotion lags (ms) and how many jobs
/// it promoted.
pub(crate) struct Lags {
    pub(crate) p50_ms: u64,
    pub(crate) p99_ms: u64,
    pub(crate) promoted: u64,
    pub(crate) sum_ms: u64,
}

/// What one [`tick`] did.
pub(crate) struct Ticked {
    /// The queue's clock (ms).
    pub(crate) now: u64,
    /// The score of `due`'s head after the call (-1: empty).
    pub(crate) next: i64,
    /// Bit 1: due work left for another call; bit 2: cron schedules want occurrences.
    pub(crate) flags: i64,
    /// now - due of each job promoted to `ready` (ms).
    pub(crate) lags: Vec<i64>,
}

/// `tick.lua`: moves up to `limit` due jobs and buckets for leadership `token`; `None`
/// if the leadership is lost (fencing).
///
/// `ARGV` token, limit. Reply `{ 0 }` lost, else `{ now, next, flags, lag_1..lag_k }`.
pub(crate) async fn tick(rdb: &Rdb, token: u64, limit: usize) -> Result<Option<Ticked>, Error> {
    let (token, limit) = (num(token), num(limit));
    let reply = rdb.call(&scripts().tick, &[&token, &limit]).await?;
    if reply.len() == 1 {
        return Ok(None);
    }
    Ok(Some(Ticked {
        now: reply.int(0)?.max(0) as u64,
        next: reply.int(1)?,
        flags: reply.int(2)?,
        lags: (3..reply.len())
            .map(|i| reply.int(i))
            .collect::<Result<_, _>>()?,
    }))
}

/// `release.lua`: ends leadership `token`'s lease, if it is the current one.
///
/// `ARGV` token. Reply 1 released, else 0 (not read: the leader stops either way).
pub(crate) async fn release(rdb: &Rdb, token: u64) -> Result<(), Error> {
    rdb.call(&scripts().release, &[&num(token)]).await?;
    Ok(())
}
