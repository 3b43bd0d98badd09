//! An upstream's answer (a JSON body, an SSE event's data) read in one pass, as strictly
//! as a client's body (syntax, depth, duplicate keys at every level, `__proto__`, lone
//! surrogates, the number stand-in key) but with no cap on values: it comes from the
//! operator's own server, bounded by its bytes. What it yields is what the sealer acts
//! on: whether a key a client could read as a reserved one is there, where `result` and
//! its `requestState`, `resultType` and `inputRequests` are, and a batch's messages.
//!
//! Invariant: for an answer the tree path parses ([`parse_bounded`](crate::jsonrpc::parse_bounded)
//! without a cap), [`Answer::check`] refuses exactly what the sealer's tree checks refused
//! (`check_reserved` on the envelope, on a server request's `params` and on `error`;
//! `check_result_fields` on `error.data` and on `result`; a non-null state outside
//! `result`), in the same order; the differential fuzz targets hold it to that.

use super::facts::{Facts, JsonKind, Member};
use super::lexer::{Lexer, NotJson, Span, unescape};
use super::{EnvelopeField, ResultField, Walk, member_value};
use crate::jsonrpc::{ENVELOPE_FIELDS, ERROR_FIELDS, Id, ParseError, RESULT_FIELDS};
use std::borrow::Cow;
use std::ops::Range;

/// Scan an upstream's answer: the facts the sealer acts on, or why it is no JSON a
/// client may be handed (the strict parse's verdict, numbers' stand-in key refused).
pub fn scan_answer(bytes: &[u8]) -> Result<Answer<'_>, ParseError> {
    super::refuse_bom(bytes)?;
    let text = crate::text::utf8(bytes).ok_or(ParseError::Syntax)?;
    // Gathered in their box, which the answer keeps: the facts (1.2 KB) are written
    // once, not copied into the answer and again with it.
    let mut facts = Box::new(Facts::of_answer());
    let mut walk = Walk {
        lexer: Lexer::new(text),
        text,
        left: usize::MAX,
        refusal: None,
        keys: Vec::with_capacity(16),
        sets: Vec::new(),
        facts: &mut facts,
        elements: Vec::new(),
    };
    let root = walk.document().map_err(|NotJson| ParseError::Syntax)?;
    if let Some(refusal) = walk.refusal {
        return Err(refusal.error());
    }
    let elements = walk.elements;
    Ok(Answer {
        text,
        root,
        facts,
        elements,
    })
}

/// A scanned answer.
#[derive(Debug)]
pub struct Answer<'a> {
    text: &'a str,
    root: Member,
    facts: Box<Facts>,
    elements: Vec<Span>,
}

/// Why an answer may not reach a client as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerFault {
    /// A key where a client reads reserved names that reads like one, or is not ASCII.
    AmbiguousKey,
    /// A non-null `requestState` outside `result` (a server's request, `error.data`):
    /// there is no round to bind it to.
    StateOutsideResult,
}

/// What a result's `requestState` member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateMember {
    Absent,
    /// `null`, at this span.
    Null(Range<usize>),
    /// A string token, at this span (quotes included).
    String(Range<usize>),
    /// Anything else: no state a client could echo as one.
    Other,
}

