//! Prometheus metric families, on a registry of our own, with closed label sets.
//!
//! Invariant: every label value comes from a closed enum (never a tool name, path, token
//! or error text), so a wrong label cannot compile and cardinality is fixed at start.
//! Every label value is initialised to zero so dashboards and alerts see it from the
//! first scrape.

mod auth;
mod fairness;
mod labels;
mod ops;
mod reload;
mod tools;

pub use labels::{Listener, MethodClass, Outcome, SseEvent, StatusClass};
pub use ops::Held;
pub use reload::ConfigReload;
pub use tools::{HandleResult, IdempotencyResult};

use crate::error::ErrorKind;
use crate::store::StoreKind;
use crate::token::Reject;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Outcomes of verifying an inbound `requestState` (`result` label, design §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyResult {
    Ok,
    Rejected(Reject),
}

impl VerifyResult {
    fn as_str(self) -> &'static str {
        match self {
            VerifyResult::Ok => "ok",
            VerifyResult::Rejected(r) => r.as_str(),
        }
    }
}

/// The `result` label values of the contract, including those of single-use stores.
const VERIFY_LABELS: [&str; 10] = [
    "ok",
    "malformed",
    "unknown_key",
    "expired",
    "binding",
    "audience",
    "principal",
    "replayed",
    "store_unavailable",
    "revoked",
];

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
}

impl Consumption {
    pub const ALL: [Consumption; 6] = [
        Consumption::Consumed,
        Consumption::Replayed,
        Consumption::StoreUnavailable,
        Consumption::Full,
        Consumption::Quota,
        Consumption::Released,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Consumption::Consumed => "consumed",
            Consumption::Replayed => "replayed",
            Consumption::StoreUnavailable => "store_unavailable",
            Consumption::Full => "full",
            Consumption::Quota => "quota",
            Consumption::Released => "released",
        }
    }
}

const STORES: [StoreKind; 2] = [StoreKind::Memory, StoreKind::Redis];

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

impl MrtrRefusal {
    pub const ALL: [MrtrRefusal; 6] = [
        MrtrRefusal::MissingCapability,
        MrtrRefusal::UnknownInputMethod,
        MrtrRefusal::QuestionsTooLarge,
        MrtrRefusal::InvalidAnswer,
        MrtrRefusal::RoundLimit,
        MrtrRefusal::FlowLimit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MrtrRefusal::MissingCapability => "missing_capability",
            MrtrRefusal::UnknownInputMethod => "unknown_input_method",
            MrtrRefusal::QuestionsTooLarge => "questions_too_large",
            MrtrRefusal::InvalidAnswer => "invalid_answer",
            MrtrRefusal::RoundLimit => "round_limit",
            MrtrRefusal::FlowLimit => "flow_limit",
        }
    }
}

/// What kind of traffic a request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A POSTed JSON-RPC message through the gate.
    Mcp,
    /// A body-less request (GET SSE streams, DELETE) or a configured passthrough path.
    Passthrough,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Route::Mcp => "mcp",
            Route::Passthrough => "passthrough",
        }
    }
}

/// Why a response stream was cut or a response replaced by an internal error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealFailure {
    NonStringState,
    StateTooLarge,
    UnparseableBody,
    UnsupportedEncoding,
    EventTooLarge,
    NoRequestContext,
    AmbiguousKey,
    UpstreamBodyError,
    UnknownContentType,
    ResponseTooLarge,
    /// A 2xx answer to an MCP request that is neither JSON, SSE nor empty.
    UnexpectedContentType,
    /// A transfer coding other than `chunked` (`gzip, chunked`): the client would decode
    /// what the sealer could not read.
    TransferCoding,
    /// Buffering the response would exceed `limits.max_buffered_bytes`.
    OverBudget,
    /// An informational status (`101 Switching Protocols`) the sidecar never asked for.
    UnexpectedStatus,
}

impl SealFailure {
    pub const ALL: [SealFailure; 14] = [
        SealFailure::NonStringState,
        SealFailure::StateTooLarge,
        SealFailure::UnparseableBody,
        SealFailure::UnsupportedEncoding,
        SealFailure::EventTooLarge,
        SealFailure::NoRequestContext,
        SealFailure::AmbiguousKey,
        SealFailure::UpstreamBodyError,
        SealFailure::UnknownContentType,
        SealFailure::ResponseTooLarge,
        SealFailure::UnexpectedContentType,
        SealFailure::TransferCoding,
        SealFailure::OverBudget,
        SealFailure::UnexpectedStatus,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SealFailure::NonStringState => "non_string_state",
            SealFailure::StateTooLarge => "state_too_large",
            SealFailure::UnparseableBody => "unparseable_body",
            SealFailure::UnsupportedEncoding => "unsupported_encoding",
            SealFailure::EventTooLarge => "event_too_large",
            SealFailure::NoRequestContext => "no_request_context",
            SealFailure::AmbiguousKey => "ambiguous_key",
            SealFailure::UpstreamBodyError => "upstream_body_error",
            SealFailure::UnknownContentType => "unknown_content_type",
            SealFailure::ResponseTooLarge => "response_too_large",
            SealFailure::UnexpectedContentType => "unexpected_content_type",
            SealFailure::TransferCoding => "transfer_coding",
            SealFailure::OverBudget => "over_budget",
            SealFailure::UnexpectedStatus => "unexpected_status",
        }
    }
}

