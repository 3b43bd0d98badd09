//! What operators see: the metrics read back through a real Prometheus, the exposition
//! passing `promtool check metrics`, the shipped alerting rules passing `promtool check
//! rules` and their unit tests, and the per-key counters the rotation runbook relies on.

use crate::support::fake::{
    FakeUpstream, Reply, Step, input_required, plaintext, sealed, tools_call,
};
use crate::support::http::{post_mcp, send};
use crate::support::prometheus::{Prometheus, promtool};
use crate::support::sidecar::{self, Sidecar};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::facade::mcp::MethodClass;
use mcp_state_guard::facade::proxy::SseEvent;
use mcp_state_guard::facade::proxy::StatusClass;
use mcp_state_guard::facade::server::Listener;
use mcp_state_guard::facade::telemetry::audit::Outcome;
use mcp_state_guard::facade::token::{KeyId, KeyRing};
use serde_json::{Value, json};
use std::time::Duration;

const OLD: &str = "0123456789abcdef0123456789abcdef-observability-old";
const NEW: &str = "0123456789abcdef0123456789abcdef-observability-new";

fn kid(secret: &str) -> KeyId {
    KeyId::of_ring(&KeyRing::from_secrets(&[secret], "t").unwrap())[0]
}

/// An upstream that asks on a first call and completes a retry.
async fn asking() -> FakeUpstream {
    FakeUpstream::start(|request| {
        let message = request.json();
        let id = message["id"].clone();
        if message["params"]["requestState"].is_null() {
            Reply::json(input_required(id, json!(plaintext())).to_string())
        } else {
            Reply::json(crate::support::fake::complete(id, "done").to_string())
        }
    })
    .await
}

