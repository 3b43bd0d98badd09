//! Tests of the embedded store: nothing forgotten before its time, every bound and
//! share refused rather than evicted, charges given back.

use super::*;
use crate::store::ConsumptionId as Id;

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
    assert_eq!(
        store.consume(Id::named("a"), minute, "o"),
        Ok(Consumed::Fresh)
    );
    assert_eq!(
        store.consume(Id::named("a"), minute, "o"),
        Ok(Consumed::Replayed)
    );
    assert_eq!(
        store.consume(Id::named("b"), minute, "o"),
        Ok(Consumed::Fresh)
    );
    store.release(Id::named("a"));
    assert_eq!(
        store.consume(Id::named("a"), minute, "o"),
        Ok(Consumed::Fresh)
    );
    assert_eq!(
        store.consume(Id::named("c"), Duration::from_millis(30), "o"),
        Ok(Consumed::Fresh)
    );
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        store.consume(Id::named("c"), minute, "o"),
        Ok(Consumed::Fresh),
        "expired"
    );
}

#[test]
fn a_full_store_refuses_instead_of_forgetting() {
    let store = MemoryStore::new(2);
    let minute = Duration::from_secs(60);
    store.consume(Id::named("a"), minute, "o").unwrap();
    store
        .consume(Id::named("b"), Duration::from_millis(30), "o")
        .unwrap();
    assert_eq!(
        store.consume(Id::named("c"), minute, "o"),
        Err(StoreError::Full)
    );
    // What it holds is still refused, not evicted.
    assert_eq!(
        store.consume(Id::named("a"), minute, "o"),
        Ok(Consumed::Replayed)
    );
    // A full store sweeps the expired ids before it refuses: b leaves once its
    // deadline has passed, and not before.
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.consume(Id::named("c"), minute, "o") == Err(StoreError::Full) {
        assert!(Instant::now() < deadline, "b never left the store");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        store.consume(Id::named("c"), minute, "o"),
        Ok(Consumed::Replayed),
        "c was recorded"
    );
    assert_eq!(store.len(), 2);
    assert_eq!(
        store.consume(Id::named("d"), minute, "o"),
        Err(StoreError::Full)
    );
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
    assert_eq!(
        store.consume(Id::named("a1"), minute, "mallory"),
        Ok(Consumed::Fresh)
    );
    assert_eq!(
        store.consume(Id::named("a2"), minute, "mallory"),
        Ok(Consumed::Fresh)
    );
    assert_eq!(
        store.consume(Id::named("a3"), minute, "mallory"),
        Err(StoreError::OwnerFull)
    );
    assert_eq!(store.owner_entries("mallory"), 2);
    // A replay of her own is still a replay, not a quota refusal.
    assert_eq!(
        store.consume(Id::named("a1"), minute, "mallory"),
        Ok(Consumed::Replayed)
    );
    assert_eq!(
        store.consume(Id::named("b1"), minute, "alice"),
        Ok(Consumed::Fresh)
    );
    // A replay with room to spare takes no share: hers is still one id.
    assert_eq!(
        store.consume(Id::named("b1"), minute, "alice"),
        Ok(Consumed::Replayed)
    );
    assert_eq!(store.owner_entries("alice"), 1);
    assert_eq!(
        store.consume(Id::named("c1"), minute, "bob"),
        Ok(Consumed::Fresh)
    );
    // Four owners' worth: the store itself is full now, for a newcomer too.
    assert_eq!(
        store.consume(Id::named("d1"), minute, "carol"),
        Err(StoreError::Full)
    );
    // A release gives the share back.
    store.release(Id::named("a2"));
    assert_eq!(store.owner_entries("mallory"), 1);
    assert_eq!(
        store.consume(Id::named("a3"), minute, "mallory"),
        Ok(Consumed::Fresh)
    );
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
        .consume(Id::named("a"), Duration::from_millis(30), "mallory")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.consume(Id::named("b"), Duration::from_secs(60), "mallory")
        == Err(StoreError::OwnerFull)
    {
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
    assert!(!store.may_hold_revocations());
    assert_eq!(store.revoked_since("p"), None);
    store.revoke("p", 100.0, Duration::from_secs(60));
    assert!(store.may_hold_revocations());
    store.revoke("p", 50.0, Duration::from_secs(60));
    assert_eq!(store.revoked_since("p"), Some(100.0));
    store.revoke("p", 200.0, Duration::from_millis(10));
    assert_eq!(store.revoked_since("p"), Some(200.0));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(store.revoked_since("p"), None, "expired");
    // Revocations do not count against the consumption bound.
    assert_eq!(
        store.consume(Id::named("a"), Duration::from_secs(60), "o"),
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
                scope.spawn(move || reserve(store, "race", &format!("p{i}"), minute) == Ok(None))
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
                    store.consume(Id::named("race"), Duration::from_secs(60), "o")
                        == Ok(Consumed::Fresh)
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
