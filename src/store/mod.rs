//! The one store shared by every replica: where consumed single-use states,
//! revocations and idempotency records are kept, in process memory ([`memory`], moka)
//! or in Redis ([`redis`]).
//!
//! Invariant: [`Store::consume`] records an id at most once for as long as it is asked to
//! remember it: exactly one of any number of concurrent consumptions of one id, on any
//! replica sharing the store, is [`Consumed::Fresh`]; likewise exactly one
//! [`Store::reserve_record`] of one key wins. A store that cannot answer says so
//! ([`StoreError`]); it never guesses "fresh". A full store ([`StoreError::Full`]: the
//! memory store at a bound, Redis out of memory) is told apart from one that cannot be
//! reached, so no failure policy ever lets a request through because a store is full;
//! what one caller may hold is charged to its [`Owner`]. A Redis write counts only once
//! the replicas `single_use.redis_wait_replicas` asks for confirmed it
//! ([`StoreError::Unconfirmed`] otherwise): an acknowledged write a failover loses would
//! reopen what it recorded.

pub(crate) mod memory;
pub(crate) mod redis;

use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The name a single-use consumption is recorded under, 16 bytes from which the token
/// cannot be rebuilt (the token layer computes it): in Redis a digest of the token's key
/// id and nonce, keyed by its hex, as every replica and version names it; in the memory
/// store, which no other process reads, the key id and nonce themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConsumptionId(pub [u8; 16]);

#[cfg(test)]
impl ConsumptionId {
    /// A test's id named by a short label: its bytes, zero-padded (distinct labels of up
    /// to 16 bytes are distinct ids).
    pub(crate) fn named(label: &str) -> Self {
        let mut bytes = [0; 16];
        bytes[..label.len()].copy_from_slice(label.as_bytes());
        ConsumptionId(bytes)
    }
}

/// The random value a consumption is recorded with: only its holder releases it (Redis
/// keeps it as the key's value; the memory store, one process, needs none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark(pub(crate) [u8; 16]);

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
    /// The memory store holds `memory_max_entries` live ids (or its idempotency
    /// records their byte budget) and will not forget one; or Redis refused a write
    /// for want of memory (`OOM`, under `maxmemory-policy noeviction`).
    #[error("store full")]
    Full,
    /// The caller holds its share of the store's entries (consumed ids, or records).
    #[error("caller's share of the store used up")]
    OwnerFull,
    /// The caller's records are charged their share of the store's bytes.
    #[error("caller's share of the store's bytes used up")]
    OwnerBytesFull,
    /// The primary applied the write but too few replicas confirmed it within
    /// `single_use.redis_wait_ms` (`WAIT`): a failover could lose it. What the write
    /// claimed has been given back where that is safe (see each method).
    #[error("no replica confirmed the write in time")]
    Unconfirmed,
}

/// Who a share of the store is charged to: the caller's principal when one is bound,
/// else its network address (an IPv6 client by its /64, what one host is routinely
/// given), as a digest, so the store holds neither.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    pub(crate) fn of(principal: Option<&str>, peer: Option<IpAddr>) -> Self {
        let mut hash = Sha256::new().chain_update(b"mcp-state-guard/owner/v1:");
        match (principal, peer) {
            (Some(principal), _) => {
                hash.update(b"p:");
                hash.update(principal.as_bytes());
            }
            (None, Some(IpAddr::V4(v4))) => {
                hash.update(b"4:");
                hash.update(v4.octets());
            }
            (None, Some(IpAddr::V6(v6))) => match v6.to_ipv4_mapped() {
                Some(v4) => {
                    hash.update(b"4:");
                    hash.update(v4.octets());
                }
                None => {
                    hash.update(b"6:");
                    hash.update(&v6.octets()[..8]);
                }
            },
            (None, None) => hash.update(b"-"),
        }
        Owner(Arc::from(crate::text::hex_lower(&hash.finalize()[..16])))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The owner a connection's last request was charged to, kept for its next: the
/// requests of one connection are one caller's as a rule, and naming an owner
/// ([`Owner::of`]) costs a SHA-256 digest. A request of other facts (another principal
/// behind a front proxy, another client it reports) is named anew, and its owner kept
/// in place of the last.
#[derive(Debug, Default)]
pub(crate) struct LastOwner(Mutex<Option<Named>>);

/// An owner and the facts it was named from.
#[derive(Debug)]
struct Named {
    principal: Option<Arc<str>>,
    peer: Option<IpAddr>,
    owner: Owner,
}

