//! `requestState` misused: not a token, a token for another request or caller, or answers
//! that are not an object. Always the one frozen error, nothing forwarded.

use super::{Expect, PLAIN, Row, bad_state, params, retry, row};
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::json;

/// `anon` and `alice`: tokens minted for `BASE` (alice's bound to her), as JSON.
pub(super) fn rows(anon: &str, alice: &str) -> Vec<Row> {
    let list = r#"{"jsonrpc":"2.0","id":11,"method":"tools/list","params":{"requestState":STATE}}"#;
    let (mcp_method, mcp_name) = ("mcp-method", "mcp-name");
    vec![
        // requestState misuse: always the one frozen error, nothing forwarded.
        row("state is a number", retry("42"), bad_state("malformed")),
        row(
            "state is an object",
            retry(r#"{"tier":"enterprise"}"#),
            bad_state("malformed"),
        ),
        row("state is empty", retry(r#""""#), bad_state("malformed")),
        row(
            "state is plaintext",
            retry(&json!(PLAIN).to_string()),
            bad_state("malformed"),
        ),
        row(
            "state key escaped",
            params(r#""request\u0053tate":"forged""#),
            bad_state("malformed"),
        ),
        row(
            "state too long",
            retry(&format!("\"v1.{}\"", "A".repeat(6000))),
            bad_state("malformed"),
        ),
        row(
            "state on tools/list",
            list.replace("STATE", anon),
            bad_state("binding"),
        )
        .set(mcp_method, Some("tools/list"))
        .set(mcp_name, None),
        row(
            "state, other arguments",
            retry(anon).replacen(r#""free""#, r#""pro""#, 1),
            bad_state("binding"),
        ),
        row("alice's state, bob", retry(alice), bad_state("principal"))
            .add("x-forwarded-user", "bob"),
        row(
            "alice's state, nobody",
            retry(alice),
            bad_state("principal"),
        ),
        row(
            "answers not an object",
            retry(anon).replacen(r#""inputResponses":{"#, r#""inputResponses":"x","x":{"#, 1),
            Expect::Refused(
                400,
                -32602,
                json!(11),
                ErrorKind::InputResponses,
                Some("ok"),
            ),
        ),
    ]
}
