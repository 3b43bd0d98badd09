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
//!
//! A connection recalls the last token that was found here or verified on it
//! ([`LastBearer`]), with that same entry: a request carrying exactly that token (compared
//! in constant time) uses the entry under the same conditions without naming the token
//! again. A token that was refused is never recalled, so what a connection holds is one
//! token its issuer signed, and no more.

use super::jwks::{Jwks, VerifyingKey};
use constant_time_eq::constant_time_eq;
use moka::Expiry;
use moka::sync::Cache;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
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

impl Verified {
    /// Whether this verification still holds at `now` under the current keys.
    fn holds(&self, jwks: &Jwks, now: f64) -> bool {
        now <= self.until && jwks.still_verifies(self.kid.as_deref(), &self.key)
    }
}

/// The name of a token in the cache.
pub(crate) type TokenDigest = [u8; 32];

/// The verified bearer token a connection's last request carried, its name and its
/// entry: a client sends the one token on every request of its session, and a
/// connection is one client's. An access token is most of a kilobyte, so naming it (a
/// SHA-256 digest of all of it) and finding its entry is most of what a kept verification
/// costs; a token equal byte for byte to the recalled one takes the recalled entry. The
/// token is a credential: it is compared in constant time (another caller may share a
/// front proxy's connection), wiped when it is replaced and when the connection ends, and
/// never printed.
#[derive(Default)]
pub(crate) struct LastBearer(Mutex<Option<Recalled>>);

struct Recalled {
    token: Zeroizing<String>,
    digest: TokenDigest,
    verified: Arc<Verified>,
}

impl LastBearer {
    /// What the recall holds for `token`, when it is the recalled token: its principal
    /// while its verification holds at `now` under the current keys, else its name (the
    /// recall is forgotten then, and the caller drops the cache's entry too).
    fn recall(&self, token: &str, jwks: &Jwks, now: f64) -> Option<Result<Arc<str>, TokenDigest>> {
        // A poisoned lock only held a finished value.
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let recalled = last.as_ref()?;
        if !constant_time_eq(recalled.token.as_bytes(), token.as_bytes()) {
            return None;
        }
        if recalled.verified.holds(jwks, now) {
            return Some(Ok(recalled.verified.principal.clone()));
        }
        let digest = recalled.digest;
        *last = None;
        Some(Err(digest))
    }

    /// Recall `token` (found or just verified) from now on.
    fn keep(&self, token: &str, digest: TokenDigest, verified: Arc<Verified>) {
        let recalled = Recalled {
            token: Zeroizing::new(String::from(token)),
            digest,
            verified,
        };
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(recalled);
    }
}

impl fmt::Debug for LastBearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LastBearer(..)")
    }
}

/// A bounded cache of verified tokens; with no room (`0`), every token is verified.
pub(crate) struct VerifiedTokens {
    entries: Option<Cache<TokenDigest, Arc<Verified>>>,
}

/// What the cache knows of a token.
#[derive(Debug)]
pub(crate) enum Found {
    /// A verification that still holds: the token's principal.
    Kept(Arc<str>),
    /// Not kept, or kept no longer: the token goes through the whole check, and what it
    /// finds is kept under this name (`None`: nothing is kept).
    Unknown(Option<TokenDigest>),
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

    /// The kept verification of `token` if it still holds at `now` under the current
    /// keys: the connection's `last` when it is that token, else the entry its name
    /// finds (which the connection then recalls). An entry that no longer holds is
    /// dropped, and the connection forgets it.
    pub(crate) fn find(&self, token: &str, last: &LastBearer, jwks: &Jwks, now: f64) -> Found {
        let Some(entries) = &self.entries else {
            return Found::Unknown(None);
        };
        match last.recall(token, jwks, now) {
            Some(Ok(principal)) => return Found::Kept(principal),
            Some(Err(digest)) => {
                entries.invalidate(&digest);
                return Found::Unknown(Some(digest));
            }
            None => {}
        }
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        match entries.get(&digest) {
            Some(verified) if verified.holds(jwks, now) => {
                let principal = verified.principal.clone();
                last.keep(token, digest, verified);
                Found::Kept(principal)
            }
            Some(_) => {
                entries.invalidate(&digest);
                Found::Unknown(Some(digest))
            }
            None => Found::Unknown(Some(digest)),
        }
    }

