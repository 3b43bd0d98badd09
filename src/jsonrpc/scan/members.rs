//! The members of an object in text the scanner has already accepted, read in place: the
//! sealer reads a round's `inputRequests` this way instead of building a tree of it.
//! [`members`] gives an object's members with their values' spans; [`each_member`] walks
//! nested objects in one pass, descending into the values its reader wants and skipping
//! the others once (a round's questions were walked once per level of nesting).
//!
//! Invariant: only spans the scanner accepted are walked (an [`Answer`](super::Answer)'s
//! member spans), so every token here is known to be valid JSON with no duplicate key;
//! the walk still stops, rather than reads past `span`, at a byte it does not expect.

use super::facts::JsonKind;
use super::lexer::scanned_special;
use super::string_in;
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
        let Some((key, start)) = key_and_value(self.text, self.at, self.end) else {
            self.at = self.end;
            return None;
        };
        let (kind, value_end) = value_end(bytes, start, self.end)?;
        self.at = value_end;
        Some(ObjectMember {
            key,
            value: start..value_end,
            kind,
        })
    }
}

/// The key of the member whose key opens at `at`, and where its value starts; `None` at
/// a byte that is not where it should be, or past `limit`.
fn key_and_value(text: &str, at: usize, limit: usize) -> Option<(Cow<'_, str>, usize)> {
    let (key, key_end) = string_token(text, at, limit)?;
    let bytes = text.as_bytes();
    let colon = skip_whitespace(bytes, key_end);
    (bytes.get(colon) == Some(&b':')).then(|| (key, skip_whitespace(bytes, colon + 1)))
}

/// The string token opening at `at` (not past `limit`), unescaped, and its end. One
/// without a backslash is the bytes between its quotes (UTF-8, and the scanner refused
/// raw control characters); an escaped one is decoded with its checks.
fn string_token(text: &str, at: usize, limit: usize) -> Option<(Cow<'_, str>, usize)> {
    let bytes = text.as_bytes();
    let (end, escaped) = string_end_escaped(bytes, at).filter(|(end, _)| *end <= limit)?;
    let string = match escaped {
        true => string_in(text, at..end)?,
        false => Cow::Borrowed(&text[at + 1..end - 1]),
    };
    Some((string, end))
}

/// A place in text the scanner accepted, for [`each_member`]: at a value, its reader may
/// read it ([`Cursor::string`], [`Cursor::text`], a nested [`each_member`]) or leave it,
/// and the walk skips it.
pub(crate) struct Cursor<'a> {
    text: &'a str,
    at: usize,
    /// Nothing at or past this is read: the end of the span walked.
    limit: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `span` of `text` (its value: an object for [`each_member`]).
    pub(crate) fn new(text: &'a str, span: Range<usize>) -> Self {
        let limit = span.end.min(text.len());
        Cursor {
            text,
            at: span.start.min(limit),
            limit,
        }
    }

    /// The value here, passed: its JSON text.
    pub(crate) fn text(&mut self) -> Option<&'a str> {
        let start = self.at;
        let (_, end) = value_end(self.text.as_bytes(), start, self.limit)?;
        self.at = end;
        Some(&self.text[start..end])
    }

    /// The string value here, unescaped (`None`, and nothing read, when it is no string).
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.text.as_bytes().get(self.at) != Some(&b'"') {
            return None;
        }
        let (string, end) = string_token(self.text, self.at, self.limit)?;
        self.at = end;
        Some(string)
    }
}

/// The members of the object at the cursor, in order, read in one pass: `read` gets each
/// key and its value's kind with the cursor at the value; a value it leaves unread is
/// skipped. The cursor ends past the object (or where the walk stopped at a byte it did
/// not expect: the members before it were read).
pub(crate) fn each_member<'a>(
    cursor: &mut Cursor<'a>,
    read: impl FnMut(&mut Cursor<'a>, Cow<'a, str>, JsonKind),
) {
    if cursor.text.as_bytes().get(cursor.at) != Some(&b'{') {
        return;
    }
    if walk_object(cursor, read).is_none() {
        cursor.at = cursor.limit;
    }
}

/// [`each_member`] past the object's `{`: `None` at a byte it does not expect.
fn walk_object<'a>(
    cursor: &mut Cursor<'a>,
    mut read: impl FnMut(&mut Cursor<'a>, Cow<'a, str>, JsonKind),
) -> Option<()> {
    let bytes = cursor.text.as_bytes();
    let mut at = skip_whitespace(bytes, cursor.at + 1);
    loop {
        match bytes.get(at)? {
            b'"' if at < cursor.limit => {}
            b'}' => {
                cursor.at = at + 1;
                return Some(());
            }
            _ => return None,
        }
        let (key, start) = key_and_value(cursor.text, at, cursor.limit)?;
        let kind = kind_of(bytes, start)?;
        cursor.at = start;
        read(cursor, key, kind);
        if cursor.at == start {
            cursor.text()?;
        }
        at = skip_whitespace(bytes, cursor.at);
        if bytes.get(at) == Some(&b',') {
            at = skip_whitespace(bytes, at + 1);
        }
    }
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The end of the string token opening at `start` (past its closing quote): from one
/// quote or backslash to the next by the lexer's search (a short string, as most keys
/// and values here are, is read within its first words, with no call).
#[inline(always)]
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    string_end_escaped(bytes, start).map(|(end, _)| end)
}

