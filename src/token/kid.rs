//! Key ids as the world outside the crypto seam sees them: in metric labels, log lines
//! and the runbook. A key id is public (it opens every token in clear), so it may be
//! shown anywhere; it says which key of the ring minted or opened a token.
//!
//! Invariant: a [`KeyId`] is 4 bytes shown as 8 lowercase hex digits, nothing else: it
//! never carries token, state or key bytes beyond the id itself.

use super::KeyRing;
#[cfg(test)]
use super::Opened;
use super::keyring::{HANDLE_PREFIX, KID_LEN, TOKEN_PREFIX};
use base64_simd::URL_SAFE_NO_PAD;
use std::fmt;

/// The id of one key of a ring.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; KID_LEN]);

/// A key id written out: 8 lowercase hex digits, on the stack (metric labels take `&str`).
#[derive(Clone, Copy)]
pub(crate) struct KeyIdHex([u8; 2 * KID_LEN]);

impl KeyIdHex {
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

impl KeyId {
    /// The key ids of `ring`, minting key first.
    pub fn of_ring(ring: &KeyRing) -> Vec<KeyId> {
        ring.key_ids()
            .iter()
            .filter_map(|hex| {
                let bytes = hex::decode(hex).ok()?;
                bytes.try_into().ok().map(KeyId)
            })
            .collect()
    }

    /// The key id a token names in its first bytes, whether or not it opens (a refused
    /// token's key id tells an operator which key, or which foreign deployment, it came
    /// from). `None` when it does not begin like a `v1.` token.
    pub fn of_token(token: &str) -> Option<KeyId> {
        Self::after_prefix(token, TOKEN_PREFIX)
    }

    /// The key id a sealed handle (`h1.`) names, as [`KeyId::of_token`] for states.
    pub fn of_handle(token: &str) -> Option<KeyId> {
        Self::after_prefix(token, HANDLE_PREFIX)
    }

    fn after_prefix(token: &str, prefix: &str) -> Option<KeyId> {
        // 8 base64url characters are 6 bytes, the first 4 of which are the key id.
        let head = token.strip_prefix(prefix)?.get(..8)?;
        let mut bytes = [0u8; 6];
        URL_SAFE_NO_PAD
            .decode(head.as_bytes(), base64_simd::Out::from_slice(&mut bytes))
            .ok()?;
        bytes[..KID_LEN].try_into().ok().map(KeyId)
    }

    /// The key `ring` mints with.
    pub(crate) fn minting(ring: &KeyRing) -> KeyId {
        KeyId(ring.minting_kid())
    }

    #[cfg(test)]
    /// The key that opened a verified token.
    pub(crate) fn of_opened(opened: &Opened<'_>) -> KeyId {
        KeyId(
            opened.id[..KID_LEN]
                .try_into()
                .expect("an id starts with a kid"),
        )
    }

    pub(crate) fn hex(self) -> KeyIdHex {
        let mut out = [0u8; 2 * KID_LEN];
        hex::encode_to_slice(self.0, &mut out).expect("twice as many digits as bytes");
        KeyIdHex(out)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{RequestBinding, SealOptions, StateSealer};

    #[test]
    fn a_token_names_the_key_that_minted_it() {
        let old = "0123456789abcdef0123456789abcdef-kid-test-old";
        let new = "0123456789abcdef0123456789abcdef-kid-test-new";
        let ring = KeyRing::from_secrets(&[new, old], "t").unwrap();
        let kids = KeyId::of_ring(&ring);
        assert_eq!(kids.len(), 2);
        assert_eq!(
            kids.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ring.key_ids()
        );
        let sealer = StateSealer::new(ring, None, 60);
        let binding = RequestBinding::of("tools/call", None).unwrap();
        let token = sealer.seal("s", &binding, &SealOptions::default());
        assert_eq!(KeyId::of_token(&token), Some(kids[0]));
        let opened = sealer.open(&token, &binding, None).unwrap();
        assert_eq!(KeyId::of_opened(&opened), kids[0]);
        assert_eq!(kids[0].hex().as_str().len(), 8);
        assert!(kids[0].to_string().bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn what_is_not_a_token_names_no_key() {
        for text in [
            "",
            "v1.",
            "v1.AAAA",
            "v2.AAAAAAAA",
            "{\"tier\":\"free\"}",
            "v1.AAAA!AAA",
        ] {
            assert_eq!(KeyId::of_token(text), None, "{text:?}");
        }
        assert!(KeyId::of_token("v1.AAAAAAAA").is_some());
        assert!(KeyId::of_token("h1.AAAAAAAA").is_none());
        assert!(KeyId::of_handle("h1.AAAAAAAA").is_some());
        assert!(KeyId::of_handle("v1.AAAAAAAA").is_none());
    }
}
