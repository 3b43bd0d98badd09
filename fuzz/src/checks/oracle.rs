//! The tree path the data path replaced (issue 22), kept as the reference the
//! differential targets hold it to: the gate as it was (one strict parse into a
//! `serde_json::Value`, `classify`, the MCP routing headers read from the tree) and the
//! phases' edits made on that tree, then the whole tree written back.
//!
//! Nothing here is fast or shared with the sidecar beyond the strict parser and the
//! classification it is built on ([`jsonrpc::parse_bounded`], [`jsonrpc::classify`]),
//! which the `scan` target holds the scanner to on their own.

pub mod sealer;

use http::HeaderMap;
use http::header::HeaderName;
use mcp_state_guard::facade::error::ProxyError;
use mcp_state_guard::facade::jsonrpc::{self, Message, ParamsField};
use mcp_state_guard::facade::proxy::gate::Refusal;
use serde_json::{Map, Value};

/// The tree gate: the parsed body and its message, or why not.
pub fn check_message(
    headers: &HeaderMap,
    bytes: &[u8],
    max_json_values: usize,
) -> Result<(Value, Message), Box<Refusal>> {
    let refused = |id, error| Box::new(Refusal { id, error });
    let value =
        jsonrpc::parse_bounded(bytes, max_json_values).map_err(|e| refused(None, e.into()))?;
    let message = jsonrpc::classify(&value)
        .map_err(|e| refused(jsonrpc::best_effort_id(&value), e.into()))?;
    let params = value.get("params").and_then(Value::as_object);
    check_mcp_headers(headers, &message, params)
        .map_err(|error| refused(message.id().cloned(), error))?;
    Ok((value, message))
}

fn check_mcp_headers(
    headers: &HeaderMap,
    message: &Message,
    params: Option<&Map<String, Value>>,
) -> Result<(), ProxyError> {
    let single = |name: &'static str, label: &'static str| -> Result<Option<&[u8]>, ProxyError> {
        let mut values = headers.get_all(HeaderName::from_static(name)).iter();
        let first = values.next().map(|v| v.as_bytes());
        if values.next().is_some() {
            return Err(ProxyError::HeaderMismatch(label));
        }
        Ok(first)
    };
    single("mcp-protocol-version", "mcp-protocol-version")?;
    let method_header = single("mcp-method", "mcp-method")?;
    let name_header = single("mcp-name", "mcp-name")?;
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
        let Some(field) = mcp_state_guard::facade::mcp::header_target_field(method) else {
            return Err(ProxyError::HeaderMismatch("mcp-name"));
        };
        let target = params.and_then(|p| p.get(field)).and_then(Value::as_str);
        let decoded = match raw
            .strip_prefix(b"=?base64?")
            .and_then(|r| r.strip_suffix(b"?="))
        {
            Some(encoded) => base64_simd::STANDARD
                .decode_to_vec(encoded)
                .map_err(|_| ProxyError::HeaderMismatch("mcp-name"))?,
            None => raw.to_vec(),
        };
        if target.map(str::as_bytes) != Some(&decoded[..]) {
            return Err(ProxyError::HeaderMismatch("mcp-name"));
        }
    }
    Ok(())
}

/// The phases' edits on the tree, as `jsonrpc::Params` makes them on the scanned body.
pub struct TreeParams<'a>(pub Option<&'a mut Map<String, Value>>);

impl TreeParams<'_> {
    pub fn get(&self, field: ParamsField) -> Option<&Value> {
        self.0.as_deref()?.get(field.name())
    }

    pub fn set(&mut self, field: ParamsField, value: Value) -> bool {
        match self.0.as_deref_mut().and_then(|p| p.get_mut(field.name())) {
            Some(slot) => {
                *slot = value;
                true
            }
            None => false,
        }
    }

    pub fn remove(&mut self, field: ParamsField) -> Option<Value> {
        self.0.as_deref_mut()?.remove(field.name())
    }

    pub fn retain_answers(&mut self, mut keep: impl FnMut(&str) -> bool) -> Result<usize, ()> {
        match self
            .0
            .as_deref_mut()
            .and_then(|p| p.get_mut("inputResponses"))
        {
            None | Some(Value::Null) => Ok(0),
            Some(Value::Object(answers)) => {
                let before = answers.len();
                answers.retain(|key, _| keep(key));
                Ok(before - answers.len())
            }
            Some(_) => Err(()),
        }
    }

    pub fn replace_at(&mut self, field: ParamsField, pointer: &str, value: Value) -> bool {
        match self
            .0
            .as_deref_mut()
            .and_then(|p| p.get_mut(field.name()))
            .and_then(|m| m.pointer_mut(pointer))
        {
            Some(slot) => {
                *slot = value;
                true
            }
            None => false,
        }
    }
}

/// The tree written back, as the old gate forwarded it.
pub fn forwarded(value: &Value) -> Vec<u8> {
    jsonrpc::serialize(value, 64)
}
