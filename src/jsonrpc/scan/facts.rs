//! What `jsonrpc::classify` (the tree oracle) reads of a body, gathered object by
//! object as the scan passes (per key, nothing allocated), and its verdict computed from
//! them afterwards, in `classify`'s own order of checks rather than the document's.
//!
//! Every rule is the tree path's, read from the same lists ([`ENVELOPE_FIELDS`],
//! [`PARAMS_FIELDS`], [`RESULT_FIELDS`], [`ERROR_FIELDS`], [`MISPLACED_FIELDS`],
//! [`CAPABILITY_PATHS`]) and the same fold ([`folds_equal`]): `check_reserved` is the first
//! key of a level that a reserved field's fold matches or that is not ASCII;
//! `names::member` is the first key other than the name that folds to it.

use super::lexer::{Span, unescape};
use super::member_value;
use crate::jsonrpc::names::{CAPABILITY_PATHS, DECLARED_PATHS};
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
    /// The declared capabilities (`params._meta[CAPABILITIES_META]`), or the object at
    /// these steps below them.
    Declared(&'static [&'static str]),
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
            (Role::Meta, CAPABILITIES_META) => Role::Declared(&[]),
            (Role::Declared(steps), _) => CAPABILITY_PATHS
                .iter()
                .find(|path| {
                    path.len() > steps.len() + 1
                        && path.starts_with(steps)
                        && path[steps.len()] == key
                })
                .map_or(Role::Other, |path| Role::Declared(&path[..=steps.len()])),
            _ => Role::Other,
        }
    }
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
    printable(&unescape(&text[span.start..span.end]))
}

/// One guarded level: its fields' members and the first key `check_reserved` refuses.
#[derive(Debug, Default)]
pub(super) struct Level {
    members: [Option<Member>; MAX_FIELDS],
    keys: [Option<Span>; MAX_FIELDS],
    fault: Option<Fault>,
}

impl Level {
    fn note(&mut self, fields: &[&str], key: &str, key_span: Span, member: Member) {
        match fields.iter().position(|field| *field == key) {
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

    pub(crate) fn get(&self, fields: &[&str], name: &str) -> Option<Member> {
        self.members[fields.iter().position(|field| *field == name)?]
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

/// An object `names::member` reads a name of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadAt {
    Params,
    Meta,
    Declared(&'static [&'static str]),
}

/// One name read at one object: what is there under it, and its first look-alike.
#[derive(Debug)]
struct Read {
    at: ReadAt,
    name: &'static str,
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
    /// Only the few names below `params._meta` (empty, unallocated, without one).
    reads: Vec<Read>,
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
                self.read(ReadAt::Params, "_meta", key, key_span, member);
            }
            Role::Answers => {
                if self.answers.is_none() && !key.is_ascii() {
                    self.answers = Some(key_span);
                }
            }
            Role::Result => self.result.note(RESULT_FIELDS, key, key_span, member),
            Role::Error => self.error.note(ERROR_FIELDS, key, key_span, member),
            Role::ErrorData => self.data.note(RESULT_FIELDS, key, key_span, member),
            Role::Meta => self.read(ReadAt::Meta, CAPABILITIES_META, key, key_span, member),
            Role::Declared(steps) => {
                for path in CAPABILITY_PATHS {
                    if path.len() > steps.len() && path.starts_with(steps) {
                        let at = ReadAt::Declared(steps);
                        self.read(at, path[steps.len()], key, key_span, member);
                    }
                }
            }
        }
    }

    fn read(&mut self, at: ReadAt, name: &'static str, key: &str, key_span: Span, member: Member) {
        let exact = key == name;
        if !exact && !folds_equal(key, name) {
            return;
        }
        let i = match self.reads.iter().position(|r| r.at == at && r.name == name) {
            Some(i) => i,
            None => {
                self.reads.push(Read {
                    at,
                    name,
                    found: None,
                    look_alike: None,
                });
                self.reads.len() - 1
            }
        };
        let read = &mut self.reads[i];
        if exact {
            read.found = Some(member);
        } else if read.look_alike.is_none() {
            read.look_alike = Some(key_span);
        }
    }

    /// `names::member` from the facts: what is under `name`, refused if a look-alike is.
    fn member(&self, text: &str, at: ReadAt, name: &str) -> Result<Option<JsonKind>, ParseError> {
        match self.reads.iter().find(|r| r.at == at && r.name == name) {
            None => Ok(None),
            Some(Read {
                look_alike: Some(key),
                ..
            }) => Err(ParseError::AmbiguousKey(printable_key(text, *key))),
            Some(read) => Ok(read.found.map(|m| m.kind)),
        }
    }

    /// Where the declared capabilities (`params._meta[CAPABILITIES_META]`) are, read by
    /// exact names (a body that gets this far has no look-alike beside them).
    pub(crate) fn declared(&self) -> Option<Span> {
        self.declared_member().map(|m| m.span)
    }

    fn declared_member(&self) -> Option<Member> {
        let meta = self
            .reads
            .iter()
            .find(|r| r.at == ReadAt::Params && r.name == "_meta")?;
        meta.found.filter(|m| m.kind == JsonKind::Object)?;
        let declared = self
            .reads
            .iter()
            .find(|r| r.at == ReadAt::Meta && r.name == CAPABILITIES_META)?;
        declared.found
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
        for (i, path) in DECLARED_PATHS.into_iter().enumerate() {
            let (name, steps) = path.split_last().expect("a path names something");
            let at = ReadAt::Declared(steps);
            let found = (self.reads.iter())
                .find(|r| r.at == at && r.name == *name)
                .and_then(|r| r.found)
                .is_some_and(|m| m.kind != JsonKind::Null);
            if found {
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
        let string = |member: Member| unescape(&text[member.span.start..member.span.end]);
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
        if self.member(text, ReadAt::Params, "_meta")? != Some(JsonKind::Object) {
            return Ok(());
        }
        let Some(declared) = self.member(text, ReadAt::Meta, CAPABILITIES_META)? else {
            return Ok(());
        };
        for path in CAPABILITY_PATHS {
            let mut kind = declared;
            for (taken, step) in path.iter().enumerate() {
                if kind != JsonKind::Object {
                    break;
                }
                match self.member(text, ReadAt::Declared(&path[..taken]), step)? {
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
