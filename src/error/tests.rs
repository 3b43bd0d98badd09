//! The table's promises: every kind has one row and the metrics doc lists exactly its labels,
//! the payload fills exactly the cells a row leaves to it, and every other answer is the
//! row's. [`samples`] gives errors of every kind to the tests here and in
//! [`crate::telemetry::audit`].

use super::kind::Row;
use super::*;
use std::collections::BTreeSet;

/// Errors of `kind`: one for each payload that changes what the client is answered or
/// what the audit line says. The match has no wildcard, so a new kind must be given its
/// samples here, and then meets every test that walks [`ErrorKind::ALL`].
pub(crate) fn samples(kind: ErrorKind) -> Vec<ProxyError> {
    match kind {
        ErrorKind::Parse => [
            ParseError::Syntax,
            ParseError::Bom,
            ParseError::Batch,
            ParseError::Params,
            ParseError::Target("name"),
            ParseError::TooManyValues,
        ]
        .into_iter()
        .map(ProxyError::Parse)
        .collect(),
        ErrorKind::HeaderMismatch => vec![ProxyError::HeaderMismatch("mcp-method")],
        ErrorKind::ContentType => vec![ProxyError::ContentType],
        ErrorKind::ContentEncoding => vec![ProxyError::ContentEncoding],
        ErrorKind::BodyTooLarge => vec![ProxyError::BodyTooLarge { limit: 5 }],
        ErrorKind::BodyNotAllowed => vec![ProxyError::BodyNotAllowed(http::Method::GET)],
        ErrorKind::BodyRead => vec![ProxyError::BodyRead],
        ErrorKind::BodyTimeout => vec![ProxyError::BodyTimeout],
        ErrorKind::MisdirectedRequest => vec![ProxyError::MisdirectedRequest],
        ErrorKind::Framing => vec![ProxyError::Framing("chunked and content-length")],
        ErrorKind::Overloaded => vec![ProxyError::Overloaded],
        ErrorKind::PrincipalHeader => vec![ProxyError::PrincipalHeader("repeated")],
        ErrorKind::Unauthorized => AuthFailure::ALL
            .into_iter()
            .flat_map(|reason| {
                let challenge = HeaderValue::from_static(r#"Bearer realm="mcp""#);
                [None, Some(challenge)]
                    .map(|challenge| ProxyError::Unauthorized { reason, challenge })
            })
            .collect(),
        ErrorKind::InvalidState => Reject::ALL
            .into_iter()
            .map(|reason| ProxyError::InvalidState {
                reason,
                detail: "detail",
            })
            .collect(),
        ErrorKind::InputResponses => vec![ProxyError::InputResponses],
        ErrorKind::InvalidAnswer => vec![ProxyError::InvalidAnswer {
            key: "q1".into(),
            rule: "must be a string".into(),
        }],
        ErrorKind::MissingCapability => vec![ProxyError::MissingCapability {
            required: json!({"elicitation": {}}),
        }],
        ErrorKind::RoundLimit => vec![ProxyError::RoundLimit],
        ErrorKind::InvalidHandle => HandleReject::ALL
            .into_iter()
            .map(ProxyError::InvalidHandle)
            .collect(),
        ErrorKind::IdempotencyKey => vec![ProxyError::IdempotencyKey("too long")],
        ErrorKind::IdempotencyInProgress => vec![ProxyError::IdempotencyInProgress],
        ErrorKind::IdempotencyConflict => vec![ProxyError::IdempotencyConflict],
        ErrorKind::IdempotencyUnavailable => vec![ProxyError::IdempotencyUnavailable],
        ErrorKind::Quota => Share::ALL.into_iter().map(ProxyError::Quota).collect(),
        ErrorKind::StoreFull => [Resource::SingleUse, Resource::Idempotency]
            .into_iter()
            .map(ProxyError::StoreFull)
            .collect(),
        ErrorKind::StoreUnconfirmed => [Resource::SingleUse, Resource::Idempotency]
            .into_iter()
            .map(ProxyError::StoreUnconfirmed)
            .collect(),
        ErrorKind::UpstreamUnavailable => vec![ProxyError::UpstreamUnavailable(connect_error())],
        ErrorKind::UpstreamTimeout => vec![ProxyError::UpstreamTimeout(5)],
        ErrorKind::UpstreamResponse => vec![ProxyError::UpstreamResponse("unsealable state")],
    }
}

/// A dialling error as the connector gives it: connecting to a port just let go.
fn connect_error() -> UpstreamError {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let refused = std::net::TcpStream::connect(address).unwrap_err();
    UpstreamError::Connect(refused.into())
}

/// The labels in the `reason` cell of the metrics table's row for `metric`
/// (docs/operations.md, "Metrics and health").
fn documented_labels(metric: &str) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let prefix = format!("| `{metric}` |");
    let row = doc
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("docs/operations.md has no metrics table row for {metric}"));
    // | name | type | labels | help |: the labels cell is "`reason`: `a`, `b`, ...".
    let cell = row.split('|').nth(3).unwrap().trim();
    let cell = cell.strip_prefix("`reason`:").expect("a `reason` label");
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_kind_has_one_row_and_the_metrics_doc_lists_exactly_their_labels() {
    let table: Vec<&str> = ErrorKind::ALL.iter().map(|kind| kind.as_str()).collect();
    let unique: BTreeSet<&str> = table.iter().copied().collect();
    assert_eq!(
        unique.len(),
        table.len(),
        "two rows share a label: {table:?}"
    );
    for kind in ErrorKind::ALL {
        assert!(!samples(kind).is_empty(), "{kind:?} has no samples");
        for error in samples(kind) {
            assert_eq!(error.kind(), kind, "{error}");
        }
    }
    let documented = documented_labels("mcp_state_guard_requests_refused_total");
    let listed: BTreeSet<&str> = documented.iter().map(String::as_str).collect();
    assert_eq!(
        listed.len(),
        documented.len(),
        "docs/operations.md repeats a label: {documented:?}"
    );
    let missing: Vec<&str> = unique.difference(&listed).copied().collect();
    let unknown: Vec<&str> = listed.difference(&unique).copied().collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/operations.md, mcp_state_guard_requests_refused_total: add {missing:?}, remove {unknown:?}"
    );
}

