//! `principal.source = "jwt"`: bearer access tokens signed by the tests with RSA, EC and
//! Ed25519 keys. Every way a token can be wrong gets the same 401 and reaches nothing;
//! states are bound to `[client_id, iss, sub]`; keys come from a file or an HTTPS JWKS
//! endpoint that rotates and goes down.

use crate::support::fake::{
    FakeUpstream, Recorded, Reply, complete, input_required, pairs, plaintext, sealed, tools_call,
};
use crate::support::http::{self, post_mcp_with};
use crate::support::pki::{self, AUDIENCE, Ca, Files, ISSUER, Signer, claims, jwks};
use crate::support::sidecar::{self, Sidecar};
use crate::support::tls::JwksServer;
use jsonwebtoken::Algorithm as Alg;
use mcp_state_guard::facade::auth::AuthFailure;
use mcp_state_guard::facade::config::{Config, PrincipalSource};
use serde_json::{Value, json};
use std::time::Duration;

pub const KEY: &str = "3b9f0c2a7d5e4f6a8b1c9d0e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a";
const METADATA: &str = "https://mcp.example/.well-known/oauth-protected-resource";
const CHALLENGE: &str = "Bearer error=\"invalid_token\", error_description=\"Authentication \
                         required\", resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource\"";

/// An upstream that asks once, then completes when the retry carries its state back.
pub async fn asking_upstream() -> FakeUpstream {
    FakeUpstream::start(|request: &Recorded| {
        let message = request.json();
        let id = message["id"].clone();
        match message["params"]["requestState"].as_str() {
            Some(state) => Reply::json(complete(id, &format!("done with {state}")).to_string()),
            None => Reply::json(input_required(id, json!(plaintext())).to_string()),
        }
    })
    .await
}

/// A jwt configuration for `upstream` with keys from `jwks_file`.
pub(super) fn jwt_config(upstream: &str, jwks_file: std::path::PathBuf) -> Config {
    let mut config = sidecar::config(upstream);
    config.principal.source = PrincipalSource::Jwt;
    config.principal.jwt.issuer = Some(ISSUER.into());
    config.principal.jwt.audience = Some(AUDIENCE.into());
    config.principal.jwt.jwks_file = Some(jwks_file);
    config.principal.jwt.resource_metadata = Some(METADATA.into());
    config
}

pub(super) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `token` is refused with the 401 of the reference, counted under `reason`, and the
/// upstream sees nothing.
async fn assert_unauthorized(
    sidecar: &Sidecar,
    up: &FakeUpstream,
    token: Option<&str>,
    reason: AuthFailure,
) {
    let before = (
        up.count(),
        sidecar.metrics().auth.auth_failure_count(reason),
    );
    let auth = token.map(bearer);
    let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let reply = post_mcp_with(&sidecar.mcp_url(), &tools_call(1, None), &extra).await;
    assert_eq!(reply.status, 401, "{reason:?}: {}", reply.text());
    assert_eq!(reply.headers["www-authenticate"], CHALLENGE, "{reason:?}");
    assert_eq!(
        reply.json(),
        json!({"error": "invalid_token", "error_description": "Authentication required"})
    );
    assert_eq!(up.count(), before.0, "{reason:?} reached the upstream");
    assert_eq!(
        sidecar.metrics().auth.auth_failure_count(reason),
        before.1 + 1,
        "{reason:?} not counted"
    );
}

