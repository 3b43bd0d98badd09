//! Python-compatible JSON encoding: the bytes `json.dumps(v, separators=(",", ":"))`
//! (optionally `sort_keys=True`) produces for a value `json.loads` parsed.
//!
//! Invariant: for every JSON text both parsers accept, [`write_python_json`] emits exactly
//! the reference's bytes, so argument digests agree with the Python SDK and tokens minted
//! here are byte-identical to the SDK's for the same nonce and clock. Text the reference
//! would represent differently (an integer Python refuses to parse) is an error, never a
//! silently different digest.

use crate::jsonrpc::{JsonView, Passed, Rules, pass_escaped};
#[cfg(any(test, feature = "oracle"))]
use serde_json::{Number, Value};
use std::fmt::{self, Write as _};

mod text;

pub(crate) use text::{python_spelled, serde_string_len, transcode_python_json};

/// Python refuses to convert integers longer than this (`sys.int_info.default_max_str_digits`).
const PYTHON_MAX_INT_DIGITS: usize = 4300;

/// A value the reference implementation cannot digest the way we would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    #[error("integer literal with more than {PYTHON_MAX_INT_DIGITS} digits")]
    IntegerTooLong,
    #[error("number literal that is not JSON")]
    BadNumber,
    /// A float literal beyond `f64` (`1e400`): Python writes it as `Infinity`, which no
    /// JSON parser reads back.
    #[error("float literal beyond f64")]
    NotFinite,
}

/// How many members of an object are ordered on the stack.
const FEW_MEMBERS: usize = 16;

/// Append the Python encoding of `value` to `out`.
pub fn write_python_json<V: JsonView>(
    value: &V,
    sort_keys: bool,
    out: &mut String,
) -> Result<(), CanonicalError> {
    if let Some(literal) = value.number_literal() {
        write_number_literal(literal, out)?;
    } else if let Some(s) = value.as_str() {
        write_string(s, out);
    } else if let Some(items) = value.as_array() {
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_python_json(item, sort_keys, out)?;
        }
        out.push(']');
    } else if let Some(mut entries) = value.entries() {
        out.push('{');
        // An object's members are put in order on the stack when they are few (as nearly
        // every arguments object's are), in a vector when not. `value` fills the free
        // places and is never read from them.
        let mut few = [("", value); FEW_MEMBERS];
        let mut len = 0;
        for (slot, entry) in few.iter_mut().zip(entries.by_ref()) {
            *slot = entry;
            len += 1;
        }
        let mut many: Vec<(&str, &V)>;
        let entries: &mut [(&str, &V)] = match entries.next() {
            None => &mut few[..len],
            Some(more) => {
                many = few.into_iter().chain([more]).chain(entries).collect();
                &mut many
            }
        };
        if sort_keys {
            // Rust orders `str` by UTF-8 bytes, which is code point order: Python's.
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        for (i, &mut (key, item)) in entries.iter_mut().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(key, out);
            out.push(':');
            write_python_json(item, sort_keys, out)?;
        }
        out.push('}');
    } else {
        out.push_str(match value.as_bool() {
            Some(true) => "true",
            Some(false) => "false",
            None => "null",
        });
    }
    Ok(())
}

/// `json.dumps` default `ensure_ascii=True`: printable ASCII verbatim, everything else
/// escaped with lowercase hex, astral characters as surrogate pairs, DEL escaped too.
pub(crate) fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let mut rest = s;
    while !rest.is_empty() {
        // Copy the longest run that needs no escape in one go (the common case).
        let run = verbatim_prefix_len(rest.as_bytes());
        out.push_str(&rest[..run]);
        rest = &rest[run..];
        let Some(c) = rest.chars().next() else { break };
        rest = &rest[c.len_utf8()..];
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_u_escape(*unit, out);
                }
            }
        }
    }
    out.push('"');
}

/// When the JSON string token `token` (quotes included, as the strict scan accepted it)
/// is already exactly what [`write_string`] writes for its value, the value's length in
/// bytes; `None` otherwise. That is a token of printable ASCII whose escapes are only
/// the two-character ones `write_string` writes (`\"` `\\` `\n` `\r` `\t` `\b` `\f`):
/// a `\u` escape, `\/`, a non-ASCII or a DEL byte is spelled otherwise or not at all.
pub(crate) fn python_spelled_len(token: &str) -> Option<usize> {
    let bytes = token.as_bytes();
    if bytes.first() != Some(&b'"') {
        return None;
    }
    let read = read_string_rest(bytes, 1)?;
    (read.quote == bytes.len() - 1 && read.spelled).then(|| read.quote - 1 - read.escapes)
}

/// A string token's inside read by [`read_string_rest`].
pub(crate) struct StringRead {
    /// Where its closing quote is.
    pub(crate) quote: usize,
    /// Whether it is exactly what [`write_string`] writes for its value.
    pub(crate) spelled: bool,
    /// Its escapes, when it is spelled so (each is one byte of the value).
    pub(crate) escapes: usize,
}

