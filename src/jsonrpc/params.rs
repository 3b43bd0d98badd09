//! A scanned call as the phases after the gate see it, and the body the upstream
//! receives: members of `params` read by name and a few named edits, written back as
//! splices into the scanned tokens, never a tree of the whole message.
//!
//! Invariant: every change the phases make to a message goes through [`Params`]: the
//! state replaced by the upstream's plaintext or removed, unasked answers dropped, a
//! handle argument replaced by the upstream's raw handle, an idempotency key stripped.
//! A member reads as the gate checked it ([`fn@super::scan`]: no look-alike of a guarded
//! member is beside it), parsed on its own the first time it is read. The body the
//! upstream receives ([`ScannedBody::into_forwarded`]) is the scanned tokens without the
//! whitespace between them, each edited member's value written in its place and each
//! removed member cut out with its comma: the client's bytes are never forwarded as
//! they came unless they are exactly that.

use super::ParseError;
use super::scan::{
    Index, LiteArena, LiteJson, ParamsField, Refused, refuse_bom, scan_text, scanned_string,
};
use super::{Id, Message, parse_bounded};
use bytes::Bytes;
use bytestring::ByteString;
use serde_json::Value;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::ops::Range;

/// One scanned call and the edits its phases made: what the gate lets in.
pub struct ScannedBody {
    /// The client's bytes, as the UTF-8 text the scan checked once.
    body: ByteString,
    message: Message,
    index: Index,
    slots: FieldSlots,
}

/// `inputResponses` is there but is not an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAnObject;

/// Per [`ParamsField`] (in [`ParamsField::ALL`]'s order): its value once read, and what
/// the phases did to it.
type FieldSlots = [FieldSlot; ParamsField::ALL.len()];

#[derive(Default)]
struct FieldSlot {
    value: OnceCell<Value>,
    /// A string token that replaced the member ([`Params::set_string_token`]): written
    /// as it is, parsed only should a phase read it.
    token: Option<String>,
    edit: Edit,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Edit {
    #[default]
    Kept,
    Replaced,
    Removed,
}

impl ScannedBody {
    /// Scan `body` ([`scan`](fn@super::scan)): the accepted call, or why not. Boxed
    /// where it is made: its index and slots (about 1.4 KB) are then written once, into
    /// the box, rather than built beside it and copied in, and every later move of the
    /// request's phases moves a pointer.
    pub(crate) fn scan(body: Bytes, max_values: usize) -> Result<Box<Self>, Refused> {
        // `scan`'s order: the byte order mark, then UTF-8.
        refuse_bom(&body)?;
        let body = ByteString::try_from(body).map_err(|_| ParseError::Syntax)?;
        let (message, index) = scan_text(&body, max_values)?.into_parts();
        Ok(Box::new(Self {
            body,
            message,
            index,
            slots: Default::default(),
        }))
    }

    #[cfg(test)]
    /// A call of `method` with `params` (an object), written and scanned as a client's
    /// body would be: how tests and tools build one.
    pub(crate) fn call(method: &str, params: &Value) -> Result<Box<Self>, Refused> {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Self::scan(Bytes::from(body.to_string()), usize::MAX)
    }

    pub fn message(&self) -> &Message {
        &self.message
    }

    pub(crate) fn id(&self) -> Option<&Id> {
        self.message.id()
    }

    /// The id, for a phase that keeps it: a request's is moved out (nothing reads it
    /// from the message again), a response's copied.
    pub(crate) fn take_id(&mut self) -> Option<Id> {
        match &mut self.message {
            Message::Call { id, .. } => id.take(),
            Message::Response { id } => Some(id.clone()),
        }
    }

    /// The client's bytes, as scanned.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.body.as_bytes()
    }

