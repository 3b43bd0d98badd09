//! Request binding: a token opens only for the request it was minted for (method, target,
//! arguments, path and query, audience), under a key of the ring, before its expiry; any
//! other presentation gets the frozen error and nothing reaches the upstream. When one
//! upstream serves several MCP servers or tenants under different paths (or query
//! strings), a state minted under one does not open under another (the same tool name and
//! arguments notwithstanding); tokens without the path claim (the reference SDK's) keep
//! opening: `token_interop` covers them. Keys: replicas sharing a ring serve each other's
//! retries, each rotation phase opens exactly what the design says, and a key file that
//! cannot be read keeps the ring in use.

use crate::support::fake::{
    FakeUpstream, Recorded, Reply, complete, input_required, plaintext, sealed, tools_call,
};
use crate::support::flow::{
    KEY_NEW, KEY_OLD, NOBODY, accept, assert_opens, assert_refused, mint, region, retry, tool_call,
    with_state,
};
use crate::support::http::{mcp_headers, meta, post_mcp, send};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

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

/// First calls get a plaintext state naming the tenant; retries complete.
fn tenant_server(request: &Recorded) -> Reply {
    let message = request.json();
    let id = message["id"].clone();
    let answer = match message["params"]["requestState"].as_str() {
        None => input_required(id, json!(format!("tenant={}", request.target))),
        Some(state) => complete(id, state),
    };
    Reply::json(answer.to_string())
}

async fn call(sidecar: &Sidecar, path: &str, message: &Value) -> crate::support::http::Reply {
    let url = format!("{}{path}", sidecar.base_url());
    let headers = mcp_headers("tools/call", Some("provision"));
    let body = serde_json::to_vec(message).unwrap();
    send(Method::POST, &url, &headers, body, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_opens_only_on_the_path_it_was_minted_on() {
    let fake = FakeUpstream::start(tenant_server).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let first = call(&sidecar, "/tenants/a/mcp", &tools_call(1, None)).await;
    let token = sealed(&first.json()["result"]);
    let forwarded = fake.count();
    for other in [
        "/tenants/b/mcp",
        "/tenants/a/mcp/",
        "/tenants/A/mcp",
        "/tenants/a/%6dcp",
        "/tenants/a/mcp?tenant=b",
    ] {
        let reply = call(&sidecar, other, &tools_call(2, Some(json!(token)))).await;
        assert_eq!(reply.status, 400, "{other}");
        assert_eq!(
            reply.json()["error"]["message"],
            "Invalid or expired requestState",
            "{other}"
        );
    }
    assert_eq!(
        fake.count(),
        forwarded,
        "a refused retry reached the upstream"
    );
    assert_eq!(sidecar.metrics().path.verified_count("binding"), 5);
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::InvalidState),
        5
    );
    let reply = call(
        &sidecar,
        "/tenants/a/mcp",
        &tools_call(3, Some(json!(token))),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["result"]["content"][0]["text"],
        "tenant=/tenants/a/mcp"
    );
    sidecar.stop().await;
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

#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_key_file_keeps_the_keys_in_use() {
    let answer =
        crate::support::fake::input_required(serde_json::json!(1), serde_json::json!(plaintext()));
    let fake = FakeUpstream::always(move || Reply::json(answer.to_string())).await;
    let mut config = sidecar::config(&fake.base_url());
    config.state.reload_interval_ms = 100;
    let key = "0123456789abcdef0123456789abcdef-hygiene-key";
    let sidecar = Sidecar::with_keys(config, &[key], "svc").await;
    let first = post_mcp(&sidecar.mcp_url(), &tools_call(1, None))
        .await
        .json();
    let token = crate::support::fake::sealed(&first["result"]);
    std::fs::remove_file(sidecar.keys_dir.as_ref().unwrap().path().join("keys")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sidecar.metrics().keys.key_reload_count(false) == 0 {
        assert!(Instant::now() < deadline, "the outage was not reported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reported once, not on every poll; the old ring still opens and mints.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(sidecar.metrics().keys.key_reload_count(false), 1);
    let retry = post_mcp(
        &sidecar.mcp_url(),
        &tools_call(2, Some(serde_json::json!(token))),
    )
    .await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 1);
    sidecar.stop().await;
}
