//! Facts about MCP messages that several floors need, written once: which member of a
//! request names its target, whether a result asks the client for input, whether bytes
//! open like JSON to some client, and how an MCP header value is decoded.
//!
//! Invariant: each rule here is the only copy of it in the crate; the gate, the token
//! binding, the audit record, the sealer and the idempotency record all ask this module.

pub(crate) mod param_headers;

#[cfg(any(test, feature = "oracle"))]
use serde_json::{Map, Value};

/// The member of `params` a request's binding names its target by, as the reference's
/// `_request_identity` does: `uri` for `resources/read`, `name` for every other method.
pub(crate) fn target_field(method: &str) -> &'static str {
    if method == "resources/read" {
        "uri"
    } else {
        "name"
    }
}

/// The member of `params` an `Mcp-Name` header must agree with, for the methods that
/// have one (the TypeScript SDK names the task it acts on, and its server requires it).
pub fn header_target_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

#[cfg(any(test, feature = "oracle"))]
/// Whether a result asks the client for input: by `resultType`, or by carrying
/// `inputRequests` (an older draft's shape).
pub fn asks_for_input(result: &Map<String, Value>) -> bool {
    result.get("resultType") == Some(&Value::from("input_required"))
        || result.get("inputRequests").is_some_and(|r| !r.is_null())
}

/// An MCP header value (`Mcp-Name`, `Mcp-Param-*`): as sent, or for one that is not
/// plain printable ASCII, the bytes its `=?base64?<b64>?=` form encodes.
pub(crate) fn decode_header_value(raw: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    match raw
        .strip_prefix(b"=?base64?")
        .and_then(|r| r.strip_suffix(b"?="))
    {
        Some(encoded) => (base64_simd::STANDARD.decode_to_vec(encoded).ok()).map(Into::into),
        None => Some(raw.into()),
    }
}

/// Whether bytes open like JSON to some client: `{` or `[` after JSON whitespace, or a
/// byte order mark (UTF-8, UTF-16, UTF-32: lenient clients detect the encoding from it
/// and decode JSON behind it). `None` until a significant byte has arrived.
pub(crate) fn json_like(bytes: &[u8]) -> Option<bool> {
    const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";
    let start = bytes
        .iter()
        .position(|b| !matches!(*b, b' ' | b'\t' | b'\n' | b'\r'))?;
    let rest = &bytes[start..];
    match rest[0] {
        b'{' | b'[' => Some(true),
        // UTF-16/32 BOMs and the NUL that opens UTF-16BE / UTF-32BE JSON without one.
        0xfe | 0xff | 0x00 => Some(true),
        // A partial mark decides nothing yet.
        0xef if rest.len() < UTF8_BOM.len() && UTF8_BOM.starts_with(rest) => None,
        0xef => Some(rest.starts_with(UTF8_BOM)),
        _ => Some(false),
    }
}

/// What kind of request: the three methods that carry states, other JSON-RPC, and the
/// routes with no JSON-RPC body (`method` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodClass {
    ToolsCall,
    PromptsGet,
    ResourcesRead,
    /// Any other JSON-RPC method, a client's response, or a POST refused before its
    /// method was known.
    Other,
    /// A GET: a 2025-era server-to-client event stream.
    GetStream,
    /// A DELETE: a 2025-era session end.
    Delete,
    /// A configured `passthrough_paths` request, or another body-less method.
    Passthrough,
}

impl MethodClass {
    /// The class of a JSON-RPC method.
    pub(crate) fn of_method(method: &str) -> Self {
        match method {
            "tools/call" => MethodClass::ToolsCall,
            "prompts/get" => MethodClass::PromptsGet,
            "resources/read" => MethodClass::ResourcesRead,
            _ => MethodClass::Other,
        }
    }
}

crate::registry::labels!(pub MethodClass {
    ToolsCall => "tools/call",
    PromptsGet => "prompts/get",
    ResourcesRead => "resources/read",
    Other => "other",
    GetStream => "get_stream",
    Delete => "delete",
    Passthrough => "passthrough",
});

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_by_method() {
        assert_eq!(target_field("resources/read"), "uri");
        assert_eq!(target_field("tools/call"), "name");
        assert_eq!(target_field("tools/list"), "name");
        assert_eq!(header_target_field("tasks/cancel"), Some("taskId"));
        assert_eq!(header_target_field("tools/list"), None);
    }

    #[test]
    fn a_round_asks_by_result_type_or_by_its_requests() {
        let ask = |v: Value| asks_for_input(v.as_object().unwrap());
        assert!(ask(json!({"resultType": "input_required"})));
        assert!(ask(json!({"inputRequests": {}})));
        assert!(!ask(json!({"inputRequests": null})));
        assert!(!ask(json!({"resultType": "complete"})));
    }
}
