//! The response phase: decide how an upstream answer must be read before the client may
//! have it, then hand it to the [`ResponseSealer`] (whole JSON bodies, or SSE event by event).
//!
//! Invariant: on an inspected route, no upstream body that a client could read as JSON
//! reaches it unexamined, whatever it is labelled. A body is JSON when its label says so
//! *or* when its first significant byte is `{`, `[` or a byte order mark; SSE bodies are
//! rewritten event by event, and so is any other 2xx answer to a GET (clients parse it as
//! events whatever its label); a 2xx answer to a POSTed request that is neither JSON, SSE
//! nor empty is refused, and one to a notification loses its text; everything else (a
//! plain-text 403) passes with its status and headers, read event by event too: its bytes
//! are kept unless a part of it reads as an event carrying a message, which is sealed or
//! refused like any other. Bodies the sealer cannot read
//! (compressed, a transfer coding other than `chunked`, a non-UTF-8 charset) and
//! informational statuses are refused.

use super::counted::Counted;
use super::failure::Failure;
use super::metrics::{Meters, SealFailure};
use super::response::{ResponseSealer, SealContext, with_body};
use super::upstream;
use crate::body::{BoxError, ProxyBody};
use crate::budget::{self, CollectError, MemoryBudget, Reservation};
use crate::config::LimitsConfig;
use crate::error::ProxyError;
use crate::policy::flow::FlowLimits;
use crate::policy::single_use::SingleUse;
use crate::sse::{EventRewriter, SseRewriteBody};
use crate::token::StateSealer;
use bytes::{Bytes, BytesMut};
use http::Response;
use http::header;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

mod head;

use head::{AnswerHead, BodyLabel};

/// The response phase's settings.
pub(crate) struct Outbound {
    sealer: Arc<StateSealer>,
    /// Asked, when a state is sealed, whether its target is single-use now.
    single_use: Arc<SingleUse>,
    metrics: Meters,
    limits: LimitsConfig,
    budget: Arc<MemoryBudget>,
    /// Round limits applied when a round is sealed.
    flow_limits: FlowLimits,
    /// How long a whole JSON body, or the peek at an unlabelled one, may take
    /// (`timeouts.response_head_ms`, counted again from the head).
    read_timeout: Duration,
}

/// `body` read as events, each one handed to `rewriter` as it completes.
fn rewrite<B, R>(
    mut parts: http::response::Parts,
    body: B,
    rewriter: R,
    limits: &LimitsConfig,
    held: Reservation,
) -> Response<ProxyBody>
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: std::fmt::Display,
    R: EventRewriter + Sync,
{
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = SseRewriteBody::accounted(body, rewriter, limits.max_event_bytes, held)
        .map_err(|never| match never {});
    Response::from_parts(parts, body.boxed())
}

impl Outbound {
    pub(crate) fn new(
        sealer: Arc<StateSealer>,
        single_use: Arc<SingleUse>,
        metrics: Meters,
        limits: LimitsConfig,
        budget: Arc<MemoryBudget>,
        flow_limits: FlowLimits,
        read_timeout: Duration,
    ) -> Self {
        Self {
            flow_limits,
            sealer,
            single_use,
            metrics,
            limits,
            budget,
            read_timeout,
        }
    }

