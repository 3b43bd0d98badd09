//! A string that carries a JSON text (an upstream's state, the `s` claim that holds it)
//! has an escape every few bytes: `{\"k\":\"provision\",...`. Read one escape at a time,
//! each costs a search, a look at the byte after the backslash, and another search.
//! [`pass_escaped`] reads such a string sixteen bytes a step instead: a block's
//! backslashes, quotes and control bytes as masks (SSE2), the bytes its backslashes
//! escape as those masks shifted by one, and its closing quote as the first quote no
//! backslash escapes.
//!
//! Invariant: it passes only what a reading one byte at a time would pass the same way:
//! blocks whose escapes are all two bytes long, with an escaped byte the `rules` take,
//! and that hold no byte the rules stop at. At anything else (a `\u` escape, `\\`, a
//! control byte, a block with nothing special in it, fewer than sixteen bytes left, a
//! target without SSE2) it stops, at the start of the block it could not pass, and the
//! caller reads on one special byte at a time from there.

/// What a reading of string tokens takes as it passes them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rules {
    /// The strict reading: any of JSON's two-byte escapes (`\" \\ \/ \b \f \n \r \t`).
    Json,
    /// The reference's spelling (what Python's `json.dumps` writes, `ensure_ascii`): its
    /// two-byte escapes (no `\/`), and no byte of 0x7f or more.
    Python,
}

/// Where [`pass_escaped`] ended, and how many escapes it passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Passed {
    /// At the string's closing quote.
    Quote { at: usize, escapes: usize },
    /// At the start of a block it could not pass whole: no byte there is escaped.
    Stopped { at: usize, escapes: usize },
}

/// From `at` inside a string token (a place no backslash escapes), pass the blocks of
/// sixteen bytes that `rules` pass as wholes (see the module's invariant).
#[inline]
pub(crate) fn pass_escaped(bytes: &[u8], mut at: usize, rules: Rules) -> Passed {
    let mut escapes = 0;
    loop {
        let Some(block) = Block::read(bytes, at) else {
            return Passed::Stopped { at, escapes };
        };
        let stops = block.controls
            | match rules {
                Rules::Json => 0,
                Rules::Python => block.high,
            };
        let backslashes = block.backslashes;
        // Nothing special (the caller's search passes plain bytes faster), or `\\`
        // (which backslash escapes which is then a matter of counting).
        if (block.quotes | backslashes | stops) == 0 || (backslashes & (backslashes << 1)) != 0 {
            return Passed::Stopped { at, escapes };
        }
        // A backslash as the block's last byte escapes the next block's first: the block
        // ends before it.
        let len = if backslashes & (1 << 15) != 0 { 15 } else { 16 };
        let escaped = backslashes << 1;
        let ends = block.quotes & !escaped & low_bits(len);
        let upto = if ends != 0 {
            ends.trailing_zeros()
        } else {
            len
        };
        let inside = low_bits(upto);
        // Every backslash before `upto` escapes a byte before it (one escaping the quote
        // at `upto` would have made it no end).
        let escaped = escaped & inside;
        if stops & inside != 0 || (escaped != 0 && escaped & !block.taken(rules) != 0) {
            return Passed::Stopped { at, escapes };
        }
        escapes += escaped.count_ones() as usize;
        if ends != 0 {
            return Passed::Quote {
                at: at + upto as usize,
                escapes,
            };
        }
        at += len as usize;
    }
}

/// The bytes of the sixteen at `at` a string token cannot simply hold (a quote, a
/// backslash, a control byte), as a mask (bit `i`: byte `at + i`); `None` when fewer than
/// sixteen are left, or the target has no SSE2. The lexer's first look into a string: the
/// same block [`pass_escaped`] reads, so both readings class a byte the same way.
#[inline(always)]
pub(crate) fn specials16(bytes: &[u8], at: usize) -> Option<u32> {
    Block::read(bytes, at).map(|block| block.quotes | block.backslashes | block.controls)
}

