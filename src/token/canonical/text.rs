//! The Python encoding of a value read from its JSON text rather than its tree (the
//! sealer's path for a round's requested schemas), and serde_json's compact length of
//! the same value, which the questions' size limit counts.

use super::{CanonicalError, PythonNumber, read_string_rest, write_number_literal, write_string};

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
        let decoded =
            crate::jsonrpc::string_at(bytes, start..self.at).ok_or(CanonicalError::BadNumber)?;
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

    proptest::proptest! {
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
