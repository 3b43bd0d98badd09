//! The HTTP status a JSON-RPC error is answered with, as the SDKs' Streamable HTTP
//! transports map it (`mcp-wire-notes.md` 1.6).

use super::{
    HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, MISSING_CAPABILITY,
    PARSE_ERROR, UNSUPPORTED_VERSION,
};

/// The HTTP status a Streamable HTTP transport answers a JSON-RPC error with when the
/// error is the whole answer (once an event stream is committed it is `200`), as the
/// SDKs' transports map it (`mcp/shared/inbound.py`): `400` for a request refused as
/// such (not JSON, not a request, invalid params such as a missing `_meta`, a header
/// that disagrees with the body, a client capability not declared, a protocol version
/// not served), `404` for a method not found, and `200` for anything else (a tool's or
/// an internal error is still the request's answer). The stdio bridge answers its
/// child's errors by it; the sidecar's own refusal table agrees with it.
pub(crate) fn error_status(code: i64) -> http::StatusCode {
    match code {
        PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS | HEADER_MISMATCH | MISSING_CAPABILITY
        | UNSUPPORTED_VERSION => http::StatusCode::BAD_REQUEST,
        METHOD_NOT_FOUND => http::StatusCode::NOT_FOUND,
        _ => http::StatusCode::OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SDKs' map (`mcp-wire-notes.md` 1.6), code by code.
    #[test]
    fn errors_answer_with_the_sdks_statuses() {
        for (code, status) in [
            (-32700, 400),
            (-32600, 400),
            (-32602, 400),
            (-32020, 400),
            (-32021, 400),
            (-32022, 400),
            (-32601, 404),
            (-32603, 200),
            (-32000, 200),
            (-32042, 200),
            (1, 200),
        ] {
            assert_eq!(error_status(code).as_u16(), status, "{code}");
        }
    }
}
