//! The TypeScript SDK v2 upstream on the wire, through the sidecar: what it answers by
//! itself (its own -32021, -32020 and in-band errors, 405) reaches the client unchanged,
//! status included; its LF-framed SSE streams (keep-alive comments too) pass event by event;
//! and the one difference that needs a sidecar change, `Mcp-Name` on `tasks/*`.
//! tests/ts/WIRE-DIFFERENCES.md records every difference and which test shows it.

use crate::support::http::{self, Reply};
use crate::support::interop::{Sdk, run_client};
use crate::support::legacy::Mode;
use crate::support::sidecar::Sidecar;
use crate::support::ts::{self, ResponseMode, TsServer};
use bytes::Bytes;
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
const SSE: &str = "text/event-stream";

fn meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-state-guard-tests", "version": "0"}
    })
}

fn tool_call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments,
                      "_meta": meta(json!({"elicitation": {"form": {}}}))}})
}

/// The MCP headers for `message` (Mcp-Name from its name or uri) plus `extra`, minus any
/// header named in `without`.
fn headers_for(message: &Value, extra: &[(&str, &str)], without: &[&str]) -> Vec<(String, String)> {
    let method = message["method"].as_str().unwrap();
    let params = &message["params"];
    let name = params["name"].as_str().or(params["uri"].as_str());
    let mut headers = http::mcp_headers(method, name);
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    headers.retain(|(k, _)| !without.contains(&k.as_str()));
    headers
}

async fn post(url: &str, message: &Value, headers: &[(String, String)]) -> Reply {
    let body = serde_json::to_vec(message).unwrap();
    http::send(::http::Method::POST, url, headers, body, T).await
}

fn content_type(reply: &Reply) -> &str {
    reply.content_type().split(';').next().unwrap_or_default()
}

/// The JSON-RPC message of a reply, whichever way the upstream framed its SSE.
fn message(reply: &Reply) -> Value {
    if content_type(reply) != SSE {
        return reply.json();
    }
    let mut buffer = bytes::BytesMut::from(&reply.body[..]);
    let events = ts::split_sse_events(&mut buffer);
    assert!(buffer.is_empty(), "unterminated event: {}", reply.text());
    let data = events.iter().rev().find_map(|e| ts::sse_event_json(e));
    data.expect("an event with data")
}

// ---- 1. Errors the upstream raises itself ---------------------------------------------

/// One request the TypeScript upstream refuses by itself: what it is, the message, the
/// headers to send, and the status and code it answers with in JSON and in SSE mode.
struct UpstreamError {
    what: &'static str,
    message: Value,
    headers: Vec<(String, String)>,
    status: [u16; 2],
    code: i64,
}

fn upstream_errors() -> Vec<UpstreamError> {
    let capabilities = tool_call(1, "ask_capabilities", json!({}));
    let param = tool_call(2, "param_echo", json!({"region": "eu"}));
    let echo = tool_call(4, "echo", json!({"text": "x"}));
    vec![
        UpstreamError {
            what: "-32021: an input request the request's capabilities do not cover",
            headers: headers_for(&capabilities, &[], &[]),
            message: capabilities,
            // The SDK maps -32021 to 400 even from a handler, but once an `sse` answer
            // has committed its 200 stream the error is just the last event.
            status: [400, 200],
            code: -32021,
        },
        UpstreamError {
            what: "-32020: the Mcp-Param-Region header the tool's schema declares is missing",
            headers: headers_for(&param, &[], &[]),
            message: param.clone(),
            status: [400, 400],
            code: -32020,
        },
        UpstreamError {
            what: "-32020: Mcp-Param-Region disagrees with the argument",
            headers: headers_for(&param, &[("mcp-param-region", "us")], &[]),
            message: {
                let mut m = param;
                m["id"] = json!(3);
                m
            },
            status: [400, 400],
            code: -32020,
        },
        UpstreamError {
            what: "-32020: no Mcp-Name (the TypeScript SDK requires it; the sidecar does not)",
            headers: headers_for(&echo, &[], &["mcp-name"]),
            message: echo,
            status: [400, 400],
            code: -32020,
        },
    ]
}

