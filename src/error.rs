//! The one mapping from internal failures to what a client sees: an HTTP status and a
//! JSON-RPC error body, read from one row per refusal reason (`error/kind.rs`: label,
//! status, code and message, `data`, `Retry-After`, audit category).
//!
//! Invariant: the wire carries a fixed message per kind (and for a refused
//! `requestState`, the frozen error of the design, identical for every reason); causes
//! go to the log and a closed metric label, never to the client. What a payload decides
//! is decided in one small function per column, only for the rows that say so.

mod auth_failure;
mod kind;
mod metrics;

pub use auth_failure::AuthFailure;
pub(crate) use kind::Category;
pub use kind::ErrorKind;
pub use metrics::RefusalMetrics;

use crate::jsonrpc::{self, Id, ParseError};
use crate::token::{HandleReject, Reject};
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use kind::Cell::{ByPayload, Is};
use kind::Data;
use serde_json::json;
use std::borrow::Cow;

/// Every way a request can fail before or after the upstream.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("request body refused: {0}")]
    Parse(#[from] ParseError),
    #[error("header `{0}` disagrees with the body or is repeated")]
    HeaderMismatch(&'static str),
    #[error("content type is not application/json")]
    ContentType,
    #[error("content encoding other than identity")]
    ContentEncoding,
    #[error("body exceeds {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("{} requests may not carry a body", crate::text::Clipped(.0.as_str()))]
    BodyNotAllowed(http::Method),
    #[error("client body could not be read")]
    BodyRead,
    #[error("client body did not arrive in time")]
    BodyTimeout,
    #[error("host not in allowed_hosts")]
    MisdirectedRequest,
    #[error("request framing refused: {0}")]
    Framing(&'static str),
    #[error("buffered bodies would exceed limits.max_buffered_bytes")]
    Overloaded,
    #[error("principal header refused: {0}")]
    PrincipalHeader(&'static str),
    /// No verified caller identity (`jwt`, `mtls`): 401 with the challenge, or 503 while
    /// no verification keys could be loaded.
    #[error("caller not authenticated: {}", .reason.as_str())]
    Unauthorized {
        reason: AuthFailure,
        challenge: Option<HeaderValue>,
    },
    #[error("requestState refused: {reason} ({detail})", reason = .reason.as_str())]
    InvalidState {
        reason: Reject,
        detail: &'static str,
    },
    #[error("inputResponses must be an object")]
    InputResponses,
    #[error("inputResponses[{key:?}] {rule}")]
    InvalidAnswer { key: String, rule: String },
    #[error("the upstream asked for client capabilities the client did not declare")]
    MissingCapability { required: serde_json::Value },
    #[error("the upstream asked past mrtr.max_rounds")]
    RoundLimit,
    #[error("handle refused: {}", .0.as_str())]
    InvalidHandle(HandleReject),
    #[error("idempotency key refused: {0}")]
    IdempotencyKey(&'static str),
    #[error("idempotency key in use by a call still in flight")]
    IdempotencyInProgress,
    #[error("idempotency key reused with other arguments")]
    IdempotencyConflict,
    #[error("idempotency store unavailable")]
    IdempotencyUnavailable,
    /// One caller's share of a bounded shared resource is used up: 429, nothing
    /// forwarded, nothing of the request spent (a single-use state stays unconsumed).
    #[error("caller's share of {} used up", .0.as_str())]
    Quota(Share),
    /// A shared store is at its bound (not unreachable: no failure policy lets a request
    /// through because a store is full): 503, nothing forwarded.
    #[error("{} store full", .0.as_str())]
    StoreFull(Resource),
    /// A store write no replica confirmed in time (Redis `WAIT`): given back, 503,
    /// nothing forwarded.
    #[error("{} store write not confirmed by a replica", .0.as_str())]
    StoreUnconfirmed(Resource),
    #[error("upstream unavailable")]
    UpstreamUnavailable(#[source] UpstreamError),
    #[error("upstream did not answer within {0} ms")]
    UpstreamTimeout(u64),
    #[error("upstream response cannot be made safe: {0}")]
    UpstreamResponse(&'static str),
}

/// Why the upstream gave no answer (the cause of [`ProxyError::UpstreamUnavailable`]).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection: dialling, TLS or the connection's setup failed.
    #[error("connecting to the upstream failed")]
    Connect(#[source] crate::body::BoxError),
    /// A new connection handed the request back before writing any of it.
    #[error("the upstream connection closed before the request was sent")]
    Unsent(#[source] hyper::Error),
    /// The exchange failed once the request was (perhaps partly) sent.
    #[error("the exchange with the upstream failed")]
    Exchange(#[source] hyper::Error),
}

/// A bounded shared resource of which each caller gets a share (the `share` label of
/// `mcp_state_guard_quota_refusals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Share {
    /// Consumed single-use ids (`single_use.max_entries_per_principal`).
    SingleUseEntries,
    /// Idempotency records (`idempotency.max_records_per_principal`).
    IdempotencyRecords,
    /// Idempotency record bytes (`idempotency.max_bytes_per_principal`).
    IdempotencyBytes,
    /// Idempotent calls in flight (`idempotency.max_in_flight_per_principal`).
    IdempotencyInFlight,
    /// Client connections of one address (`limits.max_connections_per_peer`).
    Connections,
}

impl Share {
    /// The configuration key that sets it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Share::SingleUseEntries => "single_use.max_entries_per_principal",
            Share::IdempotencyRecords => "idempotency.max_records_per_principal",
            Share::IdempotencyBytes => "idempotency.max_bytes_per_principal",
            Share::IdempotencyInFlight => "idempotency.max_in_flight_per_principal",
            Share::Connections => "limits.max_connections_per_peer",
        }
    }

    /// What the client is told, the `data.type` of the error, and when to come back:
    /// stored entries leave only as they expire; a call in flight or a connection ends
    /// soon.
    fn wire(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Share::SingleUseEntries => (
                "Too many single-use states held for this caller",
                "single_use_quota_exceeded",
                "60",
            ),
            Share::IdempotencyRecords => (
                "Too many idempotency records held for this caller",
                "idempotency_quota_exceeded",
                "60",
            ),
            Share::IdempotencyBytes => (
                "Too many idempotency record bytes held for this caller",
                "idempotency_quota_exceeded",
                "60",
            ),
            Share::IdempotencyInFlight => (
                "Too many idempotent calls in flight for this caller",
                "idempotency_quota_exceeded",
                "1",
            ),
            Share::Connections => (
                "Too many connections from this address",
                "connection_quota_exceeded",
                "1",
            ),
        }
    }
}

crate::registry::labels!(pub Share {
    SingleUseEntries => "single_use_entries",
    IdempotencyRecords => "idempotency_records",
    IdempotencyBytes => "idempotency_bytes",
    IdempotencyInFlight => "idempotency_in_flight",
    Connections => "connections",
});

/// A shared store that can be full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    SingleUse,
    Idempotency,
}

impl Resource {
    fn wire(self) -> (&'static str, &'static str) {
        match self {
            Resource::SingleUse => ("Single-use store full", "single_use_store_full"),
            Resource::Idempotency => ("Idempotency store full", "idempotency_store_full"),
        }
    }

    /// What the client is told when no replica confirmed a write.
    fn unconfirmed_wire(self) -> (&'static str, &'static str) {
        match self {
            Resource::SingleUse => (
                "Single-use store did not confirm; retry",
                "single_use_store_unconfirmed",
            ),
            Resource::Idempotency => (
                "Idempotency store did not confirm; retry",
                "idempotency_store_unconfirmed",
            ),
        }
    }
}

crate::registry::labels!(pub Resource {
    SingleUse => "single_use",
    Idempotency => "idempotency",
});

/// The frozen wire error for every refused `requestState` (design §4).
pub(crate) const INVALID_STATE_MESSAGE: &str = "Invalid or expired requestState";

/// What a client gets where a row says `ByPayload` and the payload's function has no arm:
/// never, while `the_payload_fills_exactly_the_by_payload_cells` passes; an internal
/// error rather than a guess if it ever did.
const UNFILLED_STATUS: StatusCode = StatusCode::INTERNAL_SERVER_ERROR;
const UNFILLED_MESSAGE: &str = "Internal error";

impl ProxyError {
    /// The upstream provably received nothing of the request: connecting to it failed.
    pub(crate) fn never_sent(&self) -> bool {
        matches!(
            self,
            ProxyError::UpstreamUnavailable(UpstreamError::Connect(_) | UpstreamError::Unsent(_))
        )
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            ProxyError::Parse(_) => ErrorKind::Parse,
            ProxyError::HeaderMismatch(_) => ErrorKind::HeaderMismatch,
            ProxyError::ContentType => ErrorKind::ContentType,
            ProxyError::ContentEncoding => ErrorKind::ContentEncoding,
            ProxyError::BodyTooLarge { .. } => ErrorKind::BodyTooLarge,
            ProxyError::BodyNotAllowed(_) => ErrorKind::BodyNotAllowed,
            ProxyError::BodyRead => ErrorKind::BodyRead,
            ProxyError::BodyTimeout => ErrorKind::BodyTimeout,
            ProxyError::MisdirectedRequest => ErrorKind::MisdirectedRequest,
            ProxyError::Framing(_) => ErrorKind::Framing,
            ProxyError::Overloaded => ErrorKind::Overloaded,
            ProxyError::PrincipalHeader(_) => ErrorKind::PrincipalHeader,
            ProxyError::Unauthorized { .. } => ErrorKind::Unauthorized,
            ProxyError::InvalidState { .. } => ErrorKind::InvalidState,
            ProxyError::InputResponses => ErrorKind::InputResponses,
            ProxyError::InvalidAnswer { .. } => ErrorKind::InvalidAnswer,
            ProxyError::MissingCapability { .. } => ErrorKind::MissingCapability,
            ProxyError::RoundLimit => ErrorKind::RoundLimit,
            ProxyError::InvalidHandle(_) => ErrorKind::InvalidHandle,
            ProxyError::IdempotencyKey(_) => ErrorKind::IdempotencyKey,
            ProxyError::IdempotencyInProgress => ErrorKind::IdempotencyInProgress,
            ProxyError::IdempotencyConflict => ErrorKind::IdempotencyConflict,
            ProxyError::IdempotencyUnavailable => ErrorKind::IdempotencyUnavailable,
            ProxyError::Quota(_) => ErrorKind::Quota,
            ProxyError::StoreFull(_) => ErrorKind::StoreFull,
            ProxyError::StoreUnconfirmed(_) => ErrorKind::StoreUnconfirmed,
            ProxyError::UpstreamUnavailable(_) => ErrorKind::UpstreamUnavailable,
            ProxyError::UpstreamTimeout(_) => ErrorKind::UpstreamTimeout,
            ProxyError::UpstreamResponse(_) => ErrorKind::UpstreamResponse,
        }
    }

    pub fn http_status(&self) -> StatusCode {
        match self.kind().row().status {
            Is(status) => status,
            ByPayload => self.status_by_payload().unwrap_or(UNFILLED_STATUS),
        }
    }

    /// The JSON-RPC code and fixed message the client sees.
    fn wire(&self) -> (i64, Cow<'static, str>) {
        let row = self.kind().row();
        let code = match row.code {
            Is(code) => code,
            ByPayload => self.code_by_payload().unwrap_or(jsonrpc::INTERNAL_ERROR),
        };
        let message = match row.message {
            Is(message) => Cow::Borrowed(message),
            ByPayload => self
                .message_by_payload()
                .unwrap_or(Cow::Borrowed(UNFILLED_MESSAGE)),
        };
        (code, message)
    }

    /// The JSON-RPC error body for request `id`.
    pub fn jsonrpc_body(&self, id: Option<&Id>) -> Bytes {
        let (code, message) = self.wire();
        let data = match self.kind().row().data {
            Is(data) => data.map(Data::json),
            ByPayload => self.data_by_payload(),
        };
        Bytes::from(jsonrpc::error_body(id, code, &message, data))
    }

    /// The reason a caller was not identified, for `auth_failures_total`.
    pub(crate) fn auth_failure(&self) -> Option<AuthFailure> {
        match self {
            ProxyError::Unauthorized { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    /// The `Retry-After` seconds, when the client is told to come back.
    fn retry_after(&self) -> Option<&'static str> {
        match self.kind().row().retry_after {
            Is(seconds) => seconds,
            ByPayload => self.retry_after_by_payload().flatten(),
        }
    }

    /// The whole HTTP response.
    pub(crate) fn to_response(&self, id: Option<&Id>) -> Response<Bytes> {
        if let ProxyError::Unauthorized { challenge, .. } = self {
            return self.oauth_response(challenge.as_ref());
        }
        let mut response = Response::new(self.jsonrpc_body(id));
        *response.status_mut() = self.http_status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
        }
        response
    }

    /// An unauthenticated request gets what the reference's `RequireAuthMiddleware`
    /// sends: an OAuth error body and the `WWW-Authenticate` challenge (RFC 6750 §3),
    /// the same for every reason. Without keys to verify with, 503: the token may well
    /// be valid, and a client must not throw it away.
    fn oauth_response(&self, challenge: Option<&HeaderValue>) -> Response<Bytes> {
        let status = self.http_status();
        let body = if status == StatusCode::UNAUTHORIZED {
            r#"{"error":"invalid_token","error_description":"Authentication required"}"#
        } else {
            r#"{"error":"temporarily_unavailable","error_description":"Token verification keys unavailable"}"#
        };
        let mut response = Response::new(Bytes::from_static(body.as_bytes()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(challenge) = challenge.filter(|_| status == StatusCode::UNAUTHORIZED) {
            headers.insert(header::WWW_AUTHENTICATE, challenge.clone());
        }
        if let Some(seconds) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
        }
        response
    }
}

/// The cells the table leaves to the payload (`ByPayload`), one small function per
/// column: `Some` exactly for the kinds whose row says so (a test holds them to it).
impl ProxyError {
    fn status_by_payload(&self) -> Option<StatusCode> {
        Some(match self {
            ProxyError::Parse(ParseError::TooManyValues) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Parse(_) => StatusCode::BAD_REQUEST,
            ProxyError::Unauthorized {
                reason: AuthFailure::KeysUnavailable,
                ..
            } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            _ => return None,
        })
    }

    fn code_by_payload(&self) -> Option<i64> {
        match self {
            ProxyError::Parse(e) => Some(parse_wire(e).0),
            _ => None,
        }
    }

    fn message_by_payload(&self) -> Option<Cow<'static, str>> {
        Some(match self {
            ProxyError::Parse(e) => Cow::Borrowed(parse_wire(e).1),
            // A bad answer is the client's mistake: it is told which question and which
            // rule (the key is printable-escaped; no value of the answer is repeated).
            ProxyError::InvalidAnswer { key, rule } => {
                Cow::Owned(format!("Invalid inputResponses[\"{key}\"]: {rule}"))
            }
            ProxyError::Quota(share) => Cow::Borrowed(share.wire().0),
            ProxyError::StoreFull(resource) => Cow::Borrowed(resource.wire().0),
            ProxyError::StoreUnconfirmed(resource) => Cow::Borrowed(resource.unconfirmed_wire().0),
            _ => return None,
        })
    }

    fn data_by_payload(&self) -> Option<serde_json::Value> {
        Some(match self {
            ProxyError::InvalidAnswer { key, .. } => {
                json!({"reason": "invalid_input_response", "key": key})
            }
            ProxyError::MissingCapability { required } => json!({"requiredCapabilities": required}),
            ProxyError::Quota(share) => json!({"type": share.wire().1, "share": share.as_str()}),
            ProxyError::StoreFull(resource) => json!({"type": resource.wire().1}),
            ProxyError::StoreUnconfirmed(resource) => {
                json!({"type": resource.unconfirmed_wire().1})
            }
            _ => return None,
        })
    }

    /// `Some(None)`: the payload says not to send `Retry-After`.
    fn retry_after_by_payload(&self) -> Option<Option<&'static str>> {
        Some(match self {
            ProxyError::Unauthorized {
                reason: AuthFailure::KeysUnavailable,
                ..
            } => Some("5"),
            ProxyError::Unauthorized { .. } => None,
            ProxyError::Quota(share) => Some(share.wire().2),
            _ => return None,
        })
    }
}

/// The code and message of a body that is not one acceptable JSON-RPC message.
fn parse_wire(error: &ParseError) -> (i64, &'static str) {
    match error.code() {
        jsonrpc::PARSE_ERROR => (jsonrpc::PARSE_ERROR, "Parse error"),
        jsonrpc::INVALID_PARAMS => (jsonrpc::INVALID_PARAMS, "Invalid params"),
        _ => (jsonrpc::INVALID_REQUEST, "Invalid request"),
    }
}

#[cfg(test)]
pub(crate) mod tests;
