//! The embedded store: consumed ids, revocations and idempotency records in process
//! memory (moka), for one replica.
//!
//! Invariant: an id or an idempotency record is never forgotten before its time to live
//! ends. moka would evict entries to stay under a capacity, so the store keeps no moka
//! capacity at all and counts itself: at `max_entries` live ids it refuses new
//! consumptions ([`StoreError::Full`]) instead of evicting one whose token could then be
//! replayed, and one owner (a [`crate::store::Owner`]) holds at most its share of them
//! ([`Bounds::entries_per_owner`], past it [`StoreError::OwnerFull`]), so no caller can
//! fill the store for every other; records are charged their bytes
//! ([`RecordBounds::max_bytes`], a reservation its largest answer ahead) and counted and
//! charged per owner ([`RecordBounds::per_owner`], [`RecordBounds::per_owner_bytes`]),
//! and a reservation past any bound is refused ([`StoreError::Full`],
//! [`StoreError::OwnerFull`]) instead of evicting a record whose write could then be
//! applied twice. A charge is taken before an entry is written and given back when moka
//! removes or replaces it.

use super::{Consumed, StoreError};
use moka::Expiry;
use moka::notification::RemovalCause;
use moka::sync::Cache;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod records;
use records::{Charges, Record, record_weight};
pub use records::{RECORD_OVERHEAD_BYTES, RecordBounds};

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

/// A consumed id: until when it is remembered, and whose share it counts against.
#[derive(Clone)]
struct Spent {
    deadline: Instant,
    owner: Arc<str>,
}

