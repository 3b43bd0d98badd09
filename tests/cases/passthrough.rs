//! What carries no state passes as it came (not a guarantee of the security model: what
//! the sidecar must not break): 2025-era sessions (initialize, `Mcp-Session-Id`, a
//! standalone GET stream, DELETE), empty acknowledgements, SSE data that is no JSON-RPC
//! message, and `passthrough_paths`, byte for byte and streaming.

use super::unsealable::through;
use crate::support::fake::{
    FakeBody, FakeUpstream, Recorded, Reply, Step, complete, contains, event, next_data, open,
    pairs, progress, sidecar_with, wait_until,
};
use crate::support::flow::{HTTP_TIMEOUT, SSE};
use crate::support::http::{self as client, initialize_session, send, session_headers};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::client_flows;
use crate::support::sidecar::Sidecar;
use http::Method;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::proxy::SealFailure;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn legacy_session_passes_through() {
    let upstream = LegacyServer::start(Mode::Sse);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    // initialize, Mcp-Session-Id, and a server->client elicitation answered over SSE.
    let out = client_flows(&sidecar.mcp_url(), &["legacy-session"]).await;
    assert_eq!(out["text"], "legacy_elicit colour=green", "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25");
    let session = out["session_id"].is_string() && out["session_ids_consistent"] == true;
    assert!(session, "{out}");
    let seen = upstream.seen();
    assert!(
        seen.iter()
            .any(|e| e["era"] == "2025" && e["name"] == "legacy_elicit")
    );

    // A session's standalone GET stream: its head must arrive while the stream is open
    // (the sidecar streams; it does not wait for an end that never comes).
    let url = sidecar.mcp_url();
    let session = initialize_session(&url).await;
    let headers = session_headers(Some(&session), SSE);
    let stream = client::open(Method::GET, &url, &headers[1..], Duration::from_secs(10)).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()[http::header::CONTENT_TYPE], SSE);
    drop(stream);
    let log = upstream.http_log();
    let ours = |r: &Value| r["method"] == "GET" && r["headers"].to_string().contains(&session);
    assert!(
        log.iter().any(ours),
        "our GET never reached the upstream: {log:?}"
    );
    let headers = session_headers(Some(&session), "application/json, text/event-stream");
    let reply = send(Method::DELETE, &url, &headers, "", HTTP_TIMEOUT).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    sidecar.stop().await;
}

