//! `answers`: what a round asked, recorded ([`answers::record`]) and carried in its token,
//! and the retry's answers checked against it ([`answers::check`]).
//!
//! Input: a JSON object `{"inputRequests": {...}, "inputResponses": {...}}` (parsed as
//! strictly as the sidecar parses both sides: what the gate's scan refuses, such as
//! serde_json's number stand-in as a key anywhere, which the tree parse reads as an
//! ordinary key past an object's first, never reaches the answers' check); anything
//! else is skipped.
//!
//! Invariants: never panics; the recorded questions stay within `MAX_QUESTIONS_BYTES`,
//! hold one entry per asked key and survive sealing into a token and opening it
//! unchanged; checking is deterministic, and gives one verdict whether the questions and
//! the answers are read as trees (the oracle) or over their text (`LiteJson`, what the
//! sidecar reads), compact or spread, and whether unasked keys are skipped or removed
//! first; a refusal names a key that was answered, in
//! printable form, and never echoes an answer's value; an accepted answer holds only the
//! members its result type defines (so no look-alike of one), written out here from the
//! MCP schema rather than taken from the code under test. (Run it with
//! `-max_len=20000`: the questions may take up to 16 KiB.)

use super::ring;
use mcp_state_guard::facade::jsonrpc::{self, LiteArena, LiteJson};
use mcp_state_guard::facade::policy::answers::{self, MAX_QUESTIONS_BYTES};
use mcp_state_guard::facade::policy::questions::Round;
use mcp_state_guard::facade::text::printable;
use mcp_state_guard::facade::token::SealOptions;
use mcp_state_guard::facade::token::canonical::write_python_json;
use serde_json::{Map, Value};

pub fn check(data: &[u8]) {
    let Ok(Value::Object(input)) = jsonrpc::parse_bounded(data, 10_000) else {
        return;
    };
    // The light reader refuses what the gate's strict scan refuses (its invariant), which
    // never reaches the answers' check.
    let accepted = std::str::from_utf8(data)
        .is_ok_and(|text| LiteJson::read(text, &LiteArena::new()).is_some());
    if !accepted {
        return;
    }
    let (Some(Value::Object(requests)), Some(Value::Object(responses))) =
        (input.get("inputRequests"), input.get("inputResponses"))
    else {
        return;
    };
    // The sealer reads a round from the upstream's bytes and writes its questions from
    // that text, the oracle from a tree: the same claim (or the same refusal) either way.
    let round = Round::of_tree(requests);
    let text = serde_json::to_string(requests).expect("a tree serialises");
    let recorded = answers::record(Round::scanned(&text, 0..text.len()));
    assert_eq!(
        recorded,
        answers::record(round),
        "the questions recorded from bytes differ from the tree's"
    );
    // What the claim must say, written out here from the rules: per key, the method, an
    // elicitation's mode (default `form`) and schema, a sampling request's wish for tools.
    let expected = expected_questions(requests);
    let fits = serde_json::to_vec(&expected)
        .expect("a tree serialises")
        .len()
        <= MAX_QUESTIONS_BYTES;
    let Ok((_, questions)) = recorded else {
        let mut canonical_text = String::new();
        let writes = write_python_json(&expected, false, &mut canonical_text).is_ok()
            && jsonrpc::parse_bounded(canonical_text.as_bytes(), usize::MAX).is_ok();
        assert!(!fits || !writes, "questions within the cap were refused");
        return;
    };
    assert!(fits, "recorded questions over the cap");
    assert_eq!(
        questions,
        canonical(&expected),
        "the claim is not the rules' questions"
    );
    // Read as the sidecar's strict parse reads a text: serde_json's own `Value` turns
    // an object whose first key is its raw-value stand-in into the value that key's
    // string spells, and nothing of the sidecar reads questions that way.
    let Ok(Value::Object(recorded_map)) = jsonrpc::parse_bounded(questions.as_bytes(), usize::MAX)
    else {
        panic!("questions are not an object");
    };
    assert!(
        recorded_map.keys().eq(requests.keys()),
        "questions do not mirror the asked keys"
    );

    let asked: Vec<String> = requests.keys().cloned().collect();
    let sealer = ring::sealer();
    let binding = ring::binding();
    let options = SealOptions {
        asked: Some(&asked),
        questions: Some(questions.as_str()),
        ..SealOptions::default()
    };
    let token = sealer.seal("", &binding, &options);
    let opened = sealer
        .open(&token, &binding, None)
        .unwrap_or_else(|r| panic!("a token with questions does not open: {}", r.detail));
    assert_eq!(
        opened.asked.as_deref(),
        Some(&asked[..]),
        "asked keys changed"
    );
    let carried_questions = opened.questions.expect("the token carries its questions");
    let carried =
        Value::Object((carried_questions.tree()).expect("its questions read back as an object"));
    // The same to the reference's encoding (a literal `1.50` comes back as `1.5`).
    assert_eq!(
        canonical(&carried),
        questions,
        "questions changed in the token"
    );

    // The sidecar reads both over their text; the oracle reads both as trees. One
    // verdict, whichever reading (and with the answers laid out compact or spread).
    let responses_tree = Value::Object(responses.clone());
    let verdict = answers::check(&carried, &responses_tree, |_| true);
    let arena = LiteArena::new();
    let lite_questions = carried_questions
        .read(&arena)
        .expect("its questions read over their text");
    for text in [
        serde_json::to_string(responses).expect("a tree serialises"),
        serde_json::to_string_pretty(responses).expect("a tree serialises"),
    ] {
        let lite = LiteJson::read(&text, &arena)
            .expect("answers the strict parse read, read over their text");
        assert_eq!(
            answers::check(&lite_questions, &lite, |_| true),
            verdict,
            "the answers read over their text get another verdict than the tree"
        );
        // Some keys asked, the others dropped: the same as checking what is left.
        let asked = |key: &str| key.len().is_multiple_of(2);
        let mut kept = responses.clone();
        kept.retain(|key, _| asked(key));
        assert_eq!(
            answers::check(&lite_questions, &lite, asked),
            answers::check(&carried, &Value::Object(kept), |_| true),
            "answers to keys not asked were looked at"
        );
    }
    assert_eq!(
        verdict,
        answers::check(&carried, &responses_tree, |_| true),
        "not deterministic"
    );
    if verdict.is_ok() {
        for (key, answer) in responses {
            let Some(question) = requests.get(key) else {
                continue;
            };
            let members: &[&str] = match question.get("method").and_then(Value::as_str) {
                Some("elicitation/create") => &["action", "content", "_meta"],
                Some("sampling/createMessage") => {
                    &["role", "content", "model", "stopReason", "_meta"]
                }
                Some("roots/list") => &["roots", "_meta"],
                _ => &[],
            };
            let Some(answer) = answer.as_object() else {
                panic!("an answer that is no object was accepted");
            };
            assert!(
                answer.keys().all(|k| members.contains(&k.as_str())),
                "an accepted answer holds a member its type does not define"
            );
        }
    }
    if let Err(bad) = verdict {
        assert!(
            responses.keys().any(|k| printable(k, 64) == bad.key),
            "refusal names a key that was not answered: {}",
            bad.key
        );
        assert!(!bad.key.chars().any(char::is_control), "key not printable");
        // A value that is also a key (or in the questions) may be named by a rule, and
        // one made only of the letters and punctuation of the rules' own words (" decline")
        // may happen to read like them.
        let questions_text = serde_json::to_string(&expected).expect("a tree serialises");
        let (values, keys) = strings(responses);
        let wordy = |c: char| c.is_ascii_alphabetic() || " ,()'\"/:._-".contains(c);
        for value in values {
            if value.chars().count() >= 8
                && !value.chars().all(wordy)
                && !questions_text.contains(value.as_str())
                && !keys.iter().any(|k| k.contains(value.as_str()))
            {
                assert!(
                    !bad.rule.contains(value.as_str()),
                    "refusal echoes an answer: {}",
                    bad.rule
                );
            }
        }
    }
}

fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(value, false, &mut out).expect("carried questions encode");
    out
}

/// Every string value under `map`, and every key.
fn strings(map: &Map<String, Value>) -> (Vec<String>, Vec<String>) {
    fn walk(value: &Value, values: &mut Vec<String>, keys: &mut Vec<String>) {
        match value {
            Value::String(s) => values.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|v| walk(v, values, keys)),
            Value::Object(members) => {
                for (key, v) in members {
                    keys.push(key.clone());
                    walk(v, values, keys);
                }
            }
            _ => {}
        }
    }
    let (mut values, mut keys) = (Vec::new(), Vec::new());
    for (key, v) in map {
        keys.push(key.clone());
        walk(v, &mut values, &mut keys);
    }
    (values, keys)
}

/// The questions a round records, from the rules rather than the code under test: per
/// key, the method (empty when it is no string); for an elicitation, its mode (`form`
/// when it names none) and its requested schema when present; for a sampling request,
/// `t` when it names tools or a tool choice that is not `null`.
fn expected_questions(requests: &Map<String, Value>) -> Value {
    let mut questions = Map::new();
    for (key, request) in requests {
        let param = |name: &str| request.get("params").and_then(|p| p.get(name));
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let mut recorded = Map::new();
        recorded.insert("m".into(), Value::from(method));
        match method {
            "elicitation/create" => {
                let mode = param("mode").and_then(Value::as_str).unwrap_or("form");
                recorded.insert("k".into(), Value::from(mode));
                if let Some(schema) = param("requestedSchema") {
                    recorded.insert("s".into(), schema.clone());
                }
            }
            "sampling/createMessage"
                if ["tools", "toolChoice"]
                    .iter()
                    .any(|name| param(name).is_some_and(|v| !v.is_null())) =>
            {
                recorded.insert("t".into(), Value::Bool(true));
            }
            _ => {}
        }
        questions.insert(key.clone(), Value::Object(recorded));
    }
    Value::Object(questions)
}
