//! Handle ownership in front of a legacy import server (`tests/py/import_server.py`, on
//! the real Python SDK) that trusts any import id it is sent: through the sidecar, only
//! the caller a sealed handle was issued to can use it, and every other presentation
//! (another caller's, a raw id, an edited, expired or other-kind handle) gets the one
//! `invalid_handle` answer while the import's counts stay unchanged.

use crate::support::http::{Reply, meta, post_mcp_with};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::{Sidecar, config};
use mcp_state_guard::facade::config::{Config, HandleConfig, PrincipalSource};
use mcp_state_guard::facade::token::{HandleReject, KeyRing, StateSealer};
use mcp_state_guard::facade::tools::HandleResult;
use serde_json::{Value, json};

pub const KEY: &str = "9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b";
pub const AUDIENCE: &str = "imports";

/// The import kind: `start_import` issues it, `append_rows` and `commit_import` take it.
pub fn import_kind(ttl_seconds: u64) -> HandleConfig {
    HandleConfig {
        kind: "import".into(),
        issued_by: vec!["start_import".into()],
        result_pointer: "/structuredContent/importId".into(),
        accepted_by: vec!["append_rows".into(), "commit_*".into()],
        argument_pointer: "/importId".into(),
        ttl_seconds,
    }
}

/// A sidecar in front of `upstream` naming callers by `x-forwarded-user`.
pub fn import_config(upstream: &str) -> Config {
    let mut config = config(upstream);
    config.principal.source = PrincipalSource::Header;
    config.handles = vec![import_kind(60)];
    config
}

/// `tool` with `arguments`, called by `who` (no identity header when `None`).
pub async fn call(url: &str, who: Option<&str>, tool: &str, arguments: Value) -> Reply {
    call_with(url, who, tool, arguments, json!({}), &[]).await
}

/// [`call`] with extra `params` members and extra headers.
pub async fn call_with(
    url: &str,
    who: Option<&str>,
    tool: &str,
    arguments: Value,
    extra_params: Value,
    headers: &[(&str, &str)],
) -> Reply {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": meta()});
    for (key, value) in extra_params.as_object().unwrap() {
        params[key] = value.clone();
    }
    // A new JSON-RPC id each time, as a client's retry has.
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let mut extra: Vec<(&str, &str)> = headers.to_vec();
    if let Some(who) = who {
        extra.push(("x-forwarded-user", who));
    }
    post_mcp_with(url, &message, &extra).await
}

/// The structured result of a successful call.
pub fn structured(reply: &Reply) -> Value {
    let message = reply.message();
    assert!(message["error"].is_null(), "{message}");
    assert_ne!(message["result"]["isError"], json!(true), "{message}");
    message["result"]["structuredContent"].clone()
}

fn counts(upstream: &LegacyServer) -> Value {
    upstream.debug_json("GET", "/debug/counts")
}

