//! The reference 2025-era server, `@modelcontextprotocol/server-everything` (2026.8.31,
//! pinned in `tests/ts/package.json`, on the TypeScript SDK v1), as the sidecar's stdio
//! child, driven by the Python SDK client (`mode="legacy"`) and the TypeScript SDK client
//! (its default `legacy` negotiation) through a 2025-11-25 session: the roots request the
//! server sends after `initialized`, echo, a tool with progress notifications, a tool that
//! asks the client for sampling, a resource subscription with its updates, and log messages
//! under `logging/setLevel`. Every one must arrive exactly as the server sent it, in one
//! session with a child of its own, ended by the client's `DELETE`.
//!
//! The scenario is `everything` in `tests/py/client_flows.py` and `tests/ts/client_flows.mjs`
//! (the same JSON shape from both).

use crate::cases::stdio_upstream::{eventually, stdio_config, up};
use crate::support::interop::{Sdk, run_client};
use crate::support::python::{client_flows, repo_path};
use crate::support::sidecar::Sidecar;
use crate::support::ts::node;
use mcp_state_guard::facade::stdio::{BridgeRefusal, CutOff, Dropped, SessionEnd, Unmatched};
use serde_json::{Value, json};
use std::time::Duration;

/// The package's `bin` (`mcp-server-everything`): `index.js [stdio|sse|streamableHttp]`.
const ENTRY: &str = "target/ts/node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// What the scenario subscribes to: one of the server's static documents.
const URI: &str = "demo://resource/static/document/features.md";

/// `node .../server-everything/dist/index.js stdio`, after checking the install.
fn everything_server() -> Vec<String> {
    let entry = repo_path(ENTRY);
    assert!(
        entry.exists(),
        "{} does not exist: run `tests/run.sh` (or `tests/ts/install.sh`) to install the \
         pinned test peers into target/ts",
        entry.display()
    );
    vec![
        node().display().to_string(),
        entry.display().to_string(),
        "stdio".into(),
    ]
}

/// The `everything` scenario's report from `client`.
async fn scenario(client: Sdk, url: &str) -> Value {
    match client {
        // client_flows.py runs one scenario per process and prints its object as is.
        Sdk::Python => client_flows(url, &["everything"]).await,
        Sdk::TypeScript => run_client(client, url, &["everything"]).await["everything"].clone(),
    }
}

/// Run the scenario while watching how many sessions the sidecar holds: the report and
/// the most sessions seen open at once.
async fn run_watching(sidecar: &Sidecar, client: Sdk) -> (Value, u64) {
    let stdio = &sidecar.metrics().stdio;
    let url = sidecar.mcp_url();
    let run = scenario(client, &url);
    tokio::pin!(run);
    let mut most = 0;
    loop {
        tokio::select! {
            out = &mut run => return (out, most.max(stdio.sessions_now())),
            () = tokio::time::sleep(Duration::from_millis(20)) => {
                most = most.max(stdio.sessions_now());
            }
        }
    }
}

/// The numbers of a progress or result value, whichever way the SDK spells them
/// (Python `1.0`, TypeScript `1`).
fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

