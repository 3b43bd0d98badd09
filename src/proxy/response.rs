//! The outbound half of the state boundary: every `requestState` in an upstream result
//! is sealed before the client sees it, in JSON bodies and in SSE streams.
//!
//! Invariant: no upstream byte that could carry a plaintext `requestState` reaches the
//! client unexamined. A JSON or SSE body is parsed strictly; a state is replaced by a
//! token bound to the request that produced it; anything that cannot be made safe (a
//! non-string state, an oversized one, a body that does not parse, a compressed body)
//! becomes a JSON-RPC internal error instead, counted and logged.

use super::budget::Reservation;
use super::metrics::{Meters, SealFailure};
use super::upstream::ProxyBody;
use crate::error::ProxyError;
use crate::jsonrpc::{self, Id};
use crate::policy::MrtrRefusal;
use crate::policy::flow::FlowLimits;
use crate::policy::single_use::SingleUsePolicy;
use crate::policy::{answers, capabilities};
use crate::sse::{EventRewriter, Rewrite, StreamFailure, event_data};
use crate::token::{Flow, RequestBinding, SealOptions, StateSealer};
use crate::tools::Answering;
use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value};
use std::sync::Arc;

/// What sealing a response needs to know about its request: computed at admission, so
/// nothing of the request body is held while the upstream works.
pub struct SealContext {
    id: Option<Id>,
    /// The request's binding; `None` for a request that cannot bind a state (a GET
    /// stream, a client's response, arguments the reference could not digest).
    binding: Option<RequestBinding>,
    /// The request's method, escaped and bounded (`text::printable`), for the log.
    method: Option<String>,
    principal: Option<String>,
    /// What the client declared it can answer (`_meta` client capabilities).
    client_capabilities: Option<Value>,
    /// Where the retry's token stood in its flow (`None`: a first call).
    flow: Option<Flow>,
    /// What the tool features do to the answer (record it, seal its handles).
    answering: Answering,
}

impl SealContext {
    /// `method`: already escaped for logs (the audit record's copy).
    pub fn new(
        id: Option<Id>,
        method: Option<&str>,
        binding: Option<RequestBinding>,
        principal: Option<String>,
    ) -> Self {
        Self {
            id,
            binding,
            method: method.map(str::to_owned),
            principal,
            client_capabilities: None,
            flow: None,
            answering: Answering::default(),
        }
    }

    /// What the tool features decided at admission.
    pub fn with_tools(mut self, answering: Answering) -> Self {
        self.answering = answering;
        self
    }

    /// What the flow rules need: the client's declared capabilities, and the position
    /// of the retry's token in its flow.
    pub fn with_flow(mut self, client_capabilities: Option<Value>, flow: Option<Flow>) -> Self {
        self.client_capabilities = client_capabilities;
        self.flow = flow;
        self
    }

    /// The upstream's response head came with `status` (an idempotent call records
    /// only a 2xx answer).
    pub fn upstream_status(&self, status: http::StatusCode) {
        self.answering.upstream_status(status);
    }

    /// The id of the request.
    pub fn request_id(&self) -> Option<&Id> {
        self.id.as_ref()
    }

    /// A response that answers no request the sidecar parsed (a GET stream, say):
    /// a state in it cannot be bound, so it cannot be let through.
    pub fn unbound(principal: Option<String>) -> Self {
        Self::new(None, None, None, principal)
    }
}

/// What is done to each message of a response (a JSON body, each SSE event's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Seal its `requestState` (or refuse what cannot be sealed: nothing after it runs).
    SealState,
    /// Record the answer to an idempotent call.
    RecordAnswer,
    /// Seal the handles in an issuing tool's result.
    SealHandles,
}

/// The steps, in their one order. An answer is recorded only once it is safe (a message
/// withheld at [`Step::SealState`] leaves the reservation without an outcome, which
/// releases the key), with its states sealed and its handles still raw, so each replay
/// seals them afresh for its caller; handles are sealed last, in every result.
const STEPS: [Step; 3] = [Step::SealState, Step::RecordAnswer, Step::SealHandles];

