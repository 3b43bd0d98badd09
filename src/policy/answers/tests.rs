//! Tests of the answer rules: what a round records and what an answer must be.

use super::*;
use crate::jsonrpc::{LiteArena, LiteJson};
use crate::policy::questions::Round;
use serde_json::{Map, json};

/// The questions recorded for `requests`, read as a tree and from its text: both
/// readings record the same claim text (or refuse alike), given back as a tree.
fn record_tree(requests: &Map<String, Value>) -> Result<Value, QuestionsTooLarge> {
    let text = serde_json::to_string(requests).unwrap();
    let from_text = record(Round::scanned(&text, 0..text.len()));
    let from_tree = record(Round::of_tree(requests));
    assert_eq!(from_text, from_tree, "{text}");
    from_tree.map(|(_, questions)| serde_json::from_str(&questions).unwrap())
}

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "region": {"type": "string", "enum": ["eu", "us"]},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"},
                                              {"const": "l", "title": "Large"}]},
        "name": {"type": "string", "minLength": 2, "maxLength": 5},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "count": {"type": "integer", "minimum": 1, "maximum": 3},
        "ratio": {"type": "number", "maximum": 1.5},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                 "maxItems": 1}
    }, "required": ["region"]})
}

fn questions() -> Value {
    let requests = json!({
        "form": {"method": "elicitation/create",
                 "params": {"mode": "form", "message": "m", "requestedSchema": schema()}},
        "link": {"method": "elicitation/create",
                 "params": {"mode": "url", "message": "m", "url": "https://x"}},
        "llm": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}},
        "dirs": {"method": "roots/list"}
    });
    record_tree(requests.as_object().unwrap()).unwrap()
}

/// The verdict on `responses`, the same whether both are read as trees, over their
/// text, or one of each (what the sidecar reads after an edit).
fn check_both(questions: &Value, responses: &Value) -> Result<(), BadAnswer> {
    let all = |_: &str| true;
    let tree = check(questions, responses, all);
    let (questions_text, responses_text) = (questions.to_string(), responses.to_string());
    let arena = LiteArena::new();
    let lite_questions = LiteJson::read(&questions_text, &arena).unwrap();
    let lite_responses = LiteJson::read(&responses_text, &arena).unwrap();
    assert_eq!(check(&lite_questions, &lite_responses, all), tree);
    assert_eq!(check(&lite_questions, responses, all), tree);
    tree
}

