//! Sealed handles: an upstream's own handle (an import id, a draft id) wrapped in an
//! `h1.` token bound to a handle kind, the audience, the caller and an expiry.
//!
//! Invariant: [`StateSealer::open_handle`] returns the upstream's raw handle only for a
//! token this key ring sealed as a handle, unmodified, unexpired, of the kind asked for,
//! for this audience and this caller. The `h1.` prefix is authenticated (it is in the
//! AAD), so a handle never opens as a `requestState` and a state never opens as a
//! handle. Failures are one [`HandleReject`] reason, carrying no token or handle bytes.

use super::claims::{principal_claim, principal_matches};
use super::keyring::{self, HANDLE_PREFIX, OpenError};
use super::{FUTURE_SKEW_SECONDS, KeyId, KeyRing, StateSealer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a presented handle was refused: for logs and metric labels only; the client sees
/// one answer for every reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandleReject {
    /// Not a sealed handle (a raw upstream handle, a `requestState`), tampered, or
    /// claims that do not parse.
    Malformed,
    /// Sealed under a key this ring no longer holds.
    UnknownKey,
    Expired,
    /// A handle of another kind.
    Kind,
    /// Sealed for another audience.
    Audience,
    /// Sealed for another caller (or bound/unbound differently than this request).
    Principal,
    /// Sealed on another request path (another tenant of the same upstream).
    Path,
    /// Issued before its principal was revoked (`mcp-state-guard revoke`).
    Revoked,
    /// The revocation list could not be read (and `single_use.on_store_error = "reject"`).
    StoreUnavailable,
}

crate::registry::labels!(pub HandleReject {
    Malformed => "malformed",
    UnknownKey => "unknown_key",
    Expired => "expired",
    Kind => "kind",
    Audience => "audience",
    Principal => "principal",
    Path => "path",
    Revoked => "revoked",
    StoreUnavailable => "store_unavailable",
});

/// A sealed handle that opened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpenedHandle {
    /// The upstream's raw handle.
    pub(crate) raw: Value,
    /// When it was sealed (Unix seconds), for the revocation check.
    pub(crate) issued_at: f64,
}

/// What a handle token carries (compact JSON, short names like the state claims).
#[derive(Serialize, Deserialize)]
struct HandleClaims {
    /// Format version of the claims.
    hv: u8,
    /// The handle kind (`[[handles]] kind`).
    k: String,
    /// The upstream's raw handle, any JSON value, restored exactly.
    h: Value,
    iat: f64,
    exp: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    /// The request path and query it was issued on (states bind theirs the same way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    u: Option<String>,
}

impl StateSealer {
    /// Seal the upstream's `raw` handle of `kind` for `principal`, valid `ttl_seconds`,
    /// on `path` (when given, it opens only on that path).
    pub fn seal_handle(
        &self,
        kind: &str,
        raw: &Value,
        principal: Option<&str>,
        ttl_seconds: u64,
    ) -> String {
        self.seal_handle_at(super::now(), kind, raw, principal, ttl_seconds, None)
    }

    /// [`StateSealer::seal_handle`] bound to the request `path` it was issued on, and the
    /// id of the key that minted it (read from the ring it was sealed with).
    pub(crate) fn seal_handle_on(
        &self,
        path: &str,
        kind: &str,
        raw: &Value,
        principal: Option<&str>,
        ttl_seconds: u64,
    ) -> (String, KeyId) {
        let ring = self.ring.load();
        let claims =
            self.handle_claims(super::now(), kind, raw, principal, ttl_seconds, Some(path));
        (seal_claims(&ring, &claims), KeyId::minting(&ring))
    }

    pub fn seal_handle_at(
        &self,
        now: f64,
        kind: &str,
        raw: &Value,
        principal: Option<&str>,
        ttl_seconds: u64,
        path: Option<&str>,
    ) -> String {
        let claims = self.handle_claims(now, kind, raw, principal, ttl_seconds, path);
        seal_claims(&self.ring.load(), &claims)
    }

