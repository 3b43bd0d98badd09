//! The key ring and the `v1.` envelope: HKDF-derived AES-256-GCM keys, 4-byte key ids,
//! strict canonical base64url.
//!
//! Invariant: the first key mints, every key opens, and only a token this ring sealed
//! unmodified opens. Secret bytes live in zeroizing buffers; no error, log line or
//! `Debug` output ever contains them.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64_simd::URL_SAFE_NO_PAD;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;
use zeroize::{Zeroize, Zeroizing};

const KDF_INFO: &[u8] = b"mcp/request-state/v1/aes-256-gcm";
const KID_INFO: &[u8] = b"mcp/request-state/v1/kid:";
pub(crate) const TOKEN_PREFIX: &str = "v1.";
/// Sealed handles ([`super::handle`]): their own prefix, and the prefix is in the AAD,
/// so a handle can never open as a `requestState` (nor one as the other) even with its
/// prefix rewritten.
pub(crate) const HANDLE_PREFIX: &str = "h1.";
pub(crate) const KID_LEN: usize = 4;
pub(crate) const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// The reference refuses shorter operator secrets; so do we.
pub(crate) const MIN_SECRET_BYTES: usize = 32;

/// Why a key ring could not be built. Names the line or index, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRingError {
    #[error("{origin}: no keys (every line is blank or a comment)")]
    Empty { origin: String },
    #[error(
        "{origin} line {line}: key is {len} bytes, at least {MIN_SECRET_BYTES} are required (generate one with `mcp-state-guard keygen`)"
    )]
    TooShort {
        origin: String,
        line: usize,
        len: usize,
    },
    #[error("{origin} line {line}: duplicates the key on line {first}")]
    Duplicate {
        origin: String,
        line: usize,
        first: usize,
    },
    #[error(
        "{origin} line {line}: leading or trailing whitespace (the secret is used byte for byte; remove it)"
    )]
    Whitespace { origin: String, line: usize },
    #[error("{origin} line {line}: not valid UTF-8")]
    NotUtf8 { origin: String, line: usize },
    #[error("{origin}: cannot read: {reason}")]
    Unreadable { origin: String, reason: String },
}

/// Why a token did not open. Unit variants: nothing here helps an attacker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Wrong prefix, non-canonical base64url, or too short.
    Malformed,
    /// The key id names no key of this ring.
    UnknownKey,
    /// The AEAD tag does not verify: tampered, truncated or forged.
    Tampered,
}

/// Length of a token's identity: its key id and nonce.
pub(crate) const TOKEN_ID_LEN: usize = KID_LEN + NONCE_LEN;

/// The bytes a token is written between, in one buffer with it: where it goes in an
/// answer, the member's name and the quotes around it.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub lead: &'a [u8],
    pub tail: &'a [u8],
}

impl Frame<'_> {
    /// The token alone.
    pub const NONE: Frame<'static> = Frame {
        lead: b"",
        tail: b"",
    };
}

/// An opened token: its plaintext and its identity. The identity (key id ‖ nonce) is
/// authenticated by the AEAD and unique per seal, so it names one token for replay checks.
/// The plaintext is not zeroized: it is request data that also travels in ordinary
/// buffers to the upstream, unlike key material.
pub struct Unsealed {
    /// kid ‖ nonce ‖ plaintext, decrypted in place.
    raw: Vec<u8>,
}

impl Unsealed {
    pub(crate) fn payload(&self) -> &[u8] {
        &self.raw[TOKEN_ID_LEN..]
    }

    pub(crate) fn id(&self) -> [u8; TOKEN_ID_LEN] {
        self.raw[..TOKEN_ID_LEN]
            .try_into()
            .expect("checked at open")
    }
}

struct RingKey {
    kid: [u8; KID_LEN],
    /// `Aes256Gcm` zeroizes its key schedule on drop (the `zeroize` feature).
    cipher: Aes256Gcm,
}

