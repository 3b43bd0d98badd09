//! Who holds the embedded store's consumed ids: each owner's count, under one lock, and
//! a small number for the owner that each of its ids carries (4 bytes in the id's entry,
//! where a shared name would be 16 and an atomic count to touch at every id).
//!
//! Invariant: an owner is listed (has a number) exactly while it holds at least one id;
//! its count is the ids taken for it and not yet given back; a number is handed out
//! again only after its owner left, when no id carries it any more.

use super::Fast;
use crate::store::StoreError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An owner, as the ids it holds name it: its place in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OwnerId(u32);

/// The owners holding ids, and their counts.
#[derive(Default)]
pub(super) struct Owners {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_name: HashMap<Arc<str>, OwnerId, Fast>,
    /// Indexed by [`OwnerId`]; a free place holds no name.
    places: Vec<OwnerPlace>,
    /// Places whose owner left, handed out before the table grows.
    free: Vec<OwnerId>,
}

struct OwnerPlace {
    name: Option<Arc<str>>,
    held: usize,
}

impl Owners {
    /// One more id for `owner` unless it holds `most` already ([`StoreError::OwnerFull`]).
    pub(super) fn take(&self, owner: &str, most: usize) -> Result<OwnerId, StoreError> {
        let mut table = self.table.lock().expect("not poisoned");
        if let Some(&id) = table.by_name.get(owner) {
            let place = &mut table.places[id.0 as usize];
            if place.held >= most {
                return Err(StoreError::OwnerFull);
            }
            place.held += 1;
            return Ok(id);
        }
        if most == 0 {
            return Err(StoreError::OwnerFull);
        }
        let name: Arc<str> = Arc::from(owner);
        let place = OwnerPlace {
            name: Some(name.clone()),
            held: 1,
        };
        let id = match table.free.pop() {
            Some(id) => {
                table.places[id.0 as usize] = place;
                id
            }
            None => {
                // More owners than ids could ever be held: refused, never wrapped.
                let at = u32::try_from(table.places.len()).map_err(|_| StoreError::Full)?;
                table.places.push(place);
                OwnerId(at)
            }
        };
        table.by_name.insert(name, id);
        Ok(id)
    }

    /// One id fewer for `id`'s owner; the owner leaves with its last.
    pub(super) fn give(&self, id: OwnerId) {
        let mut table = self.table.lock().expect("not poisoned");
        let Some(place) = table.places.get_mut(id.0 as usize) else {
            return;
        };
        if place.name.is_none() {
            return;
        }
        place.held = place.held.saturating_sub(1);
        if place.held == 0 {
            let name = place.name.take().expect("listed");
            table.by_name.remove(&name);
            table.free.push(id);
        }
    }

    /// Ids `owner` holds now.
    #[cfg(test)]
    pub(super) fn held(&self, owner: &str) -> usize {
        let table = self.table.lock().expect("not poisoned");
        (table.by_name.get(owner)).map_or(0, |id| table.places[id.0 as usize].held)
    }

    /// Owners listed now.
    #[cfg(test)]
    pub(super) fn listed(&self) -> usize {
        self.table.lock().expect("not poisoned").by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts per owner, the share refused at `most`, and a number handed out again only
    /// once its owner left: a new owner never inherits another's count.
    #[test]
    fn owners_are_counted_and_their_numbers_reused_only_once_they_left() {
        let owners = Owners::default();
        let alice = owners.take("alice", 2).unwrap();
        assert_eq!(owners.take("alice", 2), Ok(alice));
        assert_eq!(owners.take("alice", 2), Err(StoreError::OwnerFull));
        assert_eq!(owners.take("nobody", 0), Err(StoreError::OwnerFull));
        let bob = owners.take("bob", 2).unwrap();
        assert_ne!(alice, bob);
        assert_eq!((owners.held("alice"), owners.held("bob")), (2, 1));
        owners.give(alice);
        owners.give(alice);
        assert_eq!((owners.held("alice"), owners.listed()), (0, 1));
        // A given-back number is not alice's any more: giving it again changes nothing.
        owners.give(alice);
        assert_eq!(owners.held("bob"), 1);
        let carol = owners.take("carol", 2).unwrap();
        assert_eq!(carol, alice, "the place alice left");
        assert_eq!((owners.held("carol"), owners.held("alice")), (1, 0));
        owners.give(bob);
        owners.give(carol);
        assert_eq!(owners.listed(), 0);
    }
}