async fn ownership(mode: Mode) {
    let upstream = LegacyServer::start_script("tests/py/import_server.py", mode);
    let sidecar = Sidecar::with_keys(import_config(&upstream.base_url()), &[KEY], AUDIENCE).await;
    let url = sidecar.mcp_url();

    let started = call(&url, Some("alice"), "start_import", json!({"name": "a"})).await;
    let handle = structured(&started)["importId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(handle.starts_with("h1."), "sealed: {handle}");
    // The text still echoes the raw id (documented): it is useless, only sealed handles open.
    let text = started.message()["result"]["content"][0]["text"].clone();
    assert_eq!(text, json!("started import imp-1"));

    let appended = call(
        &url,
        Some("alice"),
        "append_rows",
        json!({"importId": handle, "rows": [1, 2]}),
    )
    .await;
    // The upstream received its own raw id, and the sidecar sealed none in this result.
    assert_eq!(structured(&appended)["importId"], json!("imp-1"));
    assert_eq!(counts(&upstream)["imp-1"]["rows"], json!(2));

    // Every refusal, whatever its cause, is the same answer.
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY], "test").unwrap(),
        Some(AUDIENCE.into()),
        60,
    );
    let mut edited = handle.clone().into_bytes();
    let at = edited.len() / 2;
    edited[at] = if edited[at] == b'A' { b'B' } else { b'A' };
    let attempts: Vec<(&str, Option<&str>, Value, HandleReject)> = vec![
        (
            "bob uses alice's",
            Some("bob"),
            json!(handle),
            HandleReject::Principal,
        ),
        ("no identity", None, json!(handle), HandleReject::Principal),
        (
            "raw id",
            Some("alice"),
            json!("imp-1"),
            HandleReject::Malformed,
        ),
        (
            "edited",
            Some("alice"),
            json!(String::from_utf8(edited).unwrap()),
            HandleReject::Malformed,
        ),
        (
            "expired",
            Some("alice"),
            json!(sealer.seal_handle_at(
                mcp_state_guard::facade::token::now() - 600.0,
                "import",
                &json!("imp-1"),
                Some("alice"),
                60,
                None
            )),
            HandleReject::Expired,
        ),
        (
            "another kind",
            Some("alice"),
            json!(sealer.seal_handle("draft", &json!("imp-1"), Some("alice"), 60)),
            HandleReject::Kind,
        ),
        (
            "not a string",
            Some("alice"),
            json!(1),
            HandleReject::Malformed,
        ),
    ];
    let mut bodies = Vec::new();
    for (what, who, presented, reason) in attempts {
        let before = sidecar
            .metrics()
            .tools
            .handle_count(HandleResult::Refused(reason));
        for tool in ["append_rows", "commit_import"] {
            let reply = call(
                &url,
                who,
                tool,
                json!({"importId": presented, "rows": [9, 9, 9]}),
            )
            .await;
            assert_eq!(reply.status, 400, "{what}: {}", reply.text());
            let body = reply.json();
            assert_eq!(body["error"]["code"], json!(-32602), "{what}");
            assert_eq!(body["error"]["data"], json!({"reason": "invalid_handle"}));
            bodies.push(body["error"].clone());
        }
        assert_eq!(
            sidecar
                .metrics()
                .tools
                .handle_count(HandleResult::Refused(reason)),
            before + 2,
            "{what} counted as {}",
            reason.as_str()
        );
    }
    // A raw id beside the sealed handle, under a key a case-folding upstream (Go's
    // `encoding/json`) reads as `importId`, or under that key alone: refused too.
    for arguments in [
        json!({"importId": handle, "ImportId": "imp-2", "rows": [9]}),
        json!({"IMPORTID": "imp-1", "rows": [9]}),
        json!({"import_id": "imp-1", "rows": [9]}),
    ] {
        let reply = call(&url, Some("alice"), "append_rows", arguments.clone()).await;
        assert_eq!(reply.status, 400, "{arguments}: {}", reply.text());
        let body = reply.json();
        assert_eq!(body["error"]["data"], json!({"reason": "invalid_handle"}));
        bodies.push(body["error"].clone());
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "one answer");
    let after = counts(&upstream);
    assert_eq!(after["imp-1"]["rows"], json!(2), "nothing applied: {after}");
    assert_eq!(after["imp-1"]["committed"], json!(false));
    assert_eq!(
        upstream
            .debug_json("GET", "/debug/calls")
            .as_array()
            .unwrap()
            .len(),
        2,
        "no refused call reached the upstream"
    );

    // Bob's own import is his alone; alice's handle still works for alice.
    let bobs = call(&url, Some("bob"), "start_import", json!({"name": "b"})).await;
    let bobs = structured(&bobs)["importId"].as_str().unwrap().to_owned();
    let refused = call(
        &url,
        Some("alice"),
        "commit_import",
        json!({"importId": bobs}),
    )
    .await;
    assert_eq!(refused.status, 400);
    let committed = call(
        &url,
        Some("alice"),
        "commit_import",
        json!({"importId": handle}),
    )
    .await;
    assert_eq!(structured(&committed)["committed"], json!(true));
    let after = counts(&upstream);
    assert_eq!(after["imp-1"]["committed"], json!(true));
    assert_eq!(after["imp-2"]["committed"], json!(false));
    sidecar.stop().await;
}

#[tokio::test]
async fn only_the_owner_uses_a_handle_json() {
    ownership(Mode::Json).await;
}

#[tokio::test]
async fn only_the_owner_uses_a_handle_sse() {
    ownership(Mode::Sse).await;
}

