//! The rules' families: single-use consumptions by store and result
//! (`single_use_consumptions_total{store,result}`), the time one store call took
//! (`store_latency_seconds{store}`), and flows stopped by a multi-round-request rule
//! (`mrtr_refusals_total{reason}`).
//!
//! Invariant: as for every family, labels come from closed sets ([`StoreKind`],
//! [`Consumption`], [`MrtrRefusal`]) and every series exists at zero from the first
//! scrape.

use crate::registry::{Family, Family2, Registry};
use crate::store::StoreKind;
use prometheus::{HistogramVec, IntCounterVec};

/// Outcomes of recording a single-use consumption (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumption {
    Consumed,
    Replayed,
    StoreUnavailable,
    Full,
    /// The caller held its share of consumed ids (`max_entries_per_principal`).
    Quota,
    Released,
    /// No replica confirmed the consumption in time (`WAIT`): released, the retry refused.
    Unconfirmed,
}

crate::registry::labels!(pub Consumption {
    Consumed => "consumed",
    Replayed => "replayed",
    StoreUnavailable => "store_unavailable",
    Full => "full",
    Quota => "quota",
    Released => "released",
    Unconfirmed => "unconfirmed",
});

/// Why a flow was stopped by an MRTR rule (`reason` label of `mrtr_refusals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrtrRefusal {
    /// The upstream asked for what the client did not declare (`-32021`).
    MissingCapability,
    /// The upstream asked with a method MCP does not define (`-32021`).
    UnknownInputMethod,
    /// The questions of a round would not fit in a token (too large, or holding a number
    /// the token's encoding cannot carry).
    QuestionsTooLarge,
    /// An answer did not answer its question (`-32602`).
    InvalidAnswer,
    /// The upstream asked once more than `mrtr.max_rounds`.
    RoundLimit,
    /// A retry of a flow older than `mrtr.max_flow_seconds`.
    FlowLimit,
}

crate::registry::labels!(pub MrtrRefusal {
    MissingCapability => "missing_capability",
    UnknownInputMethod => "unknown_input_method",
    QuestionsTooLarge => "questions_too_large",
    InvalidAnswer => "invalid_answer",
    RoundLimit => "round_limit",
    FlowLimit => "flow_limit",
});

/// Store calls: 50 µs (memory) to 1 s (a Redis at its timeout).
const STORE_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Single-use consumptions, store latency and MRTR refusals.
pub struct PolicyMetrics {
    consumptions: Family2<IntCounterVec, StoreKind, Consumption>,
    store_latency: Family<HistogramVec, StoreKind>,
    mrtr_refusals: Family<IntCounterVec, MrtrRefusal>,
}

impl PolicyMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            consumptions: registry.counters2(
                "single_use_consumptions_total",
                "Single-use consumptions recorded in the store, by store and result.",
                ["store", "result"],
            ),
            store_latency: registry.histograms(
                "store_latency_seconds",
                "Time one single-use store call took, by store.",
                &STORE_BUCKETS,
                "store",
            ),
            mrtr_refusals: registry.counters(
                "mrtr_refusals_total",
                "Rounds and retries stopped by a multi-round-request rule, by reason.",
                "reason",
            ),
        }
    }

    pub(crate) fn consumption(&self, store: StoreKind, result: Consumption) {
        self.consumptions.at(store, result).inc();
    }

    pub fn consumption_count(&self, store: StoreKind, result: Consumption) -> u64 {
        self.consumptions.at(store, result).get()
    }

    pub(crate) fn observe_store(&self, store: StoreKind, seconds: f64) {
        self.store_latency.at(store).observe(seconds);
    }

    pub(crate) fn mrtr_refused(&self, reason: MrtrRefusal) {
        self.mrtr_refusals.at(reason).inc();
    }

    pub fn mrtr_refusal_count(&self, reason: MrtrRefusal) -> u64 {
        self.mrtr_refusals.at(reason).get()
    }
}
