//! The data path, phase by phase: [`request`] (the gate and the inbound state check),
//! [`upstream`] (the forwarded request and its timeouts), [`response`] (sealing what
//! comes back, JSON or SSE).
//!
//! Invariant: [`Proxy::handle`] cannot fail; [`Proxy::forward`] can, and its error is
//! turned into a response in exactly one place, with the request id when it is known.

pub mod request;
pub mod response;
pub mod upstream;

use crate::config::LimitsConfig;
use crate::error::ProxyError;
use crate::jsonrpc::Id;
use crate::metrics::{Metrics, Route, SealFailure};
use crate::principal::PrincipalSource;
use crate::sse::SseRewriteBody;
use crate::token::StateSealer;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body as _, Incoming};
use response::{SealContext, Sealer};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use upstream::{BoxError, ProxyBody, Upstream};

/// The largest token worth opening: no token this sidecar mints for a state of
/// `max_state_bytes` is longer (claims overhead, JSON escaping of every byte at worst 6×,
/// base64 4/3).
pub fn max_token_bytes(limits: &LimitsConfig) -> usize {
    (limits.max_state_bytes * 6 + 4096) * 4 / 3
}

/// A failure with the id of the request it answers, when known.
pub struct Failure {
    pub id: Option<Id>,
    pub error: ProxyError,
}

impl Failure {
    fn anonymous(error: ProxyError) -> Self {
        Self { id: None, error }
    }
}

impl From<ProxyError> for Failure {
    fn from(error: ProxyError) -> Self {
        Self::anonymous(error)
    }
}

/// Everything a request needs, shared by all connections.
pub struct Proxy {
    pub(crate) sealer: Arc<StateSealer>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) principal: PrincipalSource,
    pub(crate) upstream: Upstream,
    pub(crate) limits: LimitsConfig,
    pub(crate) passthrough_paths: HashSet<String>,
}

impl Proxy {
    /// Serve one request. Never fails: errors become JSON-RPC error responses here.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        self.metrics.in_flight().inc();
        let response = match self.forward(request).await {
            Ok(response) => response,
            Err(Failure { id, error }) => {
                let kind = error.kind();
                self.metrics.refused(kind);
                if kind.is_upstream() {
                    tracing::warn!(kind = kind.as_str(), error = %error, cause = ?std::error::Error::source(&error), "upstream failure");
                } else if kind != crate::error::ErrorKind::InvalidState {
                    // Refused states were logged with their reason where they were opened.
                    tracing::info!(kind = kind.as_str(), error = %error, "request refused");
                }
                error.into_response(id.as_ref()).map(upstream::full)
            }
        };
        self.metrics
            .observe_duration(started.elapsed().as_secs_f64());
        self.metrics.in_flight().dec();
        response
    }

    async fn forward(&self, request: Request<Incoming>) -> Result<Response<ProxyBody>, Failure> {
        let (mut parts, body) = request.into_parts();
        let passthrough = self.passthrough_paths.contains(parts.uri.path());
        let gated = !passthrough && parts.method == Method::POST;
        self.metrics.request(if gated {
            Route::Mcp
        } else {
            Route::Passthrough
        });
        // Identity headers get the same treatment on every route: an ambiguous one is
        // refused, and none reaches the upstream unless configured (the gate does not
        // read it, so it goes before anything else).
        let principal = self.principal.identify(&parts.headers)?;
        self.principal.strip(&mut parts.headers);
        if passthrough {
            return self
                .send_untouched(parts, body.map_err(BoxError::from).boxed())
                .await;
        }
        if !gated {
            // 2025-era GET streams and DELETEs pass through, streaming; a body on them
            // would be forwarded unexamined, so there must be none.
            if !body.is_end_stream() {
                return Err(ProxyError::BodyNotAllowed(parts.method).into());
            }
            let context = SealContext::new(None, None, None, principal);
            return self
                .exchange(parts, upstream::full(Bytes::new()), context)
                .await;
        }
        let admitted = self.admit(&parts.headers, body, principal).await?;
        parts.headers.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from(admitted.body.len()),
        );
        self.exchange(parts, upstream::full(admitted.body), admitted.context)
            .await
    }

    /// Forward a configured passthrough request and its response without inspection.
    async fn send_untouched(
        &self,
        mut parts: http::request::Parts,
        body: ProxyBody,
    ) -> Result<Response<ProxyBody>, Failure> {
        self.upstream.prepare(&mut parts);
        let response = self.upstream.send(Request::from_parts(parts, body)).await?;
        let (mut parts, body) = response.into_parts();
        upstream::strip_hop_by_hop(&mut parts.headers);
        parts.version = http::Version::default();
        Ok(Response::from_parts(
            parts,
            body.map_err(BoxError::from).boxed(),
        ))
    }

    /// Send to the upstream and make its response safe for the client.
    async fn exchange(
        &self,
        mut parts: http::request::Parts,
        body: ProxyBody,
        context: SealContext,
    ) -> Result<Response<ProxyBody>, Failure> {
        let id = context.id.clone();
        self.upstream.prepare(&mut parts);
        let response = self
            .upstream
            .send(Request::from_parts(parts, body))
            .await
            .map_err(|error| Failure {
                id: id.clone(),
                error,
            })?;
        let sealer = Sealer {
            sealer: self.sealer.clone(),
            metrics: self.metrics.clone(),
            max_state_bytes: self.limits.max_state_bytes,
            context,
        };
        self.seal_response(response, sealer)
            .await
            .map_err(|error| Failure { id, error })
    }

    async fn seal_response(
        &self,
        response: Response<Incoming>,
        sealer: Sealer,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let (mut parts, body) = response.into_parts();
        upstream::strip_hop_by_hop(&mut parts.headers);
        // The client's connection has its own version; an HTTP/1.0 upstream's must not leak.
        parts.version = http::Version::default();
        let kind = BodyKind::of(&parts.headers, &body);
        if !identity_encoding(&parts.headers) && kind != BodyKind::Opaque {
            // We asked for identity; a compressed MCP body cannot be inspected.
            return Err(sealer.failure(SealFailure::UnsupportedEncoding));
        }
        match kind {
            BodyKind::Empty | BodyKind::Opaque => Ok(Response::from_parts(
                parts,
                body.map_err(BoxError::from).boxed(),
            )),
            BodyKind::Unknown => Err(sealer.failure(SealFailure::UnknownContentType)),
            BodyKind::Json => {
                // A JSON body is read whole before anything is sent, so an upstream that
                // stalls after the head must not hold the client forever.
                let read = Limited::new(body, self.limits.max_body_bytes).collect();
                let timeout = self.upstream.timeout();
                let Ok(read) = tokio::time::timeout(timeout, read).await else {
                    return Err(ProxyError::UpstreamTimeout(timeout.as_millis() as u64));
                };
                let bytes = match read {
                    Ok(collected) => collected.to_bytes(),
                    Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                        return Err(sealer.failure(SealFailure::ResponseTooLarge));
                    }
                    Err(_) => return Err(sealer.failure(SealFailure::UpstreamBodyError)),
                };
                if bytes.is_empty() {
                    // A chunked body that turned out empty: nothing to seal.
                    return Ok(response::with_body(parts, bytes));
                }
                match sealer.seal_json(&bytes) {
                    Ok(Some(sealed)) => Ok(response::with_body(parts, sealed)),
                    Ok(None) => Ok(response::with_body(parts, bytes)),
                    Err(failure) => Err(sealer.failure(failure)),
                }
            }
            BodyKind::EventStream => {
                parts.headers.remove(header::CONTENT_LENGTH);
                let body = SseRewriteBody::new(body, sealer, self.limits.max_event_bytes)
                    .map_err(|never| match never {});
                Ok(Response::from_parts(parts, body.boxed()))
            }
        }
    }
}

