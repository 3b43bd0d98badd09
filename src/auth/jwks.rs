//! JWT verification keys: a JWKS turned into keys fit for signatures, read from a file
//! or fetched from an `https://` URL, cached, and refreshed.
//!
//! Invariant: only asymmetric signature keys of the accepted algorithms are ever held,
//! each with the algorithms it may verify (an `oct` key, an encryption key, an unknown
//! curve or algorithm is skipped when the set is read, so no token header can turn a
//! public key into an HMAC secret); a refresh that fails or yields no usable key keeps
//! the last good set; refreshes triggered by an unknown `kid` are serialised and happen
//! at most once per cooldown, so invented key ids cannot make the sidecar hammer the
//! issuer.

use super::AuthMetrics;
use crate::body::BoxError;
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};

/// The algorithms a token may be signed with: asymmetric only. `none` and every HMAC
/// algorithm are refused whatever the token header says.
pub(crate) const ACCEPTED: [Algorithm; 7] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// How long one fetch of the JWKS URL may take, connection included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// One key of the set, and what it may verify.
pub(crate) struct VerifyingKey {
    pub(crate) kid: Option<String>,
    pub(crate) key: DecodingKey,
    pub(crate) algorithms: Vec<Algorithm>,
    /// SHA-256 of the JWK's text as the set gave it: the same key across refreshes of
    /// the set, so that what it verified stays verified ([`super::verified`]).
    pub(crate) fingerprint: [u8; 32],
}

/// A usable key set (never empty).
pub(crate) struct KeySet {
    keys: Vec<Arc<VerifyingKey>>,
}

/// Why a JWKS could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("not a JWKS document (a JSON object with a `keys` array)")]
    NotJwks,
    #[error("no usable signature key (RSA, P-256, P-384 or Ed25519 for {ACCEPTED:?})")]
    NoUsableKey,
    #[error("key id {0:?} is used by two keys")]
    DuplicateKid(String),
    #[error("cannot read: {0}")]
    Unreadable(String),
    #[error("fetch failed: {0}")]
    Fetch(String),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("document larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge,
}

impl KeySet {
    /// Read a JWKS document. Keys that cannot verify an accepted algorithm are skipped
    /// (their count is returned); duplicates of a key id make the set ambiguous.
    pub(crate) fn parse(bytes: &[u8]) -> Result<(KeySet, usize), JwksError> {
        let document: Value = serde_json::from_slice(bytes).map_err(|_| JwksError::NotJwks)?;
        let entries = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(JwksError::NotJwks)?;
        let mut keys: Vec<Arc<VerifyingKey>> = Vec::new();
        let mut skipped = 0;
        for entry in entries {
            let Some(key) = serde_json::from_value::<Jwk>(entry.clone())
                .ok()
                .and_then(|jwk| usable(&jwk, fingerprint(entry)))
            else {
                skipped += 1;
                continue;
            };
            if let Some(kid) = &key.kid
                && keys.iter().any(|k| k.kid.as_ref() == Some(kid))
            {
                return Err(JwksError::DuplicateKid(kid.clone()));
            }
            keys.push(Arc::new(key));
        }
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok((KeySet { keys }, skipped))
    }

    /// The key a token names. A token without `kid` is accepted only when the set holds
    /// exactly one key: guessing among several would let a token pick its verifier.
    pub(crate) fn find(&self, kid: Option<&str>) -> Option<Arc<VerifyingKey>> {
        self.named(kid).cloned()
    }

    fn named(&self, kid: Option<&str>) -> Option<&Arc<VerifyingKey>> {
        match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
    }

    /// Key ids for logs.
    pub(crate) fn kids(&self) -> Vec<&str> {
        self.keys
            .iter()
            .map(|k| k.kid.as_deref().unwrap_or("(none)"))
            .collect()
    }
}

/// What names one JWK across reads of the set: the digest of its text.
fn fingerprint(entry: &Value) -> [u8; 32] {
    Sha256::digest(entry.to_string().as_bytes()).into()
}

/// The key and its algorithms, when it is a signature key we accept.
fn usable(jwk: &Jwk, fingerprint: [u8; 32]) -> Option<VerifyingKey> {
    let common = &jwk.common;
    if matches!(common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    if let Some(ops) = &common.key_operations
        && !ops.contains(&KeyOperations::Verify)
    {
        return None;
    }
    let family: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        // `oct` (HMAC secrets) and everything else: never a verification key here.
        _ => return None,
    };
    // A key that names its algorithm verifies only that one (RFC 7517 §4.4).
    let algorithms = match &common.key_algorithm {
        None => family,
        Some(named) => {
            let named = serde_json::to_value(named).ok()?;
            let named = Algorithm::from_str(named.as_str()?).ok()?;
            if !family.contains(&named) {
                return None;
            }
            vec![named]
        }
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerifyingKey {
        kid: common.key_id.clone(),
        key,
        algorithms,
        fingerprint,
    })
}

