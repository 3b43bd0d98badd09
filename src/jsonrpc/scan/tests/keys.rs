//! Keys, scanner against tree: compared after unescaping, in small and large objects
//! and in objects nested in them; serde_json's stand-in keys refused wherever they are.
use super::{ambiguous, refused, verdict};
use crate::jsonrpc::scan::{Refused, Scanned, scan, scan_answer};
use crate::jsonrpc::strict::NUMBER_TOKEN;
use crate::jsonrpc::{ParseError, parse_bounded};
use serde_json::Value;

#[test]
fn keys_are_compared_after_unescaping() {
    assert_eq!(refused(r#"{"a":1,"\u0061":2}"#), ParseError::DuplicateKey);
    assert_eq!(refused(r#"{"\/":1,"/":2}"#), ParseError::DuplicateKey);
    assert_eq!(
        refused(r#"{"\ud834\udd1e":1,"𝄞":2}"#),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(r#"{"\u0061":1,"b":2,"a":3}"#),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(r#"{"\u0061":1,"\u0062":2,"\u0061":3}"#),
        ParseError::DuplicateKey
    );
    // An escaped key moves its own object's keys to a set, not the ones around it.
    assert_eq!(
        refused(r#"{"x":{"\u0061":1,"b":{"a":2}},"y":1,"x":3}"#),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(r#"{"x":{"\u0061":1,"b":{"a":2}},"y":{"x":1},"a":3}"#),
        ParseError::Version
    );
    assert_eq!(refused(r#"{"__pr\u006fto__":1}"#), ambiguous("__proto__"));
    // A large object finds its duplicates through a set, escaped or not.
    let keys: Vec<String> = (0..40).map(|i| format!(r#""k{i}":{i}"#)).collect();
    let large = keys.join(",");
    assert_eq!(refused(&format!("{{{large}}}")), ParseError::Version);
    assert_eq!(
        refused(&format!(r#"{{{large},"k7":0}}"#)),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(&format!(r#"{{{large},"k\u0033\u0039":0}}"#)),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(&format!(r#"{{"\u006b39":0,{large}}}"#)),
        ParseError::DuplicateKey
    );
    // Nested objects have their own keys.
    assert_eq!(
        refused(r#"{"a":{"a":{"a":1}},"b":{"a":2}}"#),
        ParseError::Version
    );
    // A large object in a large object: each has its own set, the inner's gone once it
    // closes (its keys are no duplicates of the outer's after it, the outer's still are).
    let outer: Vec<String> = (0..20).map(|i| format!(r#""o{i}":{i}"#)).collect();
    let outer = outer.join(",");
    assert_eq!(
        refused(&format!(r#"{{{outer},"in":{{{large}}},"k5":0}}"#)),
        ParseError::Version
    );
    assert_eq!(
        refused(&format!(r#"{{{outer},"in":{{{large}}},"o5":0}}"#)),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(&format!(r#"{{{outer},"in":{{{large},"k5":0}},"x":0}}"#)),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(&format!(
            r#"{{"\u006f1":0,"in":{{{large}}},"k5":0,"o1":1}}"#
        )),
        ParseError::DuplicateKey
    );
    assert_eq!(
        refused(&format!(r#"{{"\u006f1":0,"in":{{{large}}},"k5":0}}"#)),
        ParseError::Version
    );
}

/// serde_json's raw-value stand-in key is refused as ambiguous wherever it stands, in
/// any spelling, by the scanner and the tree path alike (with `raw_value`, serde_json's
/// own `Value` reads an object with it first as the JSON its string spells): in a
/// request's envelope or `params`, and in an answer, whose state is then withheld.
#[test]
fn serde_jsons_raw_value_token_is_refused_by_both_paths() {
    let raw = || ParseError::AmbiguousKey("$serde_json::private::RawValue".into());
    for body in [
        r#"{"$serde_json::private::RawValue":"pin"}"#,
        r#"{"$serde_json::private::RawValue":"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"}"#,
        r#"{"\u0024serde_json::private::RawValue":"1"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","$serde_json::private::RawValue":"{\"requestState\":\"x\"}"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":{"$serde_json::private::RawValue":"1"}}}}"#,
    ] {
        assert_eq!(
            parse_bounded(body.as_bytes(), usize::MAX).err(),
            Some(raw()),
            "{body}"
        );
        let scanned = scan(body.as_bytes(), usize::MAX).map(Scanned::into_message);
        assert_eq!(scanned.err().map(|r| r.error), Some(raw()), "{body}");
    }
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":{"$serde_json::private::RawValue":"{}","requestState":"s"}}"#;
    assert_eq!(scan_answer(answer.as_bytes()).err(), Some(raw()));
    // Not JSON further on: a syntax error, whatever was refused before.
    let body = r#"{"$serde_json::private::RawValue":"1"} x"#;
    assert_eq!(
        parse_bounded(body.as_bytes(), usize::MAX).err(),
        Some(ParseError::Syntax)
    );
    assert_eq!(
        scan(body.as_bytes(), usize::MAX).err().map(|r| r.error),
        Some(ParseError::Syntax)
    );
}

/// The tree reads `{"$serde_json::private::Number":"12"}` as the number 12, every other
/// parser as an object: the scanner refuses the key, wherever it is, as it reads it
/// (first refusal wins, and a body not JSON further on is still a syntax error).
#[test]
fn serde_jsons_number_token_is_refused_as_ambiguous() {
    let scanned = |body: &str| scan(body.as_bytes(), usize::MAX).map(Scanned::into_message);
    let with = |token: &str| scanned(&format!(r#"{{"jsonrpc":"2.0","id":{token},"method":"m"}}"#));
    let refused = Err(Refused::from(ambiguous(NUMBER_TOKEN)));
    for token in [
        r#"{"$serde_json::private::Number":"12"}"#,
        r#"{"$serde_json::private::Number" : "1\u0032" }"#,
        r#"{"\u0024serde_json::private::Number":"12"}"#,
        r#"{"$serde_json::private::Number":12}"#,
        r#"{"$serde_json::private::Number":"x"}"#,
        r#"{"a":1,"$serde_json::private::Number":5}"#,
    ] {
        assert_eq!(with(token), refused, "{token}");
        assert_eq!(
            verdict(&format!(r#"{{"id":{token}}}"#)),
            refused.clone().map_err(|r| r.error)
        );
    }
    // The tree reads a number there.
    let tree = parse_bounded(br#"{"$serde_json::private::Number":"12"}"#, usize::MAX);
    assert_eq!(tree, Ok(Value::from(12)));
    // The first refusal in document order wins; not JSON further on is still Syntax.
    let body = r#"{"__proto__":1,"x":{"$serde_json::private::Number":5}}"#;
    assert_eq!(refused_scan(body), ambiguous("__proto__"));
    let body = r#"{"x":{"$serde_json::private::Number":5},"__proto__":1}"#;
    assert_eq!(refused_scan(body), ambiguous(NUMBER_TOKEN));
    let body = r#"{"x":{"$serde_json::private::Number":5},"y":}"#;
    assert_eq!(refused_scan(body), ParseError::Syntax);
}

fn refused_scan(body: &str) -> ParseError {
    scan(body.as_bytes(), usize::MAX).expect_err(body).error
}
