//! The principal claim (`p`): base64url(salt ‖ SHA-256(label ‖ salt ‖ principal)[..16]),
//! the salted, one-way tag of the caller a token is bound to; and [`PrincipalMemo`], the
//! claim minted lately for each caller, so that a caller's tokens do not each cost the
//! digest twice (once minted, once checked).
//!
//! Invariant: a claim matches a principal exactly when its tag is the digest of the
//! principal under the claim's own salt, compared in constant time. The memo changes how
//! often the digest is computed, never what matches: it answers only for the very
//! principal (compared whole, in constant time) and the very salt it computed the tag
//! for, and otherwise the digest is computed as before.

use base64_simd::URL_SAFE_NO_PAD;
use constant_time_eq::constant_time_eq;
use sha2::{Digest, Sha256};
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

const PRINCIPAL_LABEL: &[u8] = b"mcp/request-state/principal:";
const SALT_LEN: usize = 8;
const TAG_LEN: usize = 16;
/// base64url, no padding, of a salt and a tag (24 bytes).
const CLAIM_CHARS: usize = (SALT_LEN + TAG_LEN) / 3 * 4;

/// A principal claim's text: always [`CLAIM_CHARS`] base64url characters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrincipalClaim([u8; CLAIM_CHARS]);

impl PrincipalClaim {
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("base64url is ASCII")
    }
}

impl std::fmt::Debug for PrincipalClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A tag of who the caller is: not for logs.
        f.write_str("PrincipalClaim(..)")
    }
}

/// The claim for `principal` under `salt`.
pub(crate) fn principal_claim(principal: &str, salt: [u8; SALT_LEN]) -> PrincipalClaim {
    claim_of(salt, principal_tag(&salt, principal))
}

fn claim_of(salt: [u8; SALT_LEN], tag: [u8; TAG_LEN]) -> PrincipalClaim {
    let mut raw = [0u8; SALT_LEN + TAG_LEN];
    raw[..SALT_LEN].copy_from_slice(&salt);
    raw[SALT_LEN..].copy_from_slice(&tag);
    let mut text = [0u8; CLAIM_CHARS];
    let written = URL_SAFE_NO_PAD.encode(&raw, base64_simd::Out::from_slice(&mut text));
    debug_assert_eq!(written.len(), CLAIM_CHARS);
    PrincipalClaim(text)
}

/// Constant-time check of a claim against the principal bound to this request.
pub(crate) fn principal_matches(claim: &str, principal: &str) -> bool {
    decode(claim).is_some_and(|(salt, tag)| tags_equal(&tag, &principal_tag(&salt, principal)))
}

/// A claim's salt and tag; `None` for anything that is not exactly a salt and a tag.
fn decode(claim: &str) -> Option<([u8; SALT_LEN], [u8; TAG_LEN])> {
    let mut raw = [0u8; SALT_LEN + TAG_LEN];
    if URL_SAFE_NO_PAD.decoded_length(claim.as_bytes()).ok() != Some(raw.len()) {
        return None;
    }
    URL_SAFE_NO_PAD
        .decode(claim.as_bytes(), base64_simd::Out::from_slice(&mut raw))
        .ok()?;
    let (salt, tag) = raw.split_at(SALT_LEN);
    Some((salt.try_into().ok()?, tag.try_into().ok()?))
}

fn tags_equal(a: &[u8; TAG_LEN], b: &[u8; TAG_LEN]) -> bool {
    bool::from(a.ct_eq(b))
}

fn principal_tag(salt: &[u8; SALT_LEN], principal: &str) -> [u8; TAG_LEN] {
    let digest = Sha256::new()
        .chain_update(PRINCIPAL_LABEL)
        .chain_update(salt)
        .chain_update(principal.as_bytes())
        .finalize();
    digest[..TAG_LEN].try_into().expect("SHA-256 is 32 bytes")
}

