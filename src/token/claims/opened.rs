//! Claims as an opened token holds them: read by the layout the minters write (this
//! sidecar and the reference), token by token with the strict lexer, and by serde_json
//! whenever the text is laid out any other way.
//!
//! Invariant: [`OpenedClaims::decode`] answers what serde_json's reading answers. The
//! layout reading gives up (and serde_json reads the text) at the first byte it does not
//! expect, and what it does read it reads as serde_json does: strings through the strict
//! lexer (which also refuses lone surrogates, as serde_json does where it decodes a
//! string), floats other than whole seconds through serde_json itself. A property test
//! holds the two readings equal on minted claims and on any edit of them.

use super::ENVELOPE_VERSION;
use crate::jsonrpc::{Compact, JsonView, LiteArena, LiteJson};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::value::RawValue;
#[cfg(any(test, feature = "oracle"))]
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// Claims as read from an opened token, borrowing from the plaintext where no escape
/// forces a copy. Claims are authenticated, so a field of the wrong type can only come
/// from a buggy minter; it fails to parse and the token counts as malformed.
#[derive(Debug, PartialEq, Deserialize)]
pub(crate) struct OpenedClaims<'a> {
    pub(crate) v: f64,
    pub(crate) iat: f64,
    pub(crate) exp: f64,
    #[serde(borrow, default)]
    pub(crate) m: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) t: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) a: Option<Cow<'a, str>>,
    /// The upstream's state as the claims spell it: a JSON string token, quotes
    /// included, forwarded as it is (never unescaped into a copy to be escaped again).
    #[serde(borrow, deserialize_with = "raw")]
    pub(crate) s: &'a str,
    #[serde(borrow, default)]
    pub(crate) aud: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) p: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) su: bool,
    #[serde(default)]
    pub(crate) ns: bool,
    #[serde(default)]
    pub(crate) q: Option<Vec<String>>,
    /// The request path. Absent means "not bound to a path"; `null` is not absent but a
    /// claim of the wrong type, like a number.
    #[serde(borrow, default, deserialize_with = "present_str")]
    pub(crate) u: Option<Cow<'a, str>>,
    /// What each asked key asked (method, mode, schema): kept as its JSON text, read
    /// only when a retry's answers are checked against it ([`Questions`]); `null` reads
    /// as absent.
    #[serde(borrow, default, deserialize_with = "raw_or_null")]
    pub(crate) qd: Option<&'a str>,
    /// The round number.
    #[serde(default)]
    pub(crate) n: Option<u32>,
    /// The flow's start, Unix seconds.
    #[serde(default)]
    pub(crate) fs: Option<f64>,
}

/// A claim's value as its text stands.
fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<&'de str, D::Error> {
    <&RawValue>::deserialize(d).map(RawValue::get)
}

/// A claim's value as its text stands; `null` is none (as an `Option` reads it).
fn raw_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de str>, D::Error> {
    raw(d).map(|text| (text != "null").then_some(text))
}

/// A claim that, when present, must be a string: `null` fails instead of reading as
/// absent. Borrows from the plaintext unless an escape forces a copy.
fn present_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Str;
    impl<'de> Visitor<'de> for Str {
        type Value = Cow<'de, str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_owned()))
        }
    }
    d.deserialize_str(Str).map(Some)
}

impl<'a> OpenedClaims<'a> {
    /// The claims of an opened token's plaintext, if it holds claims of this version:
    /// read by their layout when they are laid out as minted, else by serde_json.
    pub(crate) fn decode(payload: &'a [u8]) -> Option<Self> {
        let claims = crate::text::utf8(payload)
            .and_then(Self::read_layout)
            .or_else(|| Self::read_general(payload))?;
        claims.checked()
    }