fn answer(key: &str, answer: Value) -> Result<(), BadAnswer> {
    let responses = json!({key: answer});
    check_both(&questions(), &responses)
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

#[test]
fn valid_answers_pass() {
    let full = json!({"region": "eu", "size": "l", "name": "abc", "email": "a@b.co",
        "site": "https://x.example/a", "day": "2024-02-29", "at": "2026-12-01T04:08:54.5Z",
        "count": 3, "ratio": 1.5, "ok": false, "tags": ["b"]});
    assert_eq!(answer("form", accept(full)), Ok(()));
    assert_eq!(answer("form", accept(json!({"region": "us"}))), Ok(()));
    assert_eq!(answer("form", json!({"action": "decline"})), Ok(()));
    assert_eq!(answer("form", json!({"action": "cancel"})), Ok(()));
    assert_eq!(answer("link", json!({"action": "accept"})), Ok(()));
    let sampled = json!({"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "hi"}});
    assert_eq!(answer("llm", sampled), Ok(()));
    let roots = json!({"roots": [{"uri": "file:///home", "name": "home"}]});
    assert_eq!(answer("dirs", roots), Ok(()));
}

#[test]
fn each_broken_rule_is_named() {
    let cases = [
        (
            "form",
            accept(json!({"region": 1})),
            "\"region\" must be a string",
        ),
        (
            "form",
            accept(json!({"region": "mars"})),
            "values the schema lists",
        ),
        (
            "form",
            accept(json!({"size": "s"})),
            "required field \"region\"",
        ),
        (
            "form",
            accept(json!({"region": "eu", "name": "abcdef"})),
            "maxLength 5",
        ),
        (
            "form",
            accept(json!({"region": "eu", "name": "a"})),
            "minLength 2",
        ),
        (
            "form",
            accept(json!({"region": "eu", "email": "nope"})),
            "email",
        ),
        (
            "form",
            accept(json!({"region": "eu", "site": "no scheme"})),
            "URI",
        ),
        (
            "form",
            accept(json!({"region": "eu", "day": "2023-02-29"})),
            "date",
        ),
        (
            "form",
            accept(json!({"region": "eu", "at": "2026-12-01 04:08"})),
            "date-time",
        ),
        (
            "form",
            accept(json!({"region": "eu", "count": 2.5})),
            "integer",
        ),
        (
            "form",
            accept(json!({"region": "eu", "count": 4})),
            "maximum 3",
        ),
        (
            "form",
            accept(json!({"region": "eu", "ok": "yes"})),
            "boolean",
        ),
        (
            "form",
            accept(json!({"region": "eu", "tags": ["a", "b"]})),
            "maxItems 1",
        ),
        (
            "form",
            accept(json!({"region": "eu", "tags": ["z"]})),
            "values the schema lists",
        ),
        (
            "form",
            accept(json!({"region": "eu", "admin": true})),
            "does not ask for",
        ),
        (
            "form",
            accept(json!({"region": {"nested": 1}})),
            "must be a string",
        ),
        ("form", json!({"action": "accept"}), "must carry content"),
        (
            "form",
            json!({"action": "decline", "content": {}}),
            "only when the action is accept",
        ),
        (
            "form",
            json!({"role": "assistant", "model": "m",
            "content": {"type": "text", "text": "x"}}),
            "elicitation result",
        ),
        ("link", accept(json!({"x": 1})), "without content"),
        ("llm", json!({"action": "accept"}), "sampling result"),
        (
            "dirs",
            json!({"roots": [{"uri": "https://x"}]}),
            "file:// uri",
        ),
        ("dirs", json!("text"), "result object"),
    ];
    for (key, bad, needle) in cases {
        let refused = answer(key, bad.clone()).unwrap_err();
        assert_eq!(refused.key, key);
        assert!(refused.rule.contains(needle), "{bad}: {}", refused.rule);
    }
}

#[test]
fn large_schemas_are_refused_when_recorded() {
    let big = json!({"q": {"method": "elicitation/create", "params": {"requestedSchema":
        {"type": "object", "properties": {"x": {"type": "string",
            "enum": vec!["v".repeat(100); 200]}}}}}});
    assert_eq!(
        record_tree(big.as_object().unwrap()),
        Err(QuestionsTooLarge)
    );
}

#[test]
fn schemas_a_token_cannot_carry_are_refused_when_recorded() {
    // Found by the `answers` fuzz target: `1e400` became `Infinity` in the token,
    // which then never opened; an integer Python cannot read made minting panic. (The
    // requests are read from their compact text: a schema of integers is copied as it
    // stands, one with a float written again.)
    let asking = |number: &str| {
        let text = format!(
            r#"{{"q":{{"method":"elicitation/create","params":{{"requestedSchema":
            {{"type":"object","properties":{{"x":{{"type":"number","maximum":{number}}}}}}}}}}}}}"#
        );
        let requests = crate::jsonrpc::parse_bounded(text.as_bytes(), 100).unwrap();
        record_tree(requests.as_object().unwrap())
    };
    for number in ["1e400", "-1e400", &"9".repeat(4301)] {
        assert_eq!(asking(number), Err(QuestionsTooLarge), "{number:.20}");
    }
    for number in ["1e308", "1.50", &"9".repeat(4300)] {
        assert!(asking(number).is_ok(), "{number:.20}");
    }
}

