//! Who may reach the child, and how much of it: only requests the proxy's gated route
//! marked with this process's secret (a passthrough path, or anything else that did not
//! go through the gate, is refused), each caller within its share of the requests at the
//! child, and requests waiting for a child that is not up within `queue_max`.
//!
//! Invariant: a request is at the child (queued, waiting for it, or in progress there)
//! only while it holds a [`QueueSlot`] of its owner's share; a waiting request only while it
//! holds a [`Waiting`] place in the queue. Both are given back when dropped.

use super::{BridgeShared, NotQueued};
use http::{HeaderMap, HeaderValue};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use subtle::ConstantTimeEq;

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

/// A request's place in the queue while it waits for the child to come up.
pub(super) struct Waiting(Arc<BridgeShared>);

impl Waiting {
    /// A place, or [`NotQueued::Full`] when `queue_max` lines and requests wait already.
    pub(super) fn take(shared: &Arc<BridgeShared>) -> Result<Self, NotQueued> {
        let taken = shared
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                let lines = shared.queue.max_capacity() - shared.queue.capacity();
                (lines + waiting < shared.queue_max).then_some(waiting + 1)
            });
        shared.metrics.queue_depth(shared.queued());
        match taken {
            Ok(_) => Ok(Self(shared.clone())),
            Err(_) => {
                shared.metrics.queue_full();
                Err(NotQueued::Full)
            }
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.queue_depth(self.0.queued());
    }
}
