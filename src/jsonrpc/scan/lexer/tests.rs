//! The lexer's own tests: its special bytes, blocks and strings against their definitions
//! and serde_json's verdicts.

use super::*;

/// Every byte at every place of a block, among the bytes that come closest to
/// special ones, and two special bytes at once: the mask marks exactly the special
/// bytes, as the table does; fewer than sixteen bytes left is `None`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn specials16_marks_exactly_the_special_bytes() {
    let expected = |block: &[u8]| {
        (block.iter().enumerate())
            .filter(|&(_, &b)| SPECIAL[usize::from(b)])
            .fold(0u32, |mask, (i, _)| mask | 1 << i)
    };
    for filler in [
        b'a', 0x20, b'!', b'#', b'[', b']', 0x7f, 0x80, 0x9f, 0xc3, 0xff,
    ] {
        for byte in 0..=u8::MAX {
            for at in 0..16 {
                let mut block = [filler; 17];
                block[at] = byte;
                block[(at + 7) % 16] = b'\\';
                for from in [0, 1] {
                    assert_eq!(
                        specials16(&block, from),
                        Some(expected(&block[from..from + 16])),
                        "byte {byte:#04x} at {at} in {filler:#04x}s, from {from}"
                    );
                }
            }
        }
    }
    assert_eq!(specials16(&[b'a'; 16], 1), None);
    assert_eq!(specials16(&[b'"'; 15], 0), None);
}

/// Strings dense with escapes (a state carried as JSON text), one at every place of
/// the sixteen-byte blocks the escapes are read from, escapes reaching past a
/// block's end, and bad escapes and raw bytes among them: the lexer accepts exactly
/// what serde_json reads as a string, and ends the token where it ends.
#[test]
fn escape_dense_strings_read_as_serde_json_reads_them() {
    const PIECES: [&str; 14] = [
        "a",
        "\\\"",
        "\\\\",
        "\\n",
        "\\/",
        "\\u00e9",
        "\\ud83d\\ude00",
        "é",
        "bcdefgh",
        "\\x",
        "\\ud800",
        "\\udc00x",
        "\u{1}",
        "\\u12",
    ];
    // A fixed sequence of choices (an LCG), so a failure names its case again.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) as usize % n
    };
    for case in 0..20_000 {
        let mut inner = "x".repeat(next(20));
        let good = 1 + next(24);
        for _ in 0..good {
            // Bad pieces (the last five) rarely, so most strings are long and good.
            let piece = if next(12) == 0 { next(14) } else { next(9) };
            inner.push_str(PIECES[piece]);
        }
        let token = format!("\"{inner}\" ");
        let expected = serde_json::from_str::<String>(&token[..token.len() - 1]).is_ok();
        let mut lexer = Lexer::new(&token);
        match lexer.string() {
            Ok((span, escaped)) => {
                assert!(expected, "case {case}: accepted {token}");
                assert_eq!(span, Span::new(0, token.len() - 1), "case {case}: {token}");
                assert_eq!(escaped, inner.contains('\\'), "case {case}: {token}");
            }
            Err(NotJson) => assert!(!expected, "case {case}: refused {token}"),
        }
    }
}

#[test]
fn a_text_too_long_for_a_span_is_no_json() {
    let token = "\"ab\"";
    let mut fits = Lexer::within(token, token.len());
    assert_eq!(fits.string(), Ok((Span::new(0, 4), false)));
    assert!(fits.is_done());
    let mut over = Lexer::within(token, token.len() - 1);
    assert_eq!(over.string(), Err(NotJson));
    assert_eq!((over.at(), over.peek()), (0, None));
}

#[test]
fn first_special_finds_every_special_byte_wherever_it_stands() {
    let special = |b: u8| SPECIAL[usize::from(b)];
    let first = |bytes: &[u8], from: usize| {
        (from
            + bytes[from..]
                .iter()
                .position(|&b| special(b))
                .unwrap_or(bytes.len() - from))
        .min(bytes.len())
    };
    // Every byte at every place of two words and a tail, after plain bytes and after
    // the bytes that come closest to special ones (0x20, 0x21, 0x23, 0x5b, 0x5d,
    // 0x80 and up), from every starting place.
    for filler in [b'a', 0x20, b'!', b'#', b'[', b']', 0x80, 0xc3, 0xff] {
        for byte in 0..=u8::MAX {
            for at in 0..19 {
                let mut bytes = vec![filler; 19];
                bytes[at] = byte;
                for from in [0, 1, 7, 8, 11] {
                    let expected = first(&bytes, from);
                    assert_eq!(
                        first_special(&bytes, from),
                        expected,
                        "byte {byte:#04x} at {at} in {filler:#04x}s, from {from}"
                    );
                }
            }
        }
    }
    // Two special bytes in one word: the first is found, whichever test finds it.
    for (a, b) in [(b'"', b'\\'), (b'\\', 0x00), (0x1f, b'"'), (0x00, 0x1f)] {
        for i in 0..8 {
            for j in i + 1..8 {
                let mut bytes = [b'x'; 8];
                (bytes[i], bytes[j]) = (a, b);
                assert_eq!(
                    first_special(&bytes, 0),
                    i,
                    "{a:#04x} at {i}, {b:#04x} at {j}"
                );
            }
        }
    }
    assert_eq!(first_special(b"abc", 3), 3);
    assert_eq!(first_special(b"abc", 4), 4);
    // Past the short part of a string (the long search): every special byte and its
    // neighbours at every place of 200 bytes, alone and with a second special byte
    // before or after it, from places on either side of the switch.
    for filler in [b'a', 0x20, b'#', b']', 0xc3] {
        for byte in [b'"', b'\\', 0x00, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x80] {
            for at in 0..200 {
                for second in [None, Some((at / 2, 0x01)), Some(((at + 150) % 200, 0x0a))] {
                    let mut bytes = vec![filler; 200];
                    bytes[at] = byte;
                    if let Some((place, other)) = second {
                        bytes[place] = other;
                    }
                    for from in [0, 5, 63, 64, 130] {
                        assert_eq!(
                            first_special(&bytes, from),
                            first(&bytes, from),
                            "byte {byte:#04x} at {at}, {second:?}, in {filler:#04x}s, from {from}"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(first_special("ééééé\\".as_bytes(), 0), 10);
}

/// The word test of digits marks the first byte that is no digit exactly: every byte
/// value at every place of a word of digits, with every byte value above it (whose
/// carries and borrows must not reach below), and digits runs of every length read to
/// their end by the lexer.
#[test]
fn non_digits_marks_the_first_byte_that_is_no_digit() {
    for at in 0..8 {
        for byte in 0..=255u8 {
            for above in [b'0', b'9', b'/', b':', 0x00, 0x7f, 0x80, 0xb9, 0xba, 0xff] {
                let mut word = [b'5'; 8];
                word[at] = byte;
                if at < 7 {
                    word[at + 1..].fill(above);
                }
                let expected = word.iter().position(|b| !b.is_ascii_digit());
                let marks = non_digits(u64::from_le_bytes(word));
                let found = (marks != 0).then(|| (marks.trailing_zeros() / 8) as usize);
                assert_eq!(found, expected, "{word:?}");
            }
        }
    }
    for len in 1..40 {
        for tail in ["", ",", "]", "x", "é"] {
            let text = format!("{}{tail}", "7".repeat(len));
            let mut lexer = Lexer::new(&text);
            lexer.number().unwrap();
            assert_eq!(lexer.at(), len, "{text}");
        }
    }
}
