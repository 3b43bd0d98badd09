//! How many replicas a write must wait for (`single_use.redis_wait_replicas`): a fixed
//! number, or under `"auto"` one whenever the primary holding the key reports a
//! connected replica (`ROLE`, which lists the replicas online, a paused one included
//! until the primary's replication timeout drops it), asked at most once a second per
//! primary (per shard of a cluster: `CLUSTER SLOTS` names the shards).
//!
//! Invariant: what is not known is assumed replicated: before the first answer, or for
//! a shard no primary answered for, a write waits for one replica (refused rather than
//! trusted); a primary that reports none is taken at its word (a single Redis, or a
//! promoted replica whose old primary is gone: nothing could be promoted without the
//! write).

use super::link::Link;
use crate::config::WaitReplicas;
use redis::{Cmd, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a primary's answer stands.
const FRESH: Duration = Duration::from_secs(1);

pub(super) struct Replicas {
    wanted: WaitReplicas,
    known: Mutex<Known>,
    /// One refresh at a time; the others use what is known meanwhile.
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Known {
    /// Slot ranges (inclusive) and the replicas their primary reported; one range
    /// `0..=16383` outside a cluster.
    shards: Vec<(u16, u16, u32)>,
    at: Option<Instant>,
    generation: u64,
}

impl Replicas {
    pub(super) fn new(wanted: WaitReplicas) -> Self {
        Self {
            wanted,
            known: Mutex::new(Known::default()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// Replicas a write of `key` must be confirmed by.
    pub(super) async fn for_key(&self, link: &Link, key: &str) -> u32 {
        match self.wanted {
            WaitReplicas::Count(count) => count,
            WaitReplicas::Auto => {
                self.refresh_if_stale(link).await;
                let slot = slot_of(key.as_bytes());
                let known = self.known.lock().expect("not poisoned");
                let reported = known
                    .shards
                    .iter()
                    .find(|(start, end, _)| (*start..=*end).contains(&slot))
                    .map_or(1, |(_, _, replicas)| *replicas);
                reported.min(1)
            }
        }
    }

    /// Whether `a` and `b` are served by the same primary, as last known (outside a
    /// cluster, always).
    pub(super) fn same_shard(&self, a: &str, b: &str) -> bool {
        let (a, b) = (slot_of(a.as_bytes()), slot_of(b.as_bytes()));
        let known = self.known.lock().expect("not poisoned");
        let shard = |slot: u16| {
            known
                .shards
                .iter()
                .position(|(start, end, _)| (*start..=*end).contains(&slot))
        };
        known.shards.len() <= 1 || shard(a) == shard(b)
    }

    async fn refresh_if_stale(&self, link: &Link) {
        let stale = |known: &Known| {
            known.generation != link.generation() || known.at.is_none_or(|at| at.elapsed() >= FRESH)
        };
        if !stale(&self.known.lock().expect("not poisoned")) {
            return;
        }
        // Someone else refreshing: use what is known (unless nothing is).
        let _guard = match self.refreshing.try_lock() {
            Ok(guard) => guard,
            Err(_) if self.known.lock().expect("not poisoned").at.is_some() => return,
            Err(_) => self.refreshing.lock().await,
        };
        if !stale(&self.known.lock().expect("not poisoned")) {
            return;
        }
        let generation = link.generation();
        match shards(link).await {
            Ok(shards) => {
                *self.known.lock().expect("not poisoned") = Known {
                    shards,
                    at: Some(Instant::now()),
                    generation,
                };
            }
            Err(error) => {
                tracing::debug!(kind = ?error.kind(), "redis replicas could not be counted");
            }
        }
    }
}

/// Each shard's slots and the replicas its primary reports now.
async fn shards(link: &Link) -> redis::RedisResult<Vec<(u16, u16, u32)>> {
    let ranges = match link {
        Link::Cluster(_) => {
            let slots = link
                .to_slot_primary(redis::cmd("CLUSTER").arg("SLOTS").to_owned(), 0)
                .await?;
            slot_ranges(&slots)
        }
        _ => vec![(0, 16383)],
    };
    let mut shards = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        let role: Cmd = redis::cmd("ROLE");
        // A shard whose primary cannot say is assumed replicated.
        let replicas = match link.to_slot_primary(role, start).await {
            Ok(role) => replicas_in_role(&role).unwrap_or(1),
            Err(_) => 1,
        };
        shards.push((start, end, replicas));
    }
    Ok(shards)
}

/// `CLUSTER SLOTS`: `[[start, end, [primary...], [replica...]...], ...]`.
fn slot_ranges(reply: &Value) -> Vec<(u16, u16)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| match range {
            Value::Array(fields) => match (fields.first(), fields.get(1)) {
                (Some(Value::Int(start)), Some(Value::Int(end))) => {
                    Some((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `ROLE` on a primary: `["master", offset, [[ip, port, offset], ...]]`; `None` from a
/// node that is not one.
fn replicas_in_role(reply: &Value) -> Option<u32> {
    let Value::Array(fields) = reply else {
        return None;
    };
    let role = match fields.first()? {
        Value::BulkString(bytes) => bytes.as_slice(),
        Value::SimpleString(text) => text.as_bytes(),
        _ => return None,
    };
    if role != b"master" {
        return None;
    }
    match fields.get(2)? {
        Value::Array(replicas) => u32::try_from(replicas.len()).ok(),
        _ => None,
    }
}

/// The cluster hash slot of `key` (CRC16/XMODEM of its hash tag or of all of it, mod
/// 16384), as Redis computes it.
pub(super) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
    #[test]
    fn slots_are_the_clusters() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_eq!(slot_of(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
    }

    #[test]
    fn role_replies_count_replicas() {
        let replica = Value::Array(vec![
            Value::BulkString(b"127.0.0.1".to_vec()),
            Value::BulkString(b"7001".to_vec()),
            Value::BulkString(b"42".to_vec()),
        ]);
        let primary = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(42),
            Value::Array(vec![replica]),
        ]);
        assert_eq!(replicas_in_role(&primary), Some(1));
        let alone = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(0),
            Value::Array(vec![]),
        ]);
        assert_eq!(replicas_in_role(&alone), Some(0));
        let not_primary = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        assert_eq!(replicas_in_role(&not_primary), None);
    }
}
