//! The tokens of JSON exactly as serde_json 1.x reads them (with `arbitrary_precision`):
//! whitespace is space, tab, LF and CR only; numbers follow RFC 8259's grammar (no
//! leading zero, a digit after `.` and after the exponent's sign) and are never
//! converted, so no literal is too big; strings refuse raw control characters, any
//! escape but the nine of RFC 8259, and a `\u` escape of a surrogate that is not a high
//! one followed at once by `\u` and a low one (serde_json refuses lone surrogates where
//! it decodes into a `str`, which is everywhere the strict parse reads a string).
//!
//! The lexer runs over text already checked to be UTF-8 (a non-ASCII byte outside a
//! string is not a token, so the whole body being UTF-8 is what serde_json's per-string
//! check adds up to). A failure carries no detail: the scanner's only syntax verdict is
//! [`ParseError::Syntax`](crate::jsonrpc::ParseError::Syntax).

use super::escapes::{Passed, Rules, pass_escaped, specials16};
use std::borrow::Cow;

/// Not JSON. (Where serde_json would say why, the verdict is the same for every cause.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NotJson;

/// The bytes a string token cannot simply hold: its closing quote, an escape's backslash,
/// and the raw control characters JSON forbids in it.
const SPECIAL: [bool; 256] = {
    let mut special = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        special[byte] = true;
        byte += 1;
    }
    special[b'"' as usize] = true;
    special[b'\\' as usize] = true;
    special
};

/// `start..end` into the scanned bytes, as two `u32`s: the scans refuse a text of
/// 4 GiB or more ([`MAX_TEXT`]), and half the size halves what a scan's facts and index
/// move and clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    start: u32,
    end: u32,
}

/// The longest text a scan reads: its places fit a [`Span`].
pub(crate) const MAX_TEXT: usize = u32::MAX as usize;

impl Span {
    /// The span `start..end` of a text no longer than [`MAX_TEXT`].
    #[inline]
    pub(crate) fn new(start: usize, end: usize) -> Self {
        debug_assert!(start <= end && end <= MAX_TEXT);
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    #[inline]
    pub(crate) fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    /// The inside of a string token's span: the bytes between its quotes.
    #[inline]
    pub(crate) fn inside(self) -> std::ops::Range<usize> {
        self.start as usize + 1..self.end as usize - 1
    }
}

/// A cursor over one UTF-8 body.
pub(super) struct Lexer<'a> {
    text: &'a str,
    at: usize,
    /// The whitespace skipped between tokens, in order: what a compact copy leaves out.
    gaps: Vec<Span>,
}

impl<'a> Lexer<'a> {
    /// A lexer over `text`. A text longer than [`MAX_TEXT`] (whose places would not fit
    /// a [`Span`]) is read as no text at all: every scan refuses it as not JSON, where
    /// the tree path would parse it (only limits set above 4 GiB let such a body or
    /// answer be read whole).
    pub(crate) fn new(text: &'a str) -> Self {
        Self::within(text, MAX_TEXT)
    }

    /// [`Lexer::new`] with `longest` for [`MAX_TEXT`] (so the refusal can be tested).
    fn within(text: &'a str, longest: usize) -> Self {
        Lexer {
            text: if text.len() <= longest { text } else { "" },
            at: 0,
            gaps: Vec::new(),
        }
    }

    /// The whitespace runs skipped so far (none allocated for a compact body).
    pub(crate) fn into_gaps(self) -> Vec<Span> {
        self.gaps
    }

    pub(crate) fn at(&self) -> usize {
        self.at
    }

