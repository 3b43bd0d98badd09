//! Who may reach the child, and how much of it: only requests the proxy's gated route
//! marked with this process's secret (a passthrough path, or anything else that did not
//! go through the gate, is refused), each caller within its share of the requests at the
//! child, and requests waiting for the child or for its stdin within `queue_max`.
//!
//! Invariant: a request is at the child (queued, waiting for it, or in progress there)
//! only while it holds a [`QueueSlot`] of its owner's share; waiting for the child or queued,
//! only while it holds a [`Place`] in the callers' queue. Both are given back when dropped.

use super::ids::BridgeId;
use super::{BridgeShared, NotQueued, Outgoing};
use crate::budget::Reservation;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;

/// The header by which the proxy's gated route marks what it forwards to the bridge
/// (with a per-process random value; any copy a client sent is removed at ingress).
pub(crate) const GATED_HEADER: &str = "x-mcp-state-guard-gated";
/// The header naming whose share a request spends (the proxy's `Caller::owner`, a
/// digest), set by the gated route next to the mark, over any copy a client sent.
pub(crate) const OWNER_HEADER: &str = "x-mcp-state-guard-owner";

/// A new secret for [`GATED_HEADER`].
pub(super) fn fresh_mark() -> HeaderValue {
    HeaderValue::from_str(&format!("{:032x}", rand::random::<u128>()))
        .expect("hex is a valid header value")
}

/// The owner a request marked by the gated route names; `None` when it is not marked
/// (or wrongly).
pub(super) fn gated_owner(shared: &BridgeShared, headers: &HeaderMap) -> Option<String> {
    let mark = headers.get(GATED_HEADER)?;
    if !bool::from(mark.as_bytes().ct_eq(shared.mark.as_bytes())) {
        return None;
    }
    let owner = headers.get(OWNER_HEADER)?.to_str().ok()?;
    Some(owner.to_owned())
}

/// One of its owner's requests at the child.
pub(super) struct QueueSlot {
    shared: Arc<BridgeShared>,
    owner: String,
}

impl QueueSlot {
    /// Take one of `owner`'s share, or `None` when it holds all of it.
    pub(super) fn take(shared: &Arc<BridgeShared>, owner: String) -> Option<Self> {
        let mut owners = shared.owners.lock().unwrap_or_else(|e| e.into_inner());
        let held = owners.entry(owner.clone()).or_default();
        if *held >= shared.owner_share {
            return None;
        }
        *held += 1;
        Some(Self {
            shared: shared.clone(),
            owner,
        })
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let mut owners = self.shared.owners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = owners.get_mut(&self.owner) {
            *held -= 1;
            if *held == 0 {
                owners.remove(&self.owner);
            }
        }
    }
}

/// A caller's place in the child's input queue, taken before its line goes in: while it
/// waits for the child to come up, the place is held, so a request let in is never
/// refused later for want of room (the bridge's own lines queue apart).
pub(super) struct Place {
    permit: Option<mpsc::OwnedPermit<Outgoing>>,
    shared: Arc<BridgeShared>,
}

impl Place {
    /// A place, or [`NotQueued::Full`] when `queue_max` lines and requests wait already.
    pub(super) fn take(shared: &Arc<BridgeShared>) -> Result<Self, NotQueued> {
        let taken = shared.queue.clone().try_reserve_owned();
        shared.metrics.queue_depth(shared.queued());
        let permit = taken.map_err(NotQueued::from).inspect_err(|refused| {
            if let NotQueued::Full = refused {
                shared.metrics.queue_full();
            }
        })?;
        Ok(Self {
            permit: Some(permit),
            shared: shared.clone(),
        })
    }

    /// Put the line in its place (`id`: the request's, `None` for a notification or a
    /// response); [`NotQueued::Stopped`] once the child's writer is gone for good.
    pub(super) fn send(
        mut self,
        id: Option<BridgeId>,
        line: Bytes,
        held: Reservation,
    ) -> Result<(), NotQueued> {
        if self.shared.queue.is_closed() {
            return Err(NotQueued::Stopped);
        }
        let permit = self.permit.take().expect("a place is sent once");
        permit.send(Outgoing {
            id,
            line,
            held: Some(held),
        });
        Ok(())
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // A place not used is given back (a line sent keeps it until the writer took it).
        drop(self.permit.take());
        self.shared.metrics.queue_depth(self.shared.queued());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::MemoryBudget;
    use crate::config::Config;
    use crate::registry::Registry;
    use crate::stdio::StdioMetrics;
    use prometheus::IntGauge;

    /// Requests let in while the child starts keep their places: the lines the bridge
    /// writes itself once the child is up (its tool listing, a cancellation) queue apart,
    /// so each waiting request's line goes in however late the writer runs, and the
    /// writer takes the bridge's own first. Past `queue_max`, a caller is refused at once
    /// and counted; a place let go is given back.
    #[tokio::test]
    async fn a_caller_let_in_keeps_its_place_beside_the_bridges_own_lines() {
        let mut config = Config::default();
        config.upstream_command.queue_max = 2;
        let metrics = Arc::new(StdioMetrics::register(&Registry::new()));
        let budget = MemoryBudget::new(1 << 20, IntGauge::new("b", "b").unwrap());
        let (shared, mut queued) = BridgeShared::new(
            &config,
            metrics.clone(),
            budget.clone(),
            fresh_mark(),
            None,
            None,
        );
        let first = Place::take(&shared).unwrap();
        let second = Place::take(&shared).unwrap();
        assert!(matches!(Place::take(&shared), Err(NotQueued::Full)));
        assert_eq!(metrics.queue_depth_now(), 2);
        for own in [&b"tools/list\n"[..], b"cancelled\n"] {
            shared.enqueue_own(Bytes::from_static(own)).unwrap();
        }
        assert_eq!(metrics.queue_depth_now(), 4);
        let line = |text: &'static str| Bytes::from_static(text.as_bytes());
        first
            .send(Some("a".into()), line("a\n"), budget.reservation())
            .unwrap();
        second
            .send(Some("b".into()), line("b\n"), budget.reservation())
            .unwrap();
        let late = shared.enqueue(line("late\n"), budget.reservation());
        assert!(matches!(late, Err(NotQueued::Full)));
        assert_eq!(metrics.queue_full_count(), 2);
        let own: Vec<_> = std::iter::from_fn(|| queued.own.try_recv().ok()).collect();
        let callers: Vec<_> = std::iter::from_fn(|| queued.callers.try_recv().ok()).collect();
        let lines = |lines: &[Outgoing]| lines.iter().map(|o| o.line.clone()).collect::<Vec<_>>();
        assert_eq!(lines(&own), [line("tools/list\n"), line("cancelled\n")]);
        assert_eq!(lines(&callers), [line("a\n"), line("b\n")]);
        let let_go = Place::take(&shared).unwrap();
        assert_eq!(metrics.queue_depth_now(), 1);
        drop(let_go);
        assert_eq!(metrics.queue_depth_now(), 0);
        assert_eq!(shared.queued(), 0);
    }
}
