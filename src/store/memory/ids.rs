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
//! An entry is 32 bytes in the map and 24 in the deadline order: the id's 16 bytes, its
//! deadline as nanoseconds since the table began and its owner's number
//! ([`super::owners`]). No allocation of its own, no text, no pointer to follow when a
//! lookup compares it, and no shared count touched: a table of a million ids (what a
//! busy replica holds for a token lifetime) is about half the size it was with an
//! `Instant`, a tie-breaking sequence and the owner's shared name in each entry, and
//! misses the cache less.
//!
//! Invariant: an id is held (a consumption of it is a replay) from its insertion until
//! its deadline or its release, and never after either; every id held is in both the
//! shard's map and its deadline order, and leaves both at once; `live` counts the ids
//! held, and each leaves the count exactly once, giving its owner's share back.

use super::Fast;
use super::owners::{OwnerId, Owners};
use crate::store::{ConsumptionId, StoreError};
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Shards of the map: consumptions of different ids rarely wait for one another.
const SHARDS: usize = 16;

/// Expired ids a consumption removes from its shard, at most: the work of expiry is
/// spread over the consumptions rather than paid by one of them.
const SWEEP_STEP: usize = 8;

/// The consumed ids, their count and their owners.
pub(super) struct ConsumedIds {
    shards: Box<[Mutex<Shard>]>,
    /// Which shard an id is in.
    hasher: Fast,
    /// Deadlines are counted from here.
    epoch: Instant,
    /// Ids held (inserted, and neither expired nor released).
    live: AtomicUsize,
    /// Ids held per owner: what an id's leaving gives back (boxed: the store sits in an
    /// enum beside the Redis store's pointer).
    owners: Box<Owners>,
}

/// One shard: its ids, and the same ids by deadline.
#[derive(Default)]
struct Shard {
    ids: HashMap<Key, HeldId, Fast>,
    /// The ids by deadline (an id is held once, so it tells ties apart).
    deadlines: BTreeSet<Due>,
}

/// An id as the shards hold it: its 16 bytes as one integer.
type Key = u128;

fn key(id: ConsumptionId) -> Key {
    u128::from_ne_bytes(id.0)
}

/// Nanoseconds since the table's epoch (584 years of them fit).
type Nanos = u64;

/// An id held: until when, and whose share it counts against.
#[derive(Clone, Copy)]
struct HeldId {
    deadline: Nanos,
    owner: OwnerId,
}

/// An id in the deadline order: its deadline, then the id's two halves (three words,
/// where a `u128` beside the deadline would be padded to four).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Due(Nanos, u64, u64);

impl Due {
    fn of(key: Key, deadline: Nanos) -> Self {
        Self(deadline, (key >> 64) as u64, key as u64)
    }

    fn key(self) -> Key {
        (u128::from(self.1) << 64) | u128::from(self.2)
    }
}

