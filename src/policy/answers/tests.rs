//! Tests of the answer rules: what a round records and what an answer must be.

use super::*;
use serde_json::json;

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

fn questions() -> Map<String, Value> {
    let requests = json!({
        "form": {"method": "elicitation/create",
                 "params": {"mode": "form", "message": "m", "requestedSchema": schema()}},
        "link": {"method": "elicitation/create",
                 "params": {"mode": "url", "message": "m", "url": "https://x"}},
        "llm": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}},
        "dirs": {"method": "roots/list"}
    });
    record(requests.as_object().unwrap())
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

fn answer(key: &str, answer: Value) -> Result<(), BadAnswer> {
    let responses = json!({key: answer});
    check(&questions(), responses.as_object().unwrap())
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
    assert_eq!(record(big.as_object().unwrap()), Err(QuestionsTooLarge));
}

#[test]
fn schemas_a_token_cannot_carry_are_refused_when_recorded() {
    // Found by the `answers` fuzz target: `1e400` became `Infinity` in the token,
    // which then never opened; an integer Python cannot read made minting panic.
    let asking = |number: &str| {
        let text = format!(
            r#"{{"q":{{"method":"elicitation/create","params":{{"requestedSchema":
            {{"type":"object","properties":{{"x":{{"type":"number","maximum":{number}}}}}}}}}}}}}"#
        );
        let requests = crate::jsonrpc::parse_bounded(text.as_bytes(), 100).unwrap();
        record(requests.as_object().unwrap())
    };
    for number in ["1e400", "-1e400", &"9".repeat(4301)] {
        assert_eq!(asking(number), Err(QuestionsTooLarge), "{number:.20}");
    }
    for number in ["1e308", "1.50", &"9".repeat(4300)] {
        assert!(asking(number).is_ok(), "{number:.20}");
    }
}
