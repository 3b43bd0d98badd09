//! The embedded store: consumed ids (a sharded map of their own, [`ids`]), revocations
//! and idempotency records (moka) in process memory, for one replica.
//!
//! Invariant: an id or an idempotency record is never forgotten before its time to live
//! ends. moka would evict entries to stay under a capacity, so the store keeps no moka
//! capacity at all (and the ids' own map never evicts) and counts itself: at
//! `max_entries` live ids it refuses new consumptions ([`StoreError::Full`]) instead of
//! evicting one whose token could then be replayed, and one owner (a
//! [`crate::store::Owner`]) holds at most its share of them ([`Bounds::entries_per_owner`],
//! past it [`StoreError::OwnerFull`]), so no caller can fill the store for every other; records are charged their bytes
//! ([`RecordBounds::max_bytes`], a reservation its largest answer ahead) and counted and
//! charged per owner ([`RecordBounds::per_owner`], [`RecordBounds::per_owner_bytes`]),
//! and a reservation past any bound is refused ([`StoreError::Full`],
//! [`StoreError::OwnerFull`]) instead of evicting a record whose write could then be
//! applied twice. A charge is taken before an entry is written and given back when moka
//! removes or replaces it.

use super::{Consumed, ConsumptionId, StoreError};
use moka::Expiry;
use moka::sync::Cache;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The hasher of the consumed ids and of their owners' counts (foldhash, seeded per
/// process): the ids are random token ids, the owners authenticated principals.
type Fast = foldhash::fast::RandomState;

mod ids;
mod owners;
mod records;
use ids::ConsumedIds;
use owners::OwnerId;
pub use records::RECORD_OVERHEAD_BYTES;
pub use records::RecordBounds;
use records::{Charges, StoredRecord, record_weight};

/// Each entry expires at the deadline stored in it.
struct AtDeadline;

/// A value that knows when it expires.
trait Deadline {
    fn deadline(&self) -> Instant;
}

impl Deadline for Instant {
    fn deadline(&self) -> Instant {
        *self
    }
}

impl Deadline for (f64, Instant) {
    fn deadline(&self) -> Instant {
        self.1
    }
}

impl Deadline for StoredRecord {
    fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl<V: Deadline> Expiry<Arc<str>, V> for AtDeadline {
    fn expire_after_create(
        &self,
        _key: &Arc<str>,
        value: &V,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(value.deadline().saturating_duration_since(created_at))
    }

    fn expire_after_update(
        &self,
        _key: &Arc<str>,
        value: &V,
        updated_at: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.deadline().saturating_duration_since(updated_at))
    }
}

/// The bounds of the embedded store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Consumed ids held at once (`single_use.memory_max_entries`).
    pub(crate) max_entries: usize,
    /// Consumed ids one owner may hold (`single_use.max_entries_per_principal`).
    pub(crate) entries_per_owner: usize,
    pub(crate) records: RecordBounds,
}

/// How full the embedded store is (for the metrics and `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) entries: usize,
    pub(crate) max_entries: usize,
    pub(crate) record_bytes: u64,
    pub(crate) max_record_bytes: u64,
}

impl Usage {
    /// Whether a bound is reached: new single-use retries or idempotent calls of callers
    /// within their share are refused until something expires.
    pub(crate) fn full(&self) -> Vec<&'static str> {
        let mut full = Vec::new();
        if self.entries >= self.max_entries {
            full.push("single_use entries");
        }
        // Full for any write: less than a small record's worth is left.
        if self.record_bytes + RECORD_OVERHEAD_BYTES >= self.max_record_bytes {
            full.push("idempotency bytes");
        }
        full
    }
}

pub struct MemoryStore {
    /// Consumed ids, counted, and their owners' shares ([`ids`]).
    ids: ConsumedIds,
    /// Principal digest → (not before, Unix seconds; kept until the deadline).
    revocations: Cache<Arc<str>, (f64, Instant)>,
    /// Whether a revocation was ever recorded here: until one is, the revocation check
    /// (`policy::revocation`) looks nothing up (nearly every process never records one).
    revoked_any: AtomicBool,
    /// Idempotency records: key → value, deadline, owner and charge. Bounded by
    /// [`RecordBounds`], counted by the store itself (moka has no capacity here): a
    /// full store refuses new reservations, it never evicts a record whose write could
    /// then be applied twice.
    records: Cache<Arc<str>, StoredRecord>,
    charges: Arc<Charges>,
    max_entries: usize,
    entries_per_owner: usize,
}

