//! `principal.source = "mtls"`: client certificates made by the tests. A handshake
//! without a valid certificate is refused and nothing reaches the upstream; states are
//! bound to the SPIFFE ID (or the RFC 4514 subject); the client CA is re-read when it
//! changes; the real SDK client completes its flows over mTLS.

use super::jwt::asking_upstream;
use crate::support::fake::{FakeUpstream, plaintext, sealed, tools_call, wait_until};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::pki::{Ca, Files, Leaf, client_config, client_params};
use crate::support::python::client_flows;
use crate::support::sidecar::{self, Sidecar};
use crate::support::tls::post_mcp;
use mcp_state_guard::facade::config::{MtlsIdentity, PrincipalSource};
use mcp_state_guard::facade::token::RequestBinding;
use rcgen::{KeyUsagePurpose, SanType};
use serde_json::{Value, json};

/// A sidecar speaking mTLS with `server` (from `ca`) and clients from `clients`.
async fn mtls_sidecar(
    files: &Files,
    server_ca: &Ca,
    clients: &Ca,
    upstream: &str,
    identity: MtlsIdentity,
) -> Sidecar {
    let leaf = server_ca.server();
    let mut config = sidecar::config(upstream);
    config.tls.cert_file = Some(files.put("tls.crt", &leaf.cert_pem));
    config.tls.key_file = Some(files.put("tls.key", &leaf.key_pem));
    config.tls.client_ca_file = Some(files.put("clients.pem", &clients.pem));
    config.tls.reload_interval_ms = 100;
    config.principal.source = PrincipalSource::Mtls;
    config.principal.mtls.identity = identity;
    Sidecar::with_keys(config, &[crate::cases::jwt::KEY], "svc").await
}

fn url(sidecar: &Sidecar) -> String {
    format!("https://127.0.0.1:{}/mcp", sidecar.addr.port())
}

async fn call(
    sidecar: &Sidecar,
    ca: &Ca,
    client: Option<&Leaf>,
    message: &Value,
) -> Result<(u16, Value), String> {
    let reply = post_mcp(client_config(ca, client), &url(sidecar), message, &[]).await?;
    Ok((reply.status.as_u16(), reply.json()))
}