    /// Keep what a whole check found for `token` under its name (from [`Found::Unknown`]);
    /// the connection recalls it.
    pub(crate) fn keep(
        &self,
        token: &str,
        digest: TokenDigest,
        verified: Verified,
        last: &LastBearer,
    ) {
        if let Some(entries) = &self.entries {
            let verified = Arc::new(verified);
            entries.insert(digest, verified.clone());
            last.keep(token, digest, verified);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::jwks::tests::rsa_jwk;
    use serde_json::json;

    fn verified(jwks: &Jwks, kid: Option<&str>, until: f64) -> Verified {
        verified_as(jwks, kid, until, "[\"c\",\"https://i\",\"u\"]")
    }

    fn verified_as(jwks: &Jwks, kid: Option<&str>, until: f64, principal: &str) -> Verified {
        Verified {
            principal: Arc::from(principal),
            until,
            kid: kid.map(str::to_owned),
            key: jwks.find(kid).expect("the key"),
        }
    }

    fn name(token: &str) -> TokenDigest {
        Sha256::digest(token.as_bytes()).into()
    }

    /// What `find` answers on a connection that recalls nothing (the cache alone).
    fn found(tokens: &VerifiedTokens, token: &str, jwks: &Jwks, now: f64) -> Option<String> {
        match tokens.find(token, &LastBearer::default(), jwks, now) {
            Found::Kept(principal) => Some(principal.to_string()),
            Found::Unknown(digest) => {
                assert_eq!(digest, Some(name(token)), "an unknown token is named");
                None
            }
        }
    }

    fn recalled(last: &LastBearer) -> Option<String> {
        let last = last.0.lock().unwrap();
        last.as_ref().map(|r| {
            assert_eq!(r.digest, name(&r.token), "the recalled name is the token's");
            r.token.to_string()
        })
    }

    #[test]
    fn a_token_is_kept_until_it_expires() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a"), rsa_jwk("b")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let last = LastBearer::default();
        tokens.keep(
            "one",
            name("one"),
            verified(&jwks, Some("a"), now + 60.0),
            &last,
        );
        assert_eq!(recalled(&last).as_deref(), Some("one"));
        assert_eq!(
            found(&tokens, "one", &jwks, now).as_deref(),
            Some("[\"c\",\"https://i\",\"u\"]")
        );
        // The last instant still accepted.
        assert!(found(&tokens, "one", &jwks, now + 60.0).is_some());
        // Another token is another name, whatever it shares with the first.
        assert!(found(&tokens, "one ", &jwks, now).is_none());
        // Past `until`: gone, and not back for an earlier instant either.
        assert!(found(&tokens, "one", &jwks, now + 60.5).is_none());
        assert!(found(&tokens, "one", &jwks, now).is_none());
    }

    #[test]
    fn a_token_is_dropped_with_the_key_that_verified_it() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a"), rsa_jwk("b")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let (on_a, on_b) = (LastBearer::default(), LastBearer::default());
        tokens.keep(
            "a",
            name("a"),
            verified(&jwks, Some("a"), now + 60.0),
            &on_a,
        );
        tokens.keep(
            "b",
            name("b"),
            verified(&jwks, Some("b"), now + 60.0),
            &on_b,
        );
        // The same keys read again: what they verified stays, recalled or not.
        jwks.replace(&json!({"keys": [rsa_jwk("a"), rsa_jwk("b")]}));
        assert!(found(&tokens, "a", &jwks, now).is_some());
        assert!(matches!(
            tokens.find("a", &on_a, &jwks, now),
            Found::Kept(_)
        ));
        // `a` replaced under its kid (another modulus), `b` withdrawn: neither the
        // connection that recalls the token nor any other takes it.
        let mut other = rsa_jwk("a");
        other["e"] = json!("AQAC");
        jwks.replace(&json!({"keys": [other]}));
        let digest = Some(name("a"));
        assert!(matches!(tokens.find("a", &on_a, &jwks, now), Found::Unknown(d) if d == digest));
        assert!(
            recalled(&on_a).is_none(),
            "a recall that no longer holds is forgotten"
        );
        assert!(found(&tokens, "a", &jwks, now).is_none());
        assert!(matches!(
            tokens.find("b", &on_b, &jwks, now),
            Found::Unknown(_)
        ));
        assert!(found(&tokens, "b", &jwks, now).is_none());
    }