impl MemoryStore {
    #[cfg(test)]
    pub(crate) fn new(max_entries: usize) -> Self {
        Self::with_record_bounds(max_entries, RecordBounds::default())
    }

    /// A store of at most `max_entries` consumed ids (no share per owner) and
    /// idempotency records within `bounds`.
    pub fn with_record_bounds(max_entries: usize, bounds: RecordBounds) -> Self {
        Self::with_bounds(Bounds {
            max_entries,
            entries_per_owner: max_entries,
            records: bounds,
        })
    }

    /// A store within `bounds`.
    pub(crate) fn with_bounds(bounds: Bounds) -> Self {
        let Bounds {
            max_entries,
            entries_per_owner,
            records: bounds,
        } = bounds;
        let charges = Arc::new(Charges {
            bounds,
            bytes: AtomicI64::new(0),
            owners: Mutex::new(HashMap::new()),
        });
        let given = charges.clone();
        let records = Cache::builder()
            .expire_after(AtDeadline)
            .eviction_listener(move |_key, record: StoredRecord, _cause| {
                // Every value that leaves gives its charge back, a replaced one too (an
                // expired reservation taken over by a new one is "replaced" as well):
                // whatever replaces a value was charged when it was put.
                given.give(record.weight, Some(&record.owner));
            })
            .build();
        Self {
            ids: ConsumedIds::new(),
            revocations: Cache::builder().expire_after(AtDeadline).build(),
            revoked_any: AtomicBool::new(false),
            records,
            charges,
            max_entries,
            entries_per_owner,
        }
    }

    pub(crate) fn revoke(&self, digest: &str, not_before: f64, keep: Duration) {
        let deadline = Instant::now() + keep;
        // Set before the record is written: a check that reads it unset would not have
        // found the record either.
        self.revoked_any.store(true, Ordering::Release);
        // A later revocation wins; an earlier one never shortens a record in force.
        self.revocations
            .entry(Arc::from(digest))
            .and_upsert_with(|existing| match existing {
                Some(entry) if entry.value().0 >= not_before => *entry.value(),
                _ => (not_before, deadline),
            });
    }

    pub(crate) fn revoked_since(&self, digest: &str) -> Option<f64> {
        self.revocations
            .get(digest)
            .map(|(not_before, _)| not_before)
    }

    /// Whether a revocation may be in force: `false` until the first is recorded.
    pub(crate) fn may_hold_revocations(&self) -> bool {
        self.revoked_any.load(Ordering::Acquire)
    }

    /// Record `id` for `ttl`, counted against `owner`'s share.
    pub fn consume(
        &self,
        id: ConsumptionId,
        ttl: Duration,
        owner: &str,
    ) -> Result<Consumed, StoreError> {
        let now = Instant::now();
        // The owner's share is taken before the id is written, and given back if the id
        // turns out to be there already (a replay, or a concurrent consumption won).
        let owner = match self.take_share(owner) {
            Ok(owner) => owner,
            Err(_) => {
                // A replay is told as one, full store or not.
                if self.ids.contains(id, now) {
                    return Ok(Consumed::Replayed);
                }
                // Expired ids leave the counts a few at a time: all of them, then ask again.
                self.ids.sweep_all(now);
                self.take_share(owner)?
            }
        };
        if self.ids.insert(id, now + ttl, owner, now) {
            Ok(Consumed::Fresh)
        } else {
            self.ids.give_back(owner);
            Ok(Consumed::Replayed)
        }
    }

    /// One more id for `owner`, when the store and the owner's share have room.
    fn take_share(&self, owner: &str) -> Result<OwnerId, StoreError> {
        if self.ids.live() >= self.max_entries {
            return Err(StoreError::Full);
        }
        self.ids.take_share(owner, self.entries_per_owner)
    }

    /// Consumed ids `owner` holds now.
    #[cfg(test)]
    pub(crate) fn owner_entries(&self, owner: &str) -> usize {
        self.ids.held_by(owner)
    }

    /// Bytes `owner`'s idempotency records are charged now.
    #[cfg(test)]
    pub(crate) fn owner_record_bytes(&self, owner: &str) -> u64 {
        self.charges.owner_bytes(owner)
    }

