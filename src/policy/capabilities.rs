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
use crate::jsonrpc::{self, DECLARED_PATHS, Index, JsonView, Lookup, Params};
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
        let mut paths = 0;
        for (i, path) in DECLARED_PATHS.into_iter().enumerate() {
            if has(path) {
                paths |= 1 << i;
            }
        }
        Some(Self::of_paths(paths))
    }

    /// What the gate's scan read of a body's declaration: what [`declared`] answers for
    /// the call (for the differential checks, which hold it to [`Declared::of`]).
    pub fn of_index(index: &Index) -> Option<Declared> {
        index.declared_paths().map(Self::of_paths)
    }

    /// From the bits of [`DECLARED_PATHS`] a declaration holds (bit `i`: the `i`-th).
    fn of_paths(paths: u8) -> Declared {
        let has = |i: usize| paths & (1 << i) != 0;
        Declared {
            elicitation: has(0),
            form: has(1),
            url: has(2),
            sampling: has(3),
            tools: has(4),
            roots: has(5),
        }
    }
}

/// The client capabilities a request declared (`params._meta[...]`), if any: as the
/// gate's scan read them on its way, not read again (the tests hold this to
/// [`Declared::of`] the declaration's text). Nothing declared, or no object: `None`.
pub(crate) fn declared(params: &Params<'_>) -> Option<Declared> {
    params.declared_paths().map(Declared::of_paths)
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
    use crate::jsonrpc::{CAPABILITIES_META, LiteArena, LiteJson};

    /// What `params` declares (nothing, when the gate refuses it), as the scan read it,
    /// held to [`Declared::of`] over the declaration's text and over its tree.
    fn of(params: Value) -> Option<Declared> {
        let mut body = crate::jsonrpc::ScannedBody::call("tools/call", &params).ok()?;
        let params_view = body.call_mut().unwrap().1;
        let scanned = declared(&params_view);
        let arena = LiteArena::new();
        let text = params_view.declared_capabilities();
        let by_text = text.and_then(|t| Declared::of(&LiteJson::read(t, &arena)?));
        assert_eq!(
            scanned, by_text,
            "the scan's reading and the text's: {params}"
        );
        let tree = (params.get("_meta")).and_then(|meta| meta.get(CAPABILITIES_META));
        assert_eq!(
            scanned,
            tree.and_then(Declared::of),
            "the scan's and the tree's: {params}"
        );
        scanned
    }

    /// The scan's reading of a declaration is the tree's, whatever it holds: names the
    /// policy asks about and others, nulls, scalars and arrays where objects are read,
    /// nested deeper than asked, escaped spellings.
    #[test]
    fn the_scan_reads_a_declaration_as_the_tree_does() {
        let declarations = [
            json!({}),
            json!({"elicitation": {}}),
            json!({"elicitation": {"form": {}, "url": {}}}),
            json!({"elicitation": {"form": null, "url": 1}}),
            json!({"elicitation": null, "sampling": {"tools": null}}),
            json!({"elicitation": [{"form": {}}], "sampling": "yes", "roots": false}),
            json!({"elicitation": {"form": {"url": {}}}, "sampling": {"tools": []}}),
            json!({"roots": {"listChanged": true}, "experimental": {"elicitation": {}}}),
            json!({"sampling": {"tools": {}, "context": {}}, "roots": null}),
            json!({"elicitation": "form"}),
            json!(null),
            json!([{"roots": {}}]),
            json!("roots"),
        ];
        for declaration in declarations {
            of(json!({"_meta": {CAPABILITIES_META: declaration}}));
            of(json!({"name": "t", "_meta": {"other": {}, CAPABILITIES_META: declaration}}));
        }
        of(json!({"_meta": null}));
        of(json!({"_meta": {"roots": {}}}));
        // Escaped spellings of the names read are the names.
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","_meta":{{"{CAPABILITIES_META}":{{"\u0065licitation":{{"f\u006frm":{{}}}},"roots":{{}}}}}}}}}}"#
        );
        let mut body = crate::jsonrpc::ScannedBody::scan(body.into(), 1000).unwrap();
        let params = body.call_mut().unwrap().1;
        let expected = Declared {
            elicitation: true,
            form: true,
            roots: true,
            ..Declared::default()
        };
        assert_eq!(declared(&params), Some(expected));
    }

    proptest::proptest! {
        /// Any declaration built of the names read and one other, of objects, nulls and
        /// scalars, three levels deep: the scan's reading is the tree's.
        #[test]
        fn the_scan_reads_any_declaration_as_the_tree_does(declaration in declaration_tree()) {
            of(json!({"_meta": {CAPABILITIES_META: declaration}}));
        }
    }

    fn declaration_tree() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(json!(null)),
            Just(json!({})),
            Just(json!(1)),
            Just(json!([]))
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            let name = prop_oneof![
                Just("elicitation"),
                Just("form"),
                Just("url"),
                Just("sampling"),
                Just("tools"),
                Just("roots"),
                Just("other"),
            ];
            proptest::collection::btree_map(name, inner, 0..4).prop_map(|members| {
                Value::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect(),
                )
            })
        })
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
