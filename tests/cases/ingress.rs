//! Before the body: `allowed_hosts` (the upstream's DNS-rebinding defence, which the
//! `Host` rewrite would otherwise disable) on the proxy port and on the admin port (its
//! own default: IP literals and `localhost`), forwarding headers only from trusted proxies,
//! the identity header only from them when they are listed (and never a look-alike of it,
//! on `passthrough_paths` too), a client's `Connection` header unable to delete the
//! headers the sidecar sets, and slow clients cut off by the header and body read
//! timeouts. Each refusal forwards nothing.

use crate::support::fake::{FakeBody, FakeUpstream, Reply, complete, pairs, tools_call};
use crate::support::http::{mcp_headers, post_mcp, post_mcp_with, send};
use crate::support::sidecar::{self, Sidecar, config};
use http::Method;
use mcp_state_guard::facade::config::PrincipalSource;
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

async fn upstream() -> FakeUpstream {
    FakeUpstream::always(|| Reply::json(complete(json!(1), "ok").to_string())).await
}

fn list_tools() -> Vec<u8> {
    br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn foreign_hosts_get_421_and_nothing_is_forwarded() {
    let fake = upstream().await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let url = sidecar.mcp_url();
    for host in [
        "rebind.attacker.example",
        "rebind.attacker.example:8080",
        "127.0.0.1.nip.io",
    ] {
        let mut headers = mcp_headers("tools/list", None);
        headers.push(("host".into(), host.into()));
        let reply = send(Method::POST, &url, &headers, list_tools(), T).await;
        assert_eq!(reply.status, 421, "{host}");
        assert_eq!(reply.json()["error"]["code"], -32600, "{host}");
        // GET streams and DELETEs are refused the same way.
        let host_only = [("host".to_owned(), host.to_owned())];
        let get = send(Method::GET, &url, &host_only, "", T).await;
        assert_eq!(get.status, 421, "{host}");
    }
    assert_eq!(fake.count(), 0, "a refused host reached the upstream");
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::MisdirectedRequest),
        6
    );
    // The loopback names the listener answers to still work (the test client sends
    // `127.0.0.1:<port>`).
    let ok = send(
        Method::POST,
        &url,
        &mcp_headers("tools/list", None),
        list_tools(),
        T,
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let mut headers = mcp_headers("tools/list", None);
    headers.push(("host".into(), "localhost".into()));
    assert_eq!(
        send(Method::POST, &url, &headers, list_tools(), T)
            .await
            .status,
        200
    );
    assert_eq!(fake.count(), 2);
    sidecar.stop().await;

    // An explicit list replaces the default; `*` accepts any host.
    let mut c = config(&fake.base_url());
    c.allowed_hosts = Some(vec!["mcp.example.com".into()]);
    let sidecar = Sidecar::start(c).await;
    let mut headers = mcp_headers("tools/list", None);
    headers.push(("host".into(), "mcp.example.com:443".into()));
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, list_tools(), T).await;
    assert_eq!(reply.status, 200);
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(reply.status, 421, "loopback is not in the explicit list");
    sidecar.stop().await;
}