    #[test]
    fn a_token_without_kid_is_kept_only_while_the_set_has_one_key() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("only")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let last = LastBearer::default();
        tokens.keep("t", name("t"), verified(&jwks, None, now + 60.0), &last);
        assert!(found(&tokens, "t", &jwks, now).is_some());
        jwks.replace(&json!({"keys": [rsa_jwk("only"), rsa_jwk("new")]}));
        assert!(matches!(
            tokens.find("t", &last, &jwks, now),
            Found::Unknown(_)
        ));
        assert!(found(&tokens, "t", &jwks, now).is_none());
    }

    #[test]
    fn a_connection_recalls_only_a_token_found_or_verified() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a")]}));
        let tokens = VerifiedTokens::new(8);
        let now = crate::token::now();
        let last = LastBearer::default();
        // Unknown (and then refused by the whole check, which keeps nothing): not recalled.
        assert!(matches!(
            tokens.find("one", &last, &jwks, now),
            Found::Unknown(Some(_))
        ));
        assert!(recalled(&last).is_none());
        tokens.keep(
            "one",
            name("one"),
            verified_as(&jwks, Some("a"), now + 60.0, "1"),
            &last,
        );
        // Another token, unknown: the verified one stays recalled.
        assert!(matches!(
            tokens.find("onf", &last, &jwks, now),
            Found::Unknown(_)
        ));
        assert_eq!(recalled(&last).as_deref(), Some("one"));
        // The recall serves its token without the cache: gone from the cache, kept here.
        tokens.entries.as_ref().unwrap().invalidate(&name("one"));
        assert!(matches!(tokens.find("one", &last, &jwks, now), Found::Kept(p) if &*p == "1"));
        assert!(found(&tokens, "one", &jwks, now).is_none());
        // Each token its own entry, on one connection: alternating, one a prefix of the
        // other, of one length and differing in one byte.
        let other = LastBearer::default();
        for (token, principal) in [("one ", "2"), ("onf", "3"), ("one", "1")] {
            tokens.keep(
                token,
                name(token),
                verified_as(&jwks, Some("a"), now + 60.0, principal),
                &other,
            );
        }
        for token in ["one", "one", "one ", "onf", "one", "onf", "one "] {
            let principal = match token {
                "one" => "1",
                "one " => "2",
                _ => "3",
            };
            let lookup = tokens.find(token, &last, &jwks, now);
            assert!(
                matches!(&lookup, Found::Kept(p) if &**p == principal),
                "{token:?}: {lookup:?}"
            );
            assert_eq!(recalled(&last).as_deref(), Some(token));
        }
        // Past its `until` the recalled token is forgotten, and its entry dropped.
        assert!(matches!(
            tokens.find("one ", &last, &jwks, now + 61.0),
            Found::Unknown(_)
        ));
        assert!(recalled(&last).is_none());
        assert!(found(&tokens, "one ", &jwks, now).is_none());
    }

    #[test]
    fn the_recalled_token_is_never_printed() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a")]}));
        let last = LastBearer::default();
        let token = "secret.token.text";
        VerifiedTokens::new(8).keep(
            token,
            name(token),
            verified(&jwks, Some("a"), f64::MAX),
            &last,
        );
        assert_eq!(recalled(&last).as_deref(), Some(token));
        assert_eq!(format!("{last:?}"), "LastBearer(..)");
    }

    #[test]
    fn with_no_room_nothing_is_kept() {
        let jwks = Jwks::holding(&json!({"keys": [rsa_jwk("a")]}));
        let tokens = VerifiedTokens::new(0);
        let last = LastBearer::default();
        assert!(matches!(
            tokens.find("t", &last, &jwks, 0.0),
            Found::Unknown(None)
        ));
        tokens.keep("t", name("t"), verified(&jwks, Some("a"), f64::MAX), &last);
        assert!(matches!(
            tokens.find("t", &last, &jwks, 0.0),
            Found::Unknown(None)
        ));
        assert!(recalled(&last).is_none());
    }
}