#[tokio::test]
async fn handshakes_without_a_valid_client_certificate_are_refused() {
    let (server_ca, clients, stranger) =
        (Ca::new("server"), Ca::new("clients"), Ca::new("stranger"));
    let files = Files::new();
    let up = FakeUpstream::always(|| crate::support::fake::Reply::json("{}")).await;
    let sidecar = mtls_sidecar(
        &files,
        &server_ca,
        &clients,
        &up.base_url(),
        MtlsIdentity::UriSan,
    )
    .await;
    let spiffe = "spiffe://cluster.local/ns/a/sa/b";
    let refused: Vec<(&str, Option<Leaf>)> = vec![
        ("no certificate", None),
        ("another CA", Some(stranger.client(spiffe, "x"))),
        ("expired", Some(clients.expired_client(spiffe))),
        (
            "no URI SAN",
            Some(clients.issue(|p| {
                client_params(p, spiffe, "x");
                p.subject_alt_names = vec![SanType::DnsName("x.example".try_into().unwrap())];
            })),
        ),
        (
            "key usage without signatures",
            Some(clients.issue(|p| {
                client_params(p, spiffe, "x");
                p.key_usages = vec![KeyUsagePurpose::KeyEncipherment];
            })),
        ),
        (
            "server-only extended key usage",
            Some(clients.issue(|p| {
                client_params(p, spiffe, "x");
                p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
            })),
        ),
    ];
    for (what, client) in &refused {
        let outcome = call(&sidecar, &server_ca, client.as_ref(), &tools_call(1, None)).await;
        assert!(outcome.is_err(), "{what}: {outcome:?}");
    }
    assert_eq!(up.count(), 0, "a refused handshake reached the upstream");
    assert!(sidecar.metrics().tls.tls_handshake_failure_count() >= refused.len() as u64);
    let good = clients.client(spiffe, "x");
    let (status, _) = call(&sidecar, &server_ca, Some(&good), &tools_call(1, None))
        .await
        .unwrap();
    assert_eq!(status, 200);

    // The client CA is re-read when it changes: clients of the new CA only.
    let next = Ca::new("clients-2");
    let before = sidecar.metrics().tls.tls_reload_count(true);
    files.put("clients.pem", &next.pem);
    wait_until(
        || sidecar.metrics().tls.tls_reload_count(true) > before,
        "the CA reload",
    )
    .await;
    assert!(
        call(&sidecar, &server_ca, Some(&good), &tools_call(1, None))
            .await
            .is_err()
    );
    let newcomer = next.client(spiffe, "x");
    assert_eq!(
        call(&sidecar, &server_ca, Some(&newcomer), &tools_call(1, None))
            .await
            .unwrap()
            .0,
        200
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn states_are_bound_to_the_certificate_identity() {
    let (server_ca, clients) = (Ca::new("server"), Ca::new("clients"));
    let files = Files::new();
    let up = asking_upstream().await;
    let a = "spiffe://cluster.local/ns/a/sa/b";
    let sidecar = mtls_sidecar(
        &files,
        &server_ca,
        &clients,
        &up.base_url(),
        MtlsIdentity::UriSan,
    )
    .await;
    let (alice, alice_again, bob) = (
        clients.client(a, "one"),
        clients.client(a, "two"),
        clients.client("spiffe://cluster.local/ns/a/sa/c", "one"),
    );
    let (_, first) = call(&sidecar, &server_ca, Some(&alice), &tools_call(1, None))
        .await
        .unwrap();
    let token = sealed(&first["result"]);
    // The principal is exactly the SPIFFE ID.
    let binding =
        RequestBinding::of("tools/call", tools_call(1, None)["params"].as_object()).unwrap();
    let opened = sidecar
        .running()
        .sealer()
        .open(&token, &binding.clone().at_path("/mcp"), Some(a));
    assert_eq!(opened.unwrap().state(), plaintext());
    let retry = tools_call(2, Some(json!(token)));
    let (status, answer) = call(&sidecar, &server_ca, Some(&bob), &retry)
        .await
        .unwrap();
    assert_eq!(status, 400, "another SPIFFE ID: {answer}");
    // Another certificate for the same SPIFFE ID is the same principal.
    let (status, _) = call(&sidecar, &server_ca, Some(&alice_again), &retry)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(sidecar.metrics().path.verified_count("principal"), 1);
    sidecar.stop().await;

    // With `subject`, the RFC 4514 DN is the principal: same SPIFFE ID, other CN, other caller.
    let files = Files::new();
    let sidecar = mtls_sidecar(
        &files,
        &server_ca,
        &clients,
        &up.base_url(),
        MtlsIdentity::Subject,
    )
    .await;
    let (_, first) = call(&sidecar, &server_ca, Some(&alice), &tools_call(1, None))
        .await
        .unwrap();
    let token = sealed(&first["result"]);
    let opened =
        sidecar
            .running()
            .sealer()
            .open(&token, &binding.at_path("/mcp"), Some("CN=one,O=Example"));
    assert!(opened.is_ok());
    let retry = tools_call(2, Some(json!(token)));
    assert_eq!(
        call(&sidecar, &server_ca, Some(&alice_again), &retry)
            .await
            .unwrap()
            .0,
        400
    );
    assert_eq!(
        call(&sidecar, &server_ca, Some(&bob), &retry)
            .await
            .unwrap()
            .0,
        200
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn the_sdk_client_completes_its_flows_over_tls_and_mtls() {
    let (server_ca, clients) = (Ca::new("server"), Ca::new("clients"));
    let files = Files::new();
    let upstream = LegacyServer::start(Mode::Sse);
    let ca = files.put("server-ca.pem", &server_ca.pem);
    let ca = ca.to_str().unwrap();
    // TLS only.
    let leaf = server_ca.server();
    let mut config = sidecar::config(&upstream.base_url());
    config.tls.cert_file = Some(files.put("tls.crt", &leaf.cert_pem));
    config.tls.key_file = Some(files.put("tls.key", &leaf.key_pem));
    let tls = Sidecar::start(config).await;
    let out = client_flows(&url(&tls), &["--cafile", ca, "auto-all"]).await;
    assert_eq!(
        out["results"]["tool:provision"],
        "Provisioned web-1 (tier=free) in eu-west-1"
    );
    assert_eq!(out["progress"].as_array().unwrap().len(), 6, "{out}");
    tls.stop().await;

    // mTLS with the SPIFFE ID as principal.
    let mtls_files = Files::new();
    let sidecar = mtls_sidecar(
        &mtls_files,
        &server_ca,
        &clients,
        &upstream.base_url(),
        MtlsIdentity::UriSan,
    )
    .await;
    let client = clients.client("spiffe://cluster.local/ns/sdk/sa/client", "sdk");
    let cert = mtls_files.put("client.crt", &client.cert_pem);
    let key = mtls_files.put("client.key", &client.key_pem);
    let args = [
        "--cafile",
        ca,
        "--certfile",
        cert.to_str().unwrap(),
        "--keyfile",
        key.to_str().unwrap(),
    ];
    let out = client_flows(&url(&sidecar), &[&args[..], &["auto-all"]].concat()).await;
    assert_eq!(
        out["results"]["prompt:greet_prompt"],
        "Greet Alice (style=formal)"
    );
    let tampered = client_flows(&url(&sidecar), &[&args[..], &["tamper"]].concat()).await;
    assert_eq!(tampered["retry_error"]["code"], -32602, "{tampered}");
    let metrics = sidecar.metrics();
    assert!(metrics.path.sealed_count() >= 10);
    assert_eq!(metrics.path.verified_count("principal"), 0);
    // Without a client certificate the SDK cannot even connect.
    let refused = tokio::process::Command::new(crate::support::python::interpreter())
        .arg(crate::support::python::repo_path(
            "tests/py/client_flows.py",
        ))
        .args([
            "--url",
            &url(&sidecar),
            "--timeout",
            "20",
            "--cafile",
            ca,
            "auto-provision",
        ])
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    sidecar.stop().await;
}