    fn handle_claims(
        &self,
        now: f64,
        kind: &str,
        raw: &Value,
        principal: Option<&str>,
        ttl_seconds: u64,
        path: Option<&str>,
    ) -> HandleClaims {
        HandleClaims {
            hv: 1,
            k: kind.to_owned(),
            h: raw.clone(),
            iat: now.floor(),
            exp: now.ceil() + ttl_seconds as f64,
            aud: self.audience.clone(),
            p: principal.map(|p| {
                principal_claim(p, keyring::fast_random_bytes::<8>())
                    .as_str()
                    .to_owned()
            }),
            u: path.map(str::to_owned),
        }
    }

    /// Open a sealed handle of `kind` presented by `principal`: the upstream's raw handle.
    pub fn open_handle(
        &self,
        token: &str,
        kind: &str,
        principal: Option<&str>,
    ) -> Result<Value, HandleReject> {
        self.open_handle_at(super::now(), token, kind, principal, None)
    }

    /// [`StateSealer::open_handle`] on the request `path`: a handle issued on another
    /// path is refused (one issued without a path opens on any).
    pub(crate) fn open_handle_on(
        &self,
        path: &str,
        token: &str,
        kind: &str,
        principal: Option<&str>,
    ) -> Result<OpenedHandle, HandleReject> {
        self.open_handle_claims(super::now(), token, kind, principal, Some(path))
    }

    pub(crate) fn open_handle_at(
        &self,
        now: f64,
        token: &str,
        kind: &str,
        principal: Option<&str>,
        path: Option<&str>,
    ) -> Result<Value, HandleReject> {
        self.open_handle_claims(now, token, kind, principal, path)
            .map(|opened| opened.raw)
    }

    fn open_handle_claims(
        &self,
        now: f64,
        token: &str,
        kind: &str,
        principal: Option<&str>,
        path: Option<&str>,
    ) -> Result<OpenedHandle, HandleReject> {
        let unsealed = self
            .ring
            .load()
            .open_enveloped(HANDLE_PREFIX, token)
            .map_err(|e| match e {
                OpenError::UnknownKey => HandleReject::UnknownKey,
                OpenError::Malformed | OpenError::Tampered => HandleReject::Malformed,
            })?;
        let claims: HandleClaims =
            serde_json::from_slice(unsealed.payload()).map_err(|_| HandleReject::Malformed)?;
        if claims.hv != 1 {
            return Err(HandleReject::Malformed);
        }
        // Stated positively so that a NaN fails.
        if !(claims.iat <= now + FUTURE_SKEW_SECONDS && now < claims.exp) {
            return Err(HandleReject::Expired);
        }
        if claims.k != kind {
            return Err(HandleReject::Kind);
        }
        if claims.aud != self.audience {
            return Err(HandleReject::Audience);
        }
        match (claims.p.as_deref(), principal) {
            (None, None) => {}
            (Some(claim), Some(principal)) if principal_matches(claim, principal) => {}
            _ => return Err(HandleReject::Principal),
        }
        if let (Some(issued_on), Some(path)) = (claims.u.as_deref(), path)
            && issued_on != path
        {
            return Err(HandleReject::Path);
        }
        Ok(OpenedHandle {
            raw: claims.h,
            issued_at: claims.iat,
        })
    }
}

