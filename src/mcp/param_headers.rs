//! `Mcp-Param-*` headers (SEP-2243): a tool whose `inputSchema` property carries
//! `"x-mcp-header": "Region"` has the client mirror that argument into the header
//! `Mcp-Param-Region`, so that an intermediary can route on it without reading the body.
//! An HTTP server checks that the header and the argument agree; a stdio child sees no
//! headers, so in front of one the sidecar checks them ([`ParamHeaders::check`]), with
//! the schemas its bridge learned from the child's `tools/list`.
//!
//! The rules are the SDKs' (`mcp/shared/inbound.py`): an annotation counts only on a
//! property reached from the schema's root through `properties` alone, with a token
//! for a name, on a `string`, `integer` or `boolean` property, unique across the schema
//! whatever its case; a schema with any other annotation checks nothing (conforming
//! clients drop the tool). The header and the argument are present together (a `null`
//! argument is absent) and equal once a `=?base64?…?=` value is decoded; a repeated
//! header, a malformed base64 value, a header without its argument or an argument
//! without its header is a mismatch.

use base64_simd::STANDARD;
use http::HeaderMap;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// What a stdio bridge learned, shared with the gate that checks it (replaced whole on
/// each listing).
pub(crate) type LearnedParamHeaders = Arc<arc_swap::ArcSwap<ParamHeaders>>;

/// The annotation's key in a property's schema.
const ANNOTATION: &str = "x-mcp-header";
/// The header a token is joined to, lowercased (header names compare so).
const PREFIX: &str = "mcp-param-";
/// JSON Schema keywords whose value is one subschema, a list of them, or a map of them:
/// an annotation under any of them is off the `properties` chain (invalid).
const SUBSCHEMA_ONE: [&str; 11] = [
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
const SUBSCHEMA_LIST: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
const SUBSCHEMA_MAP: [&str; 4] = [
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];

/// One annotated argument of a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mirrored {
    /// The chain of `properties` keys from the arguments to the value.
    path: Vec<String>,
    /// `mcp-param-<token>`, lowercased.
    header: String,
    /// An `integer` property compares numerically (`42` matches `42.0`).
    integer: bool,
}

/// The mirrored arguments of every tool that has any, by tool name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ParamHeaders {
    tools: HashMap<String, Vec<Mirrored>>,
}

/// Why a call's `Mcp-Param-*` headers disagree with its arguments (never the values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamMismatch {
    Repeated,
    Malformed,
    WithoutArgument,
    Missing,
    Differs,
}

impl ParamMismatch {
    /// For the log.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Repeated => "an Mcp-Param header appears more than once",
            Self::Malformed => "an Mcp-Param header carries a malformed base64 value",
            Self::WithoutArgument => "an Mcp-Param header is present but its argument is absent",
            Self::Missing => "an Mcp-Param header is missing but its argument is present",
            Self::Differs => "an Mcp-Param header does not match its argument",
        }
    }
}

impl ParamHeaders {
    /// Learn the annotations of `tools` (a `tools/list` result's `tools`, one page or
    /// all of them); a later page adds to what earlier ones gave.
    pub(crate) fn learn(&mut self, tools: &[Value]) {
        for tool in tools {
            let (Some(name), Some(schema)) = (
                tool.get("name").and_then(Value::as_str),
                tool.get("inputSchema"),
            ) else {
                continue;
            };
            match mirrored(schema) {
                Some(mirrored) if !mirrored.is_empty() => {
                    self.tools.insert(name.to_owned(), mirrored);
                }
                _ => {
                    self.tools.remove(name);
                }
            }
        }
    }

