//! The one store shared by every replica: where consumed single-use states and
//! revocations are recorded (and, as features arrive, idempotency records), in process
//! memory ([`memory`], moka) or in Redis ([`redis`]).
//!
//! Invariant: [`Store::consume`] records an id at most once for as long as it is asked to
//! remember it: exactly one of any number of concurrent consumptions of one id, on any
//! replica sharing the store, is [`Consumed::Fresh`]. A store that cannot answer says so
//! ([`StoreError`]); it never guesses "fresh".

pub mod memory;
pub mod redis;

use std::time::Duration;

/// What recording a consumption found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumed {
    /// First consumption: recorded now.
    Fresh,
    /// Recorded before: a replay.
    Replayed,
}

/// Why a store could not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("store unreachable or failed")]
    Unavailable,
    #[error("store did not answer in time")]
    Timeout,
    /// The memory store holds `memory_max_entries` live ids and will not forget one.
    #[error("store full")]
    Full,
}

/// Which store, for metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
}

impl StoreKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
        }
    }
}

/// The configured store.
pub enum Store {
    Memory(memory::MemoryStore),
    Redis(Box<redis::RedisStore>),
}

impl Store {
    /// The store `single_use.store` names (validated configuration).
    pub fn from_config(config: &crate::config::SingleUseConfig) -> Result<Self, &'static str> {
        Ok(match config.store {
            crate::config::SingleUseStore::Memory => {
                Store::Memory(memory::MemoryStore::new(config.memory_max_entries))
            }
            crate::config::SingleUseStore::Redis => Store::Redis(Box::new(redis::RedisStore::new(
                config
                    .redis_url
                    .as_deref()
                    .ok_or("single_use.redis_url is required with store = \"redis\"")?,
                &config.redis_key_prefix,
                Duration::from_millis(config.redis_timeout_ms),
            )?)),
        })
    }

    pub fn kind(&self) -> StoreKind {
        match self {
            Store::Memory(_) => StoreKind::Memory,
            Store::Redis(_) => StoreKind::Redis,
        }
    }

    /// Record `id` as consumed, remembered for `ttl`.
    pub async fn consume(&self, id: &str, ttl: Duration) -> Result<Consumed, StoreError> {
        match self {
            Store::Memory(store) => store.consume(id, ttl),
            Store::Redis(store) => store.consume(id, ttl).await,
        }
    }

    /// Forget a consumption (the request provably never reached the upstream).
    pub async fn release(&self, id: &str) -> Result<(), StoreError> {
        match self {
            Store::Memory(store) => {
                store.release(id);
                Ok(())
            }
            Store::Redis(store) => store.release(id).await,
        }
    }

    /// Record that tokens of the principal named `digest` minted before `not_before`
    /// (Unix seconds) are refused, for `keep`.
    pub async fn revoke(
        &self,
        digest: &str,
        not_before: f64,
        keep: Duration,
    ) -> Result<(), StoreError> {
        match self {
            Store::Memory(store) => {
                store.revoke(digest, not_before, keep);
                Ok(())
            }
            Store::Redis(store) => store.revoke(digest, not_before, keep).await,
        }
    }

    /// The latest revocation of the principal named `digest`, if one is in force.
    pub async fn revoked_since(&self, digest: &str) -> Result<Option<f64>, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.revoked_since(digest)),
            Store::Redis(store) => store.revoked_since(digest).await,
        }
    }

    /// Whether the store answers now (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(_) => Ok(()),
            Store::Redis(store) => store.ping().await,
        }
    }
}
