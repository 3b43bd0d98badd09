//! Upstream faults end in one answer carrying the request id: an upstream that hangs
//! before its head gets a 504, one that is down or not HTTP a 502, a body cut short of its
//! length or a stream cut (FIN or reset) mid-event an internal error, never a plaintext.
//! (Stalls, byte-by-byte answers and resets under load: `faults`.)

use crate::support::fake::{
    FakeUpstream, Reply, SECRET, Step, assert_internal_error, first_progress, sidecar_with,
    sse_cut_in_the_result, tools_call,
};
use crate::support::http::{self as client, post_mcp};
use crate::support::sidecar::Sidecar;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::proxy::SealFailure;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A gateway error as the client sees it: (status, id, code).
fn gateway(reply: &client::Reply) -> (u16, Value, Value) {
    let body = reply.json();
    let (id, code) = (body["id"].clone(), body["error"]["code"].clone());
    (reply.status.as_u16(), id, code)
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_failures_become_gateway_errors_with_the_request_id() {
    // Hanging: no response head within response_head_ms → 504.
    let hanging = FakeUpstream::always(Reply::hang).await;
    let sidecar = sidecar_with(&hanging, |c| c.timeouts.response_head_ms = 500).await;
    let started = Instant::now();
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(41, None)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3));
    assert_eq!(gateway(&reply), (504, json!(41), json!(-32603)));
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::UpstreamTimeout),
        1
    );
    assert_eq!(hanging.count(), 1);
    sidecar.stop().await;

    // Down: nothing listens on the port → 502.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let sidecar = Sidecar::in_front_of(&format!("http://127.0.0.1:{port}")).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(42, None)).await;
    assert_eq!(gateway(&reply), (502, json!(42), json!(-32603)));
    let unavailable = sidecar
        .metrics()
        .refusals
        .refused_count(ErrorKind::UpstreamUnavailable);
    assert_eq!(unavailable, 1);
    sidecar.stop().await;

    // Not HTTP at all → 502; a body cut short of its content-length → internal error.
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n";
    let cut = format!("{head}{{\"requestState\":\"{SECRET}");
    for (answer, status) in [("garbage\r\n\r\n".to_owned(), 502), (cut, 200)] {
        let raw = FakeUpstream::raw(vec![Step::Data(answer.into())], false).await;
        let sidecar = Sidecar::in_front_of(&raw.base_url()).await;
        let reply = post_mcp(&sidecar.mcp_url(), &tools_call(43, None)).await;
        assert_eq!(reply.status, status);
        assert_internal_error(&reply.body, 43, "malformed upstream answer");
        sidecar.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_cut_mid_stream_ends_with_an_error_event() {
    for reset in [false, true] {
        let steps = sse_cut_in_the_result(44);
        let raw = FakeUpstream::raw(steps, reset).await;
        let sidecar = Sidecar::in_front_of(&raw.base_url()).await;
        let reply = post_mcp(&sidecar.mcp_url(), &tools_call(44, None)).await;
        assert_eq!(reply.status, 200);
        assert!(
            reply.body.starts_with(first_progress().as_bytes()),
            "{}",
            reply.text()
        );
        assert_internal_error(&reply.body, 44, &format!("cut (reset={reset})"));
        let failures = sidecar
            .metrics()
            .path
            .seal_failure_count(SealFailure::UpstreamBodyError);
        assert_eq!(failures, 1);
        sidecar.stop().await;
    }
}
