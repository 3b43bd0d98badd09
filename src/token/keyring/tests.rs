//! `KeyRing` tests: derivation, sealing and opening, the key file's rules.
use super::*;

const A: &str = "0123456789abcdef0123456789abcdef-key-a";
const B: &str = "0123456789abcdef0123456789abcdef-key-b";

#[test]
fn round_trip_under_every_ring_key() {
    let old = KeyRing::from_secrets(&[A], "t").unwrap();
    let both = KeyRing::from_secrets(&[B, A], "t").unwrap();
    let token = old.seal("hello");
    assert_eq!(both.open(&token).unwrap().payload(), b"hello");
    assert!(both.seal("x").starts_with("v1."));
    assert_eq!(old.open(&both.seal("x")).err(), Some(OpenError::UnknownKey));
}

#[test]
fn malformed_tokens() {
    let ring = KeyRing::from_secrets(&[A], "t").unwrap();
    let token = ring.seal("hello");
    assert_eq!(ring.open("v2.abc").err(), Some(OpenError::Malformed));
    assert_eq!(ring.open("").err(), Some(OpenError::Malformed));
    assert_eq!(ring.open("v1.").err(), Some(OpenError::Malformed));
    assert_eq!(
        ring.open(&format!("{token}=")).err(),
        Some(OpenError::Malformed)
    );
    assert_eq!(
        ring.open(&format!("{token}\n")).err(),
        Some(OpenError::Malformed)
    );
    // The standard alphabet's `+` and `/` are not base64url.
    let std_alphabet = format!("{}+", &token[..token.len() - 1]);
    assert_eq!(ring.open(&std_alphabet).err(), Some(OpenError::Malformed));
    // 31 bytes: shorter than kid + nonce + tag.
    let short = format!("v1.{}", URL_SAFE_NO_PAD.encode_to_string([0u8; 31]));
    assert_eq!(ring.open(&short).err(), Some(OpenError::Malformed));
}

#[test]
fn non_canonical_trailing_bits_do_not_open() {
    let ring = KeyRing::from_secrets(&[A], "t").unwrap();
    // 4 + 12 + 2 + 16 = 34 raw bytes: 46 characters whose last one has 4 unused bits;
    // a sibling spelling that differs only there must be refused.
    let token = ring.seal("xy");
    assert_eq!(token.len(), 3 + 46);
    let last = token.chars().last().unwrap();
    let idx = base64_index(last);
    let sibling = base64_char(idx ^ 1);
    let forged = format!("{}{}", &token[..token.len() - 1], sibling);
    assert_eq!(ring.open(&forged).err(), Some(OpenError::Malformed));
}

#[test]
fn tampering_and_wrong_key() {
    let ring = KeyRing::from_secrets(&[A], "t").unwrap();
    let mut raw = URL_SAFE_NO_PAD
        .decode_to_vec(&ring.seal("hello")[3..])
        .unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    let forged = format!("v1.{}", URL_SAFE_NO_PAD.encode_to_string(&raw));
    assert_eq!(ring.open(&forged).err(), Some(OpenError::Tampered));
    // Same kid bytes, different key: a forged kid with a foreign key cannot open.
    let other = KeyRing::from_secrets(&[B], "t").unwrap();
    let mut raw = URL_SAFE_NO_PAD
        .decode_to_vec(&other.seal("hello")[3..])
        .unwrap();
    raw[..KID_LEN].copy_from_slice(&ring.keys[0].kid);
    let moved = format!("v1.{}", URL_SAFE_NO_PAD.encode_to_string(&raw));
    assert_eq!(ring.open(&moved).err(), Some(OpenError::Tampered));
}

#[test]
fn wrong_aad_does_not_open() {
    let ring = KeyRing::from_secrets(&[A], "t").unwrap();
    let key = &ring.keys[0];
    let nonce = [7u8; NONCE_LEN];
    let mut raw = key.kid.to_vec();
    raw.extend_from_slice(&nonce);
    raw.extend_from_slice(b"hello");
    let tag = key
        .cipher
        .encrypt_inout_detached(
            &Nonce::from(nonce),
            b"v0.xxxx",
            (&mut raw[TOKEN_ID_LEN..]).into(),
        )
        .unwrap();
    raw.extend_from_slice(&tag);
    let token = format!("v1.{}", URL_SAFE_NO_PAD.encode_to_string(&raw));
    assert_eq!(ring.open(&token).err(), Some(OpenError::Tampered));
}

