//! The response the tool phase answers itself: a replayed idempotent write.
//!
//! Invariant: a replay is the stored `result` or `error` member (its issued handles
//! sealed for this caller by [`crate::tools`]) under the new request's id, with the
//! upstream's original HTTP status, marked `Idempotent-Replayed: true`; nothing else is
//! added.

use crate::body::ProxyBody;
use crate::jsonrpc::{self, Id};
use crate::tools::Replay;
use crate::tools::idempotency::REPLAYED_HEADER;
use http::Response;
use http::header::{self, HeaderValue};

/// The stored answer under `id`.
pub(crate) fn replayed(
    id: Option<&Id>,
    Replay { status, answer, .. }: Replay,
) -> Response<ProxyBody> {
    let mut response = Response::new(crate::body::full(jsonrpc::answer_body(id, answer)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}
