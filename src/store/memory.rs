//! The embedded store: consumed ids in process memory (moka), for one replica.
//!
//! Invariant: an id is never forgotten before its time to live ends. moka would evict
//! entries to stay under a capacity, so the store keeps no moka capacity at all and
//! counts live ids itself: at `max_entries` it refuses new consumptions ([`StoreError::Full`])
//! instead of evicting one whose token could then be replayed.

use super::{Consumed, StoreError};
use moka::Expiry;
use moka::notification::RemovalCause;
use moka::sync::Cache;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

impl Deadline for (Arc<str>, Instant) {
    fn deadline(&self) -> Instant {
        self.1
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

pub struct MemoryStore {
    ids: Cache<Arc<str>, Instant>,
    /// Principal digest → (not before, Unix seconds; kept until the deadline).
    revocations: Cache<Arc<str>, (f64, Instant)>,
    /// Idempotency records: key → (value, deadline). Bounded by `max_entries` too
    /// (moka's approximate count): a full store refuses new reservations, it never
    /// evicts a record whose write could then be applied twice.
    records: Cache<Arc<str>, (Arc<str>, Instant)>,
    /// Live ids (inserted and not yet removed by expiry or release).
    live: Arc<AtomicUsize>,
    max_entries: usize,
}

impl MemoryStore {
    pub fn new(max_entries: usize) -> Self {
        let live = Arc::new(AtomicUsize::new(0));
        let removed = live.clone();
        let ids = Cache::builder()
            .expire_after(AtDeadline)
            .eviction_listener(move |_key, _deadline, cause: RemovalCause| {
                // Every removal of an inserted id: expiry, release, or (never, without a
                // capacity) size eviction. Replacement never happens: ids are only inserted.
                if cause != RemovalCause::Replaced {
                    removed.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .build();
        Self {
            ids,
            revocations: Cache::builder().expire_after(AtDeadline).build(),
            records: Cache::builder().expire_after(AtDeadline).build(),
            live,
            max_entries,
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

    pub fn consume(&self, id: &str, ttl: Duration) -> Result<Consumed, StoreError> {
        if self.ids.contains_key(id) {
            return Ok(Consumed::Replayed);
        }
        if self.live.load(Ordering::Acquire) >= self.max_entries {
            // Expired ids leave the count only when moka runs its maintenance.
            self.ids.run_pending_tasks();
            if self.live.load(Ordering::Acquire) >= self.max_entries {
                return Err(StoreError::Full);
            }
        }
        // `or_insert_with`, not `or_insert`: only the former coalesces concurrent inserts
        // of one key into a single fresh entry (with `or_insert`, two of sixteen racing
        // threads were seen to both get a fresh entry, 27 runs in 200).
        let entry = self
            .ids
            .entry(Arc::from(id))
            .or_insert_with(|| Instant::now() + ttl);
        if entry.is_fresh() {
            self.live.fetch_add(1, Ordering::AcqRel);
            Ok(Consumed::Fresh)
        } else {
            Ok(Consumed::Replayed)
        }
    }

    /// Set `key` to `value` for `lease` unless it holds something: `None` when set now,
    /// else what it holds. One atomic compute per key.
    pub fn reserve_record(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
    ) -> Result<Option<String>, StoreError> {
        if self.records.entry_count() as usize >= self.max_entries {
            self.records.run_pending_tasks();
            if self.records.entry_count() as usize >= self.max_entries {
                return Err(StoreError::Full);
            }
        }
        let result =
            self.records
                .entry(Arc::from(key))
                .and_compute_with(|existing| match existing {
                    Some(_) => moka::ops::compute::Op::Nop,
                    None => moka::ops::compute::Op::Put((Arc::from(value), Instant::now() + lease)),
                });
        Ok(match result {
            moka::ops::compute::CompResult::Unchanged(entry) => Some(entry.value().0.to_string()),
            _ => None,
        })
    }

    /// Replace `key`'s value by `value` for `ttl`, or remove it (`None`), only while it
    /// still holds `expected`: an expired lease taken over by another caller is left
    /// alone. Returns whether it still held `expected` (and was replaced or removed).
    pub fn swap_record(
        &self,
        key: &str,
        expected: &str,
        value: Option<&str>,
        ttl: Duration,
    ) -> bool {
        let result =
            self.records
                .entry(Arc::from(key))
                .and_compute_with(|existing| match existing {
                    Some(entry) if &*entry.value().0 == expected => match value {
                        Some(value) => {
                            moka::ops::compute::Op::Put((Arc::from(value), Instant::now() + ttl))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_consumed_once_until_it_expires() {
        let store = MemoryStore::new(10);
        let minute = Duration::from_secs(60);
        assert_eq!(store.consume("a", minute), Ok(Consumed::Fresh));
        assert_eq!(store.consume("a", minute), Ok(Consumed::Replayed));
        assert_eq!(store.consume("b", minute), Ok(Consumed::Fresh));
        store.release("a");
        assert_eq!(store.consume("a", minute), Ok(Consumed::Fresh));
        assert_eq!(
            store.consume("c", Duration::from_millis(30)),
            Ok(Consumed::Fresh)
        );
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(store.consume("c", minute), Ok(Consumed::Fresh), "expired");
    }

    #[test]
    fn a_full_store_refuses_instead_of_forgetting() {
        let store = MemoryStore::new(2);
        let minute = Duration::from_secs(60);
        store.consume("a", minute).unwrap();
        store.consume("b", Duration::from_millis(30)).unwrap();
        assert_eq!(store.consume("c", minute), Err(StoreError::Full));
        // What it holds is still refused, not evicted.
        assert_eq!(store.consume("a", minute), Ok(Consumed::Replayed));
        // moka removes expired entries on its timer wheel (about a second's granularity):
        // until then the store stays full, erring on the side of refusing.
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.consume("c", minute) == Err(StoreError::Full) {
            assert!(Instant::now() < deadline, "b never left the store");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            store.consume("c", minute),
            Ok(Consumed::Replayed),
            "c was recorded"
        );
        assert_eq!(store.len(), 2);
        assert_eq!(store.consume("d", minute), Err(StoreError::Full));
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
            store.consume("a", Duration::from_secs(60)),
            Ok(Consumed::Fresh)
        );
    }

    #[test]
    fn records_are_reserved_once_and_swapped_only_from_what_was_expected() {
        let store = MemoryStore::new(10);
        let minute = Duration::from_secs(60);
        assert_eq!(store.reserve_record("k", "p1", minute), Ok(None));
        assert_eq!(
            store.reserve_record("k", "p2", minute),
            Ok(Some("p1".into()))
        );
        store.swap_record("k", "p2", Some("done"), minute);
        assert_eq!(
            store.reserve_record("k", "p3", minute),
            Ok(Some("p1".into()))
        );
        store.swap_record("k", "p1", Some("done"), minute);
        assert_eq!(
            store.reserve_record("k", "p3", minute),
            Ok(Some("done".into()))
        );
        store.swap_record("k", "done", None, minute);
        assert_eq!(store.reserve_record("k", "p4", minute), Ok(None));
        assert_eq!(
            store.reserve_record("short", "p", Duration::from_millis(20)),
            Ok(None)
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(
            store.reserve_record("short", "q", minute),
            Ok(None),
            "expired"
        );
        let wins: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|i| {
                    let store = &store;
                    scope.spawn(move || {
                        store.reserve_record("race", &format!("p{i}"), minute) == Ok(None)
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

    #[test]
    fn a_record_is_swapped_only_while_it_holds_the_reservation() {
        let store = MemoryStore::new(10);
        let minute = Duration::from_secs(60);
        assert_eq!(store.reserve_record("k", "p:1", minute), Ok(None));
        assert_eq!(
            store.reserve_record("k", "p:2", minute),
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
    fn exactly_one_of_many_concurrent_consumptions_wins() {
        let store = Arc::new(MemoryStore::new(1000));
        let wins: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    let store = store.clone();
                    scope.spawn(move || {
                        store.consume("race", Duration::from_secs(60)) == Ok(Consumed::Fresh)
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