    /// [`OpenedClaims::decode`] of a plaintext in `arena`, the recorded questions read
    /// with it: by the layout reading, in its one pass over the claims, where the text
    /// is laid out as minted, else after serde_json's reading.
    pub(crate) fn decode_in(
        text: &'a str,
        arena: &'a LiteArena,
    ) -> Option<(Self, Option<Questions<'a>>)> {
        let (claims, read) = match Self::read_layout_in(text, Some(arena)) {
            Some((claims, read)) => (claims.checked()?, read),
            None => (Self::read_general(text.as_bytes())?.checked()?, None),
        };
        let questions = claims.qd.map(|text| Questions {
            text: Cow::Borrowed(text),
            read: Some(read.unwrap_or_else(|| read_questions(text, arena))),
        });
        Some((claims, questions))
    }

    /// Claims of this version, whose recorded questions are an object (checked without
    /// building it).
    fn checked(self) -> Option<Self> {
        let questions_object = self.qd.is_none_or(|q| q.starts_with('{'));
        (self.v == f64::from(ENVELOPE_VERSION) && questions_object).then_some(self)
    }

    /// serde_json's reading: members in any order, unknown ones ignored; the state a
    /// string the strict scan reads, as the layout reading reads it (a lone surrogate,
    /// which serde_json refused when the state was decoded into a string, is refused).
    fn read_general(payload: &'a [u8]) -> Option<Self> {
        let claims: Self = serde_json::from_slice(payload).ok()?;
        crate::jsonrpc::is_string_token(claims.s).then_some(claims)
    }

    /// The reading of claims laid out as they are minted (`MintClaims::encode_into`):
    /// no whitespace, the members in that order, each of the type it is written with.
    /// `None` at the first thing otherwise (also for a value serde_json would accept:
    /// `null`, a member out of order); [`OpenedClaims::read_general`] then decides.
    fn read_layout(text: &'a str) -> Option<Self> {
        Self::read_layout_in(text, None).map(|(claims, _)| claims)
    }

    /// [`OpenedClaims::read_layout`]; with an `arena`, the recorded questions are read
    /// into it as they are passed (`Some`: what [`Questions::read`] answers), instead of
    /// only checked. A text the strict parse refuses is then checked the layout's way,
    /// so the claims read the same either way.
    fn read_layout_in(
        text: &'a str,
        arena: Option<&'a LiteArena>,
    ) -> Option<(Self, Option<Option<LiteJson<'a>>>)> {
        let mut read = None;
        let mut c = Compact::new(text);
        c.byte(b'{')?;
        let v = float(c.first("v")?.number()?)?;
        let iat = float(c.member("iat")?.number()?)?;
        let exp = float(c.member("exp")?.number()?)?;
        let m = Some(c.member("m")?.string()?);
        let t = Some(c.member("t")?.string()?);
        let a = Some(c.member("a")?.string()?);
        let s = c.member("s")?.string_token()?;
        let aud = optional(&mut c, "aud", Compact::string)?;
        let p = optional(&mut c, "p", Compact::string)?;
        let su = optional(&mut c, "su", Compact::boolean)?;
        let ns = optional(&mut c, "ns", Compact::boolean)?;
        let q = optional(&mut c, "q", strings)?;
        let u = optional(&mut c, "u", Compact::string)?;
        let qd = optional(&mut c, "qd", |c| {
            if !c.peek_is(b'{') {
                return None;
            }
            // Read as a text of its own, as `Questions::read` reads it (serde_json passes
            // over a raw value, so its depth in the claims counts for nothing).
            if let Some((tree, text)) = arena.and_then(|arena| c.lite(arena)) {
                read = Some(Some(tree));
                return Some(text);
            }
            read = arena.map(|_| None);
            c.value()
        })?;
        let n = optional(&mut c, "n", round)?;
        let fs = optional(&mut c, "fs", |c| float(c.number()?))?;
        c.byte(b'}')?;
        let claims = OpenedClaims {
            v,
            iat,
            exp,
            m,
            t,
            a,
            s,
            aud,
            p,
            su: su.unwrap_or(false),
            ns: ns.unwrap_or(false),
            q,
            u,
            qd,
            n,
            fs,
        };
        c.is_done().then_some((claims, read))
    }
}