impl LastOwner {
    /// [`Owner::of`] `principal` and `peer`: the last owner when it was named from the
    /// same facts, else named now.
    pub(crate) fn of(&self, principal: Option<&Arc<str>>, peer: Option<IpAddr>) -> Owner {
        // Held for a comparison or a digest; a poisoned lock only held a finished name.
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(named) = last.as_ref()
            && named.peer == peer
            && named.principal.as_deref() == principal.map(|p| &**p)
        {
            return named.owner.clone();
        }
        let owner = Owner::of(principal.map(|p| &**p), peer);
        *last = Some(Named {
            principal: principal.cloned(),
            peer,
            owner: owner.clone(),
        });
        owner
    }
}

/// Which store, for metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
}

crate::registry::labels!(pub StoreKind {
    Memory => "memory",
    Redis => "redis",
});

/// The configured store.
pub enum Store {
    Memory(memory::MemoryStore),
    Redis(Box<redis::RedisStore>),
}

impl Store {
    /// The store `single_use.store` names (validated configuration).
    pub fn from_config(config: &crate::config::Config) -> Result<Self, &'static str> {
        let idempotency = &config.idempotency;
        let entries_per_owner = config.single_use.entries_share();
        let bytes_per_owner = config.idempotency_bytes_share();
        let config = &config.single_use;
        Ok(match config.store {
            crate::config::SingleUseStore::Memory => {
                Store::Memory(memory::MemoryStore::with_bounds(memory::Bounds {
                    max_entries: config.memory_max_entries,
                    entries_per_owner,
                    records: memory::RecordBounds {
                        max_bytes: idempotency.memory_max_bytes,
                        per_owner: idempotency.max_records_per_principal,
                        per_owner_bytes: bytes_per_owner,
                    },
                }))
            }
            crate::config::SingleUseStore::Redis => Store::Redis(Box::new(redis::RedisStore::new(
                config
                    .redis_url
                    .as_deref()
                    .ok_or("single_use.redis_url is required with store = \"redis\"")?,
                &config.redis_key_prefix,
                Duration::from_millis(config.redis_timeout_ms),
                redis::Wait {
                    replicas: config.redis_wait_replicas,
                    timeout: Duration::from_millis(config.redis_wait_ms),
                },
            )?)),
        })
    }

    pub(crate) fn kind(&self) -> StoreKind {
        match self {
            Store::Memory(_) => StoreKind::Memory,
            Store::Redis(_) => StoreKind::Redis,
        }
    }

    /// Record `id` as consumed by the holder of `mark` (a random value: only its
    /// holder releases it), remembered for `ttl`, held by `owner` (the memory store
    /// bounds what one owner holds; Redis is bounded by its own `maxmemory`). In Redis a
    /// fresh consumption no replica confirmed is released again and
    /// [`StoreError::Unconfirmed`]: the state stays spendable.
    pub(crate) async fn consume(
        &self,
        id: ConsumptionId,
        mark: Mark,
        ttl: Duration,
        owner: &Owner,
    ) -> Result<Consumed, StoreError> {
        match self {
            Store::Memory(store) => store.consume(id, ttl, owner.as_str()),
            Store::Redis(store) => store.consume(id, mark, ttl).await,
        }
    }

    /// Forget the consumption `mark` recorded (the request provably never reached the
    /// upstream); one recorded by anyone else is left alone.
    pub(crate) async fn release(&self, id: ConsumptionId, mark: Mark) -> Result<(), StoreError> {
        match self {
            Store::Memory(store) => {
                store.release(id);
                Ok(())
            }
            Store::Redis(store) => store.release(id, mark).await,
        }
    }

    /// Record that tokens of the principal named `digest` minted before `not_before`
    /// (Unix seconds) are refused, for `keep`. [`StoreError::Unconfirmed`]: recorded on
    /// the primary (it refuses there) but not confirmed; the caller must not report it
    /// done.
    pub(crate) async fn revoke(
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

    /// Whether a revocation may be in force: the memory store knows none is until it
    /// records one (so a check need not name the principal); Redis is shared, and asked.
    pub(crate) fn may_hold_revocations(&self) -> bool {
        match self {
            Store::Memory(store) => store.may_hold_revocations(),
            Store::Redis(_) => true,
        }
    }

    /// The latest revocation of the principal named `digest`, if one is in force.
    pub(crate) async fn revoked_since(&self, digest: &str) -> Result<Option<f64>, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.revoked_since(digest)),
            Store::Redis(store) => store.revoked_since(digest).await,
        }
    }

    /// Set the idempotency record `key` to `value` for `lease` unless it exists: `None`
    /// when set now (exactly one caller anywhere), else the value it holds; a
    /// reservation no replica confirmed is released again ([`StoreError::Unconfirmed`]). The memory
    /// store charges it to `owner` and for `headroom` more bytes (the largest answer it
    /// may become) and refuses past its bounds; Redis is bounded by its own `maxmemory`.
    pub(crate) async fn reserve_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
        owner: &Owner,
        headroom: u64,
    ) -> Result<Option<String>, StoreError> {
        match self {
            Store::Memory(store) => {
                store.reserve_record(key, value, lease, owner.as_str(), headroom)
            }
            Store::Redis(store) => store.reserve_record(key, value, lease).await,
        }
    }

    /// Replace the record `key` by `value` for `ttl` (or delete it, with `None`), only
    /// while it still holds `expected` (a lease that expired and was taken over by
    /// another caller is not touched; in Redis writing the same answer again succeeds).
    /// A new value no replica confirmed is [`StoreError::Unconfirmed`] (write it again);
    /// an unconfirmed delete is not an error (a lost release only delays).
    pub(crate) async fn swap_record(
        &self,
        key: &str,
        expected: &str,
        value: Option<&str>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.swap_record(key, expected, value, ttl)),
            Store::Redis(store) => store.swap_record(key, expected, value, ttl).await,
        }
    }

    /// Withdraw the reservation of `value` under `key` whose reply never came: remove it
    /// if it was made, and make sure it cannot be made later (Redis: a fence for `lease`,
    /// [`redis::RedisStore::withdraw_record`]; in memory a reservation is made or not
    /// before its call returns). Returns whether a reservation was removed.
    pub(crate) async fn withdraw_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.swap_record(key, value, None, lease)),
            Store::Redis(store) => store.withdraw_record(key, value, lease).await,
        }
    }

    /// Extend the record `key`'s lease to `lease` from now, only while it holds
    /// `expected` (its owner's reservation). Returns whether it did.
    pub(crate) async fn renew_record(
        &self,
        key: &str,
        expected: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.renew_record(key, expected, lease)),
            Store::Redis(store) => store.renew_record(key, expected, lease).await,
        }
    }

    /// How full the memory store is (Redis reports its own memory).
    pub(crate) fn usage(&self) -> Option<memory::Usage> {
        match self {
            Store::Memory(store) => Some(store.usage()),
            Store::Redis(_) => None,
        }
    }

    /// Whether the store answers now (readiness): for Redis also whether writes are
    /// being confirmed by replicas again after confirmations kept failing.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(_) => Ok(()),
            Store::Redis(store) => store.ping().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether two owners are the one value a memo holds (not only equal names).
    fn same_value(a: &Owner, b: &Owner) -> bool {
        std::ptr::eq(a.as_str(), b.as_str())
    }

    #[test]
    fn a_connection_charges_each_request_to_its_own_callers_owner() {
        let last = LastOwner::default();
        let alice: Arc<str> = Arc::from("alice");
        let bob: Arc<str> = Arc::from("bob");
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        // Every answer is the owner those facts name, in any order of callers.
        let asked = [
            (Some(&alice), Some(v4)),
            (Some(&alice), Some(v4)),
            (Some(&bob), Some(v4)),
            (Some(&alice), Some(v4)),
            (None, Some(v4)),
            (None, Some(other)),
            (None, Some(v4)),
            (None, None),
            (Some(&bob), None),
        ];
        for (principal, peer) in asked {
            assert_eq!(
                last.of(principal, peer),
                Owner::of(principal.map(|p| &**p), peer),
                "{principal:?} from {peer:?}"
            );
        }
        // The same principal under another `Arc` is the same caller.
        let again: Arc<str> = Arc::from("bob");
        assert_eq!(last.of(Some(&again), None), Owner::of(Some("bob"), None));
    }

    #[test]
    fn the_same_callers_next_request_is_not_named_again() {
        let last = LastOwner::default();
        let alice: Arc<str> = Arc::from("alice");
        let peer = Some("2001:db8::1".parse().unwrap());
        let first = last.of(Some(&alice), peer);
        assert!(same_value(&first, &last.of(Some(&alice), peer)));
        // Another caller replaces it: named anew, and so is the first caller after it.
        let bob: Arc<str> = Arc::from("bob");
        let other = last.of(Some(&bob), peer);
        assert_ne!(other, first);
        let named_again = last.of(Some(&alice), peer);
        assert_eq!(named_again, first);
        assert!(!same_value(&named_again, &first));
    }
}
