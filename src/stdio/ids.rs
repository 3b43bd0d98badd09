//! The bridge's ids: each request's id and progress token on the child's stdin is a fresh
//! random string of 128 bits, spliced into the bytes the proxy's gate wrote (no tree of
//! the message is built), and found again in what the child writes, whole or, for a line
//! too long or too broken to read, at its start or its end.
//!
//! Invariant: an id is never reused and cannot be guessed. The child's stdout is shared by
//! every caller (a tool that prints its input, a subprocess that inherits fd 1), so a line
//! can name a caller's open request only by an id the child was given for it: strings,
//! because both SDKs echo string ids and tokens as they got them, and a number above 2^53
//! would not survive a child that reads numbers as doubles.

use crate::jsonrpc::{self, EnvelopeField, Message, ParamsField};
use bytes::Bytes;
use serde_json::Value;
use std::ops::Range;

/// A bridge id: 32 lowercase hex digits.
pub(crate) type BridgeId = String;

/// The length of a bridge id.
const ID_DIGITS: usize = 32;

/// A new bridge id.
pub(crate) fn fresh() -> BridgeId {
    format!("{:032x}", rand::random::<u128>())
}

/// A caller's request, read: its id and progress token, and where they are.
pub(crate) struct Parsed {
    pub(crate) caller_id: Value,
    /// The caller's `params._meta.progressToken`, when it sent one.
    pub(crate) token: Option<Value>,
    /// The request is `initialize`: a 2025-era client opening a session.
    pub(crate) initialize: bool,
    /// The spans of the id and the token, in order.
    spans: Vec<Range<usize>>,
}

/// What a body that is not a request is.
#[derive(Debug, PartialEq)]
pub(crate) enum NotARequest {
    /// A notification or a response: nothing waits for an answer.
    NoAnswer,
    /// Not one JSON-RPC message (only a caller that bypassed the gate could send it).
    Unreadable,
}

/// Read a request as the gate wrote it (scanned, no tree built): its id and progress
/// token, and where they are.
pub(crate) fn parse(body: &[u8], max_values: usize) -> Result<Parsed, NotARequest> {
    let scanned = jsonrpc::scan(body, max_values).map_err(|_| NotARequest::Unreadable)?;
    let text = scanned.body();
    let Message::Call {
        id: Some(_),
        method,
    } = scanned.message()
    else {
        return Err(NotARequest::NoAnswer);
    };
    let index = scanned.index();
    let id_span = index
        .envelope(EnvelopeField::Id)
        .ok_or(NotARequest::NoAnswer)?;
    let value = |span: &Range<usize>| {
        serde_json::from_str::<Value>(&text[span.clone()]).map_err(|_| NotARequest::Unreadable)
    };
    let caller_id = value(&id_span)?;
    let token_span = index.param(ParamsField::Meta).and_then(|meta| {
        jsonrpc::members(text, meta)
            .find(|member| member.key == "progressToken")
            .map(|member| member.value)
    });
    let token = token_span.as_ref().map(value).transpose()?;
    let mut spans: Vec<Range<usize>> = [Some(id_span), token_span].into_iter().flatten().collect();
    spans.sort_by_key(|span| span.start);
    Ok(Parsed {
        caller_id,
        token,
        initialize: method == "initialize",
        spans,
    })
}

impl Parsed {
    /// The size of [`Parsed::line`] for a body of `body_len` bytes.
    pub(crate) fn line_size(&self, body_len: usize) -> usize {
        body_len + self.spans.len() * (ID_DIGITS + 2) + 1
    }

    /// The line for the child's stdin: `body` with the bridge id `id` spliced in for the
    /// caller's id and progress token, so that everything else reaches the child byte
    /// for byte; with its newline.
    pub(crate) fn line(&self, body: &[u8], id: &str) -> Bytes {
        let mut line = Vec::with_capacity(self.line_size(body.len()));
        let mut at = 0;
        for span in &self.spans {
            line.extend_from_slice(&body[at..span.start]);
            line.push(b'"');
            line.extend_from_slice(id.as_bytes());
            line.push(b'"');
            at = span.end;
        }
        line.extend_from_slice(&body[at..]);
        line.push(b'\n');
        Bytes::from(line)
    }
}

