//! A JSON value read into a light tree over its text: strings borrowed unless they hold
//! an escape, numbers as their literal, an object's members in a list, every list in one
//! arena ([`LiteArena`]: one allocation for a document, not one per object and array).
//! What a retry's answers, a token's recorded questions and a call's arguments are read
//! into (the declared capabilities are the gate's scan's, `Index::declared_paths`): the
//! tree `serde_json` builds with `preserve_order` (an `IndexMap`, SipHash, an owned key
//! per member) costs several times as much for the few members the rules look at.
//!
//! Invariant: [`LiteJson::read`] accepts a text only where the strict scan accepts it
//! (a key twice, `__proto__` and serde_json's two stand-in keys are refused, as there,
//! and so is nesting the strict parse refuses) and reads it to the value the strict
//! parse reads; numbers answer as `serde_json`'s `arbitrary_precision` numbers answer (a
//! literal is kept as the text spells it, where serde_json respells an exponent
//! `1e+3`: every reader parses it, none compares the spelling).

use super::lexer::{Lexer, NotJson, unescape};
use crate::jsonrpc::StrictRefusal;
use crate::jsonrpc::view::JsonView;
use std::borrow::Cow;

/// Where a [`LiteJson`] keeps its lists (and the text of a string with an escape).
pub type LiteArena = bumpalo::Bump;

/// What an arena for the values of one request is created with: a request's answers,
/// questions, capabilities or arguments fit, and a larger document takes more chunks.
pub(crate) const LITE_ARENA_BYTES: usize = 2048;

/// Containers nest fewer levels than this, as the strict parse reads them (`serde_json`'s
/// recursion limit).
const MAX_DEPTH: usize = 128;

/// Up to this many members, an object's keys are checked for a duplicate pair by pair;
/// past it, sorted.
const PAIRWISE_DUPLICATES: usize = 16;

/// A JSON value over the text it was read from (and the arena its lists are in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LiteJson<'a> {
    Null,
    Bool(bool),
    /// The number's literal, as the text spells it.
    Number(&'a str),
    String(&'a str),
    Array(&'a [LiteJson<'a>]),
    /// The members in the text's order, no key twice.
    Object(&'a [(&'a str, LiteJson<'a>)]),
}

impl<'a> LiteJson<'a> {
    /// One JSON value (whitespace around it allowed), its lists in `arena`; `None` when
    /// the strict parse would refuse the text.
    pub fn read(text: &'a str, arena: &'a LiteArena) -> Option<Self> {
        let mut reader = Reader::new(text, arena);
        reader.lexer.skip_whitespace();
        let value = reader.value(0).ok()?;
        reader.lexer.skip_whitespace();
        reader.lexer.is_done().then_some(value)
    }

    /// The value that starts `text` (no whitespace before it), read as
    /// [`LiteJson::read`] reads it, and how many bytes it took; what follows is not
    /// looked at.
    pub(crate) fn read_prefix(text: &'a str, arena: &'a LiteArena) -> Option<(Self, usize)> {
        let mut reader = Reader::new(text, arena);
        let value = reader.value(0).ok()?;
        Some((value, reader.lexer.at()))
    }
}

struct Reader<'a> {
    text: &'a str,
    lexer: Lexer<'a>,
    arena: &'a LiteArena,
    /// The items and members of the lists open, innermost last (an item's key is
    /// empty): a list is copied into the arena whole when it closes.
    pending: bumpalo::collections::Vec<'a, (&'a str, LiteJson<'a>)>,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str, arena: &'a LiteArena) -> Self {
        Reader {
            text,
            lexer: Lexer::new(text),
            arena,
            pending: bumpalo::collections::Vec::with_capacity_in(8, arena),
        }
    }

    fn value(&mut self, depth: usize) -> Result<LiteJson<'a>, NotJson> {
        Ok(match self.lexer.peek().ok_or(NotJson)? {
            b'{' => self.object(depth + 1)?,
            b'[' => self.array(depth + 1)?,
            b'"' => LiteJson::String(self.string()?),
            b't' => self.lexer.literal("true").map(|()| LiteJson::Bool(true))?,
            b'f' => self
                .lexer
                .literal("false")
                .map(|()| LiteJson::Bool(false))?,
            b'n' => self.lexer.literal("null").map(|()| LiteJson::Null)?,
            b'-' | b'0'..=b'9' => {
                let start = self.lexer.at();
                self.lexer.number()?;
                LiteJson::Number(&self.text[start..self.lexer.at()])
            }
            _ => return Err(NotJson),
        })
    }

    #[inline(always)]
    fn string(&mut self) -> Result<&'a str, NotJson> {
        let (span, escaped) = self.lexer.string()?;
        Ok(match escaped.then(|| unescape(&self.text[span.range()])) {
            Some(Cow::Owned(text)) => self.arena.alloc_str(&text),
            _ => &self.text[span.inside()],
        })
    }

    /// After the opening bracket or brace: `true` when the container is empty (and
    /// closed), whitespace skipped.
    fn open(&mut self, close: u8, depth: usize) -> Result<bool, NotJson> {
        if depth >= MAX_DEPTH {
            return Err(NotJson);
        }
        self.lexer.expect(self.lexer.peek().ok_or(NotJson)?)?;
        self.lexer.skip_whitespace();
        Ok(self.lexer.expect(close).is_ok())
    }

    /// After a member or an item: `true` at the closing byte (consumed), `false` after a
    /// comma (consumed, whitespace skipped).
    #[inline(always)]
    fn next(&mut self, close: u8) -> Result<bool, NotJson> {
        self.lexer.skip_whitespace();
        if self.lexer.expect(close).is_ok() {
            return Ok(true);
        }
        self.lexer.expect(b',')?;
        self.lexer.skip_whitespace();
        Ok(false)
    }

    fn array(&mut self, depth: usize) -> Result<LiteJson<'a>, NotJson> {
        let base = self.pending.len();
        if !self.open(b']', depth)? {
            loop {
                let item = self.value(depth)?;
                self.pending.push(("", item));
                if self.next(b']')? {
                    break;
                }
            }
        }
        let items =
            (self.arena).alloc_slice_fill_iter(self.pending.drain(base..).map(|(_, item)| item));
        Ok(LiteJson::Array(items))
    }

    fn object(&mut self, depth: usize) -> Result<LiteJson<'a>, NotJson> {
        let base = self.pending.len();
        if !self.open(b'}', depth)? {
            loop {
                let key = self.string()?;
                // Refused as the scanner refuses them, wherever they stand.
                if StrictRefusal::of_key(key).is_some() {
                    return Err(NotJson);
                }
                self.lexer.skip_whitespace();
                self.lexer.expect(b':')?;
                self.lexer.skip_whitespace();
                let value = self.value(depth)?;
                self.pending.push((key, value));
                if self.next(b'}')? {
                    break;
                }
            }
        }
        let members = self.arena.alloc_slice_copy(&self.pending[base..]);
        self.pending.truncate(base);
        if has_duplicate(members, self.arena) {
            return Err(NotJson);
        }
        Ok(LiteJson::Object(members))
    }
}

