//! The few JSON-RPC / MCP shapes the sidecar touches, parsed strictly.
//!
//! Invariant: a body is classified only if it is exactly one JSON value that every
//! reasonable parser reads the same way: UTF-8 without BOM, no trailing data, no duplicate
//! keys at any depth, and no key that a lenient upstream could take for one of the fields
//! the sidecar guards (`requestState` spelled `RequestState` or `request_state`, say:
//! pydantic models with `populate_by_name` accept the snake-case alias). Anything else is
//! refused before a byte reaches the upstream.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Fields whose every spelling the sidecar reserves, per level of the message.
pub const ENVELOPE_FIELDS: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];
const PARAMS_FIELDS: &[&str] = &[
    "requestState",
    "inputResponses",
    "name",
    "uri",
    "arguments",
    "_meta",
];
const RESULT_FIELDS: &[&str] = &["requestState", "resultType", "inputRequests"];
/// Folded spellings refused on the envelope itself.
const MISPLACED_FIELDS: &[&str] = &["requeststate", "inputresponses"];

/// Why a body could not be classified. Messages are safe for clients: they describe the
/// shape, never echo content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("body starts with a byte order mark")]
    Bom,
    #[error("body is not valid JSON")]
    Syntax,
    #[error("duplicate key in a JSON object")]
    DuplicateKey,
    #[error("key `{0}` is ambiguous with a reserved field")]
    AmbiguousKey(String),
    #[error("batches are not supported")]
    Batch,
    #[error("body must be a single JSON-RPC request, notification or response object")]
    NotAnObject,
    #[error("`jsonrpc` must be \"2.0\"")]
    Version,
    #[error("`method` must be a string")]
    Method,
    #[error("`params` must be an object")]
    Params,
    #[error("`id` must be a string, a number or null")]
    Id,
    #[error("`params.{0}` must be a string")]
    Target(&'static str),
    #[error("a message cannot be both a request and a response")]
    Mixed,
    #[error("a response may not carry a requestState")]
    StateInResponse,
}

impl ParseError {
    /// The JSON-RPC code a client gets: -32700 for text that is not one JSON value,
    /// -32600 for a JSON value that is not one acceptable message, -32602 for bad params.
    pub fn code(&self) -> i64 {
        match self {
            ParseError::Bom | ParseError::Syntax | ParseError::DuplicateKey => PARSE_ERROR,
            ParseError::Target(_) | ParseError::Params => INVALID_PARAMS,
            _ => INVALID_REQUEST,
        }
    }

    /// A closed label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ParseError::Bom => "bom",
            ParseError::Syntax => "syntax",
            ParseError::DuplicateKey => "duplicate_key",
            ParseError::AmbiguousKey(_) => "ambiguous_key",
            ParseError::Batch => "batch",
            ParseError::NotAnObject | ParseError::Mixed | ParseError::StateInResponse => {
                "not_a_message"
            }
            ParseError::Version => "version",
            ParseError::Method | ParseError::Id => "envelope",
            ParseError::Params | ParseError::Target(_) => "params",
        }
    }
}

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: a header disagrees with the body (or is repeated).
pub const HEADER_MISMATCH: i64 = -32020;

/// Parse one JSON value, refusing duplicate keys at any depth. Numbers keep their
/// literal spelling (`arbitrary_precision`), so re-serialising changes no number.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, ParseError> {
    if bytes.starts_with(b"\xef\xbb\xbf") {
        return Err(ParseError::Bom);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = match StrictSeed.deserialize(&mut de) {
        Ok(v) => v,
        Err(e) if e.to_string().starts_with(DUPLICATE_KEY) => return Err(ParseError::DuplicateKey),
        Err(e) if e.to_string().starts_with(PROTO_KEY) => {
            return Err(ParseError::AmbiguousKey(PROTO_KEY.into()));
        }
        Err(_) => return Err(ParseError::Syntax),
    };
    de.end().map_err(|_| ParseError::Syntax)?;
    Ok(value)
}

const DUPLICATE_KEY: &str = "duplicate key";
/// JavaScript's `JSON.parse` keeps `__proto__` as an own key, but an upstream that copies
/// params by assignment (`Object.assign`, deep merges) turns it into the prototype, so
/// `{"__proto__":{"requestState":..}}` reads as a requestState the gate never saw.
const PROTO_KEY: &str = "__proto__";
/// The key serde_json uses to smuggle an arbitrary-precision number through a map.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

struct StrictSeed;

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictSeed)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if first && key == NUMBER_TOKEN {
                // An arbitrary-precision number, not an object: keep the literal.
                let literal: String = map.next_value()?;
                return literal
                    .parse::<Number>()
                    .map(Value::Number)
                    .map_err(de::Error::custom);
            }
            first = false;
            if key == PROTO_KEY {
                return Err(de::Error::custom(PROTO_KEY));
            }
            let value = map.next_value_seed(StrictSeed)?;
            if object.insert(key, value).is_some() {
                return Err(de::Error::custom(DUPLICATE_KEY));
            }
        }
        Ok(Value::Object(object))
    }
}

