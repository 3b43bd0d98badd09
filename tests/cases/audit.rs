//! The audit log of a real process: one structured line per refusal (category, closed
//! reason, method, target, key id, request id, a digest of the caller, the client's
//! address, the trace id it sent), and, over a whole run at debug level, not one line
//! holding a token, a key, a plaintext state, an identity or an `Authorization` value.

use crate::support::fake::{FakeUpstream, Reply, complete, input_required};
use crate::support::http::{mcp_headers, send};
use crate::support::process::Process;
use http::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

const KEY: &str = "AUDIT-KEY-SECRET-0123456789abcdef0123456789abcdef";
const STATE: &str = r#"{"tier":"free","marker":"PLAINTEXT-STATE-MARKER-41"}"#;
const ALICE: &str = "alice-PRINCIPAL-SECRET-77";
const MALLORY: &str = "mallory-PRINCIPAL-SECRET-78";
const AUTHORIZATION: &str = "Bearer AUTHZ-SECRET-VALUE-99";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn call(id: u64, token: Option<&str>) -> Vec<u8> {
    let mut params = json!({"name": "provision", "arguments": {"name": "web-1"},
                            "_meta": crate::support::http::meta()});
    if let Some(token) = token {
        params["requestState"] = json!(token);
        params["inputResponses"] = json!({"region": {"action": "accept", "content": {}}});
    }
    serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
    )
    .unwrap()
}

async fn post(url: &str, body: Vec<u8>, principal: &str) -> crate::support::http::Reply {
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.push(("x-forwarded-user".into(), principal.into()));
    headers.push(("authorization".into(), AUTHORIZATION.into()));
    headers.push((
        "traceparent".into(),
        format!("00-{TRACE}-00f067aa0ba902b7-01"),
    ));
    send(Method::POST, url, &headers, body, Duration::from_secs(10)).await
}

fn token_of(reply: &crate::support::http::Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text());
    let token = reply.json()["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.starts_with("v1."), "{token}");
    token
}