    pub(crate) fn is_done(&self) -> bool {
        self.at == self.text.len()
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Pass the whitespace at the cursor, if any (a compact body has none: one byte
    /// above the space answers that, with no loop).
    #[inline(always)]
    pub(crate) fn skip_whitespace(&mut self) {
        if self.peek().is_some_and(|b| b > b' ') {
            return;
        }
        self.skip_whitespace_run();
    }

    fn skip_whitespace_run(&mut self) {
        let start = self.at;
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
        if self.at > start {
            self.gaps.push(Span::new(start, self.at));
        }
    }

    /// Pass `len` bytes the caller has read itself (ASCII, so a character boundary follows).
    pub(crate) fn advance(&mut self, len: usize) {
        self.at = (self.at + len).min(self.text.len());
    }

    /// Consume `byte`, which must be next.
    pub(crate) fn expect(&mut self, byte: u8) -> Result<(), NotJson> {
        if self.peek() != Some(byte) {
            return Err(NotJson);
        }
        self.at += 1;
        Ok(())
    }

    /// `true`, `false` or `null`: `word` must be next.
    pub(crate) fn literal(&mut self, word: &str) -> Result<(), NotJson> {
        if !self.text[self.at..].starts_with(word) {
            return Err(NotJson);
        }
        self.at += word.len();
        Ok(())
    }

    /// A string token from its opening quote: its span (quotes included) and whether it
    /// holds an escape (without one, its text is the bytes between the quotes).
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Result<(Span, bool), NotJson> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        if bytes.get(start) != Some(&b'"') {
            return Err(NotJson);
        }
        // Most strings end, unescaped, within their first bytes: read here, with no
        // call on the way (so none of a call's setup either).
        let at = short_special(bytes, start + 1);
        if bytes.get(at) == Some(&b'"') {
            self.at = at + 1;
            return Ok((Span::new(start, at + 1), false));
        }
        self.string_rest(start, at)
    }

    /// The rest of a string whose first bytes held an escape or did not end it (or
    /// something that is no string), from `at`: escaped stretches by blocks
    /// ([`pass_escaped`]), anything else one special byte at a time.
    #[inline(never)]
    fn string_rest(&mut self, start: usize, mut at: usize) -> Result<(Span, bool), NotJson> {
        let bytes = self.text.as_bytes();
        let mut escaped = false;
        loop {
            match pass_escaped(bytes, at, Rules::Json) {
                Passed::Quote { at, escapes } => {
                    self.at = at + 1;
                    return Ok((Span::new(start, self.at), escaped || escapes > 0));
                }
                Passed::Stopped { at: stop, escapes } => {
                    escaped |= escapes > 0;
                    at = first_special(bytes, stop);
                }
            }
            match bytes.get(at) {
                Some(b'"') => {
                    self.at = at + 1;
                    return Ok((Span::new(start, self.at), escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    self.at = at + 1;
                    self.escape()?;
                    at = self.at;
                }
                _ => return Err(NotJson),
            }
        }
    }

    /// The escape after a backslash.
    fn escape(&mut self) -> Result<(), NotJson> {
        let byte = self.peek().ok_or(NotJson)?;
        self.at += 1;
        match byte {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Ok(()),
            b'u' => match self.hex4()? {
                0xDC00..=0xDFFF => Err(NotJson),
                0xD800..=0xDBFF => {
                    self.expect(b'\\')?;
                    self.expect(b'u')?;
                    match self.hex4()? {
                        0xDC00..=0xDFFF => Ok(()),
                        _ => Err(NotJson),
                    }
                }
                _ => Ok(()),
            },
            _ => Err(NotJson),
        }
    }

    fn hex4(&mut self) -> Result<u32, NotJson> {
        let digits = self
            .text
            .as_bytes()
            .get(self.at..self.at + 4)
            .ok_or(NotJson)?;
        self.at += 4;
        hex4(digits).ok_or(NotJson)
    }

    /// A number token from its first byte (`-` or a digit).
    pub(crate) fn number(&mut self) -> Result<(), NotJson> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(NotJson),
        }
        // After a leading zero, a digit is neither a fraction nor the end of the number:
        // serde_json refuses it here rather than as a trailing character, same verdict.
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digit()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digit()?;
        }
        Ok(())
    }

