//! Which caller a message belongs to. Each request gets an id of the bridge's own (a
//! fresh random string, [`super::ids`]), and its `progressToken` the same; the answer,
//! the progress notifications carrying it, and for a `subscriptions/listen` request the
//! events the child tags with it as their subscription id go back to that caller with
//! its own id and token restored, and to nobody else.
//!
//! Invariant: a line from the child reaches a caller only through [`Routes::deliver`],
//! which hands it to the one open route its id or progress token names; anything else
//! is a [`Delivery::Unmatched`] the reader counts and logs (never its content). What a
//! route holds for its caller (its answer, its waiting notifications) is reserved in the
//! memory budget until the caller's stream takes it; what cannot be reserved, or a
//! caller too slow to take its notifications, cuts the caller off. A route is closed
//! exactly once: answered, failed, cut off, or given up by its caller.

use super::ids::{self, BridgeId};
use super::metrics::{CutOff, Dropped, StdioMetrics, Unmatched};
use super::notices::Notices;
use crate::budget::{MemoryBudget, Reservation};
use crate::jsonrpc::status::error_status;
use crate::jsonrpc::{EnvelopeField, replace_spans};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Where a `subscriptions/listen` stream's events name their subscription: the listen
/// request's id (SEP-2575).
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What the child says when its tools changed (untagged, or on a listen stream).
pub(crate) const TOOLS_CHANGED: &str = "notifications/tools/list_changed";

/// Why a request got no answer from the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoAnswer {
    /// The child exited (or was stopped) first.
    Exited,
    /// The answer was over `limits.max_event_bytes` and was discarded.
    Overlong,
    /// The answer could not be read (not JSON: a lone surrogate escape, say).
    Unreadable,
    /// The caller was cut off.
    CutOff(CutOff),
}

/// An answer for its caller: the JSON-RPC message with the caller's id, and its bytes
/// reserved until it is sent.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) message: Bytes,
    pub(crate) held: Reservation,
    /// The HTTP status it is answered with when it is the whole answer: an error's by
    /// its code ([`crate::jsonrpc::status::error_status`]), else `200`.
    pub(crate) status: http::StatusCode,
}

/// The answer of one request, or why none.
pub(crate) type ChildAnswer = Result<Reply, NoAnswer>;

/// One open request.
struct OpenRoute {
    progress_token: Option<Value>,
    caller_id: Value,
    /// The caller takes `text/event-stream`: notifications have somewhere to go.
    streams: bool,
    notices: Arc<Notices>,
    /// Taken when the route is answered or failed.
    answer: Option<oneshot::Sender<ChildAnswer>>,
}

impl OpenRoute {
    fn send(mut self, answer: ChildAnswer) {
        if let Some(sender) = self.answer.take() {
            let _ = sender.send(answer);
        }
    }
}

impl Drop for OpenRoute {
    fn drop(&mut self) {
        // However the route ends, its stream ends after what waits.
        self.notices.close();
    }
}

/// What the caller of a route waits on.
pub(crate) struct Receivers {
    pub(crate) notices: Arc<Notices>,
    pub(crate) answer: oneshot::Receiver<ChildAnswer>,
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
    /// A line that could not be read; whether it named an open request (now failed).
    Unreadable { failed: bool },
    /// The caller of a route was cut off (its route failed); the route's id when the
    /// child is still working on it (and is told to stop).
    CutOff(Option<BridgeId>, CutOff),
}

/// The open requests, by bridge id.
pub(crate) struct Routes {
    open: HashMap<BridgeId, OpenRoute>,
    budget: Arc<MemoryBudget>,
    /// The child said its tools changed since [`Routes::take_tools_changed`] last asked
    /// (to whomever it said it: a listener, or nobody).
    tools_changed: bool,
}

impl Routes {
    pub(crate) fn new(budget: Arc<MemoryBudget>) -> Self {
        Self {
            open: HashMap::new(),
            budget,
            tools_changed: false,
        }
    }

    /// Whether the child said its tools changed since the last call.
    pub(crate) fn take_tools_changed(&mut self) -> bool {
        std::mem::take(&mut self.tools_changed)
    }