#[tokio::test]
async fn every_invalid_token_gets_401_and_reaches_nothing() {
    let files = Files::new();
    let (rsa, ec, ed) = (
        Signer::rsa("rsa-1"),
        Signer::p256("ec-1"),
        Signer::ed25519("ed-1"),
    );
    let stranger = Signer::rsa("rsa-1");
    let path = files.put("jwks.json", &jwks(&[&rsa, &ec, &ed]));
    let up = asking_upstream().await;
    let sidecar = Sidecar::with_keys(jwt_config(&up.base_url(), path), &[KEY], "svc").await;
    let good = claims("client-1", "alice");
    let with = |change: &dyn Fn(&mut Value)| {
        let mut c = good.clone();
        change(&mut c);
        c
    };
    let now = pki::now();
    use AuthFailure::*;
    let cases: Vec<(Option<String>, AuthFailure)> = vec![
        (None, Missing),
        (Some("not-a-jwt".into()), Malformed),
        // Three segments, a byte outside the alphabet.
        (Some("a.b.c!".into()), Malformed),
        (
            Some(rsa.sign(&with(&|c| c["exp"] = json!(now - 3600)))),
            Expired,
        ),
        (
            Some(rsa.sign(&with(&|c| c["nbf"] = json!(now + 3600)))),
            NotYetValid,
        ),
        (
            Some(ec.sign(&with(&|c| c["iat"] = json!(now + 3600)))),
            NotYetValid,
        ),
        (
            Some(ed.sign(&with(&|c| c["iss"] = json!("https://evil.example")))),
            Issuer,
        ),
        (
            Some(rsa.sign(&with(&|c| c["iss"] = json!([ISSUER])))),
            Issuer,
        ),
        (
            Some(rsa.sign(&with(&|c| c["aud"] = json!("https://other.example")))),
            Audience,
        ),
        (
            Some(rsa.sign(&with(&|c| {
                c.as_object_mut().unwrap().remove("exp").map(drop).unwrap()
            }))),
            Claims,
        ),
        (Some(rsa.sign(&with(&|c| c["sub"] = json!(42)))), Claims),
        // A key of the same name that the issuer never published.
        (Some(stranger.sign(&good)), Signature),
        (Some(pki::unsigned_token("rsa-1", &good)), Algorithm),
        // The classic confusion: the RSA public key used as an HMAC secret.
        (
            Some(pki::hmac_token(rsa.public_pem.as_bytes(), "rsa-1", &good)),
            Algorithm,
        ),
        // kid confusion: the EC key's id on an RSA signature, the RSA id on an EdDSA one.
        (
            Some(rsa.sign_as(Alg::RS256, Some("ec-1"), &good)),
            Algorithm,
        ),
        (
            Some(ed.sign_as(Alg::EdDSA, Some("rsa-1"), &good)),
            Algorithm,
        ),
        (
            Some(rsa.sign_as(Alg::RS256, Some("nobody"), &good)),
            UnknownKey,
        ),
        // No kid among three keys: the token may not pick its verifier.
        (Some(rsa.sign_as(Alg::RS256, None, &good)), UnknownKey),
    ];
    for (token, reason) in &cases {
        assert_unauthorized(&sidecar, &up, token.as_deref(), *reason).await;
    }
    // Basic credentials are no bearer token.
    let reply = post_mcp_with(
        &sidecar.mcp_url(),
        &tools_call(1, None),
        &[("authorization", "Basic dTpw")],
    )
    .await;
    assert_eq!(reply.status, 401);
    assert_eq!(up.count(), 0);
    // Every algorithm we accept, from each kind of key.
    for (signer, alg) in [
        (&rsa, Alg::RS256),
        (&rsa, Alg::RS384),
        (&rsa, Alg::RS512),
        (&rsa, Alg::PS256),
        (&ec, Alg::ES256),
        (&ed, Alg::EdDSA),
    ] {
        let token = bearer(&signer.sign_as(alg, Some(&signer.kid), &good));
        let reply = post_mcp_with(
            &sidecar.mcp_url(),
            &tools_call(1, None),
            &[("authorization", &token)],
        )
        .await;
        assert_eq!(reply.status, 200, "{alg:?}: {}", reply.text());
        // Authorization reaches the upstream unchanged by default.
        assert_eq!(up.last().header("authorization"), Some(token.as_str()));
    }
    // A token kept verified, with a byte outside the alphabet after it (`~`, which RFC
    // 6750 allows and a compact JWS does not): no longer the kept token, and malformed.
    // (RS256 signatures are deterministic: this is the token verified above.)
    let kept = rsa.sign_as(Alg::RS256, Some(&rsa.kid), &good);
    assert_unauthorized(&sidecar, &up, Some(&format!("{kept}~")), Malformed).await;
    // The metrics expose every reason from the first scrape.
    let text = sidecar.metrics().render();
    for reason in AuthFailure::ALL {
        assert!(text.contains(&format!(
            "mcp_state_guard_auth_failures_total{{reason=\"{}\"}}",
            reason.as_str()
        )));
    }
    sidecar.stop().await;
}