/// Where the keys come from.
pub(crate) enum Source {
    File(PathBuf),
    Url {
        uri: http::Uri,
        client: Box<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>>,
    },
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::File(path) => path.display().to_string(),
            Source::Url { uri, .. } => uri.to_string(),
        }
    }

    async fn read(&self) -> Result<Vec<u8>, JwksError> {
        match self {
            Source::File(path) => tokio::fs::read(path)
                .await
                .map_err(|e| JwksError::Unreadable(e.to_string().to_lowercase())),
            Source::Url { uri, client } => {
                let request = http::Request::get(uri.clone())
                    .header(
                        http::header::ACCEPT,
                        "application/jwk-set+json, application/json",
                    )
                    .body(Empty::new())
                    .expect("a GET with a valid URI");
                let exchange = async {
                    let response = client
                        .request(request)
                        .await
                        .map_err(|e| JwksError::Fetch(chain(&e)))?;
                    if response.status() != http::StatusCode::OK {
                        return Err(JwksError::Status(response.status().as_u16()));
                    }
                    let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
                        .collect()
                        .await
                        .map_err(|e: BoxError| {
                            if e.is::<http_body_util::LengthLimitError>() {
                                JwksError::TooLarge
                            } else {
                                JwksError::Fetch(chain(&*e))
                            }
                        })?;
                    Ok(body.to_bytes().to_vec())
                };
                tokio::time::timeout(FETCH_TIMEOUT, exchange)
                    .await
                    .map_err(|_| JwksError::Fetch(format!("no answer within {FETCH_TIMEOUT:?}")))?
            }
        }
    }
}

/// An error and its causes on one line (hyper's top-level message says little).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The cached key set and its refresh policy.
pub(crate) struct Jwks {
    source: Source,
    current: ArcSwapOption<KeySet>,
    /// When the source was last read; held while reading, so refreshes never overlap.
    last_read: Mutex<Option<Instant>>,
    cooldown: Duration,
    metrics: Arc<AuthMetrics>,
}

impl Jwks {
    pub(crate) fn new(source: Source, cooldown: Duration, metrics: Arc<AuthMetrics>) -> Self {
        Self {
            source,
            current: ArcSwapOption::empty(),
            last_read: Mutex::new(None),
            cooldown,
            metrics,
        }
    }

    /// Read the source now; keeps the previous set when that fails.
    pub(crate) async fn refresh(&self) -> Result<(), JwksError> {
        let mut last = self.last_read.lock().await;
        self.read_locked(&mut last).await
    }

    async fn read_locked(&self, last: &mut Option<Instant>) -> Result<(), JwksError> {
        *last = Some(Instant::now());
        let outcome = match self.source.read().await {
            Ok(bytes) => KeySet::parse(&bytes),
            Err(e) => Err(e),
        };
        match outcome {
            Ok((set, skipped)) => {
                let changed = self
                    .current
                    .load()
                    .as_ref()
                    .is_none_or(|old| old.kids() != set.kids());
                if changed {
                    tracing::info!(source = %self.source.describe(), kids = ?set.kids(), skipped, "JWKS loaded");
                }
                self.current.store(Some(Arc::new(set)));
                self.metrics.jwks_refresh(true);
                Ok(())
            }
            Err(e) => {
                tracing::error!(source = %self.source.describe(), error = %e, "JWKS refresh failed; keeping the last good keys");
                self.metrics.jwks_refresh(false);
                Err(e)
            }
        }
    }

    /// The key a token names. An unknown `kid` (or no keys yet) triggers one read of
    /// the source, unless another read happened within the cooldown.
    pub(crate) async fn key(&self, kid: Option<&str>) -> KeyLookup {
        if let Some(key) = self.find(kid) {
            return KeyLookup::Found(key);
        }
        let mut last = self.last_read.lock().await;
        // Another request may have refreshed while this one waited.
        if let Some(key) = self.find(kid) {
            return KeyLookup::Found(key);
        }
        if last.is_none_or(|at| at.elapsed() >= self.cooldown) {
            let _ = self.read_locked(&mut last).await;
            if let Some(key) = self.find(kid) {
                return KeyLookup::Found(key);
            }
        }
        if self.current.load().is_none() {
            KeyLookup::NoKeys
        } else {
            KeyLookup::Unknown
        }
    }

