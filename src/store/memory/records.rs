//! What the memory store charges its idempotency records against: their bytes, and per
//! owner a count and a byte share, taken before an entry is written and given back when
//! moka removes or replaces it (see the invariant in [`super`]).

use super::StoreError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a record is charged beyond any headroom.
pub(super) fn record_weight(key: &str, value: &str) -> u64 {
    (key.len() + value.len()) as u64 + RECORD_OVERHEAD_BYTES
}

/// An idempotency record (or reservation) as the memory store keeps it.
#[derive(Clone)]
pub(super) struct StoredRecord {
    pub(super) value: Arc<str>,
    pub(super) deadline: Instant,
    /// Who it counts against ([`RecordBounds::per_owner`]).
    pub(super) owner: Arc<str>,
    /// The bytes it is charged ([`RecordBounds::max_bytes`]).
    pub(super) weight: u64,
}

/// What an entry costs beyond its key and value bytes: moka's entry (key and value
/// `Arc`s, the deadline, its access-order and timer-wheel nodes), the owner and the
/// allocator's share. `cargo bench --bench store` measured 1004 bytes resident per
/// record of a 32-byte key and a 307-byte value (665 beyond them): rounded up.
pub const RECORD_OVERHEAD_BYTES: u64 = 768;

/// The bounds of the idempotency records the memory store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBounds {
    /// Bytes charged for every record and reservation together (keys, values, the
    /// [`RECORD_OVERHEAD_BYTES`] of each, and for a reservation the largest answer it
    /// may become, so that a completed write always fits).
    pub max_bytes: u64,
    /// Records and reservations one owner (a [`crate::store::Owner`]) may hold.
    pub per_owner: usize,
    /// Bytes one owner's records and reservations may be charged together: its share of
    /// `max_bytes`, so one caller cannot spend the budget every caller's writes need.
    pub per_owner_bytes: u64,
}

impl Default for RecordBounds {
    fn default() -> Self {
        Self {
            max_bytes: 256 * 1024 * 1024,
            per_owner: 10_000,
            per_owner_bytes: 256 * 1024 * 1024,
        }
    }
}

/// What one owner holds now.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct OwnerHolding {
    records: usize,
    bytes: u64,
}

/// What the memory store charges its records against: bytes and per-owner counts and
/// bytes, taken before an entry is written and given back when moka removes it.
pub(super) struct Charges {
    pub(super) bounds: RecordBounds,
    pub(super) bytes: AtomicI64,
    pub(super) owners: Mutex<HashMap<Arc<str>, OwnerHolding>>,
}

impl Charges {
    /// Take `weight` bytes and, with `owner`, one of its records and `weight` of its
    /// bytes; `Err` when a bound would be passed (nothing is taken then): the store's
    /// budget ([`StoreError::Full`]) or the owner's share of records
    /// ([`StoreError::OwnerFull`]) or of bytes ([`StoreError::OwnerBytesFull`]).
    pub(super) fn take(&self, weight: u64, owner: Option<&Arc<str>>) -> Result<(), StoreError> {
        let before = self.bytes.fetch_add(weight as i64, Ordering::AcqRel);
        if before + weight as i64 > self.bounds.max_bytes as i64 {
            self.bytes.fetch_sub(weight as i64, Ordering::AcqRel);
            return Err(StoreError::Full);
        }
        if let Some(owner) = owner {
            let mut owners = self.owners.lock().expect("not poisoned");
            let held = owners.get(owner).copied().unwrap_or_default();
            let over = if held.records >= self.bounds.per_owner {
                Some(StoreError::OwnerFull)
            } else if held.bytes + weight > self.bounds.per_owner_bytes {
                Some(StoreError::OwnerBytesFull)
            } else {
                None
            };
            if let Some(over) = over {
                drop(owners);
                self.bytes.fetch_sub(weight as i64, Ordering::AcqRel);
                return Err(over);
            }
            let held = owners.entry(owner.clone()).or_default();
            held.records += 1;
            held.bytes += weight;
        }
        Ok(())
    }

    /// Charge `weight` bytes and one record of `owner` without a check.
    pub(super) fn charge(&self, weight: u64, owner: &Arc<str>) {
        self.bytes.fetch_add(weight as i64, Ordering::AcqRel);
        let mut owners = self.owners.lock().expect("not poisoned");
        let held = owners.entry(owner.clone()).or_default();
        held.records += 1;
        held.bytes += weight;
    }

    /// Give back what [`Charges::take`] took (`owner`: and its record and bytes).
    pub(super) fn give(&self, weight: u64, owner: Option<&Arc<str>>) {
        self.bytes.fetch_sub(weight as i64, Ordering::AcqRel);
        if let Some(owner) = owner {
            let mut owners = self.owners.lock().expect("not poisoned");
            if let Some(held) = owners.get_mut(owner) {
                held.records = held.records.saturating_sub(1);
                held.bytes = held.bytes.saturating_sub(weight);
                if held.records == 0 {
                    owners.remove(owner);
                }
            }
        }
    }

    #[cfg(test)]
    /// Bytes charged to `owner` now.
    pub(super) fn owner_bytes(&self, owner: &str) -> u64 {
        let owners = self.owners.lock().expect("not poisoned");
        owners.get(owner).map_or(0, |held| held.bytes)
    }
}
