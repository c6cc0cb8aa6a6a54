//! [`StreamInfo`]: how full a queue's stream outlet is and how far its consumer groups
//! are behind, read with `XLEN` and `XINFO GROUPS`.

use crate::error::Error;
use std::collections::HashMap;

/// A queue's stream outlet as Redis has it now, from
/// [`Queue::stream_info`](crate::Queue::stream_info).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamInfo {
    /// The stream's key.
    pub key: String,
    /// Entries in the stream (`XLEN`): read or not, up to the outlet's bound.
    pub length: u64,
    /// Its consumer groups (`XINFO GROUPS`), by name.
    pub groups: Vec<StreamGroup>,
}

/// One consumer group of a queue's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamGroup {
    /// The group's name.
    pub name: String,
    /// Consumers the group knows.
    pub consumers: u64,
    /// Entries read by a consumer of the group and not yet acknowledged (`XACK`).
    pub pending: u64,
}

/// A group of `XINFO GROUPS`'s reply, which Redis gives as a map of fields.
fn group(key: &str, fields: &HashMap<String, redis::Value>) -> Result<StreamGroup, Error> {
    let field = |name: &str| -> Result<&redis::Value, Error> {
        fields
            .get(name)
            .ok_or_else(|| Error::garbage(key, format!("XINFO GROUPS gave no {name:?}")))
    };
    let number = |name: &str| -> Result<u64, Error> {
        redis::from_redis_value(field(name)?)
            .map_err(|_| Error::garbage(key, format!("XINFO GROUPS's {name:?} is not a number")))
    };
    Ok(StreamGroup {
        name: redis::from_redis_value(field("name")?)
            .map_err(|_| Error::garbage(key, "XINFO GROUPS's \"name\" is not a string"))?,
        consumers: number("consumers")?,
        pending: number("pending")?,
    })
}

impl crate::Queue {
    /// The queue's stream outlet's length and its consumer groups' pending counts, or
    /// `None` when the queue has no outlet (see
    /// [`set_stream_outlet`](crate::Queue::set_stream_outlet)). A stream not written yet
    /// has length 0 and no groups.
    ///
    /// The reads are `XLEN` and `XINFO GROUPS` (README's ACL user has both).
    ///
    /// # Errors
    ///
    /// [`Error::is_redis`], [`Error::is_garbage`].
    pub async fn stream_info(&self) -> Result<Option<StreamInfo>, Error> {
        let Some(outlet) = self.stream_outlet().await? else {
            return Ok(None);
        };
        let key = outlet.key();
        let (exists, length): (bool, u64) = redis::pipe()
            .exists(key)
            .cmd("XLEN")
            .arg(key)
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(key, "XLEN", err))?;
        let mut groups = Vec::new();
        if exists {
            let replies: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(key)
                .query_async(&mut self.rdb().conn())
                .await
                .map_err(|err| Error::redis(key, "XINFO GROUPS", err))?;
            for fields in &replies {
                groups.push(group(key, fields)?);
            }
            groups.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(Some(StreamInfo {
            key: key.to_string(),
            length,
            groups,
        }))
    }
}
