//! One pass over a body's bytes that gives the verdict of [`parse_bounded`] followed by
//! `classify` (the tree oracle), without building a tree: the spans of the members the
//! sidecar acts on, and the [`Message`].
//!
//! Invariant: for every input, [`scan`] answers exactly what
//! `parse_bounded(bytes, max_values).and_then(|v| classify(&v))` answers, the same
//! [`ParseError`] with the same payload. That includes the strict parse's order: values
//! are counted as they start, `__proto__` is refused when its key is read, a duplicate
//! key when its value has been read (keys compared after unescaping), the first refusal
//! in document order wins, and a body that is not JSON further on is
//! [`ParseError::Syntax`] whatever was refused before. So a scanner that is wrong about
//! a body is a bug the differential tests (`scan/tests.rs`, `tests/cases/json_corpus.rs`,
//! the `scan` fuzz target) exist to find, never a second opinion.
//!
//! One deliberate difference: a key spelled like serde_json's stand-in for an
//! arbitrary-precision number ([`NUMBER_TOKEN`](super::strict::NUMBER_TOKEN)) is refused as ambiguous, wherever it
//! is, when its key is read (as `__proto__` is). The tree path cannot tell
//! `{"$serde_json::private::Number":"1"}` from the number `1` (serde_json hands it both
//! the same way) and reads it as the number, while every other parser, the upstream's
//! included, reads an object: the sidecar would bind and check one value and forward
//! another. The differential tests accept any tree verdict for such a body. Its
//! raw-value stand-in ([`RAW_VALUE_TOKEN`](super::strict::RAW_VALUE_TOKEN)) is refused by both paths alike.
//!
//! And one bound: a text of 4 GiB or more is refused as not JSON (its places do not fit
//! a span; see `lexer::MAX_TEXT`), where the tree path would parse it. Only limits set
//! above 4 GiB let such a body be read whole; the scans stay closed if they do.
//!
//! The index also keeps the whitespace skipped between tokens, so a compact copy of the
//! body (what the upstream receives: [`super::ScannedBody`]) is written without a second
//! scan.
//!
//! Nothing is allocated per key in the common case: a key without escapes is compared as
//! the bytes between its quotes, an object's keys are checked for duplicates against the
//! ones seen so far (a hash set only once an object holds more than [`SMALL_OBJECT`]
//! keys, or an escaped one), and the folded spellings the classification compares are
//! never built.

mod answer;
mod compact;
mod escapes;
mod facts;
mod fields;
mod lexer;
mod lite;
mod members;

pub use answer::Answer;
pub use answer::scan_answer;
pub(crate) use answer::{AnswerFault, StateMember};
pub(crate) use compact::Compact;
pub(crate) use escapes::{Passed, Rules, pass_escaped};
pub(crate) use facts::JsonKind;
pub use fields::{EnvelopeField, ParamsField, ResultField};
pub(crate) use lexer::string_specials;
pub(crate) use lite::LITE_ARENA_BYTES;
pub use lite::{LiteArena, LiteJson};
pub(crate) use members::{Cursor, each_member, members};

use super::{Message, ParseError, StrictRefusal, parse_bounded};
use facts::{Facts, Member, Role};
use lexer::{Lexer, NotJson, Span, unescape};
use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;

/// serde_json's recursion limit: the 128th array or object nested in one another is
/// refused (its `remaining_depth` starts at 128 and fails on reaching 0).
const MAX_DEPTH: usize = 128;
/// Up to this many keys, an object's duplicates are found by comparing each key with the
/// ones before it; beyond, through a hash set (a quadratic scan would let one large
/// object cost seconds).
const SMALL_OBJECT: usize = 16;

/// Scan one client body: [`parse_bounded`] and the oracle's `classify` in one pass
/// over the bytes (see the module's invariant), except that serde_json's number stand-in
/// key is refused (see [`NUMBER_TOKEN`](super::strict::NUMBER_TOKEN)).
pub fn scan(bytes: &[u8], max_values: usize) -> Result<Scanned<'_>, Refused> {
    refuse_bom(bytes)?;
    // Every byte of a JSON text is either ASCII grammar or inside a string, whose UTF-8
    // serde_json checks: the whole body being UTF-8 is the same condition, checked fast.
    let text = crate::text::utf8(bytes).ok_or(ParseError::Syntax)?;
    scan_text(text, max_values)
}

