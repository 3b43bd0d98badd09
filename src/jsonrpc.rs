//! The few JSON-RPC / MCP shapes the sidecar touches, parsed strictly.
//!
//! Invariant: a body is classified only if it is exactly one JSON value that every
//! reasonable parser reads the same way: UTF-8 without BOM, no trailing data, no duplicate
//! keys at any depth, and no key that a lenient upstream could take for one of the fields
//! the sidecar guards (`requestState` spelled `RequestState` or `request_state`, say:
//! pydantic models with `populate_by_name` accept the snake-case alias; `requeſtState`
//! with a long s: Go's `encoding/json` folds it to `requestState`). Keys at the levels
//! the sidecar guards are ASCII, so no parser's Unicode folding can turn one into a
//! guarded field. Below those levels, every name the sidecar reads (a handle's path in
//! `arguments`, an answer's members, the declared client capabilities) is read through
//! [`names`]: no sibling of it may fold to it, and a folded spelling in place of an absent
//! one is refused, not skipped. Anything else is refused before a byte reaches the
//! upstream.

use serde_json::{Map, Value};

mod fold;
mod names;
mod params;
mod scan;
pub(crate) mod status;
mod strict;
mod view;
pub use fold::fold;
pub(crate) use fold::folds_equal;
pub(crate) use names::{CAPABILITIES_META, DECLARED_PATHS, Lookup, check_capabilities, lookup};
pub use params::NotAnObject;
pub use params::Params;
pub use params::ScannedBody;
pub(crate) use params::{ParamRead, ParamView};
pub use scan::Answer;
pub use scan::EnvelopeField;
pub use scan::Index;
pub(crate) use scan::LITE_ARENA_BYTES;
pub use scan::ParamsField;
pub use scan::Refused;
pub use scan::ResultField;
pub use scan::Scanned;
pub use scan::scan;
pub use scan::scan_answer;
pub(crate) use scan::{
    AnswerFault, Compact, Cursor, JsonKind, Passed, Rules, StateMember, each_member,
    is_string_token, members, pass_escaped, string_in, string_specials,
};
pub use scan::{LiteArena, LiteJson};
use strict::StrictRefusal;
pub use strict::parse_bounded;
pub use view::JsonView;
pub(crate) use view::{distinct, member};

/// Fields whose every spelling the sidecar reserves, per level of the message.
pub const ENVELOPE_FIELDS: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];
const PARAMS_FIELDS: &[&str] = &[
    "requestState",
    "inputResponses",
    "name",
    "uri",
    "arguments",
    "_meta",
    // Checked against `Mcp-Name` on task methods: no look-alike may disagree with it.
    "taskId",
    // An idempotency key ([`crate::tools::idempotency`]): a look-alike such as
    // `IdempotencyKey` is refused rather than passed on unrecorded.
    "idempotencyKey",
];
const RESULT_FIELDS: &[&str] = &["requestState", "resultType", "inputRequests"];
/// The members of a JSON-RPC error object.
pub const ERROR_FIELDS: &[&str] = &["code", "message", "data"];
/// Folded spellings refused on the envelope itself.
const MISPLACED_FIELDS: &[&str] = &["requeststate", "inputresponses"];

/// Why a body could not be classified. Messages are safe for clients: they describe the
/// shape, never echo content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("body starts with a byte order mark")]
    Bom,
    #[error("body is not valid JSON")]
    Syntax,
    #[error("duplicate key in a JSON object")]
    DuplicateKey,
    #[error("key `{0}` is ambiguous with a reserved field")]
    AmbiguousKey(String),
    /// A non-ASCII key where only ASCII names belong (the key is rendered escaped).
    #[error("key `{0}` is not ASCII")]
    NonAsciiKey(String),
    #[error("body holds more JSON values than allowed")]
    TooManyValues,
    #[error("batches are not supported")]
    Batch,
    #[error("body must be a single JSON-RPC request, notification or response object")]
    NotAnObject,
    #[error("`jsonrpc` must be \"2.0\"")]
    Version,
    #[error("`method` must be a string")]
    Method,
    #[error("`params` must be an object")]
    Params,
    #[error("`id` must be a string, a number or null")]
    Id,
    #[error("`params.{0}` must be a string")]
    Target(&'static str),
    #[error("a message cannot be both a request and a response")]
    Mixed,
    #[error("a response may not carry a requestState")]
    StateInResponse,
}

