//! The `jwt` principal against the reference (`mcp==2.3.0`): for the same verified access
//! token, the sidecar binds states to the very string the reference's
//! `authenticated_principal` builds, so a state minted by either opens in the other, and
//! the real SDK client completes its flows with a bearer token over TLS.

use super::jwt::KEY;
use crate::support::http::meta;
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::pki::{AUDIENCE, Ca, Files, ISSUER, Signer, claims, jwks};
use crate::support::python::{client_flows, run_json};
use crate::support::sidecar::{self, Sidecar};
use mcp_state_guard::facade::auth::jwt::principal;
use mcp_state_guard::facade::config::PrincipalSource;
use serde_json::{Value, json};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

fn provision(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "provision", "arguments": {"name": "web-1"}, "_meta": meta()}})
}

fn tls_client(ca: &Ca) -> rustls::ClientConfig {
    crate::support::pki::client_config(ca, None)
}

fn access(client_id: &str, sub: &str) -> Value {
    json!({"client_id": client_id, "iss": ISSUER, "sub": sub})
}

#[test]
fn our_principal_string_is_the_references() {
    let tokens = [
        access("client-1", "alice"),
        access("c\"1", "zoë 😀\u{7f}"),
        access("", ""),
    ];
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "principals", "access_tokens": tokens}),
        TIMEOUT,
    );
    for (token, reference) in tokens.iter().zip(answer["principals"].as_array().unwrap()) {
        let ours = principal(token["client_id"].as_str(), ISSUER, token["sub"].as_str());
        assert_eq!(ours, reference.as_str().unwrap());
    }
}

#[tokio::test]
async fn states_cross_between_the_sidecar_and_the_reference_for_one_caller() {
    let files = Files::new();
    let ca = Ca::new("mcp");
    let signer = Signer::rsa("k1");
    let upstream = LegacyServer::start(Mode::Json);
    let leaf = ca.server();
    let mut config = sidecar::config(&upstream.base_url());
    config.principal.source = PrincipalSource::Jwt;
    config.principal.jwt.issuer = Some(ISSUER.into());
    config.principal.jwt.audience = Some(AUDIENCE.into());
    config.principal.jwt.jwks_file = Some(files.put("jwks.json", &jwks(&[&signer])));
    config.tls.cert_file = Some(files.put("tls.crt", &leaf.cert_pem));
    config.tls.key_file = Some(files.put("tls.key", &leaf.key_pem));
    let sidecar = Sidecar::with_keys(config, &[KEY], "svc").await;
    let url = format!("https://127.0.0.1:{}/mcp", sidecar.addr.port());
    let tls = tls_client(&ca);
    let alice = format!("Bearer {}", signer.sign(&claims("client-1", "alice")));
    let bob = format!("Bearer {}", signer.sign(&claims("client-1", "bob")));

    // Minted by the sidecar for alice: the reference opens it for alice's access token only.
    let first = crate::support::tls::post_mcp(
        tls.clone(),
        &url,
        &provision(1),
        &[("authorization", &alice)],
    )
    .await
    .unwrap();
    let token = first.json()["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let case = |who: &str, token: &str| json!({"method": "tools/call", "params": provision(1)["params"], "access_token": access("client-1", who), "token": token});
    let opened = run_json(
        "token_interop.py",
        &json!({"op": "open", "keys": [KEY], "audience": "svc", "cases": [case("alice", &token), case("bob", &token)]}),
        TIMEOUT,
    );
    let results = opened["results"].as_array().unwrap();
    assert_eq!(results[0]["ok"], true, "{opened}");
    let state = results[0]["state"].as_str().unwrap().to_owned();
    assert!(state.contains("\"tier\":\"free\""), "{state}");
    assert_eq!(results[1]["ok"], false);

    // Minted by the reference for alice: the sidecar opens it for alice's bearer token only.
    let minted = run_json(
        "token_interop.py",
        &json!({"op": "mint", "keys": [KEY], "audience": "svc", "cases": [
            {"method": "tools/call", "params": provision(1)["params"], "access_token": access("client-1", "alice"), "state": state}]}),
        TIMEOUT,
    );
    let token = minted["tokens"][0].as_str().unwrap();
    let mut retry = provision(2);
    retry["params"]["requestState"] = json!(token);
    retry["params"]["inputResponses"] =
        json!({"region": {"action": "accept", "content": {"region": "eu-west-1"}}});
    let refused =
        crate::support::tls::post_mcp(tls.clone(), &url, &retry, &[("authorization", &bob)])
            .await
            .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.text());
    let reply = crate::support::tls::post_mcp(tls, &url, &retry, &[("authorization", &alice)])
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["result"]["content"][0]["text"],
        "Provisioned web-1 (tier=free) in eu-west-1"
    );

    // The SDK client with a bearer token over TLS, and without one (401 before anything).
    let ca_file = files.put("ca.pem", &ca.pem);
    let ca_file = ca_file.to_str().unwrap();
    let token = signer.sign(&claims("client-1", "carol"));
    let out = client_flows(&url, &["--cafile", ca_file, "--bearer", &token, "auto-all"]).await;
    assert_eq!(
        out["results"]["resource:config://prod"],
        "config for prod (role=viewer)"
    );
    let seen = upstream.seen().len();
    let anonymous = crate::support::tls::post_mcp(tls_client(&ca), &url, &provision(3), &[])
        .await
        .unwrap();
    assert_eq!(anonymous.status, 401);
    assert_eq!(upstream.seen().len(), seen);
    sidecar.stop().await;
}