/// Callers whose latest claim is kept: a slot each, chosen by a seeded hash of the
/// principal (two callers on one slot take turns, each computing as without the memo).
const SLOTS: usize = 256;
/// The longest principal kept: a longer one is digested each time. Bounds the memo's
/// memory (at most `SLOTS` × this, about 64 KiB of principals).
const LONGEST_KEPT: usize = 256;
/// How long one salt serves a caller's new tokens. Within it, the caller's tokens carry
/// the same claim (which only the key's holders can read); after it, a fresh salt.
const SALT_SERVES_SECONDS: f64 = 60.0;

/// The claim minted lately for each of the recent callers ([`SLOTS`] of them).
///
/// Minting for a kept caller whose salt still serves reuses its claim; checking a claim
/// under a kept caller's salt compares with its kept tag. Written by hand: a slot array
/// behind one seeded hash is all it needs, where a general cache (moka) would spend on
/// its bookkeeping about a third of the digest it saves.
pub(crate) struct PrincipalMemo {
    slots: Box<[Mutex<Option<KeptClaim>>]>,
    hasher: foldhash::fast::RandomState,
}

/// One caller's latest claim.
struct KeptClaim {
    /// A credential when the principal is a header's value: wiped when dropped.
    principal: Zeroizing<String>,
    salt: [u8; SALT_LEN],
    tag: [u8; TAG_LEN],
    /// Unix seconds when the salt was drawn.
    drawn: f64,
}

impl KeptClaim {
    fn is_for(&self, principal: &str) -> bool {
        constant_time_eq(self.principal.as_bytes(), principal.as_bytes())
    }
}

impl Default for PrincipalMemo {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Mutex::new(None)).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl PrincipalMemo {
    fn slot(&self, principal: &str) -> Option<&Mutex<Option<KeptClaim>>> {
        if principal.len() > LONGEST_KEPT {
            return None;
        }
        let index = self.hasher.hash_one(principal.as_bytes()) as usize % SLOTS;
        Some(&self.slots[index])
    }

    /// The claim a token minted at `now` for `principal` carries: the kept one while its
    /// salt serves, else one under `fresh_salt` (then kept).
    pub(crate) fn claim(
        &self,
        principal: &str,
        now: f64,
        fresh_salt: impl FnOnce() -> [u8; SALT_LEN],
    ) -> PrincipalClaim {
        let Some(slot) = self.slot(principal) else {
            return principal_claim(principal, fresh_salt());
        };
        let mut kept = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = kept.as_ref()
            && kept.is_for(principal)
            && (kept.drawn..kept.drawn + SALT_SERVES_SECONDS).contains(&now)
        {
            return claim_of(kept.salt, kept.tag);
        }
        let salt = fresh_salt();
        let tag = principal_tag(&salt, principal);
        *kept = Some(KeptClaim {
            principal: Zeroizing::new(principal.to_owned()),
            salt,
            tag,
            drawn: now,
        });
        claim_of(salt, tag)
    }

