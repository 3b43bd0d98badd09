//! End to end with the real Python SDK on both sides of the sidecar: every MRTR flow
//! completes in JSON and SSE mode while the client only ever sees sealed tokens, and each
//! way of misusing a token (tampering, replay to another request, caller, time, key or
//! audience) is refused with the frozen error before anything reaches the upstream.

use crate::support::http::{event_json, initialize_session, meta, open, send, session_headers};
use crate::support::http::{post_mcp_streaming, post_mcp_with};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::client_flows;
use crate::support::sidecar::{self, Sidecar};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::config::PrincipalSource;
use mcp_state_guard::error::ErrorKind;
use mcp_state_guard::proxy::SealFailure;
use mcp_state_guard::token::Reject;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

const KEY_OLD: &str = "3b9f0c2a7d5e4f6a8b1c9d0e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a";
const KEY_NEW: &str = "c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3";
const PROVISIONED: &str = "Provisioned web-1 (tier=free) in eu-west-1";
const TWO_STEP: &str = "two_step done first=one second=two";
const GREETED: &str = "Greet Alice (style=formal)";
const CONFIG: &str = "config for prod (role=viewer)";
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
const SSE: &str = "text/event-stream";
const NOBODY: &[(&str, &str)] = &[];

// ---- Helpers ---------------------------------------------------------------------------

fn tool_call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments, "_meta": meta()}})
}

fn provision(id: u64) -> Value {
    tool_call(id, "provision", json!({"name": "web-1"}))
}

fn with_state(mut message: Value, state: &str, responses: Value) -> Value {
    message["params"]["requestState"] = json!(state);
    message["params"]["inputResponses"] = responses;
    message
}

fn accept(key: &str, field: &str, value: Value) -> Value {
    json!({key: {"action": "accept", "content": {field: value}}})
}

fn region() -> Value {
    accept("region", "region", json!("eu-west-1"))
}

/// The retry of provision(name=web-1), answering the region, with `state`.
fn retry(id: u64, state: &str) -> Value {
    with_state(provision(id), state, region())
}

/// A sealed token: `v1.` and base64url only, so no plaintext JSON can hide in it.
fn assert_token(state: &str) {
    let body = state.strip_prefix("v1.").unwrap_or_default();
    let base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let plaintext = state.contains("\"k\":") || state.contains("\"tier\"");
    assert!(
        !plaintext && body.len() > 40 && body.chars().all(base64url),
        "{state}"
    );
}

/// The state of an `input_required` result, checked to be a token.
fn token_of(message: &Value) -> String {
    let result = &message["result"];
    assert_eq!(result["resultType"], "input_required", "{message}");
    let token = result["requestState"].as_str().unwrap_or_default();
    assert_token(token);
    token.to_owned()
}

fn text(message: &Value) -> &str {
    let text = message["result"]["content"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("no text: {message}"))
}

/// Round 1 of provision(name=web-1) through `url`: the sealed state it answers.
async fn mint(url: &str, extra: &[(&str, &str)]) -> String {
    token_of(&post_mcp_with(url, &provision(1), extra).await.json())
}

async fn assert_opens(url: &str, id: u64, token: &str, extra: &[(&str, &str)]) {
    let reply = post_mcp_with(url, &retry(id, token), extra).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(text(&reply.json()), PROVISIONED);
}

async fn assert_refused(sidecar: &Sidecar, up: &LegacyServer, message: &Value, label: &str) {
    assert_refused_with(sidecar, up, message, NOBODY, label).await;
}

