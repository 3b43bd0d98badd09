//! Edges found while attacking the data path: a JSON body that stalls after its head,
//! an HTTP/1.0 upstream, identity look-alike headers, and a client response carrying a
//! state. Each test fails if the corresponding guard is removed.

use crate::support::fake::{FakeBody, FakeUpstream, Reply, Step, pairs, plaintext, tools_call};
use crate::support::http::{post_mcp, send};
use crate::support::sidecar::{self, Sidecar};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::config::PrincipalSource;
use mcp_state_guard::error::ErrorKind;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn a_json_body_that_stalls_after_its_head_times_out() {
    // Head and half a body, then nothing: the JSON is read whole before sealing, so the
    // read is bounded by the same timeout as the head.
    let fake = FakeUpstream::always(|| {
        Reply::new(
            200,
            FakeBody::steps(vec![
                Step::Data(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,")),
                Step::Sleep(Duration::from_secs(30)),
            ]),
        )
        .header("content-type", "application/json")
    })
    .await;
    let mut config = sidecar::config(&fake.base_url());
    config.timeouts.response_head_ms = 400;
    let sidecar = Sidecar::start(config).await;
    let started = Instant::now();
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(reply.json()["id"], 1);
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::UpstreamTimeout),
        1
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_1_0_upstream_does_not_set_the_clients_version() {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
    let raw = format!(
        "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let fake = FakeUpstream::raw(vec![Step::Data(Bytes::from(raw))], false).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.version, http::Version::HTTP_11);
    assert_eq!(reply.json()["result"]["content"], serde_json::json!([]));
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn identity_look_alike_headers_never_reach_the_upstream() {
    let fake =
        FakeUpstream::always(|| Reply::json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)).await;
    for forward in [false, true] {
        let mut config = sidecar::config(&fake.base_url());
        config.principal.source = PrincipalSource::Header;
        config.principal.forward_header = forward;
        let sidecar = Sidecar::start(config).await;
        let mut headers = pairs(&[
            ("content-type", "application/json"),
            ("x-forwarded-user", "alice"),
        ]);
        // A WSGI upstream reads `x_forwarded_user` as the same HTTP_X_FORWARDED_USER.
        headers.extend(pairs(&[("x_forwarded_user", "admin")]));
        let body = serde_json::to_vec(&tools_call(1, None)).unwrap();
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let seen = fake.last();
        assert_eq!(seen.header("x_forwarded_user"), None, "forward={forward}");
        assert_eq!(seen.header("x-forwarded-user"), forward.then_some("alice"));
        sidecar.stop().await;
    }
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

#[tokio::test(flavor = "multi_thread")]
async fn passthrough_paths_get_the_identity_rules_too() {
    let fake = FakeUpstream::always(|| Reply::new(200, FakeBody::whole("ok"))).await;
    let mut config = sidecar::config(&fake.base_url());
    config.principal.source = PrincipalSource::Header;
    config.passthrough_paths = vec!["/oauth/token".into()];
    let sidecar = Sidecar::start(config).await;
    let url = format!("{}/oauth/token", sidecar.base_url());
    let form = ("content-type", "application/x-www-form-urlencoded");
    let headers = pairs(&[
        form,
        ("x-forwarded-user", "alice"),
        ("x_forwarded_user", "admin"),
    ]);
    let reply = send(Method::POST, &url, &headers, "grant_type=x", T).await;
    assert_eq!(reply.status, 200);
    assert_eq!(fake.last().header("x-forwarded-user"), None);
    assert_eq!(fake.last().header("x_forwarded_user"), None);
    let twice = pairs(&[
        form,
        ("x-forwarded-user", "alice"),
        ("x-forwarded-user", "bob"),
    ]);
    let reply = send(Method::POST, &url, &twice, "grant_type=x", T).await;
    assert_eq!(reply.status, 400);
    assert_eq!(fake.count(), 1);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_cannot_delete_the_headers_the_gate_checked() {
    let fake =
        FakeUpstream::always(|| Reply::json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let mut headers = crate::support::http::mcp_headers("tools/call", Some("provision"));
    headers.extend(pairs(&[(
        "connection",
        "mcp-method, mcp-name, content-type, x-hop",
    )]));
    headers.extend(pairs(&[("x-hop", "1")]));
    let body = serde_json::to_vec(&tools_call(1, None)).unwrap();
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = fake.last();
    assert_eq!(seen.header("mcp-method"), Some("tools/call"));
    assert_eq!(seen.header("mcp-name"), Some("provision"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("x-hop"), None);
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
