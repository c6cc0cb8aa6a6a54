//! A Redis Cluster of a test's own: `redis-server --cluster-enabled yes` on free loopback
//! ports, joined with `redis-cli --cluster create`, every node killed on drop (each one a
//! [`RedisServer`]). Failure detection is quick (`--cluster-node-timeout` 1000 ms), so a
//! failover takes a couple of seconds.

use crate::redis_server::RedisServer;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The node timeout of the test clusters, in milliseconds.
pub const NODE_TIMEOUT_MS: u64 = 1_000;

/// A running cluster; see the module docs.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each (the first `masters` nodes start as
    /// the masters), every slot assigned, every replica in sync.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, false, false)
    }

    /// [`start`](Self::start) with TLS only: every node, the cluster bus and replication
    /// (`--tls-cluster yes --tls-replication yes`), one CA for all ([`ca_pem`](Self::ca_pem)).
    pub fn start_tls(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, true, false)
    }

    /// [`start_tls`](Self::start_tls) whose nodes also ask every client for a
    /// certificate signed by the CA (`--tls-auth-clients yes`); the nodes present their
    /// own to each other, and [`client_pem`](Self::client_pem) is one for the
    /// tests.
    pub fn start_mutual_tls(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, true, true)
    }

    fn start_with(masters: usize, replicas: usize, tls: bool, client_auth: bool) -> RedisCluster {
        let timeout = NODE_TIMEOUT_MS.to_string();
        let certs = std::env::temp_dir().join(format!(
            "tickless-cluster-certs-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        if tls {
            let _ = std::fs::remove_dir_all(&certs);
            std::fs::create_dir_all(&certs).unwrap();
            crate::redis_server::make_certificates(&certs);
            if client_auth {
                crate::redis_server::make_client_certificate(&certs, "ca", "client");
            }
        }
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout,
            "--appendonly",
            "no",
            "--tls-cluster",
            if tls { "yes" } else { "no" },
            "--tls-replication",
            if tls { "yes" } else { "no" },
        ];
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                if tls {
                    RedisServer::start_tls_with_certificates(&certs, client_auth, &args)
                } else {
                    RedisServer::start_plain(&args)
                }
            })
            .collect();
        let mut create = Command::new("redis-cli");
        if tls {
            create
                .arg("--tls")
                .arg("--cacert")
                .arg(certs.join("ca.crt"));
            if client_auth {
                create
                    .arg("--cert")
                    .arg(certs.join("client.crt"))
                    .arg("--key")
                    .arg(certs.join("client.key"));
            }
        }
        let output = create
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli (Debian/Ubuntu: apt-get install -y redis-tools)");
        let _ = std::fs::remove_dir_all(&certs);
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok(Duration::from_secs(20));
        cluster
    }

    /// `redis://127.0.0.1:<port>/` (`rediss://` for TLS) of every node started (killed
    /// ones too).
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url_by_address).collect()
    }

    /// The CA of a TLS cluster, as PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.nodes[0].ca_pem()
    }

    /// The client certificate a [`start_mutual_tls`](Self::start_mutual_tls) cluster
    /// accepts, and its key, as PEM.
    pub fn client_pem(&self) -> (Vec<u8>, Vec<u8>) {
        (
            self.nodes[0].client_cert_pem(),
            self.nodes[0].client_key_pem(),
        )
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// The nodes still running.
    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.pid().is_some())
    }

    /// Waits until every live node says `cluster_state:ok` with all 16,384 slots served,
    /// agrees on which node serves each slot, and every master has its replicas in sync.
    pub fn wait_until_ok(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster is not ok after {limit:?}: {}",
                self.live()
                    .next()
                    .map(|n| n.cli(&["CLUSTER", "NODES"]))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ok(&self) -> bool {
        let mut maps = Vec::new();
        for node in self.live() {
            let info = node.cli(&["CLUSTER", "INFO"]);
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                return false;
            }
            maps.push(self.slot_owners(node));
        }
        if maps.windows(2).any(|w| w[0] != w[1]) {
            return false;
        }
        self.live().all(|node| {
            let replication = node.cli(&["INFO", "replication"]);
            if replication.contains("role:slave") {
                replication.contains("master_link_status:up")
            } else {
                !replication.contains("state=wait_bgsave")
                    && !replication.contains("state=send_bulk")
            }
        })
    }

    /// Master port per slot range, as `node` sees it (`CLUSTER NODES`).
    fn slot_owners(&self, node: &RedisServer) -> Vec<(u16, u16, u16)> {
        owners(&node.cli(&["CLUSTER", "NODES"]))
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        let node = self.live().next().expect("a live node");
        node.cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap()
    }

    /// The port of the master serving `slot`, as the first live node sees it.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        let node = self.live().next().expect("a live node");
        self.slot_owners(node)
            .into_iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, port)| port)
            .expect("a master for the slot")
    }

    /// The ports of the masters serving slots.
    pub fn masters(&self) -> Vec<u16> {
        let node = self.live().next().expect("a live node");
        let mut ports: Vec<u16> = self.slot_owners(node).into_iter().map(|o| o.2).collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// The cluster's id of the node on `port` (`CLUSTER MYID`).
    pub fn id_of(&self, port: u16) -> String {
        self.node(port).cli(&["CLUSTER", "MYID"]).trim().to_string()
    }

    /// Kills the node on `port` with SIGKILL (as `kill -9`).
    pub fn kill(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
            .kill();
    }

    /// Moves `slot` and its keys from the master on `from` to the master on `to`, as
    /// `redis-cli --cluster reshard` does: `SETSLOT IMPORTING`/`MIGRATING`, then `MIGRATE`
    /// of `keys_per_migrate` keys at a time, then `SETSLOT NODE` on both and the others.
    pub fn migrate_slot(&self, slot: u16, from: u16, to: u16, keys_per_migrate: usize) {
        let (source, target) = (self.node(from), self.node(to));
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let slot_arg = slot.to_string();
        expect_ok(target.cli(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]));
        expect_ok(source.cli(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]));
        let count = keys_per_migrate.to_string();
        loop {
            let keys = source.cli(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, &count]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            // NOKEY: the keys listed went away meanwhile (a script emptied them).
            let reply = source.cli(&args);
            if reply.trim() != "NOKEY" {
                expect_ok(reply);
            }
        }
        for node in [target, source] {
            expect_ok(node.cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]));
        }
        for node in self.live().filter(|n| n.port() != from && n.port() != to) {
            let _ = node.cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
        }
    }
}

fn expect_ok(reply: String) {
    assert_eq!(reply.trim(), "OK", "redis-cli answered {reply:?}");
}

/// `127.0.0.1:7000@17000` -> 7000.
fn port_of(address: &str) -> u16 {
    let host_port = address.split('@').next().unwrap_or(address);
    host_port.rsplit(':').next().unwrap().parse().unwrap()
}

/// The master serving `slot` as the node on `port` sees it now, if one not failed does:
/// for watching a failover from a thread of its own.
pub fn master_of_slot_seen_by(port: u16, slot: u16) -> Option<u16> {
    let output = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "CLUSTER",
            "NODES",
        ])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    owners(&String::from_utf8_lossy(&output.stdout))
        .into_iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))
        .map(|(_, _, port)| port)
}

/// Master port per slot range in a `CLUSTER NODES` reply, failed masters left out.
fn owners(nodes: &str) -> Vec<(u16, u16, u16)> {
    let mut owners = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let port = port_of(fields[1]);
        for range in &fields[8..] {
            if range.starts_with('[') {
                continue; // a slot being migrated or imported
            }
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            owners.push((start.parse().unwrap(), end.parse().unwrap(), port));
        }
    }
    owners.sort_unstable();
    owners
}