    /// Make `response` safe for the client; `asked` says what kind of request it answers.
    pub(crate) async fn respond(
        &self,
        response: Response<Incoming>,
        context: SealContext,
        asked: Asked,
    ) -> Result<Response<ProxyBody>, Failure> {
        let (mut parts, body) = response.into_parts();
        context.upstream_status(parts.status);
        let head = AnswerHead::read(&parts.headers);
        if head.hop_by_hop {
            upstream::strip_hop_by_hop(&mut parts.headers);
        }
        // The client's connection has its own version; an HTTP/1.0 upstream's must not leak.
        parts.version = http::Version::default();
        let sealer = ResponseSealer::new(
            self.sealer.clone(),
            self.single_use.policy(),
            self.metrics.clone(),
            self.limits.max_state_bytes,
            self.flow_limits,
            context,
        );
        let refuse = |sealer: &ResponseSealer, parts: http::response::Parts, failure| Failure {
            error: sealer.failure(failure),
            upstream_head: Some(parts),
        };
        if parts.status.is_informational() {
            // Nothing the sidecar asked for (no request upgrades): an unsolicited `101`
            // would hand the client a raw connection to the upstream.
            return Err(refuse(&sealer, parts, SealFailure::UnexpectedStatus));
        }
        // Checked first: an empty body carries no state whatever it is labelled (the
        // Python SDK answers 2025 notifications with `202`, `application/json`, no body).
        if body.is_end_stream() {
            return Ok(Response::from_parts(
                parts,
                body.map_err(BoxError::from).boxed(),
            ));
        }
        if !head.chunked_only {
            // hyper removes only the `chunked` layer of `gzip, chunked`: the sealer would
            // see compressed bytes the client then decodes.
            return Err(refuse(&sealer, parts, SealFailure::TransferCoding));
        }
        if !head.identity_encoding {
            // We asked for identity; a compressed body cannot be inspected.
            return Err(refuse(&sealer, parts, SealFailure::UnsupportedEncoding));
        }
        // A whole body's sealing is boxed where it starts: its state is the largest of a
        // request's, and every future above it would carry it and move it once more.
        match head.label {
            BodyLabel::Unreadable => Err(refuse(&sealer, parts, SealFailure::UnknownContentType)),
            BodyLabel::Json => Box::pin(self.seal_whole(parts, body, sealer)).await,
            // Not sniffed: a GET stream may stay silent for minutes, and its head must not
            // wait for a first byte. The sealer refuses a stream that opens like JSON.
            BodyLabel::EventStream => Ok(self.rewrite_events(parts, body, sealer)),
            BodyLabel::Other => {
                let peeked = match self.peek(body).await {
                    Ok(peeked) => peeked,
                    Err(failure) => return Err(refuse(&sealer, parts, failure)),
                };
                let success = parts.status.is_success();
                match (peeked.json_like, asked) {
                    (Some(true), _) => Box::pin(self.seal_whole(parts, peeked.body, sealer)).await,
                    // Whitespace only: no message, no state.
                    (None, _) => Ok(Response::from_parts(parts, peeked.body.boxed())),
                    (Some(false), Asked::Call) if success => {
                        Err(refuse(&sealer, parts, SealFailure::UnexpectedContentType))
                    }
                    // Express's `res.sendStatus(202)` says "Accepted" to a notification:
                    // nobody reads it, and its status must survive. The text goes.
                    (Some(false), Asked::Notification) if success => {
                        for name in BODY_HEADERS {
                            parts.headers.remove(name);
                        }
                        Ok(Response::from_parts(parts, crate::body::full(Bytes::new())))
                    }
                    // The TypeScript SDK parses every 2xx GET body as SSE, whatever its
                    // label: so does the sealer (with no request to bind, any state in it
                    // is refused).
                    (Some(false), Asked::Stream) if success => {
                        Ok(self.rewrite_events(parts, peeked.body, sealer))
                    }
                    // An error page is read the same way, for a client that reads events
                    // whatever the status: lines that are not `data:` (no client parses
                    // them as a message) pass byte for byte, but `data: {..."requestState"
                    // :...}` in a 500 is sealed or refused (found by the `proxy` fuzz
                    // target). It is no stream: not counted as one.
                    (Some(false), _) => Ok(rewrite(
                        parts,
                        peeked.body,
                        sealer,
                        &self.limits,
                        self.budget.reservation(),
                    )),
                }
            }
        }
    }

    /// An event stream, sealed event by event as it flows.
    fn rewrite_events<B>(
        &self,
        parts: http::response::Parts,
        body: B,
        sealer: ResponseSealer,
    ) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: std::fmt::Display,
    {
        let sealer = Counted::new(sealer, &self.metrics.path);
        rewrite(parts, body, sealer, &self.limits, self.budget.reservation())
    }

    /// Read a whole JSON body (bounded in size, time and memory) and seal it. Its answer
    /// is recorded (an idempotent call's) before the client has it, so a repeat sent right
    /// after is replayed.
    async fn seal_whole<B>(
        &self,
        parts: http::response::Parts,
        body: B,
        mut sealer: ResponseSealer,
    ) -> Result<Response<ProxyBody>, Failure>
    where
        B: Body<Data = Bytes> + Unpin,
    {
        let sealed = self.read_and_seal(parts, body, &sealer).await;
        sealer.finish().await;
        sealed
    }