impl ConsumedIds {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Fast::default(),
            epoch: Instant::now(),
            live: AtomicUsize::new(0),
            owners: Box::default(),
        }
    }

    /// Ids held now (expired ones count until they are swept).
    pub(super) fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// One more id for `owner`, unless it holds `most` ([`StoreError::OwnerFull`]): what
    /// [`Self::insert`] counts the id against, given back by [`Self::give_back`] if the
    /// id is not inserted.
    pub(super) fn take_share(&self, owner: &str, most: usize) -> Result<OwnerId, StoreError> {
        self.owners.take(owner, most)
    }

    /// A share taken and not used (the id was a replay).
    pub(super) fn give_back(&self, owner: OwnerId) {
        self.owners.give(owner);
    }

    /// Ids `owner` holds now.
    #[cfg(test)]
    pub(super) fn held_by(&self, owner: &str) -> usize {
        self.owners.held(owner)
    }

    /// Hold `id` until `deadline` for `owner`, unless it is held: `true` when it is held
    /// now by this call, `false` for a replay (the caller gives back the share it took).
    /// An expired id still in the map leaves first, as it would have on its own.
    pub(super) fn insert(
        &self,
        id: ConsumptionId,
        deadline: Instant,
        owner: OwnerId,
        now: Instant,
    ) -> bool {
        let key = key(id);
        let (deadline, now) = (self.nanos(deadline), self.nanos(now));
        let mut shard = self.shard(key);
        self.sweep(&mut shard, now, SWEEP_STEP);
        if let Some(held) = shard.ids.get(&key) {
            if held.deadline > now {
                return false;
            }
            self.remove(&mut shard, key);
        }
        shard.deadlines.insert(Due::of(key, deadline));
        shard.ids.insert(key, HeldId { deadline, owner });
        self.live.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Whether `id` is held at `now`.
    pub(super) fn contains(&self, id: ConsumptionId, now: Instant) -> bool {
        let key = key(id);
        let now = self.nanos(now);
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
        let now = self.nanos(now);
        for shard in &self.shards {
            let mut shard = shard.lock().expect("not poisoned");
            self.sweep(&mut shard, now, usize::MAX);
        }
    }

    /// `at` on the table's clock. An instant before the epoch is the epoch itself: no
    /// deadline is that early (a time to live is at least a millisecond).
    fn nanos(&self, at: Instant) -> Nanos {
        let since = at.saturating_duration_since(self.epoch).as_nanos();
        Nanos::try_from(since).unwrap_or(Nanos::MAX)
    }

    fn shard(&self, key: Key) -> MutexGuard<'_, Shard> {
        let at = self.hasher.hash_one(key) as usize % SHARDS;
        self.shards[at].lock().expect("not poisoned")
    }

    /// Remove up to `most` ids whose deadline is at or before `now`, earliest first.
    fn sweep(&self, shard: &mut Shard, now: Nanos, most: usize) {
        for _ in 0..most {
            match shard.deadlines.first() {
                Some(due) if due.0 <= now => {}
                _ => return,
            }
            let due = shard.deadlines.pop_first().expect("just seen");
            if let Some(held) = shard.ids.remove(&due.key()) {
                self.left(held);
            }
        }
    }

    /// Remove `key` from both orders of `shard`, when it is there.
    fn remove(&self, shard: &mut Shard, key: Key) {
        if let Some(held) = shard.ids.remove(&key) {
            shard.deadlines.remove(&Due::of(key, held.deadline));
            self.left(held);
        }
    }

    /// An id left: one fewer held, and its owner's share given back.
    fn left(&self, held: HeldId) {
        self.live.fetch_sub(1, Ordering::AcqRel);
        self.owners.give(held.owner);
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

    /// A share for `owner`, as the store takes it before an insertion.
    fn take(ids: &ConsumedIds, owner: &str) -> OwnerId {
        ids.take_share(owner, usize::MAX).unwrap()
    }

    /// A long random run of insertions, releases, lookups and sweeps at an advancing
    /// clock, against the model: every answer is the model's, no id is forgotten before
    /// its deadline nor kept after it, the two orders of every shard hold the same ids,
    /// and the owners' shares are the ids each holds.
    #[test]
    fn the_ids_answer_as_a_plain_map_of_deadlines() {
        let ids = ConsumedIds::new();
        let names = ["alice", "bob", "carol"];
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
                    let share = take(&ids, owner);
                    let fresh = ids.insert(Id::named(&id), deadline, share, now);
                    assert_eq!(fresh, !model.holds(&id, now), "step {step}: insert {id}");
                    if fresh {
                        model.held.insert(id, (deadline, owner.to_string()));
                    } else {
                        ids.give_back(share);
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
                for name in names {
                    let held = (model.held.values()).filter(|(_, o)| o == name).count();
                    assert_eq!(ids.held_by(name), held, "{name}");
                }
            }
        }
    }

    /// A consumption sweeps a few expired ids of its shard, so ids leave without a
    /// full sweep; a full sweep leaves nothing expired and keeps everything else.
    #[test]
    fn expired_ids_leave_a_few_at_a_time_and_all_at_once_when_asked() {
        let ids = ConsumedIds::new();
        let now = Instant::now();
        let soon = now + Duration::from_millis(10);
        let later = now + Duration::from_secs(60);
        for n in 0..200 {
            let deadline = if n % 2 == 0 { soon } else { later };
            assert!(ids.insert(Id::named(&format!("{n}")), deadline, take(&ids, "o"), now));
        }
        assert_eq!(ids.live(), 200);
        let after = soon + Duration::from_millis(1);
        // The shard "one more" goes to, and its ids expired by then.
        let at = ids.hasher.hash_one(key(Id::named("one more"))) as usize % SHARDS;
        let expired = {
            let shard = ids.shards[at].lock().unwrap();
            let after = ids.nanos(after);
            shard
                .deadlines
                .range(..=Due(after, u64::MAX, u64::MAX))
                .count()
        };
        assert!(ids.insert(Id::named("one more"), later, take(&ids, "o"), after));
        assert_eq!(ids.live(), 201 - expired.min(SWEEP_STEP));
        // The expired ones are no longer held even before they are swept.
        assert!(!ids.contains(Id::named("0"), after));
        assert!(ids.contains(Id::named("1"), after));
        ids.sweep_all(after);
        assert_eq!(ids.live(), 101);
        assert_eq!(ids.counts(), (101, 101));
        assert_eq!(ids.held_by("o"), 101);
    }
}
