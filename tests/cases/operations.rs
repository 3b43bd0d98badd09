//! Running it: the connection limit (excess connections wait in the backlog while every
//! open one is busy, counted),
//! idle keep-alive connections closed after `client_idle_ms` and not at the header
//! timeout, HTTP/2 header limits, and `/readyz` naming a dead upstream and a stale key
//! ring, recovering when they do.

use crate::support::fake::{FakeUpstream, Reply, complete, pairs};
use crate::support::http::send;
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::server::Listener;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(super) async fn upstream() -> FakeUpstream {
    FakeUpstream::always(|| Reply::json(complete(json!(1), "ok").to_string())).await
}

/// One keep-alive `tools/list` on a raw connection; the response's bytes.
pub(super) async fn exchange(stream: &mut TcpStream, addr: std::net::SocketAddr) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    // The fake answers with a content-length; read until the whole body is in.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&received).contains("\"result\"") {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// How long until the peer closes `stream` (bounded by 10 s).
async fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buffer = [0u8; 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("the sidecar closes the connection");
        if matches!(read, Ok(0) | Err(_)) {
            return started.elapsed();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_keep_alive_connections_close_after_client_idle_not_the_header_timeout() {
    let fake = upstream().await;
    let mut config = sidecar::config(&fake.base_url());
    config.timeouts.header_read_ms = 200;
    config.timeouts.client_idle_ms = 1500;
    let sidecar = Sidecar::start(config).await;
    let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
    assert!(
        exchange(&mut stream, sidecar.addr)
            .await
            .starts_with("HTTP/1.1 200")
    );
    // Idle for three header timeouts: still open, and serves the next request.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        exchange(&mut stream, sidecar.addr)
            .await
            .starts_with("HTTP/1.1 200")
    );
    // Then idle: closed after client_idle_ms.
    let after = closed_after(&mut stream).await;
    assert!(
        after >= Duration::from_millis(1300) && after < Duration::from_secs(5),
        "closed after {after:?}"
    );
    // A request started but never finished is still held to the header timeout.
    let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
    assert!(
        exchange(&mut stream, sidecar.addr)
            .await
            .starts_with("HTTP/1.1 200")
    );
    stream.write_all(b"POST /mcp HT").await.unwrap();
    let after = closed_after(&mut stream).await;
    assert!(
        after < Duration::from_millis(1200),
        "closed after {after:?}"
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_over_the_limit_wait_in_the_backlog_and_are_counted() {
    let fake = upstream().await;
    let mut config = sidecar::config(&fake.base_url());
    config.limits.max_connections = 2;
    config.limits.max_connections_per_peer = Some(2);
    let sidecar = Sidecar::start(config).await;
    let metrics = sidecar.metrics().clone();
    let mut first = TcpStream::connect(sidecar.addr).await.unwrap();
    let mut second = TcpStream::connect(sidecar.addr).await.unwrap();
    for stream in [&mut first, &mut second] {
        assert!(
            exchange(stream, sidecar.addr)
                .await
                .starts_with("HTTP/1.1 200")
        );
        // Busy again (a request head on its way), so neither is idle to be reclaimed.
        stream.write_all(b"POST /mcp HTTP/1.1\r\n").await.unwrap();
    }
    assert_eq!(metrics.connections.connections_open(Listener::Proxy), 2);
    // The third connects (the kernel's backlog) but is not served while two are open.
    let mut third = TcpStream::connect(sidecar.addr).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        sidecar.addr,
        body.len()
    );
    third.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = [0u8; 1024];
    let waited = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buffer)).await;
    assert!(waited.is_err(), "served over the limit");
    assert_eq!(metrics.connections.connections_open(Listener::Proxy), 2);
    assert!(metrics.connections.connection_limit_count(Listener::Proxy) >= 1);
    // The admin listener has its own allowance: probes still answer.
    let ready = send(
        Method::GET,
        &format!("http://{}/healthz", sidecar.admin_addr),
        &[],
        "",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(ready.status, 200);
    // One closes: the waiting connection is accepted and answered.
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(10), third.read(&mut buffer))
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert!(
        buffer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buffer[..n])
    );
    drop((second, third));
    sidecar.stop().await;
}

