//! The families operators alert on: request latency by method class and outcome, the
//! time the sidecar itself adds, upstream status classes, SSE events and streams, client
//! connections, admin requests refused for their `Host`, tokens and sealed handles minted
//! and opened per key id, the key ring's age, build info.
//!
//! Invariant: every label value comes from a closed enum, except `kid`, which comes only
//! from the key ring in use: a series exists for each key of the ring (created at zero
//! when the ring is loaded) and is removed when a reload drops the key, so the number of
//! series is bounded by the ring and a retired key's series ends.

use super::Metrics;
use super::labels::{Listener, MethodClass, Outcome, SseEvent, StatusClass};
use crate::token::KeyId;
use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

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

/// One unit of a gauge, given back when dropped (an open connection, an open stream).
#[derive(Debug)]
pub struct Held(IntGauge);

impl Held {
    fn take(gauge: &IntGauge) -> Self {
        gauge.inc();
        Held(gauge.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The families of this module; a field of [`Metrics`].
pub(super) struct OpsMetrics {
    request_duration: HistogramVec,
    overhead: HistogramVec,
    upstream_responses: IntCounterVec,
    sse_events: IntCounterVec,
    sse_streams: IntGauge,
    connections: IntGaugeVec,
    connection_limit_waits: IntCounterVec,
    admin_misdirected: IntCounter,
    minted: IntCounterVec,
    opened: IntCounterVec,
    handles_minted: IntCounterVec,
    handles_opened: IntCounterVec,
    minting: IntGaugeVec,
    ring_age: prometheus::Gauge,
    tasks: IntGauge,
    /// The ring's key ids, minting key first. Read-locked around every per-kid
    /// increment and write-locked around a ring change, so an increment racing a reload
    /// can never bring back the series of a key the reload removed.
    kids: RwLock<Vec<KeyId>>,
    /// When the key file was last read back valid; `None` without a key file.
    ring_confirmed: Mutex<Option<Instant>>,
}

impl OpsMetrics {
    pub(super) fn register(registry: &Registry) -> Self {
        let histogram = |name: &str, help: &str, buckets: &[f64], labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            HistogramVec::new(opts, labels).expect("valid histogram")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter")
        };
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge")
        };
        let ops = Self {
            request_duration: histogram(
                "request_duration_seconds",
                "Time from a request's head to its response head (through the upstream), by method class and outcome.",
                &REQUEST_BUCKETS,
                &["method", "outcome"],
            ),
            overhead: histogram(
                "overhead_seconds",
                "Time the sidecar adds to a request: request head to response head, minus the wait for the upstream's response head.",
                &OVERHEAD_BUCKETS,
                &["method"],
            ),
            upstream_responses: counter(
                "upstream_responses_total",
                "Upstream response heads received, by status class.",
                &["class"],
            ),
            sse_events: counter(
                "sse_events_total",
                "Upstream SSE events relayed, by what became of them.",
                &["result"],
            ),
            sse_streams: IntGauge::new(
                "sse_streams_open",
                "SSE response streams being relayed now.",
            )
            .expect("valid gauge"),
            connections: gauge_vec(
                "client_connections_open",
                "Client connections open now, by listener.",
                &["listener"],
            ),
            connection_limit_waits: counter(
                "connection_limit_waits_total",
                "Times a listener stopped accepting because limits.max_connections (admin: a fixed allowance) were open.",
                &["listener"],
            ),
            admin_misdirected: IntCounter::new(
                "admin_requests_misdirected_total",
                "Admin listener requests answered 421 because their Host is not one the admin listener answers to (a DNS-rebinding defence).",
            )
            .expect("valid counter"),
            minted: counter(
                "tokens_minted_total",
                "Tokens minted, by the key id (8 hex digits) of the ring's minting key.",
                &["kid"],
            ),
            opened: counter(
                "tokens_opened_total",
                "Tokens that verified, by the key id that opened them; zero for an old key means it can be retired.",
                &["kid"],
            ),
            handles_minted: counter(
                "handles_minted_total",
                "Sealed handles minted, by the key id of the ring's minting key.",
                &["kid"],
            ),
            handles_opened: counter(
                "handles_opened_total",
                "Sealed handles that opened for their caller, by the key id that opened them; with tokens_opened_total, zero for an old key means it can be retired.",
                &["kid"],
            ),
            minting: gauge_vec(
                "key_ring_minting",
                "1 for the ring's minting key, 0 for the keys that only open, by key id.",
                &["kid"],
            ),
            tasks: IntGauge::new(
                "runtime_alive_tasks",
                "Tasks alive in the sidecar's runtime (connections, streams, pollers).",
            )
            .expect("valid gauge"),
            ring_age: prometheus::Gauge::new(
                "key_ring_age_seconds",
                "Seconds since the key file was last read back valid (grows only while it is unreadable or invalid; 0 without a key file).",
            )
            .expect("valid gauge"),
            kids: RwLock::new(Vec::new()),
            ring_confirmed: Mutex::new(None),
        };
        for method in MethodClass::ALL {
            ops.overhead.with_label_values(&[method.as_str()]);
            for outcome in Outcome::ALL {
                ops.request_duration
                    .with_label_values(&[method.as_str(), outcome.as_str()]);
            }
        }
        for class in StatusClass::ALL {
            ops.upstream_responses.with_label_values(&[class.as_str()]);
        }
        for event in SseEvent::ALL {
            ops.sse_events.with_label_values(&[event.as_str()]);
        }
        for listener in Listener::ALL {
            ops.connections.with_label_values(&[listener.as_str()]);
            ops.connection_limit_waits
                .with_label_values(&[listener.as_str()]);
        }
        let build_info = gauge_vec(
            "build_info",
            "Always 1; the version and commit this binary was built from.",
            &["version", "commit"],
        );
        build_info
            .with_label_values(&[crate::version::VERSION, crate::version::COMMIT])
            .set(1);
        for collector in [
            Box::new(ops.request_duration.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(ops.overhead.clone()),
            Box::new(ops.upstream_responses.clone()),
            Box::new(ops.sse_events.clone()),
            Box::new(ops.sse_streams.clone()),
            Box::new(ops.connections.clone()),
            Box::new(ops.connection_limit_waits.clone()),
            Box::new(ops.admin_misdirected.clone()),
            Box::new(ops.minted.clone()),
            Box::new(ops.opened.clone()),
            Box::new(ops.handles_minted.clone()),
            Box::new(ops.handles_opened.clone()),
            Box::new(ops.minting.clone()),
            Box::new(ops.ring_age.clone()),
            Box::new(ops.tasks.clone()),
            Box::new(build_info),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        ops
    }

    /// Bring the key-age and task gauges up to date; called before every exposition.
    pub(super) fn refresh(&self) {
        let confirmed = *self.ring_confirmed.lock().expect("not poisoned");
        self.ring_age
            .set(confirmed.map_or(0.0, |at| at.elapsed().as_secs_f64()));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let alive = runtime.metrics().num_alive_tasks();
            self.tasks.set(i64::try_from(alive).unwrap_or(i64::MAX));
        }
    }
}

impl Metrics {
    /// One request's time to its response head, and the part of it that was not the
    /// upstream's (`upstream_wait`: time spent waiting for its response head).
    pub fn observe_request(
        &self,
        method: MethodClass,
        outcome: Outcome,
        elapsed: Duration,
        upstream_wait: Duration,
    ) {
        self.ops
            .request_duration
            .with_label_values(&[method.as_str(), outcome.as_str()])
            .observe(elapsed.as_secs_f64());
        self.ops
            .overhead
            .with_label_values(&[method.as_str()])
            .observe(elapsed.saturating_sub(upstream_wait).as_secs_f64());
    }

    pub fn upstream_response(&self, status: http::StatusCode) {
        self.ops
            .upstream_responses
            .with_label_values(&[StatusClass::of(status).as_str()])
            .inc();
    }

    pub fn sse_event(&self, event: SseEvent) {
        self.ops
            .sse_events
            .with_label_values(&[event.as_str()])
            .inc();
    }

    /// Count an SSE stream as open until the guard is dropped (with the stream's body).
    pub fn sse_stream(&self) -> Held {
        Held::take(&self.ops.sse_streams)
    }

    /// Count a client connection as open until the guard is dropped.
    pub fn connection(&self, listener: Listener) -> Held {
        Held::take(&self.ops.connections.with_label_values(&[listener.as_str()]))
    }

    pub fn connection_limit_reached(&self, listener: Listener) {
        self.ops
            .connection_limit_waits
            .with_label_values(&[listener.as_str()])
            .inc();
    }

    /// An admin request was refused with 421 for its `Host`.
    pub fn admin_misdirected(&self) {
        self.ops.admin_misdirected.inc();
    }

    pub fn admin_misdirected_count(&self) -> u64 {
        self.ops.admin_misdirected.get()
    }

    /// A token was minted under `kid` (counted only while `kid` is in the ring).
    pub fn token_minted(&self, kid: KeyId) {
        self.per_kid(&self.ops.minted, kid);
    }

    /// A token opened and verified under `kid`.
    pub fn token_opened(&self, kid: KeyId) {
        self.per_kid(&self.ops.opened, kid);
    }

    /// A sealed handle was minted under `kid`.
    pub fn handle_minted(&self, kid: KeyId) {
        self.per_kid(&self.ops.handles_minted, kid);
    }

    /// A sealed handle opened under `kid`.
    pub fn handle_opened(&self, kid: KeyId) {
        self.per_kid(&self.ops.handles_opened, kid);
    }

    fn per_kid(&self, family: &IntCounterVec, kid: KeyId) {
        let kids = self.ops.kids.read().expect("not poisoned");
        if kids.contains(&kid) {
            family.with_label_values(&[kid.hex().as_str()]).inc();
        }
    }

    /// A key ring is in use: a series per key (new keys start at zero), the series of
    /// keys it no longer holds removed, the minting key marked. `from_file`: it was read
    /// from the key file, whose age the ring age gauge now counts from.
    pub fn key_ring_loaded(&self, ring: &[KeyId], from_file: bool) {
        let mut kids = self.ops.kids.write().expect("not poisoned");
        for gone in kids.iter().filter(|kid| !ring.contains(kid)) {
            let label = gone.hex();
            for family in self.per_kid_families() {
                let _ = family.remove_label_values(&[label.as_str()]);
            }
            let _ = self.ops.minting.remove_label_values(&[label.as_str()]);
        }
        for (position, kid) in ring.iter().enumerate() {
            let label = kid.hex();
            for family in self.per_kid_families() {
                family.with_label_values(&[label.as_str()]);
            }
            self.ops
                .minting
                .with_label_values(&[label.as_str()])
                .set(i64::from(position == 0));
        }
        *kids = ring.to_vec();
        if from_file {
            self.key_file_confirmed();
        }
    }

    /// The key file was read again and still holds the ring in use.
    pub fn key_file_confirmed(&self) {
        *self.ops.ring_confirmed.lock().expect("not poisoned") = Some(Instant::now());
    }

    /// How long since the key file was last read back valid (`None`: no key file).
    pub fn key_ring_age(&self) -> Option<Duration> {
        let confirmed = *self.ops.ring_confirmed.lock().expect("not poisoned");
        confirmed.map(|at| at.elapsed())
    }

    fn per_kid_families(&self) -> [&IntCounterVec; 4] {
        [
            &self.ops.minted,
            &self.ops.opened,
            &self.ops.handles_minted,
            &self.ops.handles_opened,
        ]
    }

    /// Read a per-kid handle counter back (tests).
    pub fn handles_count(&self, minted: bool, kid: KeyId) -> Option<u64> {
        let [_, _, handles_minted, handles_opened] = self.per_kid_families();
        self.per_kid_count(
            if minted {
                handles_minted
            } else {
                handles_opened
            },
            kid,
        )
    }

    /// Read a per-kid counter back (tests, the runbook's arithmetic).
    pub fn tokens_count(&self, minted: bool, kid: KeyId) -> Option<u64> {
        let [tokens_minted, tokens_opened, _, _] = self.per_kid_families();
        self.per_kid_count(if minted { tokens_minted } else { tokens_opened }, kid)
    }

    fn per_kid_count(&self, family: &IntCounterVec, kid: KeyId) -> Option<u64> {
        let kids = self.ops.kids.read().expect("not poisoned");
        kids.contains(&kid)
            .then(|| family.with_label_values(&[kid.hex().as_str()]).get())
    }

    pub fn upstream_response_count(&self, class: StatusClass) -> u64 {
        self.ops
            .upstream_responses
            .with_label_values(&[class.as_str()])
            .get()
    }

    pub fn sse_event_count(&self, event: SseEvent) -> u64 {
        self.ops
            .sse_events
            .with_label_values(&[event.as_str()])
            .get()
    }

    pub fn sse_streams_open(&self) -> i64 {
        self.ops.sse_streams.get()
    }

    pub fn connections_open(&self, listener: Listener) -> i64 {
        self.ops
            .connections
            .with_label_values(&[listener.as_str()])
            .get()
    }

    pub fn connection_limit_count(&self, listener: Listener) -> u64 {
        self.ops
            .connection_limit_waits
            .with_label_values(&[listener.as_str()])
            .get()
    }

    /// Requests observed for `method` with `outcome`.
    pub fn request_count(&self, method: MethodClass, outcome: Outcome) -> u64 {
        self.ops
            .request_duration
            .with_label_values(&[method.as_str(), outcome.as_str()])
            .get_sample_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::KeyRing;

    fn kids(secrets: &[&str]) -> Vec<KeyId> {
        KeyId::of_ring(&KeyRing::from_secrets(secrets, "t").unwrap())
    }

    const A: &str = "0123456789abcdef0123456789abcdef-ops-metrics-a";
    const B: &str = "0123456789abcdef0123456789abcdef-ops-metrics-b";

    #[tokio::test]
    async fn alive_tasks_are_counted_at_each_scrape() {
        let m = Metrics::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = stopped.await;
        });
        assert!(
            m.render()
                .contains("mcp_state_guard_runtime_alive_tasks 1\n"),
            "the waiting task is alive"
        );
        stop.send(()).unwrap();
        task.await.unwrap();
        assert!(
            m.render()
                .contains("mcp_state_guard_runtime_alive_tasks 0\n")
        );
    }

    #[test]
    fn every_series_exists_from_the_first_scrape() {
        let m = Metrics::new();
        let text = m.render();
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
            "mcp_state_guard_client_connections_open{listener=\"proxy\"} 0",
            "mcp_state_guard_connection_limit_waits_total{listener=\"admin\"} 0",
            "mcp_state_guard_admin_requests_misdirected_total 0",
            "mcp_state_guard_key_ring_age_seconds 0",
            "mcp_state_guard_runtime_alive_tasks 0",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        let info = format!(
            "mcp_state_guard_build_info{{commit=\"{}\",version=\"{}\"}} 1",
            crate::version::COMMIT,
            crate::version::VERSION
        );
        assert!(text.contains(&info), "{info}");
    }

    #[test]
    fn kid_series_follow_the_ring() {
        let m = Metrics::new();
        let (a, b) = (kids(&[A])[0], kids(&[B])[0]);
        m.key_ring_loaded(&[a], true);
        m.token_minted(a);
        m.token_opened(a);
        // A key not in the ring gets no series, whatever asks.
        m.token_opened(b);
        let text = m.render();
        assert!(text.contains(&format!("tokens_minted_total{{kid=\"{a}\"}} 1")));
        assert!(text.contains(&format!("key_ring_minting{{kid=\"{a}\"}} 1")));
        assert!(!text.contains(&b.to_string()), "{text}");
        // Rotation phase 1 then 2: [a, b] -> [b, a]; then b alone: a's series end.
        m.key_ring_loaded(&[a, b], true);
        m.key_ring_loaded(&[b, a], true);
        m.token_opened(a);
        let text = m.render();
        assert!(text.contains(&format!("tokens_opened_total{{kid=\"{a}\"}} 2")));
        assert!(text.contains(&format!("tokens_minted_total{{kid=\"{b}\"}} 0")));
        assert!(text.contains(&format!("key_ring_minting{{kid=\"{a}\"}} 0")));
        assert!(text.contains(&format!("key_ring_minting{{kid=\"{b}\"}} 1")));
        m.key_ring_loaded(&[b], true);
        let text = m.render();
        assert!(!text.contains(&a.to_string()), "{text}");
        assert_eq!(m.tokens_count(false, a), None);
        assert_eq!(m.tokens_count(false, b), Some(0));
    }

    #[test]
    fn overhead_excludes_the_upstream_wait() {
        let m = Metrics::new();
        m.observe_request(
            MethodClass::ToolsCall,
            Outcome::Ok,
            Duration::from_millis(200),
            Duration::from_millis(199),
        );
        let text = m.render();
        // 1 ms of 200: in the 1 ms bucket and every larger one, not in the 500 µs one.
        assert!(text.contains(
            "mcp_state_guard_overhead_seconds_bucket{method=\"tools/call\",le=\"0.0005\"} 0"
        ));
        assert!(text.contains(
            "mcp_state_guard_overhead_seconds_bucket{method=\"tools/call\",le=\"0.001\"} 1"
        ));
        assert_eq!(m.request_count(MethodClass::ToolsCall, Outcome::Ok), 1);
    }

    #[test]
    fn key_age_counts_from_the_last_confirmation() {
        let m = Metrics::new();
        assert_eq!(m.key_ring_age(), None);
        m.key_file_confirmed();
        assert!(m.key_ring_age().unwrap() < Duration::from_secs(5));
    }
}
