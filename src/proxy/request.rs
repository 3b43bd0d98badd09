//! The request gate: what a POSTed MCP message must be before anything is forwarded,
//! and the inbound half of the state boundary.
//!
//! Invariant: the upstream receives the re-serialised message this gate parsed and
//! checked, never the client's bytes; a `requestState` in it is the plaintext of a token
//! this sidecar verified for this very request, and `inputResponses` holds only what the
//! minting round asked for.

use super::response::SealContext;
use super::{Failure, Proxy};
use crate::error::ProxyError;
use crate::jsonrpc::{self, Message, ParseError};
use crate::metrics::VerifyResult;
use crate::token::{Reject, RequestBinding};
use base64_simd::STANDARD;
use bytes::Bytes;
use http::HeaderMap;
use http::header::{self, HeaderName};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value};

/// A message admitted by the gate.
pub struct Admitted {
    /// The re-serialised message to forward.
    pub body: Bytes,
    /// What the response needs to seal a state for this request.
    pub context: SealContext,
}

const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

impl Proxy {
    /// Run every check on a POSTed message and open its `requestState`.
    pub(super) async fn admit(
        &self,
        headers: &HeaderMap,
        body: Incoming,
        principal: Option<String>,
    ) -> Result<Admitted, Failure> {
        check_content_headers(headers).map_err(Failure::anonymous)?;
        let bytes = read_body(headers, body, self.limits.max_body_bytes)
            .await
            .map_err(Failure::anonymous)?;
        let mut value = jsonrpc::parse_strict(&bytes).map_err(|e| Failure::anonymous(e.into()))?;
        let message = jsonrpc::classify(&value).map_err(|e| Failure {
            // The body parsed: answer with its id if it has a usable one.
            id: jsonrpc::best_effort_id(&value),
            error: e.into(),
        })?;
        let id = message.id().cloned();
        let fail = |error: ProxyError| Failure {
            id: id.clone(),
            error,
        };
        let params = value.get("params").and_then(Value::as_object);
        check_mcp_headers(headers, &message, params).map_err(fail)?;
        let method = match message {
            Message::Call { method, .. } => Some(method),
            Message::Response { .. } => None,
        };
        if let Some(method) = method.as_deref()
            && let Some(params) = value.get_mut("params").and_then(Value::as_object_mut)
        {
            self.open_state(method, params, principal.as_deref())
                .map_err(fail)?;
        }
        let body = Bytes::from(serde_json::to_vec(&value).expect("a parsed value serialises"));
        // The params the upstream sees are the ones the response binds to.
        let params = value
            .get_mut("params")
            .and_then(Value::as_object_mut)
            .map(std::mem::take);
        Ok(Admitted {
            body,
            context: SealContext::new(id, method, params, principal),
        })
    }

    /// Verify and unwrap `params.requestState` in place.
    fn open_state(
        &self,
        method: &str,
        params: &mut Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<(), ProxyError> {
        let token = match params.get("requestState") {
            // No verified round asked anything: every answer is unasked. (Rounds without
            // upstream state carry a token of ours, so real answers always have one.)
            None => return self.filter_input_responses(params, &[]),
            // The reference treats an explicit null as absent; so does the upstream after us.
            Some(Value::Null) => {
                params.remove("requestState");
                return self.filter_input_responses(params, &[]);
            }
            Some(Value::String(token)) => token,
            Some(_) => {
                return Err(self.refuse_state(
                    method,
                    Reject::Malformed,
                    "non-string requestState",
                ));
            }
        };
        if token.len() > super::max_token_bytes(&self.limits) {
            return Err(self.refuse_state(
                method,
                Reject::Malformed,
                "token longer than any this sidecar mints",
            ));
        }
        let binding = RequestBinding::of(method, Some(params))
            .map_err(|_| ProxyError::Parse(ParseError::Params))?;
        let opened = match self.sealer.open(token, &binding, principal) {
            Ok(opened) => opened,
            Err(rejection) => {
                return Err(self.refuse_state(method, rejection.reason, rejection.detail));
            }
        };
        self.metrics.verified(VerifyResult::Ok);
        if let Some(asked) = &opened.asked {
            self.filter_input_responses(params, asked)?;
        }
        if opened.no_upstream_state {
            // The upstream sent no state this round; it gets none back.
            params.remove("requestState");
        } else {
            params.insert("requestState".into(), Value::String(opened.state));
        }
        Ok(())
    }

    fn refuse_state(&self, method: &str, reason: Reject, detail: &'static str) -> ProxyError {
        self.metrics.verified(VerifyResult::Rejected(reason));
        // `method` is client text: Debug-formatted so it cannot forge log lines.
        tracing::warn!(
            method = ?method,
            reason = reason.as_str(),
            detail,
            "requestState refused"
        );
        ProxyError::InvalidState { reason, detail }
    }

    /// Drop `inputResponses` entries the minting round did not ask for: the spec says
    /// servers should ignore them, and legacy servers often trust them.
    fn filter_input_responses(
        &self,
        params: &mut Map<String, Value>,
        asked: &[String],
    ) -> Result<(), ProxyError> {
        match params.get_mut("inputResponses") {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Object(responses)) => {
                let before = responses.len();
                responses.retain(|key, _| asked.iter().any(|a| a == key));
                let dropped = before - responses.len();
                if dropped > 0 {
                    self.metrics.input_responses_dropped(dropped);
                    tracing::info!(dropped, "dropped inputResponses the round did not ask for");
                }
                Ok(())
            }
            Some(_) => Err(ProxyError::InputResponses),
        }
    }
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
/// client declares its length).
async fn read_body(headers: &HeaderMap, body: Incoming, limit: usize) -> Result<Bytes, ProxyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ProxyError::BodyTooLarge { limit })
        }
        Err(_) => Err(ProxyError::BodyRead),
    }
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
        let field = match method.as_str() {
            "tools/call" | "prompts/get" => "name",
            "resources/read" => "uri",
            _ => return Err(ProxyError::HeaderMismatch("mcp-name")),
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
    }
}