impl ParseError {
    /// The JSON-RPC code a client gets: -32700 for text that is not one JSON value,
    /// -32600 for a JSON value that is not one acceptable message, -32602 for bad params.
    pub(crate) fn code(&self) -> i64 {
        match self {
            ParseError::Bom | ParseError::Syntax | ParseError::DuplicateKey => PARSE_ERROR,
            ParseError::Target(_) | ParseError::Params => INVALID_PARAMS,
            _ => INVALID_REQUEST,
        }
    }

    #[cfg(test)]
    /// A closed label for metrics.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            ParseError::Bom => "bom",
            ParseError::Syntax => "syntax",
            ParseError::DuplicateKey => "duplicate_key",
            ParseError::AmbiguousKey(_) => "ambiguous_key",
            ParseError::NonAsciiKey(_) => "non_ascii_key",
            ParseError::TooManyValues => "too_many_values",
            ParseError::Batch => "batch",
            ParseError::NotAnObject | ParseError::Mixed | ParseError::StateInResponse => {
                "not_a_message"
            }
            ParseError::Version => "version",
            ParseError::Method | ParseError::Id => "envelope",
            ParseError::Params | ParseError::Target(_) => "params",
        }
    }
}

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: a header disagrees with the body (or is repeated).
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: the server needs a client capability the client did not declare.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: the request's protocol version is not one the server serves.
pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;

/// Parse one JSON value, refusing duplicate keys at any depth. Numbers keep their
/// literal digits (`arbitrary_precision`), so re-serialising changes no number's value;
/// only an exponent's spelling is normalised (`1E2` is written `1e+2`).
/// Unbounded: [`parse_bounded`] also caps what the value may cost.
#[cfg(test)]
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Value, ParseError> {
    parse_bounded(bytes, usize::MAX)
}

/// A parsed message written back as compact JSON (what the other side receives instead
/// of the bytes that were parsed), into a buffer of `capacity` bytes: sized from the
/// original, it is written without regrowing (serde_json's own `to_vec` starts at 128
/// bytes and reallocates a handful of times for a typical MCP message).
pub fn serialize(value: &Value, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut out, value).expect("a parsed value serialises");
    out
}

/// A JSON-RPC id: string, number or null.
pub(crate) type Id = Value;

/// One classified JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request (has `method` and `id`) or a notification (`method`, no `id`). Its
    /// `params`, when present, is an object whose guarded fields were checked; it stays
    /// in the parsed value (no copy).
    Call { id: Option<Id>, method: String },
    /// A response the client sends to a server→client request (2025 era).
    Response { id: Id },
}

impl Message {
    pub fn id(&self) -> Option<&Id> {
        match self {
            Message::Call { id, .. } => id.as_ref(),
            Message::Response { id } => Some(id),
        }
    }
}

#[cfg(any(test, feature = "oracle"))]
/// Classify a parsed client body. The envelope, `params` and the fields it carries are
/// checked; the payload is otherwise the upstream's business.
pub fn classify(value: &Value) -> Result<Message, ParseError> {
    let object = match value {
        Value::Object(o) => o,
        Value::Array(_) => return Err(ParseError::Batch),
        _ => return Err(ParseError::NotAnObject),
    };
    check_reserved(object, ENVELOPE_FIELDS)?;
    // The guarded params fields have no business at the top level, in any spelling.
    if let Some(key) = object
        .keys()
        .find(|k| MISPLACED_FIELDS.iter().any(|m| folds_equal(k, m)))
    {
        return Err(ParseError::AmbiguousKey(printable(key)));
    }
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(ParseError::Version);
    }
    let id = match object.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id.clone()),
        Some(_) => return Err(ParseError::Id),
    };
    let is_response = object.contains_key("result") || object.contains_key("error");
    match object.get("method") {
        Some(Value::String(method)) => {
            if is_response {
                return Err(ParseError::Mixed);
            }
            match object.get("params") {
                None => {}
                Some(params @ Value::Object(p)) => {
                    check_reserved(p, PARAMS_FIELDS)?;
                    // The answers' keys are matched exactly against what the round asked,
                    // but an upstream that decodes the answers into a struct with a
                    // Unicode-folding parser reads `regıon` as a second `region` (the last
                    // one wins in Go): only ASCII keys, which every parser reads alike.
                    if let Some(Value::Object(answers)) = p.get("inputResponses") {
                        check_reserved(answers, &[])?;
                    }
                    // What the client says it can answer decides whether a round is
                    // sealed: no capability the policy reads may have a look-alike.
                    names::check_capability_names(params)?;
                    for field in ["name", "uri"] {
                        if p.get(field).is_some_and(|v| !v.is_string()) {
                            return Err(ParseError::Target(field));
                        }
                    }
                }
                Some(_) => return Err(ParseError::Params),
            }
            Ok(Message::Call {
                id,
                method: method.clone(),
            })
        }
        Some(_) => Err(ParseError::Method),
        None if is_response && object.contains_key("params") => Err(ParseError::Mixed),
        None if is_response => {
            // A client's answer to a server request never carries our state; one that
            // does would reach the upstream unverified.
            if let Some(Value::Object(result)) = object.get("result") {
                check_result_fields(result)?;
                if result.contains_key("requestState") {
                    return Err(ParseError::StateInResponse);
                }
            }
            // An error answer is checked the way the sealer checks the upstream's.
            if let Some(Value::Object(error)) = object.get("error") {
                check_reserved(error, ERROR_FIELDS)?;
                if let Some(Value::Object(data)) = error.get("data") {
                    check_result_fields(data)?;
                    if data.contains_key("requestState") {
                        return Err(ParseError::StateInResponse);
                    }
                }
            }
            id.map(|id| Message::Response { id }).ok_or(ParseError::Id)
        }
        None => Err(ParseError::NotAnObject),
    }
}