/// Whether each column of `error`'s row holds a `ByPayload` cell, and whether its
/// payload function has a value for it, column by column.
fn payload_columns(error: &ProxyError) -> Vec<(&'static str, bool, bool)> {
    let row: &Row = error.kind().row();
    vec![
        (
            "status",
            row.status == ByPayload,
            error.status_by_payload().is_some(),
        ),
        (
            "code",
            row.code == ByPayload,
            error.code_by_payload().is_some(),
        ),
        (
            "message",
            row.message == ByPayload,
            error.message_by_payload().is_some(),
        ),
        (
            "data",
            row.data == ByPayload,
            error.data_by_payload().is_some(),
        ),
        (
            "retry_after",
            row.retry_after == ByPayload,
            error.retry_after_by_payload().is_some(),
        ),
    ]
}

#[test]
fn the_payload_fills_exactly_the_by_payload_cells() {
    for kind in ErrorKind::ALL {
        for error in samples(kind) {
            for (column, by_payload, filled) in payload_columns(&error) {
                assert_eq!(
                    by_payload,
                    filled,
                    "{kind:?} ({error}): the row's {column} is {} but the payload function {}",
                    if by_payload { "ByPayload" } else { "fixed" },
                    if filled { "has an arm" } else { "has none" },
                );
            }
        }
    }
}

#[test]
fn fixed_cells_are_what_the_client_gets() {
    for kind in ErrorKind::ALL {
        let row = kind.row();
        for error in samples(kind) {
            let response = error.to_response(Some(&json!(7)));
            if let Is(status) = row.status {
                assert_eq!(response.status(), status, "{error}");
            }
            if let Is(seconds) = row.retry_after {
                let header = response.headers().get(header::RETRY_AFTER);
                assert_eq!(header.map(|v| v.to_str().unwrap()), seconds, "{error}");
            }
            let body: serde_json::Value =
                serde_json::from_slice(&error.jsonrpc_body(Some(&json!(7)))).unwrap();
            if let Is(code) = row.code {
                assert_eq!(body["error"]["code"], code, "{error}");
            }
            if let Is(message) = row.message {
                assert_eq!(body["error"]["message"], message, "{error}");
            }
            if let Is(data) = row.data {
                let data = data.map(Data::json);
                assert_eq!(body["error"].get("data"), data.as_ref(), "{error}");
            }
        }
    }
}

#[test]
fn every_state_refusal_is_the_same_frozen_error() {
    let mut bodies = Vec::new();
    for reason in Reject::ALL {
        let err = ProxyError::InvalidState {
            reason,
            detail: "x",
        };
        let resp = err.to_response(Some(&serde_json::json!(9)));
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        bodies.push(resp.into_body());
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        &bodies[0][..],
        br#"{"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"Invalid or expired requestState","data":{"reason":"invalid_request_state"}}}"#
    );
}

#[test]
fn statuses_and_codes() {
    assert_eq!(
        ProxyError::BodyTooLarge { limit: 1 }.http_status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        ProxyError::UpstreamTimeout(5).http_status(),
        StatusCode::GATEWAY_TIMEOUT
    );
    assert_eq!(
        ProxyError::ContentEncoding.http_status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(ProxyError::HeaderMismatch("mcp-method").wire().0, -32020);
    assert_eq!(ProxyError::Parse(ParseError::Syntax).wire().0, -32700);
    assert_eq!(ProxyError::Parse(ParseError::Batch).wire().0, -32600);
    assert!(ErrorKind::UpstreamTimeout.is_upstream());
    for share in Share::ALL {
        let response = ProxyError::Quota(share).to_response(None);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(response.headers().contains_key(header::RETRY_AFTER));
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["error"]["data"]["share"], share.as_str());
    }
    for resource in [Resource::SingleUse, Resource::Idempotency] {
        let response = ProxyError::StoreFull(resource).to_response(None);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "60");
    }
    assert!(!ErrorKind::Parse.is_upstream());
}