impl Deadline for Spent {
    fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Deadline for Record {
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
pub struct Bounds {
    /// Consumed ids held at once (`single_use.memory_max_entries`).
    pub max_entries: usize,
    /// Consumed ids one owner may hold (`single_use.max_entries_per_principal`).
    pub entries_per_owner: usize,
    pub records: RecordBounds,
}

/// How full the embedded store is (for the metrics and `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub entries: usize,
    pub max_entries: usize,
    pub record_bytes: u64,
    pub max_record_bytes: u64,
}

impl Usage {
    /// Whether a bound is reached: new single-use retries or idempotent calls of callers
    /// within their share are refused until something expires.
    pub fn full(&self) -> Vec<&'static str> {
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
    ids: Cache<Arc<str>, Spent>,
    /// Principal digest → (not before, Unix seconds; kept until the deadline).
    revocations: Cache<Arc<str>, (f64, Instant)>,
    /// Idempotency records: key → value, deadline, owner and charge. Bounded by
    /// [`RecordBounds`], counted by the store itself (moka has no capacity here): a
    /// full store refuses new reservations, it never evicts a record whose write could
    /// then be applied twice.
    records: Cache<Arc<str>, Record>,
    charges: Arc<Charges>,
    /// Live ids (inserted and not yet removed by expiry or release).
    live: Arc<AtomicUsize>,
    /// Live ids per owner (an owner leaves the map with its last id).
    id_owners: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    max_entries: usize,
    entries_per_owner: usize,
}

impl MemoryStore {
    pub fn new(max_entries: usize) -> Self {
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
    pub fn with_bounds(bounds: Bounds) -> Self {
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
            .eviction_listener(move |_key, record: Record, _cause| {
                // Every value that leaves gives its charge back, a replaced one too (an
                // expired reservation taken over by a new one is "replaced" as well):
                // whatever replaces a value was charged when it was put.
                given.give(record.weight, Some(&record.owner));
            })
            .build();
        let live = Arc::new(AtomicUsize::new(0));
        let removed = live.clone();
        let id_owners: Arc<Mutex<HashMap<Arc<str>, usize>>> = Arc::default();
        let owners = id_owners.clone();
        let ids = Cache::builder()
            .expire_after(AtDeadline)
            .eviction_listener(move |_key, spent: Spent, cause: RemovalCause| {
                // Every removal of an inserted id: expiry, release, or (never, without a
                // capacity) size eviction. Replacement never happens: ids are only inserted.
                if cause != RemovalCause::Replaced {
                    removed.fetch_sub(1, Ordering::AcqRel);
                    give_id(&owners, &spent.owner);
                }
            })
            .build();
        Self {
            ids,
            revocations: Cache::builder().expire_after(AtDeadline).build(),
            records,
            charges,
            live,
            id_owners,
            max_entries,
            entries_per_owner,
        }
    }

    pub fn revoke(&self, digest: &str, not_before: f64, keep: Duration) {
        let deadline = Instant::now() + keep;
        // A later revocation wins; an earlier one never shortens a record in force.
        self.revocations
            .entry(Arc::from(digest))
            .and_upsert_with(|existing| match existing {
                Some(entry) if entry.value().0 >= not_before => *entry.value(),
                _ => (not_before, deadline),
            });
    }

    pub fn revoked_since(&self, digest: &str) -> Option<f64> {
        self.revocations
            .get(digest)
            .map(|(not_before, _)| not_before)
    }

    /// Record `id` for `ttl`, counted against `owner`'s share.
    pub fn consume(&self, id: &str, ttl: Duration, owner: &str) -> Result<Consumed, StoreError> {
        if self.ids.contains_key(id) {
            return Ok(Consumed::Replayed);
        }
        if self.live.load(Ordering::Acquire) >= self.max_entries
            || self.owner_entries(owner) >= self.entries_per_owner
        {
            // Expired ids leave the counts only when moka runs its maintenance.
            self.ids.run_pending_tasks();
            if self.live.load(Ordering::Acquire) >= self.max_entries {
                return Err(StoreError::Full);
            }
        }
        // The owner's share is taken before the id is written, and given back if the id
        // turns out to be there already (a concurrent consumption won). Its name is
        // kept once, shared by its ids.
        let owner: Arc<str> = {
            let mut owners = self.id_owners.lock().expect("not poisoned");
            let owner = match owners.get_key_value(owner) {
                Some((_, held)) if *held >= self.entries_per_owner => {
                    return Err(StoreError::OwnerFull);
                }
                Some((name, _)) => name.clone(),
                None => Arc::from(owner),
            };
            *owners.entry(owner.clone()).or_insert(0) += 1;
            owner
        };
        // `or_insert_with`, not `or_insert`: only the former coalesces concurrent inserts
        // of one key into a single fresh entry (with `or_insert`, two of sixteen racing
        // threads were seen to both get a fresh entry, 27 runs in 200).
        let entry = self.ids.entry(Arc::from(id)).or_insert_with(|| Spent {
            deadline: Instant::now() + ttl,
            owner: owner.clone(),
        });
        if entry.is_fresh() {
            self.live.fetch_add(1, Ordering::AcqRel);
            Ok(Consumed::Fresh)
        } else {
            give_id(&self.id_owners, &owner);
            Ok(Consumed::Replayed)
        }
    }

    /// Consumed ids `owner` holds now.
    pub fn owner_entries(&self, owner: &str) -> usize {
        let owners = self.id_owners.lock().expect("not poisoned");
        owners.get(owner).copied().unwrap_or(0)
    }

    /// Bytes `owner`'s idempotency records are charged now.
    pub fn owner_record_bytes(&self, owner: &str) -> u64 {
        self.charges.owner_bytes(owner)
    }

    /// How full the store is now.
    pub fn usage(&self) -> Usage {
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
        let record = Record {
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
                Record {
                    value: Arc::from(value),
                    deadline: Instant::now() + ttl,
                    owner: held.owner.clone(),
                    weight,
                }
            })
        })
    }

    /// Extend `key`'s lease to `lease` from now, only while it holds `expected`.
    pub fn renew_record(&self, key: &str, expected: &str, lease: Duration) -> bool {
        self.replace_if(key, expected, |held| {
            Some(Record {
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
        next: impl FnOnce(&Record) -> Option<Record>,
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

    pub fn release(&self, id: &str) {
        self.ids.invalidate(id);
    }

    /// Live ids (for tests and the sizing measurement).
    pub fn len(&self) -> usize {
        self.ids.run_pending_tasks();
        self.live.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Give back one id of `owner`'s share.
fn give_id(owners: &Mutex<HashMap<Arc<str>, usize>>, owner: &Arc<str>) {
    let mut owners = owners.lock().expect("not poisoned");
    if let Some(held) = owners.get_mut(owner) {
        *held = held.saturating_sub(1);
        if *held == 0 {
            owners.remove(owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserve(
        store: &MemoryStore,
        key: &str,
        value: &str,
        lease: Duration,
    ) -> Result<Option<String>, StoreError> {
        store.reserve_record(key, value, lease, "owner", 0)
    }

    #[test]
    fn an_id_is_consumed_once_until_it_expires() {
        let store = MemoryStore::new(10);
        let minute = Duration::from_secs(60);
        assert_eq!(store.consume("a", minute, "o"), Ok(Consumed::Fresh));
        assert_eq!(store.consume("a", minute, "o"), Ok(Consumed::Replayed));
        assert_eq!(store.consume("b", minute, "o"), Ok(Consumed::Fresh));
        store.release("a");
        assert_eq!(store.consume("a", minute, "o"), Ok(Consumed::Fresh));
        assert_eq!(
            store.consume("c", Duration::from_millis(30), "o"),
            Ok(Consumed::Fresh)
        );
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            store.consume("c", minute, "o"),
            Ok(Consumed::Fresh),
            "expired"
        );
    }

    #[test]
    fn a_full_store_refuses_instead_of_forgetting() {
        let store = MemoryStore::new(2);
        let minute = Duration::from_secs(60);
        store.consume("a", minute, "o").unwrap();
        store.consume("b", Duration::from_millis(30), "o").unwrap();
        assert_eq!(store.consume("c", minute, "o"), Err(StoreError::Full));
        // What it holds is still refused, not evicted.
        assert_eq!(store.consume("a", minute, "o"), Ok(Consumed::Replayed));
        // moka removes expired entries on its timer wheel (about a second's granularity):
        // until then the store stays full, erring on the side of refusing.
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.consume("c", minute, "o") == Err(StoreError::Full) {
            assert!(Instant::now() < deadline, "b never left the store");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            store.consume("c", minute, "o"),
            Ok(Consumed::Replayed),
            "c was recorded"
        );
        assert_eq!(store.len(), 2);
        assert_eq!(store.consume("d", minute, "o"), Err(StoreError::Full));
    }

    /// Finding 4 of the second review: one caller filled the store for everyone. Each
    /// owner now holds at most its share; past it only that owner is refused, and what
    /// it holds is neither evicted nor forgotten.
    #[test]
    fn one_owner_cannot_fill_the_consumed_ids_of_every_other() {
        let store = MemoryStore::with_bounds(Bounds {
            max_entries: 4,
            entries_per_owner: 2,
            records: RecordBounds::default(),
        });
        let minute = Duration::from_secs(60);
        assert_eq!(store.consume("a1", minute, "mallory"), Ok(Consumed::Fresh));
        assert_eq!(store.consume("a2", minute, "mallory"), Ok(Consumed::Fresh));
        assert_eq!(
            store.consume("a3", minute, "mallory"),
            Err(StoreError::OwnerFull)
        );
        assert_eq!(store.owner_entries("mallory"), 2);
        // A replay of her own is still a replay, not a quota refusal.
        assert_eq!(
            store.consume("a1", minute, "mallory"),
            Ok(Consumed::Replayed)
        );
        assert_eq!(store.consume("b1", minute, "alice"), Ok(Consumed::Fresh));
        assert_eq!(store.consume("c1", minute, "bob"), Ok(Consumed::Fresh));
        // Four owners' worth: the store itself is full now, for a newcomer too.
        assert_eq!(store.consume("d1", minute, "carol"), Err(StoreError::Full));
        // A release gives the share back.
        store.release("a2");
        store.ids.run_pending_tasks();
        assert_eq!(store.owner_entries("mallory"), 1);
        assert_eq!(store.consume("a3", minute, "mallory"), Ok(Consumed::Fresh));
        assert_eq!(store.usage().entries, 4);
        assert_eq!(store.usage().full(), ["single_use entries"]);
    }

    #[test]
    fn an_expired_id_gives_its_owner_share_back() {
        let store = MemoryStore::with_bounds(Bounds {
            max_entries: 10,
            entries_per_owner: 1,
            records: RecordBounds::default(),
        });
        store
            .consume("a", Duration::from_millis(30), "mallory")
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.consume("b", Duration::from_secs(60), "mallory") == Err(StoreError::OwnerFull) {
            assert!(Instant::now() < deadline, "the expired id still counts");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(store.owner_entries("mallory"), 1);
    }

    /// Finding 5: about 300 large recorded answers of one caller made every other
    /// caller's idempotent writes answer 503. Each owner is charged its bytes against
    /// its own share as well as the store's budget.
    #[test]
    fn one_owner_cannot_spend_the_record_budget_of_every_other() {
        let minute = Duration::from_secs(60);
        let weight = record_weight("k1", "p") + 1000;
        let store = MemoryStore::with_record_bounds(
            10,
            RecordBounds {
                max_bytes: 4 * weight + record_weight("k1", "done"),
                per_owner: 100,
                per_owner_bytes: 2 * weight + record_weight("k1", "done"),
            },
        );
        for key in ["k1", "k2"] {
            assert_eq!(
                store.reserve_record(key, "p", minute, "mallory", 1000),
                Ok(None)
            );
        }
        assert_eq!(
            store.reserve_record("k3", "p", minute, "mallory", 1000),
            Err(StoreError::OwnerBytesFull)
        );
        assert_eq!(store.owner_record_bytes("mallory"), 2 * weight);
        for (key, owner) in [("k4", "alice"), ("k5", "bob")] {
            assert_eq!(
                store.reserve_record(key, "p", minute, owner, 1000),
                Ok(None)
            );
        }
        // Finishing a record gives the reservation's headroom back to its owner.
        assert!(store.swap_record("k1", "p", Some("done"), minute));
        assert_eq!(
            store.owner_record_bytes("mallory"),
            weight + record_weight("k1", "done")
        );
        assert_eq!(
            store.reserve_record("k3", "p", minute, "mallory", 1000),
            Ok(None)
        );
    }

    #[test]
    fn revocations_keep_the_latest_time_until_their_deadline() {
        let store = MemoryStore::new(1);
        assert_eq!(store.revoked_since("p"), None);
        store.revoke("p", 100.0, Duration::from_secs(60));
        store.revoke("p", 50.0, Duration::from_secs(60));
        assert_eq!(store.revoked_since("p"), Some(100.0));
        store.revoke("p", 200.0, Duration::from_millis(10));
        assert_eq!(store.revoked_since("p"), Some(200.0));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(store.revoked_since("p"), None, "expired");
        // Revocations do not count against the consumption bound.
        assert_eq!(
            store.consume("a", Duration::from_secs(60), "o"),
            Ok(Consumed::Fresh)
        );
    }

    #[test]
    fn records_are_reserved_once_and_swapped_only_from_what_was_expected() {
        let store = MemoryStore::new(10);
        let minute = Duration::from_secs(60);
        assert_eq!(reserve(&store, "k", "p1", minute), Ok(None));
        assert_eq!(reserve(&store, "k", "p2", minute), Ok(Some("p1".into())));
        store.swap_record("k", "p2", Some("done"), minute);
        assert_eq!(reserve(&store, "k", "p3", minute), Ok(Some("p1".into())));
        store.swap_record("k", "p1", Some("done"), minute);
        assert_eq!(reserve(&store, "k", "p3", minute), Ok(Some("done".into())));
        store.swap_record("k", "done", None, minute);
        assert_eq!(reserve(&store, "k", "p4", minute), Ok(None));
        assert_eq!(
            reserve(&store, "short", "p", Duration::from_millis(20)),
            Ok(None)
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(reserve(&store, "short", "q", minute), Ok(None), "expired");
        let wins: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|i| {
                    let store = &store;
                    scope
                        .spawn(move || reserve(store, "race", &format!("p{i}"), minute) == Ok(None))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap() as usize)
                .sum()
        });
        assert_eq!(wins, 1);
    }

    #[test]
    fn a_record_is_swapped_only_while_it_holds_the_reservation() {
        let store = MemoryStore::new(10);
        let minute = Duration::from_secs(60);
        assert_eq!(reserve(&store, "k", "p:1", minute), Ok(None));
        assert_eq!(
            reserve(&store, "k", "p:2", minute),
            Ok(Some("p:1".to_owned()))
        );
        assert!(
            !store.swap_record("k", "p:2", Some("d:x"), minute),
            "not ours"
        );
        assert!(store.swap_record("k", "p:1", Some("d:1"), minute));
        // The first reservation's lease ended and another caller took the key.
        assert!(!store.swap_record("k", "p:1", None, minute), "lease lost");
        assert!(store.swap_record("k", "d:1", None, minute));
        assert!(!store.swap_record("missing", "p:1", None, minute));
    }

    #[test]
    fn records_are_bounded_in_bytes_and_per_owner_without_evicting_one() {
        let minute = Duration::from_secs(60);
        let store = MemoryStore::with_record_bounds(
            10,
            RecordBounds {
                max_bytes: 3 * (record_weight("k1", "p") + 1000) + record_weight("k1", "done"),
                per_owner: 2,
                per_owner_bytes: u64::MAX,
            },
        );
        let weight = record_weight("k1", "p") + 1000;
        assert_eq!(
            store.reserve_record("k1", "p", minute, "alice", 1000),
            Ok(None)
        );
        assert_eq!(
            store.reserve_record("k2", "p", minute, "alice", 1000),
            Ok(None)
        );
        assert_eq!(store.record_bytes(), 2 * weight);
        // Alice's third is refused, not one of hers evicted; a repeat is still answered.
        assert_eq!(
            store.reserve_record("k3", "p", minute, "alice", 1000),
            Err(StoreError::OwnerFull)
        );
        assert_eq!(
            store.reserve_record("k1", "q", minute, "alice", 1000),
            Ok(Some("p".into()))
        );
        assert_eq!(
            store.reserve_record("k3", "p", minute, "bob", 1000),
            Ok(None)
        );
        // The byte budget is spent: bob's second is refused.
        assert_eq!(
            store.reserve_record("k4", "p", minute, "bob", 1000),
            Err(StoreError::Full)
        );
        assert_eq!(store.record_bytes(), 3 * weight);
        // A reservation that becomes a small record gives its headroom back.
        assert!(store.swap_record("k1", "p", Some("done"), minute));
        assert_eq!(
            store.record_bytes(),
            2 * weight + record_weight("k1", "done")
        );
        assert_eq!(
            store.reserve_record("k4", "p", minute, "bob", 1000),
            Ok(None)
        );
        // Renewing charges nothing more; releasing gives everything back, owner counts too.
        assert!(store.renew_record("k4", "p", minute));
        assert!(!store.renew_record("k4", "other", minute));
        for (key, value) in [("k1", "done"), ("k2", "p"), ("k3", "p"), ("k4", "p")] {
            assert!(store.swap_record(key, value, None, minute), "{key}");
        }
        assert_eq!(store.record_bytes(), 0);
        assert_eq!(
            store.reserve_record("k5", "p", minute, "alice", 0),
            Ok(None)
        );
        assert_eq!(
            store.reserve_record("k6", "p", minute, "alice", 0),
            Ok(None)
        );
        assert_eq!(
            store.reserve_record("k7", "p", minute, "alice", 0),
            Err(StoreError::OwnerFull)
        );
    }

    #[test]
    fn an_expired_record_gives_its_charge_back() {
        let store = MemoryStore::with_record_bounds(
            10,
            RecordBounds {
                max_bytes: 1 << 20,
                per_owner: 1,
                per_owner_bytes: u64::MAX,
            },
        );
        let (short, minute) = (Duration::from_millis(30), Duration::from_secs(60));
        // Retried until moka's timer wheel (about a second's granularity) has removed
        // the expired record: until then it still counts, erring on the side of refusing.
        let eventually = |key: &str, value: &str, lease: Duration| {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match store.reserve_record(key, value, lease, "alice", 100) {
                    Ok(None) => return,
                    Err(StoreError::OwnerFull) => {}
                    other => panic!("{other:?}"),
                }
                assert!(Instant::now() < deadline, "the expired record still counts");
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        eventually("k", "p", short);
        std::thread::sleep(Duration::from_millis(60));
        // Taken over after expiry by the same owner: still one record, one charge.
        eventually("k", "q", minute);
        assert_eq!(store.record_bytes(), record_weight("k", "q") + 100);
        assert!(!store.renew_record("k", "p", short), "not ours any more");
        assert!(store.renew_record("k", "q", short));
        std::thread::sleep(Duration::from_millis(60));
        eventually("j", "p", minute);
        assert_eq!(store.record_bytes(), record_weight("j", "p") + 100);
    }

    #[test]
    fn exactly_one_of_many_concurrent_consumptions_wins() {
        let store = Arc::new(MemoryStore::new(1000));
        let wins: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    let store = store.clone();
                    scope.spawn(move || {
                        store.consume("race", Duration::from_secs(60), "o") == Ok(Consumed::Fresh)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap() as usize)
                .sum()
        });
        assert_eq!(wins, 1);
    }
}
