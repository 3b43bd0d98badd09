//! Replicated Redis for the failover tests, on free loopback ports in a temp dir, every
//! process killed when dropped: a Redis Cluster of three primaries with one replica each
//! (node timeout 1 s), and a primary with one replica watched by three sentinels (down
//! after 1 s). [`stall`] and [`kill_and_resume`] make a failover lose writes the way
//! one does in production: the replica stops reading (SIGSTOP), more is written to its
//! primary than the sockets between them hold, then the primary is killed and the
//! replica resumed, so it is promoted without what was still queued in the dead
//! primary's output buffer (a marker key written last shows it).

use super::redis::{RedisServer, cluster_url, create_cluster};
use redis::{Value, cmd};
use std::time::{Duration, Instant};

/// What a primary must be able to queue for a stopped replica without dropping it.
const UNLIMITED_REPLICA_BUFFER: [&str; 2] = ["--client-output-buffer-limit", "replica 0 0 0"];

/// Written to a primary behind a stopped replica: more than the loopback sockets between
/// them hold (`tcp_rmem` may reach 32 MiB), so the tail is still in the primary's own
/// buffer when it is killed.
const FILLER_MIB: usize = 80;

fn wait_for(what: &str, seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {seconds} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The replicas `ROLE` on `node` lists (ports), or `None` when it is not a primary.
pub fn replica_ports(node: &RedisServer) -> Option<Vec<u16>> {
    let role: Vec<Value> = node.query(&cmd("ROLE")).ok()?;
    if !matches!(role.first(), Some(Value::BulkString(b)) if b == b"master") {
        return None;
    }
    let Some(Value::Array(replicas)) = role.get(2) else {
        return Some(Vec::new());
    };
    Some(
        replicas
            .iter()
            .filter_map(|replica| match replica {
                Value::Array(fields) => match fields.get(1) {
                    Some(Value::BulkString(port)) => std::str::from_utf8(port).ok()?.parse().ok(),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
    )
}

pub struct ReplicatedCluster {
    pub nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl ReplicatedCluster {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["--cluster-node-timeout", "1000"];
        // A replica stopped for a few seconds may still be promoted.
        args.extend(["--cluster-replica-validity-factor", "0"]);
        args.extend(UNLIMITED_REPLICA_BUFFER);
        let nodes = create_cluster(dir.path(), 6, 1, &args);
        let cluster = Self { nodes, _dir: dir };
        wait_for("the cluster is ok with a replica per primary", 30, || {
            cluster.nodes.iter().all(RedisServer::cluster_ok)
                && cluster.primaries().len() == 3
                && cluster
                    .primaries()
                    .iter()
                    .all(|&p| replica_ports(&cluster.nodes[p]).is_some_and(|r| r.len() == 1))
        });
        cluster
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        cluster_url(&self.nodes)
    }

    /// The nodes that are primaries now.
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| replica_ports(&self.nodes[i]).is_some())
            .collect()
    }

    /// The replica of the primary `primary`.
    pub fn replica_of(&self, primary: usize) -> usize {
        let ports = replica_ports(&self.nodes[primary]).expect("a primary");
        self.nodes
            .iter()
            .position(|n| ports.contains(&n.port))
            .expect("its replica is one of the nodes")
    }

    /// The primary serving `key` now, asked of `via`.
    pub fn primary_of(&self, key: &str, via: usize) -> usize {
        let node = &self.nodes[via];
        let slot: i64 = node.query(cmd("CLUSTER").arg("KEYSLOT").arg(key)).unwrap();
        let slots: Vec<Vec<Value>> = node.query(cmd("CLUSTER").arg("SLOTS")).unwrap();
        let port = slots
            .iter()
            .find_map(|range| match (&range[0], &range[1], &range[2]) {
                (Value::Int(start), Value::Int(end), Value::Array(primary))
                    if (*start..=*end).contains(&slot) =>
                {
                    match &primary[1] {
                        Value::Int(port) => Some(*port as u16),
                        _ => None,
                    }
                }
                _ => None,
            })
            .expect("every slot is served");
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }

    /// A hash tag whose keys the primary `primary` serves.
    pub fn tag_on(&self, primary: usize) -> String {
        (0..)
            .map(|i| format!("t{i}"))
            .find(|tag| self.primary_of(&format!("{{{tag}}}"), primary) == primary)
            .unwrap()
    }

    /// Wait until `replica` was promoted and every live node agrees the cluster is ok.
    pub fn wait_promoted(&self, replica: usize, dead: usize) {
        wait_for("the replica is promoted", 30, || {
            replica_ports(&self.nodes[replica]).is_some()
                && (0..self.nodes.len())
                    .filter(|&i| i != dead)
                    .all(|i| self.nodes[i].cluster_ok())
        });
    }
}

/// A primary with one replica and three sentinels (quorum 2) watching it as `primary`.
pub struct SentinelGroup {
    pub primary: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

pub const SERVICE: &str = "primary";

impl SentinelGroup {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let primary = RedisServer::spawn(dir.path(), &UNLIMITED_REPLICA_BUFFER);
        let port = primary.port.to_string();
        let replica = RedisServer::spawn(dir.path(), &["--replicaof", "127.0.0.1", &port]);
        wait_for("the replica is in sync", 20, || {
            replica_ports(&primary).is_some_and(|r| r == [replica.port])
        });
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|i| {
                let file = dir.path().join(format!("sentinel-{i}.conf"));
                std::fs::write(
                    &file,
                    format!(
                        "sentinel monitor {SERVICE} 127.0.0.1 {port} 2\n\
                         sentinel down-after-milliseconds {SERVICE} 1000\n\
                         sentinel failover-timeout {SERVICE} 5000\n"
                    ),
                )
                .unwrap();
                RedisServer::sentinel(dir.path(), &file)
            })
            .collect();
        let group = Self {
            primary,
            replica,
            sentinels,
            _dir: dir,
        };
        wait_for("the sentinels know each other and the replica", 30, || {
            group.sentinels.iter().all(|s| {
                let others: redis::RedisResult<Vec<Value>> =
                    s.query(cmd("SENTINEL").arg("SENTINELS").arg(SERVICE));
                let replicas: redis::RedisResult<Vec<Value>> =
                    s.query(cmd("SENTINEL").arg("REPLICAS").arg(SERVICE));
                others.is_ok_and(|o| o.len() == 2) && replicas.is_ok_and(|r| r.len() == 1)
            })
        });
        group
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// Wait until the replica is primary and every sentinel names it.
    pub fn wait_promoted(&self) {
        let port = self.replica.port.to_string();
        wait_for("the sentinels promote the replica", 40, || {
            replica_ports(&self.replica).is_some()
                && self.sentinels.iter().all(|s| {
                    let address: redis::RedisResult<Vec<String>> =
                        s.query(cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(SERVICE));
                    address.is_ok_and(|a| a.get(1) == Some(&port))
                })
        });
    }
}

/// Stop `replica` reading, then queue more on `primary` than the sockets between them
/// hold, under hash tag `tag` (a cluster shard's), and a marker key after it: returns
/// the marker, which a promoted replica must lack.
pub fn stall(primary: &RedisServer, replica: &RedisServer, tag: &str) -> String {
    replica.signal("STOP");
    let mut connection = primary.connection().unwrap();
    let chunk = vec![b'x'; 1024 * 1024];
    for i in 0..FILLER_MIB {
        let _: () = cmd("SET")
            .arg(format!("{{{tag}}}:filler:{i}"))
            .arg(&chunk)
            .query(&mut connection)
            .unwrap();
    }
    let marker = format!("{{{tag}}}:marker");
    let _: () = cmd("SET")
        .arg(&marker)
        .arg(1)
        .query(&mut connection)
        .unwrap();
    marker
}

/// Kill `primary` (SIGKILL: its buffers die with it) and let `replica` run again.
pub fn kill_and_resume(primary: &mut RedisServer, replica: &RedisServer) {
    primary.stop();
    replica.signal("CONT");
}

/// Whether `key` exists on `node`.
pub fn holds(node: &RedisServer, key: &str) -> bool {
    let exists: i64 = node.query(cmd("EXISTS").arg(key)).unwrap();
    exists == 1
}