/// serde_json refuses a body that starts with a byte order mark before anything else.
pub(crate) fn refuse_bom(bytes: &[u8]) -> Result<(), ParseError> {
    match bytes.starts_with(b"\xef\xbb\xbf") {
        true => Err(ParseError::Bom),
        false => Ok(()),
    }
}

/// [`scan`] over a body already known to be UTF-8 with no byte order mark (checked by
/// [`refuse_bom`] first, then the conversion, in that order).
pub(crate) fn scan_text(text: &str, max_values: usize) -> Result<Scanned<'_>, Refused> {
    let mut facts = Facts::default();
    let mut walk = Walk {
        lexer: Lexer::new(text),
        text,
        left: max_values,
        refusal: None,
        // A message's objects are small: room for their keys without regrowing.
        keys: Vec::with_capacity(16),
        sets: Vec::new(),
        facts: &mut facts,
        elements: Vec::new(),
    };
    let root = walk.document().map_err(|NotJson| ParseError::Syntax)?;
    if let Some(refusal) = walk.refusal {
        return Err(refusal.error().into());
    }
    let facts: &Facts = walk.facts;
    let message = facts.classify(text, root).map_err(|error| Refused {
        error,
        // The body is JSON: the answer names its id when it has a usable one.
        id: facts
            .envelope
            .get(super::ENVELOPE_FIELDS, "id")
            .filter(|id| matches!(id.kind, JsonKind::String | JsonKind::Number))
            .and_then(|id| member_value(text, id).ok()),
    })?;
    Ok(Scanned {
        text,
        message,
        index: Index {
            envelope: facts.envelope.spans(),
            params: facts.params.spans(),
            params_keys: facts.params.key_spans(),
            result: facts.result.spans(),
            declared: facts.declared(),
            declared_paths: facts.declared_paths(),
            gaps: walk.lexer.into_gaps(),
        },
    })
}

/// Why [`scan`] refused a body, and the id to answer with when the body was JSON with a
/// string or number id (what [`best_effort_id`](super::best_effort_id) reads of the
/// tree).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub error: ParseError,
    pub id: Option<super::Id>,
}

impl From<ParseError> for Refused {
    fn from(error: ParseError) -> Self {
        Refused { error, id: None }
    }
}

/// An accepted body: its message and where the members the sidecar acts on are.
#[derive(Debug, Clone, PartialEq)]
pub struct Scanned<'a> {
    text: &'a str,
    message: Message,
    index: Index,
}

/// Where the members the sidecar acts on are in a scanned body, and the whitespace
/// between its tokens: owned, so it outlives the borrow of the scan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Index {
    envelope: [Option<Span>; facts::MAX_FIELDS],
    params: [Option<Span>; facts::MAX_FIELDS],
    params_keys: [Option<Span>; facts::MAX_FIELDS],
    result: [Option<Span>; facts::MAX_FIELDS],
    /// `params._meta[CAPABILITIES_META]`: what the client declared it can answer.
    declared: Option<Span>,
    /// What the declaration holds of `DECLARED_PATHS` (see [`Index::declared_paths`]).
    declared_paths: Option<u8>,
    gaps: Vec<Span>,
}

impl Index {
    /// The span of an envelope member's value.
    pub fn envelope(&self, field: EnvelopeField) -> Option<Range<usize>> {
        span(&self.envelope, super::ENVELOPE_FIELDS, field.name())
    }

    /// The span of a member's value in `params`, when `params` is an object.
    pub fn param(&self, field: ParamsField) -> Option<Range<usize>> {
        span(&self.params, super::PARAMS_FIELDS, field.name())
    }

    /// The span of a `params` member's key (quotes included).
    pub(crate) fn param_key(&self, field: ParamsField) -> Option<Range<usize>> {
        span(&self.params_keys, super::PARAMS_FIELDS, field.name())
    }

    /// The span of a member's value in `result`, when the message is a response whose
    /// `result` is an object.
    pub fn result(&self, field: ResultField) -> Option<Range<usize>> {
        span(&self.result, super::RESULT_FIELDS, field.name())
    }

