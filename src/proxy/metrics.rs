//! The data path's families: states sealed and verified, responses that could not be
//! made safe, requests by route and in flight, buffered bytes, latency (and the part
//! the sidecar adds) by method class and outcome, upstream status classes, SSE events
//! and streams.
//!
//! Invariant: as for every family, labels come from closed sets ([`VerifyResult`],
//! [`SealFailure`], [`Route`], [`MethodClass`], [`Outcome`], [`StatusClass`],
//! [`SseEvent`]) and every series exists at zero from the first scrape.

use crate::auth::AuthMetrics;
use crate::error::RefusalMetrics;
use crate::mcp::MethodClass;
use crate::policy::PolicyMetrics;
use crate::registry::{Family, Family2, Held, Label, Registry};
use crate::telemetry::audit::Outcome;
use crate::token::{KeyMetrics, Reject};
use crate::tools::ToolMetrics;
use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGauge};
use std::sync::Arc;
use std::time::Duration;

/// Outcomes of verifying an inbound `requestState` (`result` label, design §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VerifyResult {
    Ok,
    Rejected(Reject),
    /// A good token whose single-use consumption no replica of the store confirmed in
    /// time: released, the retry refused with 503 (not the frozen error: the state is
    /// good and stays spendable).
    Unconfirmed,
}

impl Label for VerifyResult {
    fn all() -> impl Iterator<Item = Self> {
        std::iter::once(VerifyResult::Ok)
            .chain(Reject::ALL.into_iter().map(VerifyResult::Rejected))
            .chain(std::iter::once(VerifyResult::Unconfirmed))
    }

    fn as_str(self) -> &'static str {
        match self {
            VerifyResult::Ok => "ok",
            VerifyResult::Rejected(r) => r.as_str(),
            VerifyResult::Unconfirmed => "unconfirmed",
        }
    }

    fn index(self) -> usize {
        match self {
            VerifyResult::Ok => 0,
            VerifyResult::Rejected(r) => 1 + Label::index(r),
            VerifyResult::Unconfirmed => 1 + Reject::ALL.len(),
        }
    }
}

/// What kind of traffic a request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// A POSTed JSON-RPC message through the gate.
    Mcp,
    /// A body-less request (GET SSE streams, DELETE) or a configured passthrough path.
    Passthrough,
}

crate::registry::labels!(pub(crate) Route {
    Mcp => "mcp",
    Passthrough => "passthrough",
});

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

crate::registry::labels!(pub SealFailure {
    NonStringState => "non_string_state",
    StateTooLarge => "state_too_large",
    UnparseableBody => "unparseable_body",
    UnsupportedEncoding => "unsupported_encoding",
    EventTooLarge => "event_too_large",
    NoRequestContext => "no_request_context",
    AmbiguousKey => "ambiguous_key",
    UpstreamBodyError => "upstream_body_error",
    UnknownContentType => "unknown_content_type",
    ResponseTooLarge => "response_too_large",
    UnexpectedContentType => "unexpected_content_type",
    TransferCoding => "transfer_coding",
    OverBudget => "over_budget",
    UnexpectedStatus => "unexpected_status",
});

/// An upstream response status class (`class` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    Informational,
    Success,
    Redirection,
    ClientError,
    ServerError,
}

impl StatusClass {
    pub(crate) fn of(status: http::StatusCode) -> Self {
        match status.as_u16() {
            ..200 => StatusClass::Informational,
            200..300 => StatusClass::Success,
            300..400 => StatusClass::Redirection,
            400..500 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }
}

crate::registry::labels!(pub StatusClass {
    Informational => "1xx",
    Success => "2xx",
    Redirection => "3xx",
    ClientError => "4xx",
    ServerError => "5xx",
});

/// What became of one upstream SSE event (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseEvent {
    /// Carried a `requestState`, now sealed.
    Sealed,
    /// Passed byte for byte (notifications, results without state, comments).
    Passed,
    /// Replaced by an internal error that ends the stream (it could not be made safe).
    Withheld,
}

crate::registry::labels!(pub SseEvent {
    Sealed => "sealed",
    Passed => "passed",
    Withheld => "withheld",
});

/// Request latency through the upstream: 100 µs (a refusal) to 60 s (a slow tool).
const REQUEST_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 15.0, 60.0,
];

/// The sidecar's own share: 10 µs (a GET passed through) to 2.5 s (a large body on a
/// starved CPU).
const OVERHEAD_BUCKETS: [f64; 16] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 2.5,
];

