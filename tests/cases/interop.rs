//! The interop matrix: {Python, TypeScript} client × {Python, TypeScript} plaintext
//! upstream × {JSON, SSE} responses, each cell one test through one sidecar in front of one
//! upstream. In every cell each MRTR flow completes with the SDK's own retry loop and by
//! hand, the client only ever sees `v1.` tokens, the tamper attack that works directly
//! against the upstream fails through the sidecar with the frozen error, and the refused
//! retry never reaches the upstream. A tool with an `x-mcp-header` argument shows the
//! `Mcp-Param-*` round trip too: the client's first call without the header gets the
//! upstream's own -32020 through the sidecar and recovers by itself.

use crate::support::interop::{Sdk, run_client, start_upstream};
use crate::support::legacy::Mode;
use crate::support::sidecar::Sidecar;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::token::Reject;
use serde_json::{Value, json};
use std::collections::HashSet;

const PROVISIONED: &str = "Provisioned web-1 (tier=free) in eu-west-1";
const SAMPLED: &str = "The capital of France is Paris.";
const ROOT: &str = "file:///tmp/mcp-state-guard-root";

/// What the SDK's automatic loop answers for each flow (`auto-all`), from either upstream.
pub(super) fn expected_auto(upstream: Sdk) -> Value {
    let info = match upstream {
        Sdk::Python => "legacy-plaintext-state 0.1.0",
        Sdk::TypeScript => "legacy-plaintext-state-ts 0.1.0",
    };
    let multiple = format!("multiple_inputs done name=Alice greeting={SAMPLED} roots={ROOT}");
    json!({
        "tool:provision": PROVISIONED,
        "tool:two_step": "two_step done first=one second=two",
        "tool:state_only": "state_only done job-42",
        "tool:progress_ask": "progress_ask done ok=true",
        "tool:echo": "hello",
        "tool:test_input_required_result_elicitation": "Hello, Alice!",
        "tool:test_input_required_result_sampling": format!("Sampling said: {SAMPLED}"),
        "tool:test_input_required_result_list_roots": format!("Roots: {ROOT}"),
        "tool:test_input_required_result_request_state": "state-ok (round 1)",
        "tool:test_input_required_result_multiple_inputs": multiple,
        "tool:test_input_required_result_multi_round": "multi_round done name=Alice color=blue",
        // The upstream got its own plaintext back, not the token the client held.
        "tool:test_input_required_result_tampered_state":
            r#"tampered_state accepted state {"k":"tampered_state","r":1}"#,
        "tool:test_input_required_result_capabilities": "capabilities done",
        "prompt:greet_prompt": "Greet Alice (style=formal)",
        "prompt:test_input_required_result_prompt": "Use this context: test context",
        "resource:config://prod": "config for prod (role=viewer)",
        "resource:info://server": info,
    })
}

/// The hand-driven flows (`manual`): key, rounds, final text.
pub(super) fn expected_manual(upstream: Sdk) -> Vec<(&'static str, usize, String)> {
    // The TypeScript SDK hands resource handlers the WHATWG-normalised URL.
    let ete = match upstream {
        Sdk::Python => "été",
        Sdk::TypeScript => "%C3%A9t%C3%A9",
    };
    let multiple = format!("multiple_inputs done name=Alice greeting={SAMPLED} roots={ROOT}");
    vec![
        ("tool provision", 2, PROVISIONED.into()),
        (
            "tool two_step",
            3,
            "two_step done first=one second=two".into(),
        ),
        ("tool state_only", 2, "state_only done job-42".into()),
        ("tool progress_ask", 2, "progress_ask done ok=true".into()),
        (
            "tool test_input_required_result_multiple_inputs",
            2,
            multiple,
        ),
        (
            "prompt greet_prompt",
            2,
            "Greet Alice (style=formal)".into(),
        ),
        (
            "resource config://prod",
            2,
            "config for prod (role=viewer)".into(),
        ),
        (
            "resource config://été",
            2,
            format!("config for {ete} (role=viewer)"),
        ),
    ]
}

/// A sealed token: `v1.` and base64url only, so no plaintext JSON can hide in it.
pub(super) fn assert_token(state: &Value) {
    let state = state.as_str().unwrap_or_default();
    let body = state.strip_prefix("v1.").unwrap_or_default();
    let base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    assert!(body.len() > 40 && body.chars().all(base64url), "{state}");
}

pub(super) fn frozen_error() -> Value {
    json!({"code": -32602, "message": "Invalid or expired requestState",
           "data": {"reason": "invalid_request_state"}})
}

