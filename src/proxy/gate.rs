//! The gate: what a POSTed MCP message must be before anything else looks at it.
//!
//! Invariant: a body leaves the gate only as one JSON-RPC message that [`crate::jsonrpc`]
//! parsed strictly (within `limits.max_json_values`), with JSON `Content-Type`, identity
//! encoding, and `Mcp-Method` / `Mcp-Name` / `MCP-Protocol-Version` headers that agree
//! with it; the body arrived within `timeouts.body_read_ms` and its bytes are held
//! against the [`MemoryBudget`] until it has been forwarded. The upstream later receives
//! the message as the sidecar writes it from the scanned tokens
//! ([`ScannedBody::into_forwarded`]), never bytes the scan did not read.

use crate::budget::{self, CollectError, MemoryBudget, Reservation};
use crate::config::LimitsConfig;
use crate::error::ProxyError;
use crate::jsonrpc::{Id, Message, Params, ParamsField, Refused, ScannedBody};
use crate::mcp::param_headers::{LearnedParamHeaders, ParamHeaders};
use bytes::Bytes;
use http::HeaderMap;
use hyper::body::Incoming;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

mod head;

use head::{Field, GateHead};

/// The gate's settings.
pub(crate) struct Gate {
    limits: LimitsConfig,
    budget: Arc<MemoryBudget>,
    body_timeout: Duration,
    /// The sidecar is the upstream's HTTP transport (a stdio child sees no headers):
    /// the transport's own header rules apply here ([`check_transport_headers`]), with
    /// the `Mcp-Param-*` annotations of the child's tools.
    transport: Option<LearnedParamHeaders>,
}

/// A message the gate let in.
pub(crate) struct AdmittedBody {
    /// The scanned message; the next phases edit its `params` through [`Params`]. Boxed
    /// by the scan that makes it ([`ScannedBody::scan`]): its index and edits (about
    /// 1.4 KB) would otherwise be copied with every move of the request's future.
    pub(crate) body: Box<ScannedBody>,
    /// The request body's bytes, held until the forwarded body is gone.
    pub(crate) reservation: Reservation,
}

impl AdmittedBody {
    /// The message's id, kept by the exchange ([`crate::jsonrpc::ScannedBody::take_id`]).
    pub(crate) fn take_id(&mut self) -> Option<Id> {
        self.body.take_id()
    }

    /// The method and `params` of a request or notification (a client's response to a
    /// server request has neither).
    pub(crate) fn call_mut(&mut self) -> Option<(&str, Params<'_>)> {
        self.body.call_mut()
    }

    /// The message as the upstream will receive it, and the reservation that holds its
    /// bytes (the members the phases read were parsed on their own and go with it).
    pub(crate) fn into_forwarded(self) -> (Bytes, Reservation) {
        (self.body.into_forwarded(), self.reservation)
    }
}

impl Gate {
    /// `transport`: the upstream is a stdio child, whose HTTP transport the sidecar is
    /// (the annotations its tools declare).
    pub(crate) fn new(
        limits: LimitsConfig,
        budget: Arc<MemoryBudget>,
        body_timeout: Duration,
        transport: Option<LearnedParamHeaders>,
    ) -> Self {
        Self {
            limits,
            budget,
            body_timeout,
            transport,
        }
    }

    /// Run every check on a POSTed message.
    pub(crate) async fn admit(
        &self,
        headers: &HeaderMap,
        body: Incoming,
    ) -> Result<AdmittedBody, Box<Refusal>> {
        let unread = |error| Box::new(Refusal { id: None, error });
        let head = GateHead::read(headers);
        check_content_headers(&head).map_err(unread)?;
        let mut reservation = self.budget.reservation();
        let read = read_body(&head, body, self.limits.max_body_bytes, &mut reservation);
        let bytes = match tokio::time::timeout(self.body_timeout, read).await {
            Ok(read) => read.map_err(unread)?,
            Err(_) => return Err(unread(ProxyError::BodyTimeout)),
        };
        let body = check_read_message(&head, bytes, self.limits.max_json_values)?;
        if let Some(params) = &self.transport
            && let Err(error) = check_transport_headers(&head, headers, &body, &params.load())
        {
            let id = body.id().cloned();
            return Err(Box::new(Refusal { id, error }));
        }
        Ok(AdmittedBody { body, reservation })
    }
}

/// Why the gate refused a body it has read, with the id to answer when the body had a
/// usable one.
#[derive(Debug)]
pub struct Refusal {
    pub id: Option<Id>,
    pub error: ProxyError,
}

