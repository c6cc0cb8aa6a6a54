//! [`StreamOutlet`]: a queue that delivers its due jobs into a Redis Stream instead of
//! its ready list, for consumers in any language (consumer groups: `XREADGROUP`,
//! `XACK`, `XAUTOCLAIM`).
//!
//! The setting lives in the queue's meta hash (contract.rs's `OUTLET_KEY_FIELD` and
//! `OUTLET_MAX_FIELD`), beside the leader's lease and `busy`: every script that makes a
//! job due (the leader's tick, a schedule due at once, a retry, a lease that ended, a
//! recurring occurrence, a cold load, a dead job retried, a give back) reads it there, so
//! whichever process makes a job due, leader or not, applies the same setting, in the
//! same script call (lib/batch.lua's `outlet`).

use crate::contract::{prefix, OUTLET_KEY_FIELD, OUTLET_MAX_FIELD, STREAM_KEY};
use crate::error::Error;
use crate::queue::Queue;

/// Where a queue delivers its due jobs when they should not wait in its ready list for a
/// [`Worker`](crate::Worker): a Redis Stream, set with
/// [`Queue::set_stream_outlet`].
///
/// Each due job becomes one entry, appended in the same script call that takes it from
/// the wheel, with the fields `id`, `delivery` (the queue's delivery number, as a
/// worker's claim gets one), `attempt`, `due` (ms since the Unix epoch) and `payload`;
/// the job then leaves the queue, as an acked job does. Each `XADD` trims the stream to
/// about [`max_len`](StreamOutlet::max_len) entries (`MAXLEN ~`): an entry trimmed is
/// gone from the stream even if no consumer group has read or acknowledged it.
///
/// # Examples
///
/// ```
/// use tickless_durable::StreamOutlet;
///
/// let outlet = StreamOutlet::new("tickless:{orders}:stream").with_max_len(1_000_000);
/// assert_eq!(outlet.key(), "tickless:{orders}:stream");
/// assert_eq!(outlet.max_len(), 1_000_000);
/// assert_eq!(StreamOutlet::new("k").max_len(), StreamOutlet::DEFAULT_MAX_LEN);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOutlet {
    key: String,
    max_len: u64,
}

impl StreamOutlet {
    /// The bound of a new outlet: 100,000 entries.
    pub const DEFAULT_MAX_LEN: u64 = 100_000;

    /// An outlet into the stream at `key` (a full key name, which must carry the queue's
    /// name as its hash tag: see [`Queue::set_stream_outlet`]), bounded by
    /// [`DEFAULT_MAX_LEN`](StreamOutlet::DEFAULT_MAX_LEN).
    pub fn new(key: impl Into<String>) -> StreamOutlet {
        StreamOutlet {
            key: key.into(),
            max_len: StreamOutlet::DEFAULT_MAX_LEN,
        }
    }

    /// The same outlet, trimmed to about `max_len` entries by each `XADD` (`MAXLEN ~`:
    /// Redis trims whole nodes of the stream only, so it may hold up to a node more,
    /// 100 entries by default, `stream-node-max-entries`). At least 1.
    pub fn with_max_len(mut self, max_len: u64) -> StreamOutlet {
        self.max_len = max_len;
        self
    }

    /// The stream's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The bound on the stream's length.
    pub fn max_len(&self) -> u64 {
        self.max_len
    }
}

/// Why `key` cannot be queue `name`'s stream, if it cannot.
fn refuse(name: &str, key: &str, max_len: u64) -> Option<String> {
    if key.is_empty() {
        return Some("the key is empty".into());
    }
    if max_len == 0 {
        return Some("a bound (MAXLEN) of 0 would keep no entry".into());
    }
    // Redis Cluster's hash tag: what lies between the first `{` and the first `}` after it.
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag);
    if tag != Some(name) {
        return Some(format!(
            "its hash tag must be the queue's name, {{{name}}}, so that it lives in the \
             queue's hash slot (as tickless:{{{name}}}:{STREAM_KEY} does)"
        ));
    }
    if let Some(rest) = key.strip_prefix(&prefix(name)) {
        if rest != STREAM_KEY && !rest.starts_with(&format!("{STREAM_KEY}:")) {
            return Some(format!(
                "the queue's own keys start with {}; a stream there must be named \
                 {STREAM_KEY} or {STREAM_KEY}:<name>",
                prefix(name)
            ));
        }
    }
    None
}

impl Queue {
    /// The default key of this queue's stream outlet: `tickless:{<name>}:stream`, in the
    /// queue's hash slot and within README's ACL key pattern (`~tickless:*`).
    pub fn default_stream_key(&self) -> String {
        format!("{}{STREAM_KEY}", prefix(self.name()))
    }

