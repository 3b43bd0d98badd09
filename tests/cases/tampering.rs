//! Tampering: no state reaches the upstream unless this sidecar sealed and verified it.
//! The tamper attack that works against the legacy server directly (edit the plaintext
//! state, get `tier=enterprise`) fails through the sidecar, by hand and with the real SDK
//! client, with nothing forwarded; and a state placed where the gate does not verify one
//! (a client's response to a server request, a prototype key, the top level) is refused.

use crate::support::fake::{FakeBody, FakeUpstream, Reply, pairs, plaintext};
use crate::support::flow::assert_token;
use crate::support::http::{meta, post_mcp, send};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::client_flows;
use crate::support::sidecar::Sidecar;
use http::Method;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn provision(id: u64, state: Option<&str>) -> Value {
    let mut params = json!({"name": "provision", "arguments": {"name": "web-1"}, "_meta": meta()});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu-west-1"}}});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

#[tokio::test(flavor = "multi_thread")]
async fn tampering_works_directly_and_fails_through_the_sidecar() {
    let upstream = LegacyServer::start(Mode::Json);
    // Directly: the plaintext state is trusted.
    let first = post_mcp(&upstream.mcp_url(), &provision(1, None))
        .await
        .json();
    let plain = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert!(plain.contains("\"tier\":\"free\""), "{plain}");
    let forged = plain.replace("free", "enterprise");
    let direct = post_mcp(&upstream.mcp_url(), &provision(2, Some(&forged)))
        .await
        .json();
    assert!(
        direct["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("tier=enterprise")
    );

    // Through the sidecar: the client only sees a token, and an edited one is refused.
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let first = post_mcp(&sidecar.mcp_url(), &provision(3, None))
        .await
        .json();
    let token = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert!(
        token.starts_with("v1.") && !token.contains("tier"),
        "{token}"
    );
    upstream.reset();
    let refused = post_mcp(&sidecar.mcp_url(), &provision(4, Some(&forged))).await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json()["error"]["message"],
        "Invalid or expired requestState"
    );
    assert!(
        upstream.seen().is_empty(),
        "the forged state reached the upstream: {:?}",
        upstream.seen()
    );
    let ok = post_mcp(&sidecar.mcp_url(), &provision(5, Some(&token)))
        .await
        .json();
    assert_eq!(
        ok["result"]["content"][0]["text"],
        "Provisioned web-1 (tier=free) in eu-west-1"
    );
    assert_eq!(sidecar.metrics().path.verified_count("malformed"), 1);
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 1);
    sidecar.stop().await;
}

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

#[tokio::test(flavor = "multi_thread")]
async fn a_client_response_carrying_a_state_is_refused() {
    // 2025 era: the client POSTs its answer to a server→client request. A `requestState`
    // there would reach the upstream unverified, so it is refused, and nothing forwarded.
    let fake = FakeUpstream::always(|| Reply::new(202, FakeBody::whole(""))).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let headers = pairs(&[
        ("content-type", "application/json"),
        ("mcp-session-id", "abc"),
    ]);
    for (result, forwarded) in [
        (format!(r#"{{"requestState":{:?}}}"#, plaintext()), false),
        (r#"{"request_state":"x"}"#.to_owned(), false),
        (r#"{"action":"accept","content":{}}"#.to_owned(), true),
    ] {
        let before = fake.count();
        let body = format!(r#"{{"jsonrpc":"2.0","id":"s-1","result":{result}}}"#);
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
        if forwarded {
            assert_eq!(reply.status, 202, "{}", reply.text());
            assert_eq!(fake.count(), before + 1);
        } else {
            assert_eq!(reply.status, 400, "{}", reply.text());
            assert_eq!(reply.json()["error"]["code"], -32600);
            assert_eq!(reply.json()["id"], "s-1");
            assert_eq!(fake.count(), before, "forwarded: {result}");
        }
    }
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn prototype_keys_and_top_level_states_are_refused() {
    // `{"__proto__":{"requestState":..}}` is a requestState to a Node upstream that copies
    // params by assignment; a top-level requestState is one no upstream should see.
    let fake =
        FakeUpstream::always(|| Reply::json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let headers = pairs(&[("content-type", "application/json")]);
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","__proto__":{"requestState":"forged"}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":{"__proto__":{}}}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","requestState":"forged","params":{"name":"x"}}"#,
    ] {
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text());
        assert_eq!(fake.count(), 0, "forwarded: {body}");
    }
    sidecar.stop().await;
}