/// What the gate decides about a body it has read: one strictly scanned (within
/// `max_json_values`) and classified JSON-RPC message whose MCP routing headers agree
/// with it, or why not (boxed: the rare path), answered with the body's id when it is
/// JSON with a usable one. Pure, so it is also what the `gate` fuzz target drives.
pub fn check_message(
    headers: &HeaderMap,
    bytes: Bytes,
    max_json_values: usize,
) -> Result<Box<ScannedBody>, Box<Refusal>> {
    check_read_message(&GateHead::read(headers), bytes, max_json_values)
}

/// [`check_message`] on a head already read.
fn check_read_message(
    head: &GateHead<'_>,
    bytes: Bytes,
    max_json_values: usize,
) -> Result<Box<ScannedBody>, Box<Refusal>> {
    let body = ScannedBody::scan(bytes, max_json_values).map_err(|Refused { error, id }| {
        Box::new(Refusal {
            id,
            error: error.into(),
        })
    })?;
    let target = |field: &str| {
        let field = ParamsField::named(field)?;
        crate::jsonrpc::string_in(body.text(), body.index().param(field)?)
    };
    check_mcp_headers(head, body.message(), target).map_err(|error| {
        Box::new(Refusal {
            id: body.id().cloned(),
            error,
        })
    })?;
    Ok(body)
}

