//! What a client can read as a `requestState`, and the check that each one is a token of
//! the fuzz ring: the upstream's plaintext never reaches the client.

use mcp_state_guard::facade::jsonrpc;
use mcp_state_guard::facade::sse::{EventFramer, event_data};
use serde_json::{Map, Value};

/// Check a body a client received, whatever its label says: read as JSON, and read as an
/// SSE stream (a lenient client may do either), every JSON-RPC message in it may carry
/// only sealed states.
pub fn check_body(body: &[u8]) {
    let body = strip_bom(body);
    check_json(body, "a JSON body");
    let mut framer = EventFramer::new(usize::MAX);
    framer.push(body);
    while let Ok(Some(event)) = framer.next_event() {
        check_event(&event);
    }
    check_event(&framer.finish());
}

/// Check one SSE event (a BOM before it is skipped, as WHATWG decoders do).
pub fn check_event(event: &[u8]) {
    if let Some(data) = event_data(strip_bom(event)) {
        check_json(&data, "an SSE event's data");
    }
}

fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes)
}

/// Parse as a lenient client does (serde_json keeps the last of duplicate keys, as
/// `JSON.parse` does) and check every message.
fn check_json(bytes: &[u8], what: &str) {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        check_message(&value, what);
    }
}

/// A message, or a batch of them: at `result`, `error.data` and `params` (under any key a
/// lenient client folds to those names), every key that folds to `requestState` holds null
/// or a token the fuzz ring opens.
pub fn check_message(value: &Value, what: &str) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| check_message(item, what)),
        Value::Object(message) => {
            for (key, level) in message {
                match jsonrpc::fold(key).as_str() {
                    "result" | "params" => check_level(level, what),
                    "error" => {
                        if let Value::Object(error) = level {
                            for (key, data) in error {
                                if jsonrpc::fold(key) == "data" {
                                    check_level(data, what);
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

fn check_level(level: &Value, what: &str) {
    let Value::Object(level) = level else {
        return;
    };
    for (key, state) in level {
        if jsonrpc::fold(key) != "requeststate" {
            continue;
        }
        match state {
            Value::Null => {}
            Value::String(token) => assert!(
                super::ring::sealer().ring().open(token).is_ok(),
                "{what} gives the client a requestState `{key}` that is not a sealed token: {}",
                excerpt(level)
            ),
            other => panic!("{what} gives the client a non-string requestState: {other}"),
        }
    }
}

fn excerpt(level: &Map<String, Value>) -> String {
    let text = serde_json::to_string(level).unwrap_or_default();
    text.chars().take(400).collect()
}