fn assert_session_id(out: &Value) {
    let id = out["session_id"].as_str().unwrap_or_default();
    // 128 random bits the sidecar issues, in hex.
    assert_eq!(id.len(), 32, "session id {id:?}: {out}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id:?}");
    assert_eq!(out["session_ids_consistent"], true, "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
}

/// The server's roots request after `initialized`, answered once, and echo.
fn assert_roots_and_echo(out: &Value) {
    assert_eq!(out["roots_requests"], 1, "{out}");
    assert_eq!(out["echo"], "Echo: hello everything", "{out}");
}

/// trigger-long-running-operation(duration 1, steps 4): one progress notification a step,
/// each `{progress: i, total: 4}` without a message, in order, then the result.
fn assert_progress(out: &Value) {
    let progress: Vec<(f64, f64, Value)> = out["progress"]
        .as_array()
        .unwrap_or_else(|| panic!("no progress list: {out}"))
        .iter()
        .map(|p| {
            (
                number(&p["progress"]),
                number(&p["total"]),
                p["message"].clone(),
            )
        })
        .collect();
    let expected: Vec<(f64, f64, Value)> =
        (1..=4).map(|i| (f64::from(i), 4.0, Value::Null)).collect();
    assert_eq!(progress, expected, "{out}");
    assert_eq!(
        out["long_running"], "Long running operation completed. Duration: 1 seconds, Steps: 4.",
        "{out}"
    );
}

/// trigger-sampling-request: the server's `sampling/createMessage` reached the client as
/// the server built it, once, and the client's answer reached the tool, which quotes it.
fn assert_sampling(out: &Value) {
    assert_eq!(
        out["sampling_requests"],
        json!([{
            "prompt": "Resource trigger-sampling-request context: What is the capital of France?",
            "system_prompt": "You are a helpful test server.",
            "max_tokens": 50,
        }]),
        "{out}"
    );
    let text = out["sampling_result"].as_str().unwrap_or_default();
    let quoted = text
        .strip_prefix("LLM sampling result: \n")
        .unwrap_or_else(|| panic!("not the tool's result: {text:?}"));
    let quoted: Value = serde_json::from_str(quoted).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(
        quoted,
        json!({
            "role": "assistant",
            "content": {"type": "text", "text": "The capital of France is Paris."},
            "model": "test-model",
            "stopReason": "endTurn",
        }),
        "{out}"
    );
}

/// resources/subscribe, toggle-subscriber-updates (an update at once, then every 5 s),
/// resources/unsubscribe: the updates received while subscribed name the URI, no other.
fn assert_subscription(out: &Value) {
    assert_eq!(out["listed"], true, "{URI} is not in resources/list: {out}");
    // The server's own words; on stdio it sees no session id ("undefined").
    assert_eq!(
        out["toggles"],
        json!([
            "Started simulated resource updated notifications for session undefined at a 5 \
             second pace. Client will receive updates for any resources the it is subscribed to.",
            "Stopped simulated resource updates for session undefined",
        ]),
        "{out}"
    );
    let updates = out["updates"]
        .as_array()
        .unwrap_or_else(|| panic!("no updates list: {out}"));
    // One at once; a second only if the scenario outlived the 5 s pace.
    assert!(
        (1..=2).contains(&updates.len()) && updates.iter().all(|u| u == URI),
        "updates: {out}"
    );
}

/// The log messages, exactly: the roots acknowledgement (sent before any setLevel, so
/// unfiltered), then, at level `warning`, nothing for the subscribe's `info`
/// acknowledgement (the child applied the level the client set through the sidecar), then
/// at `info` the unsubscribe's acknowledgement.
fn assert_logs(out: &Value) {
    assert_eq!(
        out["logs"],
        json!([
            {
                "level": "info",
                "logger": "everything-server",
                "data": "Roots updated: 1 root(s) received from client",
            },
            {
                "level": "info",
                "logger": null,
                "data": format!("Received Unsubscribe Resource request: {URI} "),
            },
        ]),
        "{out}"
    );
}

/// One session, opened by the client's `initialize` and ended by its `DELETE`, with
/// nothing the child sent dropped, unmatched or refused.
async fn assert_one_session(sidecar: &Sidecar, most: u64) {
    let stdio = &sidecar.metrics().stdio;
    assert_eq!(most, 1, "sessions open at once");
    eventually("the session to end", || stdio.sessions_now() == 0).await;
    assert_eq!(stdio.sessions_ended_count(SessionEnd::Deleted), 1);
    for end in [SessionEnd::Idle, SessionEnd::Exited, SessionEnd::Shutdown] {
        assert_eq!(stdio.sessions_ended_count(end), 0, "{end:?}");
    }
    for reason in [
        Unmatched::NotJson,
        Unmatched::UnknownId,
        Unmatched::Notification,
        Unmatched::Invalid,
    ] {
        assert_eq!(stdio.unmatched_count(reason), 0, "unmatched {reason:?}");
    }
    for reason in [Dropped::JsonCaller, Dropped::OverBudget] {
        assert_eq!(stdio.dropped_count(reason), 0, "dropped {reason:?}");
    }
    for reason in [CutOff::SlowReader, CutOff::OverBudget] {
        assert_eq!(stdio.cut_off_count(reason), 0, "cut off {reason:?}");
    }
    for reason in [
        BridgeRefusal::Ungated,
        BridgeRefusal::OverBudget,
        BridgeRefusal::PrincipalShare,
        BridgeRefusal::SessionLimit,
        BridgeRefusal::SessionShare,
        BridgeRefusal::UnknownSession,
    ] {
        assert_eq!(stdio.refused_count(reason), 0, "refused {reason:?}");
    }
    // The roots and sampling requests went to the session's client, not refused.
    assert_eq!(stdio.server_requests_refused(), 0);
    assert_eq!(stdio.restarts(), 0);
}

async fn everything_cell(client: Sdk) {
    let sidecar = Sidecar::start(stdio_config(everything_server())).await;
    // The shared child answers server/discover with -32601 (a 2025-era server): up anyway.
    up(&sidecar).await;
    let (out, most) = run_watching(&sidecar, client).await;
    assert_session_id(&out);
    assert_roots_and_echo(&out);
    assert_progress(&out);
    assert_sampling(&out);
    assert_subscription(&out);
    assert_logs(&out);
    assert_one_session(&sidecar, most).await;
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_everything_python_client() {
    everything_cell(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_everything_typescript_client() {
    everything_cell(Sdk::TypeScript).await;
}
