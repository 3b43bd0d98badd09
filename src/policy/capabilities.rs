//! Client capabilities (MCP 2026-07-28: a server MUST NOT send `inputRequests` the client
//! has not declared support for, and answers `-32021` with the missing capabilities).
//!
//! Invariant: a round is sealed only when every one of its input requests is one the
//! client declared it can answer, by the rules of the reference SDK
//! (`mcp/server/mcpserver/resolve.py`, `_require_capability`); an unknown input request
//! method is refused the same way (fail closed). Every missing capability is listed, not
//! only the first. Every name read here (`_meta`, [`CAPABILITIES_META`](crate::jsonrpc::CAPABILITIES_META), each capability)
//! is read through [`jsonrpc::lookup`]: the gate has already refused a look-alike of any
//! of them (`Elicitation`, `io.modelcontextprotocol/client_capabilities`), and should one
//! get here, the whole declaration counts for nothing (fail closed: `{"elicitation":
//! {"URL": {}}}` must not read as "form, since no url").

use super::questions::Question;
use crate::jsonrpc::{self, Lookup, Params};
use serde_json::{Map, Value, json};

/// What the client lacks for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Missing {
    /// `ClientCapabilities` listing everything missing (`data.requiredCapabilities`).
    pub(crate) required: Value,
    /// Input request methods nobody can declare support for (not in the protocol).
    pub unknown_methods: Vec<String>,
}

/// The client capabilities a request declared (`params._meta[...]`), if any.
pub(crate) fn declared(params: &Params<'_>) -> Option<Value> {
    params
        .declared_capabilities()
        .filter(|c| c.is_object() && jsonrpc::check_capabilities(c).is_ok())
}