/// The inside of the string token whose opening quote is just before `at` in `bytes`,
/// read to its closing quote; `None` when the bytes end first. Stretches of the
/// spelling's escapes are passed sixteen bytes a step ([`pass_escaped`]), plain runs
/// eight bytes at a time, and a word that holds anything else is passed up to that byte
/// in one step ([`escaped_bytes`] marks the first exactly).
pub(crate) fn read_string_rest(bytes: &[u8], mut at: usize) -> Option<StringRead> {
    let mut escapes = 0;
    let mut spelled = true;
    loop {
        if spelled {
            match pass_escaped(bytes, at, Rules::Python) {
                Passed::Quote {
                    at,
                    escapes: passed,
                } => {
                    return Some(StringRead {
                        quote: at,
                        spelled,
                        escapes: escapes + passed,
                    });
                }
                Passed::Stopped {
                    at: stop,
                    escapes: passed,
                } => {
                    escapes += passed;
                    at = stop;
                }
            }
        }
        at = past_plain_words(bytes, at);
        match *bytes.get(at)? {
            b'"' => {
                return Some(StringRead {
                    quote: at,
                    spelled,
                    escapes,
                });
            }
            b'\\' => {
                match bytes.get(at + 1)? {
                    b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f' => escapes += 1,
                    _ => spelled = false,
                }
                at += 2;
            }
            b' '..=b'~' => at += 1,
            _ => {
                spelled = false;
                at += 1;
            }
        }
    }
}

