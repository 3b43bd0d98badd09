//! Which caller a message belongs to. Each request gets an id of the bridge's own (a
//! counter, unique across every caller and every child), and its `progressToken` the
//! same number; the answer and the progress notifications carrying it go back to that
//! caller with its own id and token restored, and to nobody else.
//!
//! Invariant: a line from the child reaches a caller only through [`Routes::deliver`],
//! which hands it to the one open route its id or progress token names; anything else
//! is a [`Delivery::Unmatched`] the reader counts and logs (never its content). A
//! route is closed exactly once: answered, failed, or given up by its caller.

use super::metrics::{Dropped, StdioMetrics, Unmatched};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// Notifications one caller may have waiting before more of them are dropped.
const NOTICES_BUFFERED: usize = 64;

/// Why a request got no answer from the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The child exited (or was stopped) first.
    Exited,
    /// The answer was over `limits.max_event_bytes` and was discarded.
    Overlong,
}

/// The answer of one request: the JSON-RPC message with the caller's id, or why none.
pub(crate) type Answer = Result<Bytes, Fault>;

/// One open request.
struct Route {
    progress_token: Option<Value>,
    caller_id: Value,
    /// The caller takes `text/event-stream`: notifications have somewhere to go.
    streams: bool,
    notices: mpsc::Sender<Bytes>,
    answer: oneshot::Sender<Answer>,
}

/// What the caller of a route waits on.
pub(crate) struct Receivers {
    pub notices: mpsc::Receiver<Bytes>,
    pub answer: oneshot::Receiver<Answer>,
}

/// What became of a line from the child's stdout.
#[derive(Debug, PartialEq)]
pub(crate) enum Delivery {
    /// Handed to the caller it belongs to (or dropped with a count for that caller).
    Delivered,
    /// An empty line.
    Blank,
    /// Belongs to nobody: the reason, and the method when it named one (for the log).
    Unmatched(Unmatched, Option<String>),
    /// A request from the child to the client, with its id and method: refused.
    ServerRequest(Value, String),
}

/// The open requests, by bridge id.
#[derive(Default)]
pub(crate) struct Routes {
    open: HashMap<u64, Route>,
}

impl Routes {
    /// Open the route of bridge id `id` for a caller whose own id and progress token
    /// (if any) were `caller_id` and `progress_token`.
    pub(crate) fn open(
        &mut self,
        id: u64,
        caller_id: Value,
        progress_token: Option<Value>,
        streams: bool,
    ) -> Receivers {
        let (notices, notices_rx) = mpsc::channel(NOTICES_BUFFERED);
        let (answer, answer_rx) = oneshot::channel();
        self.open.insert(
            id,
            Route {
                progress_token,
                caller_id,
                streams,
                notices,
                answer,
            },
        );
        Receivers {
            notices: notices_rx,
            answer: answer_rx,
        }
    }

    pub(crate) fn is_open(&self, id: u64) -> bool {
        self.open.contains_key(&id)
    }

    /// Close a route without an answer (its caller went away); whether it was open.
    pub(crate) fn close(&mut self, id: u64) -> bool {
        self.open.remove(&id).is_some()
    }

    /// Fail one open route; whether it was open.
    pub(crate) fn fail(&mut self, id: u64, fault: Fault) -> bool {
        match self.open.remove(&id) {
            Some(route) => {
                let _ = route.answer.send(Err(fault));
                true
            }
            None => false,
        }
    }

    /// Fail every open route (the child exited): nothing waits for an answer that
    /// cannot come.
    pub(crate) fn fail_all(&mut self) -> usize {
        let failed = self.open.len();
        for (_, route) in self.open.drain() {
            let _ = route.answer.send(Err(Fault::Exited));
        }
        failed
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Route one line of the child's stdout.
    pub(crate) fn deliver(&mut self, line: &[u8], metrics: &StdioMetrics) -> Delivery {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Delivery::Blank;
        }
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(line) else {
            return Delivery::Unmatched(Unmatched::NotJson, None);
        };
        let method = message.get("method").map(|m| match m {
            Value::String(m) => m.clone(),
            other => other.to_string(),
        });
        match (method, message.contains_key("id")) {
            (None, true) => self.answer(message),
            (Some(method), true) => {
                let id = message.remove("id").unwrap_or(Value::Null);
                Delivery::ServerRequest(id, method)
            }
            (Some(method), false) => self.notify(message, method, metrics),
            (None, false) => Delivery::Unmatched(Unmatched::Invalid, None),
        }
    }