    /// The span of the client capabilities a call declared
    /// (`params._meta["io.modelcontextprotocol/clientCapabilities"]`).
    pub fn declared(&self) -> Option<Range<usize>> {
        self.declared.map(|s| s.range())
    }

    /// What the declared capabilities hold, read during the scan: bit `i` set when the
    /// `i`-th path of [`DECLARED_PATHS`](super::DECLARED_PATHS) leads, spelled exactly,
    /// to a value that is not null; `None` when nothing is declared or the declaration
    /// is no object.
    pub(crate) fn declared_paths(&self) -> Option<u8> {
        self.declared_paths
    }

    /// The whitespace runs between tokens, in order.
    pub fn gaps(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.gaps.iter().map(|g| g.range())
    }
}

impl<'a> Scanned<'a> {
    /// The message, as the tree oracle's `classify` gives it.
    pub fn message(&self) -> &Message {
        &self.message
    }

    pub fn into_message(self) -> Message {
        self.message
    }

    /// The message and the index, owned.
    pub(crate) fn into_parts(self) -> (Message, Index) {
        (self.message, self.index)
    }

    /// The scanned body.
    pub fn body(&self) -> &'a str {
        self.text
    }

    /// Where the members are.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The text of the string token at `span` (one this index gave), unescaped: borrowed
    /// from the body when it holds no escape. `None` when `span` is no string token.
    pub fn string(&self, span: Range<usize>) -> Option<Cow<'a, str>> {
        string_in(self.text, span)
    }
}

/// The text of the string token at `span` of `body` (text: its bytes are not checked as
/// UTF-8 again), unescaped (borrowed when it holds no escape); `None` when `span` is no
/// string token, or is off a character's boundary.
pub(crate) fn string_in(body: &str, span: Range<usize>) -> Option<Cow<'_, str>> {
    unescaped_token(body.get(span)?)
}

/// `token` unescaped, if it is exactly one string token.
fn unescaped_token(token: &str) -> Option<Cow<'_, str>> {
    // Past its first 64 bytes the lexer jumps to the next quote or backslash (a token
    // is ~1.7 kB of plain bytes).
    let mut lexer = Lexer::new(token);
    let (_, escaped) = lexer.string().ok()?;
    if !lexer.is_done() {
        return None;
    }
    Some(if escaped {
        unescape(token)
    } else {
        Cow::Borrowed(&token[1..token.len() - 1])
    })
}

/// Whether `text` is exactly one string token as the strict scan reads one (quotes
/// included; escapes well formed, no lone surrogate, no raw control character).
pub(crate) fn is_string_token(text: &str) -> bool {
    let mut lexer = Lexer::new(text);
    lexer.string().is_ok() && lexer.is_done()
}

/// The text of the string token at `span` of a body [`scan`] accepted, a span its
/// [`Index`] gave: the scan checked the token, so only an escape is looked for (one
/// vectorised search), and it is borrowed when there is none.
pub(crate) fn scanned_string(body: &str, span: Range<usize>) -> Cow<'_, str> {
    let token = &body[span];
    debug_assert!(token.len() >= 2 && token.starts_with('"') && token.ends_with('"'));
    unescape(token)
}

/// The span `spans` holds for `name`, one of `fields` (inlined with its constants, as
/// [`facts::field_index`]).
#[inline(always)]
fn span(spans: &[Option<Span>], fields: &[&str], name: &str) -> Option<Range<usize>> {
    let at = facts::field_index(fields, name)?;
    spans[at].map(|s| s.range())
}

/// One scan in progress.
struct Walk<'a, 'f> {
    lexer: Lexer<'a>,
    text: &'a str,
    /// Values that may still start.
    left: usize,
    /// The first refusal in document order. From then on only the syntax is checked, as
    /// the tree path's second pass does (no count, no key checks, no classification).
    refusal: Option<StrictRefusal>,
    /// The keys of the small objects open, outermost first, for duplicates: the text
    /// between their quotes (an object with an escaped key keeps its keys in a set).
    keys: Vec<&'a str>,
    /// The keys of the large objects open (or holding an escaped key), outermost first:
    /// kept here rather than beside each object, so an object that needs none has none
    /// to drop.
    sets: Vec<HashSet<Cow<'a, str>>>,
    /// Where the facts are gathered: held by the caller (1.2 KB, written in place
    /// rather than moved out of the walk).
    facts: &'f mut Facts,
    /// The messages of a batch, when reading an answer: the objects of its root array
    /// and of the arrays in it.
    elements: Vec<Span>,
}