/// The server's first SETTINGS frame on an h2c connection: `(identifier, value)` pairs.
async fn server_settings(addr: std::net::SocketAddr) -> Vec<(u16, u32)> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The client preface and an empty SETTINGS frame.
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let mut head = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head))
        .await
        .expect("a SETTINGS frame in time")
        .unwrap();
    assert_eq!(head[3], 0x4, "the server speaks first with SETTINGS");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.unwrap();
    payload
        .chunks(6)
        .map(|e| {
            (
                u16::from_be_bytes([e[0], e[1]]),
                u32::from_be_bytes([e[2], e[3], e[4], e[5]]),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn http2_limits_are_advertised_and_header_lists_over_them_refused() {
    let fake = upstream().await;
    let mut config = sidecar::config(&fake.base_url());
    config.limits.http2_max_header_list_bytes = 4096;
    config.limits.http2_max_concurrent_streams = 7;
    let sidecar = Sidecar::start(config).await;
    // SETTINGS_MAX_CONCURRENT_STREAMS (0x3) and SETTINGS_MAX_HEADER_LIST_SIZE (0x6).
    let settings = server_settings(sidecar.addr).await;
    assert!(settings.contains(&(0x3, 7)), "{settings:?}");
    assert!(settings.contains(&(0x6, 4096)), "{settings:?}");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let request = |extra: usize| {
        let mut builder = http::Request::post(sidecar.mcp_url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if extra > 0 {
            builder = builder.header("x-padding", "p".repeat(extra));
        }
        builder
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            )))
            .unwrap()
    };
    let small = client.request(request(0)).await.unwrap();
    assert_eq!(small.status(), 200);
    assert_eq!(small.version(), http::Version::HTTP_2);
    let before = fake.count();
    let large = tokio::time::timeout(Duration::from_secs(10), client.request(request(8192)))
        .await
        .expect("refused in time");
    match large {
        Ok(response) => assert_eq!(response.status(), 431),
        Err(e) => assert!(!e.is_connect(), "{e:?}"),
    }
    assert_eq!(fake.count(), before, "forwarded");
    sidecar.stop().await;
}

async fn readyz(sidecar: &Sidecar) -> (u16, String) {
    let url = format!("http://{}/readyz", sidecar.admin_addr);
    let reply = send(Method::GET, &url, &[], "", Duration::from_secs(10)).await;
    (reply.status.as_u16(), reply.text())
}

/// Poll `/readyz` until its status is `want` (up to 10 s); its body then.
async fn readyz_until(sidecar: &Sidecar, want: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = readyz(sidecar).await;
        if status == want {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz stayed {status}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_fails_while_the_upstream_is_unreachable() {
    let fake = upstream().await;
    let port = fake.port;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    assert_eq!(readyz(&sidecar).await, (200, "ready\n".into()));
    drop(fake);
    let body = readyz_until(&sidecar, 503).await;
    assert!(body.contains("upstream unreachable"), "{body}");
    // Back where it was: ready again within a probe or two.
    let _fake = FakeUpstream::start_at(port, |_| Reply::json("{}")).await;
    assert_eq!(readyz_until(&sidecar, 200).await, "ready\n");
    sidecar.stop().await;

    // Switched off: readiness ignores the upstream.
    let mut config = sidecar::config("http://127.0.0.1:9");
    config.readyz.check_upstream = false;
    let sidecar = Sidecar::start(config).await;
    assert_eq!(readyz(&sidecar).await.0, 200);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_fails_while_the_key_file_stays_broken_and_says_so() {
    let fake = upstream().await;
    let mut config = sidecar::config(&fake.base_url());
    config.state.reload_interval_ms = 100;
    config.readyz.max_key_age_seconds = 1;
    let key = "0123456789abcdef0123456789abcdef-readyz-key";
    let sidecar = Sidecar::with_keys(config, &[key], "svc").await;
    // A healthy file is read back every poll: its age never passes the bound.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(readyz(&sidecar).await.0, 200);
    let metrics = sidecar.metrics().clone();
    let keys = sidecar.keys_dir.as_ref().unwrap().path().join("keys");
    std::fs::write(&keys, "too short\n").unwrap();
    let body = readyz_until(&sidecar, 503).await;
    assert!(body.contains("key ring stale"), "{body}");
    assert_eq!(metrics.keys.key_reload_count(false), 1);
    assert!(metrics.keys.key_ring_age().unwrap() > Duration::from_secs(1));
    let text = send(
        Method::GET,
        &format!("http://{}/metrics", sidecar.admin_addr),
        &pairs(&[]),
        "",
        Duration::from_secs(5),
    )
    .await
    .text();
    assert!(
        !text.contains("mcp_state_guard_key_ring_age_seconds 0\n"),
        "{text}"
    );
    // Fixed: ready again, and the keys in use never changed.
    std::fs::write(&keys, format!("{key}\n")).unwrap();
    assert_eq!(readyz_until(&sidecar, 200).await, "ready\n");
    sidecar.stop().await;
}
