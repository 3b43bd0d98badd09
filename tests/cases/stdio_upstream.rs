//! A stdio upstream (`upstream = "stdio"`, issue 23): the sidecar runs an unmodified stdio
//! MCP server as its child and gives it every protection an HTTP upstream gets. The real
//! peers are the Python SDK's stdio server and the TypeScript SDK's `serveStdio` (over its
//! `StdioServerTransport`) with the plaintext-state tools of the HTTP peers, driven by the
//! SDK clients; small misbehaving children (`tests/py/stdio_child.py`) show that answers
//! reach only their caller and that a crash, garbage, silence, a flood of stderr, a full
//! queue or an overlong line ends in one answer per request and a sidecar that recovers.

use crate::cases::interop::{
    assert_token, expected_auto, expected_manual, frozen_error, upstream_progress,
};
use crate::support::conformance::run_suite;
use crate::support::flow::{HTTP_TIMEOUT, text, tool_call};
use crate::support::http::{event_json, mcp_headers, post_mcp, post_mcp_with, send, split_events};
use crate::support::interop::{Sdk, run_client};
use crate::support::python::{interpreter, repo_path};
use crate::support::sidecar::{Sidecar, config};
use http::Method;
use mcp_state_guard::facade::config::Config;
use mcp_state_guard::facade::stdio::{BridgeRefusal, Dropped, Unmatched};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A sidecar configuration running `argv` as its stdio upstream (a short drain, so a
/// test's stop is quick).
pub(crate) fn stdio_config(argv: Vec<String>) -> Config {
    let mut config = config("stdio");
    config.upstream_command.argv = argv;
    config.upstream_command.restart_min_ms = 50;
    // The child's environment is minimal: no bytecode written into the repository.
    config
        .upstream_command
        .env
        .insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
    config.timeouts.drain_ms = 2000;
    config
}

fn python(script: &str, args: &[&str]) -> Vec<String> {
    let mut argv = vec![
        interpreter().display().to_string(),
        repo_path(&format!("tests/py/{script}"))
            .display()
            .to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

fn typescript_server() -> Vec<String> {
    let command = crate::support::ts::node_command("legacy_server.mjs");
    let mut argv = vec![command.get_program().to_string_lossy().into_owned()];
    argv.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    argv.push("--stdio".into());
    argv
}

pub(crate) fn child(args: &[&str]) -> Vec<String> {
    python("stdio_child.py", args)
}

/// Wait (bounded) until `done` holds.
pub(crate) async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until the child answered `server/discover`.
pub(crate) async fn up(sidecar: &Sidecar) {
    eventually("the child to be up", || sidecar.metrics().stdio.up()).await;
}

fn echo(id: Value, text: &str, delay_ms: u64, progress: Option<Value>) -> Value {
    let mut message = tool_call(0, "echo", json!({"text": text, "delay_ms": delay_ms}));
    message["id"] = id;
    if let Some(token) = progress {
        message["params"]["_meta"]["progressToken"] = token;
    }
    message
}

/// The SDK clients' flows through the sidecar in front of an SDK stdio server: every flow
/// completes, the client sees only tokens, the forged retry is refused, progress reaches
/// its caller (log messages cannot be tied to a request on stdio: counted, not delivered).
async fn sdk_cell(client: Sdk, server: Sdk) {
    let argv = match server {
        Sdk::Python => python("legacy_server.py", &["--stdio"]),
        Sdk::TypeScript => typescript_server(),
    };
    let sidecar = Sidecar::start(stdio_config(argv)).await;
    let cell = format!("{client:?} client, {server:?} stdio server");
    let out = run_client(
        client,
        &sidecar.mcp_url(),
        &["auto-all", "manual", "tamper"],
    )
    .await;

    let auto = &out["auto-all"];
    assert_eq!(auto["results"], expected_auto(server), "{cell}");
    assert_eq!(upstream_progress(auto), 6, "{cell}: {auto}");
    assert_eq!(auto["logs"].as_array().unwrap().len(), 0, "{cell}: {auto}");

    let manual = out["manual"].as_object().unwrap();
    for (key, rounds, last) in expected_manual(server) {
        let flow = &manual[key];
        assert_eq!(
            (&flow["rounds"], &flow["final"]),
            (&json!(rounds), &json!(last)),
            "{cell}: {key}"
        );
        flow["states"]
            .as_array()
            .unwrap()
            .iter()
            .for_each(assert_token);
    }

    let tamper = &out["tamper"];
    assert_eq!(tamper["state_plaintext"], false, "{cell}: {tamper}");
    assert_token(&tamper["original_state"]);
    assert_eq!(tamper["retry_error"], frozen_error(), "{cell}: {tamper}");

    let metrics = sidecar.metrics();
    assert_eq!(metrics.path.verified_count("malformed"), 1, "{cell}");
    assert_eq!(
        metrics.path.verified_count("ok") + 1,
        metrics.path.sealed_count(),
        "{cell}"
    );
    let stdio = &metrics.stdio;
    assert_eq!(stdio.restarts(), 0, "{cell}");
    assert_eq!(stdio.unmatched_count(Unmatched::UnknownId), 0, "{cell}");
    assert_eq!(stdio.unmatched_count(Unmatched::NotJson), 0, "{cell}");
    // progress_ask's two log lines (the clients opt into logging).
    assert_eq!(stdio.unmatched_count(Unmatched::Notification), 2, "{cell}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_python_client_python_sdk_stdio_server() {
    sdk_cell(Sdk::Python, Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_typescript_client_typescript_sdk_stdio_server() {
    sdk_cell(Sdk::TypeScript, Sdk::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_python_client_typescript_sdk_stdio_server() {
    sdk_cell(Sdk::Python, Sdk::TypeScript).await;
}

/// The official conformance suite's 14 `input-required-result-*` scenarios through the
/// sidecar in front of the Python SDK's stdio server: all pass, the tampered state is
/// refused by the sidecar.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_conformance_input_required_scenarios_pass() {
    let argv = python("legacy_server.py", &["--stdio"]);
    let sidecar = Sidecar::start(stdio_config(argv)).await;
    up(&sidecar).await;
    let run = run_suite(&sidecar.mcp_url()).await;
    assert_eq!(run.scenarios.len(), 14, "{}", run.report);
    assert!(
        run.failed().is_empty(),
        "failed {:?}: {}",
        run.failed(),
        run.report
    );
    assert!(sidecar.metrics().path.verified_count("malformed") >= 1);
    assert!(sidecar.metrics().path.verified_count("ok") >= 1);
    sidecar.stop().await;
}

/// A plaintext state is sealed for the client, the child gets its plaintext back on the
/// retry, a forged token never reaches it; a JSON-only caller gets its answer without the
/// progress it cannot receive (counted); a GET without a session and an unknown session
/// are refused clearly.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_state_is_sealed_and_only_the_childs_own_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("received");
    let argv = child(&["--received", received.to_str().unwrap()]);
    let sidecar = Sidecar::start(stdio_config(argv)).await;
    let url = sidecar.mcp_url();

    let round1 = post_mcp(&url, &tool_call(1, "state", json!({})))
        .await
        .json();
    let token = round1["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    crate::support::flow::assert_token(&token);
    let mut retry = tool_call(2, "state", json!({}));
    retry["params"]["requestState"] = json!(token);
    retry["params"]["inputResponses"] =
        json!({"ok": {"action": "accept", "content": {"ok": true}}});
    let done = post_mcp(&url, &retry).await.json();
    assert_eq!(text(&done), "tier=free");
    // Forged: refused here, never written to the child.
    let forged = token.replacen("v1.", "v1.A", 1);
    retry["params"]["requestState"] = json!(forged);
    retry["id"] = json!(3);
    let refused = post_mcp(&url, &retry).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"], frozen_error());
    let lines = std::fs::read_to_string(&received).unwrap();
    assert!(!lines.contains("v1."), "a token reached the child: {lines}");
    assert_eq!(lines.matches(r#"\"tier\":\"free\""#).count(), 1, "{lines}");

    // Accept: application/json only: progress has nowhere to go.
    let message = echo(json!(7), "json only", 0, Some(json!("tok")));
    let mut headers = mcp_headers("tools/call", Some("echo"));
    headers[1].1 = "application/json".into();
    let reply = send(
        Method::POST,
        &url,
        &headers,
        serde_json::to_vec(&message).unwrap(),
        HTTP_TIMEOUT,
    )
    .await;
    assert_eq!(reply.content_type(), "application/json");
    assert_eq!(text(&reply.json()), "json only");
    assert_eq!(reply.json()["id"], 7);
    assert_eq!(
        sidecar.metrics().stdio.dropped_count(Dropped::JsonCaller),
        2
    );

    // No session: no GET stream (a 2026-07-28 server has none); a session id that names
    // no session of this caller's is not found, and counted.
    let get = send(
        Method::GET,
        &url,
        &[("accept".into(), "text/event-stream".into())],
        Vec::new(),
        HTTP_TIMEOUT,
    )
    .await;
    assert_eq!(get.status, 405);
    let unknown = post_mcp_with(
        &url,
        &echo(json!(5), "x", 0, None),
        &[("mcp-session-id", "0123456789abcdef0123456789abcdef")],
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["code"], -32001);
    assert_eq!(
        sidecar
            .metrics()
            .stdio
            .refused_count(BridgeRefusal::UnknownSession),
        1
    );
    sidecar.stop().await;
}

/// 50 callers at once, all with id 1 and progress token "p", answered out of order: each
/// gets its own progress and its own answer, with its own id and token.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_concurrent_callers_get_only_their_own_answers() {
    let sidecar = Sidecar::start(stdio_config(child(&[]))).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let calls = (0..50u64).map(|i| {
        let url = url.clone();
        tokio::spawn(async move {
            let mine = format!("caller-{i}");
            let message = echo(json!(1), &mine, (50 - i) * 4, Some(json!("p")));
            let reply = post_mcp(&url, &message).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert!(reply.content_type().starts_with("text/event-stream"));
            let mut buffer = bytes::BytesMut::from(&reply.body[..]);
            let events: Vec<Value> = split_events(&mut buffer)
                .iter()
                .map(|e| event_json(e))
                .collect();
            assert_eq!(events.len(), 3, "{}", reply.text());
            for progress in &events[..2] {
                assert_eq!(progress["params"]["progressToken"], "p");
                assert_eq!(progress["params"]["message"], mine.as_str());
            }
            assert_eq!(events[2]["id"], 1);
            assert_eq!(text(&events[2]), mine);
        })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.unwrap();
    }
    let stdio = &sidecar.metrics().stdio;
    for reason in Unmatched::ALL {
        assert_eq!(stdio.unmatched_count(reason), 0, "{reason:?}");
    }
    sidecar.stop().await;
}

/// A child that dies mid-call: its caller gets a JSON-RPC error, the child is started
/// again, and the next call works.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_child_crash_mid_call_answers_and_restarts() {
    let sidecar = Sidecar::start(stdio_config(child(&[]))).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let reply = post_mcp(&url, &tool_call(5, "crash", json!({}))).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    let error = reply.json();
    assert_eq!(error["id"], 5);
    assert_eq!(error["error"]["code"], -32603);
    eventually("a restart", || sidecar.metrics().stdio.restarts() >= 1).await;
    let reply = post_mcp(&url, &echo(json!(6), "again", 0, None)).await;
    assert_eq!(text(&reply.json()), "again");
    sidecar.stop().await;
}

/// Garbage on stdout (a stray print, an answer to nobody carrying a state, an unattributable
/// log line) is counted and reaches no caller.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_garbage_on_stdout_is_counted_not_delivered() {
    let sidecar = Sidecar::start(stdio_config(child(&["--garbage"]))).await;
    let reply = post_mcp(
        &sidecar.mcp_url(),
        &echo(json!(1), "clean", 0, Some(json!(1))),
    )
    .await;
    assert!(!reply.text().contains("stray"), "{}", reply.text());
    assert_eq!(text(&reply.message()), "clean");
    let stdio = &sidecar.metrics().stdio;
    assert_eq!(stdio.unmatched_count(Unmatched::NotJson), 1);
    assert_eq!(stdio.unmatched_count(Unmatched::UnknownId), 1);
    assert_eq!(stdio.unmatched_count(Unmatched::Notification), 1);
    sidecar.stop().await;
}

/// A child that never answers: the caller gets the upstream timeout, nothing hangs, and
/// the child is told the request was cancelled.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_silent_child_times_out_and_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("received");
    let mut config = stdio_config(child(&["--received", received.to_str().unwrap()]));
    config.timeouts.response_head_ms = 1000;
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let started = Instant::now();
    let reply = post_mcp(&sidecar.mcp_url(), &tool_call(9, "silent", json!({}))).await;
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(reply.json()["id"], 9);
    assert!(started.elapsed() < Duration::from_secs(10));
    eventually("the cancellation", || {
        sidecar.metrics().stdio.cancellations() == 1
    })
    .await;
    eventually("the child to read it", || {
        std::fs::read_to_string(&received).is_ok_and(|l| l.contains("notifications/cancelled"))
    })
    .await;
    sidecar.stop().await;
}

/// A child flooding stderr: the log takes its share, the rest is counted, and calls are
/// answered as usual.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_stderr_flood_is_clipped_and_the_sidecar_stays_responsive() {
    let sidecar = Sidecar::start(stdio_config(child(&["--flood-stderr"]))).await;
    up(&sidecar).await;
    let started = Instant::now();
    for i in 0..20 {
        let reply = post_mcp(&sidecar.mcp_url(), &echo(json!(i), "still here", 0, None)).await;
        assert_eq!(text(&reply.json()), "still here");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    eventually("stderr lines over the rate", || {
        sidecar.metrics().stdio.stderr_dropped_count() > 0
    })
    .await;
    sidecar.stop().await;
}

/// A child that stops reading: past `queue_max` waiting messages, 503 + `Retry-After`.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_full_queue_answers_503_with_retry_after() {
    let mut config = stdio_config(child(&["--stall"]));
    config.upstream_command.queue_max = 1;
    config.timeouts.response_head_ms = 5000;
    // Three callers, so that the queue, not one caller's share, is what fills.
    config.principal.source = mcp_state_guard::facade::config::PrincipalSource::Header;
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    // Larger than a pipe's buffer: the writer blocks on it.
    let big = "y".repeat(256 * 1024);
    let mut waiting = Vec::new();
    for id in [1, 2] {
        let (url, message) = (url.clone(), echo(json!(id), &big, 0, None));
        let user = format!("user-{id}");
        waiting.push(tokio::spawn(async move {
            post_mcp_with(&url, &message, &[("x-forwarded-user", &user)]).await
        }));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let third = echo(json!(3), "third", 0, None);
    let reply = post_mcp_with(&url, &third, &[("x-forwarded-user", "user-3")]).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    assert_eq!(reply.json()["id"], 3);
    assert_eq!(sidecar.metrics().stdio.queue_full_count(), 1);
    for call in waiting {
        call.abort();
    }
    sidecar.stop().await;
}

/// A line over `limits.max_event_bytes` is refused without being held whole: the request
/// it answers gets an error, and the child's next answer is read as usual.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_overlong_line_is_refused() {
    let mut config = stdio_config(child(&[]));
    config.limits.max_event_bytes = 4096;
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let reply = post_mcp(&url, &tool_call(4, "big", json!({"bytes": 100_000}))).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], -32603);
    assert_eq!(sidecar.metrics().stdio.overlong_count(), 1);
    let reply = post_mcp(&url, &tool_call(5, "big", json!({"bytes": 100}))).await;
    assert_eq!(text(&reply.json()).len(), 100);
    sidecar.stop().await;
}

/// A request from the child to the client (2025-style sampling) is answered with a
/// JSON-RPC error and counted: 2026-07-28 asks through `input_required`.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_server_to_client_requests_are_refused() {
    let sidecar = Sidecar::start(stdio_config(child(&[]))).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tool_call(1, "ask_client", json!({}))).await;
    let said = text(&reply.json()).to_owned();
    assert!(said.contains("-32601"), "{said}");
    assert_eq!(sidecar.metrics().stdio.server_requests_refused(), 1);
    sidecar.stop().await;
}

/// A caller that leaves an event stream before its answer: the child is told to stop
/// (`notifications/cancelled` with the bridge's id), and its late answer reaches nobody.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_a_caller_leaving_mid_stream_cancels_at_the_child() {
    use http_body_util::{BodyExt, Full};
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("received");
    let argv = child(&["--received", received.to_str().unwrap()]);
    let sidecar = Sidecar::start(stdio_config(argv)).await;
    up(&sidecar).await;
    let message = echo(json!(1), "slow", 1500, Some(json!("p")));
    let mut request = http::Request::post(sidecar.mcp_url());
    for (name, value) in mcp_headers("tools/call", Some("echo")) {
        request = request.header(name, value);
    }
    let request = request
        .body(Full::new(bytes::Bytes::from(
            serde_json::to_vec(&message).unwrap(),
        )))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let response = tokio::time::timeout(HTTP_TIMEOUT, client.request(request))
        .await
        .unwrap()
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    drop(body);
    drop(client);
    eventually("the cancellation", || {
        sidecar.metrics().stdio.cancellations() == 1
    })
    .await;
    eventually("the child to read it", || {
        std::fs::read_to_string(&received).is_ok_and(|l| l.contains("notifications/cancelled"))
    })
    .await;
    // The answer the child still writes names a closed route.
    eventually("the late answer, unmatched", || {
        sidecar
            .metrics()
            .stdio
            .unmatched_count(Unmatched::UnknownId)
            == 1
    })
    .await;
    sidecar.stop().await;
}
