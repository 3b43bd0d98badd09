//! The response phase: decide how an upstream answer must be read before the client may
//! have it, then hand it to the [`Sealer`] (whole JSON bodies, or SSE event by event).
//!
//! Invariant: on an inspected route, no upstream body that a client could read as JSON
//! reaches it unexamined, whatever it is labelled. A body is JSON when its label says so
//! *or* when its first significant byte is `{`, `[` or a byte order mark; SSE bodies are
//! rewritten event by event; a 2xx answer to a gated POST that is neither JSON, SSE nor
//! empty is refused; everything else (a plain-text 403, a 2025 GET stream's HTML error
//! page) passes with its status and headers. Bodies the sealer cannot read (compressed,
//! a transfer coding other than `chunked`, a non-UTF-8 charset) are refused.

use super::budget::{self, CollectError, MemoryBudget};
use super::response::{SealContext, Sealer, with_body};
use super::upstream::{self, BoxError, ProxyBody};
use super::{Failure, identity_encoding};
use crate::config::LimitsConfig;
use crate::metrics::{Metrics, SealFailure};
use crate::policy::single_use::SingleUse;
use crate::sse::SseRewriteBody;
use crate::token::StateSealer;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The response phase's settings.
pub struct Outbound {
    sealer: Arc<StateSealer>,
    /// Asked, when a state is sealed, whether its target is single-use now.
    single_use: Arc<SingleUse>,
    metrics: Arc<Metrics>,
    limits: LimitsConfig,
    budget: Arc<MemoryBudget>,
    /// How long a whole JSON body (or the first byte of an unlabelled one) may take.
    read_timeout: Duration,
}

/// How the upstream labelled its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Json,
    EventStream,
    /// JSON or SSE in a charset the sealer does not read, or a label that mentions them
    /// in a way clients disagree on: cannot be inspected.
    Unreadable,
    /// Anything else, or no label: sniffed.
    Other,
}

impl Outbound {
    pub fn new(
        sealer: Arc<StateSealer>,
        single_use: Arc<SingleUse>,
        metrics: Arc<Metrics>,
        limits: LimitsConfig,
        budget: Arc<MemoryBudget>,
        read_timeout: Duration,
    ) -> Self {
        Self {
            sealer,
            single_use,
            metrics,
            limits,
            budget,
            read_timeout,
        }
    }

    /// Make `response` safe for the client. `gated`: it answers a POSTed MCP message.
    pub async fn respond(
        &self,
        response: Response<Incoming>,
        context: SealContext,
        gated: bool,
    ) -> Result<Response<ProxyBody>, Failure> {
        let (mut parts, body) = response.into_parts();
        let chunked_only = chunked_only(&parts.headers);
        upstream::strip_hop_by_hop(&mut parts.headers);
        // The client's connection has its own version; an HTTP/1.0 upstream's must not leak.
        parts.version = http::Version::default();
        let sealer = Sealer::new(
            self.sealer.clone(),
            self.single_use.policy(),
            self.metrics.clone(),
            self.limits.max_state_bytes,
            self.limits.max_json_values,
            context,
        );
        let refuse = |sealer: &Sealer, parts: http::response::Parts, failure| Failure {
            id: sealer.request_id().cloned(),
            error: sealer.failure(failure),
            upstream_head: Some(parts),
        };
        // Checked first: an empty body carries no state whatever it is labelled (the
        // Python SDK answers 2025 notifications with `202`, `application/json`, no body).
        if body.is_end_stream() {
            return Ok(Response::from_parts(
                parts,
                body.map_err(BoxError::from).boxed(),
            ));
        }
        if !chunked_only {
            // hyper removes only the `chunked` layer of `gzip, chunked`: the sealer would
            // see compressed bytes the client then decodes.
            return Err(refuse(&sealer, parts, SealFailure::TransferCoding));
        }
        if !identity_encoding(&parts.headers) {
            // We asked for identity; a compressed body cannot be inspected.
            return Err(refuse(&sealer, parts, SealFailure::UnsupportedEncoding));
        }
        match label(&parts.headers) {
            Label::Unreadable => Err(refuse(&sealer, parts, SealFailure::UnknownContentType)),
            Label::Json => self.seal_whole(parts, body, sealer).await,
            Label::EventStream => {
                // Not sniffed: a GET stream may stay silent for minutes, and its head must
                // not wait for a first byte. The sealer refuses a stream that opens like
                // JSON instead.
                parts.headers.remove(header::CONTENT_LENGTH);
                let body = SseRewriteBody::new(body, sealer, self.limits.max_event_bytes)
                    .map_err(|never| match never {});
                Ok(Response::from_parts(parts, body.boxed()))
            }
            Label::Other => {
                let peeked = match self.peek(body).await {
                    Ok(peeked) => peeked,
                    Err(failure) => return Err(refuse(&sealer, parts, failure)),
                };
                match peeked.json_like {
                    Some(true) => self.seal_whole(parts, peeked.body, sealer).await,
                    // Whitespace only: no message, no state.
                    None => Ok(Response::from_parts(parts, peeked.body.boxed())),
                    Some(false) if gated && parts.status.is_success() => {
                        Err(refuse(&sealer, parts, SealFailure::UnexpectedContentType))
                    }
                    Some(false) => Ok(Response::from_parts(parts, peeked.body.boxed())),
                }
            }
        }
    }

