//! The gate: what a POSTed MCP message must be before anything else looks at it.
//!
//! Invariant: a body leaves the gate only as one JSON-RPC message that [`jsonrpc`]
//! parsed strictly (within `limits.max_json_values`), with JSON `Content-Type`, identity
//! encoding, and `Mcp-Method` / `Mcp-Name` / `MCP-Protocol-Version` headers that agree
//! with it; the body arrived within `timeouts.body_read_ms` and its bytes are held
//! against the [`MemoryBudget`] until it has been forwarded. The upstream later receives
//! the re-serialised message, never the client's bytes.

use super::Failure;
use super::budget::{self, CollectError, MemoryBudget, Reservation};
use crate::config::LimitsConfig;
use crate::error::ProxyError;
use crate::jsonrpc::{self, Id, Message, Params};
use base64_simd::STANDARD;
use bytes::Bytes;
use http::HeaderMap;
use http::header::{self, HeaderName};
use hyper::body::Incoming;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// The gate's settings.
pub struct Gate {
    limits: LimitsConfig,
    budget: Arc<MemoryBudget>,
    body_timeout: Duration,
}

/// A message the gate let in.
pub struct AdmittedBody {
    /// The parsed message; the next phases edit its `params` through [`Params`].
    pub value: Value,
    pub message: Message,
    /// The request body's bytes, held until the forwarded body is gone.
    pub reservation: Reservation,
}

impl AdmittedBody {
    pub fn id(&self) -> Option<&Id> {
        self.message.id()
    }

    /// The method and `params` of a request or notification (a client's response to a
    /// server request has neither).
    pub fn call_mut(&mut self) -> Option<(&str, Params<'_>)> {
        let Message::Call { method, .. } = &self.message else {
            return None;
        };
        let params = self.value.get_mut("params").and_then(Value::as_object_mut);
        Some((method.as_str(), Params::new(params)))
    }

    /// The message as the upstream will receive it, and the reservation that holds its
    /// bytes. Consumes the parsed form: it must not outlive the gate's phases (a tree of
    /// 100,000 values is ~10 MB that no budget counts).
    pub fn into_forwarded(self) -> (Bytes, Reservation) {
        // About the client's length: a state that replaced a token is shorter.
        let bytes = jsonrpc::serialize(&self.value, self.reservation.bytes() + 64);
        (Bytes::from(bytes), self.reservation)
    }
}

impl Gate {
    pub fn new(limits: LimitsConfig, budget: Arc<MemoryBudget>, body_timeout: Duration) -> Self {
        Self {
            limits,
            budget,
            body_timeout,
        }
    }

    /// Run every check on a POSTed message.
    pub async fn admit(
        &self,
        headers: &HeaderMap,
        body: Incoming,
    ) -> Result<AdmittedBody, Failure> {
        check_content_headers(headers)?;
        let mut reservation = self.budget.reservation();
        let read = read_body(headers, body, self.limits.max_body_bytes, &mut reservation);
        let bytes = match tokio::time::timeout(self.body_timeout, read).await {
            Ok(read) => read?,
            Err(_) => return Err(ProxyError::BodyTimeout.into()),
        };
        let (value, message) = check_message(headers, &bytes, self.limits.max_json_values)?;
        drop(bytes);
        Ok(AdmittedBody {
            value,
            message,
            reservation,
        })
    }
}

/// Why the gate refused a body it has read, with the id to answer when the body had a
/// usable one.
#[derive(Debug)]
pub struct Refusal {
    pub id: Option<Id>,
    pub error: ProxyError,
}

impl From<Box<Refusal>> for Failure {
    fn from(refusal: Box<Refusal>) -> Self {
        Failure {
            id: refusal.id,
            error: refusal.error,
            upstream_head: None,
        }
    }
}

/// What the gate decides about a body it has read: one strictly parsed (within
/// `max_json_values`) and classified JSON-RPC message whose MCP routing headers agree
/// with it, or why not (boxed: the rare path). Pure, so it is also what the `gate` fuzz
/// target drives.
pub fn check_message(
    headers: &HeaderMap,
    bytes: &[u8],
    max_json_values: usize,
) -> Result<(Value, Message), Box<Refusal>> {
    let refused = |id, error| Box::new(Refusal { id, error });
    let value =
        jsonrpc::parse_bounded(bytes, max_json_values).map_err(|e| refused(None, e.into()))?;
    // The body parsed: answer with its id if it has a usable one.
    let message = jsonrpc::classify(&value)
        .map_err(|e| refused(jsonrpc::best_effort_id(&value), e.into()))?;
    let params = value.get("params").and_then(Value::as_object);
    check_mcp_headers(headers, &message, params)
        .map_err(|error| refused(message.id().cloned(), error))?;
    Ok((value, message))
}

/// `Content-Type` must be JSON (UTF-8), `Content-Encoding` absent or identity.
fn check_content_headers(headers: &HeaderMap) -> Result<(), ProxyError> {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let content_type = types
        .next()
        .and_then(|v| v.to_str().ok())
        .ok_or(ProxyError::ContentType)?;
    if types.next().is_some() {
        return Err(ProxyError::ContentType);
    }
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ProxyError::ContentType);
    }
    for param in parts {
        let (name, value) = param.split_once('=').ok_or(ProxyError::ContentType)?;
        if name.trim().eq_ignore_ascii_case("charset")
            && !value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        {
            return Err(ProxyError::ContentType);
        }
    }
    if !super::identity_encoding(headers) {
        return Err(ProxyError::ContentEncoding);
    }
    Ok(())
}