/// Round 1 as `first`, the retry as `second`: whether the retry opened.
async fn flow(first: (&Sidecar, &str), second: (&Sidecar, &str)) -> (u16, Value) {
    let auth = bearer(first.1);
    let reply = post_mcp_with(
        &first.0.mcp_url(),
        &tools_call(1, None),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let token = sealed(&reply.json()["result"]);
    let auth = bearer(second.1);
    let retry = tools_call(2, Some(json!(token)));
    let reply = post_mcp_with(&second.0.mcp_url(), &retry, &[("authorization", &auth)]).await;
    (reply.status.as_u16(), reply.json())
}

#[tokio::test]
async fn states_are_bound_to_client_issuer_and_subject() {
    let files = Files::new();
    let (one, two) = (Signer::p384("issuer-1"), Signer::ed25519("issuer-2"));
    let up = asking_upstream().await;
    let a = Sidecar::with_keys(
        jwt_config(&up.base_url(), files.put("one.json", &jwks(&[&one]))),
        &[KEY],
        "svc",
    )
    .await;
    // A replica sharing keys and audience, trusting another issuer.
    let mut other = jwt_config(&up.base_url(), files.put("two.json", &jwks(&[&two])));
    other.principal.jwt.issuer = Some("https://issuer-2.example".into());
    let b = Sidecar::with_keys(other, &[KEY], "svc").await;

    let alice = one.sign(&claims("client-1", "alice"));
    let (status, answer) = flow((&a, &alice), (&a, &alice)).await;
    assert_eq!(
        (status, answer["result"]["content"][0]["text"].as_str()),
        (200, Some(&*format!("done with {}", plaintext())))
    );
    // Two users of one OAuth client: same client (here as `azp`), another `sub`.
    let mut bob = claims("client-1", "bob");
    bob.as_object_mut().unwrap().remove("client_id");
    bob["azp"] = json!("client-1");
    let (status, answer) = flow((&a, &alice), (&a, &one.sign(&bob))).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "Invalid or expired requestState"
    );
    // The same subject and client from another issuer.
    let mut alice_elsewhere = claims("client-1", "alice");
    alice_elsewhere["iss"] = json!("https://issuer-2.example");
    let (status, _) = flow((&a, &alice), (&b, &two.sign(&alice_elsewhere))).await;
    assert_eq!(status, 400);
    assert_eq!(a.metrics().path.verified_count("principal"), 1);
    assert_eq!(b.metrics().path.verified_count("principal"), 1);
    // The same caller with a fresh token (another `jti`, later `iat`) is the same principal.
    let mut later = claims("client-1", "alice");
    later["jti"] = json!("another");
    let (status, _) = flow((&a, &alice), (&a, &one.sign(&later))).await;
    assert_eq!(status, 200);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn authorization_can_be_stripped_and_passthrough_paths_need_no_token() {
    let files = Files::new();
    let key = Signer::rsa("k");
    let up = asking_upstream().await;
    let mut config = jwt_config(&up.base_url(), files.put("jwks.json", &jwks(&[&key])));
    config.principal.jwt.forward_authorization = false;
    config.passthrough_paths = vec!["/oauth/token".into()];
    let sidecar = Sidecar::start(config).await;
    let auth = bearer(&key.sign(&claims("c", "u")));
    let reply = post_mcp_with(
        &sidecar.mcp_url(),
        &tools_call(1, None),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(up.last().header("authorization"), None);
    // An OAuth token endpoint is where a client without a token goes.
    let form = pairs(&[("content-type", "application/x-www-form-urlencoded")]);
    let reply = http::send(
        ::http::Method::POST,
        &format!("{}/oauth/token", sidecar.base_url()),
        &form,
        "grant_type=client_credentials",
        Duration::from_secs(10),
    )
    .await;
    assert_ne!(reply.status, 401);
    assert_eq!(up.last().target, "/oauth/token");
    sidecar.stop().await;
}

/// The sidecar fetching its keys from an HTTPS endpoint of the tests' issuer.
async fn url_sidecar(
    server: &JwksServer,
    ca: &Files,
    upstream: &str,
    refresh_seconds: u64,
) -> Sidecar {
    let mut config = jwt_config(upstream, ca.path("unused"));
    config.principal.jwt.jwks_file = None;
    config.principal.jwt.jwks_url = Some(server.url.clone());
    config.principal.jwt.jwks_ca_file = Some(ca.path("ca.pem"));
    config.principal.jwt.jwks_cooldown_seconds = 1;
    config.principal.jwt.jwks_refresh_seconds = refresh_seconds;
    Sidecar::start(config).await
}

async fn status_with(sidecar: &Sidecar, signer: &Signer) -> u16 {
    let auth = bearer(&signer.sign(&claims("c", "u")));
    let reply = post_mcp_with(
        &sidecar.mcp_url(),
        &tools_call(1, None),
        &[("authorization", &auth)],
    )
    .await;
    reply.status.as_u16()
}

#[tokio::test]
async fn jwks_url_rotates_on_an_unknown_kid_and_survives_an_outage() {
    let ca = Ca::new("issuer CA");
    let files = Files::new();
    files.put("ca.pem", &ca.pem);
    let (k1, k2, k3) = (Signer::rsa("k1"), Signer::p256("k2"), Signer::ed25519("k3"));
    let server = JwksServer::start(pki::server_config(&ca.server(), None), &jwks(&[&k1])).await;
    let up = asking_upstream().await;
    let sidecar = url_sidecar(&server, &files, &up.base_url(), 3600).await;
    assert_eq!(server.hits(), 1, "fetched once at startup");
    assert_eq!(status_with(&sidecar, &k1).await, 200);
    // The issuer rotates in k2; a token naming it triggers one fetch (after the cooldown).
    server.set(Some(&jwks(&[&k1, &k2])));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(status_with(&sidecar, &k2).await, 200);
    assert_eq!(server.hits(), 2);
    // Invented key ids within the cooldown cost no fetch.
    for _ in 0..3 {
        assert_eq!(status_with(&sidecar, &k3).await, 401);
    }
    assert_eq!(server.hits(), 2);
    // The issuer goes down: the next refresh fails, the last good keys stay.
    server.set(None);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(status_with(&sidecar, &k3).await, 401);
    assert_eq!(server.hits(), 3);
    assert_eq!(sidecar.metrics().auth.jwks_refresh_count(false), 1);
    assert_eq!(status_with(&sidecar, &k1).await, 200);
    assert_eq!(status_with(&sidecar, &k2).await, 200);
    sidecar.stop().await;

    // Down at startup: 503 (the token may be fine) until the issuer answers.
    let started = server.hits();
    let late = url_sidecar(&server, &files, &up.base_url(), 1).await;
    let auth = bearer(&k1.sign(&claims("c", "u")));
    let reply = post_mcp_with(
        &late.mcp_url(),
        &tools_call(1, None),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.headers["retry-after"], "5");
    assert_eq!(
        late.metrics()
            .auth
            .auth_failure_count(AuthFailure::KeysUnavailable),
        1
    );
    // Background refreshes (every second here) pick the keys up before any request needs them.
    server.set(Some(&jwks(&[&k1])));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while late.metrics().auth.jwks_refresh_count(true) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no background refresh"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(server.hits() > started + 1);
    assert_eq!(status_with(&late, &k1).await, 200);
    late.stop().await;
}

/// `token` on one call: its status, and how many tokens were accepted by a signature
/// check and by an earlier one.
async fn call_with(sidecar: &Sidecar, token: &str) -> (u16, u64, u64) {
    use mcp_state_guard::facade::auth::Verification;
    let auth = bearer(token);
    let reply = post_mcp_with(
        &sidecar.mcp_url(),
        &tools_call(1, None),
        &[("authorization", &auth)],
    )
    .await;
    let auth = &sidecar.metrics().auth;
    (
        reply.status.as_u16(),
        auth.jwt_accepted_count(Verification::Signature),
        auth.jwt_accepted_count(Verification::Cache),
    )
}

/// Waits until the sidecar has read its key file `reads` times.
async fn wait_for_reads(sidecar: &Sidecar, reads: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sidecar.metrics().auth.jwks_refresh_count(true) < reads {
        assert!(
            std::time::Instant::now() < deadline,
            "the key file was not re-read"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_verified_token_is_kept_until_it_expires_or_its_key_goes() {
    let files = Files::new();
    let (k1, k2) = (Signer::rsa("k1"), Signer::p256("k2"));
    let path = files.put("jwks.json", &jwks(&[&k1, &k2]));
    let up = asking_upstream().await;
    let mut config = jwt_config(&up.base_url(), path);
    config.principal.jwt.jwks_refresh_seconds = 1;
    config.principal.jwt.leeway_seconds = 0;
    let sidecar = Sidecar::start(config).await;
    let one = k1.sign(&claims("c", "u"));
    assert_eq!(call_with(&sidecar, &one).await, (200, 1, 0));
    assert_eq!(call_with(&sidecar, &one).await, (200, 1, 1));
    // The same signature on other claims is another token: checked whole, refused.
    let (head, rest) = one.split_once('.').unwrap();
    let signature = rest.rsplit_once('.').unwrap().1;
    let forged = format!(
        "{head}.{}.{signature}",
        base64_simd::URL_SAFE_NO_PAD.encode_to_string(claims("c", "mallory").to_string())
    );
    assert_unauthorized(&sidecar, &up, Some(&forged), AuthFailure::Signature).await;
    // A refresh that reads the same keys keeps what they verified.
    let reads = sidecar.metrics().auth.jwks_refresh_count(true);
    wait_for_reads(&sidecar, reads + 2).await;
    assert_eq!(call_with(&sidecar, &one).await, (200, 1, 2));
    // k1 replaced under the same kid: the kept token is checked again and refused.
    let replacement = Signer::rsa("k1");
    files.put("jwks.json", &jwks(&[&replacement, &k2]));
    let reads = sidecar.metrics().auth.jwks_refresh_count(true);
    wait_for_reads(&sidecar, reads + 2).await;
    assert_unauthorized(&sidecar, &up, Some(&one), AuthFailure::Signature).await;
    // k2 withdrawn: its kept token is refused as unknown.
    let two = k2.sign(&claims("c", "v"));
    assert_eq!(call_with(&sidecar, &two).await, (200, 2, 2));
    assert_eq!(call_with(&sidecar, &two).await, (200, 2, 3));
    files.put("jwks.json", &jwks(&[&replacement]));
    let reads = sidecar.metrics().auth.jwks_refresh_count(true);
    wait_for_reads(&sidecar, reads + 2).await;
    assert_unauthorized(&sidecar, &up, Some(&two), AuthFailure::UnknownKey).await;
    // Kept until `exp` (leeway 0 here), refused after.
    let mut short = claims("c", "w");
    short["exp"] = json!(pki::now() + 2);
    let three = replacement.sign(&short);
    assert_eq!(call_with(&sidecar, &three).await, (200, 3, 3));
    assert_eq!(call_with(&sidecar, &three).await, (200, 3, 4));
    while pki::now() <= short["exp"].as_u64().unwrap() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_unauthorized(&sidecar, &up, Some(&three), AuthFailure::Expired).await;
    sidecar.stop().await;

    // With no room kept, every signature is checked.
    let mut config = jwt_config(&up.base_url(), files.path("jwks.json"));
    config.principal.jwt.verified_tokens = 0;
    let sidecar = Sidecar::start(config).await;
    let four = replacement.sign(&claims("c", "x"));
    assert_eq!(call_with(&sidecar, &four).await, (200, 1, 0));
    assert_eq!(call_with(&sidecar, &four).await, (200, 2, 0));
    sidecar.stop().await;
}
