//! The fairness families: refusals because one caller's share of a bounded shared
//! resource was used up, and how full the memory store's bounds are.
//!
//! Invariant: `share` and `resource` label values come from closed enums
//! ([`Share`], [`Resource`]), every one created at zero; the fill gauges are set from
//! the store itself when `/metrics` or `/readyz` is served, never guessed.

use super::Metrics;
use crate::error::{Resource, Share};
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry};

const RESOURCES: [Resource; 2] = [Resource::SingleUse, Resource::Idempotency];

pub(super) struct FairnessMetrics {
    quota_refusals: IntCounterVec,
    store_fill: GaugeVec,
}

impl FairnessMetrics {
    pub(super) fn new(registry: &Registry) -> Self {
        let quota_refusals = IntCounterVec::new(
            Opts::new(
                "quota_refusals_total",
                "Requests and connections refused with 429 because one caller's share of a bounded shared resource was used up, by share.",
            ),
            &["share"],
        )
        .unwrap();
        let store_fill = GaugeVec::new(
            Opts::new(
                "store_fill_ratio",
                "How full the memory store is, 0 to 1, by resource (single_use: consumed ids of memory_max_entries; idempotency: bytes of memory_max_bytes). At 1 new entries are refused with 503 until some expire.",
            ),
            &["resource"],
        )
        .unwrap();
        for share in Share::ALL {
            quota_refusals.with_label_values(&[share.as_str()]);
        }
        for resource in RESOURCES {
            store_fill.with_label_values(&[resource.as_str()]);
        }
        registry
            .register(Box::new(quota_refusals.clone()))
            .expect("metric names are unique");
        registry
            .register(Box::new(store_fill.clone()))
            .expect("metric names are unique");
        Self {
            quota_refusals,
            store_fill,
        }
    }
}

impl Metrics {
    /// One caller's share of `share` was used up: a request (or connection) refused.
    pub fn quota_refused(&self, share: Share) {
        self.fairness
            .quota_refusals
            .with_label_values(&[share.as_str()])
            .inc();
    }

    pub fn quota_refusal_count(&self, share: Share) -> u64 {
        self.fairness
            .quota_refusals
            .with_label_values(&[share.as_str()])
            .get()
    }

    /// How full `resource` is now: `used` of `bound`.
    pub fn store_fill(&self, resource: Resource, used: u64, bound: u64) {
        let ratio = if bound == 0 {
            0.0
        } else {
            (used as f64 / bound as f64).min(1.0)
        };
        self.fairness
            .store_fill
            .with_label_values(&[resource.as_str()])
            .set(ratio);
    }

    pub fn store_fill_ratio(&self, resource: Resource) -> f64 {
        self.fairness
            .store_fill
            .with_label_values(&[resource.as_str()])
            .get()
    }
}