async fn admin_get(sidecar: &Sidecar, path: &str) -> (u16, String) {
    let url = format!("http://{}{path}", sidecar.admin_addr);
    let reply = send(Method::GET, &url, &[], "", Duration::from_secs(10)).await;
    (reply.status.as_u16(), reply.text())
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_what_the_traffic_did_and_promtool_finds_no_fault() {
    let fake = asking().await;
    let sidecar = Sidecar::with_keys(sidecar::config(&fake.base_url()), &[OLD], "svc").await;
    let prometheus = Prometheus::start(&[sidecar.admin_addr]).await;
    let url = sidecar.mcp_url();
    let mut tokens = Vec::new();
    for id in 0..3 {
        let first = post_mcp(&url, &tools_call(id, None)).await.json();
        tokens.push(sealed(&first["result"]));
    }
    for (id, token) in tokens.iter().take(2).enumerate() {
        let retry = post_mcp(&url, &tools_call(10 + id as u64, Some(json!(token)))).await;
        assert_eq!(retry.status, 200, "{}", retry.text());
    }
    let forged = post_mcp(&url, &tools_call(20, Some(json!(plaintext())))).await;
    assert_eq!(forged.status, 400);

    // Read back through Prometheus' HTTP API, as a dashboard would.
    prometheus
        .wait_for("up{job=\"mcp-state-guard\"}", 1.0)
        .await;
    prometheus
        .wait_for("mcp_state_guard_state_sealed_total", 3.0)
        .await;
    let old = kid(OLD).to_string();
    prometheus
        .wait_for(
            &format!("mcp_state_guard_tokens_opened_total{{kid=\"{old}\"}}"),
            2.0,
        )
        .await;
    prometheus
        .wait_for(
            "sum(mcp_state_guard_request_duration_seconds_count{method=\"tools/call\"})",
            6.0,
        )
        .await;
    prometheus
        .wait_for(
            "mcp_state_guard_request_duration_seconds_count{method=\"tools/call\",outcome=\"refused\"}",
            1.0,
        )
        .await;
    // The shipped rules loaded into the running server and evaluate without error.
    let rules = prometheus.query("count(ALERTS) or vector(0)").await;
    assert_eq!(rules.len(), 1, "{rules:?}");

    // The exposition is clean for promtool's linter: no complaint at all.
    let (status, text) = admin_get(&sidecar, "/metrics").await;
    assert_eq!(status, 200);
    let checked = promtool(&["check", "metrics"], &text);
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    drop(prometheus);
    sidecar.stop().await;
}

#[test]
fn the_shipped_alerting_rules_check_and_pass_their_tests() {
    let checked = promtool(&["check", "rules", "config/alerts.yml"], "");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let tested = promtool(&["test", "rules", "config/alerts.test.yml"], "");
    assert!(
        tested.status.success(),
        "{}{}",
        String::from_utf8_lossy(&tested.stdout),
        String::from_utf8_lossy(&tested.stderr)
    );
}

/// The runbook's rotation, watched through the per-key counters: `[old]` → `[new, old]`
/// (new mints, old still opens what it minted) → `[new]` (old's series gone).
#[tokio::test(flavor = "multi_thread")]
async fn per_key_counters_follow_a_rotation() {
    let fake = asking().await;
    let mut config = sidecar::config(&fake.base_url());
    config.state.reload_interval_ms = 100;
    let sidecar = Sidecar::with_keys(config, &[OLD], "svc").await;
    let (old, new) = (kid(OLD), kid(NEW));
    let metrics = sidecar.metrics().clone();
    let url = sidecar.mcp_url();
    let first = post_mcp(&url, &tools_call(1, None)).await.json();
    let minted_old = sealed(&first["result"]);
    assert_eq!(metrics.keys.tokens_count(true, old), Some(1));
    assert_eq!(metrics.keys.tokens_count(true, new), None);

    sidecar.rewrite_keys(&[NEW, OLD]).await;
    assert_eq!(
        metrics.keys.tokens_count(true, new),
        Some(0),
        "new starts at zero"
    );
    let first = post_mcp(&url, &tools_call(2, None)).await.json();
    let minted_new = sealed(&first["result"]);
    for (id, token) in [(3, &minted_old), (4, &minted_new)] {
        let retry = post_mcp(&url, &tools_call(id, Some(json!(token)))).await;
        assert_eq!(retry.status, 200, "{}", retry.text());
    }
    assert_eq!(metrics.keys.tokens_count(true, old), Some(1));
    assert_eq!(metrics.keys.tokens_count(true, new), Some(1));
    assert_eq!(metrics.keys.tokens_count(false, old), Some(1));
    assert_eq!(metrics.keys.tokens_count(false, new), Some(1));
    let (_, text) = admin_get(&sidecar, "/metrics").await;
    assert!(text.contains(&format!(
        "mcp_state_guard_key_ring_minting{{kid=\"{new}\"}} 1"
    )));
    assert!(text.contains(&format!(
        "mcp_state_guard_key_ring_minting{{kid=\"{old}\"}} 0"
    )));

    // Phase 3: the old key's series end with it.
    sidecar.rewrite_keys(&[NEW]).await;
    let (_, text) = admin_get(&sidecar, "/metrics").await;
    assert!(!text.contains(&old.to_string()), "{text}");
    assert!(text.contains(&format!(
        "mcp_state_guard_tokens_opened_total{{kid=\"{new}\"}} 1"
    )));
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_outcomes_status_classes_streams_and_connections_are_counted() {
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let id = message["id"].clone();
        match message["params"]["name"].as_str() {
            Some("stream") => {
                let event = |m: &Value| {
                    Step::Data(Bytes::from(format!("event: message\r\ndata: {m}\r\n\r\n")))
                };
                Reply::sse(vec![
                    Step::Data(Bytes::from_static(b": ping\r\n\r\n")),
                    event(&input_required(id, json!(plaintext()))),
                ])
            }
            Some("broken") => Reply::new(503, crate::support::fake::FakeBody::whole("down")),
            _ => Reply::json(crate::support::fake::complete(id, "ok").to_string()),
        }
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let metrics = sidecar.metrics().clone();
    let url = sidecar.mcp_url();
    let call = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": {}, "_meta": crate::support::http::meta()}})
    };
    assert_eq!(post_mcp(&url, &call(1, "plain")).await.status, 200);
    let streamed = post_mcp(&url, &call(2, "stream")).await;
    assert!(streamed.content_type().starts_with("text/event-stream"));
    assert_eq!(post_mcp(&url, &call(3, "broken")).await.status, 503);
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"});
    assert_eq!(post_mcp(&url, &list).await.status, 200);
    let bad_type = send(
        Method::POST,
        &url,
        &crate::support::fake::pairs(&[("content-type", "text/plain")]),
        "x",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(bad_type.status, 415);

    crate::support::fake::wait_until(
        || metrics.path.sse_streams_open() == 0,
        "the stream is closed",
    )
    .await;
    assert_eq!(metrics.path.sse_event_count(SseEvent::Passed), 1);
    assert_eq!(metrics.path.sse_event_count(SseEvent::Sealed), 1);
    assert_eq!(
        metrics
            .path
            .request_count(MethodClass::ToolsCall, Outcome::Ok),
        3
    );
    assert_eq!(
        metrics.path.request_count(MethodClass::Other, Outcome::Ok),
        1
    );
    assert_eq!(
        metrics
            .path
            .request_count(MethodClass::Other, Outcome::Refused),
        1
    );
    assert_eq!(
        metrics.path.upstream_response_count(StatusClass::Success),
        3
    );
    assert_eq!(
        metrics
            .path
            .upstream_response_count(StatusClass::ServerError),
        1
    );

    // A dead upstream: an upstream_error outcome.
    drop(fake);
    let gone = post_mcp(&url, &call(5, "plain")).await;
    assert_eq!(gone.status, 502);
    assert_eq!(
        metrics
            .path
            .request_count(MethodClass::ToolsCall, Outcome::UpstreamError),
        1
    );

    // Connections: the test client's pool keeps none open once it is dropped.
    crate::support::fake::wait_until(
        || metrics.connections.connections_open(Listener::Proxy) == 0,
        "client connections are closed",
    )
    .await;
    let (_, text) = admin_get(&sidecar, "/metrics").await;
    assert!(text.contains(&format!(
        "mcp_state_guard_build_info{{commit=\"{}\",version=\"{}\"}} 1",
        mcp_state_guard::facade::version::COMMIT,
        mcp_state_guard::facade::version::VERSION
    )));
    sidecar.stop().await;
}
