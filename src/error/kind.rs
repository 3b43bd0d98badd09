//! The table of refusals: one row per [`ErrorKind`] holding everything about it that does
//! not depend on the error's payload: its metric label, HTTP status, JSON-RPC code and
//! message, the `data` it carries, `Retry-After`, and audit [`Category`].
//!
//! Invariant: the kinds, [`ErrorKind::ALL`] and the rows are written once, in the
//! `refusals!` table below, so a kind without a row cannot compile and no column has a
//! default. A cell that depends on the payload says [`ByPayload`] and is filled by the one
//! small function of [`ProxyError`](super::ProxyError) for that column.

use crate::jsonrpc;
use Category::{Auth, Gate, State, Store, Tool};
use Cell::{ByPayload, Is};
use Data::{Reason, Type};
use http::StatusCode;
use serde_json::json;

/// Which check refused a request: the `category` field of its audit line
/// ([`Category::of`], in [`crate::telemetry::audit`], adds the closed reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    /// The request itself: host, framing, parse, headers, limits, body.
    Gate,
    /// The caller's identity.
    Auth,
    /// The `requestState` token (or the answers riding with it).
    State,
    /// A shared store: a replay, a consumption it could not record (or no replica
    /// confirmed), a caller's share of it used up, or the store full.
    Store,
    /// A tool-level rule ([`crate::tools`]): a handle refused, an idempotency key
    /// missing, malformed, in progress, reused with other arguments, or unrecordable.
    Tool,
}

impl Category {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Category::Gate => "gate",
            Category::Auth => "auth",
            Category::State => "state",
            Category::Store => "store",
            Category::Tool => "tool",
        }
    }
}

/// One cell of a row: the same for every error of the kind, or chosen by its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cell<T> {
    Is(T),
    /// See the [`ProxyError`](super::ProxyError) function for the column.
    ByPayload,
}

