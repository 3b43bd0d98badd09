//! The refusal families: requests answered with an error by the sidecar
//! (`requests_refused_total{reason}`, one label per row of [`ErrorKind`]), refusals
//! because one caller's share was used up (`quota_refusals_total{share}`), and how near
//! each shared store is to refusing everyone (`store_fill_ratio{resource}`).
//!
//! Invariant: the labels are the closed sets of this floor ([`ErrorKind`], [`Share`],
//! [`Resource`]), every one created at zero; the fill gauges are set from the store
//! itself when `/metrics` or `/readyz` is served, never guessed.

use super::{ErrorKind, Resource, Share};
use crate::registry::{Family, Registry, closed_label};
use prometheus::{GaugeVec, IntCounterVec};

closed_label!(ErrorKind);

/// Refusals and how full the shared stores are.
pub struct RefusalMetrics {
    refused: Family<IntCounterVec, ErrorKind>,
    quota_refusals: Family<IntCounterVec, Share>,
    store_fill: Family<GaugeVec, Resource>,
}

impl RefusalMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            refused: registry.counters(
                "requests_refused_total",
                "Requests answered with an error by the sidecar, by reason.",
                "reason",
            ),
            quota_refusals: registry.counters(
                "quota_refusals_total",
                "Requests and connections refused with 429 because one caller's share of a bounded shared resource was used up, by share.",
                "share",
            ),
            store_fill: registry.float_gauges(
                "store_fill_ratio",
                "How full the memory store is, 0 to 1, by resource (single_use: consumed ids of memory_max_entries; idempotency: bytes of memory_max_bytes). At 1 new entries are refused with 503 until some expire.",
                "resource",
            ),
        }
    }

    pub(crate) fn refused(&self, kind: ErrorKind) {
        self.refused.at(kind).inc();
    }

    pub fn refused_count(&self, kind: ErrorKind) -> u64 {
        self.refused.at(kind).get()
    }

    /// One caller's share of `share` was used up: a request (or connection) refused.
    pub(crate) fn quota_refused(&self, share: Share) {
        self.quota_refusals.at(share).inc();
    }

    pub fn quota_refusal_count(&self, share: Share) -> u64 {
        self.quota_refusals.at(share).get()
    }

    /// How full `resource` is now: `used` of `bound`.
    pub(crate) fn store_fill(&self, resource: Resource, used: u64, bound: u64) {
        let ratio = if bound == 0 {
            0.0
        } else {
            (used as f64 / bound as f64).min(1.0)
        };
        self.store_fill.at(resource).set(ratio);
    }

    pub fn store_fill_ratio(&self, resource: Resource) -> f64 {
        self.store_fill.at(resource).get()
    }
}
