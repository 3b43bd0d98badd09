//! A request's binding: read over the body as the reference's rules read its tree, and
//! its digest reused for the arguments only when it is theirs.

use super::*;
use serde_json::{Value, json};

/// The binding's digest is the arguments' own digest (which idempotency then takes rather
/// than serialising them again) exactly when [`RequestBinding::digest_of_arguments`]
/// gives it, and never otherwise.
#[test]
fn a_bindings_digest_is_the_arguments_digest_unless_they_are_falsy() {
    for arguments in [
        None,
        Some(json!({"name": "web-1"})),
        Some(json!({})),
        Some(json!([1])),
        Some(json!("x")),
        Some(json!(1)),
        Some(json!(true)),
        Some(json!([])),
        Some(json!("")),
        Some(json!(0)),
        Some(json!(0.0)),
        Some(json!(false)),
        Some(json!(null)),
    ] {
        let params = arguments.as_ref().map(|a| json!({"arguments": a}));
        let params = params.as_ref().and_then(Value::as_object);
        let binding = RequestBinding::of("tools/call", params).unwrap();
        let own = args_digest(arguments.as_ref()).unwrap();
        let given = binding.digest_of_arguments(arguments.as_ref());
        assert_eq!(
            given.is_some(),
            binding.args_digest() == own,
            "{arguments:?}"
        );
        assert!(given.is_none_or(|d| d == own), "{arguments:?}");
    }
}

/// A call's binding read over its body is the reference rules' binding of its tree (a
/// target that is no string never gets there: the gate refuses it): the arguments falsy
/// or not, numbers as Python writes them,
/// keys sorted by code point, `resources/read` without arguments.
#[test]
fn a_binding_read_over_the_body_is_the_trees() {
    for (method, params) in [
        (
            "tools/call",
            serde_json::from_str(
                r#"{"name": "search", "arguments": {"q": "rust", "n": 1.50,
                "b": [1e2, -0, 10000000000000000000000, 1E-7], "é": {"z": null, "a": true}}}"#,
            )
            .unwrap(),
        ),
        ("tools/call", json!({"name": "t", "arguments": {}})),
        // In the reference's spelling as they come: digested as their text stands.
        (
            "tools/call",
            json!({"name": "t", "arguments": {"a": "x\"y", "b": [1, -2, {"c": null}]}}),
        ),
        ("tools/call", json!({"arguments": {"a": 1}})),
        // Not so: written out first.
        (
            "tools/call",
            json!({"name": "t", "arguments": {"b": 1, "a": 2}}),
        ),
        (
            "tools/call",
            json!({"name": "t", "arguments": {"a\"": 1, "b": 2}}),
        ),
        (
            "tools/call",
            serde_json::from_str(r#"{"name": "t", "arguments": {"a": -0, "b": [1.50]}}"#).unwrap(),
        ),
        ("tools/call", json!({"name": "t", "arguments": 0.0})),
        ("tools/call", json!({"name": "t", "arguments": ""})),
        ("tools/call", json!({"name": "t", "arguments": [0]})),
        ("tools/call", json!({"arguments": {"a": "\u{1F600}\n"}})),
        ("prompts/get", json!({"name": "p", "arguments": {"k": "v"}})),
        (
            "resources/read",
            json!({"uri": "file:///x", "arguments": {"ignored": 1}}),
        ),
    ] {
        let mut body = crate::jsonrpc::ScannedBody::call(method, &params).unwrap();
        let (method, params_read) = body.call_mut().unwrap();
        assert_eq!(
            RequestBinding::of_params(method, &params_read),
            RequestBinding::of(method, params.as_object()),
            "{params}"
        );
    }
}
