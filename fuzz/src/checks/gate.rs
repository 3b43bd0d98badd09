//! `gate`: the request gate on a body it has read ([`check_message`]: strict parse,
//! classification, MCP routing headers).
//!
//! Input: optional header lines (`name: value`, one per line) and a NUL byte, then the
//! body; without a NUL the whole input is the body.
//!
//! Invariants: never panics; an accepted message, re-serialised as the upstream receives
//! it, parses back to the same value and is accepted again as the same message; a refused
//! body gets a JSON-RPC error -32700 (not JSON at all), -32600, -32602 or -32020 (a
//! header disagrees), never anything else.

use http::{HeaderMap, HeaderName, HeaderValue};
use mcp_state_guard::jsonrpc::{
    self, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR,
};
use mcp_state_guard::proxy::gate::check_message;
use serde_json::Value;

/// Small, so the fuzzer reaches the value cap.
const MAX_JSON_VALUES: usize = 200;

pub fn check(data: &[u8]) {
    let (head, body) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (&[][..], data),
    };
    let headers = headers(head);
    match check_message(&headers, body, MAX_JSON_VALUES) {
        Ok((value, message)) => {
            let forwarded = jsonrpc::serialize(&value, body.len() + 64);
            let reparsed = jsonrpc::parse_bounded(&forwarded, MAX_JSON_VALUES)
                .expect("the forwarded form of an accepted message parses");
            assert_eq!(reparsed, value, "the forwarded form reads differently");
            let (again, message_again) = check_message(&headers, &forwarded, MAX_JSON_VALUES)
                .unwrap_or_else(|_| panic!("the forwarded form of an accepted message is refused"));
            assert_eq!(again, value);
            assert_eq!(message_again, message);
            assert!(
                count_values(&value) <= MAX_JSON_VALUES,
                "accepted more JSON values than allowed"
            );
        }
        Err(refusal) => {
            let answer = refusal.error.jsonrpc_body(refusal.id.as_ref());
            let answer: Value =
                serde_json::from_slice(&answer).expect("a refusal is a JSON-RPC error");
            let code = answer["error"]["code"].as_i64().expect("an error code");
            assert!(
                [
                    PARSE_ERROR,
                    INVALID_REQUEST,
                    INVALID_PARAMS,
                    HEADER_MISMATCH
                ]
                .contains(&code),
                "refused with code {code}"
            );
            if serde_json::from_slice::<Value>(body).is_err() {
                assert_eq!(code, PARSE_ERROR, "a body that is not JSON");
            }
        }
    }
}

fn headers(head: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(name, value);
        }
    }
    headers
}

/// Every scalar, array and object, as `parse_bounded` counts them.
fn count_values(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_values).sum(),
        Value::Object(members) => members.values().map(count_values).sum(),
        _ => 0,
    }
}
