//! The outbound half of the state boundary: every `requestState` in an upstream result
//! is sealed before the client sees it, in JSON bodies and in SSE streams.
//!
//! Invariant: no upstream byte that could carry a plaintext `requestState` reaches the
//! client unexamined. A JSON body, and each SSE event's data, is scanned as strictly as
//! a client's body ([`jsonrpc::scan_answer`]); a state is replaced by a token bound to
//! the request that produced it, spliced into the upstream's bytes where the state stood
//! (nothing else of them is rewritten); anything that cannot be made safe (a non-string
//! state, an oversized one, a body that does not parse, a compressed body) becomes a
//! JSON-RPC internal error instead, counted and logged.

use super::metrics::{Meters, SealFailure};
use crate::body::ProxyBody;
use crate::budget::Reservation;
use crate::error::ProxyError;
use crate::jsonrpc::{
    self, Answer, AnswerFault, EnvelopeField, Id, JsonKind, ResultField, StateMember,
};
use crate::policy::MrtrRefusal;
use crate::policy::answers;
use crate::policy::capabilities::{self, Declared};
use crate::policy::flow::FlowLimits;
use crate::policy::questions::Round;
use crate::policy::single_use::SingleUsePolicy;
use crate::sse::{EventRewriter, Rewrite, StreamFailure, event_data_at};
use crate::token::{Flow, Frame, RequestBinding, SealOptions, StateSealer, StateText};
use crate::tools::{Answering, Completed};
use bytes::{Bytes, BytesMut};
use serde_json::Value;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// What sealing a response needs to know about its request: computed at admission, so
/// nothing of the request body is held while the upstream works.
pub struct SealContext {
    /// The request's id, shared with the exchange.
    id: Option<Arc<Id>>,
    /// The request's binding; `None` for a request that cannot bind a state (a GET
    /// stream, a client's response, arguments the reference could not digest).
    binding: Option<RequestBinding>,
    /// The request's method, escaped and bounded (`text::printable`), for the log:
    /// shared with the audit record.
    method: Option<Arc<str>>,
    /// The caller's principal, shared with the audit record.
    principal: Option<Arc<str>>,
    /// What the client declared it can answer (`_meta` client capabilities).
    client_capabilities: Option<Declared>,
    /// Where the retry's token stood in its flow (`None`: a first call).
    flow: Option<Flow>,
    /// What the tool features do to the answer (record it, seal its handles).
    answering: Answering,
}

impl SealContext {
    /// `method`: already escaped for logs (the audit record's copy).
    pub fn new(
        id: Option<impl Into<Arc<Id>>>,
        method: Option<Arc<str>>,
        binding: Option<RequestBinding>,
        principal: Option<Arc<str>>,
    ) -> Self {
        Self {
            id: id.map(Into::into),
            binding,
            method,
            principal,
            client_capabilities: None,
            flow: None,
            answering: Answering::default(),
        }
    }

    /// What the tool features decided at admission.
    pub(crate) fn with_tools(mut self, answering: Answering) -> Self {
        self.answering = answering;
        self
    }

    /// What the flow rules need: the client's declared capabilities, and the position
    /// of the retry's token in its flow.
    pub fn with_flow(mut self, client_capabilities: Option<Declared>, flow: Option<Flow>) -> Self {
        self.client_capabilities = client_capabilities;
        self.flow = flow;
        self
    }