/// [`string_end`], and whether the token holds a backslash. Inlined: its callers meet
/// a dozen short strings a round, for which a call's own cost is most of the work.
#[inline(always)]
fn string_end_escaped(bytes: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut at = start + 1;
    let mut escaped = false;
    loop {
        at = scanned_special(bytes, at);
        match bytes.get(at)? {
            b'"' => return Some((at + 1, escaped)),
            b'\\' => {
                escaped = true;
                at += 2;
            }
            // A control byte: none is in a string the scanner accepted, but the walk
            // does not stop being a walk of the bytes for it.
            _ => at += 1,
        }
    }
}

/// The kind of the value whose first byte is at `start`.
fn kind_of(bytes: &[u8], start: usize) -> Option<JsonKind> {
    Some(match bytes.get(start)? {
        b'"' => JsonKind::String,
        b'{' => JsonKind::Object,
        b'[' => JsonKind::Array,
        b't' | b'f' => JsonKind::Bool,
        b'n' => JsonKind::Null,
        b'-' | b'0'..=b'9' => JsonKind::Number,
        _ => return None,
    })
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
    let kind = kind_of(bytes, start)?;
    if kind == JsonKind::String {
        return Some((kind, string_end(bytes, start)?));
    }
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

    /// `each_member` reads what its reader reads, in place, skips the rest once, and
    /// leaves the cursor past the object: the same members, keys and values as
    /// [`members`] gives.
    #[test]
    fn each_member_descends_where_asked_and_skips_the_rest() {
        let text =
            r#" {"a" : {"b":"x\"}","c":{"d":[1,{"}":"]"}]},"e":"\u00e9"} , "f":7, "g":"h\n"}  "#;
        let mut cursor = Cursor::new(text, 1..text.len());
        let mut seen = Vec::new();
        each_member(&mut cursor, |cursor, key, kind| {
            seen.push((key.clone().into_owned(), kind, None));
            match &*key {
                // `a`: into it, reading `b` and `e` as strings, `c` as text.
                "a" => each_member(cursor, |cursor, key, kind| {
                    let read = match &*key {
                        "c" => cursor.text().map(str::to_owned),
                        _ => cursor.string().map(Cow::into_owned),
                    };
                    seen.push((key.into_owned(), kind, read));
                }),
                // `f` left unread (skipped); `g` read.
                "g" => seen.last_mut().unwrap().2 = cursor.string().map(Cow::into_owned),
                _ => {}
            }
        });
        let expect =
            |key: &str, kind, read: Option<&str>| (key.to_owned(), kind, read.map(str::to_owned));
        assert_eq!(
            seen,
            vec![
                expect("a", JsonKind::Object, None),
                expect("b", JsonKind::String, Some("x\"}")),
                expect("c", JsonKind::Object, Some(r#"{"d":[1,{"}":"]"}]}"#)),
                expect("e", JsonKind::String, Some("\u{e9}")),
                expect("f", JsonKind::Number, None),
                expect("g", JsonKind::String, Some("h\n")),
            ]
        );
        assert_eq!(&text[cursor.at..], "  ", "past the object");
        // A string read where none is: nothing read, the value skipped.
        let mut cursor = Cursor::new(r#"{"a":[1,"x"],"b":2}"#, 0..19);
        let mut strings = Vec::new();
        each_member(&mut cursor, |cursor, _, _| strings.push(cursor.string()));
        assert_eq!(strings, [None, None]);
        assert_eq!(cursor.at, 19);
    }

    #[test]
    fn each_member_stops_at_what_is_no_object() {
        let keys = |text: &str| {
            let mut keys = Vec::new();
            let mut cursor = Cursor::new(text, 0..text.len());
            each_member(&mut cursor, |_, key, _| keys.push(key.into_owned()));
            (keys, cursor.at)
        };
        assert_eq!(keys("[1]"), (vec![], 0));
        assert_eq!(keys("{}"), (vec![], 2));
        assert_eq!(keys("{ }"), (vec![], 3));
        // Cut short or broken: the members before are read, the walk ends at the span's end.
        assert_eq!(
            keys(r#"{"a":1,"b":[1,2"#),
            (vec!["a".to_owned(), "b".to_owned()], 15)
        );
        assert_eq!(keys(r#"{"a":1,"b" 2}"#), (vec!["a".to_owned()], 13));
        assert_eq!(keys(r#"{"a":"#), (vec![], 5));
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