    /// How full the store is now.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            entries: self.len(),
            max_entries: self.max_entries,
            record_bytes: self.record_bytes(),
            max_record_bytes: self.charges.bounds.max_bytes,
        }
    }

    /// Set `key` to `value` for `lease` unless it holds something: `None` when set now,
    /// else what it holds. One atomic compute per key. The reservation is charged to
    /// `owner` and for its bytes plus `headroom` (the largest answer it may become);
    /// past a bound it is refused ([`StoreError::Full`], [`StoreError::OwnerFull`]).
    pub fn reserve_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
        owner: &str,
        headroom: u64,
    ) -> Result<Option<String>, StoreError> {
        let owner: Arc<str> = Arc::from(owner);
        let weight = record_weight(key, value) + headroom;
        if let Err(full) = self.charges.take(weight, Some(&owner)) {
            // Expired records leave the count only when moka runs its maintenance.
            self.records.run_pending_tasks();
            if let Some(held) = self.records.get(key) {
                // A repeat is answered whatever the bounds: it adds nothing.
                return Ok(Some(held.value.to_string()));
            }
            self.charges.take(weight, Some(&owner)).map_err(|_| full)?;
        }
        let record = StoredRecord {
            value: Arc::from(value),
            deadline: Instant::now() + lease,
            owner: owner.clone(),
            weight,
        };
        let result =
            self.records
                .entry(Arc::from(key))
                .and_compute_with(|existing| match existing {
                    Some(_) => moka::ops::compute::Op::Nop,
                    None => moka::ops::compute::Op::Put(record),
                });
        Ok(match result {
            moka::ops::compute::CompResult::Unchanged(entry) => {
                self.charges.give(weight, Some(&owner));
                Some(entry.value().value.to_string())
            }
            _ => None,
        })
    }

    /// Replace `key`'s value by `value` for `ttl`, or remove it (`None`), only while it
    /// still holds `expected`: an expired lease taken over by another caller is left
    /// alone. Returns whether it still held `expected` (and was replaced or removed).
    /// A record is charged its own bytes (less than the reservation it replaces).
    pub fn swap_record(
        &self,
        key: &str,
        expected: &str,
        value: Option<&str>,
        ttl: Duration,
    ) -> bool {
        self.replace_if(key, expected, |held| {
            value.map(|value| {
                let weight = record_weight(key, value);
                StoredRecord {
                    value: Arc::from(value),
                    deadline: Instant::now() + ttl,
                    owner: held.owner.clone(),
                    weight,
                }
            })
        })
    }

    /// Extend `key`'s lease to `lease` from now, only while it holds `expected`.
    pub(crate) fn renew_record(&self, key: &str, expected: &str, lease: Duration) -> bool {
        self.replace_if(key, expected, |held| {
            Some(StoredRecord {
                deadline: Instant::now() + lease,
                ..held.clone()
            })
        })
    }

    /// While `key` holds `expected`: put what `next` makes of it (charged for its
    /// weight), or remove it (`None`). Returns whether it held `expected`.
    fn replace_if(
        &self,
        key: &str,
        expected: &str,
        next: impl FnOnce(&StoredRecord) -> Option<StoredRecord>,
    ) -> bool {
        let result =
            self.records
                .entry(Arc::from(key))
                .and_compute_with(|existing| match existing {
                    Some(entry) if &*entry.value().value == expected => match next(entry.value()) {
                        Some(record) => {
                            // Charged now, whatever the bounds (it replaces a value
                            // charged as much or more, which gives its charge back as
                            // it leaves).
                            self.charges.charge(record.weight, &record.owner);
                            moka::ops::compute::Op::Put(record)
                        }
                        None => moka::ops::compute::Op::Remove,
                    },
                    _ => moka::ops::compute::Op::Nop,
                });
        !matches!(
            result,
            moka::ops::compute::CompResult::Unchanged(_)
                | moka::ops::compute::CompResult::StillNone(_)
        )
    }

    /// Bytes charged to idempotency records now (for tests and the measurement).
    pub fn record_bytes(&self) -> u64 {
        self.records.run_pending_tasks();
        self.charges.bytes.load(Ordering::Acquire).max(0) as u64
    }

    pub fn release(&self, id: ConsumptionId) {
        self.ids.release(id);
    }

    /// Live ids (for tests and the sizing measurement), expired ones swept first.
    pub fn len(&self) -> usize {
        self.ids.sweep_all(Instant::now());
        self.ids.live()
    }

    /// Whether no id is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
