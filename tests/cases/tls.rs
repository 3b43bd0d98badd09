//! TLS on both legs: the listener (ALPN h2 and http/1.1, certificates rotated on disk
//! while a connection stays open, broken files kept out, unusable files refused at
//! startup with the key and the file named) and `https://` upstreams (verified against a
//! CA file, the client certificate presented, nothing sent to an unverified one).

use crate::support::fake::{FakeUpstream, Reply, complete, tools_call, wait_until};
use crate::support::http::{Reply as Answer, mcp_headers};
use crate::support::pki::{Ca, Files, client_config, server_config};
use crate::support::sidecar::{self, Sidecar};
use crate::support::tls::{Terminator, send};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use mcp_state_guard::facade::app;
use mcp_state_guard::facade::config::Config;
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::Arc;

async fn answering() -> FakeUpstream {
    FakeUpstream::always(|| Reply::json(complete(serde_json::json!(1), "ok").to_string())).await
}

fn tls_config(files: &Files, ca: &Ca, upstream: &str) -> Config {
    let leaf = ca.server();
    let mut config = sidecar::config(upstream);
    config.tls.cert_file = Some(files.put("tls.crt", &leaf.cert_pem));
    config.tls.key_file = Some(files.put("tls.key", &leaf.key_pem));
    config.tls.reload_interval_ms = 100;
    config
}

/// An HTTP/1.1 connection over TLS that stays open, and the certificate it was shown.
async fn open_connection(
    ca: &Ca,
    port: u16,
) -> (
    hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    CertificateDer<'static>,
) {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca, None)));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let tls = connector.connect(name, tcp).await.unwrap();
    let shown = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(connection);
    (sender, shown)
}

