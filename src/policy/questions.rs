//! What a round asks: per `inputRequests` key, the little of each input request the rules
//! act on (its method, an elicitation's mode and schema, whether a sampling request
//! wants tools). The capability check and the recorded questions ([`super::answers`])
//! both read this, not the request itself.
//!
//! Invariant: read from the upstream's bytes ([`Round::scanned`], the sealer's path) or
//! from a tree (`Round::of_tree`, the reference the fuzz oracle keeps behind the `oracle`
//! feature), a round is the same: a member is found only under its exact key, a method
//! or mode that is not a string reads as none, and a schema is kept as it came (its text
//! on the sealer's path, written canonically into the token without a tree; the same
//! bytes as the tree's, which the `answers` fuzz check and the unit tests hold).

use crate::jsonrpc::{self, Cursor, JsonKind};
#[cfg(any(test, feature = "oracle"))]
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::ops::Range;

/// One input request, as far as the rules read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question<'a> {
    /// `method`; empty when it is missing or not a string.
    pub(crate) method: Cow<'a, str>,
    /// `params.mode`, when a string.
    pub(crate) mode: Option<Cow<'a, str>>,
    /// `params.requestedSchema`, whatever it is (`null` included), when present.
    pub(crate) schema: Option<Schema<'a>>,
    /// `params.tools` or `params.toolChoice` is present and not `null`.
    pub(crate) wants_tools: bool,
}

/// A requested schema, as the round was read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Schema<'a> {
    /// Its JSON text in the upstream's answer, which the answer scanner accepted
    /// (written canonically into the token without building its tree).
    Text(&'a str),
    /// Its tree (the oracle's reading).
    #[cfg(any(test, feature = "oracle"))]
    Tree(&'a Value),
}

impl Schema<'_> {
    /// About how long its canonical text will be: what a writer sizes its buffer by.
    pub(crate) fn text_len_hint(&self) -> usize {
        match self {
            Schema::Text(text) => text.len(),
            #[cfg(any(test, feature = "oracle"))]
            Schema::Tree(_) => 256,
        }
    }
}

/// A round's input requests: the keys asked, in order, and what each asks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Round<'a> {
    pub(crate) asked: Vec<String>,
    pub questions: Vec<Question<'a>>,
}

impl<'a> Round<'a> {
    #[cfg(any(test, feature = "oracle"))]
    /// The round of an `inputRequests` object read as a tree.
    pub fn of_tree(requests: &'a Map<String, Value>) -> Self {
        Round {
            asked: requests.keys().cloned().collect(),
            questions: requests.values().map(Question::of_value).collect(),
        }
    }

    /// The round of the `inputRequests` object at `span` of `text`, an answer the scanner
    /// accepted. Nothing is parsed: a schema is kept as its text, and the bytes are walked
    /// once (each request's `params` read in place, what is not read skipped).
    pub fn scanned(text: &'a str, span: Range<usize>) -> Self {
        let mut round = Round::default();
        jsonrpc::each_member(&mut Cursor::new(text, span), |cursor, key, kind| {
            round.questions.push(Question::scanned(cursor, kind));
            round.asked.push(key.into_owned());
        });
        round
    }
}

impl<'a> Question<'a> {
    #[cfg(any(test, feature = "oracle"))]
    /// The question of one input request read as a tree.
    pub(crate) fn of_value(request: &'a Value) -> Self {
        let params = request.get("params");
        let param = |key: &str| params.and_then(|p| p.get(key));
        Question {
            method: Cow::Borrowed(request.get("method").and_then(Value::as_str).unwrap_or("")),
            mode: param("mode").and_then(Value::as_str).map(Cow::Borrowed),
            schema: param("requestedSchema").map(Schema::Tree),
            wants_tools: ["tools", "toolChoice"]
                .iter()
                .any(|key| param(key).is_some_and(|v| !v.is_null())),
        }
    }