/// A JSON-RPC id: string, number or null.
pub type Id = Value;

/// One classified JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request (has `method` and `id`) or a notification (`method`, no `id`). Its
    /// `params`, when present, is an object whose guarded fields were checked; it stays
    /// in the parsed value (no copy).
    Call { id: Option<Id>, method: String },
    /// A response the client sends to a server→client request (2025 era).
    Response { id: Id },
}

impl Message {
    pub fn id(&self) -> Option<&Id> {
        match self {
            Message::Call { id, .. } => id.as_ref(),
            Message::Response { id } => Some(id),
        }
    }
}

/// Classify a parsed client body. The envelope, `params` and the fields it carries are
/// checked; the payload is otherwise the upstream's business.
pub fn classify(value: &Value) -> Result<Message, ParseError> {
    let object = match value {
        Value::Object(o) => o,
        Value::Array(_) => return Err(ParseError::Batch),
        _ => return Err(ParseError::NotAnObject),
    };
    check_reserved(object, ENVELOPE_FIELDS)?;
    // The guarded params fields have no business at the top level, in any spelling.
    if let Some(key) = object
        .keys()
        .find(|k| MISPLACED_FIELDS.contains(&fold(k).as_str()))
    {
        return Err(ParseError::AmbiguousKey(printable(key)));
    }
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(ParseError::Version);
    }
    let id = match object.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id.clone()),
        Some(_) => return Err(ParseError::Id),
    };
    let is_response = object.contains_key("result") || object.contains_key("error");
    match object.get("method") {
        Some(Value::String(method)) => {
            if is_response {
                return Err(ParseError::Mixed);
            }
            match object.get("params") {
                None => {}
                Some(Value::Object(p)) => {
                    check_reserved(p, PARAMS_FIELDS)?;
                    for field in ["name", "uri"] {
                        if p.get(field).is_some_and(|v| !v.is_string()) {
                            return Err(ParseError::Target(field));
                        }
                    }
                }
                Some(_) => return Err(ParseError::Params),
            }
            Ok(Message::Call {
                id,
                method: method.clone(),
            })
        }
        Some(_) => Err(ParseError::Method),
        None if is_response && object.contains_key("params") => Err(ParseError::Mixed),
        None if is_response => {
            // A client's answer to a server request never carries our state; one that
            // does would reach the upstream unverified.
            if let Some(Value::Object(result)) = object.get("result") {
                check_result_fields(result)?;
                if result.contains_key("requestState") {
                    return Err(ParseError::StateInResponse);
                }
            }
            id.map(|id| Message::Response { id }).ok_or(ParseError::Id)
        }
        None => Err(ParseError::NotAnObject),
    }
}

/// The id of a parsed but refused message, when it has a valid one, so the error can
/// answer it.
pub fn best_effort_id(value: &Value) -> Option<Id> {
    match value.get("id")? {
        id @ (Value::String(_) | Value::Number(_)) => Some(id.clone()),
        _ => None,
    }
}

/// Refuse keys that are not one of `reserved` but read like one once case, `_`, `-` and
/// any other non-alphanumeric characters are ignored (`RequestState`, `request_state`,
/// `request-state`, `requestState\u0000`).
pub fn check_reserved(object: &Map<String, Value>, reserved: &[&str]) -> Result<(), ParseError> {
    for key in object.keys() {
        if reserved.contains(&key.as_str()) {
            continue;
        }
        let folded = fold(key);
        if reserved.iter().any(|r| fold(r) == folded) {
            return Err(ParseError::AmbiguousKey(printable(key)));
        }
    }
    Ok(())
}

/// Check the result of an upstream response the same way (a `request_state` there would
/// slip a plaintext past the sealer to a lenient client).
pub fn check_result_fields(result: &Map<String, Value>) -> Result<(), ParseError> {
    check_reserved(result, RESULT_FIELDS)
}