/// Seal handle claims under `ring`'s minting key.
fn seal_claims(ring: &KeyRing, claims: &HandleClaims) -> String {
    let text = serde_json::to_string(claims).expect("claims serialise");
    ring.seal_enveloped(
        HANDLE_PREFIX,
        keyring::fast_random_bytes(),
        text.len(),
        |out| out.push_str(&text),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{KeyRing, RequestBinding, SealOptions};
    use serde_json::json;

    fn sealer(secret: &str, audience: &str) -> StateSealer {
        let ring = KeyRing::from_secrets(&[secret], "test").unwrap();
        StateSealer::new(ring, Some(audience.into()), 60)
    }

    const KEY: &str = "0123456789abcdef0123456789abcdef-handles";

    #[test]
    fn a_handle_issued_on_a_path_opens_only_there() {
        let s = sealer(KEY, "aud");
        let raw = json!("imp-1");
        let (token, kid) = s.seal_handle_on("/tenants/a/mcp", "import", &raw, Some("alice"), 60);
        assert_eq!(
            KeyId::of_handle(&token),
            Some(kid),
            "the kid it minted with"
        );
        let open = |path| {
            s.open_handle_on(path, &token, "import", Some("alice"))
                .map(|opened| opened.raw)
        };
        assert_eq!(open("/tenants/a/mcp"), Ok(raw.clone()));
        assert_eq!(open("/tenants/b/mcp"), Err(HandleReject::Path));
        assert_eq!(open("/tenants/a/mcp?x=1"), Err(HandleReject::Path));
        // Issued without a path (an older sidecar): opens on any.
        let unbound = s.seal_handle("import", &raw, Some("alice"), 60);
        assert_eq!(
            s.open_handle_on("/anywhere", &unbound, "import", Some("alice"))
                .map(|opened| opened.raw),
            Ok(raw)
        );
    }

    #[test]
    fn round_trip_restores_the_raw_handle() {
        let s = sealer(KEY, "aud");
        for raw in [json!("imp-1"), json!(42), json!({"a": [1, "x"]})] {
            let token = s.seal_handle("import", &raw, Some("alice"), 60);
            assert!(token.starts_with("h1."));
            assert_eq!(s.open_handle(&token, "import", Some("alice")), Ok(raw));
        }
        let unbound = s.seal_handle("import", &json!("x"), None, 60);
        assert_eq!(s.open_handle(&unbound, "import", None), Ok(json!("x")));
    }

    #[test]
    fn every_mismatch_is_refused() {
        let s = sealer(KEY, "aud");
        let token = s.seal_handle("import", &json!("imp-1"), Some("alice"), 60);
        let r = |t: &str, k: &str, p: Option<&str>| s.open_handle(t, k, p).unwrap_err();
        assert_eq!(r(&token, "import", Some("bob")), HandleReject::Principal);
        assert_eq!(r(&token, "import", None), HandleReject::Principal);
        assert_eq!(r(&token, "draft", Some("alice")), HandleReject::Kind);
        assert_eq!(r("imp-1", "import", Some("alice")), HandleReject::Malformed);
        let other_aud = sealer(KEY, "other");
        assert_eq!(
            other_aud.open_handle(&token, "import", Some("alice")),
            Err(HandleReject::Audience)
        );
        let other_key = sealer("another-secret-of-at-least-32-bytes!!", "aud");
        assert_eq!(
            other_key.open_handle(&token, "import", Some("alice")),
            Err(HandleReject::UnknownKey)
        );
        let expired = s.seal_handle_at(
            crate::token::now() - 120.0,
            "import",
            &json!(1),
            None,
            60,
            None,
        );
        assert_eq!(r(&expired, "import", None), HandleReject::Expired);
        // Any flipped character fails.
        let mut bytes = token.clone().into_bytes();
        let at = bytes.len() - 5;
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(bytes).unwrap();
        assert_eq!(r(&edited, "import", Some("alice")), HandleReject::Malformed);
    }

    #[test]
    fn handles_and_states_never_open_as_each_other() {
        let s = sealer(KEY, "aud");
        let binding = RequestBinding::of("tools/call", None).unwrap();
        let state = s.seal("st", &binding, &SealOptions::default());
        assert_eq!(
            s.open_handle(&state, "import", None),
            Err(HandleReject::Malformed)
        );
        // The prefix swapped: the AAD differs, the tag fails.
        let swapped = state.replacen("v1.", "h1.", 1);
        assert_eq!(
            s.open_handle(&swapped, "import", None),
            Err(HandleReject::Malformed)
        );
        let handle = s.seal_handle("import", &json!("x"), None, 60);
        assert!(s.open(&handle, &binding, None).is_err());
        assert!(
            s.open(&handle.replacen("h1.", "v1.", 1), &binding, None)
                .is_err()
        );
    }
}
