//! The JWT principal row: a sidecar that reads its caller from an OAuth access token
//! (`principal.source = "jwt"`, RS256, the keys in a JWKS file), as most deployments
//! behind an authorization server run it. Every request of the harness carries the one
//! bearer token minted here (`Authorization`), so the header-principal sidecars, nginx
//! and the hyper floor forward the same bytes; only this sidecar verifies it.

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

const ISSUER: &str = "https://issuer.bench.example";
const AUDIENCE: &str = "https://mcp.bench.example";
const KID: &str = "bench-rsa-1";

/// Mint the harness's access token (an RSA-2048 key, RS256, valid for a day) and write
/// the JWKS that verifies it to `dir/jwks.json`, and have every request carry it
/// (`generator::AUTHORIZATION`); the `[principal]` section of a sidecar that reads it.
pub fn setup(dir: &Path) -> Result<String, String> {
    let (principal, bearer) = mint(dir)?;
    carry(bearer)?;
    Ok(principal)
}

/// Have every request from now on carry `bearer` (`Bearer <token>`, from [`mint`]).
pub fn carry(bearer: String) -> Result<(), String> {
    crate::generator::AUTHORIZATION
        .set(bearer)
        .map_err(|_| "the bearer token was minted twice".to_owned())
}

/// [`setup`] but for the requests: the `[principal]` section, and the `Authorization`
/// value for [`carry`].
pub fn mint(dir: &Path) -> Result<(String, String), String> {
    let pair = rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
        .map_err(|e| format!("JWT key: {e}"))?;
    let key = EncodingKey::from_rsa_pem(pair.serialize_pem().as_bytes())
        .map_err(|e| format!("JWT key: {e}"))?;
    let mut jwk =
        Jwk::from_encoding_key(&key, Algorithm::RS256).map_err(|e| format!("JWK: {e}"))?;
    jwk.common.key_id = Some(KID.into());
    let jwks = json!({"keys": [jwk]});
    let jwks_file = dir.join("jwks.json");
    std::fs::write(&jwks_file, jwks.to_string()).map_err(|e| format!("jwks.json: {e}"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| format!("clock: {e}"))?
        .as_secs();
    let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "client_id": "bench",
                        "iat": now, "nbf": now, "exp": now + 86_400});
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(KID.into());
    let token = jsonwebtoken::encode(&header, &claims, &key).map_err(|e| format!("JWT: {e}"))?;
    let principal = format!(
        "[principal]\nsource = \"jwt\"\n\
         [principal.jwt]\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n\
         jwks_file = \"{}\"\n",
        jwks_file.display()
    );
    Ok((principal, format!("Bearer {token}")))
}