    /// Whether any tool mirrors an argument.
    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Check a call of `tool` with `arguments` against its `Mcp-Param-*` headers.
    pub(crate) fn check(
        &self,
        tool: &str,
        arguments: Option<&Map<String, Value>>,
        headers: &HeaderMap,
    ) -> Result<(), ParamMismatch> {
        let Some(mirrored) = self.tools.get(tool) else {
            return Ok(());
        };
        for Mirrored {
            path,
            header,
            integer,
        } in mirrored
        {
            let mut values = headers.get_all(header.as_str()).iter();
            let raw = values.next();
            if raw.is_some() && values.next().is_some() {
                return Err(ParamMismatch::Repeated);
            }
            let value = arguments.and_then(|a| value_at(a, path));
            let rendered = value.and_then(render);
            match (raw, value, rendered) {
                (None, None, _) => {}
                (Some(_), None, _) => return Err(ParamMismatch::WithoutArgument),
                // No rendering (an object, say): a conforming client sent no header.
                (None, Some(_), None) => {}
                (Some(_), Some(_), None) => return Err(ParamMismatch::Differs),
                (None, Some(_), Some(_)) => return Err(ParamMismatch::Missing),
                (Some(raw), Some(value), Some(rendered)) => {
                    let decoded =
                        decode(raw.as_bytes().trim_ascii()).ok_or(ParamMismatch::Malformed)?;
                    if !matches(*integer, value, &rendered, &decoded) {
                        return Err(ParamMismatch::Differs);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The valid annotations of one `inputSchema`; `None` when it has an invalid one.
fn mirrored(schema: &Value) -> Option<Vec<Mirrored>> {
    let mut found = Vec::new();
    let mut seen = Vec::<String>::new();
    // (path from the root through `properties` alone, or `None` off that chain; node)
    let mut stack: Vec<(Option<Vec<String>>, &Value)> = vec![(Some(Vec::new()), schema)];
    while let Some((path, node)) = stack.pop() {
        let Value::Object(node) = node else {
            continue;
        };
        if let Some(token) = node.get(ANNOTATION) {
            let path = path.clone().filter(|p| !p.is_empty())?;
            let token = token.as_str().filter(|t| is_token(t))?;
            let kind = node.get("type").and_then(Value::as_str)?;
            if !matches!(kind, "string" | "integer" | "boolean") {
                return None;
            }
            let header = format!("{PREFIX}{}", token.to_ascii_lowercase());
            if seen.contains(&header) {
                return None;
            }
            seen.push(header.clone());
            found.push(Mirrored {
                path,
                header,
                integer: kind == "integer",
            });
        }
        for (keyword, value) in node {
            match (keyword.as_str(), value) {
                ("properties", Value::Object(properties)) => {
                    for (name, sub) in properties {
                        let path = path.as_ref().map(|p| {
                            let mut p = p.clone();
                            p.push(name.clone());
                            p
                        });
                        stack.push((path, sub));
                    }
                }
                (k, sub) if SUBSCHEMA_ONE.contains(&k) => stack.push((None, sub)),
                (k, Value::Array(subs)) if SUBSCHEMA_LIST.contains(&k) => {
                    stack.extend(subs.iter().map(|sub| (None, sub)));
                }
                (k, Value::Object(subs)) if SUBSCHEMA_MAP.contains(&k) => {
                    stack.extend(subs.values().map(|sub| (None, sub)));
                }
                _ => {}
            }
        }
    }
    Some(found)
}

/// RFC 9110 §5.6.2: a token (what a header name may be made of).
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The value at `path` in `arguments`; `None` when a step is missing or not an object,
/// or the value is `null`.
fn value_at<'a>(arguments: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (last, steps) = path.split_last()?;
    let mut node = arguments;
    for step in steps {
        node = node.get(step)?.as_object()?;
    }
    node.get(last).filter(|v| !v.is_null())
}

/// A value as a client mirrors it: a boolean as `true`/`false`, a string as itself, a
/// number as its digits; nothing else has a rendering.
fn render(value: &Value) -> Option<String> {
    match value {
        Value::Bool(b) => Some(b.to_string()),
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A header value, its `=?base64?…?=` form decoded ([`super::decode_header_value`]):
/// canonical base64 (no stray trailing bits: what a client's encoder writes) of UTF-8
/// only, as the SDKs decode `Mcp-Param-*` values.
fn decode(raw: &[u8]) -> Option<String> {
    let decoded = super::decode_header_value(raw)?;
    if let Some(payload) = raw
        .strip_prefix(b"=?base64?")
        .and_then(|r| r.strip_suffix(b"?="))
        && STANDARD.encode_to_string(&decoded).as_bytes() != payload
    {
        return None;
    }
    String::from_utf8(decoded.into_owned()).ok()
}

/// Whether a decoded header agrees with its argument: an integer property with an
/// integral value compares numerically against a plain decimal header, anything else
/// as rendered.
fn matches(integer: bool, value: &Value, rendered: &str, decoded: &str) -> bool {
    if integer
        && let Value::Number(n) = value
        && let Some((whole, fraction)) = plain_decimal(decoded)
        && let Some(integral) = integral(n)
    {
        return fraction.bytes().all(|b| b == b'0') && normalized(whole) == integral;
    }
    decoded == rendered
}

/// `-?digits(.digits)?` split at its point.
fn plain_decimal(text: &str) -> Option<(&str, &str)> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = whole.strip_prefix('-').unwrap_or(whole);
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (!text.contains('.')
            || (!fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit())));
    ok.then_some((whole, fraction))
}

/// A JSON number's integral value as normalized decimal digits, when it has one
/// (`42`, `42.0`, `4.2e1`); `None` for a fraction.
fn integral(n: &serde_json::Number) -> Option<String> {
    let literal = n.to_string();
    if let Some((whole, _)) = plain_decimal(&literal) {
        let (_, fraction) = literal.split_once('.').unwrap_or((&literal, ""));
        return fraction
            .bytes()
            .all(|b| b == b'0')
            .then(|| normalized(whole));
    }
    // An exponent: through f64, exact while it stays an integer f64 holds exactly.
    let value = n.as_f64()?;
    (value.fract() == 0.0 && value.abs() < 9.007_199_254_740_992e15)
        .then(|| normalized(&format!("{value:.0}")))
}

/// Digits without leading zeros, `-0` as `0`.
fn normalized(whole: &str) -> String {
    let (sign, digits) = match whole.strip_prefix('-') {
        Some(digits) => ("-", digits),
        None => ("", whole),
    };
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        "0".to_owned()
    } else {
        format!("{sign}{digits}")
    }
}

#[cfg(test)]
mod tests;