    /// [`Outbound::seal_whole`]'s reading and sealing.
    async fn read_and_seal<B>(
        &self,
        parts: http::response::Parts,
        body: B,
        sealer: &ResponseSealer,
    ) -> Result<Response<ProxyBody>, Failure>
    where
        B: Body<Data = Bytes> + Unpin,
    {
        let failed = |parts, error| Failure {
            error,
            upstream_head: Some(parts),
        };
        let mut reservation = self.budget.reservation();
        let read = budget::collect(body, self.limits.max_body_bytes, &mut reservation);
        // An upstream that stalls after the head must not hold the client forever.
        let Ok(read) = tokio::time::timeout(self.read_timeout, read).await else {
            let timeout = ProxyError::UpstreamTimeout(self.read_timeout.as_millis() as u64);
            return Err(failed(parts, timeout));
        };
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(e) => {
                let failure = match e {
                    CollectError::TooLarge => SealFailure::ResponseTooLarge,
                    CollectError::OverBudget => SealFailure::OverBudget,
                    CollectError::Body => SealFailure::UpstreamBodyError,
                };
                return Err(failed(parts, sealer.failure(failure)));
            }
        };
        if bytes.iter().all(|b| is_json_whitespace(*b)) {
            // A chunked body that turned out empty: nothing to seal.
            return Ok(with_body(parts, bytes, None));
        }
        let sealed = match sealer.seal_json(&bytes) {
            Ok(Some(sealed)) => sealed,
            Ok(None) => return Ok(with_body(parts, bytes, Some(reservation))),
            Err(withheld) => return Err(failed(parts, sealer.withhold(withheld))),
        };
        drop(bytes);
        if reservation.grow_to(sealed.len()).is_err() {
            return Err(failed(parts, sealer.failure(SealFailure::OverBudget)));
        }
        Ok(with_body(parts, sealed, Some(reservation)))
    }

    /// Read until the first significant byte tells whether the body could be JSON. The
    /// bytes read are held against the budget, and the whole peek gets one deadline (an
    /// upstream trickling whitespace cannot stretch it frame by frame).
    async fn peek(&self, mut body: Incoming) -> Result<Peeked, SealFailure> {
        let mut prefix = BytesMut::new();
        let mut reservation = self.budget.reservation();
        let deadline = tokio::time::Instant::now() + self.read_timeout;
        let mut ended = false;
        let json_like = loop {
            if let Some(verdict) = crate::mcp::json_like(&prefix) {
                break Some(verdict);
            }
            if prefix.len() > self.limits.max_body_bytes {
                // Megabytes of whitespace: nobody's JSON.
                return Err(SealFailure::ResponseTooLarge);
            }
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .map_err(|_| SealFailure::UpstreamBodyError)?;
            match frame {
                None => {
                    ended = true;
                    // A partial byte order mark at the very end is no JSON either.
                    break (!prefix.iter().all(|b| is_json_whitespace(*b))).then_some(false);
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        reservation
                            .grow(data.len())
                            .map_err(|_| SealFailure::OverBudget)?;
                        prefix.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) => return Err(SealFailure::UpstreamBodyError),
            }
        };
        Ok(Peeked {
            json_like,
            body: Prefixed {
                prefix: (!prefix.is_empty()).then(|| prefix.freeze()),
                inner: (!ended).then_some(body),
                _held: reservation,
            },
        })
    }
}

/// What kind of request a response answers, which decides what a 2xx body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A POSTed request with an id: the answer is its JSON-RPC response.
    Call,
    /// A POSTed notification or client response: nothing is read from the answer.
    Notification,
    /// A GET: an event stream (clients parse it as one whatever its label).
    Stream,
    /// Anything else inspected (DELETE).
    Other,
}

/// Headers that describe a body the sidecar replaced.
const BODY_HEADERS: [header::HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::TRANSFER_ENCODING,
];

/// A body whose first bytes were read to classify it.
struct Peeked {
    /// Some(true): it opens like JSON; Some(false): it does not; None: only whitespace.
    json_like: Option<bool>,
    body: Prefixed,
}

/// The bytes read while peeking, then the rest of the upstream body, streaming.
struct Prefixed {
    prefix: Option<Bytes>,
    inner: Option<Incoming>,
    /// The peeked bytes, held against the budget until this body is gone.
    _held: Reservation,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(None) => {
                self.inner = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(BoxError::from))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let inner = self
            .inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        // Upper first: `set_lower` refuses a lower bound above the upper one.
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + prefix);
        }
        hint.set_lower(inner.lower() + prefix);
        hint
    }
}

fn is_json_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Upstream headers that survive around the internal error replacing a refused error
/// body: what a client needs to act on the status. Everything else described the body
/// that is gone (`ETag`, `Content-Range`, caching).
const KEPT_ON_REFUSAL: [&str; 6] = [
    "www-authenticate",
    "mcp-session-id",
    "retry-after",
    "set-cookie",
    "location",
    "allow",
];

/// What the client gets when a response was refused: for an upstream error status, that
/// status and the headers it needs (a `WWW-Authenticate` must survive), never cached.
pub(super) fn keep_upstream_head(
    response: &mut Response<ProxyBody>,
    upstream: http::response::Parts,
) {
    if !(upstream.status.is_client_error() || upstream.status.is_server_error()) {
        return;
    }
    for name in KEPT_ON_REFUSAL {
        for value in upstream.headers.get_all(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    *response.status_mut() = upstream.status;
}

#[cfg(test)]
mod tests;
