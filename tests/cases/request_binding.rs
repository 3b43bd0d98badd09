//! Tokens are bound to the request path and query: when one upstream serves several MCP
//! servers or tenants under different paths (or query strings), a state minted under one
//! does not open under another
//! (the same tool name and arguments notwithstanding), and nothing is forwarded. Tokens
//! without the path claim (the reference SDK's) keep opening: `token_interop` covers them.

use crate::support::fake::{
    FakeUpstream, Recorded, Reply, complete, input_required, sealed, tools_call,
};
use crate::support::http::{mcp_headers, send};
use crate::support::sidecar::Sidecar;
use http::Method;
use mcp_state_guard::error::ErrorKind;
use serde_json::{Value, json};
use std::time::Duration;

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
    assert_eq!(sidecar.metrics().verified_count("binding"), 5);
    assert_eq!(sidecar.metrics().refused_count(ErrorKind::InvalidState), 5);
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