/// What the data path counts into: its own families and those of the floors below it
/// whose rules it applies (refusals, MRTR rules, keys, tool features, callers). The
/// wiring hands it over; each phase reads the part it counts.
#[derive(Clone)]
pub struct Meters {
    pub(crate) path: Arc<PathMetrics>,
    pub(crate) refusals: Arc<RefusalMetrics>,
    pub(crate) policy: Arc<PolicyMetrics>,
    pub(crate) keys: Arc<KeyMetrics>,
    pub(crate) tools: Arc<ToolMetrics>,
    pub(crate) auth: Arc<AuthMetrics>,
}

impl Meters {
    /// Every family the data path counts into, on `registry` (tests and benches; the
    /// process wires its own).
    pub fn register(registry: &Registry) -> Self {
        Self {
            path: Arc::new(PathMetrics::register(registry)),
            refusals: Arc::new(RefusalMetrics::register(registry)),
            policy: Arc::new(PolicyMetrics::register(registry)),
            keys: Arc::new(KeyMetrics::register(registry)),
            tools: Arc::new(ToolMetrics::register(registry)),
            auth: Arc::new(AuthMetrics::register(registry)),
        }
    }
}

/// The data path's families.
pub struct PathMetrics {
    sealed: IntCounter,
    verified: Family<IntCounterVec, VerifyResult>,
    seal_failures: Family<IntCounterVec, SealFailure>,
    input_responses_dropped: IntCounter,
    requests: Family<IntCounterVec, Route>,
    in_flight: IntGauge,
    buffered_bytes: IntGauge,
    request_duration: Family2<HistogramVec, MethodClass, Outcome>,
    overhead: Family<HistogramVec, MethodClass>,
    upstream_responses: Family<IntCounterVec, StatusClass>,
    sse_events: Family<IntCounterVec, SseEvent>,
    sse_streams: IntGauge,
}