/// Bits `0..n` set (`n` ≤ 16).
fn low_bits(n: u32) -> u32 {
    (1 << n) - 1
}

/// The sixteen bytes at a place, one bit a byte (bit `i`: the `i`-th byte).
struct Block {
    quotes: u32,
    backslashes: u32,
    /// Below 0x20.
    controls: u32,
    /// 0x7f or more.
    high: u32,
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    bytes: safe_arch::m128i,
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
impl Block {
    /// The sixteen bytes at `at`; `None` when fewer are left.
    #[inline(always)]
    fn read(bytes: &[u8], at: usize) -> Option<Block> {
        use safe_arch::{
            cmp_eq_mask_i8_m128i, cmp_gt_mask_i8_m128i, load_unaligned_m128i, min_u8_m128i,
            move_mask_i8_m128i,
        };
        let block: &[u8; 16] = bytes.get(at..)?.first_chunk()?;
        let v = load_unaligned_m128i(block);
        let mask = |m| move_mask_i8_m128i(m) as u32;
        Some(Block {
            quotes: mask(cmp_eq_mask_i8_m128i(v, splat(b'"'))),
            backslashes: mask(cmp_eq_mask_i8_m128i(v, splat(b'\\'))),
            controls: mask(cmp_eq_mask_i8_m128i(min_u8_m128i(v, splat(0x1f)), v)),
            // Signed: 0x80 and above are negative, so only 0x7f is greater than 0x7e.
            high: mask(v) | mask(cmp_gt_mask_i8_m128i(v, splat(0x7e))),
            bytes: v,
        })
    }