/// Seals states in one response (a JSON body, or every event of an SSE stream).
pub struct Sealer {
    sealer: Arc<StateSealer>,
    /// The single-use policy when this response began: decides the `su` claim.
    single_use: Arc<SingleUsePolicy>,
    metrics: Meters,
    max_state_bytes: usize,
    limits: FlowLimits,
    context: SealContext,
    /// An SSE event with content has been seen (the first one must not open like JSON).
    seen_event: bool,
}

/// Why a response (or an SSE event) is withheld from the client.
#[derive(Debug)]
pub enum Withheld {
    /// It could not be made safe: an internal error replaces it.
    Failure(SealFailure),
    /// An MRTR rule stopped the round: this error replaces it.
    Refused(MrtrRefusal, ProxyError),
}

impl From<SealFailure> for Withheld {
    fn from(failure: SealFailure) -> Self {
        Withheld::Failure(failure)
    }
}

impl Sealer {
    pub fn new(
        sealer: Arc<StateSealer>,
        single_use: Arc<SingleUsePolicy>,
        metrics: Meters,
        max_state_bytes: usize,
        limits: FlowLimits,
        context: SealContext,
    ) -> Self {
        Self {
            sealer,
            single_use,
            metrics,
            max_state_bytes,
            limits,
            context,
            seen_event: false,
        }
    }

    /// The id of the request this response answers.
    pub fn request_id(&self) -> Option<&Id> {
        self.context.id.as_ref()
    }

    /// Seal every `requestState` in a parsed JSON-RPC message (or batch). Returns whether
    /// anything changed.
    pub fn seal_value(&self, value: &mut Value) -> Result<bool, Withheld> {
        match value {
            Value::Array(items) => {
                let mut changed = false;
                for item in items {
                    changed |= self.seal_value(item)?;
                }
                Ok(changed)
            }
            Value::Object(message) => self.seal_message(message),
            _ => Ok(false),
        }
    }

    /// Run the [`STEPS`] on one message, in their order. Whether it changed.
    fn seal_message(&self, message: &mut Map<String, Value>) -> Result<bool, Withheld> {
        let mut changed = false;
        for step in STEPS {
            changed |= match step {
                Step::SealState => self.seal_message_parts(message)?,
                Step::RecordAnswer => {
                    if message.get("id").is_some() && message.get("id") == self.context.id.as_ref()
                    {
                        self.context.answering.record(message);
                    }
                    false
                }
                Step::SealHandles => self.context.answering.seal_handles(message),
            };
        }
        Ok(changed)
    }

    fn seal_message_parts(&self, message: &mut Map<String, Value>) -> Result<bool, Withheld> {
        no_state_outside_result(message)?;
        let Some(Value::Object(result)) = message.get_mut("result") else {
            return Ok(false);
        };
        self.seal_result(result)
    }