    pub(crate) fn find(&self, kid: Option<&str>) -> Option<Arc<VerifyingKey>> {
        self.current.load().as_ref().and_then(|set| set.find(kid))
    }

    /// A key set read from `document` (tests of what uses one).
    #[cfg(test)]
    pub(crate) fn holding(document: &Value) -> Self {
        let metrics = Arc::new(AuthMetrics::register(&crate::registry::Registry::new()));
        let jwks = Self::new(Source::File(PathBuf::new()), Duration::ZERO, metrics);
        jwks.replace(document);
        jwks
    }

    /// The set is now `document`'s (tests of what uses one).
    #[cfg(test)]
    pub(crate) fn replace(&self, document: &Value) {
        let (set, _) = KeySet::parse(document.to_string().as_bytes()).expect("a usable set");
        self.current.store(Some(Arc::new(set)));
    }

    /// Whether a token naming `kid` would still be verified by `key`: the current set
    /// gives the same key for it (a key withdrawn or replaced, or a kid-less token once
    /// the set holds several keys, no longer is).
    pub(crate) fn still_verifies(&self, kid: Option<&str>, key: &VerifyingKey) -> bool {
        self.current.load().as_ref().is_some_and(|set| {
            set.named(kid)
                .is_some_and(|current| current.fingerprint == key.fingerprint)
        })
    }

    /// Refresh every `interval` until `stop`, so keys are renewed before they go stale
    /// and requests rarely wait for a fetch.
    pub(crate) async fn run(self: Arc<Self>, interval: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = crate::shutdown::stopped(&mut stop) => return,
            }
            let _ = self.refresh().await;
        }
    }
}

/// What a key lookup found.
pub(crate) enum KeyLookup {
    Found(Arc<VerifyingKey>),
    /// The set is loaded but has no such key (or the token names none among several).
    Unknown,
    /// No key set was ever loaded.
    NoKeys,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn rsa_jwk(kid: &str) -> Value {
        // A 2048-bit modulus is not needed to parse: `from_jwk` only decodes base64.
        json!({"kty": "RSA", "kid": kid, "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"})
    }

    #[test]
    fn only_asymmetric_signature_keys_are_kept() {
        let document = json!({"keys": [
            rsa_jwk("rsa"),
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "kid": "p521", "crv": "P-521", "x": "AQ", "y": "AQ"},
            {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "RSA", "kid": "hs-named", "alg": "HS256", "n": "AQAB", "e": "AQAB"},
            {"kty": "weird"}
        ]});
        let (set, skipped) = KeySet::parse(document.to_string().as_bytes()).unwrap();
        assert_eq!(set.kids(), ["rsa", "ed"]);
        assert_eq!(skipped, 5);
        let rsa = set.find(Some("rsa")).unwrap();
        assert_eq!(rsa.algorithms.len(), 4);
        assert!(set.find(Some("hmac")).is_none());
        assert!(set.find(None).is_none(), "two keys: a kid is required");
        assert_eq!(set.find(Some("ed")).unwrap().algorithms, [Algorithm::EdDSA]);
    }

    #[test]
    fn unusable_documents_are_refused() {
        assert!(matches!(KeySet::parse(b"[]"), Err(JwksError::NotJwks)));
        assert!(matches!(
            KeySet::parse(b"{\"keys\":{}}"),
            Err(JwksError::NotJwks)
        ));
        let hmac_only = json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]});
        assert!(matches!(
            KeySet::parse(hmac_only.to_string().as_bytes()),
            Err(JwksError::NoUsableKey)
        ));
        let twice = json!({"keys": [rsa_jwk("a"), rsa_jwk("a")]});
        assert!(matches!(
            KeySet::parse(twice.to_string().as_bytes()),
            Err(JwksError::DuplicateKid(_))
        ));
        let one = json!({"keys": [rsa_jwk("only")]});
        let (set, _) = KeySet::parse(one.to_string().as_bytes()).unwrap();
        assert!(set.find(None).is_some(), "one key: usable without kid");
        let named = json!({"keys": [{"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "AQAB", "e": "AQAB"}]});
        let (set, _) = KeySet::parse(named.to_string().as_bytes()).unwrap();
        assert_eq!(set.find(Some("ps")).unwrap().algorithms, [Algorithm::PS256]);
    }
}