/// From `at`, past the words of eight bytes [`write_string`] copies as they are: where
/// the first byte it does not copy so is, or where fewer than eight bytes are left.
#[inline(always)]
fn past_plain_words(bytes: &[u8], mut at: usize) -> usize {
    while let Some(word) = bytes.get(at..at + 8) {
        let flagged = escaped_bytes(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        if flagged != 0 {
            return at + (flagged.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at
}

/// The bytes of `word` (little-endian) that [`write_string`] does not copy as they are,
/// as high bits: what a string token cannot hold (a quote, a backslash, a control byte),
/// a byte of 0x80 or more, and DEL. Zero exactly when there is none; the lowest bit set
/// marks the first. (0x7f gains the high bit when incremented; a carry out of 0xff, a
/// byte already marked, can only mark a byte above it.)
fn escaped_bytes(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    ((word | word.wrapping_add(ONES)) & HIGH) | crate::jsonrpc::string_specials(word)
}

/// How many leading bytes `ensure_ascii` copies verbatim. Checks eight bytes at a time
/// (states are often kilobytes of plain ASCII), and a word that holds a byte to escape
/// says where the first is. The last few bytes (most claims are short: a method, a
/// name, a digest) are checked as one word too, filled up with quotes: a filler flagged
/// wrongly lies above one flagged rightly, so the lowest flag is the first byte to escape
/// or, when there is none, the first filler.
fn verbatim_prefix_len(bytes: &[u8]) -> usize {
    let mut clean = 0;
    let chunks = bytes.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        let flagged = escaped_bytes(u64::from_le_bytes(chunk.try_into().expect("chunks of 8")));
        if flagged != 0 {
            return clean + (flagged.trailing_zeros() / 8) as usize;
        }
        clean += 8;
    }
    // A quote past the tail: the search ends within the word, at the first byte to
    // escape or at the tail's end.
    let mut word = [b'"'; 8];
    word[..tail.len()].copy_from_slice(tail);
    clean + (escaped_bytes(u64::from_le_bytes(word)).trailing_zeros() / 8) as usize
}

fn push_u_escape(unit: u16, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

/// A JSON number as Python's `json` reads it.
enum PythonNumber<'a> {
    /// A literal with a fraction or an exponent: a `float` (it may be infinite: `1e400`).
    Float(f64),
    /// An `int` of any size Python reads: its sign and digits.
    Int { negative: bool, digits: &'a str },
}

impl<'a> PythonNumber<'a> {
    #[cfg(any(test, feature = "oracle"))]
    fn of(n: &'a Number) -> Result<Self, CanonicalError> {
        // With `arbitrary_precision` this is the literal as the client wrote it.
        Self::of_literal(n.as_str())
    }

    fn of_literal(literal: &'a str) -> Result<Self, CanonicalError> {
        if literal.contains(['.', 'e', 'E']) {
            let value = literal.parse().map_err(|_| CanonicalError::BadNumber)?;
            return Ok(PythonNumber::Float(value));
        }
        let (negative, digits) = match literal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, literal),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CanonicalError::BadNumber);
        }
        if digits.len() > PYTHON_MAX_INT_DIGITS {
            return Err(CanonicalError::IntegerTooLong);
        }
        Ok(PythonNumber::Int { negative, digits })
    }
}

/// A number's literal as Python writes the number it reads: integers as Python `int`
/// does (any size, `-0` is `0`); anything with a fraction or exponent is a Python
/// `float` and prints in `repr` form.
fn write_number_literal(literal: &str, out: &mut String) -> Result<(), CanonicalError> {
    match PythonNumber::of_literal(literal)? {
        PythonNumber::Float(value) => write_python_float(value, out),
        PythonNumber::Int { negative, digits } => {
            let digits = digits.trim_start_matches('0');
            if digits.is_empty() {
                out.push('0');
            } else {
                if negative {
                    out.push('-');
                }
                out.push_str(digits);
            }
        }
    }
    Ok(())
}

/// Whether [`write_python_json`] encodes `value` as text a JSON parser reads back: it
/// fails on an integer longer than Python reads, and writes a float literal beyond `f64`
/// (`1e400`) as `Infinity`, as Python does, which is not JSON. What a token carries as
/// JSON (its `qd` claim) must pass; checked without encoding.
#[cfg(any(test, feature = "oracle"))]
pub(crate) fn reads_back(value: &Value) -> bool {
    match value {
        Value::Number(n) => match PythonNumber::of(n) {
            Ok(PythonNumber::Float(value)) => value.is_finite(),
            Ok(PythonNumber::Int { .. }) => true,
            Err(_) => false,
        },
        Value::Array(items) => items.iter().all(reads_back),
        Value::Object(map) => map.values().all(reads_back),
        Value::Null | Value::Bool(_) | Value::String(_) => true,
    }
}

/// Python's `float.__repr__`: the shortest round-tripping digits, positional between 1e-4 and 1e16, otherwise `d.ddde+XX`; a `.0` suffix for
/// integral values; `Infinity` for what overflowed while parsing, as `json.dumps` writes it.
pub(crate) fn write_python_float(value: f64, out: &mut String) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value < 0.0 { "-Infinity" } else { "Infinity" });
        return;
    }
    // Rust's shortest form and CPython's agree on the digit count but not on ties: when
    // two shortest candidates are equally close (705218286435062.25 -> ...062.2 or .3)
    // CPython rounds half to even. Re-formatting at that precision rounds the exact binary
    // value half to even, which is CPython's choice and still round-trips.
    // Fast path: integral values below 1e16 print positionally with `.0` (token times).
    // Below 1e16 the conversion to an integer is exact, so the value is integral exactly
    // when it converts back to itself (no call to `trunc`).
    if value.abs() < 1e16 && (value as i64) as f64 == value {
        if value == 0.0 && value.is_sign_negative() {
            out.push('-');
        }
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(value as i64);
        out.reserve(digits.len() + 2);
        out.push_str(digits);
        out.push_str(".0");
        return;
    }
    let mut shortest = StackText::default();
    write!(shortest, "{value:e}").expect("an f64 fits the buffer");
    let digit_count = shortest
        .as_str()
        .split_once('e')
        .map_or(1, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    let mut rounded = StackText::default();
    write!(
        rounded,
        "{value:.prec$e}",
        prec = digit_count.saturating_sub(1)
    )
    .expect("an f64 fits the buffer");
    let sci = if rounded.as_str().parse::<f64>() == Ok(value) {
        rounded.as_str()
    } else {
        shortest.as_str()
    };
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` exponent is an integer");
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let (lead, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digit = |i: usize| if i == 0 { lead } else { &frac[i - 1..i] };
    let len = 1 + frac.len();
    // Position of the decimal point relative to the first digit, as CPython's
    // `format_float_short` counts it.
    let decpt = exponent + 1;
    if negative {
        out.push('-');
    }
    if !(-4 < decpt && decpt <= 16) {
        out.push_str(lead);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        let shown = decpt - 1;
        out.push('e');
        out.push(if shown < 0 { '-' } else { '+' });
        if shown.abs() < 10 {
            out.push('0');
        }
        write!(out, "{}", shown.abs()).expect("writing to a String cannot fail");
    } else if decpt <= 0 {
        out.push_str("0.");
        (0..-decpt).for_each(|_| out.push('0'));
        out.push_str(lead);
        out.push_str(frac);
    } else {
        let decpt = decpt as usize;
        for i in 0..len.min(decpt) {
            out.push_str(digit(i));
        }
        (len..decpt).for_each(|_| out.push('0'));
        out.push('.');
        if decpt >= len {
            out.push('0');
        } else {
            (decpt..len).for_each(|i| out.push_str(digit(i)));
        }
    }
}

/// A fixed buffer for formatting one `f64` without touching the heap.
struct StackText {
    buf: [u8; 40],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        Self {
            buf: [0; 40],
            len: 0,
        }
    }
}

impl StackText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).expect("only `str`s are written")
    }
}

impl fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