/// Whether two members have the same key: compared pair by pair when they are few, else
/// in a sorted copy of the keys (in `arena`).
fn has_duplicate(members: &[(&str, LiteJson<'_>)], arena: &LiteArena) -> bool {
    if members.len() <= PAIRWISE_DUPLICATES {
        return (members.iter().enumerate())
            .any(|(i, (key, _))| members[..i].iter().any(|(earlier, _)| earlier == key));
    }
    let keys = arena.alloc_slice_fill_iter(members.iter().map(|(key, _)| *key));
    keys.sort_unstable();
    keys.windows(2).any(|pair| pair[0] == pair[1])
}

impl JsonView for LiteJson<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            LiteJson::String(text) => Some(text),
            _ => None,
        }
    }
    fn as_bool(&self) -> Option<bool> {
        match self {
            LiteJson::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn number_literal(&self) -> Option<&str> {
        match self {
            LiteJson::Number(literal) => Some(literal),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self, LiteJson::Null)
    }
    fn as_array(&self) -> Option<&[Self]> {
        match self {
            LiteJson::Array(items) => Some(items),
            _ => None,
        }
    }
    fn entries(&self) -> Option<impl Iterator<Item = (&str, &Self)>> {
        match self {
            LiteJson::Object(members) => Some(members.iter().map(|(k, v)| (*k, v))),
            _ => None,
        }
    }
    fn get(&self, name: &str) -> Option<&Self> {
        match self {
            LiteJson::Object(members) => members.iter().find(|(k, _)| *k == name).map(|(_, v)| v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::parse_bounded;
    use serde_json::Value;

    /// What a `serde_json` tree of the same text answers, member by member.
    fn same(lite: &LiteJson<'_>, tree: &Value) -> bool {
        lite.as_str() == tree.as_str()
            && lite.as_bool() == tree.as_bool()
            && lite.as_f64().map(f64::to_bits) == tree.as_f64().map(f64::to_bits)
            && lite.as_u64() == tree.as_u64()
            && lite.is_null() == tree.is_null()
            && lite.is_number() == tree.is_number()
            && match (lite.as_array(), tree.as_array()) {
                (Some(a), Some(b)) => {
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
                }
                (a, b) => a.is_none() && b.is_none(),
            }
            && match (lite.entries(), JsonView::entries(tree)) {
                (Some(a), Some(b)) => {
                    let (a, b): (Vec<_>, Vec<_>) = (a.collect(), b.collect());
                    a.len() == b.len()
                        && a.iter()
                            .zip(&b)
                            .all(|((ka, va), (kb, vb))| ka == kb && same(va, vb))
                }
                (a, b) => a.is_none() && b.is_none(),
            }
    }

    #[test]
    fn reads_what_the_strict_parse_reads_to_the_same_answers() {
        for text in [
            r#"{"a":1,"b":[true,false,null,"x\u00e9\n"],"c":{"d":-0.5e3,"e":18446744073709551615}}"#,
            " { \"k\" : [ 1 , 2.50 , 1e400 , -0 ] , \"\\u0041\" : { } , \"z\" : [ ] } ",
            r#"{"required":["region"],"properties":{"region":{"type":"string","minLength":1}}}"#,
            "\"plain\"",
            "12",
            "[[[[]]]]",
        ] {
            let tree = parse_bounded(text.as_bytes(), usize::MAX).unwrap();
            let arena = LiteArena::new();
            let lite = LiteJson::read(text, &arena).unwrap_or_else(|| panic!("{text} not read"));
            assert!(same(&lite, &tree), "{text}");
        }
    }

    #[test]
    fn refuses_what_the_strict_parse_refuses() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"b":{"c":1,"c":1}}"#,
            r#"{"a":1,}"#,
            "[1,]",
            "[1 2]",
            r#""\ud800""#,
            "\"tab\there\"",
            "01",
            "1.",
            "{\"a\" 1}",
            "",
            "[] []",
            "nul",
        ] {
            assert!(
                LiteJson::read(text, &LiteArena::new()).is_none(),
                "{text:?} was read"
            );
            assert!(
                parse_bounded(text.as_bytes(), usize::MAX).is_err(),
                "{text:?}"
            );
        }
        // A duplicate among many keys is found as well.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{}\":{i}", i % 39)).collect();
        let arena = LiteArena::new();
        assert!(LiteJson::read(&format!("{{{}}}", many.join(",")), &arena).is_none());
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let text = format!("{{{}}}", many.join(","));
        let read = LiteJson::read(&text, &arena).unwrap();
        assert_eq!(read.get("k39").and_then(JsonView::as_u64), Some(39));
    }

    #[test]
    fn nesting_stops_where_the_strict_parse_stops() {
        let deep =
            |n: usize, open: &str, close: &str| format!("{}{}", open.repeat(n), close.repeat(n));
        let arena = LiteArena::new();
        for n in MAX_DEPTH - 3..=MAX_DEPTH + 3 {
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                let text = deep(n, open, close).replace("{\"a\":}", "{}");
                let text = if open == "[" {
                    text
                } else {
                    format!("{}1{}", open.repeat(n), close.repeat(n))
                };
                assert_eq!(
                    LiteJson::read(&text, &arena).is_some(),
                    parse_bounded(text.as_bytes(), usize::MAX).is_ok(),
                    "{n} levels of {open}"
                );
            }
        }
    }

    #[test]
    fn keys_the_scanner_refuses_are_refused() {
        let arena = LiteArena::new();
        for text in [
            r#"{"__proto__":{}}"#,
            r#"{"a":[{"__proto__":1}]}"#,
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"a":1,"$serde_json::private::Number":"1"}"#,
            r#"{"$serde_json::private::RawValue":"{}"}"#,
            r#"{"a":{"b":1,"$serde_json::private::RawValue":"1"}}"#,
        ] {
            assert!(LiteJson::read(text, &arena).is_none(), "{text}");
        }
        assert!(LiteJson::read(r#"{"__proto":1,"proto__":2}"#, &arena).is_some());
    }

    #[test]
    fn a_prefix_reads_as_the_value_alone_reads_and_says_where_it_ends() {
        let arena = LiteArena::new();
        for value in [
            r#"{"a":[1,{"b":"\u00e9"}],"c":null}"#,
            r#"[]"#,
            r#""x""#,
            r#"-1.5e3"#,
            r#"true"#,
            r#"{"a":1,"a":2}"#,
            r#"{"__proto__":1}"#,
            r#"{"a":01}"#,
            r#"{"a":"#,
        ] {
            for rest in ["", ",\"n\":3}", "}", " x"] {
                let text = format!("{value}{rest}");
                let whole = LiteJson::read(value, &arena);
                let prefix = LiteJson::read_prefix(&text, &arena);
                assert_eq!(prefix, whole.map(|v| (v, value.len())), "{text}");
            }
        }
    }
}