impl PathMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            sealed: registry.counter(
                "state_sealed_total",
                "Upstream requestStates sealed into tokens.",
            ),
            verified: registry.counters(
                "state_verified_total",
                "Inbound requestState tokens verified, by result.",
                "result",
            ),
            seal_failures: registry.counters(
                "seal_failures_total",
                "Upstream responses replaced by an internal error because they could not be made safe, by reason.",
                "reason",
            ),
            input_responses_dropped: registry.counter(
                "input_responses_dropped_total",
                "inputResponses entries dropped because the round that minted the token did not ask for them.",
            ),
            requests: registry.counters("requests_total", "Requests received, by route.", "route"),
            in_flight: registry.gauge("requests_in_flight", "Requests (and streams) in progress."),
            buffered_bytes: registry.gauge(
                "buffered_bytes",
                "Body bytes held by requests in flight, against limits.max_buffered_bytes.",
            ),
            request_duration: registry.histograms2(
                "request_duration_seconds",
                "Time from a request's head to its response head (through the upstream), by method class and outcome.",
                &REQUEST_BUCKETS,
                ["method", "outcome"],
            ),
            overhead: registry.histograms(
                "overhead_seconds",
                "Time the sidecar adds to a request: request head to response head, minus the wait for the upstream's response head.",
                &OVERHEAD_BUCKETS,
                "method",
            ),
            upstream_responses: registry.counters(
                "upstream_responses_total",
                "Upstream response heads received, by status class.",
                "class",
            ),
            sse_events: registry.counters(
                "sse_events_total",
                "Upstream SSE events relayed, by what became of them.",
                "result",
            ),
            sse_streams: registry.gauge(
                "sse_streams_open",
                "SSE response streams being relayed now.",
            ),
        }
    }

    pub(crate) fn sealed(&self) {
        self.sealed.inc();
    }

    pub fn sealed_count(&self) -> u64 {
        self.sealed.get()
    }

    pub(crate) fn verified(&self, result: VerifyResult) {
        self.verified.at(result).inc();
    }

    /// Read one `state_verified_total` series back by its label (tests and health).
    pub fn verified_count(&self, label: &str) -> u64 {
        let result = VerifyResult::all()
            .find(|result| result.as_str() == label)
            .unwrap_or_else(|| panic!("`{label}` is not a state_verified_total result"));
        self.verified.at(result).get()
    }

    pub(crate) fn seal_failed(&self, failure: SealFailure) {
        self.seal_failures.at(failure).inc();
    }

    pub fn seal_failure_count(&self, failure: SealFailure) -> u64 {
        self.seal_failures.at(failure).get()
    }

    pub(crate) fn input_responses_dropped(&self, n: usize) {
        self.input_responses_dropped.inc_by(n as u64);
    }

    pub fn input_responses_dropped_count(&self) -> u64 {
        self.input_responses_dropped.get()
    }

    pub(crate) fn request(&self, route: Route) {
        self.requests.at(route).inc();
    }

    /// The gauge the memory budget keeps equal to the bytes it has handed out.
    pub fn buffered_bytes(&self) -> &IntGauge {
        &self.buffered_bytes
    }

    /// Count a request in flight until the guard is dropped (with the response body, so
    /// streams count for as long as they run, and a client that goes away decrements).
    pub(crate) fn in_flight_guard(&self) -> Held {
        Held::take(&self.in_flight)
    }

    pub fn in_flight(&self) -> &IntGauge {
        &self.in_flight
    }

    /// One request's time to its response head, and the part of it that was not the
    /// upstream's (`upstream_wait`: time spent waiting for its response head).
    pub(crate) fn observe_request(
        &self,
        method: MethodClass,
        outcome: Outcome,
        elapsed: Duration,
        upstream_wait: Duration,
    ) {
        self.request_duration
            .at(method, outcome)
            .observe(elapsed.as_secs_f64());
        self.overhead
            .at(method)
            .observe(elapsed.saturating_sub(upstream_wait).as_secs_f64());
    }

    /// Requests observed for `method` with `outcome`.
    pub fn request_count(&self, method: MethodClass, outcome: Outcome) -> u64 {
        self.request_duration.at(method, outcome).get_sample_count()
    }

    pub(crate) fn upstream_response(&self, status: http::StatusCode) {
        self.upstream_responses.at(StatusClass::of(status)).inc();
    }

    pub fn upstream_response_count(&self, class: StatusClass) -> u64 {
        self.upstream_responses.at(class).get()
    }

    pub(crate) fn sse_event(&self, event: SseEvent) {
        self.sse_events.at(event).inc();
    }

    pub fn sse_event_count(&self, event: SseEvent) -> u64 {
        self.sse_events.at(event).get()
    }

    /// Count an SSE stream as open until the guard is dropped (with the stream's body).
    pub(crate) fn sse_stream(&self) -> Held {
        Held::take(&self.sse_streams)
    }

    pub fn sse_streams_open(&self) -> i64 {
        self.sse_streams.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `result` label values of the contract (design §5), and `unconfirmed` after them.
    const VERIFY_LABELS: [&str; 11] = [
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
        "unconfirmed",
    ];

    #[test]
    fn the_verify_results_are_the_contracts_labels() {
        let labels: Vec<&str> = VerifyResult::all().map(VerifyResult::as_str).collect();
        assert_eq!(labels, VERIFY_LABELS);
    }

    #[test]
    fn contract_names_are_exposed_with_every_label_at_zero() {
        let registry = Registry::new();
        let m = PathMetrics::register(&registry);
        let text = registry.render();
        assert!(text.contains("mcp_state_guard_state_sealed_total 0"));
        for label in VERIFY_LABELS {
            let series = format!("mcp_state_guard_state_verified_total{{result=\"{label}\"}} 0");
            assert!(text.contains(&series), "{series}");
        }
        for method in MethodClass::ALL {
            for outcome in Outcome::ALL {
                let series = format!(
                    "mcp_state_guard_request_duration_seconds_count{{method=\"{}\",outcome=\"{}\"}} 0",
                    method.as_str(),
                    outcome.as_str()
                );
                assert!(text.contains(&series), "{series}");
            }
        }
        for needle in [
            "mcp_state_guard_overhead_seconds_bucket{method=\"get_stream\",le=\"0.00001\"} 0",
            "mcp_state_guard_upstream_responses_total{class=\"5xx\"} 0",
            "mcp_state_guard_sse_events_total{result=\"withheld\"} 0",
            "mcp_state_guard_sse_streams_open 0",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        m.verified(VerifyResult::Rejected(Reject::Binding));
        m.sealed();
        let text = registry.render();
        assert!(text.contains("mcp_state_guard_state_verified_total{result=\"binding\"} 1"));
        assert!(text.contains("mcp_state_guard_state_sealed_total 1"));
        assert_eq!(m.verified_count("binding"), 1);
    }

    #[test]
    fn overhead_excludes_the_upstream_wait() {
        let registry = Registry::new();
        let m = PathMetrics::register(&registry);
        m.observe_request(
            MethodClass::ToolsCall,
            Outcome::Ok,
            Duration::from_millis(200),
            Duration::from_millis(199),
        );
        let text = registry.render();
        // 1 ms of 200: in the 1 ms bucket and every larger one, not in the 500 µs one.
        assert!(text.contains(
            "mcp_state_guard_overhead_seconds_bucket{method=\"tools/call\",le=\"0.0005\"} 0"
        ));
        assert!(text.contains(
            "mcp_state_guard_overhead_seconds_bucket{method=\"tools/call\",le=\"0.001\"} 1"
        ));
        assert_eq!(m.request_count(MethodClass::ToolsCall, Outcome::Ok), 1);
    }
}