    /// Read a whole JSON body (bounded in size, time and memory) and seal it.
    async fn seal_whole<B>(
        &self,
        parts: http::response::Parts,
        body: B,
        sealer: Sealer,
    ) -> Result<Response<ProxyBody>, Failure>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let mut reservation = self.budget.reservation();
        let read = budget::collect(body, self.limits.max_body_bytes, &mut reservation);
        let read = match tokio::time::timeout(self.read_timeout, read).await {
            Ok(read) => read,
            // An upstream that stalls after the head must not hold the client forever.
            Err(_) => {
                return Err(Failure {
                    id: sealer.request_id().cloned(),
                    error: crate::error::ProxyError::UpstreamTimeout(
                        self.read_timeout.as_millis() as u64
                    ),
                    upstream_head: Some(parts),
                });
            }
        };
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(e) => {
                let failure = match e {
                    CollectError::TooLarge => SealFailure::ResponseTooLarge,
                    CollectError::OverBudget => SealFailure::OverBudget,
                    CollectError::Body => SealFailure::UpstreamBodyError,
                };
                return Err(Failure {
                    id: sealer.request_id().cloned(),
                    error: sealer.failure(failure),
                    upstream_head: Some(parts),
                });
            }
        };
        if bytes.iter().all(|b| is_json_whitespace(*b)) {
            // A chunked body that turned out empty: nothing to seal.
            return Ok(with_body(parts, bytes, None));
        }
        match sealer.seal_json(&bytes) {
            Ok(Some(sealed)) => {
                drop(bytes);
                reservation.grow_to(sealed.len()).map_err(|_| Failure {
                    id: sealer.request_id().cloned(),
                    error: sealer.failure(SealFailure::OverBudget),
                    upstream_head: None,
                })?;
                Ok(with_body(parts, sealed, Some(reservation)))
            }
            Ok(None) => Ok(with_body(parts, bytes, Some(reservation))),
            Err(failure) => Err(Failure {
                id: sealer.request_id().cloned(),
                error: sealer.failure(failure),
                upstream_head: Some(parts),
            }),
        }
    }

    /// Read until the first significant byte tells whether the body could be JSON.
    async fn peek(&self, mut body: Incoming) -> Result<Peeked, SealFailure> {
        let mut prefix = BytesMut::new();
        let mut ended = false;
        let json_like = loop {
            if let Some(verdict) = json_like(&prefix) {
                break Some(verdict);
            }
            if prefix.len() > self.limits.max_body_bytes {
                // Megabytes of whitespace: nobody's JSON.
                return Err(SealFailure::ResponseTooLarge);
            }
            let frame = tokio::time::timeout(self.read_timeout, body.frame())
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
            },
        })
    }
}

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

/// Whether bytes open like JSON to some client: `{` or `[` after JSON whitespace, or a
/// byte order mark (UTF-8, UTF-16, UTF-32: lenient clients detect the encoding from it
/// and decode JSON behind it). `None` until a significant byte has arrived.
pub(super) fn json_like(bytes: &[u8]) -> Option<bool> {
    const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";
    let start = bytes.iter().position(|b| !is_json_whitespace(*b))?;
    let rest = &bytes[start..];
    match rest[0] {
        b'{' | b'[' => Some(true),
        // UTF-16/32 BOMs and the NUL that opens UTF-16BE / UTF-32BE JSON without one.
        0xfe | 0xff | 0x00 => Some(true),
        // A partial mark decides nothing yet.
        0xef if rest.len() < UTF8_BOM.len() && UTF8_BOM.starts_with(rest) => None,
        0xef => Some(rest.starts_with(UTF8_BOM)),
        _ => Some(false),
    }
}

/// Every transfer coding listed is `chunked` (or none is listed).
fn chunked_only(headers: &HeaderMap) -> bool {
    headers.get_all(header::TRANSFER_ENCODING).iter().all(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .all(|coding| coding.trim().eq_ignore_ascii_case("chunked"))
        })
    })
}

