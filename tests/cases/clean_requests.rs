//! Clean requests: what the upstream receives is what the gate checked, written from the
//! tokens it scanned (no whitespace between them, each token as the client spelled it)
//! and framed one way: one `Content-Length` (a chunked client body included), no hop-by-hop
//! header nor one a client's `Connection` named (the gate's own `Mcp-*` and content type
//! survive such a `Connection`), its own `Host`, `Accept-Encoding: identity`, big numbers
//! verbatim, and the identity header only when `forward_header` says so.

use crate::support::fake::{
    FakeBody, FakeUpstream, Reply, Step, complete, contains, open, pairs, sidecar_with, tools_call,
};
use crate::support::http::{mcp_headers, send};
use crate::support::sidecar::Sidecar;
use http::Method;
use mcp_state_guard::facade::config::PrincipalSource;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn the_upstream_sees_a_clean_request() {
    let fake = FakeUpstream::always(|| Reply::json(complete(json!(1), "ok").to_string())).await;
    let sidecar = sidecar_with(&fake, |c| {
        c.principal.source = PrincipalSource::Header;
        c.allowed_hosts = Some(vec!["public.example".into()]);
    })
    .await;
    // Odd but valid JSON: whitespace, escapes, a big integer the upstream must see verbatim.
    let body = r#"{ "jsonrpc" : "2.0", "id" : 1, "method" : "tools/call",
        "params" : {"name":"provision", "arguments": {"name": "web\u002d1",
        "n": 123456789012345678901234567890}, "_meta": {}} }"#;
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.extend(pairs(&[
        ("connection", "keep-alive, x-hop"),
        ("keep-alive", "timeout=5"),
        ("x-hop", "1"),
        ("te", "trailers"),
        ("proxy-authorization", "Basic c2VjcmV0"),
        ("host", "public.example:443"),
        ("accept-encoding", "gzip, br"),
        ("mcp-param-region", "eu-west-1"),
        ("x-forwarded-user", "alice"),
    ]));
    let hop = [
        "connection",
        "keep-alive",
        "x-hop",
        "te",
        "proxy-authorization",
    ];
    let host = format!("127.0.0.1:{}", fake.port);
    for path in ["/mcp?x=1", "//mcp", "/MCP"] {
        let url = format!("{}{path}", sidecar.base_url());
        let reply = send(Method::POST, &url, &headers, body, T).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let seen = fake.last();
        assert_eq!(seen.target, path);
        assert_eq!(seen.header("host"), Some(host.as_str()));
        for gone in hop.iter().chain(&["transfer-encoding", "x-forwarded-user"]) {
            assert!(
                seen.headers.get(*gone).is_none(),
                "{path}: {gone} forwarded"
            );
        }
        assert_eq!(seen.header("accept-encoding"), Some("identity"));
        for name in [
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
            "mcp-protocol-version",
        ] {
            let sent = headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str());
            assert_eq!(seen.header(name), sent, "{path}: {name}");
        }
        assert_eq!(seen.json(), serde_json::from_str::<Value>(body).unwrap());
        assert_eq!(
            String::from_utf8_lossy(&seen.body),
            concat!(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"provision","#,
                r#""arguments":{"name":"web\u002d1","n":123456789012345678901234567890},"#,
                r#""_meta":{}}}"#
            ),
            "{path}: the scanned tokens, nothing between them"
        );
        assert!(contains(&seen.body, "123456789012345678901234567890"));
        let length = seen.body.len().to_string();
        assert_eq!(seen.header("content-length"), Some(length.as_str()));
    }
    // A chunked client body reaches the upstream with a length instead.
    let chunked = FakeBody::steps(vec![Step::Data(body.into()), Step::Data(" ".into())]);
    let url = sidecar.mcp_url();
    let response = open(Method::POST, &url, &headers, chunked, false).await;
    assert_eq!(response.status(), 200);
    let seen = fake.last();
    assert!(seen.headers.get("transfer-encoding").is_none());
    assert_eq!(
        seen.header("content-length"),
        Some(seen.body.len().to_string().as_str())
    );
    sidecar.stop().await;
    // With forward_header the identity reaches the upstream as received.
    let sidecar = sidecar_with(&fake, |c| {
        c.principal.source = PrincipalSource::Header;
        c.principal.forward_header = true;
        c.allowed_hosts = Some(vec!["public.example".into()]);
    })
    .await;
    send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
    assert_eq!(fake.last().header("x-forwarded-user"), Some("alice"));
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