/// The SDK answers a posted 2025 notification (or a client's response to a server->client
/// request) with `202`, and a DELETE with `200`, both `application/json` with an empty
/// body. There is nothing to seal in them; they must reach the client as they are.
#[tokio::test(flavor = "multi_thread")]
async fn empty_2025_answers_pass_through_unchanged() {
    let upstream = LegacyServer::start(Mode::Sse);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let url = sidecar.mcp_url();
    let session = initialize_session(&url).await;
    let headers = session_headers(Some(&session), "application/json, text/event-stream");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let reply = send(Method::POST, &url, &headers, initialized, HTTP_TIMEOUT).await;
    assert_eq!((reply.status.as_u16(), reply.text()), (202, String::new()));
    let reply = send(Method::DELETE, &url, &headers, "", HTTP_TIMEOUT).await;
    assert_eq!((reply.status.as_u16(), reply.text()), (200, String::new()));
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .path
            .seal_failure_count(SealFailure::UnparseableBody),
        0
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_json_acknowledgements_pass_through() {
    // mcp 2.3.0 `streamable_http.py` answers notifications and POSTed responses with
    // `_create_json_response(None, 202)`: content-type application/json, no body. The
    // POSTed response gets the same nothing chunked (unknown length until it ends).
    let fake = FakeUpstream::start(|request| {
        let body = match contains(&request.body, "result") {
            true => FakeBody::steps(Vec::new()),
            false => FakeBody::whole(""),
        };
        Reply::new(202, body).header("content-type", "application/json")
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    // 2025-era requests: a session id, no MCP 2026 routing headers.
    let headers = pairs(&[
        ("content-type", "application/json"),
        ("mcp-session-id", "abc"),
    ]);
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept","content":{}}}"#,
    ] {
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
        assert_eq!(
            (reply.status.as_u16(), reply.text()),
            (202, String::new()),
            "{body}"
        );
    }
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .path
            .seal_failure_count(SealFailure::UnparseableBody),
        0
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn non_json_sse_data_passes_as_it_carries_no_message() {
    // The 2024 HTTP+SSE transport announces its POST endpoint as a plain URL.
    let body = "event: endpoint\r\ndata: /messages?session_id=abc\r\n\r\n";
    let ct = ("content-type", b"text/event-stream".to_vec());
    let received = through(vec![ct], body.as_bytes().to_vec()).await;
    assert_eq!(&received[..], body.as_bytes());
}

/// A 2025-era server: an endless GET stream, DELETE, and a form-posting OAuth endpoint.
fn legacy_answer(request: &Recorded) -> Reply {
    match (request.method.as_str(), request.target.as_str()) {
        // An event every 200 ms, for a minute.
        ("GET", _) => {
            let tick = |n| {
                [
                    Step::Data(event("\r\n", &progress(n)).into()),
                    Step::Sleep(MS_200),
                ]
            };
            Reply::sse((0..300).flat_map(tick).collect())
        }
        ("DELETE", _) => Reply::new(200, FakeBody::whole("")),
        (_, "/oauth/token") => Reply::new(200, FakeBody::whole(OAUTH_ANSWER))
            .header("content-type", "application/json"),
        _ => Reply::json(complete(json!(1), "ok").to_string()),
    }
}

const MS_200: Duration = Duration::from_millis(200);

/// Not what the sealer would produce: proves the passthrough answer is untouched.
const OAUTH_ANSWER: &str = "{ \"access_token\":\"a\", \"requestState\":\"x\" }";

#[tokio::test(flavor = "multi_thread")]
async fn legacy_traffic_passes_through_streaming() {
    let fake = FakeUpstream::start(legacy_answer).await;
    let sidecar = sidecar_with(&fake, |c| c.passthrough_paths = vec!["/oauth/token".into()]).await;
    let url = sidecar.mcp_url();
    let session = pairs(&[("accept", "text/event-stream"), ("mcp-session-id", "abc")]);
    let response = open(Method::GET, &url, &session, FakeBody::whole(""), false).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let (mut seen, started) = (Vec::new(), Instant::now());
    while seen.windows(4).filter(|w| w == b"\r\n\r\n").count() < 3 {
        seen.extend_from_slice(&next_data(&mut body, T).await.unwrap());
    }
    // Three events over ~400 ms: streamed as they came, not buffered to the end.
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(seen.starts_with(event("\r\n", &progress(0)).as_bytes()));
    drop(body);
    wait_until(
        || fake.unfinished() == 1,
        "the upstream GET stream is closed",
    )
    .await;
    assert_eq!(fake.last().header("mcp-session-id"), Some("abc"));

    let reply = send(Method::DELETE, &url, &session, "", T).await;
    assert_eq!(
        (reply.status.as_u16(), fake.last().method),
        (200, Method::DELETE)
    );
    let before = fake.count();
    let reply = send(Method::GET, &url, &session, "{\"requestState\":\"x\"}", T).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::BodyNotAllowed),
        1
    );
    assert_eq!(fake.count(), before, "a GET body was forwarded");

    // The passthrough path forwards the form and its answer byte for byte; /mcp refuses it.
    let form_type = "application/x-www-form-urlencoded";
    let form = pairs(&[("content-type", form_type)]);
    let bytes = "grant_type=client_credentials&client_id=a%20b&requestState=x";
    let oauth = format!("{}/oauth/token", sidecar.base_url());
    let reply = send(Method::POST, &oauth, &form, bytes, T).await;
    assert_eq!(reply.text(), OAUTH_ANSWER);
    assert_eq!(fake.last().body, bytes);
    assert_eq!(fake.last().header("content-type"), Some(form_type));
    let before = fake.count();
    let reply = send(Method::POST, &url, &form, bytes, T).await;
    assert_eq!(reply.status, 415);
    assert_eq!(fake.count(), before);
    sidecar.stop().await;
}