async fn upstream_errors_pass_through(mode: Mode) {
    let upstream = TsServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let index = usize::from(mode == Mode::Sse);
    for case in upstream_errors() {
        let what = format!("{mode:?}: {}", case.what);
        let direct = post(&upstream.mcp_url(), &case.message, &case.headers).await;
        let before = upstream.http_log().len();
        let through = post(&sidecar.mcp_url(), &case.message, &case.headers).await;
        assert_eq!(
            upstream.http_log().len(),
            before + 1,
            "{what}: not forwarded"
        );
        assert_eq!(
            direct.status.as_u16(),
            case.status[index],
            "{what}: {}",
            direct.text()
        );
        assert_eq!(through.status, direct.status, "{what}: {}", through.text());
        assert_eq!(content_type(&through), content_type(&direct), "{what}");
        let error = message(&through);
        assert_eq!(error, message(&direct), "{what}");
        assert_eq!(error["error"]["code"], case.code, "{what}: {error}");
        assert_eq!(error["id"], case.message["id"], "{what}: {error}");
    }
    // The same tool with the header it declares works: Mcp-Param-* is forwarded as sent.
    let ok = tool_call(5, "param_echo", json!({"region": "eu"}));
    let headers = headers_for(&ok, &[("mcp-param-region", "eu")], &[]);
    let reply = post(&sidecar.mcp_url(), &ok, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        message(&reply)["result"]["content"][0]["text"],
        "param_echo eu"
    );
    // A 2025-era GET: the SDK's stateless fallback answers 405 with `Allow: POST`.
    let get = [("accept".to_owned(), SSE.to_owned())];
    let direct = http::send(::http::Method::GET, &upstream.mcp_url(), &get, "", T).await;
    let through = http::send(::http::Method::GET, &sidecar.mcp_url(), &get, "", T).await;
    assert_eq!((direct.status.as_u16(), &direct.body), (405, &through.body));
    assert_eq!(through.status, 405);
    assert_eq!(through.headers.get("allow"), direct.headers.get("allow"));
    // None of it was the sidecar's own doing.
    let metrics = sidecar.metrics();
    for kind in ErrorKind::ALL {
        assert_eq!(metrics.refusals.refused_count(kind), 0, "{kind:?}");
    }
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstreams_own_errors_reach_the_client_unchanged_json_mode() {
    upstream_errors_pass_through(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstreams_own_errors_reach_the_client_unchanged_sse_mode() {
    upstream_errors_pass_through(Mode::Sse).await;
}

/// What the TypeScript client makes of the upstream's own answers is the same through the
/// sidecar as directly: its -32021 is a ProtocolError with code and data (the client's
/// transport reads a JSON-RPC error body only on HTTP 400, which the sidecar keeps), and a
/// client left on the SDK's default negotiation talks 2025 (initialize, no input_required:
/// the SDK's stateless legacy serving cannot elicit), which passes through untouched.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_client_sees_what_it_sees_directly() {
    let upstream = TsServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let scenarios = ["capability-error", "unpinned"];
    let direct = run_client(Sdk::TypeScript, &upstream.mcp_url(), &scenarios).await;
    let through = run_client(Sdk::TypeScript, &sidecar.mcp_url(), &scenarios).await;
    assert_eq!(through, direct);
    let error = &through["capability-error"]["error"];
    assert_eq!(error["code"], -32021, "{through}");
    assert_eq!(
        error["data"],
        json!({"requiredCapabilities": {"sampling": {}}})
    );
    let unpinned = &through["unpinned"];
    assert_eq!(unpinned["protocol_version"], "2025-11-25", "{unpinned}");
    assert_eq!(unpinned["echo"]["text"], "hello", "{unpinned}");
    let provision = unpinned["provision"]["text"].as_str().unwrap_or_default();
    assert!(
        provision.starts_with("ERROR: Cannot request input 'region'"),
        "{unpinned}"
    );
    assert_eq!(sidecar.metrics().path.sealed_count(), 0);
    sidecar.stop().await;
}

/// Errors a TypeScript handler throws stay in-band on HTTP 200 (the Python SDK answers
/// -32602 with 400); the sidecar keeps that status, while its own refusal of a state is the
/// frozen -32602 on 400 whatever the upstream would have said.
#[tokio::test(flavor = "multi_thread")]
async fn in_band_handler_errors_keep_their_200() {
    let upstream = TsServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let read = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
               "params": {"uri": "config://prod", "_meta": meta(json!({"elicitation": {}}))}})
    };
    let declined = |id: u64, state: &Value| {
        let mut message = read(id);
        message["params"]["requestState"] = state.clone();
        message["params"]["inputResponses"] =
            json!({"confirm": {"action": "accept", "content": {"ok": false}}});
        message
    };
    let headers = headers_for(&read(1), &[], &[]);
    let mut replies = Vec::new();
    for url in [upstream.mcp_url(), sidecar.mcp_url()] {
        let first = message(&post(&url, &read(1), &headers).await);
        let state = &first["result"]["requestState"];
        replies.push(post(&url, &declined(2, state), &headers).await);
    }
    let (direct, through) = (&replies[0], &replies[1]);
    assert_eq!(
        [direct.status, through.status],
        [200, 200],
        "{}",
        through.text()
    );
    assert_eq!(message(through), message(direct));
    let error = message(through)["error"].clone();
    assert_eq!(error["code"], -32602, "{error}");
    assert_eq!(error["message"], "configuration read not confirmed");
    // The sidecar's own -32602 for a state it did not mint: 400.
    let forged = declined(
        3,
        &json!(r#"{"env":"prod","k":"config","r":1,"role":"admin"}"#),
    );
    let refused = post(&sidecar.mcp_url(), &forged, &headers).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json()["error"]["message"],
        "Invalid or expired requestState"
    );
    sidecar.stop().await;
}