    /// The question of the input request of `kind` at the cursor, read in place (the
    /// cursor past what was read: the walk skips the rest).
    fn scanned(cursor: &mut Cursor<'a>, kind: JsonKind) -> Self {
        let mut question = Question {
            method: Cow::Borrowed(""),
            mode: None,
            schema: None,
            wants_tools: false,
        };
        if kind != JsonKind::Object {
            return question;
        }
        jsonrpc::each_member(cursor, |cursor, key, kind| match &*key {
            "method" => question.method = cursor.string().unwrap_or_default(),
            "params" if kind == JsonKind::Object => {
                jsonrpc::each_member(cursor, |cursor, key, kind| match &*key {
                    "mode" => question.mode = cursor.string(),
                    "requestedSchema" => {
                        question.schema = cursor.text().map(Schema::Text);
                    }
                    "tools" | "toolChoice" if kind != JsonKind::Null => {
                        question.wants_tools = true;
                    }
                    _ => {}
                });
            }
            _ => {}
        });
        question
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A question as both readings must agree on it, the schema as a tree.
    #[derive(Debug, PartialEq)]
    struct Read {
        method: String,
        mode: Option<String>,
        schema: Option<Value>,
        wants_tools: bool,
    }

    fn read(q: &Question<'_>) -> Read {
        Read {
            method: q.method.to_string(),
            mode: q.mode.as_ref().map(|m| m.to_string()),
            schema: q.schema.as_ref().map(|schema| match schema {
                Schema::Text(text) => serde_json::from_str(text).unwrap(),
                Schema::Tree(value) => (*value).clone(),
            }),
            wants_tools: q.wants_tools,
        }
    }

    /// Both readings of `requests`, which must agree: the keys asked, and the questions.
    fn both(requests: &Value) -> (Vec<String>, Vec<Read>) {
        let map = requests.as_object().unwrap();
        let tree = Round::of_tree(map);
        let text = serde_json::to_string(requests).unwrap();
        let scanned = Round::scanned(&text, 0..text.len());
        let reads = |round: &Round<'_>| round.questions.iter().map(read).collect::<Vec<_>>();
        assert_eq!(scanned.asked, tree.asked, "{text}");
        assert_eq!(reads(&scanned), reads(&tree), "{text}");
        assert!(
            scanned
                .questions
                .iter()
                .all(|q| matches!(q.schema, None | Some(Schema::Text(_)))),
            "the scanned reading keeps a schema as its text"
        );
        (tree.asked.clone(), reads(&tree))
    }

    #[test]
    fn reads_what_the_rules_act_on_from_bytes_as_from_a_tree() {
        let (asked, q) = both(&json!({
            "form": {"method": "elicitation/create",
                     "params": {"mode": "form", "message": "m",
                                "requestedSchema": {"type": "object", "properties": {}}}},
            "link": {"method": "elicitation/create", "params": {"mode": "url", "url": "u"}},
            "llm": {"method": "sampling/createMessage", "params": {"tools": [], "maxTokens": 5}},
            "calm": {"method": "sampling/createMessage", "params": {"tools": null, "toolChoice": null}},
            "dirs": {"method": "roots/list"}
        }));
        assert_eq!(asked, ["form", "link", "llm", "calm", "dirs"]);
        assert_eq!(
            (&*q[0].method, q[0].mode.as_deref()),
            ("elicitation/create", Some("form"))
        );
        assert_eq!(
            q[0].schema,
            Some(json!({"type": "object", "properties": {}}))
        );
        assert_eq!((q[1].mode.as_deref(), &q[1].schema), (Some("url"), &None));
        assert!(q[2].wants_tools && !q[3].wants_tools);
        assert_eq!((&*q[4].method, q[4].mode.as_ref()), ("roots/list", None));
    }

    #[test]
    fn what_is_not_the_expected_type_reads_as_absent_either_way() {
        let (_, q) = both(&json!({
            "a": "elicitation/create",
            "b": {"method": 7, "params": {"mode": ["url"]}},
            "c": {"method": "elicitation/create", "params": "mode"},
            "d": {"method": "elicitation/create", "params": {"requestedSchema": null}},
            "e": {"Method": "roots/list", "params": {"Mode": "url", "TOOLS": []}},
            "f": {"method": "elicit\u{e9}\"\\", "params": {"mode": "u\u{1F600}"}},
            "g": {"method": "x", "params": {"mode": "url", "mode2": "form"}, "method2": "y"}
        }));
        assert!(
            q[..3]
                .iter()
                .all(|q| q.mode.is_none() && q.schema.is_none())
        );
        assert_eq!((&*q[0].method, &*q[1].method), ("", ""));
        assert_eq!(q[3].schema, Some(Value::Null));
        assert_eq!(
            (&*q[4].method, q[4].mode.as_ref(), q[4].wants_tools),
            ("", None, false)
        );
        assert_eq!(
            (&*q[5].method, q[5].mode.as_deref()),
            ("elicit\u{e9}\"\\", Some("u\u{1F600}"))
        );
        assert_eq!((&*q[6].method, q[6].mode.as_deref()), ("x", Some("url")));
    }

    #[test]
    fn an_empty_round_and_a_span_that_is_no_object_ask_nothing() {
        assert_eq!(both(&json!({})), (vec![], vec![]));
        assert_eq!(Round::scanned("[1]", 0..3), Round::default());
    }
}
