//! Printable, clipped text: what reaches a log line (or an error message) from a client,
//! on the ground floor (the gate, the errors, the policies and the audit record all
//! write client text, and this imports nothing of the crate); and bytes read as text
//! ([`utf8`]).
//!
//! Invariant: client-supplied text (a JSON-RPC `method`, a refused key, an HTTP method)
//! is written only through [`printable`] or [`Clipped`]: printable ASCII as is, anything
//! else (and `\`) escaped as `\u{..}`, so it cannot forge a line, a field or a terminal
//! control sequence, and cut to a byte bound, so a 4 MB `method` costs the log a few
//! hundred bytes, not 4 MB.

use std::fmt;

/// `bytes` in lowercase hexadecimal, as `hex::encode` writes them but without its
/// iterator of characters (pushed one by one into a `String`: about forty instructions a
/// byte where this takes a few). The names a request computes (a consumption, a share's
/// owner, a release mark, an idempotency record, an audit digest) are written here.
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    let mut out = vec![0u8; 2 * bytes.len()];
    hex::encode_to_slice(bytes, &mut out).expect("twice as many digits as bytes");
    String::from_utf8(out).expect("hexadecimal digits are ASCII")
}

/// `bytes` as text when they are UTF-8: exactly `std::str::from_utf8`'s verdict, checked
/// in 64-byte blocks (simdutf8) where std takes a word and a branch per byte past ASCII
/// (under 64 bytes simdutf8 hands them to std). What arrives whole and is read as text
/// goes through here: a body, an answer, an opened token's claims, a header beyond ASCII.
pub(crate) fn utf8(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

/// The most bytes of one client-supplied string that reach a log line (after escaping).
pub(crate) const MAX_LOGGED_BYTES: usize = 256;

/// `text` escaped to printable ASCII and cut to at most `max_bytes` (plus `...` when
/// cut), never splitting an escape.
pub fn printable(text: &str, max_bytes: usize) -> String {
    let (mut out, cut) = escape(text, max_bytes);
    if cut {
        out.push_str("...");
    }
    out
}

/// The escaped prefix of `text` within `max_bytes`, and whether anything was cut.
fn escape(text: &str, max_bytes: usize) -> (String, bool) {
    // Most client text is short and printable: one allocation of its own size.
    let mut out = String::with_capacity(text.len().min(max_bytes) + 8);
    for c in text.chars() {
        let start = out.len();
        if c.is_ascii_graphic() && c != '\\' || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_unicode());
        }
        if out.len() > max_bytes {
            out.truncate(start);
            return (out, true);
        }
    }
    (out, false)
}

/// Client text as it may appear in a log: [`printable`] within [`MAX_LOGGED_BYTES`], and
/// how many bytes of it were left out.
#[derive(Clone, Copy)]
pub struct Clipped<'a>(pub &'a str);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match escape(self.0, MAX_LOGGED_BYTES) {
            (shown, true) => write!(f, "{shown}...(of {} bytes)", self.0.len()),
            (shown, false) => f.write_str(&shown),
        }
    }
}

impl fmt::Debug for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_what_the_hex_crate_writes() {
        for len in [0usize, 1, 8, 16, 32, 33] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(hex_lower(&bytes), hex::encode(&bytes), "{len} bytes");
        }
        let every: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_lower(&every), hex::encode(&every));
    }

    /// simdutf8 checks 64 bytes a step past 64 and hands shorter inputs to std: every
    /// kind of bad sequence (a stray continuation, a truncated lead, an overlong form, a
    /// surrogate, past U+10FFFF) at every offset around those steps, and random bytes,
    /// get std's verdict.
    #[test]
    fn utf8_answers_what_std_answers() {
        let bad: [&[u8]; 8] = [
            b"\x80",
            b"\xc3",
            b"\xe2\x82",
            b"\xc0\x80",
            b"\xe0\x80\x80",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xff",
        ];
        let good = "a\u{e9}\u{20ac}\u{1f600}".as_bytes();
        for len in [0usize, 1, 31, 32, 63, 64, 65, 127, 128, 200] {
            for at in 0..=len {
                let mut text: Vec<u8> = good.iter().copied().cycle().take(len).collect();
                assert_eq!(utf8(&text).is_some(), std::str::from_utf8(&text).is_ok());
                for sequence in bad {
                    text.splice(at..at, sequence.iter().copied());
                    assert_eq!(
                        utf8(&text).is_some(),
                        std::str::from_utf8(&text).is_ok(),
                        "{len} bytes, {sequence:x?} at {at}"
                    );
                    text.drain(at..at + sequence.len());
                }
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2_000usize {
            let bytes: Vec<u8> = (0..len % 300)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Mostly ASCII with some high bytes, as text with a few errors is.
                    let b = (seed >> 24) as u8;
                    if seed.is_multiple_of(11) { b } else { b & 0x7f }
                })
                .collect();
            assert_eq!(utf8(&bytes), std::str::from_utf8(&bytes).ok(), "{bytes:x?}");
        }
    }

    #[test]
    fn client_text_is_escaped_and_bounded() {
        assert_eq!(Clipped("tools/call").to_string(), "tools/call");
        assert_eq!(
            Clipped("a\nlevel=error msg=\"forged\"").to_string(),
            "a\\u{a}level=error msg=\"forged\""
        );
        let huge = "m".repeat(4 * 1024 * 1024);
        let logged = Clipped(&huge).to_string();
        assert!(logged.len() < MAX_LOGGED_BYTES + 32, "{}", logged.len());
        assert!(logged.ends_with(&format!("...(of {} bytes)", huge.len())));
        // Escapes count against the bound: a flood of bidi overrides stays small.
        let bidi = "\u{202e}".repeat(100_000);
        assert!(Clipped(&bidi).to_string().len() < MAX_LOGGED_BYTES + 32);
        assert_eq!(format!("{:?}", Clipped("x")), "\"x\"");
        assert_eq!(Clipped("ends...").to_string(), "ends...");
    }

    #[test]
    fn printable_escapes_everything_but_printable_ascii() {
        assert_eq!(printable("a\\b c\u{0}\n", 64), r"a\u{5c}b c\u{0}\u{a}");
        let long = printable(&"\u{202e}".repeat(100), 64);
        assert!(long.len() <= 67 && long.ends_with("..."), "{long}");
        assert!(!long.contains('\u{202e}'));
        assert_eq!(printable(&"x".repeat(64), 64), "x".repeat(64));
        assert_eq!(printable("reque\u{17f}tState", 64), r"reque\u{17f}tState");
    }
}
