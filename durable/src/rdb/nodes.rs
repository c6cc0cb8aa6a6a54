//! What makes a queue's dedicated connections: a subscription and a `BLMOVE` would hold
//! a multiplexed connection up (the one a cluster connection routes on, too), so they get
//! connections of their own to the master that owns the queue's slot, looked up again
//! whenever they fail (a failover, a migrated slot).

use crate::error::away;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, TlsCertificates, Value};
use std::time::Duration;

/// What makes a queue's dedicated connections (see the module docs).
#[derive(Clone)]
pub(crate) enum Nodes {
    Single(redis::Client),
    Cluster {
        conn: ClusterConnection,
        /// The first seed's user, password, database and TLS mode, for every node.
        template: ConnectionInfo,
        certs: Option<TlsCertificates>,
    },
}

/// While the master that owns a queue's slot cannot be reached (a failover under way),
/// a leader asks the cluster for the slot's master again this often (two small commands
/// to a live node; the dead one gets a refused connect, no traffic), for at most
/// [`OWNER_WAIT`], so that it subscribes again as soon as a replica is promoted.
const OWNER_POLL: Duration = Duration::from_millis(100);
const OWNER_WAIT: Duration = Duration::from_secs(30);

impl Nodes {
    /// A subscription connection to the server holding `key`: on a cluster, its slot's
    /// master, waited for (see [`OWNER_POLL`]) while it cannot be reached.
    pub(crate) async fn subscriber(&self, key: &str) -> redis::RedisResult<redis::aio::PubSub> {
        let started = std::time::Instant::now();
        loop {
            let result = match self.owner_of(key).await {
                Ok(client) => client.get_async_pubsub().await,
                Err(err) => Err(err),
            };
            match result {
                Err(err)
                    if matches!(self, Nodes::Cluster { .. })
                        && away(&err)
                        && started.elapsed() < OWNER_WAIT =>
                {
                    tickless::sleep(OWNER_POLL).await;
                }
                result => return result,
            }
        }
    }

    /// A client for the server that holds `key`: the one server, or the master that owns
    /// `key`'s slot now (asked of the cluster each time: after a failover or a migration
    /// it is another node).
    pub(crate) async fn owner_of(&self, key: &str) -> redis::RedisResult<redis::Client> {
        let (conn, template, certs) = match self {
            Nodes::Single(client) => return Ok(client.clone()),
            Nodes::Cluster {
                conn,
                template,
                certs,
            } => (conn, template, certs),
        };
        let mut conn = conn.clone();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await?;
        let slots: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        let (host, port) = master_of(&slots, slot).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::ClusterDown,
                "no master owns the queue's slot",
            ))
        })?;
        let mut info = template.clone();
        info.addr = match info.addr {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        match certs {
            Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
            None => redis::Client::open(info),
        }
    }
}

/// The master's address for `slot` in a `CLUSTER SLOTS` reply: entries
/// `[start, end, [host, port, id, ...], replicas...]`.
fn master_of(slots: &Value, slot: u16) -> Option<(String, u16)> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        if !(*start..=*end).contains(&i64::from(slot)) {
            continue;
        }
        let host = match node.first()? {
            Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            Value::SimpleString(host) => host.clone(),
            _ => return None,
        };
        let Value::Int(port) = node.get(1)? else {
            return None;
        };
        return Some((host, u16::try_from(*port).ok()?));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn master_of_finds_the_range_holding_the_slot() {
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("10.0.0.2", 7001),
            ]),
        ]);
        assert_eq!(master_of(&slots, 0), Some(("10.0.0.1".into(), 7000)));
        assert_eq!(master_of(&slots, 5460), Some(("10.0.0.1".into(), 7000)));
        assert_eq!(master_of(&slots, 5461), Some(("10.0.0.2".into(), 7001)));
        assert_eq!(master_of(&slots, 16000), None);
        assert_eq!(master_of(&Value::Nil, 1), None);
    }
}
