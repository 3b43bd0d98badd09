//! The Python encoding of a value read from its JSON text rather than its tree (the
//! sealer's path for a round's requested schemas), and serde_json's compact length of
//! the same value, which the questions' size limit counts.

use super::{
    CanonicalError, PYTHON_MAX_INT_DIGITS, PythonNumber, past_plain_words, read_string_rest,
    write_number_literal, write_string,
};

/// [`write_python_json`](super::write_python_json) (`sort_keys=false`) of the value `text` holds, read from the text
/// itself: `text` is one JSON value a strict parse accepted (valid, no duplicate key in
/// any object: what the answer scanner guarantees), so its tree is not built. Returns how
/// many bytes serde_json's compact form of the same value takes, the length a tree
/// would be measured by. Fails where `reads_back` would on the tree: an integer longer
/// than Python reads, or a float literal beyond `f64`.
pub(crate) fn transcode_python_json(text: &str, out: &mut String) -> Result<usize, CanonicalError> {
    let mut reader = TextValue { text, at: 0 };
    reader.value(out)
}

/// The bytes serde_json's compact form of the string `s` takes: quotes, the two-byte
/// escapes of `"`, `\\` and the five short controls, `\u00XX` for the other controls,
/// everything else as it is.
pub(crate) fn serde_string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Whether `text`, one JSON value a strict parse accepted, is already exactly what
/// [`write_python_json`](super::write_python_json) writes of it with `sort_keys`: so it
/// can be digested (or copied) as it stands. That is a text with no whitespace, whose
/// strings are in Python's spelling ([`read_string_rest`] says so), whose numbers are
/// integers as Python writes them (no `-0`, no fraction or exponent), and, sorted, whose
/// objects' keys hold no escape and ascend byte by byte (code point order). Anything
/// else answers `false`, and the value is written out instead: never a different text.
pub(crate) fn python_spelled(text: &str, sort_keys: bool) -> bool {
    if !sort_keys {
        return spelled_in_order(text.as_bytes());
    }
    let mut walk = Sorted {
        bytes: text.as_bytes(),
        at: 0,
    };
    walk.value(0) && walk.at == text.len()
}

/// [`python_spelled`] without sorting, in one pass over the bytes: the text is JSON, so
/// outside its strings a byte is structure, a literal's letter or a number's, and only
/// the bytes Python would write otherwise need a look (whitespace, a fraction or an
/// exponent, `-0`, an integer longer than Python reads).
fn spelled_in_order(bytes: &[u8]) -> bool {
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => match spelled_string(bytes, at + 1) {
                Some((quote, _)) => at = quote,
                None => return false,
            },
            // A fraction's `.`, an exponent's letter and sign are read with their number.
            b'-' | b'0'..=b'9' => match python_integer_end(bytes, at) {
                Some(end) => {
                    at = end;
                    continue;
                }
                None => return false,
            },
            b' ' | b'\t' | b'\n' | b'\r' => return false,
            _ => {}
        }
        at += 1;
    }
    true
}

/// At a number's first byte (`-` or a digit) in JSON text: where the number ends when it
/// is an integer spelled exactly as [`write_number_literal`] writes the integer it reads
/// (no `-0`, no leading zero, at most [`PYTHON_MAX_INT_DIGITS`] digits, no fraction or
/// exponent after them); `None` otherwise. The one statement of that rule for both walks.
#[inline]
fn python_integer_end(bytes: &[u8], at: usize) -> Option<usize> {
    let negative = bytes.get(at) == Some(&b'-');
    let start = at + usize::from(negative);
    let digits = bytes
        .get(start..)?
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let end = start + digits;
    let canonical = match &bytes[start..end] {
        [] => false,
        [b'0'] => !negative,
        [b'0', ..] => false,
        _ => digits <= PYTHON_MAX_INT_DIGITS,
    };
    (canonical && !matches!(bytes.get(end), Some(b'.' | b'e' | b'E'))).then_some(end)
}