// ---- 2. SSE framing --------------------------------------------------------------------

/// progress_ask with a progress token and logging opted in, slowed down.
fn progress_ask(id: u64, state: Option<&str>) -> Value {
    let mut message = tool_call(id, "progress_ask", json!({"delay_ms": 150}));
    let meta = &mut message["params"]["_meta"];
    meta["progressToken"] = json!("progress-1");
    meta["io.modelcontextprotocol/logLevel"] = json!("info");
    if let Some(state) = state {
        message["params"]["requestState"] = json!(state);
        message["params"]["inputResponses"] =
            json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    }
    message
}

const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// The TypeScript SDK frames SSE with bare `\n` (`event: message\ndata: ...\n\n`) and sends
/// `: keepalive` comments; through the sidecar every notification and comment arrives as
/// the upstream wrote it, as soon as it is complete, and the final event is rewritten in
/// the same framing with only its state sealed.
#[tokio::test(flavor = "multi_thread")]
async fn lf_framed_sse_and_keepalive_comments_stream_through() {
    let upstream = TsServer::start_with(ResponseMode::Sse, &["--keep-alive-ms", "40"]);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let message = progress_ask(1, None);
    let headers = headers_for(&message, &[], &[]);
    let body = serde_json::to_vec(&message).unwrap();
    let direct = ts::post_streaming(&upstream.mcp_url(), &headers, body.clone()).await;
    let through = ts::post_streaming(&sidecar.mcp_url(), &headers, body).await;
    assert_eq!(
        [direct.content_type.as_str(), through.content_type.as_str()],
        [SSE, SSE]
    );
    assert_eq!(through.status, 200);

    // Keep-alive comments pass through (their number depends on timing, not on us).
    let events = |s: &ts::Streamed| -> Vec<(Duration, Bytes)> {
        s.events
            .iter()
            .filter(|(_, e)| e != KEEPALIVE)
            .cloned()
            .collect()
    };
    let keepalives = through
        .events
        .iter()
        .filter(|(_, e)| e == KEEPALIVE)
        .count();
    assert!(
        keepalives >= 1,
        "no keep-alive comment came through: {:?}",
        through.events
    );
    let (direct, through_events) = (events(&direct), events(&through));
    // 3 progress notifications and a log message, then the response.
    assert_eq!(
        [direct.len(), through_events.len()],
        [5, 5],
        "{through_events:?}"
    );
    let (notifications, last) = through_events.split_at(4);
    for ((_, ours), (_, theirs)) in notifications.iter().zip(&direct) {
        assert_eq!(ours, theirs, "a notification event was altered");
        assert!(ours.starts_with(b"event: message\ndata: {") && ours.ends_with(b"}\n\n"));
    }
    // Streamed, not buffered: the handler sleeps 150 ms after each progress step.
    let lead = last[0].0 - notifications[0].0;
    assert!(lead >= Duration::from_millis(300), "only {lead:?} ahead");

    // The response keeps the upstream's framing; only its state differs.
    let (ours, theirs) = (&last[0].1, &direct[4].1);
    assert!(ours.starts_with(b"event: message\ndata: {") && ours.ends_with(b"}\n\n"));
    assert!(!ours.contains(&b'\r'), "{ours:?}");
    let mut ours = ts::sse_event_json(ours).unwrap();
    let mut theirs = ts::sse_event_json(theirs).unwrap();
    let token = ours["result"]["requestState"].take();
    assert!(
        token.as_str().is_some_and(|t| t.starts_with("v1.")),
        "{token}"
    );
    assert_eq!(
        theirs["result"]["requestState"].take(),
        r#"{"k":"progress_ask","r":1}"#
    );
    assert_eq!(ours, theirs);

    // The second round streams too, and its token opens.
    let retry = progress_ask(2, token.as_str());
    let body = serde_json::to_vec(&retry).unwrap();
    let done = ts::post_streaming(&sidecar.mcp_url(), &headers, body).await;
    let text = &done.message()["result"]["content"][0]["text"];
    assert_eq!(text, "progress_ask done ok=true");
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 1);
    sidecar.stop().await;
}