    /// At least one digit.
    fn digit(&mut self) -> Result<(), NotJson> {
        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return Err(NotJson);
        }
        self.digits();
        Ok(())
    }

    /// Pass the digits at the cursor: eight bytes a step ([`non_digits`]), the last
    /// few one at a time.
    fn digits(&mut self) {
        let bytes = self.text.as_bytes();
        let mut at = self.at;
        while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
            let marks = non_digits(u64::from_le_bytes(*word));
            if marks != 0 {
                self.at = at + (marks.trailing_zeros() / 8) as usize;
                return;
            }
            at += 8;
        }
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        self.at = at;
    }
}

/// The bytes of `word` (little-endian) that are no ASCII digit, as high bits: zero
/// exactly when all eight are digits, and the lowest bit set marks the first that is
/// not. A byte above `9` (below 0x80) gains the high bit when 0x46 is added, one below
/// `0` when 0x30 is taken away, and a byte of 0x80 or more by one of the two; the
/// carries and borrows between bytes start only at a byte that is no digit, so they can
/// mark wrongly only above the first.
fn non_digits(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    (word.wrapping_add(ONES * 0x46) | word.wrapping_sub(ONES * 0x30)) & HIGHS
}

/// The position of the first byte at or after `at` that a string token cannot simply
/// hold (`"`, `\` or a control character), or the length when there is none: sixteen or
/// eight bytes a step ([`short_special`]), the last few one at a time.
/// Past [`SHORT_STRING`] bytes, the rest of a long string (a token, a document carried
/// as text) is searched by [`long_special`] instead.
fn first_special(bytes: &[u8], at: usize) -> usize {
    let at = short_special(bytes, at);
    match bytes.get(at) {
        Some(&b) if !SPECIAL[usize::from(b)] => long_special(bytes, at),
        _ => at,
    }
}

/// In text the lexer accepted, the first quote or backslash at or after `at` inside a
/// string token (the length when there is none): a short string's end is found inline,
/// with no call, a long one's by a vectorised search for the two bytes (such a string
/// holds no raw control byte, which [`first_special`] would also look for).
#[inline(always)]
pub(super) fn scanned_special(bytes: &[u8], at: usize) -> usize {
    let at = short_special(bytes, at);
    match bytes.get(at) {
        Some(&b) if !SPECIAL[usize::from(b)] => long_quote_or_backslash(bytes, at),
        _ => at,
    }
}

/// [`scanned_special`] past a string's first bytes: out of line, so what is inlined is
/// the short search alone.
#[inline(never)]
fn long_quote_or_backslash(bytes: &[u8], at: usize) -> usize {
    at + memchr::memchr2(b'"', b'\\', &bytes[at..]).unwrap_or(bytes.len() - at)
}