impl<'a> Answer<'a> {
    /// The scanned text.
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }

    /// Whether the answer is one object (a message).
    pub(crate) fn is_message(&self) -> bool {
        self.root.kind == JsonKind::Object
    }

    /// The messages of a batch, when the answer is an array: its objects, and those of
    /// the arrays in it, in order.
    pub(crate) fn batch(&self) -> Option<impl Iterator<Item = Range<usize>> + '_> {
        (self.root.kind == JsonKind::Array).then(|| self.elements.iter().map(|span| span.range()))
    }

    /// The tree sealer's checks of a message, in its order (see the module's invariant).
    pub(crate) fn check(&self) -> Result<(), AnswerFault> {
        let facts = &self.facts;
        let envelope = |name| facts.envelope.get(ENVELOPE_FIELDS, name);
        let object = |member: Option<Member>| member.is_some_and(|m| m.kind == JsonKind::Object);
        let state = |member: Option<Member>| member.is_some_and(|m| m.kind != JsonKind::Null);
        if facts.envelope.is_faulty() {
            return Err(AnswerFault::AmbiguousKey);
        }
        if object(envelope("params")) {
            if facts.params.is_faulty() {
                return Err(AnswerFault::AmbiguousKey);
            }
            if state(facts.params.get(RESULT_FIELDS, "requestState")) {
                return Err(AnswerFault::StateOutsideResult);
            }
        }
        if object(envelope("error")) {
            if facts.error.is_faulty() {
                return Err(AnswerFault::AmbiguousKey);
            }
            if object(facts.error.get(ERROR_FIELDS, "data")) {
                if facts.data.is_faulty() {
                    return Err(AnswerFault::AmbiguousKey);
                }
                if state(facts.data.get(RESULT_FIELDS, "requestState")) {
                    return Err(AnswerFault::StateOutsideResult);
                }
            }
        }
        if object(envelope("result")) && facts.result.is_faulty() {
            return Err(AnswerFault::AmbiguousKey);
        }
        Ok(())
    }

    /// The message's id, as the tree reads it.
    pub(crate) fn id(&self) -> Option<Id> {
        let id = self.facts.envelope.get(ENVELOPE_FIELDS, "id")?;
        member_value(self.text, id).ok()
    }

    /// The span of an envelope member, whatever it holds.
    pub(crate) fn envelope(&self, field: EnvelopeField) -> Option<Range<usize>> {
        let member = self.facts.envelope.get(ENVELOPE_FIELDS, field.name())?;
        Some(member.span.range())
    }

    /// The `code` of an object `error`, when it is an integer an `i64` holds: what
    /// `serde_json`'s `as_i64` reads of it (its literal parsed, `-0` as 0, `1.0` and
    /// `1e3` as none).
    pub(crate) fn error_code(&self) -> Option<i64> {
        let error = self.facts.envelope.get(ENVELOPE_FIELDS, "error")?;
        if error.kind != JsonKind::Object {
            return None;
        }
        let code = self.facts.error.get(ERROR_FIELDS, "code")?;
        if code.kind != JsonKind::Number {
            return None;
        }
        self.text[code.span.range()].parse().ok()
    }

    /// The span of `result`, when it is an object.
    pub(crate) fn result(&self) -> Option<Range<usize>> {
        self.facts
            .envelope
            .get(ENVELOPE_FIELDS, "result")
            .filter(|m| m.kind == JsonKind::Object)
            .map(|m| m.span.range())
    }

    /// A member of an object `result`: its span and what it is.
    pub(crate) fn result_member(&self, field: ResultField) -> Option<(Range<usize>, JsonKind)> {
        self.result()?;
        let member = self.facts.result.get(RESULT_FIELDS, field.name())?;
        Some((member.span.range(), member.kind))
    }

    /// The `requestState` of an object `result`.
    pub(crate) fn state(&self) -> StateMember {
        match self.result_member(ResultField::RequestState) {
            None => StateMember::Absent,
            Some((span, JsonKind::Null)) => StateMember::Null(span),
            Some((span, JsonKind::String)) => StateMember::String(span),
            Some(_) => StateMember::Other,
        }
    }

    /// The text of a string the scan located (such as [`StateMember::String`]'s span),
    /// unescaped: borrowed when it holds no escape. No second check: the scan accepted it.
    pub(crate) fn string(&self, span: Range<usize>) -> Cow<'a, str> {
        unescape(&self.text[span])
    }

    /// Whether an object `result` asks for input (`mcp::asks_for_input`): its
    /// `resultType` is `input_required`, or it has non-null `inputRequests`.
    pub(crate) fn asks_for_input(&self) -> bool {
        let input_required =
            self.result_member(ResultField::ResultType)
                .is_some_and(|(span, kind)| {
                    kind == JsonKind::String && unescape(&self.text[span]) == "input_required"
                });
        input_required
            || self
                .result_member(ResultField::InputRequests)
                .is_some_and(|(_, kind)| kind != JsonKind::Null)
    }
}

#[cfg(test)]
mod tests;