    /// The bytes `rules` take after a backslash in a two-byte escape.
    #[inline(always)]
    fn taken(&self, rules: Rules) -> u32 {
        use safe_arch::{bitor_m128i, cmp_eq_mask_i8_m128i, move_mask_i8_m128i};
        let v = self.bytes;
        let is = |byte: u8| cmp_eq_mask_i8_m128i(v, splat(byte));
        let common = [b'\\', b'b', b'f', b'n', b'r', b't']
            .into_iter()
            .fold(is(b'"'), |taken, byte| bitor_m128i(taken, is(byte)));
        let taken = match rules {
            Rules::Json => bitor_m128i(common, is(b'/')),
            Rules::Python => common,
        };
        move_mask_i8_m128i(taken) as u32
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn splat(byte: u8) -> safe_arch::m128i {
    safe_arch::set_splat_i8_m128i(byte as i8)
}

/// Without SSE2 no block is read: every string is read one special byte at a time.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
impl Block {
    #[inline(always)]
    fn read(_: &[u8], _: usize) -> Option<Block> {
        None
    }

    fn taken(&self, _: Rules) -> u32 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Rng;
    use proptest::test_runner::{RngAlgorithm, TestRng};

    /// What a reading one byte at a time says of the string from `at` (a place no
    /// backslash escapes), as far as [`pass_escaped`] may go: the closing quote and the
    /// escapes before it, or `None` where it must stop (a byte `rules` stop at, an
    /// escape they do not pass whole, the text's end).
    fn bytewise(bytes: &[u8], mut at: usize, rules: Rules) -> Option<(usize, usize)> {
        let mut escapes = 0;
        loop {
            match *bytes.get(at)? {
                b'"' => return Some((at, escapes)),
                b'\\' => {
                    let taken: &[u8] = match rules {
                        Rules::Json => b"\"\\/bfnrt",
                        Rules::Python => b"\"\\bfnrt",
                    };
                    if !taken.contains(bytes.get(at + 1)?) {
                        return None;
                    }
                    escapes += 1;
                    at += 2;
                }
                b if b < 0x20 => return None,
                b if b >= 0x7f && rules == Rules::Python => return None,
                _ => at += 1,
            }
        }
    }

    /// Whatever the bytes, what it passes agrees with the reading one byte at a time:
    /// a quote it ends at is that reading's closing quote with its escapes; a place it
    /// stops at is a block's start that reading reaches with the escapes counted, and no
    /// byte there is escaped.
    fn agrees(bytes: &[u8], from: usize, rules: Rules) {
        let whole = bytewise(bytes, from, rules);
        match pass_escaped(bytes, from, rules) {
            Passed::Quote { at, escapes } => {
                assert_eq!(Some((at, escapes)), whole, "{bytes:?} from {from}");
            }
            Passed::Stopped { at, escapes } => {
                // The same reading to `at` passes exactly `escapes` escapes and lands on it.
                let mut prefix = bytes[..at].to_vec();
                prefix.push(b'"');
                assert_eq!(
                    bytewise(&prefix, from, rules),
                    Some((at, escapes)),
                    "{bytes:?} from {from}: stopped at {at}"
                );
            }
        }
    }

    #[test]
    fn a_state_carried_as_a_string_is_passed_by_blocks() {
        let state = br#"{\"k\":\"provision\",\"name\":\"web-1\",\"r\":1,\"tier\":\"free\",\"owner\":\"team-a\"}""#;
        let end = state.len() - 1;
        for rules in [Rules::Json, Rules::Python] {
            // The rest of the answer after it: the last block is read whole.
            let answer = [&state[..], b"}} and the rest of the answer"].concat();
            assert_eq!(
                pass_escaped(&answer, 0, rules),
                Passed::Quote {
                    at: end,
                    escapes: 18
                }
            );
            // At the text's end, its last bytes (fewer than sixteen) are left.
            match pass_escaped(state, 0, rules) {
                Passed::Stopped { at, escapes } => {
                    assert!(state.len() - at < 16 && escapes >= 14, "{at} {escapes}");
                }
                passed => panic!("{passed:?}"),
            }
            agrees(&answer, 0, rules);
            agrees(state, 0, rules);
        }
    }

    #[test]
    fn it_stops_where_a_byte_needs_a_second_look() {
        let cases: [&[u8]; 7] = [
            br#"abc\u00e9 and some more text""#,
            br#"abc\\ and some more text here""#,
            b"abc\x01 and some more text here\"",
            br#"abc\/ and some more text here""#,
            "abc\u{e9} and some more text here\"".as_bytes(),
            b"abc\x7f and some more text here\"",
            br#"abc\q and some more text here""#,
        ];
        for bytes in cases {
            for rules in [Rules::Json, Rules::Python] {
                agrees(bytes, 0, rules);
            }
        }
        // `\/` passes the strict reading, and not the reference's spelling.
        let slash = br#"abc\/ and more" and the bytes after it"#;
        assert_eq!(
            pass_escaped(slash, 0, Rules::Json),
            Passed::Quote { at: 14, escapes: 1 }
        );
        assert_eq!(
            pass_escaped(slash, 0, Rules::Python),
            Passed::Stopped { at: 0, escapes: 0 }
        );
    }

    /// Strings of the bytes that matter, from a few offsets, against the reading one
    /// byte at a time.
    #[test]
    fn it_agrees_with_the_reading_one_byte_at_a_time() {
        let alphabet = [b'a', b'"', b'\\', b'n', b'u', b'/', 0x01, 0x7f, 0xc3, b'0'];
        // The same draws on every run (proptest's fixed seed).
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut next = move || rng.next_u64();
        for _ in 0..20_000 {
            let len = (next() % 48) as usize;
            // Mostly plain bytes, as a state is: one in four drawn from the rest.
            let body: Vec<u8> = (0..len)
                .map(|_| match next() % 4 {
                    0 => alphabet[(next() % alphabet.len() as u64) as usize],
                    1 => b'\\',
                    _ => b'a',
                })
                .collect();
            for from in 0..3 {
                // `from` plain bytes first: every offset of the blocks.
                let mut bytes = vec![b'a'; from];
                bytes.extend_from_slice(&body);
                for rules in [Rules::Json, Rules::Python] {
                    agrees(&bytes, from, rules);
                }
            }
        }
    }
}