    /// Seal the `requestState` of a result (or give a round that asks for input a token
    /// of its own): bound to the request, the round's questions and the flow's next
    /// round. `false`: the result needs none.
    fn seal_result(&self, result: &mut Map<String, Value>) -> Result<bool, Withheld> {
        jsonrpc::check_result_fields(result)
            .map_err(|_| Withheld::from(SealFailure::AmbiguousKey))?;
        let asks = crate::mcp::asks_for_input(result);
        let state = match result.get("requestState") {
            // A round without upstream state still gets a token: it is what binds the
            // client's `inputResponses` to the questions this round asked (a stateless
            // upstream would otherwise trust any answers it is sent).
            None | Some(Value::Null) if asks => None,
            None | Some(Value::Null) => return Ok(false),
            Some(Value::String(state)) => Some(state.as_str()),
            Some(_) => return Err(SealFailure::NonStringState.into()),
        };
        if state.is_some_and(|s| s.len() > self.max_state_bytes) {
            return Err(SealFailure::StateTooLarge.into());
        }
        let Some(binding) = &self.context.binding else {
            return Err(SealFailure::NoRequestContext.into());
        };
        let (asked, questions) = self.questions(result)?;
        let flow = self
            .limits
            .next(self.context.flow, crate::token::now())
            .map_err(|_| Withheld::Refused(MrtrRefusal::RoundLimit, ProxyError::RoundLimit))?;
        let options = SealOptions {
            principal: self.context.principal.as_deref(),
            single_use: self.single_use.applies(&binding.method, &binding.target),
            no_upstream_state: state.is_none(),
            asked: Some(&asked),
            questions: Some(&questions),
            flow: Some(flow),
        };
        let (token, kid) = self
            .sealer
            .seal_counted(state.unwrap_or_default(), binding, &options);
        if token.len() > super::max_token_bytes(self.max_state_bytes) {
            // A long path or many asked keys on top of a large state: the gate would refuse
            // this token on the retry, so it is not handed out.
            return Err(SealFailure::StateTooLarge.into());
        }
        self.metrics.keys.token_minted(kid);
        result.insert("requestState".into(), Value::String(token));
        self.metrics.path.sealed();
        Ok(true)
    }

    /// The keys a round asks for input under and its questions as recorded in its
    /// token, if the client can answer them: it declared every capability they need.
    fn questions(&self, result: &Map<String, Value>) -> Result<(Vec<String>, Value), Withheld> {
        let asked: Vec<String> = match result.get("inputRequests") {
            Some(Value::Object(requests)) => requests.keys().cloned().collect(),
            _ => Vec::new(),
        };
        if asked.iter().any(|key| !key.is_ascii()) {
            // The answers come back as `inputResponses` keys, which the gate refuses
            // when they are not ASCII: fail here, where the upstream's choice is visible,
            // rather than at every client's retry.
            return Err(SealFailure::AmbiguousKey.into());
        }
        let empty = Map::new();
        let requests = match result.get("inputRequests") {
            Some(Value::Object(requests)) => requests,
            _ => &empty,
        };
        // A server MUST NOT ask what the client did not declare it can answer.
        if let Err(missing) =
            capabilities::check(self.context.client_capabilities.as_ref(), requests)
        {
            let reason = if missing.unknown_methods.is_empty() {
                MrtrRefusal::MissingCapability
            } else {
                MrtrRefusal::UnknownInputMethod
            };
            let required = missing.required;
            return Err(Withheld::Refused(
                reason,
                ProxyError::MissingCapability { required },
            ));
        }
        let questions = answers::record(requests).map_err(|_| {
            Withheld::Refused(
                MrtrRefusal::QuestionsTooLarge,
                ProxyError::UpstreamResponse("questions_too_large"),
            )
        })?;
        Ok((asked, questions))
    }

    /// Make a whole JSON body safe: the sealed body, or why it is withheld.
    pub fn seal_json(&self, body: &[u8]) -> Result<Option<Bytes>, Withheld> {
        let mut value = parse(body)?;
        if self.seal_value(&mut value)? {
            Ok(Some(Bytes::from(jsonrpc::serialize(
                &value,
                sealed_len_hint(body.len()),
            ))))
        } else {
            Ok(None)
        }
    }

    /// Count, log, and build the internal error that replaces an unsafe response.
    pub fn failure(&self, failure: SealFailure) -> ProxyError {
        self.metrics.path.seal_failed(failure);
        tracing::error!(
            method = self.context.method.as_deref().unwrap_or("-"),
            reason = failure.as_str(),
            "upstream response withheld: its requestState cannot be sealed"
        );
        ProxyError::UpstreamResponse(failure.as_str())
    }