/// Security review finding 8: the admin listener did not check `Host`, so a page on a
/// rebound name could read `/metrics` while the proxy port answered 421.
#[tokio::test(flavor = "multi_thread")]
async fn the_admin_listener_refuses_foreign_hosts_too() {
    let fake = upstream().await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let admin = sidecar.admin_addr;
    let get = |path: &str, host: &str| {
        let url = format!("http://{admin}{path}");
        let host = [("host".to_owned(), host.to_owned())];
        async move { send(Method::GET, &url, &host, "", T).await }
    };
    let mut refused = 0;
    for host in [
        "evil.example",
        &format!("evil.example:{}", admin.port()),
        "127.0.0.1.nip.io",
    ] {
        for path in ["/metrics", "/readyz", "/healthz", "/admin/revoke"] {
            let reply = get(path, host).await;
            assert_eq!(reply.status, 421, "{path} with {host}");
            assert!(
                !reply.text().contains("mcp_state_guard_"),
                "{path} with {host}"
            );
            refused += 1;
        }
    }
    // The loopback name, and any IP literal (kubelet probes and Prometheus scrapes by
    // pod IP; an IP literal cannot be rebound).
    for host in [
        format!("localhost:{}", admin.port()),
        "localhost".to_owned(),
        admin.to_string(),
        "10.0.0.7:9090".to_owned(),
        "[::1]:9090".to_owned(),
    ] {
        let reply = get("/metrics", &host).await;
        assert_eq!(reply.status, 200, "{host}");
        assert!(reply.text().contains("mcp_state_guard_"), "{host}");
    }
    let counted = get("/metrics", "127.0.0.1").await.text();
    assert!(
        counted.contains(&format!(
            "mcp_state_guard_admin_requests_misdirected_total {refused}\n"
        )),
        "{counted}"
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn forwarding_headers_come_from_trusted_proxies_only() {
    let fake = upstream().await;
    let spoofed = [
        ("forwarded", "for=6.6.6.6;proto=https;host=admin.internal"),
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-host", "admin.internal"),
        ("x-forwarded-proto", "https"),
        ("x-real-ip", "6.6.6.6"),
        ("x_forwarded_for", "7.7.7.7"),
    ];
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let reply = post_mcp_with(&sidecar.mcp_url(), &tools_call(1, None), &spoofed).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = fake.last();
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    for gone in [
        "forwarded",
        "x-forwarded-host",
        "x-real-ip",
        "x_forwarded_for",
    ] {
        assert_eq!(seen.header(gone), None, "{gone} reached the upstream");
    }
    sidecar.stop().await;

    // The front proxy is trusted: its headers stay, and the chain is extended.
    let mut c = config(&fake.base_url());
    c.principal.trusted_proxies = vec!["127.0.0.0/8".into()];
    let sidecar = Sidecar::start(c).await;
    post_mcp_with(&sidecar.mcp_url(), &tools_call(1, None), &spoofed).await;
    let seen = fake.last();
    assert_eq!(seen.header("x-forwarded-for"), Some("6.6.6.6, 127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    assert_eq!(seen.header("x-forwarded-host"), Some("admin.internal"));
    assert_eq!(seen.header("x_forwarded_for"), None);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_identity_header_is_taken_only_from_trusted_proxies() {
    let fake = upstream().await;
    let mut c = config(&fake.base_url());
    c.principal.source = PrincipalSource::Header;
    c.principal.trusted_proxies = vec!["10.0.0.0/8".into()];
    let sidecar = Sidecar::start(c.clone()).await;
    let identity = [("x-forwarded-user", "admin")];
    let reply = post_mcp_with(&sidecar.mcp_url(), &tools_call(1, None), &identity).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::PrincipalHeader),
        1
    );
    assert_eq!(fake.count(), 0);
    // Without the header the request is anonymous, as from anyone.
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(reply.status, 200);
    sidecar.stop().await;

    c.principal.trusted_proxies = vec!["127.0.0.1".into()];
    let sidecar = Sidecar::start(c).await;
    let reply = post_mcp_with(&sidecar.mcp_url(), &tools_call(1, None), &identity).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    sidecar.stop().await;
}

/// Security review finding 3: hop-by-hop stripping ran after the rewrite, so a client's
/// `Connection: X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-User` deleted the
/// forwarding and identity headers the sidecar had just set or vouched for (and an
/// idempotency key it had reserved the call under).
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_header_cannot_name_away_the_sidecars_headers() {
    let fake = upstream().await;
    let mut c = config(&fake.base_url());
    c.principal.source = PrincipalSource::Header;
    c.principal.forward_header = true;
    c.principal.trusted_proxies = vec!["127.0.0.1".into()];
    c.idempotency.tools = vec!["provision".into()];
    let sidecar = Sidecar::start(c).await;
    let headers = [
        (
            "connection",
            "X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-User, Idempotency-Key, \
             Authorization, X-Hop",
        ),
        ("x-forwarded-user", "alice"),
        ("idempotency-key", "order-1"),
        ("authorization", "Bearer opaque"),
        ("x-hop", "1"),
    ];
    let reply = post_mcp_with(&sidecar.mcp_url(), &tools_call(1, None), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = fake.last();
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    assert_eq!(seen.header("x-forwarded-user"), Some("alice"));
    assert_eq!(seen.header("idempotency-key"), Some("order-1"));
    assert_eq!(seen.header("authorization"), Some("Bearer opaque"));
    // What the client really meant for this hop alone still goes.
    assert_eq!(seen.header("x-hop"), None);
    assert_eq!(seen.header("connection"), None);
    sidecar.stop().await;
}

/// Read from `stream` until the peer closes it; the time that took (bounded by 10 s).
async fn closed_after(stream: &mut TcpStream) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(T, stream.read(&mut buffer))
            .await
            .expect("the sidecar closes a stalled connection");
        match read {
            Ok(0) | Err(_) => return (started.elapsed(), received),
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_are_cut_off() {
    let fake = upstream().await;
    let mut c = config(&fake.base_url());
    c.timeouts.header_read_ms = 300;
    c.timeouts.body_read_ms = 300;
    let sidecar = Sidecar::start(c).await;

    // Half a request line, then nothing: closed by the header read timeout.
    let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
    stream.write_all(b"POST /mcp HT").await.unwrap();
    let (after, _) = closed_after(&mut stream).await;
    assert!(after < Duration::from_secs(5), "open for {after:?}");

    // A whole head, then a body that stops: 408, and nothing forwarded.
    let body = String::from_utf8(list_tools()).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n",
        sidecar.addr,
        body.len()
    );
    let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..10]).await.unwrap();
    let (_, received) = closed_after(&mut stream).await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::BodyTimeout),
        1
    );
    assert_eq!(fake.count(), 0);
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
