//! Caller binding: a token opens only for the caller it was minted for. Another caller's
//! retry, and principal drift both ways (a bound token presented without an identity, an
//! unbound one with), get the frozen error with nothing forwarded, and the identity header
//! itself never reaches the upstream. The same binding for verified callers: `jwt`
//! (`[client_id, iss, sub]`) and `mtls` (the certificate identity).

use crate::support::flow::{NOBODY, assert_opens, assert_refused_with, mint, retry};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::{self, Sidecar};
use mcp_state_guard::facade::config::PrincipalSource;

#[tokio::test(flavor = "multi_thread")]
async fn replay_by_another_principal_is_refused() {
    let upstream = LegacyServer::start(Mode::Json);
    let mut config = sidecar::config(&upstream.base_url());
    config.principal.source = PrincipalSource::Header;
    config.principal.header = "x-forwarded-user".into();
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let alice: &[(&str, &str)] = &[("x-forwarded-user", "alice")];
    let bob: &[(&str, &str)] = &[("x-forwarded-user", "bob")];
    let token = mint(&url, alice).await;
    let unbound = mint(&url, NOBODY).await;
    // Another caller, and principal drift both ways: a bound token without identity, an
    // unbound one with.
    let attempts = [
        (retry(2, &token), bob),
        (retry(3, &token), NOBODY),
        (retry(4, &unbound), alice),
    ];
    for (message, who) in &attempts {
        assert_refused_with(&sidecar, &upstream, message, who, "principal").await;
    }
    assert_opens(&url, 5, &token, alice).await;
    // The identity header is the sidecar's business; the upstream never saw it.
    let log = serde_json::to_string(&upstream.http_log()).unwrap();
    assert!(!log.contains("x-forwarded-user"), "{log}");
    sidecar.stop().await;
}