/// Progress notifications the upstream emitted (the TypeScript client also reports
/// its own retry loop as progress, "Fulfilling input required ...": not wire traffic).
pub(super) fn upstream_progress(out: &Value) -> usize {
    let progress = out["progress"].as_array().unwrap();
    let step = |p: &&Value| {
        p["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("step "))
    };
    progress.iter().filter(step).count()
}

async fn cell(client: Sdk, upstream_sdk: Sdk, mode: Mode) {
    let upstream = start_upstream(upstream_sdk, mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let cell = format!("{client:?} client, {upstream_sdk:?} upstream, {mode:?}");

    // Every flow in one client process, through the sidecar.
    let scenarios = ["auto-all", "manual", "tamper", "param-echo"];
    let out = run_client(client, &sidecar.mcp_url(), &scenarios).await;

    // 1. The SDK's own loop completes every flow with the upstream's answers.
    let auto = &out["auto-all"];
    assert_eq!(auto["results"], expected_auto(upstream_sdk), "{cell}");
    // Notifications stream through in SSE mode (progress_ask twice: 3 steps and a log line
    // each); JSON mode has nowhere to put them.
    let (progress, logs) = if mode == Mode::Sse { (6, 2) } else { (0, 0) };
    assert_eq!(upstream_progress(auto), progress, "{cell}: {auto}");
    assert_eq!(
        auto["logs"].as_array().unwrap().len(),
        logs,
        "{cell}: {auto}"
    );

    // 2. By hand: every state the client saw is a fresh token.
    let manual = out["manual"].as_object().unwrap();
    let mut tokens = Vec::new();
    for (key, rounds, last) in expected_manual(upstream_sdk) {
        let flow = &manual[key];
        assert_eq!(
            (&flow["rounds"], &flow["final"]),
            (&json!(rounds), &json!(last)),
            "{cell}: {key}"
        );
        let states = flow["states"].as_array().unwrap();
        assert_eq!(states.len(), rounds - 1, "{cell}: {key}");
        states.iter().for_each(assert_token);
        tokens.extend(states.iter().cloned());
    }
    assert_eq!(manual.len(), expected_manual(upstream_sdk).len(), "{cell}");
    let distinct: HashSet<String> = tokens.iter().map(Value::to_string).collect();
    assert_eq!(distinct.len(), tokens.len(), "{cell}: a token repeated");

    // 3. The forged retry is refused with the frozen error.
    let tamper = &out["tamper"];
    assert_eq!(tamper["state_plaintext"], false, "{cell}: {tamper}");
    assert_token(&tamper["original_state"]);
    assert_eq!(tamper["retry_error"], frozen_error(), "{cell}: {tamper}");
    assert_eq!(tamper["text"], Value::Null, "{cell}: {tamper}");

    // 4. Mcp-Param-Region went through as the client sent it.
    assert_eq!(out["param-echo"]["text"], "param_echo eu-west-1", "{cell}");
    let mirrored = |r: &Value| {
        let headers = r["headers"].as_array().unwrap();
        headers
            .iter()
            .any(|h| h[0] == "mcp-param-region" && h[1] == "eu-west-1")
    };
    assert!(upstream.http_log().iter().any(mirrored), "{cell}");

    // 5. The upstream only ever received its own plaintext, and never the refused retry:
    // provision arrived twice in each loop and once (round 1) for the tamper.
    let seen = upstream.seen();
    let provisions = seen.iter().filter(|e| e["name"] == "provision").count();
    assert_eq!(provisions, 5, "{cell}: {seen:?}");
    for entry in &seen {
        let state = &entry["requestState"];
        let plain = state.as_str().is_some_and(|s| s.starts_with('{'));
        assert!(state.is_null() || plain, "{cell}: {entry}");
        assert!(!state.to_string().contains("enterprise"), "{cell}: {entry}");
    }
    let forwarded_token = |r: &Value| {
        r["body"]
            .as_str()
            .unwrap()
            .contains(r#""requestState":"v1."#)
    };
    assert!(!upstream.http_log().iter().any(forwarded_token), "{cell}");
    let metrics = sidecar.metrics();
    let sealed = metrics.path.sealed_count();
    assert_eq!(metrics.path.verified_count("malformed"), 1, "{cell}");
    // Every token came back once, except the one the tamper forged.
    assert_eq!(metrics.path.verified_count("ok") + 1, sealed, "{cell}");
    for reject in Reject::ALL.map(Reject::as_str) {
        let expected = u64::from(reject == "malformed");
        assert_eq!(
            metrics.path.verified_count(reject),
            expected,
            "{cell}: {reject}"
        );
    }

    // Refusals: the forged state, and nothing else (the -32020 was the upstream's).
    for kind in ErrorKind::ALL {
        let expected = u64::from(kind == ErrorKind::InvalidState);
        assert_eq!(
            metrics.refusals.refused_count(kind),
            expected,
            "{cell}: {kind:?}"
        );
    }

    // 6. The same attack by the same client works against the upstream directly.
    let direct = run_client(client, &upstream.mcp_url(), &["tamper"]).await;
    let direct = &direct["tamper"];
    assert_eq!(direct["state_plaintext"], true, "{cell}: {direct}");
    let text = direct["text"].as_str().unwrap_or_default();
    assert!(text.contains("tier=enterprise"), "{cell}: {direct}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_client_python_upstream_json() {
    cell(Sdk::Python, Sdk::Python, Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_client_python_upstream_sse() {
    cell(Sdk::Python, Sdk::Python, Mode::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_client_typescript_upstream_json() {
    cell(Sdk::Python, Sdk::TypeScript, Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_client_typescript_upstream_sse() {
    cell(Sdk::Python, Sdk::TypeScript, Mode::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_client_python_upstream_json() {
    cell(Sdk::TypeScript, Sdk::Python, Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_client_python_upstream_sse() {
    cell(Sdk::TypeScript, Sdk::Python, Mode::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_client_typescript_upstream_json() {
    cell(Sdk::TypeScript, Sdk::TypeScript, Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_client_typescript_upstream_sse() {
    cell(Sdk::TypeScript, Sdk::TypeScript, Mode::Sse).await;
}
