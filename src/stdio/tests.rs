//! The bridge as the proxy's client reaches it, with the fake child of the integration
//! tests (`tests/py/stdio_child.py`, standard library only).

use super::*;
use crate::registry::Registry;
use http_body_util::BodyExt;
use prometheus::IntGauge;

struct Started {
    bridge: Arc<Bridge>,
    metrics: Arc<StdioMetrics>,
    received: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn start() -> Started {
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("received");
    let python = std::env::var("STATE_GUARD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/stdio_child.py");
    let mut config = Config {
        upstream: crate::config::STDIO.into(),
        ..Config::default()
    };
    config.upstream_command.argv = vec![
        python,
        script.into(),
        "--received".into(),
        received.display().to_string(),
    ];
    let metrics = Arc::new(StdioMetrics::register(&Registry::new()));
    let budget = MemoryBudget::new(1 << 20, IntGauge::new("b", "b").unwrap());
    let bridge = Bridge::start(&config, metrics.clone(), ChildUp::default(), budget);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !metrics.up() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child never came up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Started {
        bridge,
        metrics,
        received,
        _dir: dir,
    }
}

async fn post(
    connector: Connector,
    headers: &[(&str, http::HeaderValue)],
    text: &str,
) -> (http::StatusCode, String) {
    // One connection of the bridge, spoken to as the sidecar's pool does.
    let mut connector = connector;
    let pipe =
        tower_service::Service::call(&mut connector, http::Uri::from_static("http://stdio/"))
            .await
            .unwrap();
    let (mut client, connection) = hyper::client::conn::http1::handshake(pipe).await.unwrap();
    tokio::spawn(connection);
    let message = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}}});
    let mut request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, value.clone());
    }
    let request = request
        .body(crate::body::full(serde_json::to_vec(&message).unwrap()))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), client.send_request(request))
        .await
        .expect("answered at once")
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Only the proxy's gated route reaches the child: a request without the process's mark
/// (a passthrough path, anything that did not go through the gate), or with a wrong
/// one, is refused and nothing of it reaches the child.
#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_answers_only_the_gated_route() {
    let started = start().await;
    let connector = started.bridge.connector();
    let (status, body) = post(connector.clone(), &[], "unmarked").await;
    assert_eq!(status, http::StatusCode::FORBIDDEN, "{body}");
    let forged = http::HeaderValue::from_static("0123456789abcdef0123456789abcdef");
    let owner = http::HeaderValue::from_static("someone");
    let headers = [(GATED_HEADER, forged), (OWNER_HEADER, owner.clone())];
    let (status, body) = post(connector.clone(), &headers, "forged").await;
    assert_eq!(status, http::StatusCode::FORBIDDEN, "{body}");
    assert_eq!(started.metrics.refused_count(BridgeRefusal::Ungated), 2);
    let headers = [(GATED_HEADER, connector.mark()), (OWNER_HEADER, owner)];
    let (status, body) = post(connector, &headers, "gated").await;
    assert_eq!(status, http::StatusCode::OK, "{body}");
    assert!(body.contains("gated"), "{body}");
    let received = std::fs::read_to_string(&started.received).unwrap();
    assert_eq!(received.matches("tools/call").count(), 1, "{received}");
    assert!(!received.contains("unmarked") && !received.contains("forged"));
    started
        .bridge
        .stop(tokio::time::Instant::now() + Duration::from_secs(2))
        .await;
}