/// One request counted in `requests_in_flight` while alive.
#[derive(Debug)]
pub struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The sidecar's metrics.
pub struct Metrics {
    registry: Registry,
    sealed: IntCounter,
    verified: IntCounterVec,
    refused: IntCounterVec,
    seal_failures: IntCounterVec,
    input_responses_dropped: IntCounter,
    requests: IntCounterVec,
    in_flight: IntGauge,
    buffered_bytes: IntGauge,
    key_reloads: IntCounterVec,
    consumptions: IntCounterVec,
    store_latency: HistogramVec,
    mrtr_refusals: IntCounterVec,
    auth: auth::AuthMetrics,
    /// Latency, connections, streams, per-key tokens, build info ([`ops`]).
    ops: ops::OpsMetrics,
    /// Handles and idempotency keys ([`tools`]).
    tools: tools::ToolMetrics,
    /// Quota refusals and how full the memory store is ([`fairness`]).
    fairness: fairness::FairnessMetrics,
    /// Configuration and admin token reloads ([`reload`]).
    reload: reload::ReloadMetrics,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("mcp_state_guard".into()), None)
            .expect("a static prefix is valid");
        let sealed = IntCounter::new(
            "state_sealed_total",
            "Upstream requestStates sealed into tokens.",
        )
        .unwrap();
        let verified = IntCounterVec::new(
            Opts::new(
                "state_verified_total",
                "Inbound requestState tokens verified, by result.",
            ),
            &["result"],
        )
        .unwrap();
        let refused = IntCounterVec::new(
            Opts::new(
                "requests_refused_total",
                "Requests answered with an error by the sidecar, by reason.",
            ),
            &["reason"],
        )
        .unwrap();
        let seal_failures = IntCounterVec::new(
            Opts::new(
                "seal_failures_total",
                "Upstream responses replaced by an internal error because they could not be made safe, by reason.",
            ),
            &["reason"],
        )
        .unwrap();
        let input_responses_dropped = IntCounter::new(
            "input_responses_dropped_total",
            "inputResponses entries dropped because the round that minted the token did not ask for them.",
        )
        .unwrap();
        let requests = IntCounterVec::new(
            Opts::new("requests_total", "Requests received, by route."),
            &["route"],
        )
        .unwrap();
        let in_flight =
            IntGauge::new("requests_in_flight", "Requests (and streams) in progress.").unwrap();
        let buffered_bytes = IntGauge::new(
            "buffered_bytes",
            "Body bytes held by requests in flight, against limits.max_buffered_bytes.",
        )
        .unwrap();
        let key_reloads = IntCounterVec::new(
            Opts::new(
                "key_reloads_total",
                "Key file changes seen, by result (error keeps the previous keys).",
            ),
            &["result"],
        )
        .unwrap();
        let consumptions = IntCounterVec::new(
            Opts::new(
                "single_use_consumptions_total",
                "Single-use consumptions recorded in the store, by store and result.",
            ),
            &["store", "result"],
        )
        .unwrap();
        let store_latency = HistogramVec::new(
            HistogramOpts::new(
                "store_latency_seconds",
                "Time one single-use store call took, by store.",
            )
            .buckets(vec![
                0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                0.25, 0.5, 1.0,
            ]),
            &["store"],
        )
        .unwrap();
        let mrtr_refusals = IntCounterVec::new(
            Opts::new(
                "mrtr_refusals_total",
                "Rounds and retries stopped by a multi-round-request rule, by reason.",
            ),
            &["reason"],
        )
        .unwrap();
        for reason in MrtrRefusal::ALL {
            mrtr_refusals.with_label_values(&[reason.as_str()]);
        }
        for result in ["ok", "error"] {
            key_reloads.with_label_values(&[result]);
        }
        for store in STORES {
            store_latency.with_label_values(&[store.as_str()]);
            for result in Consumption::ALL {
                consumptions.with_label_values(&[store.as_str(), result.as_str()]);
            }
        }
        for label in VERIFY_LABELS {
            verified.with_label_values(&[label]);
        }
        for kind in ErrorKind::ALL {
            refused.with_label_values(&[kind.as_str()]);
        }
        for failure in SealFailure::ALL {
            seal_failures.with_label_values(&[failure.as_str()]);
        }
        for route in [Route::Mcp, Route::Passthrough] {
            requests.with_label_values(&[route.as_str()]);
        }
        for collector in [
            Box::new(sealed.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(verified.clone()),
            Box::new(refused.clone()),
            Box::new(seal_failures.clone()),
            Box::new(input_responses_dropped.clone()),
            Box::new(requests.clone()),
            Box::new(in_flight.clone()),
            Box::new(buffered_bytes.clone()),
            Box::new(key_reloads.clone()),
            Box::new(consumptions.clone()),
            Box::new(store_latency.clone()),
            Box::new(mrtr_refusals.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        let auth = auth::AuthMetrics::new(&registry);
        let ops = ops::OpsMetrics::register(&registry);
        let tools = tools::ToolMetrics::new(&registry);
        let fairness = fairness::FairnessMetrics::new(&registry);
        let reload = reload::ReloadMetrics::register(&registry);
        Self {
            reload,
            tools,
            fairness,
            auth,
            ops,
            registry,
            sealed,
            verified,
            refused,
            seal_failures,
            input_responses_dropped,
            requests,
            in_flight,
            buffered_bytes,
            key_reloads,
            consumptions,
            store_latency,
            mrtr_refusals,
        }
    }

    pub fn key_reload(&self, ok: bool) {
        self.key_reloads
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
    }

    pub fn consumption(&self, store: StoreKind, result: Consumption) {
        self.consumptions
            .with_label_values(&[store.as_str(), result.as_str()])
            .inc();
    }

    pub fn observe_store(&self, store: StoreKind, seconds: f64) {
        self.store_latency
            .with_label_values(&[store.as_str()])
            .observe(seconds);
    }

    pub fn mrtr_refused(&self, reason: MrtrRefusal) {
        self.mrtr_refusals
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    pub fn mrtr_refusal_count(&self, reason: MrtrRefusal) -> u64 {
        self.mrtr_refusals
            .with_label_values(&[reason.as_str()])
            .get()
    }

    pub fn consumption_count(&self, store: StoreKind, result: Consumption) -> u64 {
        self.consumptions
            .with_label_values(&[store.as_str(), result.as_str()])
            .get()
    }

    pub fn sealed(&self) {
        self.sealed.inc();
    }

    pub fn verified(&self, result: VerifyResult) {
        self.verified.with_label_values(&[result.as_str()]).inc();
    }

    pub fn refused(&self, kind: ErrorKind) {
        self.refused.with_label_values(&[kind.as_str()]).inc();
    }

    pub fn seal_failed(&self, failure: SealFailure) {
        self.seal_failures
            .with_label_values(&[failure.as_str()])
            .inc();
    }

    pub fn input_responses_dropped(&self, n: usize) {
        self.input_responses_dropped.inc_by(n as u64);
    }

    pub fn request(&self, route: Route) {
        self.requests.with_label_values(&[route.as_str()]).inc();
    }

    /// The gauge the memory budget keeps equal to the bytes it has handed out.
    pub fn buffered_bytes(&self) -> &IntGauge {
        &self.buffered_bytes
    }

    /// Count a request in flight until the guard is dropped (with the response body, so
    /// streams count for as long as they run, and a client that goes away decrements).
    pub fn in_flight_guard(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    pub fn in_flight(&self) -> &IntGauge {
        &self.in_flight
    }

    /// The registry, for components that add their own families.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Text exposition format 0.0.4.
    pub fn render(&self) -> String {
        self.ops.refresh();
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// Read one counter value back (tests and health checks).
    pub fn verified_count(&self, label: &str) -> u64 {
        self.verified.with_label_values(&[label]).get()
    }

    pub fn refused_count(&self, kind: ErrorKind) -> u64 {
        self.refused.with_label_values(&[kind.as_str()]).get()
    }

    pub fn seal_failure_count(&self, failure: SealFailure) -> u64 {
        self.seal_failures
            .with_label_values(&[failure.as_str()])
            .get()
    }

    pub fn sealed_count(&self) -> u64 {
        self.sealed.get()
    }

    pub fn key_reload_count(&self, ok: bool) -> u64 {
        self.key_reloads
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .get()
    }

    pub fn input_responses_dropped_count(&self) -> u64 {
        self.input_responses_dropped.get()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AuthFailure;

    #[test]
    fn contract_names_are_exposed_with_every_label_at_zero() {
        let m = Metrics::new();
        let text = m.render();
        assert!(text.contains("mcp_state_guard_state_sealed_total 0"));
        for label in VERIFY_LABELS {
            assert!(
                text.contains(&format!(
                    "mcp_state_guard_state_verified_total{{result=\"{label}\"}} 0"
                )),
                "{label}"
            );
        }
        for reason in AuthFailure::ALL {
            let series = format!(
                "mcp_state_guard_auth_failures_total{{reason=\"{}\"}} 0",
                reason.as_str()
            );
            assert!(text.contains(&series), "{series}");
        }
        m.verified(VerifyResult::Rejected(Reject::Binding));
        m.sealed();
        let text = m.render();
        assert!(text.contains("mcp_state_guard_state_verified_total{result=\"binding\"} 1"));
        assert!(text.contains("mcp_state_guard_state_sealed_total 1"));
    }

    #[test]
    fn every_reject_reason_is_a_contract_label() {
        for r in Reject::ALL {
            assert!(VERIFY_LABELS.contains(&r.as_str()));
        }
    }
}
