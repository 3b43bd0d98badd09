//! The `jwt` source: OAuth access tokens in `Authorization: Bearer`, verified against
//! the issuer's keys ([`super::jwks`]); the principal is the reference SDK's compact JSON
//! `[client_id, iss, sub]`.
//!
//! Invariant: a principal is returned only for a token whose signature verifies under a
//! key of the configured JWKS, with an accepted asymmetric algorithm that key allows
//! (`none` and HMAC never are, whatever the header says), whose `iss` is exactly
//! `principal.jwt.issuer`, whose `aud` contains `principal.jwt.audience`, and which is
//! inside `exp` / `nbf` / `iat` give or take the leeway. Every failure is one closed
//! [`AuthFailure`]; the token itself never reaches a log line or an error.

use super::jwks::{ACCEPTED, Jwks, KeyLookup};
use super::verified::{Found, LastBearer, Verified, VerifiedTokens};
use super::{AuthFailure, AuthMetrics, Verification};
use crate::config::JwtSettings;
use crate::token::canonical::write_python_json;
use http::header::{AUTHORIZATION, HeaderMap, HeaderValue, InvalidHeaderValue};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use std::str::FromStr;
use std::sync::Arc;

/// The longest bearer token looked at.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Verifies bearer tokens for one issuer and audience.
pub(crate) struct JwtVerifier {
    issuer: String,
    audience: String,
    leeway_seconds: u64,
    jwks: Arc<Jwks>,
    verified: VerifiedTokens,
    metrics: Arc<AuthMetrics>,
    challenge: HeaderValue,
    forward: bool,
}

impl JwtVerifier {
    /// From a `principal.jwt` section that passed its rules. Fails only if the
    /// resource metadata URL cannot go into the challenge header (its rules refuse such
    /// a URL).
    pub(crate) fn new(
        config: &JwtSettings,
        jwks: Arc<Jwks>,
        metrics: Arc<AuthMetrics>,
    ) -> Result<Self, InvalidHeaderValue> {
        Ok(Self {
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            leeway_seconds: config.leeway_seconds,
            jwks,
            verified: VerifiedTokens::new(config.verified_tokens),
            metrics,
            challenge: challenge(config.resource_metadata.as_deref())?,
            forward: config.forward_authorization,
        })
    }

    /// The `WWW-Authenticate` value of every 401.
    pub(crate) fn challenge(&self) -> &HeaderValue {
        &self.challenge
    }

    /// Whether `Authorization` is kept on the forwarded request.
    pub(crate) fn forwards_authorization(&self) -> bool {
        self.forward
    }

    /// The principal of the request's bearer token: kept from an earlier request with
    /// the same token while that check still holds ([`super::verified`]), else checked
    /// whole. `last`: the verified bearer token the connection recalls.
    pub(crate) async fn principal(
        &self,
        headers: &HeaderMap,
        last: &LastBearer,
    ) -> Result<Arc<str>, AuthFailure> {
        let token = bearer(headers)?;
        let now = crate::token::now();
        let digest = match self.verified.find(token, last, &self.jwks, now) {
            Found::Kept(principal) => {
                self.metrics.jwt_accepted(Verification::Cache);
                return Ok(principal);
            }
            Found::Unknown(digest) => digest,
        };
        let verified = self.verify(token, now).await?;
        let principal = verified.principal.clone();
        if let Some(digest) = digest {
            self.verified.keep(token, digest, verified, last);
        }
        self.metrics.jwt_accepted(Verification::Signature);
        Ok(principal)
    }

    /// The whole check of one token.
    async fn verify(&self, token: &str, now: f64) -> Result<Verified, AuthFailure> {
        let (algorithm, kid) = header(token)?;
        let key = match self.jwks.key(kid.as_deref()).await {
            KeyLookup::Found(key) => key,
            KeyLookup::Unknown => return Err(AuthFailure::UnknownKey),
            KeyLookup::NoKeys => return Err(AuthFailure::KeysUnavailable),
        };
        if !key.algorithms.contains(&algorithm) {
            return Err(AuthFailure::Algorithm);
        }
        let mut validation = Validation::new(algorithm);
        validation.leeway = self.leeway_seconds;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| refusal(e.kind()))?;
        let principal = self.principal_of(&data.claims, now)?;
        // The library required a numeric `exp` and checked it.
        let exp = data.claims.get("exp").and_then(Value::as_f64);
        Ok(Verified {
            principal: principal.into(),
            until: exp.map_or(f64::NEG_INFINITY, |exp| exp + self.leeway_seconds as f64),
            kid,
            key,
        })
    }

    /// Checks the library leaves open (an array `iss`, `iat`, claim types) and builds
    /// the principal string.
    fn principal_of(&self, claims: &Map<String, Value>, now: f64) -> Result<String, AuthFailure> {
        if claims.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err(AuthFailure::Issuer);
        }
        let audience_ok = match claims.get("aud") {
            Some(Value::String(aud)) => *aud == self.audience,
            Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(&self.audience)),
            _ => false,
        };
        if !audience_ok {
            return Err(AuthFailure::Audience);
        }
        match claims.get("iat") {
            None => {}
            Some(Value::Number(iat)) => {
                let iat = iat.as_f64().ok_or(AuthFailure::Claims)?;
                if iat > now + self.leeway_seconds as f64 {
                    return Err(AuthFailure::NotYetValid);
                }
            }
            Some(_) => return Err(AuthFailure::Claims),
        }
        let text = |name: &str| match claims.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(AuthFailure::Claims),
        };
        let client_id = match text("client_id")? {
            Some(id) => Some(id),
            None => text("azp")?,
        };
        Ok(principal(client_id, &self.issuer, text("sub")?))
    }
}