fn refusals(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| {
            r["target"] == "mcp_state_guard::audit" && r["fields"]["message"] == "request refused"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_audit_line_per_refusal_and_no_secret_in_any_line() {
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let id = message["id"].clone();
        if message["params"]["requestState"].is_null() {
            Reply::json(input_required(id, json!(STATE)).to_string())
        } else {
            Reply::json(complete(id, "provisioned").to_string())
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{KEY}\n")).unwrap();
    let keys = keys.display().to_string();
    let process = Process::start(
        &["--upstream", &fake.base_url()],
        &[
            ("MCP_STATE_GUARD_LOG__LEVEL", "debug"),
            ("MCP_STATE_GUARD_STATE__KEYS_FILE", &keys),
            ("MCP_STATE_GUARD_STATE__AUDIENCE", "svc"),
            ("MCP_STATE_GUARD_STATE__TTL_SECONDS", "2"),
            ("MCP_STATE_GUARD_PRINCIPAL__SOURCE", "header"),
            ("MCP_STATE_GUARD_SINGLE_USE__TOOLS", "[\"provision\"]"),
        ],
    );
    let url = format!("http://{}/mcp", process.addr);
    let mut tokens = Vec::new();

    // A flow that works, then its token again: replayed (the store's refusal).
    let t1 = token_of(&post(&url, call(1, None), ALICE).await);
    assert_eq!(post(&url, call(2, Some(&t1)), ALICE).await.status, 200);
    assert_eq!(post(&url, call(3, Some(&t1)), ALICE).await.status, 400);
    // A tampered token, someone else's token, the plaintext itself.
    let t2 = token_of(&post(&url, call(4, None), ALICE).await);
    let mut tampered = t2.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(
        post(&url, call(5, Some(&tampered)), ALICE).await.status,
        400
    );
    assert_eq!(post(&url, call(6, Some(&t2)), MALLORY).await.status, 400);
    assert_eq!(post(&url, call(7, Some(STATE)), ALICE).await.status, 400);
    // The gate and the identity check.
    let headers = crate::support::fake::pairs(&[
        ("content-type", "text/plain"),
        ("authorization", AUTHORIZATION),
    ]);
    let reply = send(
        Method::POST,
        &url,
        &headers,
        call(8, None),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(reply.status, 415);
    let mut twice = mcp_headers("tools/call", Some("provision"));
    twice.push(("x-forwarded-user".into(), ALICE.into()));
    twice.push(("x-forwarded-user".into(), MALLORY.into()));
    let reply = send(
        Method::POST,
        &url,
        &twice,
        call(9, None),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(reply.status, 400);
    // A token past its (two second) lifetime.
    let t3 = token_of(&post(&url, call(10, None), ALICE).await);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(post(&url, call(11, Some(&t3)), ALICE).await.status, 400);
    tokens.extend([t1, t2, t3, tampered]);

    let deadline = Instant::now() + Duration::from_secs(10);
    while refusals(&process.log()).len() < 7 {
        assert!(
            Instant::now() < deadline,
            "audit lines missing:\n{}",
            process.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = process.log();
    drop(process);

    // Every line is JSON; debug lines are there (the access records among them).
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "DEBUG" && l["fields"]["message"] == "request served")
    );

    // Nothing secret, anywhere.
    let mut secrets: Vec<String> = vec![
        KEY.into(),
        ALICE.into(),
        MALLORY.into(),
        AUTHORIZATION.into(),
        "AUTHZ-SECRET-VALUE-99".into(),
        "PLAINTEXT-STATE-MARKER-41".into(),
        STATE.into(),
    ];
    // Any 24 characters of any token (the kid-bearing head is 11 characters: `v1.` and
    // the key id's base64, which may appear as the hex key id only).
    for token in &tokens {
        let chars: Vec<char> = token.chars().collect();
        for window in chars.windows(24).step_by(8) {
            secrets.push(window.iter().collect());
        }
    }
    for line in log.lines() {
        for secret in &secrets {
            assert!(!line.contains(secret.as_str()), "{secret:?} leaked: {line}");
        }
    }

    let found = refusals(&log);
    let by_id = |id: &str| {
        found
            .iter()
            .find(|r| r["fields"]["request_id"] == id)
            .unwrap_or_else(|| panic!("no refusal of request {id}: {found:#?}"))
            .clone()
    };
    let digest = |p: &str| {
        let d = Sha256::new()
            .chain_update(b"mcp-state-guard/audit/principal:")
            .chain_update(p.as_bytes())
            .finalize();
        hex::encode(&d[..8])
    };
    let kid = mcp_state_guard::facade::token::KeyId::of_token(&tokens[0])
        .unwrap()
        .to_string();
    for (id, category, reason, principal, with_kid) in [
        ("3", "store", "replayed", ALICE, true),
        ("5", "state", "malformed", ALICE, true),
        ("6", "state", "principal", MALLORY, true),
        ("7", "state", "malformed", ALICE, false),
        ("11", "state", "expired", ALICE, true),
    ] {
        let fields = &by_id(id)["fields"];
        assert_eq!(fields["category"], category, "{fields}");
        assert_eq!(fields["reason"], reason, "{fields}");
        assert_eq!(fields["method"], "tools/call", "{fields}");
        assert_eq!(fields["class"], "tools/call", "{fields}");
        assert_eq!(fields["target"], "provision", "{fields}");
        assert_eq!(fields["principal"], digest(principal), "{fields}");
        assert_eq!(fields["trace_id"], TRACE, "{fields}");
        assert_eq!(fields["status"], 400, "{fields}");
        assert!(
            fields["client"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{fields}"
        );
        if with_kid {
            assert_eq!(fields["kid"], kid.as_str(), "{fields}");
        } else {
            assert!(fields.get("kid").is_none(), "{fields}");
        }
    }
    let gate: Vec<&Value> = found
        .iter()
        .filter(|r| r["fields"]["category"] == "gate")
        .collect();
    assert_eq!(gate.len(), 1, "{found:#?}");
    assert_eq!(gate[0]["fields"]["reason"], "content_type");
    let auth: Vec<&Value> = found
        .iter()
        .filter(|r| r["fields"]["category"] == "auth")
        .collect();
    assert_eq!(auth.len(), 1, "{found:#?}");
    assert_eq!(auth[0]["fields"]["reason"], "principal_header");
    assert_eq!(found.len(), 7, "one line per refusal: {found:#?}");
}
