//! The shared store: consumed ids in Redis (or Valkey), one server, a Redis Cluster or a
//! Sentinel-managed primary ([`link`]), so every replica sees every consumption.
//!
//! Invariant: a consumption is one atomic `SET <prefix>c:<id> <mark> NX PX <ttl>`: exactly
//! one caller anywhere gets `OK`, and only the holder of the random mark releases it.
//! Revocations live beside them under `<prefix>r:<digest>`, idempotency records under
//! `<prefix>i:<key>` (reserved, renewed, swapped and withdrawn by Lua scripts, each
//! conditional on the value it expects; a reservation that timed out is fenced, so that
//! it cannot land after its withdrawal). A write that claims something (a consumption, a
//! reservation, a revocation, a recorded answer) counts only once the replicas
//! [`Replicas`] asks for confirmed it: `WAIT` follows it in the same pipeline;
//! unconfirmed, a claim is released again and the caller told
//! ([`StoreError::Unconfirmed`]), since a primary that fails before its replicas have a
//! write is replaced by one without it. Every command has a
//! deadline; a store that does not answer in time is unavailable, never "fresh". The URL
//! (it may carry a password) is never logged or echoed: errors name their kind only.

mod link;
mod replicas;

use super::{Consumed, ConsumptionId, Mark, StoreError};
use crate::config::WaitReplicas;
use crate::text::hex_lower;
use link::{Link, Request};
use redis::{Cmd, FromRedisValue, RedisError, Value};
use replicas::Replicas;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::redis_url::parse_url;

/// `single_use.redis_wait_replicas` and `single_use.redis_wait_ms`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) replicas: WaitReplicas,
    pub(crate) timeout: Duration,
}

/// What a [withdrawn](RedisStore::withdraw_record) reservation's fence is: its value with
/// this after it, which no reserved value or record ends with. A suffix, so that a
/// replica of the version before fences, which returns whatever a key holds, reads the
/// fence as the reservation it fences (its digest, still in progress) and not as a
/// conflict.
pub(crate) const WITHDRAWN: &str = ":withdrawn";

/// How long confirmations must have kept failing before readiness says so.
const UNCONFIRMED_NOT_READY: Duration = Duration::from_secs(1);

pub struct RedisStore {
    link: Link,
    prefix: String,
    timeout: Duration,
    wait: Wait,
    replicas: Replicas,
    /// Since when writes have gone unconfirmed, and the key of the last one (a probe
    /// writes to its slot), until one is confirmed again.
    unconfirmed: Mutex<Option<(Instant, String)>>,
}

/// A write's reply and whether the replicas asked for confirmed it.
struct Written<T> {
    reply: T,
    confirmed: bool,
}