    /// The upstream's response head came with `status` (an idempotent call records
    /// only a 2xx answer).
    pub(crate) fn upstream_status(&self, status: http::StatusCode) {
        self.answering.upstream_status(status);
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
/// seals them afresh for its caller; handles are sealed last, in every result. What the
/// order gives is proved end to end: `handles::a_replay_seals_its_handles_afresh` and
/// `idempotency::only_a_complete_2xx_answer_is_recorded`.
const STEPS: [Step; 3] = [Step::SealState, Step::RecordAnswer, Step::SealHandles];

/// Seals states in one response (a JSON body, or every event of an SSE stream).
pub struct ResponseSealer {
    state_sealer: Arc<StateSealer>,
    /// The single-use policy when this response began: decides the `su` claim.
    single_use: Arc<SingleUsePolicy>,
    metrics: Meters,
    max_state_bytes: usize,
    limits: FlowLimits,
    context: SealContext,
    /// An SSE event with content has been seen (the first one must not open like JSON).
    seen_event: bool,
}

/// Bytes that replace a span of an upstream's answer (an empty span: inserted there).
type Splice = (Range<usize>, Vec<u8>);

/// The splices into one body: at most one into a message, one per message of a batch.
enum Splices {
    Message(Option<Splice>),
    Batch(Vec<Splice>),
}

impl Splices {
    fn as_slice(&self) -> &[Splice] {
        match self {
            Splices::Message(splice) => splice.as_slice(),
            Splices::Batch(splices) => splices,
        }
    }

    /// Each splice as [`jsonrpc::replace_spans`] takes it, `shift` bytes further on.
    fn shifted(&self, shift: usize) -> impl Iterator<Item = (Range<usize>, &[u8])> + Clone {
        (self.as_slice().iter())
            .map(move |(span, bytes)| (span.start + shift..span.end + shift, &bytes[..]))
    }
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

impl ResponseSealer {
    pub fn new(
        state_sealer: Arc<StateSealer>,
        single_use: Arc<SingleUsePolicy>,
        metrics: Meters,
        max_state_bytes: usize,
        limits: FlowLimits,
        context: SealContext,
    ) -> Self {
        Self {
            state_sealer,
            single_use,
            metrics,
            max_state_bytes,
            limits,
            context,
            seen_event: false,
        }
    }

    /// A whole answer was sealed: record it before the client has it (a stream's is
    /// recorded when the stream ends and this sealer is dropped).
    pub(crate) async fn finish(&mut self) {
        self.context.answering.finish().await;
    }

    /// Seal one JSON text of an answer (a whole body, an SSE event's data): the splices
    /// into the upstream's bytes that seal every `requestState`, record the answer and
    /// seal its handles, in order (none: the bytes go as they came).
    fn seal_text(&self, text: &[u8]) -> Result<Splices, Withheld> {
        // Read where the scan returned it: the answer (its facts are 1.2 KB) is not
        // moved again.
        let scanned = jsonrpc::scan_answer(text);
        let Ok(answer) = &scanned else {
            return Err(SealFailure::UnparseableBody.into());
        };
        if answer.is_message() {
            return self.seal_message(answer).map(Splices::Message);
        }
        let Some(batch) = answer.batch() else {
            return Ok(Splices::Message(None));
        };
        // A batch (no 2026 server sends one), arrays in it included: each message read
        // on its own (they do not overlap, so no byte is read twice more), sealed in its
        // place.
        let mut splices = Vec::new();
        for at in batch {
            let message = jsonrpc::scan_answer(&text[at.clone()])
                .map_err(|_| SealFailure::UnparseableBody)?;
            if let Some((span, bytes)) = self.seal_message(&message)? {
                splices.push((span.start + at.start..span.end + at.start, bytes));
            }
        }
        Ok(Splices::Batch(splices))
    }

    /// Run the [`STEPS`] on one message, in their order: the splices into its bytes (at
    /// most one: its state, or its result when handles were sealed in it).
    fn seal_message(&self, answer: &Answer<'_>) -> Result<Option<Splice>, Withheld> {
        answer.check().map_err(|fault| {
            Withheld::from(match fault {
                AnswerFault::AmbiguousKey => SealFailure::AmbiguousKey,
                // A server's request or an error carries no state of ours: it cannot be
                // bound to anything, and a client could still read it.
                AnswerFault::StateOutsideResult => SealFailure::NoRequestContext,
            })
        })?;
        let mut state = None;
        let mut handles = None;
        for step in STEPS {
            match step {
                Step::SealState => state = self.seal_result(answer)?,
                Step::RecordAnswer => self.record(answer, state.as_ref()),
                Step::SealHandles => handles = self.seal_handles(answer, state.as_ref()),
            }
        }
        // Handles sealed in a result hold its sealed state too.
        Ok(handles.or(state))
    }

    /// Record the answer to an idempotent call as the client gets it (states sealed,
    /// handles raw: each replay seals them afresh).
    fn record(&self, answer: &Answer<'_>, state: Option<&Splice>) {
        let answering = &self.context.answering;
        if !answering.records() {
            return;
        }
        let Some(id) = answer.id() else {
            return;
        };
        if Some(&id) != self.context.id.as_deref() {
            return;
        }
        let text = answer.text();
        if let Some(at) = answer.envelope(EnvelopeField::Result) {
            // The sealed state lies inside the result (where it stood, or appended).
            let sealed = match state {
                Some((span, token)) => {
                    let token = std::str::from_utf8(token).expect("a written token is ASCII");
                    Cow::Owned(
                        [&text[at.start..span.start], token, &text[span.end..at.end]].concat(),
                    )
                }
                None => Cow::Borrowed(&text[at]),
            };
            answering.record(Completed::Result {
                text: &sealed,
                asks_for_input: answer.asks_for_input(),
            });
        } else if let Some(at) = answer.envelope(EnvelopeField::Error) {
            answering.record(Completed::Error(&text[at]));
        }
    }

    /// Seal the handles of an issuing tool's `result` (its state sealed first): the
    /// result written back in its place.
    fn seal_handles(&self, answer: &Answer<'_>, state: Option<&Splice>) -> Option<Splice> {
        if !self.context.answering.issues() {
            return None;
        }
        let at = answer.result()?;
        let inside =
            state.map(|(span, bytes)| (span.start - at.start..span.end - at.start, &bytes[..]));
        let result =
            jsonrpc::replace_spans(&answer.text().as_bytes()[at.clone()], inside.into_iter());
        let Ok(Value::Object(mut result)) = jsonrpc::parse_bounded(&result, usize::MAX) else {
            return None;
        };
        self.context.answering.seal_handles(&mut result);
        let written = jsonrpc::serialize(&Value::Object(result), at.len() + 256);
        Some((at, written))
    }

    /// Seal the `requestState` of a result (or give a round that asks for input a token
    /// of its own): bound to the request, the round's questions and the flow's next
    /// round. The span it goes to and its bytes; `None`: the result needs none.
    fn seal_result(&self, answer: &Answer<'_>) -> Result<Option<Splice>, Withheld> {
        let Some(result) = answer.result() else {
            return Ok(None);
        };
        let asks = answer.asks_for_input();
        let (state, at) = match answer.state() {
            StateMember::String(span) => (Some(UpstreamState::read(answer, span.clone())), span),
            // A round without upstream state still gets a token: it is what binds the
            // client's `inputResponses` to the questions this round asked (a stateless
            // upstream would otherwise trust any answers it is sent). It goes last.
            StateMember::Null(span) if asks => (None, span),
            StateMember::Absent if asks => (None, result.end - 1..result.end - 1),
            StateMember::Absent | StateMember::Null(_) => return Ok(None),
            StateMember::Other => return Err(SealFailure::NonStringState.into()),
        };
        if state
            .as_ref()
            .is_some_and(|s| s.len() > self.max_state_bytes)
        {
            return Err(SealFailure::StateTooLarge.into());
        }
        let Some(binding) = &self.context.binding else {
            return Err(SealFailure::NoRequestContext.into());
        };
        let (asked, questions) = self.questions(answer)?;
        let flow = self
            .limits
            .next(self.context.flow, crate::token::now())
            .map_err(|_| Withheld::Refused(MrtrRefusal::RoundLimit, ProxyError::RoundLimit))?;
        let options = SealOptions {
            principal: self.context.principal.as_deref(),
            single_use: self.single_use.applies(binding.method(), binding.target()),
            no_upstream_state: state.is_none(),
            asked: Some(&asked),
            questions: Some(&questions),
            flow: Some(flow),
        };
        let text = state
            .as_ref()
            .map_or(StateText::Plain(""), UpstreamState::text);
        // A token is its prefix and base64url, none of which JSON escapes: written as it
        // is, between its quotes (and after the member's name when it is appended), in
        // the one buffer the seal fills.
        let frame = Frame {
            lead: if at.is_empty() {
                b",\"requestState\":\""
            } else {
                b"\""
            },
            tail: b"\"",
        };
        let (written, kid) =
            (self.state_sealer).seal_counted_framed(text, binding, &options, frame);
        let token = &written[frame.lead.len()..written.len() - frame.tail.len()];
        if token.len() > crate::token::max_token_bytes(self.max_state_bytes) {
            // A long path or many asked keys on top of a large state: the gate would refuse
            // this token on the retry, so it is not handed out.
            return Err(SealFailure::StateTooLarge.into());
        }
        debug_assert!(std::str::from_utf8(token).is_ok_and(crate::token::is_json_plain));
        self.metrics.keys.token_minted(kid);
        self.metrics.path.sealed();
        Ok(Some((at, written)))
    }

    /// The keys a round asks for input under and its questions as recorded in its
    /// token, if the client can answer them: it declared every capability they need.
    fn questions(&self, answer: &Answer<'_>) -> Result<(Vec<String>, String), Withheld> {
        let round = match answer.result_member(ResultField::InputRequests) {
            Some((span, JsonKind::Object)) => Round::scanned(answer.text(), span),
            _ => Round::default(),
        };
        if round.asked.iter().any(|key| !key.is_ascii()) {
            // The answers come back as `inputResponses` keys, which the gate refuses
            // when they are not ASCII: fail here, where the upstream's choice is visible,
            // rather than at every client's retry.
            return Err(SealFailure::AmbiguousKey.into());
        }
        // A server MUST NOT ask what the client did not declare it can answer.
        if let Err(missing) =
            capabilities::check(self.context.client_capabilities, &round.questions)
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
        answers::record(round).map_err(|_| {
            Withheld::Refused(
                MrtrRefusal::QuestionsTooLarge,
                ProxyError::UpstreamResponse("questions_too_large"),
            )
        })
    }

    /// Make a whole JSON body safe: the sealed body (`None`: as it came), or why it is
    /// withheld.
    pub fn seal_json(&self, body: &[u8]) -> Result<Option<Bytes>, Withheld> {
        let splices = self.seal_text(body)?;
        let sealed = !splices.as_slice().is_empty();
        Ok(sealed.then(|| Bytes::from(jsonrpc::replace_spans(body, splices.shifted(0)))))
    }

    /// Count, log, and build the internal error that replaces an unsafe response.
    pub(crate) fn failure(&self, failure: SealFailure) -> ProxyError {
        self.metrics.path.seal_failed(failure);
        tracing::error!(
            method = self.context.method.as_deref().unwrap_or("-"),
            reason = failure.as_str(),
            "upstream response withheld: its requestState cannot be sealed"
        );
        ProxyError::UpstreamResponse(failure.as_str())
    }

    /// Count, log, and build the error that replaces a withheld response.
    pub(crate) fn withhold(&self, withheld: Withheld) -> ProxyError {
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
            .jsonrpc_body(self.context.id.as_deref());
        let mut event = BytesMut::with_capacity(body.len() + 32);
        event.extend_from_slice(b"event: message\r\ndata: ");
        event.extend_from_slice(&body);
        event.extend_from_slice(b"\r\n\r\n");
        event.freeze()
    }
}

impl EventRewriter for ResponseSealer {
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
        let Some(data) = event_data_at(event) else {
            return Rewrite::Keep;
        };
        if data.bytes.iter().all(u8::is_ascii_whitespace) {
            // Priming events and keep-alives carry no message.
            return Rewrite::Keep;
        }
        if !data
            .bytes
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{' || *b == b'[')
        {
            // Not a JSON object or array, so no message and no state: the 2024 HTTP+SSE
            // transport's `event: endpoint` carries a plain URL here.
            return Rewrite::Keep;
        }
        match self.seal_text(&data.bytes) {
            Ok(splices) if splices.as_slice().is_empty() => Rewrite::Keep,
            // One data line holds the message: spliced into the event itself, once.
            Ok(splices) => Rewrite::Replace(match data.at {
                Some(at) => Bytes::from(jsonrpc::replace_spans(event, splices.shifted(at))),
                None => crate::sse::replace_data(
                    event,
                    &jsonrpc::replace_spans(&data.bytes, splices.shifted(0)),
                ),
            }),
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

/// A whole-body response with a new body, holding `reservation` until it is sent.
pub(crate) fn with_body(
    mut parts: http::response::Parts,
    body: Bytes,
    reservation: Option<Reservation>,
) -> http::Response<ProxyBody> {
    // hyper writes the length of a whole body itself, into the head it is writing (a
    // `HeaderValue` of ours would be one more allocation per answer).
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body = match reservation {
        Some(reservation) => crate::body::full_holding(body, reservation),
        None => crate::body::full(body),
    };
    http::Response::from_parts(parts, body)
}

/// The upstream's state of an answer, as the sealer is given it: the string token as it
/// stands when it is already in the claims' spelling (nearly every state: printable ASCII
/// with `\"` escapes), else the plaintext it holds.
enum UpstreamState<'a> {
    /// The token, and the length of the plaintext it spells (what the size limit counts).
    Spelled(&'a str, usize),
    Plain(Cow<'a, str>),
}

impl<'a> UpstreamState<'a> {
    fn read(answer: &Answer<'a>, span: Range<usize>) -> Self {
        let token = &answer.text()[span.clone()];
        match crate::token::canonical::python_spelled_len(token) {
            Some(len) => UpstreamState::Spelled(token, len),
            None => UpstreamState::Plain(answer.string(span)),
        }
    }

    /// The plaintext's length.
    fn len(&self) -> usize {
        match self {
            UpstreamState::Spelled(_, len) => *len,
            UpstreamState::Plain(plain) => plain.len(),
        }
    }

    fn text(&self) -> StateText<'_> {
        match self {
            UpstreamState::Spelled(token, _) => StateText::Spelled(token),
            UpstreamState::Plain(plain) => StateText::Plain(plain),
        }
    }
}
