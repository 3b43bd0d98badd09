//! Bearer tokens already verified. A client sends the same access token on every request
//! of its session, and checking its signature (an RSA public-key operation) is most of
//! what identifying the caller costs; the answer for one token does not change until it
//! expires or its key goes, so it is kept (`principal.jwt.verified_tokens`).
//!
//! Invariant: an entry is used only for the exact token it was made for (keyed by the
//! token's SHA-256, the full digest compared), only before the token's `exp` plus the
//! leeway, and only while the current key set gives the token's `kid` the very key that
//! verified it ([`Jwks::still_verifies`]: a key withdrawn, replaced or made ambiguous
//! sends the token back through the whole check). Nothing else a verification looked at
//! can change for the same token under the same configuration (`nbf` and `iat` only
//! become more valid with time; issuer, audience and leeway are restart-only, and a
//! restart starts empty). An entry that no longer holds is dropped, and the whole
//! check gives the exact refusal.

use super::jwks::{Jwks, VerifyingKey};
use moka::Expiry;
use moka::sync::Cache;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a verified token gave, and what it was verified with.
pub(crate) struct Verified {
    pub(crate) principal: Arc<str>,
    /// `exp` plus the leeway, in seconds since the epoch: the last instant the token is
    /// accepted.
    pub(crate) until: f64,
    /// The `kid` the token names.
    pub(crate) kid: Option<String>,
    /// The key that verified its signature.
    pub(crate) key: Arc<VerifyingKey>,
}

/// The name of a token in the cache.
pub(crate) type TokenDigest = [u8; 32];

/// A bounded cache of verified tokens; with no room (`0`), every token is verified.
pub(crate) struct VerifiedTokens {
    entries: Option<Cache<TokenDigest, Arc<Verified>>>,
}

/// Each entry goes when its token expires.
struct AtExpiry;

impl Expiry<TokenDigest, Arc<Verified>> for AtExpiry {
    fn expire_after_create(
        &self,
        _key: &TokenDigest,
        value: &Arc<Verified>,
        _created_at: Instant,
    ) -> Option<Duration> {
        let left = value.until - crate::token::now();
        Some(Duration::try_from_secs_f64(left).unwrap_or(Duration::ZERO))
    }
}

impl VerifiedTokens {
    /// Room for `entries` tokens (`0`: none kept).
    pub(crate) fn new(entries: u64) -> Self {
        Self {
            entries: (entries > 0).then(|| {
                Cache::builder()
                    .max_capacity(entries)
                    .expire_after(AtExpiry)
                    .build()
            }),
        }
    }

    /// The token's name, when tokens are kept.
    pub(crate) fn digest(&self, token: &str) -> Option<TokenDigest> {
        self.entries
            .as_ref()
            .map(|_| Sha256::digest(token.as_bytes()).into())
    }

    /// The principal of a token verified before, if that verification still holds at
    /// `now` under the current keys. An entry that no longer holds is dropped.
    pub(crate) fn get(&self, digest: &TokenDigest, jwks: &Jwks, now: f64) -> Option<Arc<str>> {
        let entries = self.entries.as_ref()?;
        let verified = entries.get(digest)?;
        if now <= verified.until && jwks.still_verifies(verified.kid.as_deref(), &verified.key) {
            return Some(verified.principal.clone());
        }
        entries.invalidate(digest);
        None
    }

    /// Keep what a whole check found for the token.
    pub(crate) fn insert(&self, digest: TokenDigest, verified: Verified) {
        if let Some(entries) = &self.entries {
            entries.insert(digest, Arc::new(verified));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::jwks::tests::rsa_jwk;
    use serde_json::json;

    fn verified(jwks: &Jwks, kid: Option<&str>, until: f64) -> Verified {
        Verified {
            principal: Arc::from("[\"c\",\"https://i\",\"u\"]"),
            until,
            kid: kid.map(str::to_owned),
            key: jwks.find(kid).expect("the key"),
        }
    }

    #[test]
    fn a_token_is_kept_until_it_expires() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a"), rsa_jwk("b")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let digest = tokens.digest("one").unwrap();
        tokens.insert(digest, verified(&jwks, Some("a"), now + 60.0));
        assert_eq!(
            tokens.get(&digest, &jwks, now).as_deref(),
            Some("[\"c\",\"https://i\",\"u\"]")
        );
        // The last instant still accepted.
        assert!(tokens.get(&digest, &jwks, now + 60.0).is_some());
        // Another token is another name, whatever it shares with the first.
        assert!(
            tokens
                .get(&tokens.digest("one ").unwrap(), &jwks, now)
                .is_none()
        );
        // Past `until`: gone, and not back for an earlier instant either.
        assert!(tokens.get(&digest, &jwks, now + 60.5).is_none());
        assert!(tokens.get(&digest, &jwks, now).is_none());
    }

    #[test]
    fn a_token_is_dropped_with_the_key_that_verified_it() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a"), rsa_jwk("b")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let (by_a, by_b) = (tokens.digest("a").unwrap(), tokens.digest("b").unwrap());
        tokens.insert(by_a, verified(&jwks, Some("a"), now + 60.0));
        tokens.insert(by_b, verified(&jwks, Some("b"), now + 60.0));
        // The same keys read again: what they verified stays.
        jwks.replace(&json!({"keys": [rsa_jwk("a"), rsa_jwk("b")]}));
        assert!(tokens.get(&by_a, &jwks, now).is_some());
        // `a` replaced under its kid (another modulus), `b` withdrawn.
        let mut other = rsa_jwk("a");
        other["e"] = json!("AQAC");
        jwks.replace(&json!({"keys": [other]}));
        assert!(tokens.get(&by_a, &jwks, now).is_none());
        assert!(tokens.get(&by_b, &jwks, now).is_none());
    }

    #[test]
    fn a_token_without_kid_is_kept_only_while_the_set_has_one_key() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("only")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let digest = tokens.digest("t").unwrap();
        tokens.insert(digest, verified(&jwks, None, now + 60.0));
        assert!(tokens.get(&digest, &jwks, now).is_some());
        jwks.replace(&json!({"keys": [rsa_jwk("only"), rsa_jwk("new")]}));
        assert!(tokens.get(&digest, &jwks, now).is_none());
    }

    #[test]
    fn with_no_room_nothing_is_kept() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a")]}));
        let tokens = VerifiedTokens::new(0);
        assert!(tokens.digest("t").is_none());
        tokens.insert([0; 32], verified(&jwks, Some("a"), f64::MAX));
        assert!(tokens.get(&[0; 32], &jwks, 0.0).is_none());
    }
}