    /// The client's body, as scanned: UTF-8 already checked.
    pub(crate) fn text(&self) -> &str {
        &self.body
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The method and `params` of a request or notification (a client's response to a
    /// server request has neither).
    pub fn call_mut(&mut self) -> Option<(&str, Params<'_>)> {
        let Message::Call { method, .. } = &self.message else {
            return None;
        };
        let params = self
            .index
            .envelope(super::EnvelopeField::Params)
            .filter(|span| self.body.as_bytes()[span.start] == b'{')
            .map(|_| Parts {
                body: &self.body,
                index: &self.index,
                slots: &mut self.slots,
            });
        Some((method.as_str(), Params(params)))
    }

    /// The message as the upstream receives it: the scanned tokens with no whitespace
    /// between them and the edits spliced in. A compact body nobody edited is that
    /// already, and is forwarded without a copy. Read in its box: only the bytes move
    /// out of it.
    pub fn into_forwarded(self: Box<Self>) -> Bytes {
        // Counted first: the cuts in one allocation, none when nothing is cut.
        let edited = ParamsField::ALL
            .iter()
            .filter(|f| self.slots[**f as usize].edit != Edit::Kept);
        let gaps = self.index.gaps().count();
        let mut cuts: Vec<(Range<usize>, Cut<'_>)> = Vec::with_capacity(edited.count() + gaps);
        for field in ParamsField::ALL {
            let slot = &self.slots[field as usize];
            let value = self.index.param(field);
            match (slot.edit, value, slot.token.as_deref(), slot.value.get()) {
                (Edit::Replaced, Some(span), Some(token), _) => {
                    cuts.push((span, Cut::Token(token)))
                }
                (Edit::Replaced, Some(span), None, Some(value)) => {
                    cuts.push((span, Cut::Write(value)));
                }
                (Edit::Removed, Some(span), _, _) => {
                    let key = self.index.param_key(field).map_or(span.start, |k| k.start);
                    cuts.push((key..span.end, Cut::Member));
                }
                _ => {}
            }
        }
        if cuts.is_empty() && gaps == 0 {
            return self.body.into_bytes();
        }
        cuts.extend(self.index.gaps().map(|gap| (gap, Cut::Gap)));
        cuts.sort_by_key(|(range, _)| (range.start, range.end));
        Bytes::from(splice(self.body.as_bytes(), &cuts))
    }
}

/// What replaces a range of the scanned body.
#[derive(Clone, Copy)]
enum Cut<'a> {
    /// Whitespace between tokens: nothing.
    Gap,
    /// A member's value: this value, compact.
    Write(&'a Value),
    /// A member's value: this string token, as it is.
    Token(&'a str),
    /// A member, key to value: nothing, and one comma beside it.
    Member,
}

/// `body` with `cuts` (sorted by start; a gap may lie inside a written value, and two
/// removed members may share a comma) applied.
fn splice(body: &[u8], cuts: &[(Range<usize>, Cut<'_>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 256);
    let mut at = 0;
    for (range, cut) in cuts {
        if range.start < at {
            // Inside what the cut before it replaced.
            at = at.max(range.end);
            continue;
        }
        out.extend_from_slice(&body[at..range.start]);
        at = range.end;
        match cut {
            Cut::Gap => {}
            Cut::Write(value) => {
                serde_json::to_writer(&mut out, value).expect("a parsed value serialises");
            }
            Cut::Token(token) => out.extend_from_slice(token.as_bytes()),
            Cut::Member => {
                // `out` is compact (every gap before here was cut): the member's comma is
                // the next token when another member follows, else the last byte out.
                let next = body[at..]
                    .iter()
                    .position(|b| !b.is_ascii_whitespace())
                    .map(|n| at + n);
                match next {
                    Some(comma) if body[comma] == b',' => at = comma + 1,
                    _ if out.last() == Some(&b',') => {
                        out.pop();
                    }
                    _ => {}
                }
            }
        }
    }
    out.extend_from_slice(&body[at..]);
    out
}

/// A member of `params` as [`Params::read`] gives it.
pub(crate) enum ParamRead<'a> {
    /// A string the body holds as it came.
    Text(Cow<'a, str>),
    /// `null` as the body holds it.
    Null,
    /// Anything else the body holds as it came (not parsed).
    Other,
    /// A member read into a value before, or edited.
    Value(&'a Value),
}

/// A member as [`Params::view`] gives it.
pub(crate) enum ParamView<'a> {
    /// Read over the body's text, as it came.
    Text(LiteJson<'a>),
    /// A member read into a value before, or edited.
    Value(&'a Value),
}

/// The `params` of one call (absent when the message had none).
pub struct Params<'a>(Option<Parts<'a>>);

struct Parts<'a> {
    body: &'a str,
    index: &'a Index,
    slots: &'a mut FieldSlots,
}

impl Parts<'_> {
    /// The value of `field` as the body holds it (or as an edit left it).
    fn value(&self, field: ParamsField) -> Option<&Value> {
        let slot = &self.slots[field as usize];
        if slot.edit == Edit::Removed {
            return None;
        }
        if let Some(value) = slot.value.get() {
            return Some(value);
        }
        if let Some(token) = &slot.token {
            return Some(
                slot.value
                    .get_or_init(|| member(token.as_bytes(), 0..token.len())),
            );
        }
        let span = self.index.param(field)?;
        Some(
            slot.value
                .get_or_init(|| member(self.body.as_bytes(), span)),
        )
    }

    /// The value of `field` as the body holds it, when nobody read it into a value or
    /// edited it: its text, not parsed.
    fn untouched(&self, field: ParamsField) -> Option<Range<usize>> {
        let slot = &self.slots[field as usize];
        if slot.edit != Edit::Kept || slot.value.get().is_some() {
            return None;
        }
        self.index.param(field)
    }

    /// Whether the member is there (read or not, and not removed).
    fn is_there(&self, field: ParamsField) -> bool {
        let slot = &self.slots[field as usize];
        slot.edit != Edit::Removed
            && (slot.value.get().is_some() || self.index.param(field).is_some())
    }

    /// The value to edit in place: a token set before is parsed, and the edit is then
    /// what is written.
    fn value_mut(&mut self, field: ParamsField) -> Option<&mut Value> {
        self.value(field)?;
        let slot = &mut self.slots[field as usize];
        slot.token = None;
        slot.value.get_mut()
    }
}

/// A member's value parsed on its own: the scan accepted the whole body strictly, so its
/// parts parse, to the very value a parse of the whole would hold there.
fn member(body: &[u8], span: Range<usize>) -> Value {
    parse_bounded(&body[span], usize::MAX).expect("a member of a scanned body parses")
}

impl Params<'_> {
    #[cfg(test)]
    /// A call without `params`.
    pub(crate) fn absent() -> Params<'static> {
        Params(None)
    }

    /// Whether the call has a `params` object.
    pub(crate) fn is_present(&self) -> bool {
        self.0.is_some()
    }

    /// Whether the call has the member (read or not, and not removed).
    pub(crate) fn is_there(&self, field: ParamsField) -> bool {
        self.0.as_ref().is_some_and(|p| p.is_there(field))
    }

    /// A member, as the gate checked it.
    pub fn get(&self, field: ParamsField) -> Option<&Value> {
        self.0.as_ref()?.value(field)
    }

    /// The text of the client capabilities the call declared
    /// (`_meta["io.modelcontextprotocol/clientCapabilities"]`), as the body holds it:
    /// the rest of `_meta` is never read.
    #[cfg(test)]
    pub(crate) fn declared_capabilities(&self) -> Option<&str> {
        let parts = self.0.as_ref()?;
        parts.body.get(parts.index.declared()?)
    }

    /// What the declared capabilities hold, as the scan read them
    /// ([`Index::declared_paths`](super::Index::declared_paths)).
    pub(crate) fn declared_paths(&self) -> Option<u8> {
        self.0.as_ref()?.index.declared_paths()
    }

    /// A member that is a string. Read from the body's string token (borrowed unless
    /// it holds an escape) while nobody parsed or edited the member: a token of a
    /// kilobyte or more is not copied into a value to be looked at.
    pub fn get_str(&self, field: ParamsField) -> Option<Cow<'_, str>> {
        match self.read(field)? {
            ParamRead::Text(text) => Some(text),
            ParamRead::Value(value) => value.as_str().map(Cow::Borrowed),
            ParamRead::Null | ParamRead::Other => None,
        }
    }

    /// A member as it is now, its string read as [`Params::get_str`] reads it: what a
    /// caller that only needs a string or `null` looks at without parsing anything else.
    pub(crate) fn read(&self, field: ParamsField) -> Option<ParamRead<'_>> {
        let parts = self.0.as_ref()?;
        let Some(span) = parts.untouched(field) else {
            return parts.value(field).map(ParamRead::Value);
        };
        Some(match parts.body.as_bytes()[span.start] {
            b'"' => ParamRead::Text(scanned_string(parts.body, span)),
            b'n' => ParamRead::Null,
            _ => ParamRead::Other,
        })
    }

    /// A member as it is now, read over the body's text while nobody parsed or edited it
    /// (no tree is built; its lists go into `arena`): what a caller that reads a few
    /// members of an object looks at.
    /// The length of a member's text as it came, when it is untouched: the size of what
    /// is read from it, near enough to reserve room for.
    pub(crate) fn text_len(&self, field: ParamsField) -> Option<usize> {
        self.text(field).map(str::len)
    }

    /// A member's text as it came, when it is untouched (nobody read it into a value or
    /// edited it): one JSON value the scan accepted.
    pub(crate) fn text(&self, field: ParamsField) -> Option<&str> {
        let parts = self.0.as_ref()?;
        parts.untouched(field).map(|span| &parts.body[span])
    }

    pub(crate) fn view<'v>(
        &'v self,
        field: ParamsField,
        arena: &'v LiteArena,
    ) -> Option<ParamView<'v>> {
        let parts = self.0.as_ref()?;
        let read = parts
            .untouched(field)
            .and_then(|span| LiteJson::read(&parts.body[span], arena));
        match read {
            Some(lite) => Some(ParamView::Text(lite)),
            // Not untouched (or, against the scan's word, not read over its text): the
            // value, parsed as the gate parses it.
            None => parts.value(field).map(ParamView::Value),
        }
    }

    /// Replace a member's value; `false` when the call has no such member. The value it
    /// had is not read.
    pub fn set(&mut self, field: ParamsField, value: Value) -> bool {
        let Some(parts) = self.0.as_mut().filter(|p| p.is_there(field)) else {
            return false;
        };
        let slot = &mut parts.slots[field as usize];
        slot.value = OnceCell::from(value);
        slot.token = None;
        self.mark(field, Edit::Replaced);
        true
    }

    /// Replace a member's value by a string token (quotes included, as the strict scan
    /// reads one), written as it is; `false` when the call has no such member.
    pub fn set_string_token(&mut self, field: ParamsField, token: String) -> bool {
        debug_assert!(super::is_string_token(&token), "not a string token");
        let Some(parts) = self.0.as_mut().filter(|p| p.is_there(field)) else {
            return false;
        };
        let slot = &mut parts.slots[field as usize];
        slot.value = OnceCell::new();
        slot.token = Some(token);
        self.mark(field, Edit::Replaced);
        true
    }

    /// Remove a member: whether it was there (its value is not read).
    pub fn remove(&mut self, field: ParamsField) -> bool {
        let Some(parts) = self.0.as_mut().filter(|p| p.is_there(field)) else {
            return false;
        };
        let slot = &mut parts.slots[field as usize];
        slot.edit = Edit::Removed;
        slot.value.take();
        slot.token = None;
        true
    }

    /// Keep only the `inputResponses` entries whose key `keep` accepts: how many were
    /// dropped (none when there is no `inputResponses`, or it is `null`).
    pub fn retain_answers(
        &mut self,
        mut keep: impl FnMut(&str) -> bool,
    ) -> Result<usize, NotAnObject> {
        let field = ParamsField::InputResponses;
        let dropped = match self.0.as_mut().and_then(|p| p.value_mut(field)) {
            None | Some(Value::Null) => return Ok(0),
            Some(Value::Object(answers)) => {
                let before = answers.len();
                answers.retain(|key, _| keep(key));
                before - answers.len()
            }
            Some(_) => return Err(NotAnObject),
        };
        if dropped > 0 {
            self.mark(field, Edit::Replaced);
        }
        Ok(dropped)
    }

    /// Replace the value at `pointer` (RFC 6901) inside `field`; `false` when there is
    /// nothing there.
    pub fn replace_at(&mut self, field: ParamsField, pointer: &str, value: Value) -> bool {
        let found = self
            .0
            .as_mut()
            .and_then(|p| p.value_mut(field))
            .and_then(|m| m.pointer_mut(pointer));
        match found {
            Some(slot) => {
                *slot = value;
                self.mark(field, Edit::Replaced);
                true
            }
            None => false,
        }
    }

    fn mark(&mut self, field: ParamsField, edit: Edit) {
        if let Some(parts) = self.0.as_mut() {
            parts.slots[field as usize].edit = edit;
        }
    }
}

#[cfg(test)]
mod tests;