#[test]
fn key_file_parsing() {
    let file = format!("# rotation phase 2\n\n{B}\r\n  # old key below\n{A}\n");
    let ring = KeyRing::parse(file.as_bytes(), "keys").unwrap();
    assert_eq!(ring.key_ids().len(), 2);
    let only_b = KeyRing::from_secrets(&[B], "t").unwrap();
    assert_eq!(ring.key_ids()[0], only_b.key_ids()[0]);

    let err = KeyRing::parse(format!("{A}\nshort\n").as_bytes(), "keys").unwrap_err();
    assert_eq!(
        err,
        KeyRingError::TooShort {
            origin: "keys".into(),
            line: 2,
            len: 5
        }
    );
    assert!(!err.to_string().contains("short\n"));

    let err = KeyRing::parse(format!("{A}\n# c\n{A}\n").as_bytes(), "keys").unwrap_err();
    assert_eq!(
        err,
        KeyRingError::Duplicate {
            origin: "keys".into(),
            line: 3,
            first: 1
        }
    );
    assert!(!err.to_string().contains(A));

    let err = KeyRing::parse(format!(" {A}\n").as_bytes(), "keys").unwrap_err();
    assert_eq!(
        err,
        KeyRingError::Whitespace {
            origin: "keys".into(),
            line: 1
        }
    );
    assert!(!err.to_string().contains(A));

    let err = KeyRing::parse(b"# only a comment\n\n", "keys").unwrap_err();
    assert_eq!(
        err,
        KeyRingError::Empty {
            origin: "keys".into()
        }
    );

    let mut bad = A.as_bytes().to_vec();
    bad.push(0xff);
    assert_eq!(
        KeyRing::parse(&bad, "keys").unwrap_err(),
        KeyRingError::NotUtf8 {
            origin: "keys".into(),
            line: 1
        }
    );
}

#[test]
fn derived_key_is_pinned() {
    // The reference vectors' secret: 00..1f as hex text. Expected bytes from Python's
    // `cryptography` HKDF, as `mcp/server/request_state.py` derives them.
    let secret = hex::encode((0u8..32).collect::<Vec<u8>>());
    let key = derive_key(secret.as_bytes());
    assert_eq!(
        hex::encode(*key),
        "07b7c464896fcee1cc5f28074f8293c34745377bd4c7487b71198c3681d6e64a"
    );
    assert_eq!(hex::encode(key_id(&key)), "a4e03f3e");
}

#[test]
fn derived_key_matches_hkdf_expand() {
    // The one-block expansion written out in `derive_key` is HKDF-Expand, for any secret.
    for secret in [
        A.as_bytes(),
        B.as_bytes(),
        &[0xffu8; 200][..],
        &[0u8; 32][..],
    ] {
        let mut expected = [0u8; 32];
        Hkdf::<Sha256>::new(None, secret)
            .expand(KDF_INFO, &mut expected)
            .unwrap();
        assert_eq!(*derive_key(secret), expected);
    }
}

#[test]
fn key_derivation_state_wipes_itself() {
    // Compiles only while the `zeroize` features of `hmac` and `sha2` are on. `Hmac`
    // carries no `ZeroizeOnDrop` marker of its own; its parts wipe themselves: the
    // inner and outer SHA-256 states keyed with the PRK, and its block buffer.
    use hmac::block_api::HmacCore;
    use hmac::digest::block_api::{Buffer, CoreProxy};
    fn zeroize_on_drop<T: zeroize::ZeroizeOnDrop>() {}
    zeroize_on_drop::<<Sha256 as CoreProxy>::Core>();
    zeroize_on_drop::<Buffer<HmacCore<Sha256>>>();
    zeroize_on_drop::<hmac::digest::CtOutput<Hmac<Sha256>>>();
}

#[test]
fn debug_shows_only_key_ids() {
    let ring = KeyRing::from_secrets(&[A], "t").unwrap();
    let shown = format!("{ring:?}");
    assert!(shown.contains(&ring.key_ids()[0]));
    assert!(!shown.contains("0123456789abcdef"));
}

#[test]
fn generated_secrets_are_64_hex_and_distinct() {
    let a = generate_secret();
    let b = generate_secret();
    assert_eq!(a.len(), 64);
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(*a, *b);
    KeyRing::from_secrets(&[a.as_bytes()], "t").unwrap();
}

fn base64_index(c: char) -> u8 {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    ALPHABET.iter().position(|&a| a == c as u8).unwrap() as u8
}

fn base64_char(i: u8) -> char {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    ALPHABET[i as usize] as char
}