// ---- 3. Mcp-Name beyond tools, prompts and resources -----------------------------------

/// The TypeScript SDK mirrors `params.taskId` into `Mcp-Name` for `tasks/get`,
/// `tasks/update` and `tasks/cancel` (its `MCP_NAME_HEADER_SOURCE`, after the tasks
/// extension's Streamable HTTP binding); its client always sends the header and its server
/// answers -32020 without it. The gate accepts the header there when it equals
/// `params.taskId` (same `=?base64?...?=` decoding) and keeps refusing a mismatch.
#[tokio::test(flavor = "multi_thread")]
async fn mcp_name_on_task_methods_reaches_the_upstream() {
    let upstream = TsServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": method,
            "params": {"taskId": "task-1", "_meta": meta(json!({}))}});
        let mut headers = http::mcp_headers(method, None);
        headers.push(("mcp-name".into(), "task-1".into()));
        let direct = post(&upstream.mcp_url(), &message, &headers).await;
        let through = post(&sidecar.mcp_url(), &message, &headers).await;
        // This upstream serves no tasks: -32601 on 404, from the upstream, not the sidecar.
        assert_eq!(direct.status, 404, "{method}: {}", direct.text());
        assert_eq!(
            through.status,
            direct.status,
            "{method}: {}",
            through.text()
        );
        assert_eq!(through.json(), direct.json(), "{method}");
        // A header that disagrees with the body is still the sidecar's to refuse.
        let before = upstream.http_log().len();
        let last = headers.len() - 1;
        headers[last].1 = "task-2".into();
        let refused = post(&sidecar.mcp_url(), &message, &headers).await;
        assert_eq!(refused.status, 400, "{method}: {}", refused.text());
        assert_eq!(refused.json()["error"]["code"], -32020, "{method}");
        assert_eq!(
            upstream.http_log().len(),
            before,
            "{method}: forwarded a mismatch"
        );
    }
    sidecar.stop().await;
}