    /// Open the route of bridge id `id` for a caller whose own id and progress token
    /// (if any) were `caller_id` and `progress_token`.
    pub(crate) fn open(
        &mut self,
        id: BridgeId,
        caller_id: Value,
        progress_token: Option<Value>,
        streams: bool,
    ) -> Receivers {
        let notices = Notices::new(&self.budget);
        let (answer, answer_rx) = oneshot::channel();
        self.open.insert(
            id,
            OpenRoute {
                progress_token,
                caller_id,
                streams,
                notices: notices.clone(),
                answer: Some(answer),
            },
        );
        Receivers {
            notices,
            answer: answer_rx,
        }
    }

    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.open.contains_key(id)
    }

    /// Close a route without an answer (its caller went away); whether it was open.
    pub(crate) fn close(&mut self, id: &str) -> bool {
        self.open.remove(id).is_some()
    }

    /// Fail one open route; whether it was open.
    pub(crate) fn fail(&mut self, id: &str, fault: NoAnswer) -> bool {
        match self.open.remove(id) {
            Some(route) => {
                route.send(Err(fault));
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
            route.send(Err(NoAnswer::Exited));
        }
        failed
    }

    /// The event stream of some request in progress whose caller takes events (a
    /// session's one client: any of its streams reaches it).
    pub(crate) fn streaming(&self) -> Option<Arc<Notices>> {
        self.open
            .values()
            .find(|route| route.streams && !route.notices.is_closed())
            .map(|route| route.notices.clone())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// OpenRoute one line of the child's stdout.
    pub(crate) fn deliver(&mut self, line: &[u8], metrics: &StdioMetrics) -> Delivery {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Delivery::Blank;
        }
        if let Some(delivery) = self.answer_as_written(line) {
            return delivery;
        }
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(line) else {
            // Named like an answer (as an overlong line is found): its request fails now
            // rather than waiting out the head timeout.
            let failed =
                ids::named_in_line(line).is_some_and(|id| self.fail(&id, NoAnswer::Unreadable));
            return match failed {
                true => Delivery::Unreadable { failed },
                false => Delivery::Unmatched(Unmatched::NotJson, None),
            };
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

    /// An answer to an open route as the child wrote it (nearly every line it writes):
    /// scanned as strictly as an HTTP upstream's answer, and handed on with its caller's
    /// id spliced in where the bridge's stood, nothing else of it read or written again.
    /// `None` for anything else, which the tree reading of [`Routes::deliver`] then
    /// decides as it decides every other line: another message, an id that is no string
    /// or names no open route, a line the strict scan refuses, or one with a `\r` between
    /// its tokens (an event's `data:` line cannot carry it, and the tree reading writes
    /// the message again without it).
    fn answer_as_written(&mut self, line: &[u8]) -> Option<Delivery> {
        // JSON's whitespace around the message (a CRLF child's `\r` among it) is left
        // out; a form feed is not JSON's, and goes the tree's way, which refuses it.
        let json_space = |byte: &u8| matches!(byte, b' ' | b'\t' | b'\r');
        let start = line.iter().position(|byte| !json_space(byte))?;
        let end = line.iter().rposition(|byte| !json_space(byte))? + 1;
        let line = &line[start..end];
        if memchr::memchr(b'\r', line).is_some() {
            return None;
        }
        let answer = crate::jsonrpc::scan_answer(line).ok()?;
        if !answer.is_message() || answer.envelope(EnvelopeField::Method).is_some() {
            return None;
        }
        let id = answer.envelope(EnvelopeField::Id)?;
        if line[id.start] != b'"' {
            return None;
        }
        let route = self.open.remove(answer.string(id.clone()).as_ref())?;
        let caller_id = serde_json::to_vec(&route.caller_id).expect("a JSON value serialises");
        let message = replace_spans(line, std::iter::once((id, caller_id.as_slice())));
        let status = answer
            .error_code()
            .map_or(http::StatusCode::OK, error_status);
        Some(self.reply(route, Bytes::from(message), status))
    }

    fn answer(&mut self, mut message: Map<String, Value>) -> Delivery {
        let id = message.get("id").and_then(Value::as_str);
        let Some(mut route) = id.and_then(|id| self.open.remove(id)) else {
            return Delivery::Unmatched(Unmatched::UnknownId, None);
        };
        message.insert("id".into(), std::mem::take(&mut route.caller_id));
        let status = match message.get("error").and_then(|e| e.get("code")) {
            Some(code) => code.as_i64().map_or(http::StatusCode::OK, error_status),
            None => http::StatusCode::OK,
        };
        self.reply(route, encode(&message), status)
    }

    /// Hand `message`, the answer of `route`, to its caller, its bytes reserved first.
    fn reply(&mut self, route: OpenRoute, message: Bytes, status: http::StatusCode) -> Delivery {
        let mut held = self.budget.reservation();
        if held.grow(message.len()).is_err() {
            route.send(Err(NoAnswer::CutOff(CutOff::OverBudget)));
            // The child is done with it: nothing to cancel.
            return Delivery::CutOff(None, CutOff::OverBudget);
        }
        route.send(Ok(Reply {
            message,
            held,
            status,
        }));
        Delivery::Delivered
    }

    fn notify(
        &mut self,
        mut message: Map<String, Value>,
        method: String,
        metrics: &StdioMetrics,
    ) -> Delivery {
        self.tools_changed |= method == TOOLS_CHANGED;
        // A log message on stdio has no request stream to travel on, so it cannot be
        // told apart from another caller's: it goes to nobody. Only progress (by its
        // token) and a listen stream's events (by their subscription id) name a request.
        let Some(id) = self.addressee(&mut message, &method) else {
            return Delivery::Unmatched(Unmatched::Notification, Some(method));
        };
        let route = &self.open[&id];
        if !route.streams {
            metrics.dropped(Dropped::JsonCaller);
            return Delivery::Delivered;
        }
        let notices = route.notices.clone();
        match notices.push(encode(&message)) {
            Ok(()) => Delivery::Delivered,
            Err(reason) => {
                notices.cut();
                self.fail(&id, NoAnswer::CutOff(reason));
                Delivery::CutOff(Some(id), reason)
            }
        }
    }

    /// The open route a notification names, its name put back as its caller wrote it:
    /// a progress notification names its request by the `progressToken` the bridge
    /// gave it; a `subscriptions/listen` stream's events (and their acknowledgement)
    /// name the listen request's id in `_meta` (SEP-2575), which is the bridge's id.
    fn addressee(&self, message: &mut Map<String, Value>, method: &str) -> Option<BridgeId> {
        let params = message.get_mut("params")?.as_object_mut()?;
        let progress = method == "notifications/progress";
        let slot = if progress {
            params.get_mut("progressToken")?
        } else {
            params
                .get_mut("_meta")?
                .as_object_mut()?
                .get_mut(SUBSCRIPTION_ID)?
        };
        let (id, route) = self.open.get_key_value(slot.as_str()?)?;
        *slot = if progress {
            route.progress_token.clone()?
        } else {
            route.caller_id.clone()
        };
        Some(id.clone())
    }
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

#[cfg(test)]
mod tests;