/// The reference SDK's principal (`mcp/server/request_state.py`,
/// `authenticated_principal`): `json.dumps([client_id, iss, sub], separators=(",", ":"))`,
/// non-ASCII escaped as Python does, `null` for what is absent.
pub fn principal(client_id: Option<&str>, issuer: &str, subject: Option<&str>) -> String {
    let text = |s: Option<&str>| s.map_or(Value::Null, |s| Value::String(s.to_owned()));
    let triple = Value::Array(vec![
        text(client_id),
        Value::String(issuer.to_owned()),
        text(subject),
    ]);
    let mut out = String::new();
    write_python_json(&triple, false, &mut out).expect("strings and null always encode");
    out
}

/// `Bearer error="invalid_token", ...` as the reference's `RequireAuthMiddleware` sends
/// it, with the protected resource metadata URL when configured (validated to be safe
/// inside a quoted string).
fn challenge(resource_metadata: Option<&str>) -> Result<HeaderValue, InvalidHeaderValue> {
    let mut value = String::from(
        r#"Bearer error="invalid_token", error_description="Authentication required""#,
    );
    if let Some(url) = resource_metadata {
        value.push_str(&format!(r#", resource_metadata="{url}""#));
    }
    HeaderValue::from_str(&value)
}

/// The one bearer token of the request.
fn bearer(headers: &HeaderMap) -> Result<&str, AuthFailure> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(AuthFailure::Missing)?;
    if values.next().is_some() {
        return Err(AuthFailure::Malformed);
    }
    let value = value.to_str().map_err(|_| AuthFailure::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthFailure::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthFailure::Missing);
    }
    let token = token.trim_start_matches(' ');
    // Its alphabet is checked by [`header`], before a whole check: a token the
    // connection recalls, or the cache names, passed it when it was verified.
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(AuthFailure::Malformed);
    }
    Ok(token)
}

/// Whether every byte is one a compact JWS is written with: the base64url alphabet of
/// its three segments (RFC 6750's token68, less `~ + /`) and the dots between them.
/// A token is most of a kilobyte, and this is the first step of its whole check (a
/// token kept verified passed it then): it is read in blocks whose bytes are all
/// checked, branch-free (which the compiler turns into vector compares), and the answer
/// looked at once a block.
fn is_jws_text(bytes: &[u8]) -> bool {
    fn allowed(c: u8) -> bool {
        // `c | 0x20` folds `A-Z` onto `a-z` and nothing else onto them; below the range,
        // the subtraction wraps past 26.
        ((c | 0x20).wrapping_sub(b'a') < 26)
            | (c.wrapping_sub(b'0') < 10)
            | (c == b'-')
            | (c == b'_')
            | (c == b'.')
    }
    bytes
        .chunks(32)
        .all(|block| block.iter().fold(true, |all, &c| all & allowed(c)))
}

/// The algorithm and key id of a compact JWS, refusing what we never verify before any
/// key is looked up.
fn header(token: &str) -> Result<(Algorithm, Option<String>), AuthFailure> {
    if !is_jws_text(token.as_bytes()) {
        return Err(AuthFailure::Malformed);
    }
    let mut segments = token.split('.');
    let (Some(head), Some(_), Some(_), None) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return Err(AuthFailure::Malformed);
    };
    let bytes = base64_simd::URL_SAFE_NO_PAD
        .decode_to_vec(head)
        .map_err(|_| AuthFailure::Malformed)?;
    let header: Map<String, Value> =
        serde_json::from_slice(&bytes).map_err(|_| AuthFailure::Malformed)?;
    // No extension we would have to understand (RFC 7515 §4.1.11).
    if header.contains_key("crit") {
        return Err(AuthFailure::Malformed);
    }
    let algorithm = header
        .get("alg")
        .and_then(Value::as_str)
        .and_then(|alg| Algorithm::from_str(alg).ok())
        .filter(|alg| ACCEPTED.contains(alg))
        .ok_or(AuthFailure::Algorithm)?;
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(AuthFailure::Malformed),
    };
    Ok((algorithm, kid))
}

