//! The legacy server's flows driven by hand through a sidecar (shared by the modules of
//! `tests/cases/` that run the real Python SDK server): the messages of `provision` and
//! `progress_ask`, the token check a client-visible state must pass, and the refusal every
//! misuse of a token must get: the frozen error, counted, with nothing forwarded.

use crate::support::http::{meta, post_mcp_with};
use crate::support::legacy::LegacyServer;
use crate::support::sidecar::Sidecar;
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::{Value, json};
use std::time::Duration;

pub const KEY_OLD: &str = "3b9f0c2a7d5e4f6a8b1c9d0e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a";

pub const KEY_NEW: &str = "c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3";

pub const PROVISIONED: &str = "Provisioned web-1 (tier=free) in eu-west-1";

pub const TWO_STEP: &str = "two_step done first=one second=two";

pub const GREETED: &str = "Greet Alice (style=formal)";

pub const CONFIG: &str = "config for prod (role=viewer)";

pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

pub const SSE: &str = "text/event-stream";

pub const NOBODY: &[(&str, &str)] = &[];

pub fn tool_call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments, "_meta": meta()}})
}

pub fn provision(id: u64) -> Value {
    tool_call(id, "provision", json!({"name": "web-1"}))
}

pub fn with_state(mut message: Value, state: &str, responses: Value) -> Value {
    message["params"]["requestState"] = json!(state);
    message["params"]["inputResponses"] = responses;
    message
}

pub fn accept(key: &str, field: &str, value: Value) -> Value {
    json!({key: {"action": "accept", "content": {field: value}}})
}

pub fn region() -> Value {
    accept("region", "region", json!("eu-west-1"))
}

/// The retry of provision(name=web-1), answering the region, with `state`.
pub fn retry(id: u64, state: &str) -> Value {
    with_state(provision(id), state, region())
}

/// A sealed token: `v1.` and base64url only, so no plaintext JSON can hide in it.
pub fn assert_token(state: &str) {
    let body = state.strip_prefix("v1.").unwrap_or_default();
    let base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let plaintext = state.contains("\"k\":") || state.contains("\"tier\"");
    assert!(
        !plaintext && body.len() > 40 && body.chars().all(base64url),
        "{state}"
    );
}

/// The state of an `input_required` result, checked to be a token.
pub fn token_of(message: &Value) -> String {
    let result = &message["result"];
    assert_eq!(result["resultType"], "input_required", "{message}");
    let token = result["requestState"].as_str().unwrap_or_default();
    assert_token(token);
    token.to_owned()
}

pub fn text(message: &Value) -> &str {
    let text = message["result"]["content"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("no text: {message}"))
}

/// Round 1 of provision(name=web-1) through `url`: the sealed state it answers.
pub async fn mint(url: &str, extra: &[(&str, &str)]) -> String {
    token_of(&post_mcp_with(url, &provision(1), extra).await.json())
}

pub async fn assert_opens(url: &str, id: u64, token: &str, extra: &[(&str, &str)]) {
    let reply = post_mcp_with(url, &retry(id, token), extra).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(text(&reply.json()), PROVISIONED);
}

pub async fn assert_refused(sidecar: &Sidecar, up: &LegacyServer, message: &Value, label: &str) {
    assert_refused_with(sidecar, up, message, NOBODY, label).await;
}

/// Send `message` through the sidecar and demand the frozen error, the `label` counter up
/// by one, and an upstream that saw nothing: no handler call, not even an HTTP request.
pub async fn assert_refused_with(
    sidecar: &Sidecar,
    upstream: &LegacyServer,
    message: &Value,
    extra: &[(&str, &str)],
    label: &str,
) {
    let before = (upstream.seen(), upstream.http_log());
    let metrics = sidecar.metrics();
    let count = metrics.path.verified_count(label);
    let refused = metrics.refusals.refused_count(ErrorKind::InvalidState);
    let reply = post_mcp_with(&sidecar.mcp_url(), message, extra).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let frozen = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602,
        "message": "Invalid or expired requestState", "data": {"reason": "invalid_request_state"}}});
    assert_eq!(reply.json(), frozen);
    assert_eq!(metrics.path.verified_count(label), count + 1, "{label}");
    assert_eq!(
        metrics.refusals.refused_count(ErrorKind::InvalidState),
        refused + 1
    );
    let after = (upstream.seen(), upstream.http_log());
    assert_eq!(after, before, "the refused request reached the upstream");
}

/// progress_ask with a progress token and logging opted in: SSE from an SSE-mode server.
pub fn progress_ask(id: u64, delay_ms: u64) -> Value {
    let mut message = tool_call(id, "progress_ask", json!({"delay_ms": delay_ms}));
    message["params"]["_meta"]["progressToken"] = json!("progress-1");
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    message
}

pub fn confirmed(message: Value, state: &str) -> Value {
    with_state(message, state, accept("confirm", "ok", json!(true)))
}
