//! The consumed ids of the embedded store: a map sharded by the id's hash, each shard
//! under its own lock, with its ids also ordered by deadline so that expired ones leave
//! in order, a few at each consumption (all at once when the store is full).
//!
//! Written here rather than held in moka, as the store's records still are: what the
//! ids need (insert an id unless it is there, keep it until its deadline, never evict
//! one, count them per owner) is a small part of what a cache does, and moka's general
//! machinery (its write log, frequency sketch and timer wheel) cost a single-use retry
//! about 7 k instructions and about 430 bytes per live id.
//!
//! An id is held as its 16 bytes, in the map's own slots: no allocation of its own, no
//! text to write, and no pointer to follow when a lookup compares it.
//!
//! Invariant: an id is held (a consumption of it is a replay) from its insertion until
//! its deadline or its release, and never after either; every id held is in both the
//! shard's map and its deadline order, and leaves both at once; `live` counts the ids
//! held, and each leaves the count exactly once, giving its owner's share back.

use super::{Fast, Owners, give_id};
use crate::store::ConsumptionId;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Shards of the map: consumptions of different ids rarely wait for one another.
const SHARDS: usize = 16;

/// Expired ids a consumption removes from its shard, at most: the work of expiry is
/// spread over the consumptions rather than paid by one of them.
const SWEEP_STEP: usize = 8;

/// The consumed ids and their count.
pub(super) struct ConsumedIds {
    shards: Box<[Mutex<Shard>]>,
    /// Which shard an id is in.
    hasher: Fast,
    /// Ids held (inserted, and neither expired nor released).
    live: AtomicUsize,
    /// Ids held per owner: what an id's leaving gives back.
    owners: Arc<Owners>,
}

/// One shard: its ids, and the same ids by deadline.
#[derive(Default)]
struct Shard {
    ids: HashMap<Key, HeldId, Fast>,
    /// The ids by deadline, ties in the order they came (`HeldId::seq`).
    deadlines: BTreeMap<(Instant, u64), Key>,
    /// The next insertion's place among ties.
    seq: u64,
}

/// An id as the shards hold it: its 16 bytes as one integer.
type Key = u128;

fn key(id: ConsumptionId) -> Key {
    u128::from_ne_bytes(id.0)
}

/// An id held: until when, its place in the deadline order, and whose share it counts
/// against.
struct HeldId {
    deadline: Instant,
    seq: u64,
    owner: Arc<str>,
}