/// Review finding 2: an answer's look-alike members skipped the check (only the exact
/// `action` / `content` were read) while a case-folding upstream reads them.
#[test]
fn look_alike_members_of_an_answer_are_refused() {
    let cases = [
        (
            "form",
            json!({"action": "decline", "ACTION": "accept",
                "Content": {"region": "ap-evil-1", "admin": true}}),
            "another key reads like its member \"action\"",
        ),
        (
            "form",
            json!({"ACTION": "accept", "content": {"region": "eu"}}),
            "another key reads like its member \"action\"",
        ),
        (
            "form",
            json!({"action": "decline", "Content": {"region": "eu"}}),
            "another key reads like its member \"content\"",
        ),
        (
            "form",
            json!({"action": "accept", "content": {"region": "eu"}, "_Meta": {}}),
            "another key reads like its member \"_meta\"",
        ),
        (
            "llm",
            json!({"role": "assistant", "Role": "user", "model": "m",
                "content": {"type": "text", "text": "hi"}}),
            "another key reads like its member \"role\"",
        ),
        (
            "llm",
            json!({"role": "assistant", "MODEL": "other", "model": "m",
                "content": {"type": "text", "text": "hi"}}),
            "another key reads like its member \"model\"",
        ),
        (
            "llm",
            json!({"role": "assistant", "model": "m", "stop_reason": "endTurn",
                "content": {"type": "text", "text": "hi"}}),
            "another key reads like its member \"stopReason\"",
        ),
        (
            "llm",
            json!({"role": "assistant", "model": "m",
                "content": {"type": "text", "Type": "image", "text": "hi"}}),
            "content block reads like \"type\"",
        ),
        (
            "dirs",
            json!({"roots": [], "Roots": [{"uri": "file:///etc"}]}),
            "another key reads like its member \"roots\"",
        ),
        (
            "dirs",
            json!({"ROOTS": [{"uri": "file:///etc"}]}),
            "another key reads like its member \"roots\"",
        ),
        (
            "dirs",
            json!({"roots": [{"uri": "file:///home", "URI": "file:///etc"}]}),
            "another key reads like its member \"uri\"",
        ),
        (
            "dirs",
            json!({"roots": [{"uri": "file:///home", "Name": "etc"}]}),
            "another key reads like its member \"name\"",
        ),
    ];
    for (key, bad, needle) in cases {
        let refused = answer(key, bad.clone()).unwrap_err();
        assert_eq!(refused.key, key);
        assert!(refused.rule.contains(needle), "{bad}: {}", refused.rule);
        assert!(!refused.rule.contains("ap-evil-1"), "{}", refused.rule);
    }
}

#[test]
fn members_an_answer_type_does_not_define_are_refused() {
    let cases = [
        (
            "form",
            json!({"action": "decline", "admin": true}),
            "must be an elicitation result (no member but action, content, _meta)",
        ),
        (
            "form",
            json!({"action": "accept", "content": {"region": "eu"}, "resultType": "complete"}),
            "no member but action, content, _meta",
        ),
        (
            "link",
            json!({"action": "accept", "url": "https://elsewhere"}),
            "no member but action, content, _meta",
        ),
        (
            "llm",
            json!({"role": "assistant", "model": "m", "admin": true,
                "content": {"type": "text", "text": "hi"}}),
            "must be a sampling result (no member but role, content, model, stopReason, _meta)",
        ),
        (
            "dirs",
            json!({"roots": [], "admin": true}),
            "must be a roots result (no member but roots, _meta)",
        ),
        (
            "dirs",
            json!({"roots": [{"uri": "file:///home", "admin": true}]}),
            "no member but uri, name, _meta",
        ),
    ];
    for (key, bad, needle) in cases {
        let refused = answer(key, bad.clone()).unwrap_err();
        assert_eq!(refused.key, key);
        assert!(refused.rule.contains(needle), "{bad}: {}", refused.rule);
    }
}

#[test]
fn every_member_a_type_defines_is_allowed() {
    let meta = json!({"io.example/trace": "t"});
    let ok = [
        (
            "form",
            json!({"action": "accept", "content": {"region": "eu"}, "_meta": meta.clone()}),
        ),
        (
            "form",
            json!({"action": "decline", "_meta": meta, "content": null}),
        ),
        ("link", json!({"action": "accept", "_meta": {}})),
        (
            "llm",
            json!({"role": "assistant", "model": "m", "stopReason": "endTurn", "_meta": {},
                "content": {"type": "text", "text": "hi"}}),
        ),
        (
            "dirs",
            json!({"roots": [{"uri": "file:///home", "name": "home", "_meta": {}},
                {"uri": "file:///tmp", "name": null}], "_meta": {}}),
        ),
    ];
    for (key, good) in ok {
        assert_eq!(answer(key, good.clone()), Ok(()), "{good}");
    }
}