/// The id of a parsed but refused message, when it has a valid one, so the error can
/// answer it.
pub fn best_effort_id(value: &Value) -> Option<Id> {
    match value.get("id")? {
        id @ (Value::String(_) | Value::Number(_)) => Some(id.clone()),
        _ => None,
    }
}

/// Refuse keys that are not one of `reserved` but read like one once case, `_`, `-` and
/// any other non-alphanumeric characters are ignored (`RequestState`, `request_state`,
/// `request-state`, `requestState\u0000`, `requeſtState`), and every non-ASCII key: the
/// names at the levels the sidecar guards are ASCII, and an ASCII-only level is one that
/// no parser's Unicode folding can read differently from this one.
pub fn check_reserved(object: &Map<String, Value>, reserved: &[&str]) -> Result<(), ParseError> {
    for key in object.keys() {
        if reserved.contains(&key.as_str()) {
            continue;
        }
        if reserved.iter().any(|r| folds_equal(key, r)) {
            return Err(ParseError::AmbiguousKey(printable(key)));
        }
        if !key.is_ascii() {
            return Err(ParseError::NonAsciiKey(printable(key)));
        }
    }
    Ok(())
}

/// Check the result of an upstream response the same way (a `request_state` there would
/// slip a plaintext past the sealer to a lenient client).
pub fn check_result_fields(result: &Map<String, Value>) -> Result<(), ParseError> {
    check_reserved(result, RESULT_FIELDS)
}

/// A key as it may appear in an error message or a log: no client byte echoed raw.
fn printable(key: &str) -> String {
    crate::text::printable(key, 64)
}

/// `text` with each span replaced by its bytes (spans in order, none overlapping; an
/// empty span inserts): how an upstream's answer gets its sealed members.
pub(crate) fn replace_spans<'a>(
    text: &[u8],
    edits: impl Iterator<Item = (std::ops::Range<usize>, &'a [u8])> + Clone,
) -> Vec<u8> {
    // Exactly the size it will have: no growth, and `Bytes` takes it without another
    // allocation.
    let size = edits.clone().fold(text.len(), |size, (span, bytes)| {
        size - span.len() + bytes.len()
    });
    let mut out = Vec::with_capacity(size);
    let mut at = 0;
    for (span, bytes) in edits {
        out.extend_from_slice(&text[at..span.start]);
        out.extend_from_slice(bytes);
        at = span.end;
    }
    out.extend_from_slice(&text[at..]);
    out
}

/// A JSON-RPC error body.
pub(crate) fn error_body(
    id: Option<&Id>,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Vec<u8> {
    let mut error = Map::new();
    error.insert("code".into(), Value::from(code));
    error.insert("message".into(), Value::from(message));
    if let Some(data) = data {
        error.insert("data".into(), data);
    }
    let mut answer = Map::new();
    answer.insert("error".into(), Value::Object(error));
    answer_body(id, answer)
}

/// A JSON-RPC answer under `id` (`null` when unknown): `answer` holds its `result` or
/// `error` member.
pub(crate) fn answer_body(id: Option<&Id>, answer: Map<String, Value>) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("jsonrpc".into(), Value::from("2.0"));
    body.insert("id".into(), id.cloned().unwrap_or(Value::Null));
    body.extend(answer);
    serde_json::to_vec(&Value::Object(body)).expect("a JSON value always serialises")
}

#[cfg(test)]
mod tests;