/// How a response body must be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// No body at all (202, 204, a 405 with nothing in it).
    Empty,
    /// JSON: parsed whole and sealed.
    Json,
    /// Server-sent events: framed and sealed event by event, streaming.
    EventStream,
    /// A declared non-JSON type (text/plain error pages): no client reads JSON-RPC from it.
    Opaque,
    /// A body with no content type: it could be JSON to a sniffing client.
    Unknown,
}

impl BodyKind {
    fn of(headers: &http::HeaderMap, body: &Incoming) -> Self {
        // Checked first: an empty body carries no state whatever it is labelled (the
        // Python SDK answers 2025 notifications with `202`, `application/json`, no body).
        if body.is_end_stream() {
            return BodyKind::Empty;
        }
        let mut types = headers.get_all(header::CONTENT_TYPE).iter();
        let (Some(content_type), None) = (types.next(), types.next()) else {
            // None, or several that clients merge in different ways.
            return BodyKind::Unknown;
        };
        let Ok(value) = content_type.to_str() else {
            // Clients decode such bytes as Latin-1 and may still see `application/json`.
            return BodyKind::Unknown;
        };
        // Clients pick their parser by prefix (the reference SDK client uses
        // `startswith("application/json")`), so classify the way they read it; a type
        // that mentions JSON or event streams in any other way is refused, not waved on.
        let value = value.trim().to_ascii_lowercase();
        let essence = value.split([';', ',']).next().unwrap_or_default().trim();
        let kind = if value.starts_with("text/event-stream") {
            BodyKind::EventStream
        } else if value.starts_with("application/json")
            || (essence.starts_with("application/") && essence.ends_with("+json"))
        {
            BodyKind::Json
        } else if value.contains("json") || value.contains("event-stream") {
            BodyKind::Unknown
        } else {
            BodyKind::Opaque
        };
        // The sealer reads UTF-8; a client told `charset=utf-16` decodes other text.
        if matches!(kind, BodyKind::Json | BodyKind::EventStream) && !utf8_charset(&value) {
            return BodyKind::Unknown;
        }
        kind
    }
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

/// Whether a message's `Content-Encoding` is absent or identity in every value and token
/// (clients merge repeated headers and decode every coding they list).
pub(crate) fn identity_encoding(headers: &http::HeaderMap) -> bool {
    headers.get_all(header::CONTENT_ENCODING).iter().all(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .all(|e| e.trim().eq_ignore_ascii_case("identity"))
        })
    })
}