/// The string token whose inside starts at `start`, when Python spells it so: where its
/// closing quote is, and how many escapes it holds. Plain words are passed here, with no
/// call (most strings are short and plain); [`read_string_rest`] reads on from the first
/// byte that is not plain.
#[inline(always)]
fn spelled_string(bytes: &[u8], start: usize) -> Option<(usize, usize)> {
    let at = past_plain_words(bytes, start);
    if bytes.get(at) == Some(&b'"') {
        return Some((at, 0));
    }
    let read = read_string_rest(bytes, at).filter(|read| read.spelled)?;
    Some((read.quote, read.escapes))
}

/// A walk over a text asking [`python_spelled`] of it with sorted keys, value by value.
struct Sorted<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Sorted<'a> {
    /// How deep containers may nest before the walk gives up (the strict parse refuses
    /// deeper ones before this is asked).
    const MAX_DEPTH: usize = 128;

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Steps past `byte` when it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.at += usize::from(next);
        next
    }

    fn value(&mut self, depth: usize) -> bool {
        match self.peek() {
            Some(b'{') => depth < Self::MAX_DEPTH && self.object(depth + 1),
            Some(b'[') => depth < Self::MAX_DEPTH && self.array(depth + 1),
            Some(b'"') => self.string().is_some(),
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'n') => self.word(b"null"),
            Some(b'-' | b'0'..=b'9') => self.integer(),
            _ => false,
        }
    }

    fn object(&mut self, depth: usize) -> bool {
        self.at += 1;
        if self.eat(b'}') {
            return true;
        }
        let mut last: Option<&'a [u8]> = None;
        loop {
            let Some((key, escapes)) = self.string() else {
                return false;
            };
            // Escapes order otherwise than what they stand for (`\"` is `"`, the
            // backslash sorts after `#`): such a key's object is written out.
            if escapes > 0 || last.is_some_and(|last| key <= last) {
                return false;
            }
            last = Some(key);
            if !self.eat(b':') || !self.value(depth) {
                return false;
            }
            if !self.eat(b',') {
                return self.eat(b'}');
            }
        }
    }

    fn array(&mut self, depth: usize) -> bool {
        self.at += 1;
        if self.eat(b']') {
            return true;
        }
        loop {
            if !self.value(depth) {
                return false;
            }
            if !self.eat(b',') {
                return self.eat(b']');
            }
        }
    }

    /// A string from its opening quote, when spelled as Python spells it: its inside
    /// and how many escapes that holds.
    fn string(&mut self) -> Option<(&'a [u8], usize)> {
        let start = self.at + 1;
        let (quote, escapes) = spelled_string(self.bytes, start)?;
        self.at = quote + 1;
        Some((&self.bytes[start..quote], escapes))
    }

    fn word(&mut self, word: &[u8]) -> bool {
        let next = self.bytes[self.at..].starts_with(word);
        self.at += word.len() * usize::from(next);
        next
    }

    /// An integer as Python writes it ([`python_integer_end`]).
    fn integer(&mut self) -> bool {
        match python_integer_end(self.bytes, self.at) {
            Some(end) => {
                self.at = end;
                true
            }
            None => false,
        }
    }
}