/// Read the whole body, refusing more than `limit` bytes (before reading any, when the
/// client declares its length). Bytes are reserved as they arrive, never on a client's
/// word: a declared length that never comes must not hold the budget.
async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limit: usize,
    reservation: &mut Reservation,
) -> Result<Bytes, ProxyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    budget::collect(body, limit, reservation)
        .await
        .map_err(|e| match e {
            CollectError::TooLarge => ProxyError::BodyTooLarge { limit },
            CollectError::OverBudget => ProxyError::Overloaded,
            CollectError::Body => ProxyError::BodyRead,
        })
}

/// The MCP 2026 routing headers must agree with the body and appear at most once, or a
/// router in front of the upstream and the upstream itself could see different requests.
fn check_mcp_headers(
    headers: &HeaderMap,
    message: &Message,
    params: Option<&Map<String, Value>>,
) -> Result<(), ProxyError> {
    let single = |name: &HeaderName, label: &'static str| -> Result<Option<&[u8]>, ProxyError> {
        let mut values = headers.get_all(name).iter();
        let first = values.next().map(|v| v.as_bytes());
        if values.next().is_some() {
            return Err(ProxyError::HeaderMismatch(label));
        }
        Ok(first)
    };
    single(&MCP_PROTOCOL_VERSION, "mcp-protocol-version")?;
    let method_header = single(&MCP_METHOD, "mcp-method")?;
    let name_header = single(&MCP_NAME, "mcp-name")?;
    let Message::Call { method, .. } = message else {
        if method_header.is_some() || name_header.is_some() {
            return Err(ProxyError::HeaderMismatch("mcp-method"));
        }
        return Ok(());
    };
    if method_header.is_some_and(|h| h != method.as_bytes()) {
        return Err(ProxyError::HeaderMismatch("mcp-method"));
    }
    if let Some(raw) = name_header {
        let Some(field) = crate::mcp::header_target_field(method) else {
            return Err(ProxyError::HeaderMismatch("mcp-name"));
        };
        let target = params.and_then(|p| p.get(field)).and_then(Value::as_str);
        let decoded = decode_header_value(raw).ok_or(ProxyError::HeaderMismatch("mcp-name"))?;
        if target.map(str::as_bytes) != Some(&decoded[..]) {
            return Err(ProxyError::HeaderMismatch("mcp-name"));
        }
    }
    Ok(())
}

/// MCP header values that are not plain printable ASCII travel as `=?base64?<b64>?=`.
fn decode_header_value(raw: &[u8]) -> Option<Vec<u8>> {
    match raw
        .strip_prefix(b"=?base64?")
        .and_then(|r| r.strip_suffix(b"?="))
    {
        Some(encoded) => STANDARD.decode_to_vec(encoded).ok(),
        None => Some(raw.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn content_headers() {
        assert!(check_content_headers(&headers(&[("content-type", "application/json")])).is_ok());
        assert!(
            check_content_headers(&headers(&[(
                "content-type",
                "Application/JSON; charset=UTF-8"
            )]))
            .is_ok()
        );
        for bad in [
            vec![("content-type", "text/plain")],
            vec![],
            vec![("content-type", "application/json; charset=latin1")],
            vec![
                ("content-type", "application/json"),
                ("content-type", "text/plain"),
            ],
            vec![("content-type", "application/jsonx")],
        ] {
            assert!(
                matches!(
                    check_content_headers(&headers(&bad)),
                    Err(ProxyError::ContentType)
                ),
                "{bad:?}"
            );
        }
        for encoding in ["gzip", "identity, gzip", "br"] {
            let h = headers(&[
                ("content-type", "application/json"),
                ("content-encoding", encoding),
            ]);
            assert!(
                matches!(check_content_headers(&h), Err(ProxyError::ContentEncoding)),
                "{encoding}"
            );
        }
        let h = headers(&[
            ("content-type", "application/json"),
            ("content-encoding", "identity"),
        ]);
        assert!(check_content_headers(&h).is_ok());
    }

    /// Check `headers` against a message built from `method` and `params`.
    fn check(pairs: &[(&str, &str)], method: &str, params: Value) -> Result<(), ProxyError> {
        let value = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let message = jsonrpc::classify(&value).unwrap();
        check_mcp_headers(&headers(pairs), &message, value["params"].as_object())
    }

    #[test]
    fn mcp_headers_must_agree() {
        let provision = || json!({"name": "provision"});
        let ok = [("mcp-method", "tools/call"), ("mcp-name", "provision")];
        assert!(check(&ok, "tools/call", provision()).is_ok());
        assert!(check(&[], "tools/call", provision()).is_ok());
        for bad in [
            vec![("mcp-method", "tools/list")],
            vec![("mcp-name", "deprovision")],
            vec![("mcp-method", "tools/call"), ("mcp-method", "tools/call")],
            vec![("mcp-name", "provision"), ("mcp-name", "provision")],
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            vec![("mcp-name", "=?base64?!!?=")],
        ] {
            assert!(
                matches!(
                    check(&bad, "tools/call", provision()),
                    Err(ProxyError::HeaderMismatch(_))
                ),
                "{bad:?}"
            );
        }
        let encoded = format!(
            "=?base64?{}?=",
            STANDARD.encode_to_string("config://é".as_bytes())
        );
        let uri = json!({"uri": "config://é"});
        assert!(check(&[("mcp-name", &encoded)], "resources/read", uri).is_ok());
        assert!(check(&[("mcp-name", "x")], "tools/list", json!({})).is_err());
        let task = || json!({"taskId": "t-1"});
        assert!(check(&[("mcp-name", "t-1")], "tasks/get", task()).is_ok());
        assert!(check(&[("mcp-name", "t-2")], "tasks/cancel", task()).is_err());
        assert!(check(&[("mcp-name", "t-1")], "tasks/list", task()).is_err());
    }
}