    /// Count, log, and build the error that replaces a withheld response.
    pub fn withhold(&self, withheld: Withheld) -> ProxyError {
        match withheld {
            Withheld::Failure(failure) => self.failure(failure),
            Withheld::Refused(reason, error) => {
                self.metrics.policy.mrtr_refused(reason);
                tracing::warn!(
                    method = self.context.method.as_deref().unwrap_or("-"),
                    reason = reason.as_str(),
                    "upstream round refused by an MRTR rule"
                );
                error
            }
        }
    }

    /// The SSE event that replaces an unsafe one and ends the stream.
    fn error_event(&self, withheld: impl Into<Withheld>) -> Bytes {
        let body = self
            .withhold(withheld.into())
            .jsonrpc_body(self.context.id.as_ref());
        let mut event = BytesMut::with_capacity(body.len() + 32);
        event.extend_from_slice(b"event: message\r\ndata: ");
        event.extend_from_slice(&body);
        event.extend_from_slice(b"\r\n\r\n");
        event.freeze()
    }
}

impl EventRewriter for Sealer {
    fn rewrite(&mut self, event: &[u8]) -> Rewrite {
        // WHATWG SSE decoders strip a byte order mark at the start of the stream, so a
        // client reads `\u{feff}data: ...` as a data line: so must the sealer (on any
        // event; a BOM elsewhere is never legitimate and dropping it is harmless).
        let event = event.strip_prefix("\u{feff}".as_bytes()).unwrap_or(event);
        let opens = crate::mcp::json_like(event);
        if opens.is_some() && !std::mem::replace(&mut self.seen_event, true) && opens == Some(true)
        {
            // A stream that opens like JSON is read as JSON by lenient clients that look
            // at the bytes rather than the label; no SSE stream starts that way.
            return Rewrite::ReplaceAndEnd(self.error_event(SealFailure::UnparseableBody));
        }
        let Some(data) = event_data(event) else {
            return Rewrite::Keep;
        };
        if data.iter().all(u8::is_ascii_whitespace) {
            // Priming events and keep-alives carry no message.
            return Rewrite::Keep;
        }
        if !data
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{' || *b == b'[')
        {
            // Not a JSON object or array, so no message and no state: the 2024 HTTP+SSE
            // transport's `event: endpoint` carries a plain URL here.
            return Rewrite::Keep;
        }
        let mut value = match parse(&data) {
            Ok(value) => value,
            Err(failure) => return Rewrite::ReplaceAndEnd(self.error_event(failure)),
        };
        match self.seal_value(&mut value) {
            Ok(false) => Rewrite::Keep,
            Ok(true) => {
                let data = jsonrpc::serialize(&value, sealed_len_hint(data.len()));
                Rewrite::Replace(replace_data(event, &data))
            }
            Err(failure) => Rewrite::ReplaceAndEnd(self.error_event(failure)),
        }
    }

    fn fail(&mut self, failure: StreamFailure) -> Bytes {
        self.error_event(match failure {
            StreamFailure::EventTooLarge => SealFailure::EventTooLarge,
            StreamFailure::UpstreamError => SealFailure::UpstreamBodyError,
            StreamFailure::OverBudget => SealFailure::OverBudget,
        })
    }

    fn finish(&mut self, leftover: &[u8]) -> Rewrite {
        // An unterminated last event: most clients drop it, lenient ones may not, so it
        // gets the same scrutiny as a complete one.
        self.rewrite(leftover)
    }
}

/// Rebuild an event with `data` as its only data line, where the first one stood; every
/// other line (`event:`, `id:`, `retry:`, comments) and every line ending is kept.
pub fn replace_data(event: &[u8], data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(event.len() + data.len());
    let mut written = false;
    for (content, ending) in crate::sse::split_lines(event) {
        let is_data = content == b"data" || content.starts_with(b"data:");
        if !is_data {
            out.extend_from_slice(content);
            out.extend_from_slice(ending);
        } else if !written {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(data);
            out.extend_from_slice(if ending.is_empty() { b"\r\n" } else { ending });
            written = true;
        }
    }
    out.freeze()
}

/// Parse an upstream body as strictly as the gate parses a client's, but with no cap on
/// its values: it comes from the operator's own server, bounded by
/// `limits.max_body_bytes` / `max_event_bytes`, and a large legitimate result (150,000
/// numbers) must not become an internal error.
/// Room for a sealed copy of a `len`-byte message: a token is longer than the state it
/// replaces (claims, tag, base64).
fn sealed_len_hint(len: usize) -> usize {
    len + len / 2 + 1024
}

fn parse(body: &[u8]) -> Result<Value, SealFailure> {
    jsonrpc::parse_bounded(body, usize::MAX).map_err(|_| SealFailure::UnparseableBody)
}

/// A whole-body response with a new body, holding `reservation` until it is sent.
pub fn with_body(
    mut parts: http::response::Parts,
    body: Bytes,
    reservation: Option<Reservation>,
) -> http::Response<ProxyBody> {
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, body.len().into());
    let body = super::upstream::full(body);
    let body = match reservation {
        Some(reservation) => reservation.hold(body),
        None => body,
    };
    http::Response::from_parts(parts, body)
}

/// Nothing but a result may carry a state of ours, and every object a client reads
/// keys from is checked for keys it could read as reserved ones.
fn no_state_outside_result(message: &Map<String, Value>) -> Result<(), Withheld> {
    jsonrpc::check_reserved(message, jsonrpc::ENVELOPE_FIELDS)
        .map_err(|_| Withheld::from(SealFailure::AmbiguousKey))?;
    // A server→client request or notification carries no state of ours; one that
    // does cannot be bound to anything.
    if let Some(Value::Object(params)) = message.get("params") {
        jsonrpc::check_result_fields(params)
            .map_err(|_| Withheld::from(SealFailure::AmbiguousKey))?;
        if params.get("requestState").is_some_and(|s| !s.is_null()) {
            return Err(SealFailure::NoRequestContext.into());
        }
    }
    // A folding client reads `meſſage` as the error's `message`: the error's own keys
    // get the same scrutiny as the envelope's.
    if let Some(Value::Object(error)) = message.get("error") {
        jsonrpc::check_reserved(error, jsonrpc::ERROR_FIELDS)
            .map_err(|_| Withheld::from(SealFailure::AmbiguousKey))?;
    }
    // An error that carries a state (`error.data.requestState`) has no round to bind
    // it to; a client could still read it.
    if let Some(Value::Object(data)) = message.get("error").and_then(|e| e.get("data")) {
        jsonrpc::check_result_fields(data)
            .map_err(|_| Withheld::from(SealFailure::AmbiguousKey))?;
        if data.get("requestState").is_some_and(|s| !s.is_null()) {
            return Err(SealFailure::NoRequestContext.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order [`STEPS`] documents. What it gives is proved end to end: an answer is
    /// recorded with its handles raw and each replay seals them afresh
    /// (`handles::a_replay_seals_its_handles_afresh`), a withheld answer records nothing
    /// (`idempotency::only_a_complete_2xx_answer_is_recorded`).
    #[test]
    fn states_are_sealed_first_then_the_answer_recorded_then_handles_sealed() {
        assert_eq!(
            STEPS,
            [Step::SealState, Step::RecordAnswer, Step::SealHandles]
        );
    }

    #[test]
    fn replace_data_keeps_other_lines_and_endings() {
        let event = b"event: message\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n";
        assert_eq!(
            &replace_data(event, b"{\"b\":2}")[..],
            b"event: message\r\nid: 7\r\ndata: {\"b\":2}\r\n\r\n"
        );
        let event = b": c\ndata:x\n\n";
        assert_eq!(&replace_data(event, b"y")[..], b": c\ndata: y\n\n");
        let event = b"data: x";
        assert_eq!(&replace_data(event, b"y")[..], b"data: y\r\n");
        let event = b"data\rretry: 5\r\r";
        assert_eq!(&replace_data(event, b"y")[..], b"data: y\rretry: 5\r\r");
    }
}
