//! The messages the fakes answer with, and what a client may see of them: a plaintext
//! state that must never reach a client, and assertions on what did.

use super::Step;
use super::client::{contains, last_data};
use serde_json::{Value, json};
use std::time::Duration;

/// Inside every plaintext state the fakes hand out: it must never reach a client.
pub const SECRET: &str = "SECRET-PLAINTEXT-7";

/// A plaintext state as legacy servers write it (JSON the client could edit).
pub fn plaintext() -> String {
    format!("{{\"tier\":\"free\",\"k\":\"{SECRET}\"}}")
}

/// The sealed token in `result.requestState` (asserting it is one, not the plaintext).
pub fn sealed(result: &Value) -> String {
    let token = result["requestState"]
        .as_str()
        .expect("a string requestState");
    assert!(
        token.starts_with("v1.") && !token.contains(SECRET),
        "{token}"
    );
    token.to_owned()
}

/// The client saw a JSON-RPC internal error for request `id` (a JSON body or the last SSE
/// event), and no plaintext.
pub fn assert_internal_error(body: &[u8], id: u64, what: &str) {
    assert!(!contains(body, SECRET), "{what}: plaintext leaked");
    let text = String::from_utf8_lossy(body);
    let error = match text.starts_with('{') {
        true => serde_json::from_slice(body).unwrap(),
        false => last_data(body),
    };
    assert_eq!(error["error"]["code"], -32603, "{what}: {text}");
    assert_eq!(error["id"], id, "{what}: {text}");
}

/// The tools/call a 2026 client sends (`state` makes it a retry).
pub fn tools_call(id: u64, state: Option<Value>) -> Value {
    let mut params = json!({"name": "provision", "arguments": {"name": "web-1"}, "_meta": crate::support::http::meta()});
    if let Some(state) = state {
        params["requestState"] = state;
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu-west-1"}}});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// An input_required response carrying `state` (any JSON: hostile upstreams send
/// numbers and objects too).
pub fn input_required(id: Value, state: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "resultType": "input_required",
        "inputRequests": {"region": {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Which region?",
            "requestedSchema": {"type": "object", "properties": {"region": {"type": "string"}}}}}},
        "requestState": state}})
}

/// A complete tools/call result.
pub fn complete(id: Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete",
        "content": [{"type": "text", "text": text}], "isError": false}})
}

/// A progress notification, as the SDK streams it before the result.
pub fn progress(n: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": n, "total": 2}})
}

/// One SSE event (`event: message`, one `data:` line) with line ending `eol`.
pub fn event(eol: &str, message: &Value) -> String {
    format!("event: message{eol}data: {message}{eol}{eol}")
}

/// For [`FakeUpstream::raw`]: an SSE answer cut inside its result. The head, one progress
/// notification (CRLF line endings), then the start of the result event for `id` with a
/// plaintext state; the socket closes after a pause that lets the sidecar read it all.
pub fn sse_cut_in_the_result(id: u64) -> Vec<Step> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                transfer-encoding: chunked\r\n\r\n";
    let chunk = |s: &str| format!("{:x}\r\n{s}\r\n", s.len());
    let partial =
        format!("event: message\r\ndata: {{\"id\":{id},\"result\":{{\"requestState\":\"{SECRET}");
    vec![
        Step::Data(format!("{head}{}", chunk(&event("\r\n", &progress(1)))).into()),
        Step::Data(chunk(&partial).into()),
        Step::Sleep(Duration::from_millis(300)),
    ]
}
