//! Who holds a listener's connection slots: each open connection with its client
//! address and its [`Clock`], so that at the limit an idle keep-alive connection can be
//! closed to make room, and so that one address holds at most its share.
//!
//! Invariant: a connection is listed from its accept until its task ends (the
//! [`Slot`] guard); an address's count is exactly its listed connections; a reclaim
//! picks the connection idle the longest and closes only an idle one.

use super::deadline::Clock;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The address a share is counted by: an IPv4 address (an IPv4-mapped IPv6 one too),
/// or an IPv6 client's /64, what one host is routinely given.
pub(crate) fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::from(octets)
            }
        },
    }
}

#[derive(Default)]
struct Listed {
    next: u64,
    open: HashMap<u64, (IpAddr, Arc<Clock>)>,
    per_peer: HashMap<IpAddr, usize>,
}

/// The open connections of one listener.
#[derive(Default)]
pub(crate) struct Slots {
    listed: Mutex<Listed>,
}

/// One listed connection; unlisted when dropped.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut listed = self.slots.listed.lock().expect("not poisoned");
        if let Some((peer, _)) = listed.open.remove(&self.id)
            && let Some(count) = listed.per_peer.get_mut(&peer)
        {
            *count -= 1;
            if *count == 0 {
                listed.per_peer.remove(&peer);
            }
        }
    }
}

impl Slots {
    /// List a connection of `peer` (a [`peer_key`]).
    pub(crate) fn list(self: &Arc<Self>, peer: IpAddr, clock: Arc<Clock>) -> Slot {
        let mut listed = self.listed.lock().expect("not poisoned");
        let id = listed.next;
        listed.next += 1;
        listed.open.insert(id, (peer, clock));
        *listed.per_peer.entry(peer).or_insert(0) += 1;
        Slot {
            slots: self.clone(),
            id,
        }
    }

    /// Connections `peer` holds now.
    pub(crate) fn held_by(&self, peer: IpAddr) -> usize {
        let listed = self.listed.lock().expect("not poisoned");
        listed.per_peer.get(&peer).copied().unwrap_or(0)
    }

    /// The listener is shutting down: every connection listed finishes what it has in
    /// progress, then closes. Every connection is listed before its task starts, and none
    /// after the listener stopped accepting, so each one is told.
    pub(crate) fn stop_all(&self) {
        let listed = self.listed.lock().expect("not poisoned");
        for (_, clock) in listed.open.values() {
            clock.stop();
        }
    }

    /// Close the connection idle the longest (of `peer` only, when given). Returns
    /// whether one was idle.
    pub(crate) fn reclaim_idle(&self, peer: Option<IpAddr>) -> bool {
        let listed = self.listed.lock().expect("not poisoned");
        let mut idle: Vec<_> = listed
            .open
            .values()
            .filter(|(owner, _)| peer.is_none_or(|peer| *owner == peer))
            .filter_map(|(_, clock)| clock.idle_since().map(|since| (since, clock.clone())))
            .collect();
        drop(listed);
        idle.sort_by_key(|(since, _)| *since);
        // One that started a request since it was looked at is skipped for the next.
        idle.into_iter().any(|(_, clock)| clock.reclaim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn idle_clock() -> Arc<Clock> {
        let clock = Clock::new(Duration::from_secs(10), Duration::from_secs(3600));
        drop(clock.request());
        clock
    }

    #[test]
    fn shares_are_counted_by_address_and_an_ipv6_client_by_its_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(peer_key(a), peer_key(b));
        assert_ne!(peer_key(a), peer_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(peer_key(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
        let slots = Arc::new(Slots::default());
        let first = slots.list(peer_key(a), idle_clock());
        let second = slots.list(peer_key(b), idle_clock());
        assert_eq!(slots.held_by(peer_key(a)), 2);
        drop(first);
        assert_eq!(slots.held_by(peer_key(a)), 1);
        drop(second);
        assert_eq!(slots.held_by(peer_key(a)), 0);
    }

    #[test]
    fn the_longest_idle_connection_is_reclaimed_first_and_a_busy_one_never() {
        let slots = Arc::new(Slots::default());
        let (mallory, alice): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let oldest = idle_clock();
        std::thread::sleep(Duration::from_millis(5));
        let newer = idle_clock();
        let busy = Clock::new(Duration::from_secs(10), Duration::from_secs(3600));
        let _request = busy.request();
        let _slots = [
            slots.list(alice, busy.clone()),
            slots.list(mallory, newer.clone()),
            slots.list(alice, oldest.clone()),
        ];
        assert!(slots.reclaim_idle(Some(mallory)));
        assert_eq!(newer.idle_since(), None, "mallory's own idle one");
        assert!(oldest.idle_since().is_some());
        assert!(slots.reclaim_idle(None));
        assert_eq!(oldest.idle_since(), None);
        assert!(!slots.reclaim_idle(None), "only a busy one is left");
    }
}