#[tokio::test]
async fn a_handle_expires_after_its_ttl() {
    let upstream = LegacyServer::start_script("tests/py/import_server.py", Mode::Json);
    let mut config = import_config(&upstream.base_url());
    config.handles = vec![import_kind(1)];
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let url = sidecar.mcp_url();
    let started = call(&url, Some("alice"), "start_import", json!({})).await;
    let handle = structured(&started)["importId"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let reply = call(
        &url,
        Some("alice"),
        "append_rows",
        json!({"importId": handle, "rows": [1]}),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(counts(&upstream)["imp-1"]["rows"], json!(0));
    sidecar.stop().await;
}

/// An MRTR round on an accepting tool: the token binds the arguments as the client sent
/// them (the sealed handle), the retry opens with them, and the upstream sees its raw
/// handle both times.
#[tokio::test]
async fn a_state_binds_the_sealed_handle_the_client_sent() {
    use crate::support::fake::{FakeUpstream, Reply as FakeReply, complete, input_required};
    use mcp_state_guard::facade::token::RequestBinding;
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let id = message["id"].clone();
        let params = &message["params"];
        let answer = match params["requestState"].as_str() {
            None => input_required(id, json!("PLAIN")),
            Some(state) => complete(
                id,
                &format!(
                    "{state} {}",
                    params["arguments"]["importId"].as_str().unwrap()
                ),
            ),
        };
        FakeReply::json(answer.to_string())
    })
    .await;
    let mut config = import_config(&fake.base_url());
    config.handles[0].accepted_by = vec!["provision".into()];
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY], "test").unwrap(),
        Some(AUDIENCE.into()),
        60,
    );
    let handle = sealer.seal_handle("import", &json!("imp-9"), Some("alice"), 60);
    let arguments = json!({"importId": handle});
    let url = sidecar.mcp_url();
    let first = call(&url, Some("alice"), "provision", arguments.clone()).await;
    let token = first.message()["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let client_params = json!({"name": "provision", "arguments": arguments});
    let binding = RequestBinding::of("tools/call", client_params.as_object())
        .unwrap()
        .at_path("/mcp");
    assert!(
        sealer.open(&token, &binding, Some("alice")).is_ok(),
        "bound to the sealed handle as sent"
    );
    let answers = json!({"region": {"action": "accept", "content": {"region": "eu"}}});
    let retry = call_with(
        &url,
        Some("alice"),
        "provision",
        arguments,
        json!({"requestState": token, "inputResponses": answers}),
        &[],
    )
    .await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(
        retry.message()["result"]["content"][0]["text"],
        json!("PLAIN imp-9")
    );
    for request in fake.requests() {
        assert_eq!(
            request.json()["params"]["arguments"]["importId"],
            json!("imp-9")
        );
    }
    sidecar.stop().await;
}

/// A revocation stops a caller's handles as it stops its states: a handle issued before
/// `POST /admin/revoke` gets the one `invalid_handle` answer (cause `revoked`) and
/// nothing is forwarded; another caller's handle, and the caller's handles issued after,
/// open. Mints and opens are counted per key id.
#[tokio::test]
async fn a_revoked_callers_handles_are_refused() {
    use crate::support::http::send;
    use mcp_state_guard::facade::token::KeyId;
    const SECRET: &str = "admin-secret-for-handles-0123";
    let upstream = LegacyServer::start_script("tests/py/import_server.py", Mode::Json);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, SECRET).unwrap();
    let mut config = import_config(&upstream.base_url());
    config.admin.token_file = Some(token_file);
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let url = sidecar.mcp_url();
    let start = |who: &'static str| {
        let url = url.clone();
        async move {
            let started = call(&url, Some(who), "start_import", json!({})).await;
            structured(&started)["importId"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let append = |who: &'static str, handle: String| {
        let url = url.clone();
        async move {
            call(
                &url,
                Some(who),
                "append_rows",
                json!({"importId": handle, "rows": [1]}),
            )
            .await
        }
    };
    let alices = start("alice").await;
    let bobs = start("bob").await;
    assert_eq!(append("alice", alices.clone()).await.status, 200);

    let revoked = send(
        http::Method::POST,
        &format!("http://{}/admin/revoke", sidecar.admin_addr),
        &[
            ("content-type".into(), "application/json".into()),
            ("authorization".into(), format!("Bearer {SECRET}")),
        ],
        json!({"principal": "alice"}).to_string(),
        std::time::Duration::from_secs(10),
    )
    .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());
    let refused = append("alice", alices.clone()).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json()["error"]["data"],
        json!({"reason": "invalid_handle"})
    );
    assert_eq!(
        sidecar
            .metrics()
            .tools
            .handle_count(HandleResult::Refused(HandleReject::Revoked)),
        1
    );
    assert_eq!(counts(&upstream)["imp-1"]["rows"], json!(1), "not applied");
    assert_eq!(append("bob", bobs).await.status, 200, "bob is not revoked");
    // Handles carry whole seconds: one issued in the second of the revocation is
    // refused too, so the next is issued a second later.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let fresh = start("alice").await;
    assert_eq!(append("alice", fresh.clone()).await.status, 200);

    let kid = KeyId::of_handle(&fresh).expect("a handle names its key");
    assert_eq!(KeyId::of_handle(&alices), Some(kid));
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics.keys.handles_count(true, kid),
        Some(3),
        "three minted"
    );
    assert_eq!(
        metrics.keys.handles_count(false, kid),
        Some(3),
        "three opened"
    );
    assert_eq!(
        metrics.keys.tokens_count(false, kid),
        Some(0),
        "no state opened"
    );
    sidecar.stop().await;
}

