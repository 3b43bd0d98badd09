//! `scan`: the one-pass scanner ([`jsonrpc::scan`]) against the tree path it replaces
//! ([`jsonrpc::parse_bounded`] then [`jsonrpc::classify`]).
//!
//! Input: the body, all of it.
//!
//! Invariants: both paths give the same verdict (the same `ParseError`, payload
//! included, or the same `Message`) without a cap, at the gate fuzzer's cap, and, for a
//! body that is JSON, at exactly its number of values (the uncapped verdict) and one below
//! (too many values), and the same id for a refusal, except that the scanner alone
//! refuses serde_json's number stand-in key; on success every span of the index holds the value the tree has at
//! that path (and a member the tree has is never missing from the index), and a string
//! member decodes to the tree's string, borrowed exactly when it holds no escape, and
//! every span read over its text ([`jsonrpc::LiteJson`], how the sidecar reads a retry's
//! answers and the declared capabilities) answers as the tree does, at every level (the
//! capabilities it declares included).

use mcp_state_guard::facade::jsonrpc::{
    self, EnvelopeField, JsonView, LiteArena, LiteJson, Message, ParamsField, ParseError, Refused,
    ResultField, Scanned,
};
use mcp_state_guard::facade::policy::capabilities::Declared;
use serde_json::Value;
use std::borrow::Cow;
use std::ops::Range;

/// The gate fuzzer's cap.
const MAX_JSON_VALUES: usize = 200;

pub fn check(data: &[u8]) {
    let verdict = agree(data, usize::MAX);
    // Compared inside; which verdict is right at this cap depends on the count.
    let _ = agree(data, MAX_JSON_VALUES);
    // The tree's count of a body with the number stand-in says nothing (see `agree`).
    if let Ok(value) = jsonrpc::parse_bounded(data, usize::MAX)
        && verdict != Err(stand_in())
    {
        let n = count_values(&value);
        assert_eq!(agree(data, n), verdict, "at exactly its values");
        assert_eq!(
            agree(data, n - 1),
            Err(ParseError::TooManyValues),
            "one value over the cap"
        );
    }
}

/// Both paths' verdict on `body` under a cap of `cap` values; panics when they differ.
pub fn agree(body: &[u8], cap: usize) -> Result<Message, ParseError> {
    let parsed = jsonrpc::parse_bounded(body, cap);
    let tree_id = parsed.as_ref().ok().and_then(jsonrpc::best_effort_id);
    let tree = parsed.and_then(|v| jsonrpc::classify(&v).map(|m| (v, m)));
    let scanned = jsonrpc::scan(body, cap);
    match (tree, scanned) {
        // The tree reads serde_json's number stand-in as a number; only the scanner can
        // tell the key, and refuses it.
        (_, Err(Refused { error, id: None })) if error == stand_in() => Err(error),
        (Ok((value, message)), Ok(scanned)) => {
            assert_eq!(scanned.message(), &message, "the message differs");
            same_spans(&value, &scanned);
            Ok(message)
        }
        (Err(tree), Err(scanned)) => {
            assert_eq!(scanned.error, tree, "the refusal differs (cap {cap})");
            assert_eq!(scanned.id, tree_id, "the id answered differs");
            Err(tree)
        }
        (tree, scanned) => panic!("cap {cap}: tree {tree:?}, scanner {scanned:?}"),
    }
}

fn stand_in() -> ParseError {
    ParseError::AmbiguousKey("$serde_json::private::Number".into())
}

/// Every span the index gives holds what the tree has at that path, and the index gives
/// one exactly where the tree has a member.
fn same_spans(value: &Value, scanned: &Scanned<'_>) {
    let check =
        |member: Option<&Value>, span: Option<Range<usize>>, name: &str| match (member, span) {
            (None, None) => {}
            (Some(member), Some(span)) => {
                let raw = &scanned.body()[span.clone()];
                let parsed = jsonrpc::parse_bounded(raw.as_bytes(), usize::MAX);
                assert_eq!(
                    parsed.as_ref(),
                    Ok(member),
                    "{name}: the span reads differently"
                );
                let arena = LiteArena::new();
                let lite = LiteJson::read(raw, &arena)
                    .unwrap_or_else(|| panic!("{name}: the span does not read over its text"));
                assert!(
                    same_view(&lite, member),
                    "{name}: read over its text differently"
                );
                assert_eq!(
                    Declared::of(&lite),
                    Declared::of(member),
                    "{name}: declares differently over its text"
                );
                let string = scanned.string(span);
                assert_eq!(
                    string.as_deref(),
                    member.as_str(),
                    "{name}: decoded differently"
                );
                if let Some(string) = string {
                    let borrowed = matches!(string, Cow::Borrowed(_));
                    assert_eq!(borrowed, !raw.contains('\\'), "{name}: borrowed");
                }
            }
            (member, span) => panic!("{name}: tree {member:?}, span {span:?}"),
        };
    for field in EnvelopeField::ALL {
        check(
            value.get(field.name()),
            scanned.index().envelope(field),
            field.name(),
        );
    }
    let params = value.get("params").filter(|p| p.is_object());
    for field in ParamsField::ALL {
        let member = params.and_then(|p| p.get(field.name()));
        check(member, scanned.index().param(field), field.name());
    }
    let declared = params
        .and_then(|p| p.get("_meta"))
        .filter(|m| m.is_object())
        .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"));
    check(
        declared,
        scanned.index().declared(),
        "declared capabilities",
    );
    // What the scan read of the declaration on its way is the policy's reading of the tree.
    assert_eq!(
        Declared::of_index(scanned.index()),
        declared.and_then(Declared::of),
        "declared capabilities, as the scan read them"
    );
    let result = value.get("result").filter(|r| r.is_object());
    for field in ResultField::ALL {
        let member = result.and_then(|r| r.get(field.name()));
        check(member, scanned.index().result(field), field.name());
    }
}

/// Every scalar, array and object, as `parse_bounded` counts them.
fn count_values(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_values).sum(),
        Value::Object(members) => members.values().map(count_values).sum(),
        _ => 0,
    }
}

/// Whether `lite` answers every question of [`JsonView`] as `tree` does, at every level.
fn same_view(lite: &LiteJson<'_>, tree: &Value) -> bool {
    let lite_entries = lite.entries().map(|e| e.collect::<Vec<_>>());
    let tree_entries = JsonView::entries(tree).map(|e| e.collect::<Vec<_>>());
    JsonView::as_str(lite) == tree.as_str()
        && JsonView::as_bool(lite) == tree.as_bool()
        && JsonView::as_f64(lite).map(f64::to_bits) == tree.as_f64().map(f64::to_bits)
        && JsonView::as_u64(lite) == tree.as_u64()
        && JsonView::is_null(lite) == tree.is_null()
        && JsonView::is_number(lite) == tree.is_number()
        && match (JsonView::as_array(lite), JsonView::as_array(tree)) {
            (Some(a), Some(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_view(x, y))
            }
            (a, b) => a.is_none() && b.is_none(),
        }
        && match (lite_entries, tree_entries) {
            (Some(a), Some(b)) => {
                a.len() == b.len()
                    && a.iter().zip(&b).all(|((ka, va), (kb, vb))| {
                        ka == kb
                            && same_view(va, vb)
                            && lite.get(ka).is_some_and(|v| same_view(v, vb))
                    })
            }
            (a, b) => a.is_none() && b.is_none(),
        }
}