/// A member that may follow, read by `read`: `Some(None)` when it is not next,
/// `None` when it is but does not read.
fn optional<'a, T>(
    c: &mut Compact<'a>,
    name: &str,
    read: impl FnOnce(&mut Compact<'a>) -> Option<T>,
) -> Option<Option<T>> {
    match c.member(name) {
        Some(c) => read(c).map(Some),
        None => Some(None),
    }
}

/// A float claim as serde_json reads it. Whole seconds as this sidecar writes them
/// (`1800000000.0`: digits that fit 2^53 exactly) and integers (the version, `1`) are
/// read here; anything else (the reference's `time.time()`, with a fraction) by
/// serde_json itself, whose rounding is its own.
fn float(token: &str) -> Option<f64> {
    // Fifteen digits at most: no overflow, and every such integer is an `f64` exactly.
    // The token is a JSON number (no leading zero), so digits alone are an integer.
    let whole = token.strip_suffix(".0").unwrap_or(token);
    if (1..=15).contains(&whole.len())
        && let Some(n) = (whole.bytes()).try_fold(0u64, |n, b| {
            b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
        })
    {
        return Some(n as f64);
    }
    serde_json::from_str(token).ok()
}

/// A round number: digits that fit a `u32`, as serde_json reads one (a fraction or an
/// exponent is not an integer to it).
fn round(c: &mut Compact<'_>) -> Option<u32> {
    let token = c.number()?;
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

/// A list of strings.
fn strings(c: &mut Compact<'_>) -> Option<Vec<String>> {
    c.byte(b'[')?;
    let mut list = Vec::new();
    if c.byte(b']').is_some() {
        return Some(list);
    }
    loop {
        list.push(c.string()?.into_owned());
        if c.byte(b',').is_none() {
            c.byte(b']')?;
            return Some(list);
        }
    }
}

/// The questions a round recorded in its token (`qd`), as the JSON text the token
/// carries, and what the strict parse reads of it once read: a token opened in a
/// request's arena ([`StateSealer::open_in`](crate::token::StateSealer::open_in)) has
/// them read with its claims, any other when its answers are checked.
#[derive(Debug, Clone)]
pub struct Questions<'a> {
    text: Cow<'a, str>,
    /// `Some`: read already (`None` inside: the strict parse refuses the text).
    read: Option<Option<LiteJson<'a>>>,
}

impl<'a> Questions<'a> {
    /// Questions not read yet, their text copied out of the plaintext.
    pub(crate) fn unread(text: &str) -> Questions<'static> {
        Questions {
            text: Cow::Owned(text.to_owned()),
            read: None,
        }
    }

    /// What each asked key asked, read over the claim's text (into `arena` unless read
    /// already); `None` if the text is not an object the strict parse reads (a token of
    /// ours never holds one: its claims were checked when it opened).
    pub fn read<'v>(&'v self, arena: &'v LiteArena) -> Option<LiteJson<'v>> {
        match self.read {
            Some(read) => read,
            None => read_questions(&self.text, arena),
        }
    }

    /// Bytes its text holds on the heap of its own (none when it is borrowed from the
    /// request's arena).
    pub(crate) fn owned_bytes(&self) -> usize {
        match &self.text {
            Cow::Owned(text) => text.capacity(),
            Cow::Borrowed(_) => 0,
        }
    }

    /// The same as a `serde_json` tree, for the oracles: read by the strict parse
    /// (serde_json's own `Value` reads an object whose first key is its raw-value
    /// stand-in as the value that key's string spells).
    #[cfg(any(test, feature = "oracle"))]
    pub fn tree(&self) -> Option<Map<String, Value>> {
        match crate::jsonrpc::parse_bounded(self.text.as_bytes(), usize::MAX) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        }
    }
}

/// The recorded questions' text read as [`Questions::read`] answers.
fn read_questions<'v>(text: &'v str, arena: &'v LiteArena) -> Option<LiteJson<'v>> {
    LiteJson::read(text, arena).filter(JsonView::is_object)
}

#[cfg(test)]
mod tests;