/// A cursor over one valid JSON value's text.
struct TextValue<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> TextValue<'a> {
    fn skip_whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        while self.at < bytes.len() && matches!(bytes[self.at], b' ' | b'\n' | b'\t' | b'\r') {
            self.at += 1;
        }
    }

    fn peek(&self) -> u8 {
        self.text.as_bytes().get(self.at).copied().unwrap_or(0)
    }

    /// One value: written to `out`, its serde_json length returned.
    fn value(&mut self, out: &mut String) -> Result<usize, CanonicalError> {
        self.skip_whitespace();
        match self.peek() {
            b'{' => self.container(out, b'}', true),
            b'[' => self.container(out, b']', false),
            b'"' => self.string_written(out),
            b't' | b'f' | b'n' => {
                let len = match self.peek() {
                    b't' => 4,
                    b'f' => 5,
                    _ => 4,
                };
                let word = self
                    .text
                    .get(self.at..self.at + len)
                    .ok_or(CanonicalError::BadNumber)?;
                out.push_str(word);
                self.at += len;
                Ok(len)
            }
            _ => {
                let start = self.at;
                let bytes = self.text.as_bytes();
                while self.at < bytes.len()
                    && matches!(
                        bytes[self.at],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.at += 1;
                }
                let literal = &self.text[start..self.at];
                if let PythonNumber::Float(value) = PythonNumber::of_literal(literal)?
                    && !value.is_finite()
                {
                    return Err(CanonicalError::NotFinite);
                }
                write_number_literal(literal, out)?;
                // With `arbitrary_precision` serde_json keeps a number's literal, but
                // writes its exponent as `e` with a sign (`1E2` is `1e+2`).
                let unsigned_exponent = literal
                    .find(['e', 'E'])
                    .is_some_and(|e| !matches!(literal.as_bytes()[e + 1], b'+' | b'-'));
                Ok(literal.len() + usize::from(unsigned_exponent))
            }
        }
    }

    /// An object (`close` is `}`, members keyed) or an array, from its opening byte.
    fn container(
        &mut self,
        out: &mut String,
        close: u8,
        keyed: bool,
    ) -> Result<usize, CanonicalError> {
        out.push(char::from(self.peek()));
        self.at += 1;
        let mut len = 2;
        let mut first = true;
        loop {
            self.skip_whitespace();
            if self.peek() == close {
                self.at += 1;
                out.push(char::from(close));
                return Ok(len);
            }
            if !first {
                // The separator between members.
                self.at += 1;
                self.skip_whitespace();
                out.push(',');
                len += 1;
            }
            first = false;
            if keyed {
                len += self.string_written(out)? + 1;
                self.skip_whitespace();
                // The colon.
                self.at += 1;
                out.push(':');
            }
            len += self.value(out)?;
        }
    }

    /// A string from its opening quote, written to `out`: its serde_json length. A token
    /// already in Python's spelling ([`python_spelled_len`](super::python_spelled_len):
    /// printable ASCII, two-character escapes only) is copied as it is, and serde_json
    /// spells such a value the same way, so its length is the token's; any other is
    /// decoded and written again.
    fn string_written(&mut self, out: &mut String) -> Result<usize, CanonicalError> {
        let start = self.at;
        let bytes: &'a [u8] = self.text.as_bytes();
        // The text is valid JSON: its string tokens end (past the last byte is refused).
        let read = read_string_rest(bytes, start + 1).ok_or(CanonicalError::BadNumber)?;
        self.at = read.quote + 1;
        if read.spelled {
            let token = &self.text[start..self.at];
            out.push_str(token);
            return Ok(token.len());
        }
        let decoded = crate::jsonrpc::string_in(self.text, start..self.at)
            .ok_or(CanonicalError::BadNumber)?;
        write_string(&decoded, out);
        Ok(serde_string_len(&decoded))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PYTHON_MAX_INT_DIGITS, reads_back, write_python_json};
    use super::*;
    use serde_json::Value;

    /// The text reading of `text` against the tree path: the same bytes, serde_json's
    /// compact length of the tree, and a refusal exactly where the tree does not read back.
    fn transcodes_as_the_tree(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        let mut out = String::new();
        let read = transcode_python_json(text, &mut out);
        if !reads_back(&value) {
            assert!(read.is_err(), "{text}");
            return;
        }
        let mut tree = String::new();
        write_python_json(&value, false, &mut tree).unwrap();
        assert_eq!(out, tree, "{text}");
        assert_eq!(
            read,
            Ok(serde_json::to_string(&value).unwrap().len()),
            "{text}"
        );
    }

    #[test]
    fn a_schema_is_written_from_its_text_as_from_its_tree() {
        for text in [
            r#"{"type":"object","properties":{"region":{"type":"string"}},"required":["region"]}"#,
            " { \"a\" : [ 1 , 2.5 , -3e7 , true , false , null , \"\" , { } , [ ] ] } ",
            r#"[1,2.50,-0,-0.0,1E2,1e16,1e-5,1E+5,2e-0,12345678901234567890123,0]"#,
            r#"{"a":"x\"y\\z\/\b\f\n\r\t\u0001\u001f\u007f","b":[{"c":12345678901234567890}]}"#,
            r#"{"\u00e9t\u00e9":"\ud83d\ude00 caf\u00e9","z\u0000":"\u2028"}"#,
            "{\"\u{e9}\":\"\u{1F600}\u{7f}\"}",
            "[1e400]",
            "{\"n\":-1e400}",
            "null",
            "\"text\"",
            "-12",
        ] {
            transcodes_as_the_tree(text);
        }
        let long = format!("[{}]", "9".repeat(PYTHON_MAX_INT_DIGITS + 1));
        transcodes_as_the_tree(&long);
        assert!(transcode_python_json(&long, &mut String::new()).is_err());
    }

    /// What [`python_spelled`] says of `text`, held to what it claims: when it says so,
    /// the tree written out is the very text.
    fn spelled(text: &str, sort_keys: bool) -> bool {
        let says = python_spelled(text, sort_keys);
        if says {
            let value: Value = serde_json::from_str(text).unwrap();
            let mut out = String::new();
            write_python_json(&value, sort_keys, &mut out).unwrap();
            assert_eq!(out, text, "said spelled, sort_keys {sort_keys}");
        }
        says
    }

    #[test]
    fn a_text_in_the_references_spelling_is_known_as_such() {
        for text in [
            r#"{"name":"web-1"}"#,
            "{}",
            "[]",
            r#"{"":0,"a":[1,-2,true,false,null,"x\"y\\z\n"],"b":{"a":{}}}"#,
            r#"{"A":1,"B":2,"a":3,"b":{"z":[{"y":1,"z":2}]}}"#,
            "12345678901234567890123",
            "\"~ !\"",
        ] {
            assert!(spelled(text, true), "{text}");
            assert!(spelled(text, false), "{text}");
        }
        // In order as they came, not sorted: spelled only for a writer that keeps order.
        for text in [
            r#"{"type":"object","properties":{"region":{"type":"string"}},"required":["region"]}"#,
            r#"{"b":1,"a":2}"#,
            r#"{"a\"":1}"#,
        ] {
            assert!(!spelled(text, true), "{text}");
            assert!(spelled(text, false), "{text}");
        }
        for text in [
            r#"{"name": "web-1"}"#,
            " {}",
            "{} ",
            "-0",
            "[-0]",
            "1.0",
            "1e5",
            "1E5",
            r#""caf\u00e9""#,
            "\"caf\u{e9}\"",
            "\"\u{7f}\"",
            r#""a\/b""#,
            r#""\u0041""#,
        ] {
            assert!(!python_spelled(text, true), "{text}");
            assert!(!python_spelled(text, false), "{text}");
        }
        // Sorted, a key repeated is never in order, and what is no JSON is no spelling
        // (texts a strict parse refuses, which is never asked of them in order).
        for text in [r#"{"a":1,"a":2}"#, "tru", "[1,]", "", "{\"a\"}"] {
            assert!(!python_spelled(text, true), "{text}");
        }
        let long = format!("[{}]", "9".repeat(PYTHON_MAX_INT_DIGITS + 1));
        assert!(!python_spelled(&long, true));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        // The sorted walk nests no deeper than a strict parse reads (in order, there is
        // no nesting to walk).
        assert!(!python_spelled(&deep, true));
    }

    proptest::proptest! {
        /// Whatever the text, said spelled means written out the same.
        #[test]
        fn a_text_said_spelled_is_what_the_writer_writes(
            value in json_value(),
            pretty in proptest::bool::ANY,
            sort_keys in proptest::bool::ANY,
        ) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            spelled(&text, sort_keys);
        }

        /// And what the writer writes of a value of printable ASCII, integers and
        /// literals is said spelled (keys without escapes, when sorted).
        #[test]
        fn what_the_writer_writes_of_plain_values_is_said_spelled(
            value in plain_value(),
            sort_keys in proptest::bool::ANY,
        ) {
            let mut out = String::new();
            write_python_json(&value, sort_keys, &mut out).unwrap();
            proptest::prop_assert!(spelled(&out, sort_keys), "{}", out);
        }

        /// Any value, compact or pretty-printed: the text reading is the tree's.
        #[test]
        fn any_schema_text_transcodes_as_its_tree(value in json_value(), pretty in proptest::bool::ANY) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            transcodes_as_the_tree(&text);
        }
    }

    fn plain_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            "[ -~]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[ !#-\\[\\]-~]{0,6}", inner), 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::json!(f)),
            "\\PC{0,8}|[\\x00-\\x1f\"\\\\\\x7f]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((".{0,6}", inner), 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