    /// [`principal_matches`], with the kept tag when the claim's salt is the one kept for
    /// this very principal.
    pub(crate) fn matches(&self, claim: &str, principal: &str) -> bool {
        let Some((salt, tag)) = decode(claim) else {
            return false;
        };
        let kept_tag = self.slot(principal).and_then(|slot| {
            let guard = slot.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = guard.as_ref()?;
            (kept.salt == salt && kept.is_for(principal)).then_some(kept.tag)
        });
        let expected = kept_tag.unwrap_or_else(|| principal_tag(&salt, principal));
        tags_equal(&tag, &expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_claims_are_salted_and_checked() {
        let c1 = principal_claim("alice", [1; 8]);
        let c2 = principal_claim("alice", [2; 8]);
        assert_ne!(c1, c2);
        let (c1, c2) = (c1.as_str(), c2.as_str());
        assert!(principal_matches(c1, "alice"));
        assert!(principal_matches(c2, "alice"));
        assert!(!principal_matches(c1, "alice "));
        assert!(!principal_matches(c1, "bob"));
        assert!(!principal_matches("", "alice"));
        assert!(!principal_matches(&c1[..c1.len() - 2], "alice"));
        assert!(!principal_matches("not base64!", "alice"));
    }

    /// A salt source that counts the salts it draws.
    fn counted(drawn: &std::cell::Cell<u8>) -> impl FnOnce() -> [u8; 8] + '_ {
        || {
            drawn.set(drawn.get() + 1);
            [drawn.get(); 8]
        }
    }

    #[test]
    fn a_callers_claim_is_reused_while_its_salt_serves_then_drawn_afresh() {
        let memo = PrincipalMemo::default();
        let drawn = std::cell::Cell::new(0);
        let first = memo.claim("alice", 1000.0, counted(&drawn));
        assert_eq!(first, principal_claim("alice", [1; 8]));
        assert_eq!(memo.claim("alice", 1059.0, counted(&drawn)), first);
        assert_eq!(drawn.get(), 1);
        // Another caller draws its own salt, and never gets alice's claim.
        let bob = memo.claim("bob", 1001.0, counted(&drawn));
        assert_eq!(bob, principal_claim("bob", [2; 8]));
        // A salt serves SALT_SERVES_SECONDS, and never before it was drawn.
        let later = memo.claim("alice", 1060.0, counted(&drawn));
        assert_eq!(later, principal_claim("alice", [3; 8]));
        let earlier = memo.claim("alice", 999.0, counted(&drawn));
        assert_eq!(earlier, principal_claim("alice", [4; 8]));
    }

    #[test]
    fn the_memo_matches_exactly_what_the_digest_matches() {
        let memo = PrincipalMemo::default();
        let alice = memo.claim("alice", 1000.0, || [7; 8]);
        let kept = alice.as_str();
        assert!(memo.matches(kept, "alice"));
        // The kept salt, another caller: the tag is computed, and differs.
        assert!(!memo.matches(kept, "alicf"));
        assert!(!memo.matches(kept, "alice\0"));
        assert!(!memo.matches(kept, ""));
        // The kept salt, a forged tag.
        let mut forged = principal_claim("mallory", [7; 8]).as_str().to_owned();
        assert!(!memo.matches(&forged, "alice"));
        forged.replace_range(11..12, if &forged[11..12] == "A" { "B" } else { "A" });
        assert!(!memo.matches(&forged, "mallory"));
        // Another salt for the kept caller: computed, and checked as always.
        let other = principal_claim("alice", [9; 8]);
        assert!(memo.matches(other.as_str(), "alice"));
        assert!(!memo.matches(other.as_str(), "bob"));
        for bad in ["", "not base64!", &kept[..kept.len() - 1]] {
            assert!(!memo.matches(bad, "alice"), "{bad:?}");
        }
    }

    #[test]
    fn a_principal_too_long_to_keep_is_digested_each_time() {
        let memo = PrincipalMemo::default();
        let long = "p".repeat(LONGEST_KEPT + 1);
        let drawn = std::cell::Cell::new(0);
        let first = memo.claim(&long, 1000.0, counted(&drawn));
        let second = memo.claim(&long, 1000.0, counted(&drawn));
        assert_ne!(first, second);
        assert_eq!(drawn.get(), 2);
        assert!(memo.matches(first.as_str(), &long));
        assert!(memo.matches(second.as_str(), &long));
        assert!(!memo.matches(first.as_str(), &long[1..]));
    }

    #[test]
    fn callers_sharing_a_slot_take_turns_and_keep_their_own_claims() {
        let memo = PrincipalMemo::default();
        // More callers than slots: some share one.
        let claims: Vec<_> = (0..SLOTS * 2)
            .map(|i| {
                (
                    i,
                    memo.claim(&format!("caller-{i}"), 1000.0, || [i as u8; 8]),
                )
            })
            .collect();
        for (i, claim) in &claims {
            assert!(memo.matches(claim.as_str(), &format!("caller-{i}")));
            assert!(!memo.matches(claim.as_str(), &format!("caller-{}", i + 1)));
        }
    }
}