/// The closed reason for a library refusal.
fn refusal(kind: &ErrorKind) -> AuthFailure {
    match kind {
        ErrorKind::InvalidSignature => AuthFailure::Signature,
        ErrorKind::ExpiredSignature => AuthFailure::Expired,
        ErrorKind::ImmatureSignature => AuthFailure::NotYetValid,
        ErrorKind::InvalidIssuer => AuthFailure::Issuer,
        ErrorKind::InvalidAudience => AuthFailure::Audience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => AuthFailure::Issuer,
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => AuthFailure::Audience,
        ErrorKind::MissingRequiredClaim(_) | ErrorKind::InvalidClaimFormat(_) => {
            AuthFailure::Claims
        }
        ErrorKind::InvalidAlgorithm
        | ErrorKind::InvalidAlgorithmName
        | ErrorKind::MissingAlgorithm => AuthFailure::Algorithm,
        _ => AuthFailure::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_is_the_references_compact_json() {
        assert_eq!(
            principal(Some("client-1"), "https://issuer.example", Some("user-42")),
            r#"["client-1","https://issuer.example","user-42"]"#
        );
        assert_eq!(
            principal(None, "https://i", None),
            r#"[null,"https://i",null]"#
        );
        // ensure_ascii: non-ASCII escaped with lowercase hex, astral as surrogate pairs.
        assert_eq!(
            principal(Some("c\"1"), "https://i", Some("zoë😀")),
            r#"["c\"1","https://i","zo\u00eb\ud83d\ude00"]"#
        );
    }

    #[test]
    fn a_jws_text_is_its_alphabet_and_dots_byte_for_byte() {
        let reference = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.';
        for c in 0..=u8::MAX {
            assert_eq!(is_jws_text(&[c]), reference(c), "byte {c:#04x}");
            // Wherever it stands in a block, and in a block after a clean one.
            for at in [0, 15, 31, 32, 40, 63] {
                let mut text = [b'a'; 64];
                text[at] = c;
                assert_eq!(is_jws_text(&text), reference(c), "byte {c:#04x} at {at}");
            }
        }
        assert!(is_jws_text(b""));
    }

    #[test]
    fn bearer_tokens_are_read_strictly() {
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        assert_eq!(bearer(&with(&["Bearer a.b.c"])), Ok("a.b.c"));
        assert_eq!(bearer(&with(&["bearer  a.b.c"])), Ok("a.b.c"));
        assert_eq!(bearer(&with(&[])), Err(AuthFailure::Missing));
        assert_eq!(bearer(&with(&["Basic dTpw"])), Err(AuthFailure::Missing));
        assert_eq!(bearer(&with(&["Bearer"])), Err(AuthFailure::Missing));
        assert_eq!(bearer(&with(&["Bearer "])), Err(AuthFailure::Malformed));
        // Read as it is; its alphabet is the whole check's first step (`header`).
        assert_eq!(bearer(&with(&["Bearer a b"])), Ok("a b"));
        assert_eq!(
            bearer(&with(&["Bearer a.b.c", "Bearer d.e.f"])),
            Err(AuthFailure::Malformed)
        );
    }

    #[test]
    fn headers_naming_what_we_never_verify_are_refused_first() {
        let token = |header: &str| {
            format!(
                "{}.e30.c2ln",
                base64_simd::URL_SAFE_NO_PAD.encode_to_string(header)
            )
        };
        for alg in ["none", "HS256", "HS512", "PS384", "ES512", "RSA-OAEP", ""] {
            let t = token(&format!(r#"{{"alg":"{alg}"}}"#));
            assert_eq!(header(&t).unwrap_err(), AuthFailure::Algorithm, "{alg}");
        }
        assert_eq!(
            header(&token(r#"{"typ":"JWT"}"#)).unwrap_err(),
            AuthFailure::Algorithm
        );
        let crit = token(r#"{"alg":"RS256","crit":["exp"]}"#);
        assert_eq!(header(&crit).unwrap_err(), AuthFailure::Malformed);
        let kid = token(r#"{"alg":"ES256","kid":7}"#);
        assert_eq!(header(&kid).unwrap_err(), AuthFailure::Malformed);
        assert_eq!(header("a.b").unwrap_err(), AuthFailure::Malformed);
        let ok = token(r#"{"alg":"EdDSA","kid":"k1"}"#);
        assert_eq!(header(&ok).unwrap(), (Algorithm::EdDSA, Some("k1".into())));
        // The same with a byte outside the alphabet, anywhere: refused before its head
        // is read.
        for stray in [" ", "~", "+", "/", "="] {
            let bad = format!("{ok}{stray}");
            assert_eq!(header(&bad).unwrap_err(), AuthFailure::Malformed, "{stray}");
        }
    }
}