/// A fixed JSON-RPC error `data` member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    /// `{"reason": ..}`
    Reason(&'static str),
    /// `{"type": ..}`
    Type(&'static str),
}

impl Data {
    pub(crate) fn json(self) -> serde_json::Value {
        match self {
            Reason(reason) => json!({"reason": reason}),
            Type(type_) => json!({"type": type_}),
        }
    }
}

/// Everything about a refusal reason that its payload does not decide.
#[derive(Debug)]
pub(crate) struct Row {
    /// `mcp_state_guard_requests_refused_total{reason}` and logs.
    pub(crate) label: &'static str,
    pub(crate) status: Cell<StatusCode>,
    pub(crate) code: Cell<i64>,
    /// The fixed message the client sees (never the error's own text).
    pub(crate) message: Cell<&'static str>,
    pub(crate) data: Cell<Option<Data>>,
    /// `Retry-After` seconds.
    pub(crate) retry_after: Cell<Option<&'static str>>,
    /// The audit category; `None` for an upstream failure, which is not the client's
    /// refusal.
    pub(crate) category: Option<Category>,
}

/// Declares [`ErrorKind`] (one variant per row, in row order), [`ErrorKind::ALL`] and the
/// rows, from one list.
macro_rules! refusals {
    ($($(#[$attr:meta])* $kind:ident { $($column:ident: $value:expr),* $(,)? })*) => {
        /// Closed labels for `mcp_state_guard_requests_refused_total{reason}` and logs.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $($(#[$attr])* $kind,)*
        }

        const COUNT: usize = [$(stringify!($kind)),*].len();

        impl ErrorKind {
            /// Every kind, in table order.
            pub const ALL: [ErrorKind; COUNT] = [$(ErrorKind::$kind),*];
        }

        /// In [`ErrorKind`] order: a kind's row is `ROWS[kind as usize]`.
        static ROWS: [Row; COUNT] = [$(Row { $($column: $value),* }),*];
    };
}

refusals! {
    /// Not one JSON-RPC message. Its parse error picks the code and message (-32700 for
    /// text that is not JSON, -32602 for bad params, else -32600) and the status (413 for
    /// too many values, else 400).
    Parse {
        label: "parse", status: ByPayload, code: ByPayload, message: ByPayload,
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    HeaderMismatch {
        label: "header_mismatch", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::HEADER_MISMATCH), message: Is("Header mismatch"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    ContentType {
        label: "content_type", status: Is(StatusCode::UNSUPPORTED_MEDIA_TYPE),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Unsupported content type"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    ContentEncoding {
        label: "content_encoding", status: Is(StatusCode::UNSUPPORTED_MEDIA_TYPE),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Unsupported content encoding"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    BodyTooLarge {
        label: "body_too_large", status: Is(StatusCode::PAYLOAD_TOO_LARGE),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Request body too large"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    BodyNotAllowed {
        label: "body_not_allowed", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Request body not allowed"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    BodyRead {
        label: "body_read", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Request body could not be read"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    BodyTimeout {
        label: "body_timeout", status: Is(StatusCode::REQUEST_TIMEOUT),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Request body timed out"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    MisdirectedRequest {
        label: "misdirected_request", status: Is(StatusCode::MISDIRECTED_REQUEST),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Misdirected request"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    Framing {
        label: "framing", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Invalid request framing"),
        data: Is(None), retry_after: Is(None), category: Some(Gate),
    }
    Overloaded {
        label: "overloaded", status: Is(StatusCode::SERVICE_UNAVAILABLE),
        code: Is(jsonrpc::INTERNAL_ERROR), message: Is("Server overloaded"),
        data: Is(None), retry_after: Is(Some("1")), category: Some(Gate),
    }
    PrincipalHeader {
        label: "principal_header", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Invalid identity"),
        data: Is(None), retry_after: Is(None), category: Some(Auth),
    }
    /// Answered with the OAuth error of the reference, not this code and message: 401
    /// with the challenge, or 503 with `Retry-After: 5` while no verification keys could
    /// be loaded (the token may well be valid).
    Unauthorized {
        label: "unauthorized", status: ByPayload,
        code: Is(jsonrpc::INVALID_REQUEST), message: Is("Unauthorized"),
        data: Is(None), retry_after: ByPayload, category: Some(Auth),
    }
    /// The frozen error of the design (§4), identical for every reason.
    InvalidState {
        label: "invalid_state", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_PARAMS), message: Is(super::INVALID_STATE_MESSAGE),
        data: Is(Some(Reason("invalid_request_state"))), retry_after: Is(None),
        category: Some(State),
    }
    InputResponses {
        label: "input_responses", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_PARAMS), message: Is("Invalid params"),
        data: Is(None), retry_after: Is(None), category: Some(State),
    }
    /// The client is told which question and which rule (never a value of the answer).
    InvalidAnswer {
        label: "invalid_answer", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_PARAMS), message: ByPayload,
        data: ByPayload, retry_after: Is(None), category: Some(State),
    }
    /// `data` names the capabilities the upstream asked for.
    MissingCapability {
        label: "missing_capability", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::MISSING_CAPABILITY), message: Is("Missing required client capability"),
        data: ByPayload, retry_after: Is(None), category: Some(State),
    }
    /// As `UpstreamResponse`: -32603 under HTTP 200.
    RoundLimit {
        label: "round_limit", status: Is(StatusCode::OK),
        code: Is(jsonrpc::INTERNAL_ERROR), message: Is("Internal error"),
        data: Is(Some(Reason("round_limit"))), retry_after: Is(None), category: Some(State),
    }
    /// One answer for every cause: the cause is in the log and a metric label.
    InvalidHandle {
        label: "invalid_handle", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_PARAMS), message: Is("Invalid or expired handle"),
        data: Is(Some(Reason("invalid_handle"))), retry_after: Is(None), category: Some(Tool),
    }
    IdempotencyKey {
        label: "idempotency_key", status: Is(StatusCode::BAD_REQUEST),
        code: Is(jsonrpc::INVALID_PARAMS), message: Is("Invalid idempotency key"),
        data: Is(Some(Reason("invalid_idempotency_key"))), retry_after: Is(None),
        category: Some(Tool),
    }
    IdempotencyInProgress {
        label: "idempotency_in_progress", status: Is(StatusCode::CONFLICT),
        code: Is(jsonrpc::INVALID_REQUEST),
        message: Is("A request with this idempotency key is in progress"),
        data: Is(Some(Type("idempotency_key_in_progress"))), retry_after: Is(Some("1")),
        category: Some(Tool),
    }
    IdempotencyConflict {
        label: "idempotency_conflict", status: Is(StatusCode::UNPROCESSABLE_ENTITY),
        code: Is(jsonrpc::INVALID_PARAMS),
        message: Is("Idempotency key reused with different arguments"),
        data: Is(Some(Type("idempotency_key_conflict"))), retry_after: Is(None),
        category: Some(Tool),
    }
    IdempotencyUnavailable {
        label: "idempotency_unavailable", status: Is(StatusCode::SERVICE_UNAVAILABLE),
        code: Is(jsonrpc::INTERNAL_ERROR), message: Is("Idempotency store unavailable"),
        data: Is(None), retry_after: Is(Some("1")), category: Some(Tool),
    }
    /// The share picks the message, `data` (its type and name) and when to come back
    /// ([`Share`](super::Share)).
    Quota {
        label: "quota", status: Is(StatusCode::TOO_MANY_REQUESTS),
        code: Is(jsonrpc::INVALID_REQUEST), message: ByPayload,
        data: ByPayload, retry_after: ByPayload, category: Some(Store),
    }
    /// The store picks the message and `data` ([`Resource`](super::Resource)); stored
    /// entries leave only as they expire: not worth retrying every second.
    StoreFull {
        label: "store_full", status: Is(StatusCode::SERVICE_UNAVAILABLE),
        code: Is(jsonrpc::INTERNAL_ERROR), message: ByPayload,
        data: ByPayload, retry_after: Is(Some("60")), category: Some(Store),
    }
    /// A write to a replicated store (a consumption, an idempotency reservation) that no
    /// replica confirmed in time: given back, nothing forwarded; the store picks the
    /// message and `data` ([`Resource`](super::Resource)). Worth retrying soon (a
    /// failover takes seconds).
    StoreUnconfirmed {
        label: "store_unconfirmed", status: Is(StatusCode::SERVICE_UNAVAILABLE),
        code: Is(jsonrpc::INTERNAL_ERROR), message: ByPayload,
        data: ByPayload, retry_after: Is(Some("1")), category: Some(Store),
    }
    UpstreamUnavailable {
        label: "upstream_unavailable", status: Is(StatusCode::BAD_GATEWAY),
        code: Is(jsonrpc::INTERNAL_ERROR), message: Is("Upstream unavailable"),
        data: Is(None), retry_after: Is(None), category: None,
    }
    UpstreamTimeout {
        label: "upstream_timeout", status: Is(StatusCode::GATEWAY_TIMEOUT),
        code: Is(jsonrpc::INTERNAL_ERROR), message: Is("Upstream timed out"),
        data: Is(None), retry_after: Is(None), category: None,
    }
    /// The reference answers a state it cannot seal with -32603 under HTTP 200, the
    /// status MCP maps internal errors to; clients surface it as a JSON-RPC error.
    UpstreamResponse {
        label: "upstream_response", status: Is(StatusCode::OK),
        code: Is(jsonrpc::INTERNAL_ERROR), message: Is("Internal error"),
        data: Is(None), retry_after: Is(None), category: None,
    }
}

impl ErrorKind {
    /// Its row of the table.
    pub(crate) fn row(self) -> &'static Row {
        &ROWS[self as usize]
    }

    pub(crate) fn as_str(self) -> &'static str {
        self.row().label
    }

    /// Whose fault: the client's (refused before the upstream) or the upstream's (a
    /// row without an audit category).
    pub(crate) fn is_upstream(self) -> bool {
        self.row().category.is_none()
    }
}