    /// Sets (`Some`) or removes (`None`) the queue's stream outlet: from the next script
    /// call on, every job that comes due is appended to the stream instead of the ready
    /// list, and leaves the queue (see [`StreamOutlet`]). Jobs in the ready list already
    /// stay there for workers; with `None`, due jobs go to the ready list again and the
    /// stream keeps its entries.
    ///
    /// The setting is stored in Redis, in the queue's meta hash, so every process of the
    /// queue (leaders, schedulers, workers) applies it; set it once, from any of them.
    /// The user needs `XADD` on the stream's key from then on (README's ACL line has it).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_outlet`] for an empty key, a key whose hash tag is not the
    /// queue's name (outside the queue's hash slot, which a Redis Cluster needs), one of
    /// the queue's own keys, a key holding something else than a stream, or a bound of
    /// 0; [`Error::is_redis`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tickless_durable::{Queue, StreamOutlet};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tickless_durable::Error> {
    /// let queue = Queue::connect("redis://127.0.0.1/", "orders").await?;
    /// let outlet = StreamOutlet::new(queue.default_stream_key()).with_max_len(1_000_000);
    /// queue.set_stream_outlet(Some(&outlet)).await?;
    /// assert_eq!(queue.stream_outlet().await?, Some(outlet));
    /// // Due in 48 hours, as an entry of tickless:{orders}:stream.
    /// queue.schedule("order:42", b"close", Duration::from_secs(48 * 3600)).await?;
    ///
    /// let err = queue.set_stream_outlet(Some(&StreamOutlet::new("{other}:out"))).await;
    /// assert!(err.unwrap_err().is_invalid_outlet());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_stream_outlet(&self, outlet: Option<&StreamOutlet>) -> Result<(), Error> {
        let meta = self.rdb().meta_key();
        let mut conn = self.rdb().conn();
        let Some(outlet) = outlet else {
            return redis::cmd("HDEL")
                .arg(meta)
                .arg(OUTLET_KEY_FIELD)
                .arg(OUTLET_MAX_FIELD)
                .query_async(&mut conn)
                .await
                .map_err(|err| Error::redis(meta, "remove the stream outlet", err));
        };
        if let Some(why) = refuse(self.name(), &outlet.key, outlet.max_len) {
            return Err(Error::invalid_outlet(&outlet.key, why));
        }
        let found: String = redis::cmd("TYPE")
            .arg(&outlet.key)
            .query_async(&mut conn)
            .await
            .map_err(|err| Error::redis(&outlet.key, "TYPE", err))?;
        if found != "none" && found != "stream" {
            return Err(Error::invalid_outlet(
                &outlet.key,
                format!("the key holds a {found}, not a stream"),
            ));
        }
        redis::cmd("HSET")
            .arg(meta)
            .arg(OUTLET_KEY_FIELD)
            .arg(&outlet.key)
            .arg(OUTLET_MAX_FIELD)
            .arg(outlet.max_len)
            .query_async(&mut conn)
            .await
            .map_err(|err| Error::redis(meta, "set the stream outlet", err))
    }

    /// The queue's stream outlet, if it has one (see
    /// [`set_stream_outlet`](Queue::set_stream_outlet)).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`]; [`Error::is_garbage`] for a bound that is not a positive
    /// number.
    pub async fn stream_outlet(&self) -> Result<Option<StreamOutlet>, Error> {
        let meta = self.rdb().meta_key();
        let (key, max): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(meta)
            .arg(OUTLET_KEY_FIELD)
            .arg(OUTLET_MAX_FIELD)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(meta, "HMGET", err))?;
        let Some(key) = key else {
            return Ok(None);
        };
        let text = max.unwrap_or_default();
        match text.parse::<u64>() {
            Ok(max_len) if max_len > 0 => Ok(Some(StreamOutlet { key, max_len })),
            _ => Err(Error::garbage(
                meta,
                format!("field {OUTLET_MAX_FIELD} is {text:?}, not a positive number"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::refuse;

    #[test]
    fn an_outlet_is_refused_outside_the_queues_slot_or_among_its_keys() {
        assert_eq!(refuse("q", "tickless:{q}:stream", 1), None);
        assert_eq!(refuse("q", "tickless:{q}:stream:billing", 1), None);
        assert_eq!(refuse("q", "out:{q}", 1), None);
        assert_eq!(refuse("q", "{q}", 1), None);
        assert!(refuse("q", "", 1).unwrap().contains("empty"));
        assert!(refuse("q", "tickless:{q}:stream", 0).unwrap().contains("0"));
        for outside in [
            "stream",
            "{other}:q",
            "{}{q}",
            "x{q",
            "tickless:{q2}:stream",
        ] {
            assert!(
                refuse("q", outside, 1).unwrap().contains("hash tag"),
                "{outside}"
            );
        }
        for own in [
            "tickless:{q}:ready",
            "tickless:{q}:streams",
            "tickless:{q}:b:0:1",
        ] {
            assert!(refuse("q", own, 1).unwrap().contains("own keys"), "{own}");
        }
    }
}