/// `Content-Type` must be JSON (UTF-8), `Content-Encoding` absent or identity.
fn check_content_headers(head: &GateHead<'_>) -> Result<(), ProxyError> {
    let content_type = (head.content_type.first)
        .and_then(|v| v.to_str().ok())
        .ok_or(ProxyError::ContentType)?;
    if head.content_type.repeated {
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
    if !head.identity_encoding {
        return Err(ProxyError::ContentEncoding);
    }
    Ok(())
}

/// Read the whole body, refusing more than `limit` bytes (before reading any, when the
/// client declares its length). Bytes are reserved as they arrive, never on a client's
/// word: a declared length that never comes must not hold the budget.
async fn read_body(
    head: &GateHead<'_>,
    body: Incoming,
    limit: usize,
    reservation: &mut Reservation,
) -> Result<Bytes, ProxyError> {
    let declared = (head.content_length.first)
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
fn check_mcp_headers<'h, 't>(
    head: &GateHead<'h>,
    message: &Message,
    target: impl FnOnce(&str) -> Option<Cow<'t, str>>,
) -> Result<(), ProxyError> {
    let single = |field: Field<'h>, label: &'static str| {
        if field.repeated {
            return Err(ProxyError::HeaderMismatch(label));
        }
        Ok(field.first.map(|v| v.as_bytes()))
    };
    single(head.protocol_version, "mcp-protocol-version")?;
    let method_header = single(head.method, "mcp-method")?;
    let name_header = single(head.name, "mcp-name")?;
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
        let target = target(field);
        let decoded =
            crate::mcp::decode_header_value(raw).ok_or(ProxyError::HeaderMismatch("mcp-name"))?;
        if target.as_deref().map(str::as_bytes) != Some(&decoded[..]) {
            return Err(ProxyError::HeaderMismatch("mcp-name"));
        }
    }
    Ok(())
}

/// The header rules of the Streamable HTTP transport for a 2026-07-28 request (one whose
/// `_meta` names its protocol version), beyond [`check_mcp_headers`]' agreement: applied
/// when the sidecar is the transport (a stdio child cannot see headers; an HTTP
/// upstream applies them itself). `MCP-Protocol-Version` must name the body's version,
/// a request must carry `Mcp-Method`, and `Mcp-Name` when its body has the member the
/// header names; a `tools/call`'s `Mcp-Param-*` headers must mirror its arguments as its
/// tool's schema declares (`params`). A 2025-era message (no version in `_meta`) has
/// none of these headers.
fn check_transport_headers(
    head: &GateHead<'_>,
    headers: &HeaderMap,
    body: &ScannedBody,
    params: &ParamHeaders,
) -> Result<(), ProxyError> {
    let Some(version) = meta_protocol_version(body) else {
        return Ok(());
    };
    let header_version = head.protocol_version.first.map(|v| v.as_bytes());
    // RFC 9110 §5.5: the whitespace around a field value is not part of it.
    if header_version.map(<[u8]>::trim_ascii) != Some(version.as_bytes()) {
        return Err(ProxyError::HeaderMismatch("mcp-protocol-version"));
    }
    let Message::Call {
        method,
        id: Some(_),
    } = body.message()
    else {
        return Ok(());
    };
    if head.method.first.is_none() {
        return Err(ProxyError::HeaderMismatch("mcp-method"));
    }
    let named = crate::mcp::header_target_field(method)
        .and_then(ParamsField::named)
        .and_then(|field| body.index().param(field));
    if named.is_some() && head.name.first.is_none() {
        return Err(ProxyError::HeaderMismatch("mcp-name"));
    }
    if method != "tools/call" || params.is_empty() {
        return Ok(());
    }
    let param = |field| {
        let span = body.index().param(field)?;
        Some(&body.bytes()[span])
    };
    let Some(tool) =
        param(ParamsField::Name).and_then(|raw| serde_json::from_slice::<String>(raw).ok())
    else {
        return Ok(());
    };
    // Scanned strictly already: the arguments parse. Arguments that are not an object
    // mirror nothing (the SDKs check none).
    let arguments = match param(ParamsField::Arguments).map(serde_json::from_slice::<Value>) {
        None => None,
        Some(Ok(Value::Object(arguments))) => Some(arguments),
        Some(_) => return Ok(()),
    };
    params
        .check(&tool, arguments.as_ref(), headers)
        .map_err(|mismatch| {
            tracing::debug!(tool = %crate::text::Clipped(&tool), reason = mismatch.as_str(), "Mcp-Param header refused");
            ProxyError::HeaderMismatch("mcp-param")
        })
}

/// The protocol version a message's `_meta` names, read in place from `params._meta`
/// (no tree of it is built: this runs on every request to a stdio child).
fn meta_protocol_version(body: &ScannedBody) -> Option<Cow<'_, str>> {
    const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    let span = body.index().param(ParamsField::Meta)?;
    // Scanned strictly already: UTF-8, no duplicate key. Only `_meta`'s own bytes are
    // looked at again.
    let meta = body.text().get(span)?;
    let member =
        crate::jsonrpc::members(meta, 0..meta.len()).find(|m| m.key == PROTOCOL_VERSION)?;
    crate::jsonrpc::string_in(meta, member.value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64_simd::STANDARD;
    use http::{HeaderName, HeaderValue};
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
        assert!(
            check_content_headers(&GateHead::read(&headers(&[(
                "content-type",
                "application/json"
            )])))
            .is_ok()
        );
        assert!(
            check_content_headers(&GateHead::read(&headers(&[(
                "content-type",
                "Application/JSON; charset=UTF-8"
            )])))
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
                    check_content_headers(&GateHead::read(&headers(&bad))),
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
                matches!(
                    check_content_headers(&GateHead::read(&h)),
                    Err(ProxyError::ContentEncoding)
                ),
                "{encoding}"
            );
        }
        let h = headers(&[
            ("content-type", "application/json"),
            ("content-encoding", "identity"),
        ]);
        assert!(check_content_headers(&GateHead::read(&h)).is_ok());
    }

    /// Check `headers` against a message built from `method` and `params`.
    fn check(
        pairs: &[(&str, &str)],
        method: &str,
        params: serde_json::Value,
    ) -> Result<(), ProxyError> {
        let value = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        check_message(&headers(pairs), Bytes::from(value.to_string()), usize::MAX)
            .map(drop)
            .map_err(|refusal| {
                assert_eq!(refusal.id, Some(json!(1)));
                refusal.error
            })
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

    /// In front of a stdio child: a 2026-07-28 request carries its version, method and
    /// name in headers that agree with it; a 2025-era message needs none.
    #[test]
    fn the_transport_rules_hold_a_2026_request_to_its_headers() {
        let check = |pairs: &[(&str, &str)], params: serde_json::Value| {
            let value =
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
            let body = check_message(&headers(pairs), Bytes::from(value.to_string()), usize::MAX)
                .map_err(|r| r.error)
                .unwrap();
            check_transport_headers(
                &GateHead::read(&headers(pairs)),
                &headers(pairs),
                &body,
                &ParamHeaders::default(),
            )
        };
        let modern = || json!({"name": "provision", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}});
        let all = [
            ("mcp-protocol-version", " 2026-07-28 "),
            ("mcp-method", "tools/call"),
            ("mcp-name", "provision"),
        ];
        assert!(check(&all, modern()).is_ok());
        for missing in 0..all.len() {
            let mut pairs = all.to_vec();
            let (name, _) = pairs.remove(missing);
            assert!(
                matches!(check(&pairs, modern()), Err(ProxyError::HeaderMismatch(_))),
                "without {name}"
            );
        }
        let older = [("mcp-protocol-version", "2025-11-25"), all[1], all[2]];
        assert!(matches!(
            check(&older, modern()),
            Err(ProxyError::HeaderMismatch(_))
        ));
        // A 2025-era message: no version in `_meta`, no header required.
        assert!(check(&[], json!({"name": "provision"})).is_ok());
    }
}