/// The bridge id a line names that cannot be read whole (over `limits.max_event_bytes`,
/// or not JSON): at its start like an answer of the Python SDK
/// (`{"jsonrpc":"2.0","id":"…",`, or `{"id":"…",`), or as its last member like one of the
/// TypeScript SDK (`…,"id":"…"}`).
pub(crate) fn named_in(prefix: &[u8], tail: &[u8]) -> Option<BridgeId> {
    leading_id(prefix)
        .or_else(|| trailing_id(tail))
        .and_then(bridge_id)
}

/// The same for a whole line at hand.
pub(crate) fn named_in_line(line: &[u8]) -> Option<BridgeId> {
    let prefix = &line[..line.len().min(256)];
    let tail = &line[line.len().saturating_sub(64)..];
    named_in(prefix, tail)
}

/// The caller's id when the first bytes of its message name it (for a refusal before
/// the whole message was read); else null.
pub(crate) fn caller_id_in(prefix: &[u8]) -> Value {
    leading_id(prefix)
        .and_then(|token| serde_json::from_str(token).ok())
        .unwrap_or(Value::Null)
}

/// A bridge id token: `"` and 32 lowercase hex digits and `"`.
fn bridge_id(token: &str) -> Option<BridgeId> {
    let inner = token.strip_prefix('"')?.strip_suffix('"')?;
    (inner.len() == ID_DIGITS
        && inner
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then(|| inner.to_owned())
}

/// A number, or a string without escapes, at the start of `text`: the token and the rest.
fn simple_token(text: &str) -> Option<(&str, &str)> {
    let end = if let Some(inner) = text.strip_prefix('"') {
        let close = inner.find(['"', '\\'])?;
        (inner.as_bytes()[close] == b'"').then_some(close + 2)?
    } else {
        text.find(|c: char| !c.is_ascii_digit() && c != '-')
            .filter(|end| *end > 0)?
    };
    Some(text.split_at(end))
}

/// The raw `"id"` token when it is the message's first member (after `"jsonrpc":"2.0"`).
fn leading_id(prefix: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(prefix)
        .or_else(|e| std::str::from_utf8(&prefix[..e.valid_up_to()]))
        .ok()?;
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = match rest.strip_prefix(r#""jsonrpc""#) {
        Some(after) => {
            let after = after.trim_start().strip_prefix(':')?.trim_start();
            after
                .strip_prefix(r#""2.0""#)?
                .trim_start()
                .strip_prefix(',')?
                .trim_start()
        }
        None => rest,
    };
    let value = rest
        .strip_prefix(r#""id""#)?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let (token, after) = simple_token(value)?;
    let after = after.trim_start();
    (after.starts_with(',') || after.starts_with('}')).then_some(token)
}

/// The raw `"id"` token when it is the message's last member.
fn trailing_id(tail: &[u8]) -> Option<&str> {
    // The kept tail may begin inside a character.
    let skip = tail
        .iter()
        .take(3)
        .take_while(|b| **b & 0xC0 == 0x80)
        .count();
    let text = std::str::from_utf8(&tail[skip..]).ok()?;
    let inner = text.trim_end().strip_suffix('}')?.trim_end();
    let token_start = if let Some(open) = inner.strip_suffix('"') {
        let quote = open.rfind('"')?;
        (!open[quote + 1..].contains('\\')).then_some(quote)?
    } else {
        inner.rfind(|c: char| !c.is_ascii_digit() && c != '-')? + 1
    };
    let token = &inner[token_start..];
    let before = inner[..token_start]
        .trim_end()
        .strip_suffix(':')?
        .trim_end();
    before
        .strip_suffix(r#""id""#)?
        .trim_end()
        .strip_suffix(',')?;
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests;
