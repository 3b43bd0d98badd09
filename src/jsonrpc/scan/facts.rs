//! What `jsonrpc::classify` (the tree oracle) reads of a body, gathered object by
//! object as the scan passes (per key, nothing allocated), and its verdict computed from
//! them afterwards, in `classify`'s own order of checks rather than the document's.
//!
//! Every rule is the tree path's, read from the same lists ([`ENVELOPE_FIELDS`],
//! [`PARAMS_FIELDS`], [`RESULT_FIELDS`], [`ERROR_FIELDS`], [`MISPLACED_FIELDS`],
//! [`CAPABILITY_STEPS`]) and the same fold ([`folds_equal`]): `check_reserved` is the first
//! key of a level that a reserved field's fold matches or that is not ASCII;
//! `names::member` is the first key other than the name that folds to it.

use super::lexer::{Span, unescape};
use super::member_value;
use crate::jsonrpc::names::{CAPABILITY_STEPS, DECLARED_PARENTS, DECLARED_PATHS};
use crate::jsonrpc::{
    CAPABILITIES_META, ENVELOPE_FIELDS, ERROR_FIELDS, MISPLACED_FIELDS, Message, PARAMS_FIELDS,
    ParseError, RESULT_FIELDS, folds_equal, printable,
};

/// The longest field list of a level (`PARAMS_FIELDS`).
pub(super) const MAX_FIELDS: usize = 8;

/// What a JSON value is, as far as classification asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonKind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

/// A value and where it is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Member {
    pub(crate) span: Span,
    pub(crate) kind: JsonKind,
}

/// Where an object sits, as far as classification reads it. Each role is reached from
/// its parent's through an exact key (duplicates are refused, so there is one object per
/// role in a body that gets this far).
#[derive(Debug, Clone, Copy)]
pub(super) enum Role {
    Other,
    /// A value of an answer's batch (an array at the root, or in such an array): its
    /// objects are messages, read on their own.
    Batch,
    Envelope,
    Params,
    /// `params.inputResponses`.
    Answers,
    Result,
    Error,
    /// `error.data`.
    ErrorData,
    /// `params._meta`.
    Meta,
    /// The declared capabilities (`params._meta[CAPABILITIES_META]`) (`None`), or the
    /// object at the `i`-th path of [`DECLARED_PATHS`] below them.
    Declared(Option<usize>),
}

impl Role {
    /// The role of an object under `key`.
    #[inline]
    pub(crate) fn child(self, key: &str) -> Role {
        match (self, key) {
            (Role::Envelope, "params") => Role::Params,
            (Role::Envelope, "result") => Role::Result,
            (Role::Envelope, "error") => Role::Error,
            (Role::Params, "inputResponses") => Role::Answers,
            (Role::Params, "_meta") => Role::Meta,
            (Role::Error, "data") => Role::ErrorData,
            (Role::Meta, CAPABILITIES_META) => Role::Declared(None),
            (Role::Declared(at), _) => declared_child(at, key),
            _ => Role::Other,
        }
    }
}

/// The role of an object under `key` in the declaration's object at `at`: out of the
/// hot path, which meets it a few times a request at most.
#[inline(never)]
fn declared_child(at: Option<usize>, key: &str) -> Role {
    declared_below(at)
        .find(|&i| last_name(i) == key)
        .map_or(Role::Other, |i| Role::Declared(Some(i)))
}

/// The paths of [`DECLARED_PATHS`] one name below the one at `at` (`None`: the
/// declaration itself).
#[inline]
fn declared_below(at: Option<usize>) -> impl Iterator<Item = usize> {
    (0..DECLARED_PATHS.len()).filter(move |&i| DECLARED_PARENTS[i] == at)
}

/// The name the `i`-th path of [`DECLARED_PATHS`] ends with.
fn last_name(i: usize) -> &'static str {
    DECLARED_PATHS[i].last().expect("a path names something")
}

/// A key `check_reserved` refuses.
#[derive(Debug, Clone, Copy)]
struct Fault {
    key: Span,
    ambiguous: bool,
}

impl Fault {
    fn error(self, text: &str) -> ParseError {
        let key = printable_key(text, self.key);
        if self.ambiguous {
            ParseError::AmbiguousKey(key)
        } else {
            ParseError::NonAsciiKey(key)
        }
    }
}