/// Check every input request of a round against `declared`.
pub fn check(declared: Option<&Value>, questions: &[Question<'_>]) -> Result<(), Missing> {
    let declared = declared.filter(|d| jsonrpc::check_capabilities(d).is_ok());
    // Declared when every step is there and none is null (a null on the way is a scalar,
    // below which nothing is found).
    let has = |path: &[&str]| {
        declared.is_some_and(|declared| {
            matches!(jsonrpc::lookup(declared, path), Ok(Lookup::Found(v)) if !v.is_null())
        })
    };
    let mut required = Map::new();
    let mut unknown_methods = Vec::new();
    for question in questions {
        match &*question.method {
            "elicitation/create" => {
                if question.mode.as_deref() == Some("url") {
                    if !has(&["elicitation", "url"]) {
                        merge(&mut required, json!({"elicitation": {"url": {}}}));
                    }
                } else {
                    // A bare `elicitation: {}` (the only shape before modes existed) counts
                    // as form support; url-only does not.
                    let form = has(&["elicitation", "form"])
                        || (has(&["elicitation"]) && !has(&["elicitation", "url"]));
                    if !form {
                        merge(&mut required, json!({"elicitation": {"form": {}}}));
                    }
                }
            }
            "sampling/createMessage" => {
                let wants_tools = question.wants_tools;
                let ok = has(&["sampling"]) && (!wants_tools || has(&["sampling", "tools"]));
                if !ok {
                    let sampling = if wants_tools {
                        json!({"sampling": {"tools": {}}})
                    } else {
                        json!({"sampling": {}})
                    };
                    merge(&mut required, sampling);
                }
            }
            "roots/list" => {
                if !has(&["roots"]) {
                    merge(&mut required, json!({"roots": {}}));
                }
            }
            other => unknown_methods.push(other.to_owned()),
        }
    }
    if required.is_empty() && unknown_methods.is_empty() {
        return Ok(());
    }
    Err(Missing {
        required: Value::Object(required),
        unknown_methods,
    })
}

/// Deep-merge `extra` into `into` (objects only).
fn merge(into: &mut Map<String, Value>, extra: Value) {
    let Value::Object(extra) = extra else {
        return;
    };
    for (key, value) in extra {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(more)) => {
                merge(existing, Value::Object(more));
            }
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::CAPABILITIES_META;

    /// What `params` declares (nothing, when the gate refuses it).
    fn of(params: Value) -> Option<Value> {
        let mut body = crate::jsonrpc::ScannedBody::call("tools/call", &params).ok()?;
        declared(&body.call_mut().unwrap().1)
    }

    fn questions(list: &[Value]) -> Vec<Question<'_>> {
        list.iter().map(Question::of_value).collect()
    }

    fn form() -> Value {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": "m",
            "requestedSchema": {"type": "object", "properties": {}}}})
    }

    fn url() -> Value {
        json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m",
            "url": "https://x", "elicitationId": "e"}})
    }

    fn sampling(tools: bool) -> Value {
        let mut params = json!({"messages": [], "maxTokens": 10});
        if tools {
            params["tools"] = json!([]);
        }
        json!({"method": "sampling/createMessage", "params": params})
    }

    fn roots() -> Value {
        json!({"method": "roots/list"})
    }

    #[test]
    fn the_reference_rules() {
        let ok = |caps: Value, asks: &[Value]| check(Some(&caps), &questions(asks)).is_ok();
        // A bare elicitation object counts as form; url-only does not.
        assert!(ok(json!({"elicitation": {}}), &[form()]));
        assert!(ok(json!({"elicitation": {"form": {}}}), &[form()]));
        assert!(!ok(json!({"elicitation": {"url": {}}}), &[form()]));
        assert!(ok(json!({"elicitation": {"url": {}}}), &[url()]));
        assert!(!ok(json!({"elicitation": {}}), &[url()]));
        assert!(!ok(json!({"elicitation": {"form": {}}}), &[url()]));
        assert!(ok(json!({"sampling": {}}), &[sampling(false)]));
        assert!(!ok(json!({"sampling": {}}), &[sampling(true)]));
        assert!(ok(json!({"sampling": {"tools": {}}}), &[sampling(true)]));
        assert!(!ok(json!({}), &[roots()]));
        assert!(ok(json!({"roots": {"listChanged": true}}), &[roots()]));
        // A request without any declared capabilities can answer nothing.
        assert!(check(None, &questions(&[form()])).is_err());
        assert!(check(None, &questions(&[])).is_ok());
    }

    #[test]
    fn every_missing_capability_is_listed() {
        let missing = check(
            Some(&json!({"elicitation": {"url": {}}})),
            &questions(&[form(), sampling(true), roots(), json!({"method": "x/y"})]),
        )
        .unwrap_err();
        assert_eq!(
            missing.required,
            json!({"elicitation": {"form": {}}, "sampling": {"tools": {}}, "roots": {}})
        );
        assert_eq!(missing.unknown_methods, ["x/y"]);
    }

    #[test]
    fn declared_capabilities_come_from_meta() {
        let params = json!({"_meta": {CAPABILITIES_META: {"roots": {}}}});
        assert_eq!(of(params), Some(json!({"roots": {}})));
        assert_eq!(of(json!({"_meta": {}})), None);
        assert_eq!(declared(&Params::absent()), None);
    }

    /// The gate refuses these first ([`crate::jsonrpc::classify`]); here they declare
    /// nothing, so a round the client may not be able to answer is never sealed.
    #[test]
    fn a_look_alike_declares_nothing() {
        for params in [
            json!({"_meta": {"io.modelcontextprotocol/ClientCapabilities": {"roots": {}}}}),
            json!({"_meta": {CAPABILITIES_META: {}, "io.modelcontextprotocol/client_capabilities": {"roots": {}}}}),
            json!({"_Meta": {CAPABILITIES_META: {"roots": {}}}}),
            json!({"_meta": {CAPABILITIES_META: {"roots": {}}}, "meta": {}}),
        ] {
            assert_eq!(of(params.clone()), None, "{params}");
            let scanned = crate::jsonrpc::ScannedBody::call("tools/call", &params);
            assert!(scanned.is_err(), "the gate refuses {params}");
        }
        let ok = |caps: Value, asks: &[Value]| check(Some(&caps), &questions(asks)).is_ok();
        assert!(!ok(json!({"Roots": {}}), &[roots()]));
        assert!(!ok(json!({"roots": {}, "ROOTS": {}}), &[roots()]));
        assert!(!ok(json!({"elicitation": {"URL": {}}}), &[url()]));
        // Not "form, as no url is declared": the declaration is void.
        assert!(!ok(json!({"elicitation": {"URL": {}}}), &[form()]));
        assert!(!ok(json!({"roots": {}, "Sampling": {}}), &[roots()]));
        let lookalike = json!({"_meta": {CAPABILITIES_META: {"roots": {}, "ROOTS": {}}}});
        assert_eq!(of(lookalike), None);
        assert!(!ok(
            json!({"elicitation": {"url": {}, "Url": {}}}),
            &[url()]
        ));
        assert!(!ok(json!({"Elicitation": {}}), &[form()]));
        assert!(!ok(json!({"sampling": {"Tools": {}}}), &[sampling(true)]));
        assert!(!ok(json!({"sampling_": {}}), &[sampling(false)]));
        // A null capability is not declared (as before).
        assert!(!ok(json!({"roots": null}), &[roots()]));
        assert!(!ok(json!({"elicitation": null}), &[form()]));
    }
}