/// The keys of one configuration generation. Immutable; reloads build a new ring.
pub struct KeyRing {
    keys: Vec<RingKey>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<String> = self.keys.iter().map(|k| hex::encode(k.kid)).collect();
        f.debug_struct("KeyRing").field("kids", &kids).finish()
    }
}

impl KeyRing {
    /// Build a ring from secrets in priority order (the first mints).
    /// `origin` names where they came from, for error messages; line numbers are 1-based
    /// positions in `secrets` unless the caller supplies its own via [`KeyRing::parse`].
    pub fn from_secrets<S: AsRef<[u8]>>(secrets: &[S], origin: &str) -> Result<Self, KeyRingError> {
        let numbered: Vec<(usize, &[u8])> = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| (i + 1, s.as_ref()))
            .collect();
        Self::build(&numbered, origin)
    }

    /// Parse key-file contents: one secret per line, blank lines and `#` comments ignored.
    pub(crate) fn parse(contents: &[u8], origin: &str) -> Result<Self, KeyRingError> {
        let mut numbered = Vec::new();
        for (i, raw) in contents.split(|b| *b == b'\n').enumerate() {
            let line = i + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let text = std::str::from_utf8(raw).map_err(|_| KeyRingError::NotUtf8 {
                origin: origin.to_owned(),
                line,
            })?;
            let trimmed = text.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            if trimmed.len() != text.len() {
                return Err(KeyRingError::Whitespace {
                    origin: origin.to_owned(),
                    line,
                });
            }
            numbered.push((line, raw));
        }
        Self::build(&numbered, origin)
    }

    /// Read and parse a key file.
    pub(crate) fn load(path: &Path) -> Result<Self, KeyRingError> {
        Self::parse(&Self::read(path)?, &path.display().to_string())
    }

    /// A key file's bytes, in a zeroizing buffer (for a caller that also needs them,
    /// such as the reload watcher's baseline digest).
    pub(crate) fn read(path: &Path) -> Result<Zeroizing<Vec<u8>>, KeyRingError> {
        std::fs::read(path)
            .map(Zeroizing::new)
            .map_err(|e| KeyRingError::Unreadable {
                origin: path.display().to_string(),
                reason: e.to_string(),
            })
    }

    /// A ring of one random key that only this process holds.
    pub(crate) fn ephemeral() -> Self {
        let secret = Zeroizing::new(random_bytes::<32>());
        Self::from_secrets(&[&secret[..]], "ephemeral").expect("32 random bytes form a valid key")
    }

    fn build(secrets: &[(usize, &[u8])], origin: &str) -> Result<Self, KeyRingError> {
        if secrets.is_empty() {
            return Err(KeyRingError::Empty {
                origin: origin.to_owned(),
            });
        }
        let mut keys: Vec<RingKey> = Vec::with_capacity(secrets.len());
        let mut lines: Vec<usize> = Vec::with_capacity(secrets.len());
        for &(line, secret) in secrets {
            if secret.len() < MIN_SECRET_BYTES {
                return Err(KeyRingError::TooShort {
                    origin: origin.to_owned(),
                    line,
                    len: secret.len(),
                });
            }
            let key = derive_key(secret);
            let kid = key_id(&key);
            if let Some(pos) = keys.iter().position(|k| k.kid == kid) {
                return Err(KeyRingError::Duplicate {
                    origin: origin.to_owned(),
                    line,
                    first: lines[pos],
                });
            }
            let cipher = Aes256Gcm::new_from_slice(&key[..]).expect("HKDF yields 32 bytes");
            keys.push(RingKey { kid, cipher });
            lines.push(line);
        }
        Ok(Self { keys })
    }

    /// Key ids in ring order, hex; safe to log (they are public in every token).
    pub(crate) fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| hex::encode(k.kid)).collect()
    }

    /// The id of the key that mints (the first of the ring).
    pub(crate) fn minting_kid(&self) -> [u8; KID_LEN] {
        self.keys[0].kid
    }

    #[cfg(test)]
    /// Seal `payload` under the minting key with a fresh random nonce.
    pub(crate) fn seal(&self, payload: &str) -> String {
        self.seal_text(fast_random_bytes::<NONCE_LEN>(), payload.len(), |out| {
            out.push_str(payload)
        })
    }

    /// [`KeyRing::seal_text_framed`] without a frame: the token alone.
    #[cfg(test)]
    pub(crate) fn seal_text(
        &self,
        nonce: [u8; NONCE_LEN],
        len_hint: usize,
        write: impl FnOnce(&mut String),
    ) -> String {
        self.seal_enveloped(TOKEN_PREFIX, nonce, len_hint, write)
    }

    /// Seal the text `write` produces, with a caller-chosen nonce, the token written
    /// between `frame`'s bytes. The claims are written straight into the raw token's
    /// buffer behind a reserved kid ‖ nonce slot and encrypted in place, and the encoding
    /// goes with what surrounds it in an answer into one buffer of exactly their size: a
    /// seal allocates twice. A caller-chosen nonce is only for reference vectors: a
    /// repeated nonce under one key destroys GCM's guarantees.
    pub(crate) fn seal_text_framed(
        &self,
        nonce: [u8; NONCE_LEN],
        len_hint: usize,
        write: impl FnOnce(&mut String),
        frame: Frame<'_>,
    ) -> Vec<u8> {
        self.seal_framed(TOKEN_PREFIX, nonce, len_hint, write, frame)
    }

    /// Seal under `prefix` (one of [`TOKEN_PREFIX`], [`HANDLE_PREFIX`]), which the AAD
    /// authenticates.
    pub(crate) fn seal_enveloped(
        &self,
        prefix: &'static str,
        nonce: [u8; NONCE_LEN],
        len_hint: usize,
        write: impl FnOnce(&mut String),
    ) -> String {
        let token = self.seal_framed(prefix, nonce, len_hint, write, Frame::NONE);
        String::from_utf8(token).expect("a token is its prefix and base64url")
    }

    fn seal_framed(
        &self,
        prefix: &'static str,
        nonce: [u8; NONCE_LEN],
        len_hint: usize,
        write: impl FnOnce(&mut String),
        Frame { lead, tail }: Frame<'_>,
    ) -> Vec<u8> {
        let key = &self.keys[0];
        // Room for the tag too, so appending it does not reallocate.
        let mut text = String::with_capacity(TOKEN_ID_LEN + len_hint + TAG_LEN);
        text.extend(std::iter::repeat_n('\0', TOKEN_ID_LEN));
        write(&mut text);
        let mut raw = text.into_bytes();
        raw[..KID_LEN].copy_from_slice(&key.kid);
        raw[KID_LEN..TOKEN_ID_LEN].copy_from_slice(&nonce);
        let tag = key
            .cipher
            .encrypt_inout_detached(
                &Nonce::from(nonce),
                &aad(prefix, &key.kid),
                (&mut raw[TOKEN_ID_LEN..]).into(),
            )
            .expect("AES-GCM accepts any in-memory message");
        raw.extend_from_slice(&tag);
        let length = prefix.len() + URL_SAFE_NO_PAD.encoded_length(raw.len());
        let mut token = Vec::with_capacity(lead.len() + length + tail.len());
        token.extend_from_slice(lead);
        token.extend_from_slice(prefix.as_bytes());
        URL_SAFE_NO_PAD.encode_append(&raw, &mut token);
        token.extend_from_slice(tail);
        token
    }

    /// Open a token sealed by any key of this ring.
    pub fn open(&self, token: &str) -> Result<Unsealed, OpenError> {
        self.open_enveloped(TOKEN_PREFIX, token)
    }

    /// Open a token sealed under `prefix` by any key of this ring.
    pub(crate) fn open_enveloped(
        &self,
        prefix: &'static str,
        token: &str,
    ) -> Result<Unsealed, OpenError> {
        let body = token.strip_prefix(prefix).ok_or(OpenError::Malformed)?;
        // The decoder rejects padding, foreign characters and non-zero trailing bits, so
        // exactly one spelling of each byte string opens (the reference re-encodes to check).
        let mut raw = URL_SAFE_NO_PAD
            .decode_to_vec(body)
            .map_err(|_| OpenError::Malformed)?;
        if raw.len() < TOKEN_ID_LEN + TAG_LEN {
            return Err(OpenError::Malformed);
        }
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == raw[..KID_LEN])
            .ok_or(OpenError::UnknownKey)?;
        let nonce: [u8; NONCE_LEN] = raw[KID_LEN..TOKEN_ID_LEN]
            .try_into()
            .expect("sliced to NONCE_LEN");
        let tag_at = raw.len() - TAG_LEN;
        let tag: [u8; TAG_LEN] = raw[tag_at..].try_into().expect("sliced to TAG_LEN");
        key.cipher
            .decrypt_inout_detached(
                &Nonce::from(nonce),
                &aad(prefix, &key.kid),
                (&mut raw[TOKEN_ID_LEN..tag_at]).into(),
                &tag.into(),
            )
            .map_err(|_| OpenError::Tampered)?;
        raw.truncate(tag_at);
        Ok(Unsealed { raw })
    }
}