async fn post_on(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    port: u16,
) -> u16 {
    let mut request = Request::post("/mcp");
    for (name, value) in mcp_headers("tools/call", Some("provision")) {
        request = request.header(name, value);
    }
    let body = serde_json::to_vec(&tools_call(1, None)).unwrap();
    let request = request
        .header("host", format!("127.0.0.1:{port}"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    response.into_body().collect().await.unwrap();
    status
}

#[tokio::test]
async fn the_listener_speaks_h2_and_http1_and_rotates_certificates_under_open_connections() {
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    let files = Files::new();
    let up = answering().await;
    let sidecar = Sidecar::start(tls_config(&files, &old, &up.base_url())).await;
    let port = sidecar.addr.port();
    let url = format!("https://127.0.0.1:{port}/mcp");
    let body = serde_json::to_vec(&tools_call(1, None)).unwrap();
    let headers = mcp_headers("tools/call", Some("provision"));
    for h2 in [false, true] {
        let reply: Answer = send(
            client_config(&old, None),
            h2,
            Method::POST,
            &url,
            &headers,
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "h2={h2}");
        let version = if h2 {
            http::Version::HTTP_2
        } else {
            http::Version::HTTP_11
        };
        assert_eq!(reply.version, version);
    }
    // The upstream learns the client used https.
    assert_eq!(up.last().header("x-forwarded-proto"), Some("https"));

    let (mut open, shown) = open_connection(&old, port).await;
    assert_eq!(post_on(&mut open, port).await, 200);
    // cert-manager renews: new pair on disk (cert first, key second, as two swaps).
    let leaf = new.server();
    files.put("tls.crt", &leaf.cert_pem);
    files.put("tls.key", &leaf.key_pem);
    let metrics = sidecar.metrics();
    wait_until(
        || metrics.tls.tls_reload_count(true) >= 1,
        "the new certificate",
    )
    .await;
    // The open connection keeps working on its session; new ones see the new certificate.
    assert_eq!(post_on(&mut open, port).await, 200);
    let (_, now_shown) = open_connection(&new, port).await;
    assert_ne!(shown, now_shown);
    assert!(
        send(
            client_config(&old, None),
            false,
            Method::POST,
            &url,
            &headers,
            body.clone()
        )
        .await
        .is_err()
    );

    // A broken pair keeps the certificate in use, counted and logged once.
    let errors = metrics.tls.tls_reload_count(false);
    files.put(
        "tls.crt",
        "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n",
    );
    wait_until(
        || metrics.tls.tls_reload_count(false) > errors,
        "the refused reload",
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(
        metrics.tls.tls_reload_count(false),
        errors + 1,
        "logged and counted once"
    );
    let reply = send(
        client_config(&new, None),
        false,
        Method::POST,
        &url,
        &headers,
        body,
    )
    .await;
    assert_eq!(reply.unwrap().status, 200);
    assert_eq!(post_on(&mut open, port).await, 200);
    sidecar.stop().await;
}

#[tokio::test]
async fn unusable_tls_files_are_startup_errors_naming_key_and_file() {
    let ca = Ca::new("ca");
    let files = Files::new();
    let base = tls_config(&files, &ca, "http://127.0.0.1:9");
    let expired = ca.issue(|p| {
        p.subject_alt_names = vec![rcgen::SanType::IpAddress([127, 0, 0, 1].into())];
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let other = ca.server();
    let cases = [
        (
            "tls.cert_file",
            "expired.crt",
            expired.cert_pem.as_str(),
            "expired on",
        ),
        (
            "tls.key_file",
            "other.key",
            other.key_pem.as_str(),
            "does not match the certificate",
        ),
        (
            "tls.client_ca_file",
            "ca.pem",
            "garbage",
            "no PEM certificate",
        ),
        ("tls.cert_file", "missing.crt", "", "cannot read"),
    ];
    for (key, name, content, needle) in cases {
        let mut config = base.clone();
        let path = if content.is_empty() {
            files.path(name)
        } else {
            files.put(name, content)
        };
        match key {
            "tls.cert_file" => config.tls.cert_file = Some(path.clone()),
            "tls.key_file" => config.tls.key_file = Some(path.clone()),
            _ => config.tls.client_ca_file = Some(path.clone()),
        }
        let Err(error) = app::start(&config).await else {
            panic!("{key}: started with an unusable file");
        };
        let message = error.to_string();
        let env = mcp_state_guard::facade::config::env_var_for(key);
        assert!(
            message.starts_with(&format!("{key} ({env}): {}", path.display())),
            "{message}"
        );
        assert!(message.contains(needle), "{message}");
        // check-config says the same.
        let problems = mcp_state_guard::facade::app::files::check_files(&config);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, key);
    }
}

#[tokio::test]
async fn https_upstreams_are_verified_and_shown_a_client_certificate() {
    let (upstream_ca, client_ca) = (Ca::new("upstream"), Ca::new("sidecars"));
    let files = Files::new();
    let up = answering().await;
    let up_addr: std::net::SocketAddr =
        up.base_url().trim_start_matches("http://").parse().unwrap();
    let terminator = Terminator::start(
        server_config(&upstream_ca.server(), Some(&client_ca)),
        up_addr,
    )
    .await;
    let identity = client_ca.client("spiffe://cluster.local/ns/mcp/sa/sidecar", "sidecar");
    // SNI and verification by name: `localhost` is in the upstream's certificate.
    let mut config = sidecar::config(&format!("https://localhost:{}", terminator.addr.port()));
    config.upstream_tls.ca_file = Some(files.put("upstream-ca.pem", &upstream_ca.pem));
    config.upstream_tls.cert_file = Some(files.put("client.crt", &identity.cert_pem));
    config.upstream_tls.key_file = Some(files.put("client.key", &identity.key_pem));
    assert!(mcp_state_guard::facade::app::files::check_files(&config).is_empty());
    let sidecar = Sidecar::start(config.clone()).await;
    let reply = crate::support::http::post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(up.count(), 1);
    assert_eq!(
        up.last().header("host"),
        Some(&*format!("localhost:{}", terminator.addr.port()))
    );
    let clients = terminator.clients.lock().unwrap().clone();
    assert_eq!(clients, [Some("O=Example, CN=sidecar".to_owned())]);
    sidecar.stop().await;

    // Trusting only the compiled-in roots, the test CA's upstream is refused: 502, nothing sent.
    config.upstream_tls.ca_file = None;
    let sidecar = Sidecar::start(config).await;
    let reply = crate::support::http::post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(up.count(), 1);
    sidecar.stop().await;
}
