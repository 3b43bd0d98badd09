//! `gate`: the request gate on a body it has read ([`check_message`]: one strict scan,
//! classification, MCP routing headers) and the body it forwards, against the tree path
//! it replaced ([`oracle`]).
//!
//! Input: optional header lines (`name: value`, one per line) and a NUL byte, then the
//! body; without a NUL the whole input is the body.
//!
//! Invariants: never panics; both gates reach the same decision (accepted as the same
//! message, or refused with the same error, HTTP status and id), except that the scanner
//! alone refuses serde_json's number stand-in key; a call's binding read over the body
//! (`RequestBinding::of_params`) is the reference rules' binding of the tree; after the same edits by the phases
//! (the state replaced or removed, unasked answers dropped, a handle argument replaced,
//! the idempotency key stripped), the body the upstream receives parses to what the
//! tree path forwarded, holds no whitespace between tokens, is accepted again as the
//! same message, and within the value cap; a refused body gets a JSON-RPC error -32700
//! (not JSON at all), -32600, -32602 or -32020 (a header disagrees), never anything else.

use super::oracle::{self, TreeParams};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use mcp_state_guard::facade::error::ProxyError;
use mcp_state_guard::facade::jsonrpc::{
    self, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Params, ParamsField,
    ParseError,
};
use mcp_state_guard::facade::proxy::gate::check_message;
use mcp_state_guard::facade::token::RequestBinding;
use serde_json::{Value, json};

/// Small, so the fuzzer reaches the value cap.
const MAX_JSON_VALUES: usize = 200;

pub fn check(data: &[u8]) {
    let (head, body) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (&[][..], data),
    };
    let headers = headers(head);
    let tree = oracle::check_message(&headers, body, MAX_JSON_VALUES);
    match (
        check_message(&headers, Bytes::copy_from_slice(body), MAX_JSON_VALUES),
        tree,
    ) {
        (Err(refusal), _) if is_stand_in(&refusal.error) => {}
        (Ok(mut scanned), Ok((mut value, message))) => {
            assert_eq!(scanned.message(), &message, "the message differs");
            assert!(
                count_values(&value) <= MAX_JSON_VALUES,
                "accepted more JSON values than allowed"
            );
            if let Some((method, params)) = scanned.call_mut() {
                let tree = value.get_mut("params").and_then(Value::as_object_mut);
                // The binding read over the body (the sidecar) and by the reference's
                // rules from the tree (the oracle).
                assert_eq!(
                    RequestBinding::of_params(method, &params),
                    RequestBinding::of(method, tree.as_deref()),
                    "the binding differs"
                );
                edit_both(params, TreeParams(tree));
            }
            let forwarded = scanned.into_forwarded();
            same_upstream_message(&headers, &forwarded, &value);
        }
        (Err(refusal), Err(tree)) => {
            assert_eq!(
                refusal.error.jsonrpc_body(refusal.id.as_ref()),
                tree.error.jsonrpc_body(tree.id.as_ref()),
                "the refusal differs: {:?} / {:?}",
                refusal.error,
                tree.error
            );
            assert_eq!(refusal.error.http_status(), tree.error.http_status());
            refused_well(&refusal.error, refusal.id.as_ref(), body);
        }
        (scanned, tree) => panic!(
            "scanned {:?}, tree {:?}",
            scanned.as_ref().map(|s| s.message()).map_err(|r| &r.error),
            tree.map(|t| t.1).map_err(|r| r.error)
        ),
    }
}

/// serde_json's number stand-in key, which only the scanner tells from a number.
fn is_stand_in(error: &ProxyError) -> bool {
    matches!(error, ProxyError::Parse(ParseError::AmbiguousKey(key)) if key == "$serde_json::private::Number")
}

/// The refusal of serde_json's raw-value stand-in key.
fn is_raw_value_key(error: &ProxyError) -> bool {
    matches!(error, ProxyError::Parse(ParseError::AmbiguousKey(key)) if key == "$serde_json::private::RawValue")
}

/// The edits the phases make, made on both, each only where its member is there, and
/// read back alike.
fn edit_both(mut params: Params<'_>, mut tree: TreeParams<'_>) {
    use ParamsField::*;
    // Strings first, read from the body's tokens while nothing parsed them.
    for field in ParamsField::ALL {
        assert_eq!(
            params.get_str(field).as_deref(),
            tree.get(field).and_then(Value::as_str),
            "{field:?} reads differently as a string"
        );
    }
    // Set and removed without being read.
    match tree.get(RequestState).cloned() {
        Some(Value::Null) => {
            assert_eq!(
                params.remove(RequestState),
                tree.remove(RequestState).is_some()
            );
        }
        Some(_) => {
            // The opener's edit: a string token as the claims spell it, written as it is.
            let token = r#""plain \u001f \"state\" \u00e9""#.to_owned();
            let plain = json!("plain \u{1f} \"state\" é");
            assert_eq!(
                params.set_string_token(RequestState, token),
                tree.set(RequestState, plain)
            );
        }
        None => {}
    }
    assert_eq!(
        params.remove(IdempotencyKey),
        tree.remove(IdempotencyKey).is_some()
    );
    for field in ParamsField::ALL {
        assert_eq!(
            params.get(field),
            tree.get(field),
            "{field:?} reads differently"
        );
    }
    let keep = |key: &str| key.len().is_multiple_of(2);
    assert_eq!(
        params.retain_answers(keep).ok(),
        tree.retain_answers(keep).ok()
    );
    let raw = json!({"raw": [1, "h"]});
    for pointer in ["/h", "/a/0", ""] {
        assert_eq!(
            params.replace_at(Arguments, pointer, raw.clone()),
            tree.replace_at(Arguments, pointer, raw.clone()),
            "{pointer}"
        );
    }
    for field in ParamsField::ALL {
        assert_eq!(
            params.get(field),
            tree.get(field),
            "{field:?} after the edits"
        );
    }
}

/// What the upstream receives from the scanned path reads as the tree path's message,
/// has no whitespace between tokens, and is a message the gate accepts as the same.
fn same_upstream_message(headers: &HeaderMap, forwarded: &[u8], tree: &Value) {
    let sent = jsonrpc::parse_bounded(forwarded, usize::MAX)
        .expect("the forwarded form of an accepted message parses");
    let tree_sent = jsonrpc::parse_bounded(&oracle::forwarded(tree), usize::MAX)
        .expect("the tree's forwarded form parses");
    assert_eq!(sent, tree_sent, "the upstream reads a different message");
    let again = check_message(headers, Bytes::copy_from_slice(forwarded), usize::MAX)
        .unwrap_or_else(|_| panic!("the forwarded form of an accepted message is refused"));
    assert!(
        again.index().gaps().next().is_none(),
        "whitespace between tokens reaches the upstream"
    );
    let tree_message = jsonrpc::classify(tree).expect("the tree was classified");
    assert_eq!(again.message(), &tree_message);
}

fn refused_well(error: &ProxyError, id: Option<&Value>, body: &[u8]) {
    let answer = error.jsonrpc_body(id);
    let answer: Value = serde_json::from_slice(&answer).expect("a refusal is a JSON-RPC error");
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
    // serde_json's own `Value` reads an object whose first key is its raw-value
    // stand-in as the JSON the key's string spells, and fails where that is none: no
    // verdict on the body's syntax (the gate refuses the key, as the tree path does).
    if serde_json::from_slice::<Value>(body).is_err() && !is_raw_value_key(error) {
        assert_eq!(code, PARSE_ERROR, "a body that is not JSON");
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