fn fold(key: &str) -> String {
    key.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A key as it may appear in an error message: printable ASCII only, bounded.
fn printable(key: &str) -> String {
    key.chars()
        .take(64)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

/// A JSON-RPC error body.
pub fn error_body(id: Option<&Id>, code: i64, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut error = Map::new();
    error.insert("code".into(), Value::from(code));
    error.insert("message".into(), Value::from(message));
    if let Some(data) = data {
        error.insert("data".into(), data);
    }
    let mut body = Map::new();
    body.insert("jsonrpc".into(), Value::from("2.0"));
    body.insert("id".into(), id.cloned().unwrap_or(Value::Null));
    body.insert("error".into(), Value::Object(error));
    serde_json::to_vec(&Value::Object(body)).expect("a JSON value always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<Value, ParseError> {
        parse_strict(text.as_bytes())
    }

    #[test]
    fn duplicate_keys_anywhere_are_refused() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"params":{"requestState":"x","requestState":"y"}}"#,
            r#"{"x":[{"deep":{"k":1,"k":1}}]}"#,
            r#"{"requestState":1,"request\u0053tate":2}"#,
        ] {
            assert_eq!(parse(text), Err(ParseError::DuplicateKey), "{text}");
        }
        assert!(parse(r#"{"a":{"k":1},"b":{"k":1}}"#).is_ok());
    }

    #[test]
    fn only_one_clean_value_parses() {
        assert_eq!(parse("\u{feff}{}"), Err(ParseError::Bom));
        assert_eq!(parse("{} {}"), Err(ParseError::Syntax));
        assert_eq!(parse("{}x"), Err(ParseError::Syntax));
        assert_eq!(parse(r#"{"a":"\ud800"}"#), Err(ParseError::Syntax));
        assert_eq!(parse_strict(b"{\"a\":\"\xff\"}"), Err(ParseError::Syntax));
        assert_eq!(parse(r#"{"a":NaN}"#), Err(ParseError::Syntax));
        assert_eq!(parse(""), Err(ParseError::Syntax));
        assert_eq!(
            parse(&format!("{}{}", "[".repeat(200), "]".repeat(200))),
            Err(ParseError::Syntax)
        );
        assert!(parse(" \n{}\r\n ").is_ok());
    }

    #[test]
    fn numbers_keep_their_spelling() {
        // serde_json normalises only the exponent's spelling (`1E2` -> `1e+2`).
        let text = r#"{"a":1E2,"b":123456789012345678901234567890,"c":-0.0,"d":1.50}"#;
        let v = parse(text).unwrap();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"a":1e+2,"b":123456789012345678901234567890,"c":-0.0,"d":1.50}"#
        );
    }

    #[test]
    fn classify_requests_notifications_and_responses() {
        let call = parse(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#)
            .unwrap();
        assert!(matches!(
            classify(&call),
            Ok(Message::Call { id: Some(_), .. })
        ));
        let note = parse(r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#).unwrap();
        assert!(matches!(
            classify(&note),
            Ok(Message::Call { id: None, .. })
        ));
        let resp = parse(r#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}"#).unwrap();
        assert_eq!(classify(&resp), Ok(Message::Response { id: json!("s-1") }));
    }

    #[test]
    fn classify_refusals() {
        let cases = [
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#,
                ParseError::Batch,
            ),
            (r#""text""#, ParseError::NotAnObject),
            (
                r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
                ParseError::Version,
            ),
            (r#"{"id":1,"method":"x"}"#, ParseError::Version),
            (r#"{"jsonrpc":"2.0","id":1,"method":5}"#, ParseError::Method),
            (r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#, ParseError::Id),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
                ParseError::Params,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","result":{}}"#,
                ParseError::Mixed,
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, ParseError::NotAnObject),
            (r#"{"jsonrpc":"2.0","result":{}}"#, ParseError::Id),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"requestState":"x"}}"#,
                ParseError::StateInResponse,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"request_state":"x"}}"#,
                ParseError::AmbiguousKey("request_state".into()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
                ParseError::Target("name"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":null}}"#,
                ParseError::Target("uri"),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(classify(&parse(text).unwrap()), Err(expected), "{text}");
        }
    }

    #[test]
    fn ambiguous_spellings_of_guarded_fields_are_refused() {
        for key in [
            "RequestState",
            "request_state",
            "REQUEST-STATE",
            "requestState\u{0}",
            "input_responses",
            "Name",
            "_URI",
        ] {
            let params = json!({"name": "x", key: "v"});
            let envelope =
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
            let err = classify(&envelope).unwrap_err();
            assert!(matches!(err, ParseError::AmbiguousKey(_)), "{key}: {err:?}");
        }
        for key in ["Params", "METHOD", "json_rpc", "ID", "Result"] {
            let top = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", key: "v"});
            assert!(
                matches!(classify(&top), Err(ParseError::AmbiguousKey(_))),
                "{key}"
            );
        }
        // Unrelated keys, and the exact names, are fine.
        let ok = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "x", "requestState": "t", "inputResponses": {}, "stateful": 1}});
        assert!(classify(&ok).is_ok());
        assert!(check_result_fields(json!({"request_state": "x"}).as_object().unwrap()).is_err());
    }

    #[test]
    fn prototype_keys_and_misplaced_state_are_refused() {
        let proto = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","__proto__":{"requestState":"f"}}}"#;
        assert_eq!(
            parse(proto),
            Err(ParseError::AmbiguousKey("__proto__".into()))
        );
        assert!(parse(r#"{"a":[{"b":{"__proto__":1}}]}"#).is_err());
        assert!(parse(r#"{"proto":1,"__proto":2}"#).is_ok());
        for key in ["requestState", "request_state", "inputResponses"] {
            let top =
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", key: "x", "params": {}});
            assert!(
                matches!(classify(&top), Err(ParseError::AmbiguousKey(_))),
                "{key}"
            );
        }
    }

    #[test]
    fn error_bodies() {
        let body = error_body(
            Some(&json!(3)),
            INVALID_PARAMS,
            "Invalid or expired requestState",
            Some(json!({"reason": "invalid_request_state"})),
        );
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Invalid or expired requestState","data":{"reason":"invalid_request_state"}}}"#
        );
        let body = error_body(None, PARSE_ERROR, "Parse error", None);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
        );
    }
}
