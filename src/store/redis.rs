//! The shared store: consumed ids in Redis (or Valkey, or a Redis Cluster), so every
//! replica sees every consumption.
//!
//! Invariant: a consumption is one atomic `SET <prefix>c:<id> 1 NX PX <ttl>`: exactly one
//! caller anywhere gets `OK`. Revocations live beside them under `<prefix>r:<digest>`,
//! idempotency records under `<prefix>i:<key>` (reserved, renewed and swapped by Lua
//! scripts, each conditional on the value it expects). Every command has a deadline; a store that does not
//! answer in time is unavailable, never "fresh". The URL (it may carry a password) is
//! never logged or echoed: errors name their kind only.

use super::{Consumed, StoreError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, RedisError};
use std::time::Duration;
use tokio::sync::Mutex;

pub use crate::config::redis_url::{Target, parse_url};

enum Connection {
    Single(ConnectionManager),
    /// Connected on first use and again after a failure: a cluster client needs a
    /// reachable node to start, and the sidecar must start without one.
    Cluster(Box<Cluster>),
}

struct Cluster {
    client: ClusterClient,
    connection: Mutex<Option<ClusterConnection>>,
}

pub struct RedisStore {
    connection: Connection,
    prefix: String,
    timeout: Duration,
}

impl RedisStore {
    /// Set up the connection; nothing is contacted yet (the sidecar starts, and
    /// reconnects later, while Redis is down).
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, &'static str> {
        const BUILD: &str = "the Redis client could not be set up from single_use.redis_url";
        let connection = match parse_url(url)? {
            Target::Single(url) => {
                let client = Client::open(url.as_str()).map_err(|_| BUILD)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    // Reconnect attempts happen in the background; a command fails fast
                    // (and the caller's deadline bounds it) rather than waiting them out.
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                let manager =
                    ConnectionManager::new_lazy_with_config(client, config).map_err(|_| BUILD)?;
                Connection::Single(manager)
            }
            Target::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(1)
                    .build()
                    .map_err(|_| BUILD)?;
                Connection::Cluster(Box::new(Cluster {
                    client,
                    connection: Mutex::new(None),
                }))
            }
        };
        Ok(Self {
            connection,
            prefix: prefix.to_owned(),
            timeout,
        })
    }

    pub async fn consume(&self, id: &str, ttl: Duration) -> Result<Consumed, StoreError> {
        let mut set = redis::cmd("SET");
        set.arg(format!("{}c:{id}", self.prefix))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        let reply: Option<String> = self.run(set).await?;
        Ok(match reply {
            Some(_) => Consumed::Fresh,
            None => Consumed::Replayed,
        })
    }

    pub async fn release(&self, id: &str) -> Result<(), StoreError> {
        let mut del = redis::cmd("DEL");
        del.arg(format!("{}c:{id}", self.prefix));
        let _: i64 = self.run(del).await?;
        Ok(())
    }

    /// `SET <prefix>r:<digest> <not_before> PX <keep>` unless a later record exists: a
    /// Lua script keeps the check and the write atomic across replicas.
    pub async fn revoke(
        &self,
        digest: &str,
        not_before: f64,
        keep: Duration,
    ) -> Result<(), StoreError> {
        const LATEST: &str = r"
            local current = tonumber(redis.call('GET', KEYS[1]))
            if current and current >= tonumber(ARGV[1]) then return 0 end
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return 1";
        let mut eval = redis::cmd("EVAL");
        eval.arg(LATEST)
            .arg(1)
            .arg(format!("{}r:{digest}", self.prefix))
            .arg(format!("{not_before:.6}"))
            .arg(keep.as_millis().max(1) as u64);
        let _: i64 = self.run(eval).await?;
        Ok(())
    }

    pub async fn revoked_since(&self, digest: &str) -> Result<Option<f64>, StoreError> {
        let mut get = redis::cmd("GET");
        get.arg(format!("{}r:{digest}", self.prefix));
        let value: Option<String> = self.run(get).await?;
        Ok(value.and_then(|v| v.parse().ok()))
    }

    /// `SET <prefix>i:<key> <value> NX PX <lease>`, returning what the key holds when it
    /// was already set: one Lua script, so the check and the write are one step on the
    /// server (every replica sees exactly one reservation win).
    pub async fn reserve_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
    ) -> Result<Option<String>, StoreError> {
        const RESERVE: &str = r"
            local current = redis.call('GET', KEYS[1])
            if current then return current end
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return false";
        let mut eval = redis::cmd("EVAL");
        eval.arg(RESERVE)
            .arg(1)
            .arg(format!("{}i:{key}", self.prefix))
            .arg(value)
            .arg(lease.as_millis().max(1) as u64);
        self.run(eval).await
    }

    /// Replace (or, with `None`, delete) `<prefix>i:<key>` only while it holds `expected`.
    pub async fn swap_record(
        &self,
        key: &str,
        expected: &str,
        value: Option<&str>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        const SWAP: &str = r"
            if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
            if ARGV[2] == '' then return redis.call('DEL', KEYS[1]) end
            redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
            return 1";
        let mut eval = redis::cmd("EVAL");
        eval.arg(SWAP)
            .arg(1)
            .arg(format!("{}i:{key}", self.prefix))
            .arg(expected)
            .arg(value.unwrap_or(""))
            .arg(ttl.as_millis().max(1) as u64);
        let swapped: i64 = self.run(eval).await?;
        Ok(swapped > 0)
    }

    /// `PEXPIRE <prefix>i:<key> <lease>` only while it holds `expected`: one Lua script,
    /// so a reservation taken over by another caller after its lease ended is not
    /// extended.
    pub async fn renew_record(
        &self,
        key: &str,
        expected: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        const RENEW: &str = r"
            if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
            return redis.call('PEXPIRE', KEYS[1], ARGV[2])";
        let mut eval = redis::cmd("EVAL");
        eval.arg(RENEW)
            .arg(1)
            .arg(format!("{}i:{key}", self.prefix))
            .arg(expected)
            .arg(lease.as_millis().max(1) as u64);
        let renewed: i64 = self.run(eval).await?;
        Ok(renewed > 0)
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        let _: String = self.run(redis::cmd("PING")).await?;
        Ok(())
    }

    /// One command, bounded by the deadline.
    async fn run<T: redis::FromRedisValue>(&self, command: Cmd) -> Result<T, StoreError> {
        let call = async {
            match &self.connection {
                Connection::Single(manager) => {
                    let mut manager = manager.clone();
                    command.query_async(&mut manager).await.map_err(report)
                }
                Connection::Cluster(cluster) => {
                    let Cluster { client, connection } = &**cluster;
                    let mut guard = connection.lock().await;
                    let mut cluster = match guard.as_ref() {
                        Some(cluster) => cluster.clone(),
                        None => {
                            let cluster = client.get_async_connection().await.map_err(report)?;
                            *guard = Some(cluster.clone());
                            cluster
                        }
                    };
                    drop(guard);
                    let result = command.query_async(&mut cluster).await;
                    if result.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
                        *connection.lock().await = None;
                    }
                    result.map_err(report)
                }
            }
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| StoreError::Timeout)?
    }
}

/// Log a Redis failure by kind (its text can name the server, never the password, but
/// the kind is all an operator needs next to the store metrics).
fn report(error: RedisError) -> StoreError {
    tracing::debug!(kind = ?error.kind(), "redis command failed");
    // The client's own response timeout (set to the same deadline) may fire first.
    if error.is_timeout() {
        StoreError::Timeout
    } else if error.code() == Some("OOM") {
        // `maxmemory` reached under `noeviction`: full, not unreachable (a failure
        // policy of "allow" must not let a request through because Redis is full).
        StoreError::Full
    } else {
        StoreError::Unavailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("redis://r:6379/2"),
            Ok(Target::Single("redis://r:6379/2".into()))
        );
        assert_eq!(
            parse_url("rediss+cluster://u:p@a:7000,b:7001"),
            Ok(Target::Cluster(vec![
                "rediss://u:p@a:7000".into(),
                "rediss://u:p@b:7001".into()
            ]))
        );
        for bad in [
            "http://r",
            "redis://",
            "redis+cluster://",
            "redis+cluster://a:1/0",
            "r",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
