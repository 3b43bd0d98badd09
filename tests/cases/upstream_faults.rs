//! Upstream faults end in one answer carrying the request id: an upstream that hangs
//! before its head gets a 504, one that is down or not HTTP a 502, a body cut short of its
//! length or a stream cut (FIN or reset) mid-event an internal error, never a plaintext.
//! An upstream that stalls after its head, answers byte by byte or resets its streams
//! under concurrent load gets the same: one answer each in time, every stream ended once,
//! nothing left behind. (The other faults, and where each is proved: `faults`.)

use crate::support::fake::{
    FakeBody, FakeUpstream, Reply, SECRET, Step, assert_internal_error, event, first_progress,
    input_required, next_data, one_byte_chunks, open, plaintext, progress, sealed, sidecar_with,
    sse_cut_in_the_result, tools_call, wait_until,
};
use crate::support::http::{self as client, mcp_headers, post_mcp};
use crate::support::load::{at_once, held, until_idle};
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use http_body_util::BodyExt;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::proxy::SealFailure;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

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

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_stalling_after_the_head_gets_a_gateway_error_in_time() {
    // JSON: the head, half the body, then nothing.
    let answer = input_required(json!(1), json!(plaintext())).to_string();
    let (half, _) = answer.split_at(answer.len() / 2);
    let body = vec![
        Step::Data(half.to_owned().into()),
        Step::Sleep(Duration::from_secs(30)),
    ];
    // SSE: a notification, then nothing.
    let fake = FakeUpstream::start(move |request| match request.header("x-case") {
        Some("sse") => Reply::sse(vec![
            Step::Data(event("\n", &progress(1)).into()),
            Step::Sleep(Duration::from_secs(30)),
        ]),
        _ => Reply::new(200, FakeBody::steps(body.clone()))
            .header("content-type", "application/json"),
    })
    .await;
    let mut config = sidecar::config(&fake.base_url());
    config.timeouts.response_head_ms = 600;
    config.timeouts.drain_ms = 500;
    let sidecar = Sidecar::start(config).await;
    let started = Instant::now();
    let replies = at_once(&sidecar.mcp_url(), 4).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    for (id, reply) in (1..=4).zip(&replies) {
        // One answer each: 504 with the JSON-RPC error, the plaintext half never shown.
        assert_eq!(reply.status, 504);
        let body = reply.json();
        assert_eq!(
            (body["id"].clone(), body["error"]["code"].clone()),
            (json!(id), json!(-32603))
        );
        assert!(!reply.text().contains(SECRET));
    }
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics.refusals.refused_count(ErrorKind::UpstreamTimeout),
        4
    );
    // The stalled bodies were let go: the upstream sees its responses abandoned.
    wait_until(|| fake.unfinished() == 4, "the stalled bodies are dropped").await;

    // A stream may stay quiet for as long as a tool runs, so the sidecar does not cut
    // it: the client has what was sent, no error is invented, and the stream ends at the
    // latest at the drain deadline when the sidecar stops.
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.push(("x-case".into(), "sse".into()));
    let body = FakeBody::whole(serde_json::to_vec(&tools_call(5, None)).unwrap());
    let mut stream = open(Method::POST, &sidecar.mcp_url(), &headers, body, false).await;
    let first = next_data(stream.body_mut(), T).await.unwrap();
    assert_eq!(&first[..], event("\n", &progress(1)).as_bytes());
    let quiet = tokio::time::timeout(Duration::from_millis(1_000), stream.body_mut().frame());
    assert!(quiet.await.is_err(), "a quiet stream was ended");
    let stopping = Instant::now();
    let stop = tokio::spawn(sidecar.stop());
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some(Ok(_)) = stream.body_mut().frame().await {}
    });
    assert!(
        ended.await.is_ok(),
        "the stream outlived the drain deadline"
    );
    stop.await.unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(3));
    wait_until(
        || fake.unfinished() == 5,
        "the quiet upstream stream is closed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byte_by_byte_upstream_is_sealed_in_time_and_cut_beyond_it() {
    // Every byte of the answer 2 ms apart: about 0.3 s in all.
    let answer = input_required(json!(5), json!(plaintext())).to_string();
    let mut slow = Vec::new();
    for step in one_byte_chunks(answer.as_bytes()) {
        slow.push(Step::Sleep(Duration::from_millis(2)));
        slow.push(step);
    }
    let fake = FakeUpstream::always(move || {
        Reply::new(200, FakeBody::steps(slow.clone())).header("content-type", "application/json")
    })
    .await;
    let mut config = sidecar::config(&fake.base_url());
    config.timeouts.response_head_ms = 3_000;
    let sidecar = Sidecar::start(config.clone()).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(5, None)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let token = sealed(&reply.json()["result"]);
    assert!(!reply.text().contains(SECRET));
    // The sealed state opens: the retry reaches the upstream with its plaintext.
    let retry = post_mcp(&sidecar.mcp_url(), &tools_call(5, Some(json!(token)))).await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(
        fake.last().json()["params"]["requestState"],
        json!(plaintext())
    );
    sidecar.stop().await;

    // The same trickle against a deadline shorter than it takes: one gateway error.
    config.timeouts.response_head_ms = 100;
    let sidecar = Sidecar::start(config).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(6, None)).await;
    assert_eq!(reply.status, 504);
    assert_eq!(
        reply.json()["error"]["code"],
        json!(-32603),
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["id"], json!(6));
    assert!(!reply.text().contains(SECRET));
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::UpstreamTimeout),
        1
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_resets_mid_stream_under_load_end_every_stream_once() {
    let steps = sse_cut_in_the_result(9);
    let raw = FakeUpstream::raw(steps, true).await;
    let sidecar = Sidecar::in_front_of(&raw.base_url()).await;
    let idle = held(sidecar.admin_addr).await;
    const N: u64 = 24;
    let replies = at_once(&sidecar.mcp_url(), N).await;
    assert_eq!(replies.len() as u64, N);
    for (id, reply) in (1..=N).zip(&replies) {
        assert_eq!(reply.status, 200);
        // The notification that made it, then exactly one error for the cut result.
        assert!(
            reply.text().starts_with(&event("\r\n", &progress(1))),
            "{}",
            reply.text()
        );
        assert_eq!(
            reply.text().matches("\"error\"").count(),
            1,
            "{}",
            reply.text()
        );
        assert_internal_error(&reply.body, id, "reset");
    }
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .path
            .seal_failure_count(SealFailure::UpstreamBodyError),
        N
    );
    assert_eq!(raw.count() as u64, N);
    until_idle(sidecar.admin_addr, &idle).await;
    sidecar.stop().await;
}
