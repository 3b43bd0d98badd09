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
use crate::jsonrpc::{self, JsonView, LiteArena, LiteJson, Lookup, Params};
use serde_json::{Map, Value, json};

/// What the client lacks for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Missing {
    /// `ClientCapabilities` listing everything missing (`data.requiredCapabilities`).
    pub(crate) required: Value,
    /// Input request methods nobody can declare support for (not in the protocol).
    pub unknown_methods: Vec<String>,
}

/// What a request declared it can answer: each capability the rules ask about, read
/// once where the request is (the declaration itself is not kept for the response).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Declared {
    elicitation: bool,
    form: bool,
    url: bool,
    sampling: bool,
    tools: bool,
    roots: bool,
}

impl Declared {
    /// Read a `ClientCapabilities` object; `None` when it is no object, or when a name
    /// the rules read has a look-alike (the whole declaration counts for nothing).
    pub fn of<V: JsonView>(declared: &V) -> Option<Declared> {
        if !declared.is_object() || jsonrpc::check_capabilities(declared).is_err() {
            return None;
        }
        // Declared when every step is there and none is null (a null on the way is a
        // scalar, below which nothing is found).
        let has = |path: &[&str]| matches!(jsonrpc::lookup(declared, path), Ok(Lookup::Found(v)) if !v.is_null());
        Some(Declared {
            elicitation: has(&["elicitation"]),
            form: has(&["elicitation", "form"]),
            url: has(&["elicitation", "url"]),
            sampling: has(&["sampling"]),
            tools: has(&["sampling", "tools"]),
            roots: has(&["roots"]),
        })
    }
}

/// The client capabilities a request declared (`params._meta[...]`), if any: read over
/// the body's text. (Should the scan's span not read, nothing is declared: no round is
/// sealed that the client may not answer.)
pub(crate) fn declared(params: &Params<'_>, arena: &LiteArena) -> Option<Declared> {
    let text = params.declared_capabilities()?;
    Declared::of(&LiteJson::read(text, arena)?)
}

/// Check every input request of a round against what the client declared.
pub fn check(declared: Option<Declared>, questions: &[Question<'_>]) -> Result<(), Missing> {
    let declared = declared.unwrap_or_default();
    let mut required = Map::new();
    let mut unknown_methods = Vec::new();
    for question in questions {
        match &*question.method {
            "elicitation/create" => {
                if question.mode.as_deref() == Some("url") {
                    if !declared.url {
                        merge(&mut required, json!({"elicitation": {"url": {}}}));
                    }
                } else {
                    // A bare `elicitation: {}` (the only shape before modes existed) counts
                    // as form support; url-only does not.
                    let form = declared.form || (declared.elicitation && !declared.url);
                    if !form {
                        merge(&mut required, json!({"elicitation": {"form": {}}}));
                    }
                }
            }
            "sampling/createMessage" => {
                let wants_tools = question.wants_tools;
                let ok = declared.sampling && (!wants_tools || declared.tools);
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
                if !declared.roots {
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
    fn of(params: Value) -> Option<Declared> {
        let mut body = crate::jsonrpc::ScannedBody::call("tools/call", &params).ok()?;
        declared(&body.call_mut().unwrap().1, &LiteArena::new())
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
        let ok = |caps: Value, asks: &[Value]| check(Declared::of(&caps), &questions(asks)).is_ok();
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
            Declared::of(&json!({"elicitation": {"url": {}}})),
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
        let roots = Declared {
            roots: true,
            ..Declared::default()
        };
        assert_eq!(of(params), Some(roots));
        assert_eq!(of(json!({"_meta": {}})), None);
        assert_eq!(declared(&Params::absent(), &LiteArena::new()), None);
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
        let ok = |caps: Value, asks: &[Value]| check(Declared::of(&caps), &questions(asks)).is_ok();
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