/// The key at `span`, as an error names it.
fn printable_key(text: &str, span: Span) -> String {
    printable(&unescape(&text[span.range()]))
}

/// Where `key` is in `fields`. Inlined with the constant list of its caller, the loop
/// unrolls into a comparison with each name, of a length known: a key of another length
/// is passed with no call to compare bytes.
#[inline(always)]
pub(super) fn field_index(fields: &[&str], key: &str) -> Option<usize> {
    let mut at = 0;
    while at < fields.len() {
        if fields[at].len() == key.len() && fields[at].as_bytes() == key.as_bytes() {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// One guarded level: its fields' members and the first key `check_reserved` refuses.
#[derive(Debug, Default)]
pub(super) struct Level {
    members: [Option<Member>; MAX_FIELDS],
    keys: [Option<Span>; MAX_FIELDS],
    fault: Option<Fault>,
}

impl Level {
    /// Record the member `key` of this level, whose fields are `fields`. Always inlined:
    /// at each call the fields are a constant list, so the search compares the key with
    /// known names (a length first) rather than walking a list it is handed.
    #[inline(always)]
    fn note(&mut self, fields: &[&str], key: &str, key_span: Span, member: Member) {
        match field_index(fields, key) {
            Some(at) => {
                self.members[at] = Some(member);
                self.keys[at] = Some(key_span);
            }
            None if self.fault.is_some() => {}
            None if fields.iter().any(|field| folds_equal(field, key)) => {
                self.fault = Some(Fault {
                    key: key_span,
                    ambiguous: true,
                });
            }
            None if !key.is_ascii() => {
                self.fault = Some(Fault {
                    key: key_span,
                    ambiguous: false,
                });
            }
            None => {}
        }
    }

    /// The member under `name`, one of `fields` (inlined as [`Level::note`]).
    #[inline(always)]
    pub(crate) fn get(&self, fields: &[&str], name: &str) -> Option<Member> {
        self.members[field_index(fields, name)?]
    }

    /// Whether a key of this level is one `check_reserved` refuses.
    pub(crate) fn is_faulty(&self) -> bool {
        self.fault.is_some()
    }

    fn check(&self, text: &str) -> Result<(), ParseError> {
        self.fault.map_or(Ok(()), |fault| Err(fault.error(text)))
    }

    pub(crate) fn spans(&self) -> [Option<Span>; MAX_FIELDS] {
        self.members.map(|member| member.map(|m| m.span))
    }

    pub(crate) fn key_spans(&self) -> [Option<Span>; MAX_FIELDS] {
        self.keys
    }
}

/// The names `names::member` reads, one slot of [`Facts::reads`] each: `params._meta`,
/// then `_meta[CAPABILITIES_META]`, then the paths of [`DECLARED_PATHS`] below it.
const META: usize = 0;
const DECLARATION: usize = 1;
const fn declared_slot(i: usize) -> usize {
    2 + i
}
const READS: usize = declared_slot(DECLARED_PATHS.len());

/// One name read at one object: what is there under it, and its first look-alike.
#[derive(Debug, Clone, Copy, Default)]
struct Read {
    found: Option<Member>,
    look_alike: Option<Span>,
}

/// Everything classification reads, per level.
#[derive(Debug, Default)]
pub(super) struct Facts {
    /// Reading an upstream's answer ([`super::answer`]): `params` (a server's request) is
    /// held to the result fields, and nothing below it is read.
    pub(crate) answer: bool,
    pub(crate) envelope: Level,
    /// The first envelope key whose fold is a params field's (`MISPLACED_FIELDS`).
    misplaced: Option<Span>,
    pub(crate) params: Level,
    /// The first non-ASCII key of `params.inputResponses`.
    answers: Option<Span>,
    pub(crate) result: Level,
    pub(crate) error: Level,
    pub(crate) data: Level,
    /// The names below `params` that `names::member` reads, by slot ([`META`],
    /// [`DECLARATION`], [`declared_slot`]).
    reads: [Read; READS],
}

impl Facts {
    /// The facts of an upstream's answer (see [`Facts::answer`]).
    pub(crate) fn of_answer() -> Self {
        Facts {
            answer: true,
            ..Facts::default()
        }
    }

    /// Record the member `key` of an object in `role`.
    #[inline]
    pub(crate) fn note(&mut self, role: Role, key: &str, key_span: Span, member: Member) {
        match role {
            Role::Other | Role::Batch => {}
            Role::Envelope => {
                self.envelope.note(ENVELOPE_FIELDS, key, key_span, member);
                if self.misplaced.is_none() && MISPLACED_FIELDS.iter().any(|m| folds_equal(key, m))
                {
                    self.misplaced = Some(key_span);
                }
            }
            Role::Params if self.answer => {
                self.params.note(RESULT_FIELDS, key, key_span, member);
            }
            Role::Params => {
                self.params.note(PARAMS_FIELDS, key, key_span, member);
                self.read(META, "_meta", key, key_span, member);
            }
            Role::Answers => {
                if self.answers.is_none() && !key.is_ascii() {
                    self.answers = Some(key_span);
                }
            }
            Role::Result => self.result.note(RESULT_FIELDS, key, key_span, member),
            Role::Error => self.error.note(ERROR_FIELDS, key, key_span, member),
            Role::ErrorData => self.data.note(RESULT_FIELDS, key, key_span, member),
            Role::Meta => self.read(DECLARATION, CAPABILITIES_META, key, key_span, member),
            Role::Declared(at) => self.note_declared(at, key, key_span, member),
        }
    }

    /// A key of the declaration's object at `at` (out of the hot path, as
    /// [`declared_child`]).
    #[inline(never)]
    fn note_declared(&mut self, at: Option<usize>, key: &str, key_span: Span, member: Member) {
        for i in declared_below(at) {
            self.read(declared_slot(i), last_name(i), key, key_span, member);
        }
    }

    /// Record `key` at the object of `slot` when it is `name` or a look-alike of it
    /// (inlined as [`Level::note`]: `name` is a constant at each call).
    #[inline(always)]
    fn read(&mut self, slot: usize, name: &str, key: &str, key_span: Span, member: Member) {
        let exact = key == name;
        if !exact && !folds_equal(key, name) {
            return;
        }
        let read = &mut self.reads[slot];
        if exact {
            read.found = Some(member);
        } else if read.look_alike.is_none() {
            read.look_alike = Some(key_span);
        }
    }

    /// `names::member` from the facts: what is under the name of `slot`, refused if a
    /// look-alike is.
    fn member(&self, text: &str, slot: usize) -> Result<Option<JsonKind>, ParseError> {
        match self.reads[slot] {
            Read {
                look_alike: Some(key),
                ..
            } => Err(ParseError::AmbiguousKey(printable_key(text, key))),
            read => Ok(read.found.map(|m| m.kind)),
        }
    }

    /// Where the declared capabilities (`params._meta[CAPABILITIES_META]`) are, read by
    /// exact names (a body that gets this far has no look-alike beside them).
    pub(crate) fn declared(&self) -> Option<Span> {
        self.declared_member().map(|m| m.span)
    }

    fn declared_member(&self) -> Option<Member> {
        self.reads[META]
            .found
            .filter(|m| m.kind == JsonKind::Object)?;
        self.reads[DECLARATION].found
    }

    /// What the declaration holds of [`DECLARED_PATHS`], bit `i` for the `i`-th path:
    /// its last name read, spelled exactly, where its steps lead, and its value not
    /// null. A name below a step is read only when the walk descended into that step's
    /// value, which it does for an object only (so the step is there, and no null), as
    /// a lookup goes. `None` when nothing is declared or the declaration is no object.
    /// Of a body whose classification passed only: that refused a look-alike of any of
    /// these names (and a duplicate key anywhere), which the policy's reading of a tree
    /// (`Declared::of`, the oracle a test holds this to) would count against the whole
    /// declaration.
    pub(crate) fn declared_paths(&self) -> Option<u8> {
        if self.declared_member()?.kind != JsonKind::Object {
            return None;
        }
        let mut bits = 0;
        for i in 0..DECLARED_PATHS.len() {
            let found = self.reads[declared_slot(i)].found;
            if found.is_some_and(|m| m.kind != JsonKind::Null) {
                bits |= 1 << i;
            }
        }
        Some(bits)
    }

    /// `classify`, check for check, on the facts of a body whose root is `root`.
    pub(crate) fn classify(&self, text: &str, root: Member) -> Result<Message, ParseError> {
        match root.kind {
            JsonKind::Object => {}
            JsonKind::Array => return Err(ParseError::Batch),
            _ => return Err(ParseError::NotAnObject),
        }
        self.envelope.check(text)?;
        if let Some(key) = self.misplaced {
            return Err(ParseError::AmbiguousKey(printable_key(text, key)));
        }
        let field = |name| self.envelope.get(ENVELOPE_FIELDS, name);
        let string = |member: Member| unescape(&text[member.span.range()]);
        if !field("jsonrpc").is_some_and(|v| v.kind == JsonKind::String && string(v) == "2.0") {
            return Err(ParseError::Version);
        }
        let id = match field("id") {
            None => None,
            Some(id)
                if matches!(
                    id.kind,
                    JsonKind::String | JsonKind::Number | JsonKind::Null
                ) =>
            {
                Some(id)
            }
            Some(_) => return Err(ParseError::Id),
        };
        let is_response = field("result").is_some() || field("error").is_some();
        match field("method") {
            Some(method) if method.kind == JsonKind::String => {
                if is_response {
                    return Err(ParseError::Mixed);
                }
                match field("params") {
                    None => {}
                    Some(params) if params.kind == JsonKind::Object => self.check_params(text)?,
                    Some(_) => return Err(ParseError::Params),
                }
                Ok(Message::Call {
                    id: id.map(|id| member_value(text, id)).transpose()?,
                    method: string(method).into_owned(),
                })
            }
            Some(_) => Err(ParseError::Method),
            None if is_response && field("params").is_some() => Err(ParseError::Mixed),
            None if is_response => {
                self.check_answer(field("result"), field("error"), text)?;
                let id = id.ok_or(ParseError::Id)?;
                Ok(Message::Response {
                    id: member_value(text, id)?,
                })
            }
            None => Err(ParseError::NotAnObject),
        }
    }

    fn check_params(&self, text: &str) -> Result<(), ParseError> {
        self.params.check(text)?;
        let param = |name| self.params.get(PARAMS_FIELDS, name);
        if param("inputResponses").is_some_and(|a| a.kind == JsonKind::Object)
            && let Some(key) = self.answers
        {
            return Err(ParseError::NonAsciiKey(printable_key(text, key)));
        }
        self.check_capability_names(text)?;
        for name in ["name", "uri"] {
            if param(name).is_some_and(|v| v.kind != JsonKind::String) {
                return Err(ParseError::Target(name));
            }
        }
        Ok(())
    }

    /// `names::check_capability_names`: `lookup` stops (absent or blocked) at anything
    /// but an object, since no step of a capability path is an array index.
    fn check_capability_names(&self, text: &str) -> Result<(), ParseError> {
        if self.member(text, META)? != Some(JsonKind::Object) {
            return Ok(());
        }
        let Some(declared) = self.member(text, DECLARATION)? else {
            return Ok(());
        };
        for steps in CAPABILITY_STEPS {
            let mut kind = declared;
            for step in steps.into_iter().flatten() {
                if kind != JsonKind::Object {
                    break;
                }
                match self.member(text, declared_slot(step))? {
                    Some(next) => kind = next,
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// A client's response: its result, or its error and the error's data.
    fn check_answer(
        &self,
        result: Option<Member>,
        error: Option<Member>,
        text: &str,
    ) -> Result<(), ParseError> {
        let is_object = |member: Option<Member>| member.is_some_and(|m| m.kind == JsonKind::Object);
        if is_object(result) {
            self.result.check(text)?;
            if self.result.get(RESULT_FIELDS, "requestState").is_some() {
                return Err(ParseError::StateInResponse);
            }
        }
        if is_object(error) {
            self.error.check(text)?;
            if is_object(self.error.get(ERROR_FIELDS, "data")) {
                self.data.check(text)?;
                if self.data.get(RESULT_FIELDS, "requestState").is_some() {
                    return Err(ParseError::StateInResponse);
                }
            }
        }
        Ok(())
    }
}
