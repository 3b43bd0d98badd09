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
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use subtle::{Choice, ConstantTimeEq};
use zeroize::Zeroizing;

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

/// The bearer token a connection's last request carried, and its name: a client sends
/// the one token on every request of its session, and a connection is one client's. An
/// access token is most of a kilobyte, so naming it (a SHA-256 digest of all of it) is
/// most of what finding its verification costs; a token equal byte for byte to the last
/// has the last's name. The token is a credential: it is compared in constant time
/// (another caller may share a front proxy's connection), wiped when it is
/// replaced and when the connection ends, and never printed.
#[derive(Default)]
pub(crate) struct LastBearer(Mutex<Option<(Zeroizing<String>, TokenDigest)>>);

impl LastBearer {
    /// `token`'s SHA-256: the last token's when it is that token, else computed.
    fn digest(&self, token: &str) -> TokenDigest {
        // Held for a comparison or a digest; a poisoned lock only held a finished pair.
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((text, digest)) = last.as_ref()
            && same_bytes(text.as_bytes(), token.as_bytes())
        {
            return *digest;
        }
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        *last = Some((Zeroizing::new(String::from(token)), digest));
        digest
    }
}

impl fmt::Debug for LastBearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LastBearer(..)")
    }
}

/// Whether `a` and `b` are the same bytes, in a time that depends on their lengths only:
/// `subtle`'s comparison (as the principal tag's), a word of eight bytes at a time, where
/// its slice comparison puts an optimisation barrier after every byte of a token that is
/// most of a kilobyte.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    // Both the same length, so a short last word is padded alike.
    let word = |bytes: &[u8]| {
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(word)
    };
    a.len() == b.len()
        && bool::from(
            (a.chunks(8).zip(b.chunks(8))).fold(Choice::from(1), |same, (x, y)| {
                same & word(x).ct_eq(&word(y))
            }),
        )
}

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

    /// The token's name, when tokens are kept: the connection's `last` when it is the
    /// token its last request carried, else computed (and kept as its last).
    pub(crate) fn digest(&self, token: &str, last: &LastBearer) -> Option<TokenDigest> {
        self.entries.as_ref().map(|_| last.digest(token))
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
        let digest = tokens.digest("one", &LastBearer::default()).unwrap();
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
                .get(
                    &tokens.digest("one ", &LastBearer::default()).unwrap(),
                    &jwks,
                    now
                )
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
        let (by_a, by_b) = (
            tokens.digest("a", &LastBearer::default()).unwrap(),
            tokens.digest("b", &LastBearer::default()).unwrap(),
        );
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
        let digest = tokens.digest("t", &LastBearer::default()).unwrap();
        tokens.insert(digest, verified(&jwks, None, now + 60.0));
        assert!(tokens.get(&digest, &jwks, now).is_some());
        jwks.replace(&json!({"keys": [rsa_jwk("only"), rsa_jwk("new")]}));
        assert!(tokens.get(&digest, &jwks, now).is_none());
    }

    #[test]
    fn a_connections_tokens_are_each_named_by_their_own_digest() {
        let tokens = VerifiedTokens::new(8);
        let last = LastBearer::default();
        // Alternating, one a prefix of another, of one length and differing in one byte.
        for token in ["one", "one", "one ", "onf", "one", "one", "two", "one"] {
            let expected: TokenDigest = Sha256::digest(token.as_bytes()).into();
            assert_eq!(tokens.digest(token, &last), Some(expected), "{token:?}");
            // What the connection keeps is the token it was just sent, and its name.
            let kept = last.0.lock().unwrap();
            assert_eq!(
                kept.as_ref().map(|(t, d)| (t.as_str(), *d)),
                Some((token, expected))
            );
        }
        // Without room for verifications, nothing is named and nothing kept.
        let last = LastBearer::default();
        assert!(VerifiedTokens::new(0).digest("t", &last).is_none());
        assert!(last.0.lock().unwrap().is_none());
    }

    #[test]
    fn same_bytes_is_equality_and_the_token_is_never_printed() {
        let text = vec![b'x'; 100];
        for at in [0, 31, 32, 63, 99] {
            let mut other = text.clone();
            other[at] = b'y';
            assert!(!same_bytes(&text, &other), "a difference at {at}");
        }
        assert!(same_bytes(&text, &text.clone()));
        assert!(!same_bytes(&text, &text[..99]));
        assert!(same_bytes(b"", b""));
        let last = LastBearer::default();
        VerifiedTokens::new(8).digest("secret.token.text", &last);
        assert_eq!(format!("{last:?}"), "LastBearer(..)");
    }

    #[test]
    fn with_no_room_nothing_is_kept() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a")]}));
        let tokens = VerifiedTokens::new(0);
        assert!(tokens.digest("t", &LastBearer::default()).is_none());
        tokens.insert([0; 32], verified(&jwks, Some("a"), f64::MAX));
        assert!(tokens.get(&[0; 32], &jwks, 0.0).is_none());
    }
}