/// Send `message` through the sidecar and demand the frozen error, the `label` counter up
/// by one, and an upstream that saw nothing: no handler call, not even an HTTP request.
async fn assert_refused_with(
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
fn progress_ask(id: u64, delay_ms: u64) -> Value {
    let mut message = tool_call(id, "progress_ask", json!({"delay_ms": delay_ms}));
    message["params"]["_meta"]["progressToken"] = json!("progress-1");
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    message
}

fn confirmed(message: Value, state: &str) -> Value {
    with_state(message, state, accept("confirm", "ok", json!(true)))
}

// ---- 1. Every flow completes in both modes; the client only sees tokens ----------------

/// The SDK's automatic loop over every asking tool, prompt and resource gives the same
/// answers through the sidecar as directly; every state went out sealed and came back.
async fn sdk_automatic_loop(mode: Mode) {
    let upstream = LegacyServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let direct = client_flows(&upstream.mcp_url(), &["auto-all"]).await;
    upstream.reset();
    let through = client_flows(&sidecar.mcp_url(), &["auto-all"]).await;
    assert_eq!(through["results"], direct["results"]);
    let results = &through["results"];
    assert_eq!(results["tool:provision"], PROVISIONED);
    assert_eq!(results["tool:two_step"], TWO_STEP);
    assert_eq!(results["prompt:greet_prompt"], GREETED);
    assert_eq!(results["resource:config://prod"], CONFIG);
    // SSE mode streams progress (2 rounds x 3) through; JSON mode has nowhere to put it.
    let progress = through["progress"].as_array().unwrap().len();
    assert_eq!(progress, if mode == Mode::Sse { 6 } else { 0 }, "{through}");
    assert_eq!(through["progress"], direct["progress"]);
    assert_eq!(through["logs"], direct["logs"]);
    let auto = client_flows(&sidecar.mcp_url(), &["auto-provision"]).await;
    assert_eq!(auto["text"], PROVISIONED);

    let metrics = sidecar.metrics();
    let sealed = metrics.path.sealed_count();
    assert!(sealed >= 10, "sealed {sealed}");
    assert_eq!(
        metrics.path.verified_count("ok"),
        sealed,
        "each came back once"
    );
    for reject in Reject::ALL.map(Reject::as_str) {
        assert_eq!(metrics.path.verified_count(reject), 0, "{reject}");
    }
    // The upstream got its own plaintext back every time, never a token.
    let seen = upstream.seen();
    let states: Vec<&Value> = seen.iter().map(|e| &e["requestState"]).collect();
    let states: Vec<&&Value> = states.iter().filter(|s| !s.is_null()).collect();
    // Rounds in which the upstream sent no state are sealed too (the token binds their
    // inputResponses to what was asked); their retries reach it with no state, as sent.
    let stateless_retries = seen
        .iter()
        .filter(|e| e["requestState"].is_null())
        .filter(|e| {
            e["inputResponses"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        })
        .count();
    assert!(
        stateless_retries > 0,
        "the fixtures include stateless rounds: {seen:?}"
    );
    assert_eq!(
        (states.len() + stateless_retries) as u64,
        sealed,
        "{states:?}"
    );
    let plain = |s: &&&Value| s.as_str().is_some_and(|s| s.starts_with('{'));
    assert!(states.iter().all(plain), "{states:?}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_automatic_loop_json_mode() {
    sdk_automatic_loop(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_automatic_loop_sse_mode() {
    sdk_automatic_loop(Mode::Sse).await;
}

/// `client_flows.py manual` arguments, rounds, and the final text.
const MANUAL: [(&str, usize, &str); 6] = [
    (r#"tool provision --args {"name":"web-1"}"#, 2, PROVISIONED),
    ("tool two_step", 3, TWO_STEP),
    ("tool state_only", 2, "state_only done job-42"),
    ("tool progress_ask", 2, "progress_ask done ok=true"),
    ("prompt greet_prompt", 2, GREETED),
    ("resource config://prod", 2, CONFIG),
];

/// The manual loop shows every state the client sees: each is a token, none repeats.
async fn manual_loop(mode: Mode) {
    let upstream = LegacyServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let mut runs = tokio::task::JoinSet::new();
    for (args, rounds, last) in MANUAL {
        let url = sidecar.mcp_url();
        let argv: Vec<&str> = ["manual"].into_iter().chain(args.split(' ')).collect();
        runs.spawn(async move { (args, rounds, last, client_flows(&url, &argv).await) });
    }
    let mut all = Vec::new();
    while let Some(run) = runs.join_next().await {
        let (args, rounds, last, out) = run.unwrap();
        assert_eq!(
            (&out["rounds"], &out["final"]),
            (&json!(rounds), &json!(last)),
            "{args}"
        );
        let states: Vec<String> = serde_json::from_value(out["states"].clone()).unwrap();
        assert_eq!(states.len(), rounds - 1, "{args}: {out}");
        states.iter().for_each(|s| assert_token(s));
        all.extend(states);
    }

    // progress_ask again with a progress token: SSE in SSE mode, in both rounds.
    let (url, streams) = (sidecar.mcp_url(), mode == Mode::Sse);
    let first = post_mcp_with(&url, &progress_ask(10, 0), NOBODY).await;
    assert_eq!(first.content_type() == SSE, streams, "{:?}", first.headers);
    let token = token_of(&first.message());
    let last = post_mcp_with(&url, &confirmed(progress_ask(11, 0), &token), NOBODY).await;
    assert_eq!(last.content_type() == SSE, streams, "{:?}", last.headers);
    assert_eq!(text(&last.message()), "progress_ask done ok=true");
    all.push(token);

    // Fresh per round and per flow (random nonces): two_step's two rounds differ too.
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a token repeated: {all:?}");
    assert_eq!(
        sidecar.metrics().path.verified_count("ok"),
        all.len() as u64
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_loop_sees_only_fresh_tokens_json_mode() {
    manual_loop(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_loop_sees_only_fresh_tokens_sse_mode() {
    manual_loop(Mode::Sse).await;
}

// ---- 2. Tampering ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn tampering_that_works_directly_fails_through_the_sidecar() {
    let upstream = LegacyServer::start(Mode::Sse);
    let direct = client_flows(&upstream.mcp_url(), &["tamper"]).await;
    assert_eq!(direct["state_plaintext"], true, "{direct}");
    let text = direct["text"].as_str().unwrap_or_default();
    assert!(text.contains("tier=enterprise"), "{direct}");

    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    upstream.reset();
    let through = client_flows(&sidecar.mcp_url(), &["tamper"]).await;
    assert_eq!(through["state_plaintext"], false, "{through}");
    assert_token(through["original_state"].as_str().unwrap());
    assert_eq!(through["text"], Value::Null, "{through}");
    let error = json!({"code": -32602, "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"}});
    assert_eq!(through["retry_error"], error);
    // Round 1 arrived; the forged retry (the only request with a state) never did.
    let seen = upstream.seen();
    let rounds = seen.iter().filter(|e| e["name"] == "provision").count();
    assert_eq!(rounds, 1, "{seen:?}");
    assert!(seen.iter().all(|e| e["requestState"].is_null()), "{seen:?}");
    assert_eq!(sidecar.metrics().path.verified_count("malformed"), 1);
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 0);
    sidecar.stop().await;
}

// ---- 3. Replay elsewhere: another request, caller, time, key or audience ----------------

#[tokio::test(flavor = "multi_thread")]
async fn replay_to_another_request_is_refused() {
    let upstream = LegacyServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let token = mint(&sidecar.mcp_url(), NOBODY).await;
    // (a) another tool, another method: both would trust a plaintext state.
    let two_step = tool_call(2, "two_step", json!({}));
    let two_step = with_state(two_step, &token, accept("first", "first", json!("x")));
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/get",
        "params": {"name": "provision", "_meta": meta()}});
    let prompt = with_state(prompt, &token, region());
    // (b) the same tool with other arguments, or one argument more.
    let mut web2 = retry(4, &token);
    web2["params"]["arguments"]["name"] = json!("web-2");
    let mut more = retry(5, &token);
    more["params"]["arguments"]["tier"] = json!("enterprise");
    for message in [two_step, prompt, web2, more] {
        assert_refused(&sidecar, &upstream, &message, "binding").await;
    }
    // The genuine retry still works: the refusals were about the request, not the token.
    assert_opens(&sidecar.mcp_url(), 6, &token, NOBODY).await;
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_by_another_principal_is_refused() {
    let upstream = LegacyServer::start(Mode::Json);
    let mut config = sidecar::config(&upstream.base_url());
    config.principal.source = PrincipalSource::Header;
    config.principal.header = "x-forwarded-user".into();
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let alice: &[(&str, &str)] = &[("x-forwarded-user", "alice")];
    let bob: &[(&str, &str)] = &[("x-forwarded-user", "bob")];
    let token = mint(&url, alice).await;
    let unbound = mint(&url, NOBODY).await;
    // Another caller, and principal drift both ways: a bound token without identity, an
    // unbound one with.
    let attempts = [
        (retry(2, &token), bob),
        (retry(3, &token), NOBODY),
        (retry(4, &unbound), alice),
    ];
    for (message, who) in &attempts {
        assert_refused_with(&sidecar, &upstream, message, who, "principal").await;
    }
    assert_opens(&url, 5, &token, alice).await;
    // The identity header is the sidecar's business; the upstream never saw it.
    let log = serde_json::to_string(&upstream.http_log()).unwrap();
    assert!(!log.contains("x-forwarded-user"), "{log}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_after_expiry_is_refused() {
    let upstream = LegacyServer::start(Mode::Json);
    let mut config = sidecar::config(&upstream.base_url());
    config.state.ttl_seconds = 1;
    let sidecar = Sidecar::start(config).await;
    let token = mint(&sidecar.mcp_url(), NOBODY).await;
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_refused(&sidecar, &upstream, &retry(2, &token), "expired").await;
    // Each round gets a fresh expiry: a new token within the TTL opens.
    let fresh = mint(&sidecar.mcp_url(), NOBODY).await;
    assert_opens(&sidecar.mcp_url(), 3, &fresh, NOBODY).await;
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_under_an_unknown_key_is_refused() {
    let upstream = LegacyServer::start(Mode::Json);
    let config = sidecar::config(&upstream.base_url());
    let a = Sidecar::with_keys(config.clone(), &[KEY_OLD], "svc").await;
    let b = Sidecar::with_keys(config, &[KEY_NEW], "svc").await;
    let token = mint(&a.mcp_url(), NOBODY).await;
    assert_refused(&b, &upstream, &retry(2, &token), "unknown_key").await;
    assert_opens(&a.mcp_url(), 3, &token, NOBODY).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_to_another_audience_is_refused() {
    let upstream = LegacyServer::start(Mode::Json);
    let config = sidecar::config(&upstream.base_url());
    let billing = Sidecar::with_keys(config.clone(), &[KEY_OLD], "billing").await;
    let hr = Sidecar::with_keys(config, &[KEY_OLD], "hr").await;
    let token = mint(&billing.mcp_url(), NOBODY).await;
    assert_refused(&hr, &upstream, &retry(2, &token), "audience").await;
    assert_opens(&billing.mcp_url(), 3, &token, NOBODY).await;
    billing.stop().await;
    hr.stop().await;
}

// ---- 4. Replicas and key rotation --------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn replicas_sharing_keys_serve_each_others_retries() {
    let upstream = LegacyServer::start(Mode::Json);
    let config = sidecar::config(&upstream.base_url());
    let a = Sidecar::with_keys(config.clone(), &[KEY_OLD, KEY_NEW], "svc").await;
    let b = Sidecar::with_keys(config, &[KEY_OLD, KEY_NEW], "svc").await;
    let (a_url, b_url) = (a.mcp_url(), b.mcp_url());
    assert_opens(&b_url, 2, &mint(&a_url, NOBODY).await, NOBODY).await;
    assert_opens(&a_url, 3, &mint(&b_url, NOBODY).await, NOBODY).await;
    for metrics in [a.metrics(), b.metrics()] {
        assert_eq!(
            [
                metrics.path.sealed_count(),
                metrics.path.verified_count("ok")
            ],
            [1, 1]
        );
    }
    a.stop().await;
    b.stop().await;
}

/// One replica per rotation phase. A phase-i token opens on a phase-j replica exactly when
/// the design says: old-key tokens (phases 1, 2) until the old key leaves (phase 4),
/// new-key tokens (phases 3, 4) wherever the new key is known (not phase 1, which is why
/// phase 2 must be fully rolled out before phase 3 starts minting with the new key).
#[tokio::test(flavor = "multi_thread")]
async fn key_rotation_phases_open_where_the_design_says() {
    const PHASES: [&[&str]; 4] = [
        &[KEY_OLD],
        &[KEY_OLD, KEY_NEW],
        &[KEY_NEW, KEY_OLD],
        &[KEY_NEW],
    ];
    const OPENS: [[bool; 4]; 4] = [
        [true, true, true, false],
        [true, true, true, false],
        [false, true, true, true],
        [false, true, true, true],
    ];
    let upstream = LegacyServer::start(Mode::Json);
    let (mut replicas, mut tokens) = (Vec::new(), Vec::new());
    for keys in PHASES {
        let config = sidecar::config(&upstream.base_url());
        replicas.push(Sidecar::with_keys(config, keys, "svc").await);
        tokens.push(mint(&replicas.last().unwrap().mcp_url(), NOBODY).await);
    }
    for (i, token) in tokens.iter().enumerate() {
        for (j, replica) in replicas.iter().enumerate() {
            let id = (100 + 10 * i + j) as u64;
            if OPENS[i][j] {
                assert_opens(&replica.mcp_url(), id, token, NOBODY).await;
            } else {
                assert_refused(replica, &upstream, &retry(id, token), "unknown_key").await;
            }
        }
    }
    for replica in replicas {
        replica.stop().await;
    }
}

/// The same rotation on one running sidecar, by rewriting its key file (no restart).
#[tokio::test(flavor = "multi_thread")]
async fn key_rotation_by_rewriting_the_key_file() {
    let upstream = LegacyServer::start(Mode::Json);
    let mut config = sidecar::config(&upstream.base_url());
    config.state.reload_interval_ms = 100;
    let sidecar = Sidecar::with_keys(config, &[KEY_OLD], "svc").await;
    let url = sidecar.mcp_url();
    let old = mint(&url, NOBODY).await;
    sidecar.rewrite_keys(&[KEY_OLD, KEY_NEW]).await;
    assert_opens(&url, 2, &old, NOBODY).await;
    sidecar.rewrite_keys(&[KEY_NEW, KEY_OLD]).await;
    let new = mint(&url, NOBODY).await;
    assert_opens(&url, 3, &old, NOBODY).await;
    assert_opens(&url, 4, &new, NOBODY).await;
    sidecar.rewrite_keys(&[KEY_NEW]).await;
    assert_refused(&sidecar, &upstream, &retry(5, &old), "unknown_key").await;
    assert_opens(&url, 6, &new, NOBODY).await;
    sidecar.stop().await;
}

// ---- 5. Unasked inputResponses -----------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn unasked_input_responses_are_dropped() {
    let upstream = LegacyServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let token = mint(&sidecar.mcp_url(), NOBODY).await;
    upstream.reset();
    let mut message = retry(2, &token);
    let tier = json!({"action": "accept", "content": {"tier": "enterprise"}});
    message["params"]["inputResponses"]["tier"] = tier;
    let reply = post_mcp_with(&sidecar.mcp_url(), &message, NOBODY).await;
    assert_eq!(text(&reply.json()), PROVISIONED);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["inputResponses"], json!(["region"]));
    let state = r#"{"k":"provision","name":"web-1","r":1,"tier":"free"}"#;
    assert_eq!(seen[0]["requestState"], state);
    // Byte-level too: the forwarded body holds the asked key only.
    let body = upstream.http_log()[0]["body"].as_str().unwrap().to_owned();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["params"]["inputResponses"], region());
    assert_eq!(sidecar.metrics().path.input_responses_dropped_count(), 1);
    sidecar.stop().await;
}

// ---- 6. 2025-era sessions pass through ---------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn legacy_session_passes_through() {
    let upstream = LegacyServer::start(Mode::Sse);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    // initialize, Mcp-Session-Id, and a server->client elicitation answered over SSE.
    let out = client_flows(&sidecar.mcp_url(), &["legacy-session"]).await;
    assert_eq!(out["text"], "legacy_elicit colour=green", "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25");
    let session = out["session_id"].is_string() && out["session_ids_consistent"] == true;
    assert!(session, "{out}");
    let seen = upstream.seen();
    assert!(
        seen.iter()
            .any(|e| e["era"] == "2025" && e["name"] == "legacy_elicit")
    );

    // A session's standalone GET stream: its head must arrive while the stream is open
    // (the sidecar streams; it does not wait for an end that never comes).
    let url = sidecar.mcp_url();
    let session = initialize_session(&url).await;
    let headers = session_headers(Some(&session), SSE);
    let stream = open(Method::GET, &url, &headers[1..], Duration::from_secs(10)).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()[http::header::CONTENT_TYPE], SSE);
    drop(stream);
    let log = upstream.http_log();
    let ours = |r: &Value| r["method"] == "GET" && r["headers"].to_string().contains(&session);
    assert!(
        log.iter().any(ours),
        "our GET never reached the upstream: {log:?}"
    );
    let headers = session_headers(Some(&session), "application/json, text/event-stream");
    let reply = send(Method::DELETE, &url, &headers, "", HTTP_TIMEOUT).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    sidecar.stop().await;
}

/// The SDK answers a posted 2025 notification (or a client's response to a server->client
/// request) with `202`, and a DELETE with `200`, both `application/json` with an empty
/// body. There is nothing to seal in them; they must reach the client as they are.
#[tokio::test(flavor = "multi_thread")]
async fn empty_2025_answers_pass_through_unchanged() {
    let upstream = LegacyServer::start(Mode::Sse);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let url = sidecar.mcp_url();
    let session = initialize_session(&url).await;
    let headers = session_headers(Some(&session), "application/json, text/event-stream");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let reply = send(Method::POST, &url, &headers, initialized, HTTP_TIMEOUT).await;
    assert_eq!((reply.status.as_u16(), reply.text()), (202, String::new()));
    let reply = send(Method::DELETE, &url, &headers, "", HTTP_TIMEOUT).await;
    assert_eq!((reply.status.as_u16(), reply.text()), (200, String::new()));
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .path
            .seal_failure_count(SealFailure::UnparseableBody),
        0
    );
    sidecar.stop().await;
}

// ---- 7. SSE streams through, event by event ----------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn sse_events_stream_through_unchanged_and_the_last_is_sealed() {
    let upstream = LegacyServer::start(Mode::Sse);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let message = progress_ask(1, 300);
    let (direct_type, direct) = post_mcp_streaming(&upstream.mcp_url(), &message).await;
    let (through_type, through) = post_mcp_streaming(&sidecar.mcp_url(), &message).await;
    assert_eq!([direct_type.as_str(), &through_type], [SSE, SSE]);
    // 3 progress notifications and a log message, then the response.
    assert_eq!([direct.len(), through.len()], [5, 5], "{through:?}");
    let (notifications, last) = through.split_at(4);
    for ((_, ours), (_, theirs)) in notifications.iter().zip(&direct) {
        assert_eq!(ours, theirs, "a notification event was altered");
    }
    // The handler sleeps 300 ms after each progress step: a sidecar that buffered the
    // stream would deliver every event at the end.
    let progress = |e: &&(Duration, Bytes)| event_json(&e.1)["method"] == "notifications/progress";
    let first = notifications.iter().find(progress).unwrap().0;
    let lead = last[0].0 - first;
    assert!(lead >= Duration::from_millis(600), "only {lead:?} ahead");

    // The response, framed as the upstream framed it, differs only in its sealed state.
    assert!(
        last[0].1.starts_with(b"event: message\r\ndata: {"),
        "{:?}",
        last[0].1
    );
    let mut ours = event_json(&last[0].1);
    let mut theirs = event_json(&direct[4].1);
    let token = token_of(&ours);
    ours["result"]["requestState"] = Value::Null;
    let plaintext = theirs["result"]["requestState"].take();
    assert_eq!(plaintext, r#"{"k":"progress_ask","r":1}"#);
    assert_eq!(ours, theirs);

    // The second round streams too, and its token opens.
    let retry = confirmed(progress_ask(2, 300), &token);
    let (_, events) = post_mcp_streaming(&sidecar.mcp_url(), &retry).await;
    let last = event_json(&events.last().expect("events").1);
    assert_eq!(text(&last), "progress_ask done ok=true");
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 1);
    sidecar.stop().await;
}

// ---- 8. A state that cannot be sealed ------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_nonstring_state_becomes_an_internal_error() {
    let upstream = LegacyServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let message = tool_call(7, "nonstring_state", json!({}));
    let reply = post_mcp_with(&sidecar.mcp_url(), &message, NOBODY).await;
    let body = reply.json();
    assert_eq!([&body["id"], &body["error"]["code"]], [7, -32603], "{body}");
    assert!(body.get("result").is_none(), "{body}");
    assert!(!reply.text().contains("12345"), "{body}");
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics.path.seal_failure_count(SealFailure::NonStringState),
        1
    );
    assert_eq!(
        metrics.refusals.refused_count(ErrorKind::UpstreamResponse),
        1
    );
    assert_eq!(metrics.path.sealed_count(), 0);
    sidecar.stop().await;
}
