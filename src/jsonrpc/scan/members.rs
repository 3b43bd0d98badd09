//! The members of an object in text the scanner has already accepted, read in place: the
//! sealer reads a round's `inputRequests` this way instead of building a tree of it.
//!
//! Invariant: only spans the scanner accepted are walked (an [`Answer`](super::Answer)'s
//! member spans), so every token here is known to be valid JSON with no duplicate key;
//! the walk still stops, rather than reads past `span`, at a byte it does not expect.

use super::facts::JsonKind;
use super::string_at;
use std::borrow::Cow;
use std::ops::Range;

/// One member of an object: its key (unescaped), its value's span and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectMember<'a> {
    pub(crate) key: Cow<'a, str>,
    pub(crate) value: Range<usize>,
    pub(crate) kind: JsonKind,
}

/// The members of the object at `span` of `text`, in order. `span` must be an object the
/// scanner accepted; anything else yields no member.
pub(crate) fn members(text: &str, span: Range<usize>) -> Members<'_> {
    let bytes = text.as_bytes();
    let end = span.end.min(bytes.len());
    let object = bytes.get(span.start) == Some(&b'{') && end > span.start;
    Members {
        text,
        at: if object { span.start + 1 } else { end },
        end: end.saturating_sub(1),
    }
}

/// The iterator of [`members`].
pub(crate) struct Members<'a> {
    text: &'a str,
    at: usize,
    /// The object's closing brace.
    end: usize,
}

impl<'a> Iterator for Members<'a> {
    type Item = ObjectMember<'a>;

    fn next(&mut self) -> Option<ObjectMember<'a>> {
        let bytes = self.text.as_bytes();
        self.at = skip_whitespace(bytes, self.at);
        if bytes.get(self.at) == Some(&b',') {
            self.at = skip_whitespace(bytes, self.at + 1);
        }
        if self.at >= self.end || bytes[self.at] != b'"' {
            self.at = self.end;
            return None;
        }
        let key_end = string_end(bytes, self.at)?;
        let key = string_at(bytes, self.at..key_end)?;
        self.at = skip_whitespace(bytes, key_end);
        if bytes.get(self.at) != Some(&b':') {
            self.at = self.end;
            return None;
        }
        let start = skip_whitespace(bytes, self.at + 1);
        let (kind, value_end) = value_end(bytes, start, self.end)?;
        self.at = value_end;
        Some(ObjectMember {
            key,
            value: start..value_end,
            kind,
        })
    }
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The end of the string token opening at `start` (past its closing quote): from one
/// quote or backslash to the next by a vectorised search.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        match bytes[at] {
            b'"' => return Some(at + 1),
            _ => at += 2,
        }
    }
}

/// The bytes the walk of a container stops at: a string's quote and the brackets.
const STRUCTURAL: [bool; 256] = {
    let mut structural = [false; 256];
    structural[b'"' as usize] = true;
    structural[b'{' as usize] = true;
    structural[b'[' as usize] = true;
    structural[b'}' as usize] = true;
    structural[b']' as usize] = true;
    structural
};

/// The kind of the value starting at `start` and its end, not past `limit`.
fn value_end(bytes: &[u8], start: usize, limit: usize) -> Option<(JsonKind, usize)> {
    let kind = match bytes.get(start)? {
        b'"' => return Some((JsonKind::String, string_end(bytes, start)?)),
        b'{' => JsonKind::Object,
        b'[' => JsonKind::Array,
        b't' | b'f' => JsonKind::Bool,
        b'n' => JsonKind::Null,
        b'-' | b'0'..=b'9' => JsonKind::Number,
        _ => return None,
    };
    if !matches!(kind, JsonKind::Object | JsonKind::Array) {
        let end = bytes
            .get(start..limit)?
            .iter()
            .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\t' | b'\r'))
            .map_or(limit, |n| start + n);
        return Some((kind, end));
    }
    let mut depth = 0usize;
    let mut at = start;
    while at < limit {
        if !STRUCTURAL[usize::from(bytes[at])] {
            at += 1;
            continue;
        }
        match bytes[at] {
            b'"' => {
                at = string_end(bytes, at)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some((kind, at + 1));
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<(String, &str, JsonKind)> {
        members(text, 0..text.len())
            .map(|m| (m.key.into_owned(), &text[m.value], m.kind))
            .collect()
    }

    #[test]
    fn every_member_with_its_span_and_kind() {
        let text =
            r#"{"a":1,"b\"c":"x}\"]","d":{"e":[1,{"f":"]"}]},"g":[],"h":null,"i":true,"j":-2.5e3}"#;
        assert_eq!(
            read(text),
            vec![
                ("a".to_owned(), "1", JsonKind::Number),
                ("b\"c".to_owned(), r#""x}\"]""#, JsonKind::String),
                ("d".to_owned(), r#"{"e":[1,{"f":"]"}]}"#, JsonKind::Object),
                ("g".to_owned(), "[]", JsonKind::Array),
                ("h".to_owned(), "null", JsonKind::Null),
                ("i".to_owned(), "true", JsonKind::Bool),
                ("j".to_owned(), "-2.5e3", JsonKind::Number),
            ]
        );
    }

    #[test]
    fn whitespace_escapes_and_nesting_are_read_as_the_scanner_accepted_them() {
        let text = " {\n \"k\\u0041\" : { \"x\" : \"\\\\\" } ,\t\"n\" : 7 \r\n} ";
        let span = 1..text.len() - 1;
        let read: Vec<_> = members(text, span)
            .map(|m| (m.key.into_owned(), &text[m.value]))
            .collect();
        assert_eq!(
            read,
            vec![
                ("kA".to_owned(), "{ \"x\" : \"\\\\\" }"),
                ("n".to_owned(), "7")
            ]
        );
        assert_eq!(members("{}", 0..2).count(), 0);
        assert_eq!(members("{ }", 0..3).count(), 0);
    }

    #[test]
    fn a_span_that_is_no_object_yields_nothing() {
        assert_eq!(members("[1,2]", 0..5).count(), 0);
        assert_eq!(members("\"a\"", 0..3).count(), 0);
        assert_eq!(members("", 0..0).count(), 0);
        // Cut short: stops instead of reading past the span.
        assert_eq!(read(r#"{"a":[1,2"#).len(), 0);
        assert_eq!(read(r#"{"a":"#).len(), 0);
    }

    #[test]
    fn agrees_with_the_tree_on_scanned_answers() {
        let texts = [
            r#"{"q":{"method":"elicitation/create","params":{"mode":"form","requestedSchema":{"type":"object"}}},"r":{"method":"roots/list"}}"#,
            r#"{ "a" : [ ] , "b" : { } , "c" : "\u00e9\ud83d\ude00" }"#,
        ];
        for text in texts {
            let tree: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(text).unwrap();
            let read: Vec<_> = members(text, 0..text.len()).collect();
            assert_eq!(read.len(), tree.len(), "{text}");
            for (member, (key, value)) in read.iter().zip(&tree) {
                assert_eq!(member.key, key.as_str());
                let parsed: serde_json::Value =
                    serde_json::from_str(&text[member.value.clone()]).unwrap();
                assert_eq!(&parsed, value);
            }
        }
    }
}