/// HKDF-SHA256(ikm = secret, no salt, info = [`KDF_INFO`], 32 bytes), leaving no derived
/// byte behind unwiped: the pseudo-random key is zeroized here, and the HMAC states keyed
/// with it wipe themselves on drop (the `zeroize` features of `hmac` and `sha2`).
fn derive_key(secret: &[u8]) -> Zeroizing<[u8; 32]> {
    // `Hkdf::new` would drop the PRK unwiped; the `Hkdf` returned alongside is not needed.
    let (mut prk, _) = Hkdf::<Sha256>::extract(None, secret);
    // HKDF-Expand (RFC 5869 §2.3) of one block: 32 bytes is SHA-256's output length, so
    // the key is T(1) = HMAC(PRK, info ‖ 0x01). Written out rather than `Hkdf::expand`,
    // which keeps its last block (here, the whole key) in a local it does not wipe;
    // `CtOutput` wipes itself on drop.
    let mut mac = <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(&prk)
        .expect("HMAC takes keys of any length");
    prk.zeroize();
    mac.update(KDF_INFO);
    mac.update(&[1]);
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(mac.finalize().as_bytes());
    key
}

fn key_id(key: &[u8; 32]) -> [u8; KID_LEN] {
    let digest = Sha256::new()
        .chain_update(KID_INFO)
        .chain_update(key)
        .finalize();
    digest[..KID_LEN]
        .try_into()
        .expect("SHA-256 is longer than a key id")
}