impl ConsumedIds {
    pub(super) fn new(owners: Arc<Owners>) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Fast::default(),
            live: AtomicUsize::new(0),
            owners,
        }
    }

    /// Ids held now (expired ones count until they are swept).
    pub(super) fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Hold `id` until `deadline` for `owner`, unless it is held: `true` when it is held
    /// now by this call, `false` for a replay (the caller gives back the share it took).
    /// An expired id still in the map leaves first, as it would have on its own.
    pub(super) fn insert(
        &self,
        id: ConsumptionId,
        deadline: Instant,
        owner: &Arc<str>,
        now: Instant,
    ) -> bool {
        let key = key(id);
        let mut shard = self.shard(key);
        self.sweep(&mut shard, now, SWEEP_STEP);
        if let Some(held) = shard.ids.get(&key) {
            if held.deadline > now {
                return false;
            }
            self.remove(&mut shard, key);
        }
        let seq = shard.seq;
        shard.seq += 1;
        shard.deadlines.insert((deadline, seq), key);
        let held = HeldId {
            deadline,
            seq,
            owner: owner.clone(),
        };
        shard.ids.insert(key, held);
        self.live.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Whether `id` is held at `now`.
    pub(super) fn contains(&self, id: ConsumptionId, now: Instant) -> bool {
        let key = key(id);
        let shard = self.shard(key);
        shard.ids.get(&key).is_some_and(|held| held.deadline > now)
    }

    /// Forget `id` now (its consumption is given back).
    pub(super) fn release(&self, id: ConsumptionId) {
        let key = key(id);
        let mut shard = self.shard(key);
        self.remove(&mut shard, key);
    }

    /// Remove every id expired at `now`, from every shard.
    pub(super) fn sweep_all(&self, now: Instant) {
        for shard in &self.shards {
            let mut shard = shard.lock().expect("not poisoned");
            self.sweep(&mut shard, now, usize::MAX);
        }
    }

    fn shard(&self, key: Key) -> MutexGuard<'_, Shard> {
        let at = self.hasher.hash_one(key) as usize % SHARDS;
        self.shards[at].lock().expect("not poisoned")
    }

    /// Remove up to `most` ids whose deadline is at or before `now`, earliest first.
    fn sweep(&self, shard: &mut Shard, now: Instant, most: usize) {
        for _ in 0..most {
            let Some(entry) = shard.deadlines.first_entry() else {
                return;
            };
            if entry.key().0 > now {
                return;
            }
            let id = entry.remove();
            if let Some(held) = shard.ids.remove(&id) {
                self.left(&held);
            }
        }
    }

    /// Remove `key` from both orders of `shard`, when it is there.
    fn remove(&self, shard: &mut Shard, key: Key) {
        if let Some(held) = shard.ids.remove(&key) {
            shard.deadlines.remove(&(held.deadline, held.seq));
            self.left(&held);
        }
    }

    /// An id left: one fewer held, and its owner's share given back.
    fn left(&self, held: &HeldId) {
        self.live.fetch_sub(1, Ordering::AcqRel);
        give_id(&self.owners, &held.owner);
    }

    /// Ids in the shards' maps and in their deadline orders (equal, by the invariant).
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(ids, deadlines), shard| {
            let shard = shard.lock().expect("not poisoned");
            (ids + shard.ids.len(), deadlines + shard.deadlines.len())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ConsumptionId as Id;
    use std::time::Duration;

    /// What the ids must answer, by a plain map: an id is held while its deadline is
    /// ahead, whatever was swept.
    #[derive(Default)]
    struct Model {
        held: HashMap<String, (Instant, String)>,
    }

    impl Model {
        fn holds(&self, id: &str, now: Instant) -> bool {
            self.held
                .get(id)
                .is_some_and(|(deadline, _)| *deadline > now)
        }
    }

    /// The shares the owners' map holds, as the store's `take_share` takes them.
    fn take(owners: &Owners, owner: &Arc<str>) {
        *owners.lock().unwrap().entry(owner.clone()).or_insert(0) += 1;
    }

    /// A long random run of insertions, releases, lookups and sweeps at an advancing
    /// clock, against the model: every answer is the model's, no id is forgotten before
    /// its deadline nor kept after it, the two orders of every shard hold the same ids,
    /// and the owners' shares are the ids each holds.
    #[test]
    fn the_ids_answer_as_a_plain_map_of_deadlines() {
        let owners: Arc<Owners> = Arc::default();
        let ids = ConsumedIds::new(owners.clone());
        let names: Vec<Arc<str>> = ["alice", "bob", "carol"].map(Arc::from).to_vec();
        let mut model = Model::default();
        let start = Instant::now();
        let mut now = start;
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % bound
        };
        for step in 0..20_000 {
            now += Duration::from_millis(next(5));
            let id = format!("id-{}", next(60));
            let owner = &names[next(3) as usize];
            match next(10) {
                0..=5 => {
                    let deadline = now + Duration::from_millis(1 + next(400));
                    take(&owners, owner);
                    let fresh = ids.insert(Id::named(&id), deadline, owner, now);
                    assert_eq!(fresh, !model.holds(&id, now), "step {step}: insert {id}");
                    if fresh {
                        model.held.insert(id, (deadline, owner.to_string()));
                    } else {
                        give_id(&owners, owner);
                    }
                }
                6 => {
                    ids.release(Id::named(&id));
                    model.held.remove(&id);
                }
                7 => ids.sweep_all(now),
                _ => assert_eq!(
                    ids.contains(Id::named(&id), now),
                    model.holds(&id, now),
                    "step {step}"
                ),
            }
            let (in_map, in_order) = ids.counts();
            assert_eq!(in_map, in_order, "step {step}");
            assert_eq!(ids.live(), in_map, "step {step}");
            if step % 500 == 0 {
                ids.sweep_all(now);
                model.held.retain(|_, (deadline, _)| *deadline > now);
                assert_eq!(ids.live(), model.held.len(), "step {step}: swept");
                let shares = owners.lock().unwrap().clone();
                for name in &names {
                    let held = (model.held.values()).filter(|(_, o)| **o == **name).count();
                    assert_eq!(shares.get(name).copied().unwrap_or(0), held, "{name}");
                }
            }
        }
    }

    /// A consumption sweeps a few expired ids of its shard, so ids leave without a
    /// full sweep; a full sweep leaves nothing expired and keeps everything else.
    #[test]
    fn expired_ids_leave_a_few_at_a_time_and_all_at_once_when_asked() {
        let owners: Arc<Owners> = Arc::default();
        let ids = ConsumedIds::new(owners.clone());
        let owner: Arc<str> = Arc::from("o");
        let now = Instant::now();
        let soon = now + Duration::from_millis(10);
        let later = now + Duration::from_secs(60);
        for n in 0..200 {
            take(&owners, &owner);
            let deadline = if n % 2 == 0 { soon } else { later };
            assert!(ids.insert(Id::named(&format!("{n}")), deadline, &owner, now));
        }
        assert_eq!(ids.live(), 200);
        let after = soon + Duration::from_millis(1);
        // The shard "one more" goes to, and its ids expired by then.
        let at = ids.hasher.hash_one(key(Id::named("one more"))) as usize % SHARDS;
        let expired = {
            let shard = ids.shards[at].lock().unwrap();
            shard.deadlines.range(..=(after, u64::MAX)).count()
        };
        take(&owners, &owner);
        assert!(ids.insert(Id::named("one more"), later, &owner, after));
        assert_eq!(ids.live(), 201 - expired.min(SWEEP_STEP));
        // The expired ones are no longer held even before they are swept.
        assert!(!ids.contains(Id::named("0"), after));
        assert!(ids.contains(Id::named("1"), after));
        ids.sweep_all(after);
        assert_eq!(ids.live(), 101);
        assert_eq!(ids.counts(), (101, 101));
        assert_eq!(owners.lock().unwrap().get("o"), Some(&101));
    }
}