    fn answer(&mut self, mut message: Map<String, Value>) -> Delivery {
        let id = message.get("id").and_then(Value::as_u64);
        let Some(route) = id.and_then(|id| self.open.remove(&id)) else {
            return Delivery::Unmatched(Unmatched::UnknownId, None);
        };
        message.insert("id".into(), route.caller_id);
        let _ = route.answer.send(Ok(encode(&message)));
        Delivery::Delivered
    }

    fn notify(
        &mut self,
        mut message: Map<String, Value>,
        method: String,
        metrics: &StdioMetrics,
    ) -> Delivery {
        // Only progress names its request (by token). A log message on stdio has no
        // request stream to travel on, so it cannot be told apart from another
        // caller's: it goes to nobody.
        let token = (method == "notifications/progress")
            .then(|| message.get_mut("params"))
            .flatten()
            .and_then(Value::as_object_mut)
            .and_then(|params| params.get_mut("progressToken"));
        let Some(token) = token else {
            return Delivery::Unmatched(Unmatched::Notification, Some(method));
        };
        let route = token.as_u64().and_then(|id| self.open.get(&id));
        let Some((route, original)) =
            route.and_then(|r| r.progress_token.clone().map(|original| (r, original)))
        else {
            return Delivery::Unmatched(Unmatched::Notification, Some(method));
        };
        if !route.streams {
            metrics.dropped(Dropped::JsonCaller);
            return Delivery::Delivered;
        }
        *token = original;
        if let Err(mpsc::error::TrySendError::Full(_)) = route.notices.try_send(encode(&message)) {
            metrics.dropped(Dropped::SlowCaller);
        }
        Delivery::Delivered
    }
}

/// Give a caller's request the bridge id `id` (and its progress token the same number):
/// the caller's id and token, to restore on the way back.
pub(crate) fn rewrite(message: &mut Map<String, Value>, id: u64) -> (Value, Option<Value>) {
    let caller_id = message
        .insert("id".into(), Value::from(id))
        .unwrap_or(Value::Null);
    let token = message
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .and_then(|params| params.get_mut("_meta"))
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.get_mut("progressToken"))
        .map(|token| std::mem::replace(token, Value::from(id)));
    (caller_id, token)
}

/// A message as one compact line (serde_json never writes a raw newline: those inside
/// strings are escaped).
pub(crate) fn encode(message: &Map<String, Value>) -> Bytes {
    let mut out = serde_json::to_vec(message).expect("a JSON map serialises");
    out.shrink_to_fit();
    Bytes::from(out)
}

/// The same, with its newline, for the child's stdin.
pub(crate) fn line(message: &Value) -> Bytes {
    let mut out = serde_json::to_vec(message).expect("a JSON value serialises");
    out.push(b'\n');
    Bytes::from(out)
}

/// The bridge id an overlong line names: at its start like an answer of the Python SDK
/// (`{"jsonrpc":"2.0","id":7,`, or `{"id":7,`), or as its last member like one of the
/// TypeScript SDK (`...,"id":7}`).
pub(crate) fn overlong_id(prefix: &[u8], tail: &[u8]) -> Option<u64> {
    leading_id(prefix).or_else(|| trailing_id(tail))
}

fn trailing_id(tail: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(tail).ok()?;
    let inner = text.trim_end().strip_suffix('}')?.trim_end();
    let start = inner.rfind(|c: char| !c.is_ascii_digit())? + 1;
    let digits = &inner[start..];
    let before = inner[..start].trim_end().strip_suffix(':')?.trim_end();
    before
        .strip_suffix(r#""id""#)?
        .trim_end()
        .strip_suffix(',')?;
    digits.parse().ok()
}

fn leading_id(prefix: &[u8]) -> Option<u64> {
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
    let digits = rest
        .strip_prefix(r#""id""#)?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let end = digits.find(|c: char| !c.is_ascii_digit())?;
    let after = digits[end..].trim_start();
    (after.starts_with(',') || after.starts_with('}')).then_some(())?;
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests;