/// `prefix ‖ kid`; both prefixes are three bytes (checked at compile time).
fn aad(prefix: &'static str, kid: &[u8; KID_LEN]) -> [u8; TOKEN_PREFIX.len() + KID_LEN] {
    const _: () = assert!(TOKEN_PREFIX.len() == HANDLE_PREFIX.len());
    let mut aad = [0u8; TOKEN_PREFIX.len() + KID_LEN];
    aad[..TOKEN_PREFIX.len()].copy_from_slice(prefix.as_bytes());
    aad[TOKEN_PREFIX.len()..].copy_from_slice(kid);
    aad
}

/// Operating-system randomness. Failing to get it is unrecoverable for a crypto proxy.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the operating system random source is unavailable");
    buf
}

/// Per-token randomness (nonces, principal salts) from the thread-local CSPRNG: ChaCha12
/// seeded and periodically reseeded from the operating system. A system call per token
/// was a measurable share of a seal; keys still come straight from the OS.
pub(crate) fn fast_random_bytes<const N: usize>() -> [u8; N] {
    use rand::RngCore as _;
    let mut buf = [0u8; N];
    rand::rng().fill_bytes(&mut buf);
    buf
}

/// A new operator secret: 64 lowercase hex characters (32 random bytes).
pub fn generate_secret() -> Zeroizing<String> {
    Zeroizing::new(hex::encode(random_bytes::<32>()))
}

#[cfg(test)]
mod tests;
