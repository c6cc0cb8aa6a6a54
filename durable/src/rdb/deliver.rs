//! `claim.lua`, `fail.lua`, `extend.lua`, `give_back.lua`: a worker's side of a delivery.

use super::Rdb;
use super::Reply;
use super::{num, refs};
use crate::contract::MAX_BATCH;
use crate::error::Error;
use crate::rdb::scripts::scripts;

/// A job as a claim hands it over; its id may not be UTF-8 (written by something else).
pub(crate) struct Delivered {
    pub(crate) id: Vec<u8>,
    pub(crate) attempt: u32,
    pub(crate) delivery: u64,
    pub(crate) due_ms: u64,
    pub(crate) payload: Vec<u8>,
}

/// What [`claim`] answered.
pub(crate) struct Claimed {
    /// The queue's clock when the script ran (ms).
    pub(crate) now: u64,
    /// How many of the acks completed their job.
    pub(crate) acked: usize,
    pub(crate) jobs: Vec<Delivered>,
}

/// `claim.lua`: acks `acks` (id, delivery), then takes up to `max` ready jobs (at most
/// [`MAX_BATCH`]) under a lease of `lease_ms`; sent once more on a closed connection if
/// `retry`.
///
/// `ARGV` lease_ms, max, n_acks, then n_acks times id, delivery. Reply `{ now, n_acked,
/// then per job: id, attempt, delivery, due, payload }`.
pub(crate) async fn claim(
    rdb: &Rdb,
    lease_ms: u128,
    max: usize,
    acks: &[(String, u64)],
    retry: bool,
) -> Result<Claimed, Error> {
    let mut args = Vec::with_capacity(3 + 2 * acks.len());
    args.extend([num(lease_ms), num(max), num(acks.len())]);
    for (id, delivery) in acks {
        args.extend([id.as_bytes().to_vec(), num(delivery)]);
    }
    let mut reply = rdb
        .call_retrying(&scripts().claim, &refs(&args), retry)
        .await?;
    let now = reply.int(0)?.max(0) as u64;
    let acked = reply.int(1)?.max(0) as usize;
    let mut jobs = Vec::with_capacity(reply.len().saturating_sub(2) / 5);
    let mut i = 2;
    while i + 4 < reply.len() {
        jobs.push(Delivered {
            id: reply.take_bytes(i)?,
            attempt: u32::try_from(reply.int(i + 1)?).unwrap_or(u32::MAX),
            delivery: reply.int(i + 2)?.max(0) as u64,
            due_ms: reply.int(i + 3)?.max(0) as u64,
            payload: reply.take_bytes(i + 4)?,
        });
        i += 5;
    }
    Ok(Claimed { now, acked, jobs })
}

/// What [`fail`] did to the job: fail.lua's answer.
pub(crate) enum Fell {
    Retried,
    Dead,
    LeaseLost,
}

/// `fail.lua`: reports that delivery `delivery` of job `id` failed with `error`; retried
/// after `backoff_ms` or dead. `quarantine`: the worker could not read the id, so it goes
/// to the dead set whatever its attempts.
///
/// `ARGV` id, delivery, backoff_ms, error[, `q`]. Reply `{ now, outcome }`: 1 retried,
/// 2 dead, 0 the delivery no longer holds the job.
pub(crate) async fn fail(
    rdb: &Rdb,
    id: &[u8],
    delivery: u64,
    backoff_ms: u128,
    error: &str,
    quarantine: bool,
) -> Result<Fell, Error> {
    let (delivery, backoff) = (num(delivery), num(backoff_ms));
    let mut args: Vec<&[u8]> = vec![id, &delivery, &backoff, error.as_bytes()];
    if quarantine {
        args.push(b"q");
    }
    let reply = rdb.call(&scripts().fail, &args).await?;
    Ok(match reply.int(1)? {
        1 => Fell::Retried,
        2 => Fell::Dead,
        _ => Fell::LeaseLost,
    })
}

/// `fail.lua` with `d`: delivery `delivery` of job `id` goes to the dead set whatever its
/// attempts, counted as died (the HTTP API's fail with `dead`). Reply as [`fail`]'s.
#[cfg(feature = "api")]
pub(crate) async fn fail_dead(
    rdb: &Rdb,
    id: &[u8],
    delivery: u64,
    error: &str,
) -> Result<Fell, Error> {
    let delivery = num(delivery);
    let args: Vec<&[u8]> = vec![id, &delivery, b"0", error.as_bytes(), b"d"];
    let reply = rdb.call(&scripts().fail, &args).await?;
    Ok(match reply.int(1)? {
        2 => Fell::Dead,
        _ => Fell::LeaseLost,
    })
}

/// `extend.lua`: extends to `lease_ms` from now the leases of `deliveries` (id, delivery)
/// that still hold their job, [`MAX_BATCH`] per call; answers how many did.
///
/// `ARGV` lease_ms, then pairs id, delivery. Reply `{ now, extended }`.
pub(crate) async fn extend(
    rdb: &Rdb,
    lease_ms: u128,
    deliveries: &[(&str, u64)],
) -> Result<usize, Error> {
    let mut extended = 0;
    for chunk in deliveries.chunks(MAX_BATCH) {
        let mut args = Vec::with_capacity(1 + 2 * chunk.len());
        args.push(num(lease_ms));
        args.extend(pairs(chunk));
        let reply = rdb.call(&scripts().extend, &refs(&args)).await?;
        extended += count(&reply)?;
    }
    Ok(extended)
}

/// `give_back.lua`: makes `deliveries` (id, delivery) that still hold their job ready
/// again at once, uncounted, [`MAX_BATCH`] per call; answers how many did.
///
/// `ARGV` pairs id, delivery. Reply `{ now, given_back }`.
pub(crate) async fn give_back(rdb: &Rdb, deliveries: &[(&str, u64)]) -> Result<usize, Error> {
    let mut given = 0;
    for chunk in deliveries.chunks(MAX_BATCH) {
        let args: Vec<Vec<u8>> = pairs(chunk).collect();
        let reply = rdb.call(&scripts().give_back, &refs(&args)).await?;
        given += count(&reply)?;
    }
    Ok(given)
}

fn pairs<'a>(deliveries: &'a [(&str, u64)]) -> impl Iterator<Item = Vec<u8>> + 'a {
    deliveries
        .iter()
        .flat_map(|(id, delivery)| [id.as_bytes().to_vec(), num(delivery)])
}

/// The count of a `{ now, count }` reply.
fn count(reply: &Reply) -> Result<usize, Error> {
    Ok(reply.int(1)?.max(0) as usize)
}