fn label(headers: &HeaderMap) -> Label {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let (first, second) = (values.next(), values.next());
    let Some(first) = first else {
        return Label::Other;
    };
    if second.is_some() {
        // Clients merge repeated types in different ways: if any of them could be read as
        // JSON or SSE, nobody can say which; otherwise sniff as for any other label.
        let mentions = headers.get_all(header::CONTENT_TYPE).iter().any(|v| {
            let v = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
            v.contains("json") || v.contains("event-stream")
        });
        return if mentions {
            Label::Unreadable
        } else {
            Label::Other
        };
    }
    let Ok(value) = first.to_str() else {
        // Clients decode such bytes as Latin-1 and may still see `application/json`.
        return Label::Unreadable;
    };
    // Clients pick their parser by prefix (the reference SDK client uses
    // `startswith("application/json")`), so classify the way they read it; a type
    // that mentions JSON or event streams in any other way is refused, not waved on.
    let value = value.trim().to_ascii_lowercase();
    let essence = value.split([';', ',']).next().unwrap_or_default().trim();
    let label = if value.starts_with("text/event-stream") {
        Label::EventStream
    } else if value.starts_with("application/json")
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        Label::Json
    } else if value.contains("json") || value.contains("event-stream") {
        Label::Unreadable
    } else {
        Label::Other
    };
    // The sealer reads UTF-8; a client told `charset=utf-16` decodes other text.
    if matches!(label, Label::Json | Label::EventStream) && !utf8_charset(&value) {
        return Label::Unreadable;
    }
    label
}

/// No `charset` parameter, or only UTF-8 ones.
fn utf8_charset(content_type: &str) -> bool {
    content_type
        .split([';', ','])
        .skip(1)
        .all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim() == "charset" => {
                matches!(value.trim().trim_matches('"'), "utf-8" | "utf8")
            }
            _ => true,
        })
}

/// What the client gets when a response was refused: for an upstream error status, that
/// status and its headers (a `WWW-Authenticate` must survive), minus those describing
/// the body that was replaced.
pub(super) fn keep_upstream_head(
    response: &mut Response<ProxyBody>,
    upstream: http::response::Parts,
) {
    if upstream.status.is_success() || upstream.status.is_informational() {
        return;
    }
    let mut headers = upstream.headers;
    for name in [
        header::CONTENT_TYPE,
        header::CONTENT_LENGTH,
        header::CONTENT_ENCODING,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(name);
    }
    for (name, value) in headers.iter() {
        if !response.headers().contains_key(name) {
            response.headers_mut().append(name.clone(), value.clone());
        }
    }
    *response.status_mut() = if upstream.status == StatusCode::SWITCHING_PROTOCOLS {
        StatusCode::BAD_GATEWAY
    } else {
        upstream.status
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn what_opens_like_json() {
        for yes in [
            &b"{"[..],
            b"  \r\n[1]",
            b"\xef\xbb\xbf{}",
            b"\xff\xfe{\x00",
            b"\x00{",
        ] {
            assert_eq!(json_like(yes), Some(true), "{yes:?}");
        }
        for no in [
            &b"<html>"[..],
            b"Invalid Origin header",
            b" x",
            b"\xef\xbd\x88",
        ] {
            assert_eq!(json_like(no), Some(false), "{no:?}");
        }
        for undecided in [&b""[..], b"  \n", b"\xef", b"\xef\xbb"] {
            assert_eq!(json_like(undecided), None, "{undecided:?}");
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn labels() {
        let of = |pairs: &[(&str, &str)]| label(&headers(pairs));
        assert_eq!(of(&[("content-type", "application/json")]), Label::Json);
        assert_eq!(
            of(&[("content-type", "application/problem+json")]),
            Label::Json
        );
        assert_eq!(
            of(&[("content-type", "text/event-stream")]),
            Label::EventStream
        );
        assert_eq!(of(&[("content-type", "text/html")]), Label::Other);
        assert_eq!(of(&[]), Label::Other);
        assert_eq!(
            of(&[("content-type", "application/json; charset=utf-16")]),
            Label::Unreadable
        );
        assert_eq!(of(&[("content-type", "text/x-json")]), Label::Unreadable);
        assert_eq!(
            of(&[
                ("content-type", "text/plain"),
                ("content-type", "application/json")
            ]),
            Label::Unreadable
        );
        assert_eq!(
            of(&[
                ("content-type", "text/plain"),
                ("content-type", "text/html")
            ]),
            Label::Other
        );
    }

    #[test]
    fn transfer_codings() {
        assert!(chunked_only(&headers(&[])));
        assert!(chunked_only(&headers(&[("transfer-encoding", "Chunked")])));
        assert!(!chunked_only(&headers(&[(
            "transfer-encoding",
            "gzip, chunked"
        )])));
        assert!(!chunked_only(&headers(&[
            ("transfer-encoding", "chunked"),
            ("transfer-encoding", "br")
        ])));
    }
}