impl<'a> Walk<'a, '_> {
    fn document(&mut self) -> Result<Member, NotJson> {
        let root = self.value(Role::Envelope, 0)?;
        self.lexer.skip_whitespace();
        if !self.lexer.is_done() {
            return Err(NotJson);
        }
        Ok(root)
    }

    fn strict(&self) -> bool {
        self.refusal.is_none()
    }

    /// One value, inside `depth` arrays and objects. Counted as it starts, before its
    /// first byte is read, as the tree path counts. A string (most values are) is read
    /// here, inlined where a value is asked for; anything else by [`Walk::other_value`].
    #[inline(always)]
    fn value(&mut self, role: Role, depth: usize) -> Result<Member, NotJson> {
        if self.strict() {
            match self.left.checked_sub(1) {
                Some(left) => self.left = left,
                None => self.refusal = Some(StrictRefusal::TooManyValues),
            }
        }
        self.lexer.skip_whitespace();
        if self.lexer.peek() == Some(b'"') {
            let (span, _) = self.lexer.string()?;
            return Ok(Member {
                span,
                kind: JsonKind::String,
            });
        }
        self.other_value(role, depth)
    }

    /// A value that is no string, counted already, from its first byte.
    fn other_value(&mut self, role: Role, depth: usize) -> Result<Member, NotJson> {
        let start = self.lexer.at();
        let kind = match self.lexer.peek().ok_or(NotJson)? {
            b'{' => self.object(role, depth + 1)?,
            b'[' => {
                self.array(role, depth + 1)?;
                JsonKind::Array
            }
            b'-' | b'0'..=b'9' => {
                self.lexer.number()?;
                JsonKind::Number
            }
            b't' => self.literal("true", JsonKind::Bool)?,
            b'f' => self.literal("false", JsonKind::Bool)?,
            b'n' => self.literal("null", JsonKind::Null)?,
            _ => return Err(NotJson),
        };
        let end = self.lexer.at();
        Ok(Member {
            span: Span::new(start, end),
            kind,
        })
    }

    fn literal(&mut self, word: &str, kind: JsonKind) -> Result<JsonKind, NotJson> {
        self.lexer.literal(word)?;
        Ok(kind)
    }

    /// An array, the `depth`-th container open.
    fn array(&mut self, role: Role, depth: usize) -> Result<(), NotJson> {
        if depth >= MAX_DEPTH {
            return Err(NotJson);
        }
        self.lexer.expect(b'[')?;
        self.lexer.skip_whitespace();
        if self.lexer.expect(b']').is_ok() {
            return Ok(());
        }
        // An answer's root array is a batch, and so is an array in it: their objects are
        // messages.
        let batch = self.facts.answer && matches!(role, Role::Envelope | Role::Batch);
        let role = if batch { Role::Batch } else { Role::Other };
        loop {
            let element = self.value(role, depth)?;
            if batch && element.kind == JsonKind::Object {
                self.elements.push(element.span);
            }
            self.lexer.skip_whitespace();
            if self.lexer.expect(b',').is_err() {
                return self.lexer.expect(b']');
            }
        }
    }

    /// An object, the `depth`-th container open, at the place `role` names.
    fn object(&mut self, role: Role, depth: usize) -> Result<JsonKind, NotJson> {
        if depth >= MAX_DEPTH {
            return Err(NotJson);
        }
        self.lexer.expect(b'{')?;
        self.lexer.skip_whitespace();
        if self.lexer.expect(b'}').is_ok() {
            return Ok(JsonKind::Object);
        }
        let base = self.keys.len();
        // Whether this object's keys went to a set (the last of `sets` while it is open).
        let mut large = false;
        loop {
            let (key_span, escaped) = self.lexer.string()?;
            self.lexer.skip_whitespace();
            self.lexer.expect(b':')?;
            if self.strict() {
                let key = self.key(key_span, escaped);
                self.member(role, depth, key, key_span, base, &mut large)?;
            } else {
                self.value(Role::Other, depth)?;
            }
            self.lexer.skip_whitespace();
            if self.lexer.expect(b',').is_err() {
                self.lexer.expect(b'}')?;
                break;
            }
            self.lexer.skip_whitespace();
        }
        self.keys.truncate(base);
        if large {
            self.sets.pop();
        }
        Ok(JsonKind::Object)
    }

    /// A member of an object read strictly: `__proto__` is refused before its value is
    /// read, a duplicate after (where the tree path's map insert finds it).
    fn member(
        &mut self,
        role: Role,
        depth: usize,
        key: Cow<'a, str>,
        key_span: Span,
        base: usize,
        large: &mut bool,
    ) -> Result<(), NotJson> {
        if let Some(refusal) = StrictRefusal::of_key(&key) {
            self.refusal = Some(refusal);
            self.value(Role::Other, depth)?;
            return Ok(());
        }
        let member = self.value(role.child(&key), depth)?;
        if self.strict() {
            self.facts.note(role, &key, key_span, member);
            if self.is_duplicate(key, base, large) {
                self.refusal = Some(StrictRefusal::DuplicateKey);
            }
        }
        Ok(())
    }

    /// A key's text: the bytes between its quotes unless it holds an escape.
    fn key(&self, span: Span, escaped: bool) -> Cow<'a, str> {
        if escaped {
            unescape(&self.text[span.range()])
        } else {
            Cow::Borrowed(&self.text[span.inside()])
        }
    }

    /// Whether `key` was seen before in the object whose keys start at `base`; records it.
    fn is_duplicate(&mut self, key: Cow<'a, str>, base: usize, large: &mut bool) -> bool {
        if *large {
            // The object's set is the last while it is open (were it missing, the key
            // would count as seen: refused, not passed).
            return !self.sets.last_mut().is_some_and(|seen| seen.insert(key));
        }
        let key = match key {
            Cow::Borrowed(key) => key,
            // An escaped key (rare) has text of its own: its object's keys go to a set,
            // where each is compared by its text, as any later one is.
            Cow::Owned(_) => {
                let mut seen: HashSet<_> = self.keys.drain(base..).map(Cow::Borrowed).collect();
                let new = seen.insert(key);
                self.sets.push(seen);
                *large = true;
                return !new;
            }
        };
        if self.keys[base..].contains(&key) {
            return true;
        }
        self.keys.push(key);
        if self.keys.len() - base > SMALL_OBJECT {
            self.sets
                .push(self.keys.drain(base..).map(Cow::Borrowed).collect());
            *large = true;
        }
        false
    }
}

