//! A JSON value read into a light tree over its text: strings borrowed unless they hold
//! an escape, numbers as their literal, an object's members in a list. What a retry's
//! answers and a token's recorded questions are read into to be checked: the tree
//! `serde_json` builds with `preserve_order` (an `IndexMap`, SipHash, an owned key per
//! member) costs several times as much for the few members the rules look at.
//!
//! Invariant: [`LiteJson::read`] accepts a text only where the strict parse accepts it
//! and reads it to the same value (a key twice is refused, as there); numbers answer as
//! `serde_json`'s `arbitrary_precision` numbers answer, from the same literal.

use super::lexer::{Lexer, NotJson, unescape};
use crate::jsonrpc::view::JsonView;
use std::borrow::Cow;

/// As deep as the strict parse reads (`serde_json`'s recursion limit).
const MAX_DEPTH: usize = 128;

/// Up to this many members, an object's keys are checked for a duplicate pair by pair;
/// past it, sorted.
const PAIRWISE_KEYS: usize = 16;

/// A JSON value over the text it was read from.
#[derive(Debug, Clone, PartialEq)]
pub enum LiteJson<'a> {
    Null,
    Bool(bool),
    /// The number's literal, as the text spells it.
    Number(&'a str),
    String(Cow<'a, str>),
    Array(Vec<LiteJson<'a>>),
    /// The members in the text's order, no key twice.
    Object(Vec<(Cow<'a, str>, LiteJson<'a>)>),
}

impl<'a> LiteJson<'a> {
    /// One JSON value (whitespace around it allowed), or `None` when the strict parse
    /// would refuse the text.
    pub fn read(text: &'a str) -> Option<Self> {
        let mut reader = Reader {
            text,
            lexer: Lexer::new(text),
        };
        reader.lexer.skip_whitespace();
        let value = reader.value(0).ok()?;
        reader.lexer.skip_whitespace();
        reader.lexer.is_done().then_some(value)
    }
}

struct Reader<'a> {
    text: &'a str,
    lexer: Lexer<'a>,
}

impl<'a> Reader<'a> {
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

    fn string(&mut self) -> Result<Cow<'a, str>, NotJson> {
        let (span, escaped) = self.lexer.string()?;
        let token = &self.text[span.start..span.end];
        Ok(if escaped {
            unescape(token)
        } else {
            Cow::Borrowed(&token[1..token.len() - 1])
        })
    }

    /// After the opening bracket or brace: `true` when the container is empty (and
    /// closed), whitespace skipped.
    fn open(&mut self, close: u8, depth: usize) -> Result<bool, NotJson> {
        if depth > MAX_DEPTH {
            return Err(NotJson);
        }
        self.lexer.expect(self.lexer.peek().ok_or(NotJson)?)?;
        self.lexer.skip_whitespace();
        Ok(self.lexer.expect(close).is_ok())
    }

    /// After a member or an item: `true` at the closing byte (consumed), `false` after a
    /// comma (consumed, whitespace skipped).
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
        let mut items = Vec::new();
        if !self.open(b']', depth)? {
            loop {
                items.push(self.value(depth)?);
                if self.next(b']')? {
                    break;
                }
            }
        }
        Ok(LiteJson::Array(items))
    }

    fn object(&mut self, depth: usize) -> Result<LiteJson<'a>, NotJson> {
        let mut members = Vec::new();
        if !self.open(b'}', depth)? {
            loop {
                let key = self.string()?;
                self.lexer.skip_whitespace();
                self.lexer.expect(b':')?;
                self.lexer.skip_whitespace();
                members.push((key, self.value(depth)?));
                if self.next(b'}')? {
                    break;
                }
            }
        }
        if has_duplicate(&members) {
            return Err(NotJson);
        }
        Ok(LiteJson::Object(members))
    }
}

fn has_duplicate(members: &[(Cow<'_, str>, LiteJson<'_>)]) -> bool {
    if members.len() <= PAIRWISE_KEYS {
        return (members.iter().enumerate())
            .any(|(i, (key, _))| members[..i].iter().any(|(earlier, _)| earlier == key));
    }
    let mut keys: Vec<&str> = members.iter().map(|(key, _)| key.as_ref()).collect();
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
            LiteJson::Object(members) => Some(members.iter().map(|(k, v)| (k.as_ref(), v))),
            _ => None,
        }
    }
    fn get(&self, name: &str) -> Option<&Self> {
        match self {
            LiteJson::Object(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
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
            let lite = LiteJson::read(text).unwrap_or_else(|| panic!("{text} not read"));
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
            assert!(LiteJson::read(text).is_none(), "{text:?} was read");
            assert!(
                parse_bounded(text.as_bytes(), usize::MAX).is_err(),
                "{text:?}"
            );
        }
        // A duplicate among many keys is found as well.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{}\":{i}", i % 39)).collect();
        assert!(LiteJson::read(&format!("{{{}}}", many.join(","))).is_none());
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        assert!(LiteJson::read(&format!("{{{}}}", many.join(","))).is_some());
    }

    #[test]
    fn nesting_stops_where_the_strict_parse_stops() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(LiteJson::read(&deep(MAX_DEPTH)).is_some());
        assert!(LiteJson::read(&deep(MAX_DEPTH + 1)).is_none());
        assert!(parse_bounded(deep(MAX_DEPTH + 1).as_bytes(), usize::MAX).is_err());
    }
}
