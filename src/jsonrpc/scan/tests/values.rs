//! Values one by one, scanner against tree: numbers as the grammar has them, ids built
//! as the tree builds them, escapes of surrogates in pairs.
use super::{call, refused, verdict};
use crate::jsonrpc::scan::Message;
use crate::jsonrpc::{ParseError, parse_bounded};

#[test]
fn numbers_follow_the_grammar_and_keep_any_size() {
    for good in [
        "0",
        "-0",
        "-0.0e-0",
        "1E5",
        "1e+5",
        "123456789012345678901234567890",
        "-1.5e999999",
        "0.000001",
    ] {
        assert_eq!(refused(good), ParseError::NotAnObject, "{good}");
    }
    for bad in [
        "01", "-01", "-", "+1", ".5", "1.", "1.e5", "1e", "1e+", "--1", "0x1", "1.5.", "Infinity",
    ] {
        assert_eq!(verdict(bad), Err(ParseError::Syntax), "{bad}");
    }
    let body = call(r#"{"name":"t","arguments":{"big":1e400,"neg":-0,"exp":2E-3}}"#);
    assert!(verdict(&body).is_ok());
}

/// Ids are built directly in their common spellings and parsed otherwise: either way the
/// very value the tree holds, in a call, a response, and a refusal's answer.
#[test]
fn ids_are_the_trees_values_in_every_spelling() {
    let ids = [
        "0",
        "-0",
        "7",
        "-7",
        "123456789012345678",
        "-123456789012345678",
        "1234567890123456789",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "1.0",
        "1e3",
        "-0.0",
        "12345678901234567890123",
        r#""""#,
        r#""a""#,
        r#""é 𝄞""#,
        r#""a\nb""#,
        r#""\u00e9""#,
        r#""\ud834\udd1e""#,
    ];
    for id in ids {
        let call = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let Ok(Message::Call { id: Some(got), .. }) = verdict(&call) else {
            panic!("{call}");
        };
        assert_eq!(Ok(got), parse_bounded(id.as_bytes(), usize::MAX), "{id}");
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
        assert!(
            matches!(verdict(&answer), Ok(Message::Response { .. })),
            "{id}"
        );
        let refusal = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":1}}"#);
        assert_eq!(refused(&refusal), ParseError::Method, "{id}");
    }
}

#[test]
fn surrogate_escapes_come_in_pairs() {
    assert_eq!(refused(r#"["\ud834\udd1e"]"#), ParseError::Batch);
    assert_eq!(
        refused(r#"["\uD834\uDD1E\u0000\u00e9"]"#),
        ParseError::Batch
    );
    for bad in [
        r#"["\ud800"]"#,
        r#"["\udd1e"]"#,
        r#"["\udd1e\ud834"]"#,
        r#"["\ud800\u0041"]"#,
        r#"["\ud800\ud800"]"#,
        r#"["\ud800\n"]"#,
        r#"["\ud800x"]"#,
        r#"["\ud800\"]"#,
        r#"{"\ud800":1}"#,
    ] {
        assert_eq!(verdict(bad), Err(ParseError::Syntax), "{bad}");
    }
}

/// A string that carries a JSON text (an escape every few bytes, passed sixteen bytes a
/// step) reads as the tree reads it whatever is put at any place in it: an escape the
/// blocks do not pass (`\\`, `\u`, `\/` for the spelling), a bad one, a control byte,
/// DEL, a non-ASCII character, a quote that ends it early, a backslash that escapes
/// what follows. The span of `requestState` after it is checked too (`agree`).
#[test]
fn escape_dense_strings_read_as_the_tree_reads_them() {
    let state = r#"{"k":"provision","name":"web-1","r":1,"tier":"free","owner":"team-a","t":176}"#;
    let token = serde_json::to_string(state).expect("a string serialises");
    let inner = &token[1..token.len() - 1];
    let inserts = [
        r"\\",
        r"\u00e9",
        r"\ud834\udd1e",
        r"\/",
        r"\q",
        "\u{1}",
        "\u{7f}",
        "é",
        "\"",
        "\\",
    ];
    for at in (0..=inner.len()).filter(|&at| inner.is_char_boundary(at)) {
        for insert in inserts {
            let text = format!("{}{insert}{}", &inner[..at], &inner[at..]);
            let body = call(&format!(
                r#"{{"name":"t","requestState":"{text}","arguments":{{"a":1}}}}"#
            ));
            let _ = verdict(&body);
        }
    }
}
