//! A cursor over JSON text written without whitespace in a known layout (the claims of a
//! token): each token read with the strict lexer, so nothing it hands out is other than
//! serde_json reads it; anything else than the layout asked for is `None`, and the
//! caller reads the text the general way.
//!
//! Invariant: every `Some` is one token (or one value) the strict scan accepts, and the
//! cursor never moves past a token it did not accept.

use super::lexer::{Lexer, NotJson, unescape};
use super::lite::{LiteArena, LiteJson};
use std::borrow::Cow;

/// How many containers a value read whole may nest: well within serde_json's 128
/// (anything deeper is left to the general reading).
const MAX_DEPTH: usize = 32;

/// A cursor over compact JSON text.
pub(crate) struct Compact<'a> {
    text: &'a str,
    lexer: Lexer<'a>,
}

impl<'a> Compact<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Compact {
            text,
            lexer: Lexer::new(text),
        }
    }

    /// Whether all of the text was read.
    pub(crate) fn is_done(&self) -> bool {
        self.lexer.is_done()
    }

    /// `byte` next, consumed.
    pub(crate) fn byte(&mut self, byte: u8) -> Option<()> {
        self.lexer.expect(byte).ok()
    }

    /// Whether `byte` is next (not consumed).
    pub(crate) fn peek_is(&self, byte: u8) -> bool {
        self.lexer.peek() == Some(byte)
    }

    /// The first member of an object: `"name":` next, consumed (the `{` was read).
    pub(crate) fn first(&mut self, name: &str) -> Option<&mut Self> {
        self.key(name).map(|()| self)
    }

    /// A member after another: `,"name":` consumed when it is next; `None`, and nothing
    /// consumed, when another member or anything else is (so an optional member is
    /// looked for the same way). Inlined, as [`Compact::key`].
    #[inline(always)]
    pub(crate) fn member(&mut self, name: &str) -> Option<&mut Self> {
        self.key_after(b",", name).map(|()| self)
    }

    /// `"name":` next (a key written without escapes), consumed; `None`, and nothing
    /// consumed, when another key or anything else is next. Inlined: its callers name
    /// a constant key, whose check of its own bytes then folds away, and whose bytes
    /// are compared as a constant of known length.
    #[inline(always)]
    pub(crate) fn key(&mut self, name: &str) -> Option<()> {
        self.key_after(b"", name)
    }

    /// `lead` then `"name":`, as [`Compact::key`] reads the key.
    #[inline(always)]
    fn key_after(&mut self, lead: &[u8], name: &str) -> Option<()> {
        // A key without escapes: the name's own bytes between the quotes.
        if name.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
            return None;
        }
        let (lead_len, len) = (lead.len(), name.len());
        let rest = self.text.as_bytes().get(self.lexer.at()..)?;
        let read = rest.get(..lead_len + len + 3)?;
        let fits = &read[..lead_len] == lead
            && read[lead_len] == b'"'
            && &read[lead_len + 1..lead_len + 1 + len] == name.as_bytes()
            && read[lead_len + 1 + len..] == *b"\":";
        if !fits {
            return None;
        }
        // All ASCII: the cursor stays on a character boundary.
        self.lexer.advance(read.len());
        Some(())
    }

    /// A string token, quotes included, as it stands.
    pub(crate) fn string_token(&mut self) -> Option<&'a str> {
        let (span, _) = self.lexer.string().ok()?;
        Some(&self.text[span.range()])
    }

    /// A string's text: borrowed unless it holds an escape.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        let (span, escaped) = self.lexer.string().ok()?;
        Some(if escaped {
            unescape(&self.text[span.range()])
        } else {
            Cow::Borrowed(&self.text[span.inside()])
        })
    }

    /// A number token as it stands.
    pub(crate) fn number(&mut self) -> Option<&'a str> {
        let start = self.lexer.at();
        if !matches!(self.lexer.peek(), Some(b'-' | b'0'..=b'9')) {
            return None;
        }
        self.lexer.number().ok()?;
        Some(&self.text[start..self.lexer.at()])
    }

    /// `true` or `false`.
    pub(crate) fn boolean(&mut self) -> Option<bool> {
        match self.lexer.peek()? {
            b't' => self.lexer.literal("true").ok().map(|()| true),
            b'f' => self.lexer.literal("false").ok().map(|()| false),
            _ => None,
        }
    }

    /// The value next read into a light tree in `arena` as [`LiteJson::read`] reads a
    /// text of its own, and its text; `None` (the cursor where it was) where that read
    /// refuses it.
    pub(crate) fn lite(&mut self, arena: &'a LiteArena) -> Option<(LiteJson<'a>, &'a str)> {
        let start = self.lexer.at();
        let (value, len) = LiteJson::read_prefix(&self.text[start..], arena)?;
        self.lexer.advance(len);
        Some((value, &self.text[start..start + len]))
    }

    /// One whole value, as its text stands (whitespace inside it allowed, as serde_json
    /// allows it in a raw value).
    pub(crate) fn value(&mut self) -> Option<&'a str> {
        let start = self.lexer.at();
        self.skip_value(0).ok()?;
        Some(&self.text[start..self.lexer.at()])
    }

    fn skip_value(&mut self, depth: usize) -> Result<(), NotJson> {
        if depth >= MAX_DEPTH {
            return Err(NotJson);
        }
        match self.lexer.peek().ok_or(NotJson)? {
            b'{' => self.skip_container(b'}', true, depth + 1),
            b'[' => self.skip_container(b']', false, depth + 1),
            b'"' => self.lexer.string().map(|_| ()),
            b't' => self.lexer.literal("true"),
            b'f' => self.lexer.literal("false"),
            b'n' => self.lexer.literal("null"),
            b'-' | b'0'..=b'9' => self.lexer.number(),
            _ => Err(NotJson),
        }
    }

    fn skip_container(&mut self, close: u8, keyed: bool, depth: usize) -> Result<(), NotJson> {
        self.lexer.expect(self.lexer.peek().ok_or(NotJson)?)?;
        self.lexer.skip_whitespace();
        if self.lexer.expect(close).is_ok() {
            return Ok(());
        }
        loop {
            if keyed {
                self.lexer.string()?;
                self.lexer.skip_whitespace();
                self.lexer.expect(b':')?;
                self.lexer.skip_whitespace();
            }
            self.skip_value(depth)?;
            self.lexer.skip_whitespace();
            if self.lexer.expect(b',').is_err() {
                return self.lexer.expect(close);
            }
            self.lexer.skip_whitespace();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_layout_token_by_token() {
        let text = r#"{"a":"x\"y","b":-1.5e3,"c":true,"d":{"e" : [1, {"f":null}]},"g":"\u00e9"}"#;
        let mut c = Compact::new(text);
        assert_eq!(c.byte(b'{'), Some(()));
        assert_eq!(c.key("b"), None, "another key: nothing consumed");
        assert_eq!(c.key("a"), Some(()));
        assert_eq!(c.string(), Some(Cow::Owned("x\"y".to_owned())));
        assert_eq!(c.byte(b','), Some(()));
        assert_eq!(c.key("b"), Some(()));
        assert_eq!(c.number(), Some("-1.5e3"));
        assert_eq!(c.byte(b','), Some(()));
        assert_eq!(c.key("c"), Some(()));
        assert_eq!(c.boolean(), Some(true));
        assert_eq!(c.byte(b','), Some(()));
        assert_eq!(c.key("d"), Some(()));
        assert_eq!(c.value(), Some(r#"{"e" : [1, {"f":null}]}"#));
        assert_eq!(c.byte(b','), Some(()));
        assert_eq!(c.key("g"), Some(()));
        assert_eq!(c.string_token(), Some(r#""\u00e9""#));
        assert!(!c.is_done());
        assert_eq!(c.byte(b'}'), Some(()));
        assert!(c.is_done());
    }

    #[test]
    fn refuses_what_the_strict_scan_refuses() {
        for bad in [
            r#""\ud800""#,
            "\"a\u{1}\"",
            r#""\x""#,
            "01",
            "1.",
            "[1,]",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            "tru",
            "[",
        ] {
            let mut c = Compact::new(bad);
            let whole = c.value().is_some() && c.is_done();
            assert!(!whole, "{bad}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(
            Compact::new(&deep).value(),
            None,
            "left to the general reading"
        );
        let fine = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert_eq!(Compact::new(&fine).value(), Some(fine.as_str()));
    }
}