/// A recorded answer outlives the handle sealed in it (a day against an hour): the
/// record holds the upstream's raw handle and each replay seals it afresh, so a replay
/// after the first handle expired hands out one that works (for the same caller only).
#[tokio::test]
async fn a_replay_seals_its_handles_afresh() {
    let upstream = LegacyServer::start_script("tests/py/import_server.py", Mode::Json);
    let mut config = import_config(&upstream.base_url());
    config.handles = vec![import_kind(1)];
    config.idempotency.tools = vec!["start_import".into()];
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let url = sidecar.mcp_url();
    let start = || {
        call_with(
            &url,
            Some("alice"),
            "start_import",
            json!({}),
            json!({"idempotencyKey": "start-1"}),
            &[],
        )
    };
    let first = start().await;
    let first_handle = structured(&first)["importId"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let replay = start().await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    let handle = structured(&replay)["importId"].clone();
    assert!(handle.as_str().unwrap().starts_with("h1."), "{handle}");
    assert_ne!(handle, first_handle, "sealed again");
    for (what, presented, status) in [("expired", first_handle, 400), ("replayed", handle, 200)] {
        let reply = call(
            &url,
            Some("alice"),
            "append_rows",
            json!({"importId": presented, "rows": [1]}),
        )
        .await;
        assert_eq!(reply.status, status, "{what}: {}", reply.text());
    }
    assert_eq!(counts(&upstream)["imp-1"]["rows"], json!(1));
    let calls = upstream.debug_json("GET", "/debug/calls");
    let starts = calls
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == json!("start_import"))
        .count();
    assert_eq!(starts, 1, "the replay did not reach the upstream");
    sidecar.stop().await;
}

/// An issuing tool's handle in an `input_required` round (JSON, or an SSE event) is
/// sealed like one in a complete result: no raw handle at the pointer reaches the
/// client. A fake upstream, because a real server does not issue handles in a round.
#[tokio::test]
async fn a_handle_in_an_input_required_round_is_sealed() {
    use crate::support::fake::{
        FakeUpstream, Reply as FakeReply, Step, contains, event, input_required,
    };
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let mut round = input_required(message["id"].clone(), json!("PLAIN"));
        round["result"]["structuredContent"] = json!({"importId": "imp-raw-7"});
        match request.header("x-mode") {
            Some("sse") => FakeReply::sse(vec![Step::Data(event("\r\n", &round).into())]),
            _ => FakeReply::json(round.to_string()),
        }
    })
    .await;
    let config = import_config(&fake.base_url());
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY], "test").unwrap(),
        Some(AUDIENCE.into()),
        60,
    );
    for mode in ["json", "sse"] {
        let reply = call_with(
            &sidecar.mcp_url(),
            Some("alice"),
            "start_import",
            json!({}),
            json!({}),
            &[("x-mode", mode)],
        )
        .await;
        assert_eq!(reply.status, 200, "{mode}: {}", reply.text());
        assert!(
            !contains(&reply.body, "imp-raw-7"),
            "{mode}: {}",
            reply.text()
        );
        let result = &reply.message()["result"];
        assert_eq!(result["resultType"], json!("input_required"), "{mode}");
        let handle = result["structuredContent"]["importId"].as_str().unwrap();
        assert_eq!(
            sealer.open_handle(handle, "import", Some("alice")),
            Ok(json!("imp-raw-7")),
            "{mode}"
        );
    }
    sidecar.stop().await;
}