impl RedisStore {
    /// Set up the connection; nothing is contacted yet (the sidecar starts, and
    /// reconnects later, while Redis is down).
    pub(crate) fn new(
        url: &str,
        prefix: &str,
        timeout: Duration,
        wait: Wait,
    ) -> Result<Self, &'static str> {
        const BUILD: &str = "the Redis client could not be set up from single_use.redis_url";
        // A request may wait for its replicas on top of its own deadline.
        let link = Link::new(parse_url(url)?, timeout + wait.timeout).map_err(|_| BUILD)?;
        Ok(Self {
            link,
            prefix: prefix.to_owned(),
            timeout,
            wait,
            replicas: Replicas::new(wait.replicas),
            unconfirmed: Mutex::new(None),
        })
    }

    pub(crate) async fn consume(
        &self,
        id: ConsumptionId,
        mark: Mark,
        ttl: Duration,
    ) -> Result<Consumed, StoreError> {
        let key = self.consumption_key(id);
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg(hex_lower(&mark.0))
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        let written: Written<Option<String>> = self.write(set, &key).await?;
        match written.reply {
            None => Ok(Consumed::Replayed),
            Some(_) if written.confirmed => Ok(Consumed::Fresh),
            Some(_) => {
                // Nothing was forwarded on it: give it back, so the state stays
                // spendable wherever the write ends up.
                if self.release(id, mark).await.is_err() {
                    tracing::warn!(
                        "unconfirmed consumption could not be released; it stays consumed"
                    );
                }
                Err(StoreError::Unconfirmed)
            }
        }
    }

    /// `DEL <prefix>c:<id>` while it holds `mark`: a consumption recorded by another
    /// caller (after a failover lost ours, say) is not touched.
    pub(crate) async fn release(&self, id: ConsumptionId, mark: Mark) -> Result<(), StoreError> {
        const RELEASE: &str = r"
            if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
            return redis.call('DEL', KEYS[1])";
        let mut eval = redis::cmd("EVAL");
        eval.arg(RELEASE)
            .arg(1)
            .arg(self.consumption_key(id))
            .arg(hex_lower(&mark.0));
        let _: i64 = self.run(eval).await?;
        Ok(())
    }

    /// `<prefix>c:<id>`, the id in lowercase hex: the name every replica gives it.
    fn consumption_key(&self, id: ConsumptionId) -> String {
        format!("{}c:{}", self.prefix, hex_lower(&id.0))
    }

    /// `SET <prefix>r:<digest> <not_before> PX <keep>` unless a later record exists: a
    /// Lua script keeps the check and the write atomic across replicas. An unconfirmed
    /// record stays (it only refuses more) and the caller is told.
    pub(crate) async fn revoke(
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
        let key = format!("{}r:{digest}", self.prefix);
        let mut eval = redis::cmd("EVAL");
        eval.arg(LATEST)
            .arg(1)
            .arg(&key)
            .arg(format!("{not_before:.6}"))
            .arg(keep.as_millis().max(1) as u64);
        let written: Written<i64> = self.write(eval, &key).await?;
        if written.confirmed {
            Ok(())
        } else {
            Err(StoreError::Unconfirmed)
        }
    }

    pub(crate) async fn revoked_since(&self, digest: &str) -> Result<Option<f64>, StoreError> {
        let mut get = redis::cmd("GET");
        get.arg(format!("{}r:{digest}", self.prefix));
        let value: Option<String> = self.run(get).await?;
        Ok(value.and_then(|v| v.parse().ok()))
    }

    /// `SET <prefix>i:<key> <value> NX PX <lease>`, returning what the key holds when it
    /// was already set: one Lua script, so the check and the write are one step on the
    /// server (every replica sees exactly one reservation win). A reservation of ours no
    /// replica confirmed is given back.
    ///
    /// A [withdrawal](Self::withdraw_record) fence is not a holder: another value's
    /// reservation replaces it, and the very value it fences finds it, removes it and
    /// reserves nothing ([`StoreError::Unavailable`]: this reservation was withdrawn before
    /// it landed). `value` must not end with `:withdrawn`.
    pub async fn reserve_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
    ) -> Result<Option<String>, StoreError> {
        const RESERVE: &str = r"
            local current = redis.call('GET', KEYS[1])
            if current == ARGV[1] .. ARGV[3] then
              redis.call('DEL', KEYS[1])
              return current
            end
            if current and string.sub(current, -#ARGV[3]) ~= ARGV[3] then return current end
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return false";
        let name = format!("{}i:{key}", self.prefix);
        let mut eval = redis::cmd("EVAL");
        eval.arg(RESERVE)
            .arg(1)
            .arg(&name)
            .arg(value)
            .arg(lease.as_millis().max(1) as u64)
            .arg(WITHDRAWN);
        let written: Written<Option<String>> = self.write(eval, &name).await?;
        match written.reply {
            Some(held) if held.ends_with(WITHDRAWN) => {
                // Only a reservation that arrives after its own withdrawal meets its
                // fence; its caller has long been told the store did not answer.
                tracing::debug!("idempotency reservation arrived after its withdrawal: not made");
                Err(StoreError::Unavailable)
            }
            Some(held) => Ok(Some(held)),
            None if written.confirmed => Ok(None),
            None => {
                if self.swap_record(key, value, None, lease).await.is_err() {
                    tracing::warn!(
                        "unconfirmed idempotency reservation could not be released; it holds until its lease ends"
                    );
                }
                Err(StoreError::Unconfirmed)
            }
        }
    }

    /// Withdraw a reservation of `value` whose reply never came (it timed out): leave a
    /// fence in its place for `lease`, replacing the reservation if it landed (`true`) or
    /// on the free key (`false`), so that the reservation, still on its way (behind a
    /// paused server, on another of the pool's connections than this command, or sent
    /// twice), cannot land after all and hold the key for a whole lease with nobody to
    /// release it. A key another value holds is left alone (`false`); if that value is
    /// then released before the late reservation lands, the reservation holds the key
    /// until its lease ends. Not waited for, like a release: a failover that loses the
    /// fence has the same effect.
    pub async fn withdraw_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        const WITHDRAW: &str = r"
            local current = redis.call('GET', KEYS[1])
            if current and current ~= ARGV[1] then return 0 end
            redis.call('SET', KEYS[1], ARGV[1] .. ARGV[3], 'PX', ARGV[2])
            if current then return 1 end
            return 0";
        let mut eval = redis::cmd("EVAL");
        eval.arg(WITHDRAW)
            .arg(1)
            .arg(format!("{}i:{key}", self.prefix))
            .arg(value)
            .arg(lease.as_millis().max(1) as u64)
            .arg(WITHDRAWN);
        let removed: i64 = self.run(eval).await?;
        Ok(removed > 0)
    }

    /// Replace (or, with `None`, delete) `<prefix>i:<key>` only while it holds `expected`
    /// (or holds `value` already: a record written again after it went unconfirmed).
    pub(crate) async fn swap_record(
        &self,
        key: &str,
        expected: &str,
        value: Option<&str>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        const SWAP: &str = r"
            local current = redis.call('GET', KEYS[1])
            if current ~= ARGV[1] and (ARGV[2] == '' or current ~= ARGV[2]) then return 0 end
            if ARGV[2] == '' then return redis.call('DEL', KEYS[1]) end
            redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
            return 1";
        let name = format!("{}i:{key}", self.prefix);
        let mut eval = redis::cmd("EVAL");
        eval.arg(SWAP)
            .arg(1)
            .arg(&name)
            .arg(expected)
            .arg(value.unwrap_or(""))
            .arg(ttl.as_millis().max(1) as u64);
        if value.is_none() {
            // A release: one that a failover loses only keeps the key until its lease
            // ends, so it is not waited for.
            let released: i64 = self.run(eval).await?;
            return Ok(released > 0);
        }
        let written: Written<i64> = self.write(eval, &name).await?;
        match written.reply {
            0 => Ok(false),
            _ if written.confirmed => Ok(true),
            _ => Err(StoreError::Unconfirmed),
        }
    }

    /// `PEXPIRE <prefix>i:<key> <lease>` only while it holds `expected`: one Lua script,
    /// so a reservation taken over by another caller after its lease ended is not
    /// extended. Not waited for: a renewal comes every third of the lease, so a
    /// promoted replica that lacks the last one still holds the reservation long enough
    /// for the next.
    pub(crate) async fn renew_record(
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

    /// The store answers; and once writes have gone unconfirmed for a while, a probe
    /// write to the slot of the last one is confirmed again (else
    /// [`StoreError::Unconfirmed`]: not ready, as an unreachable store is not).
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        let _: String = self.run(redis::cmd("PING")).await?;
        let failing = self.unconfirmed.lock().expect("not poisoned").clone();
        let Some((since, key)) = failing else {
            return Ok(());
        };
        if since.elapsed() < UNCONFIRMED_NOT_READY {
            return Ok(());
        }
        let probe = probe_key(&key);
        let mut set = redis::cmd("SET");
        set.arg(&probe).arg(1).arg("PX").arg(60_000);
        let written: Written<String> = self.write(set, &probe).await?;
        if written.confirmed {
            Ok(())
        } else {
            Err(StoreError::Unconfirmed)
        }
    }

    /// A write of `key`, followed in the same pipeline by `WAIT` for the replicas it
    /// needs (none: no `WAIT`).
    async fn write<T: FromRedisValue>(
        &self,
        command: Cmd,
        key: &str,
    ) -> Result<Written<T>, StoreError> {
        let replicas = self.replicas.for_key(&self.link, key).await;
        if replicas == 0 {
            let reply = self.run(command).await?;
            self.note(true, key, 0, 0);
            return Ok(Written {
                reply,
                confirmed: true,
            });
        }
        let wait_ms = self.wait.timeout.as_millis().max(1) as u64;
        let mut pipeline = redis::pipe();
        pipeline
            .add_command(command)
            .cmd("WAIT")
            .arg(replicas)
            .arg(wait_ms);
        let call = self.link.send(Request::Pipeline {
            pipeline: &pipeline,
            waits: true,
        });
        let values = tokio::time::timeout(self.timeout + self.wait.timeout, call)
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(report)?;
        let [reply, acks]: [Value; 2] = values.try_into().map_err(|_| StoreError::Unavailable)?;
        if let Value::ServerError(error) = &reply {
            return Err(report(RedisError::from(error.clone())));
        }
        let reply = T::from_redis_value(reply).map_err(|_| StoreError::Unavailable)?;
        let acks = i64::from_redis_value(acks).unwrap_or(0);
        let confirmed = acks >= i64::from(replicas);
        self.note(confirmed, key, replicas, acks);
        Ok(Written { reply, confirmed })
    }

    /// Keep the streak of unconfirmed writes, and log it when it starts and ends. Only a
    /// write confirmed on the primary whose writes went unconfirmed ends it (in a
    /// cluster, the other shards' writes say nothing about that one).
    fn note(&self, confirmed: bool, key: &str, replicas: u32, acks: i64) {
        let mut unconfirmed = self.unconfirmed.lock().expect("not poisoned");
        match (&*unconfirmed, confirmed) {
            (None, true) => {}
            (Some((_, failing)), true) if !self.replicas.same_shard(failing, key) => {}
            (Some(_), true) => {
                *unconfirmed = None;
                tracing::info!("redis writes confirmed by replicas again");
            }
            (None, false) => {
                *unconfirmed = Some((Instant::now(), key.to_owned()));
                tracing::error!(
                    replicas,
                    acks,
                    wait_ms = self.wait.timeout.as_millis() as u64,
                    "redis write not confirmed by its replicas in time (WAIT): released, request refused"
                );
            }
            (Some((since, _)), false) => *unconfirmed = Some((*since, key.to_owned())),
        }
    }

    /// One command, bounded by the deadline.
    async fn run<T: FromRedisValue>(&self, command: Cmd) -> Result<T, StoreError> {
        let call = self.link.send(Request::Command(&command));
        let mut values = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(report)?;
        let value = values.pop().ok_or(StoreError::Unavailable)?;
        T::from_redis_value(value).map_err(|error| report(error.into()))
    }
}

/// A key in the same cluster slot as `key`: its hash tag, or all of it as one.
fn probe_key(key: &str) -> String {
    if replicas::slot_of(key.as_bytes()) == replicas::slot_of(format!("{{{key}}}").as_bytes()) {
        format!("{{{key}}}:probe")
    } else {
        format!("{key}:probe")
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
    use crate::config::redis_url::Target;

    /// `<prefix>c:` and the id in lowercase hex, the key every version wrote: replicas
    /// of two versions side by side must record one consumption under one key.
    #[tokio::test]
    async fn a_consumption_is_keyed_by_its_id_in_hex() {
        let wait = Wait {
            replicas: WaitReplicas::Count(0),
            timeout: Duration::from_millis(10),
        };
        // Nothing connects until a command is sent.
        let store = RedisStore::new(
            "redis://127.0.0.1:1",
            "msg:",
            Duration::from_millis(10),
            wait,
        )
        .expect("a valid URL");
        let id = ConsumptionId(std::array::from_fn(|i| (i * 17) as u8));
        assert_eq!(
            store.consumption_key(id),
            "msg:c:00112233445566778899aabbccddeeff"
        );
    }

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