/// The first special byte within [`SHORT_STRING`] bytes of `at` (sixteen bytes a step
/// where the target has SSE2 ([`specials16`]), then eight ([`string_specials`]), the
/// text's last few one at a time), or where that search stopped: the end of the text, or
/// the first byte past the short part, which it did not look at (special or not: the
/// callers look).
#[inline(always)]
fn short_special(bytes: &[u8], mut at: usize) -> usize {
    let words_end = bytes.len().min(at + SHORT_STRING);
    while at < words_end {
        let Some(specials) = specials16(bytes, at) else {
            break;
        };
        if specials != 0 {
            return at + specials.trailing_zeros() as usize;
        }
        at += 16;
    }
    while let Some(word) = (bytes.get(at..))
        .and_then(<[u8]>::first_chunk)
        .filter(|_| at < words_end)
    {
        let specials = string_specials(u64::from_le_bytes(*word));
        if specials != 0 {
            // Little-endian: byte `i` of the word is bits `8i..8i + 8`.
            return at + (specials.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    if at < words_end {
        while bytes.get(at).is_some_and(|&b| !SPECIAL[usize::from(b)]) {
            at += 1;
        }
    }
    at
}

/// How far into a string the word loop looks before [`long_special`] takes over: most
/// strings (keys, names, short values) end well before.
const SHORT_STRING: usize = 64;

/// The first special byte at or after `at`, for a long string: the first quote or
/// backslash by a vectorised search, then the bytes before it checked for a control byte
/// in one pass that has no early exit (so it is vectorised too). The same answer as the
/// word loop: a control byte before the quote or backslash is the first special one.
fn long_special(bytes: &[u8], at: usize) -> usize {
    let rest = &bytes[at..];
    let stop = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let before = &rest[..stop];
    let controls = before
        .iter()
        .fold(0u8, |seen, &b| seen | u8::from(b < 0x20));
    if controls == 0 {
        return at + stop;
    }
    at + before
        .iter()
        .position(|&b| b < 0x20)
        .expect("a control byte was seen")
}

/// The bytes of `word` a string token cannot simply hold: a quote, a backslash or a
/// control byte (below 0x20), as high bits. Each test sets the high bit of some byte
/// exactly when some byte is below 0x20 (the control test) or zero (after the XOR: that
/// byte was the quote, or the backslash). A test sets a byte's high bit wrongly only
/// above a byte it rightly sets it for (a borrow carries upward from a byte that is
/// below 0x20, or zero), so the result is zero exactly when no byte is special, and its
/// lowest bit set marks the first special byte.
pub(crate) fn string_specials(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    let (quote, backslash) = (word ^ QUOTES, word ^ BACKSLASHES);
    let special = (word.wrapping_sub(ONES * 0x20) & !word)
        | (quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash);
    special & HIGHS
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0, |n, &d| {
        let digit = (d as char).to_digit(16)?;
        Some(n << 4 | digit)
    })
}

/// The text of a string token that [`Lexer::string`] accepted (quotes included): borrowed
/// when it has no escape.
pub(super) fn unescape(token: &str) -> Cow<'_, str> {
    let inner = &token[1..token.len() - 1];
    // In an accepted token the first special byte is its first backslash (a quote in it
    // is escaped; no control byte is left raw): a short one is read with no call, a long
    // one (a token, a state) by a search for the backslash alone.
    let bytes = inner.as_bytes();
    let first = match bytes.len() <= SHORT_STRING {
        true => short_special(bytes, 0),
        false => memchr::memchr(b'\\', bytes).unwrap_or(bytes.len()),
    };
    if first == inner.len() {
        return Cow::Borrowed(inner);
    }
    let mut out = String::with_capacity(inner.len());
    out.push_str(&inner[..first]);
    let mut rest = &inner[first..];
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = &rest[at + 1..];
        let (decoded, used) = match escape.as_bytes()[0] {
            b'b' => ('\u{8}', 1),
            b'f' => ('\u{c}', 1),
            b'n' => ('\n', 1),
            b'r' => ('\r', 1),
            b't' => ('\t', 1),
            b'u' => unicode(escape),
            other => (other as char, 1),
        };
        out.push(decoded);
        rest = &escape[used..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A `\u` escape (after the backslash): the character and the bytes it took, a surrogate
/// pair taking both escapes. The lexer admitted only well-formed pairs; anything else
/// (which cannot reach here) would decode as U+FFFD rather than panic.
fn unicode(escape: &str) -> (char, usize) {
    let unit = |at: usize| escape.as_bytes().get(at..at + 4).and_then(hex4);
    match unit(1) {
        Some(high @ 0xD800..=0xDBFF) => match unit(7) {
            Some(low @ 0xDC00..=0xDFFF) => {
                let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                (char::from_u32(code).unwrap_or('\u{fffd}'), 11)
            }
            _ => ('\u{fffd}', 5),
        },
        Some(code) => (char::from_u32(code).unwrap_or('\u{fffd}'), 5),
        None => ('\u{fffd}', 1),
    }
}

#[cfg(test)]
mod tests;