/// The value of a member the classification returns (an id): the very `Value` the tree
/// path would hold. The two spellings ids take in practice are built directly: a string
/// without escapes (the lexer checked its bytes) and an integer in canonical form, whose
/// text `Number::from` writes back byte for byte (so even with `arbitrary_precision`
/// the two are equal). Anything else (an escape, `-0`, a fraction, an exponent,
/// nineteen digits or more) is parsed on its own by the tree path's parser.
fn member_value(text: &str, member: Member) -> Result<serde_json::Value, ParseError> {
    let token = &text[member.span.range()];
    let direct = match member.kind {
        JsonKind::String => token
            .get(1..token.len() - 1)
            .filter(|inner| !inner.contains('\\'))
            .map(|inner| serde_json::Value::String(inner.to_owned())),
        JsonKind::Number => canonical_integer(token),
        _ => None,
    };
    match direct {
        Some(value) => Ok(value),
        None => parse_bounded(token.as_bytes(), usize::MAX),
    }
}

/// An integer token written as `Number::from` writes it: no sign but a `-` before a
/// nonzero, no leading zero, at most eighteen digits (so it fits either way).
fn canonical_integer(token: &str) -> Option<serde_json::Value> {
    let digits = token.strip_prefix('-').unwrap_or(token);
    let canonical = (1..=18).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && !(digits == "0" && token.starts_with('-'));
    if !canonical {
        return None;
    }
    let number = if token.starts_with('-') {
        serde_json::Number::from(token.parse::<i64>().ok()?)
    } else {
        serde_json::Number::from(token.parse::<u64>().ok()?)
    };
    Some(serde_json::Value::Number(number))
}

#[cfg(test)]
mod tests;