#[test]
fn form_content_with_fields_that_fold_together_is_refused() {
    // Both are properties of this schema, so each alone would pass.
    let requests = json!({"form": {"method": "elicitation/create", "params": {
        "requestedSchema": {"type": "object", "properties": {
            "region": {"type": "string"}, "Region": {"type": "string"}}}}}});
    let questions = record_tree(requests.as_object().unwrap()).unwrap();
    let check_content = |content: Value| {
        let responses = json!({"form": accept(content)});
        check_both(&questions, &responses)
    };
    assert_eq!(check_content(json!({"region": "eu"})), Ok(()));
    let refused = check_content(json!({"region": "eu", "Region": "ap-evil-1"})).unwrap_err();
    assert_eq!(
        refused.rule,
        "content has two fields whose names read alike"
    );
}

/// A tool-using sampling answer's blocks are each read by the same rule.
#[test]
fn every_block_of_a_tool_using_sampling_answer_is_checked() {
    let requests = json!({"llm": {"method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 5, "tools": []}}});
    let questions = record_tree(requests.as_object().unwrap()).unwrap();
    let sampled = |content: Value| {
        let responses = json!({"llm": {"role": "assistant", "model": "m", "content": content}});
        check_both(&questions, &responses)
    };
    assert_eq!(sampled(json!([{"type": "text", "text": "a"}])), Ok(()));
    let refused = sampled(json!([{"type": "text"}, {"type": "tool_use", "TYPE": "text"}]));
    assert!(refused.unwrap_err().rule.contains("reads like \"type\""));
}

/// The limit counts serde_json's compact form of the recorded object to the byte, the
/// way the tree path measured it: keys and methods with escapes and non-ASCII, a mode
/// defaulted, a schema with an exponent serde_json writes with a sign (`1E2` is `1e+2`),
/// a sampling request with tools. A round of exactly `MAX_QUESTIONS_BYTES` is recorded,
/// one byte more is refused, by both readings.
#[test]
fn the_size_limit_counts_serde_jsons_compact_length_exactly() {
    let text = |filler: usize| {
        format!(
            r#"{{"k\u0001é\"": {{"method": "elicitation/create", "params": {{"requestedSchema":
                {{"type": "object", "description": "{}", "n": 1E2, "m": -0.50e-1}}}}}},
              "dirs": {{"method": "roots/list"}},
              "llm": {{"method": "sampling/createMessage", "params": {{"tools": []}}}}}}"#,
            "d".repeat(filler)
        )
    };
    // The recorded object as a tree, measured as serde_json writes it.
    let measured = |filler: usize| {
        let requests: Value = serde_json::from_str(&text(filler)).unwrap();
        let schema = requests["k\u{1}é\""]["params"]["requestedSchema"].clone();
        let recorded = json!({
            "k\u{1}é\"": {"m": "elicitation/create", "k": "form", "s": schema},
            "dirs": {"m": "roots/list"},
            "llm": {"m": "sampling/createMessage", "t": true},
        });
        serde_json::to_string(&recorded).unwrap().len()
    };
    let base = measured(0);
    assert!(base < MAX_QUESTIONS_BYTES);
    let filler = MAX_QUESTIONS_BYTES - base;
    assert_eq!(measured(filler), MAX_QUESTIONS_BYTES);
    for (filler, fits) in [(filler, true), (filler + 1, false)] {
        let requests = crate::jsonrpc::parse_bounded(text(filler).as_bytes(), 1000).unwrap();
        assert_eq!(
            record_tree(requests.as_object().unwrap()).is_ok(),
            fits,
            "{} bytes",
            measured(filler)
        );
    }
}

/// Only the answers to keys the round asked are checked: the others are the caller's to
/// drop, whatever they hold.
#[test]
fn answers_to_keys_not_asked_are_not_checked() {
    let responses = json!({"form": {"action": "maybe"}, "dirs": {"roots": []}});
    let questions = questions();
    let asked = |key: &str| key == "dirs";
    assert_eq!(check(&questions, &responses, asked), Ok(()));
    let text = responses.to_string();
    let arena = LiteArena::new();
    let lite = LiteJson::read(&text, &arena).unwrap();
    assert_eq!(check(&questions, &lite, asked), Ok(()));
    let refused = check(&questions, &lite, |_| true).unwrap_err();
    assert_eq!(refused.key, "form");
}
