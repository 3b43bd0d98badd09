use super::*;

fn check(text: &str) -> Result<(), AnswerFault> {
    scan_answer(text.as_bytes()).expect(text).check()
}

#[test]
fn reserved_look_alikes_and_states_outside_result_are_found_in_the_trees_order() {
    use AnswerFault::{AmbiguousKey as A, StateOutsideResult as S};
    for (text, verdict) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"requestState":"s"}}"#,
            Ok(()),
        ),
        (r#"{"jsonrpc":"2.0","id":1,"Result":{}}"#, Err(A)),
        (r#"{"jsonrpc":"2.0","id":1,"résult":{}}"#, Err(A)),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"request_state":"s"}}"#,
            Err(A),
        ),
        (r#"{"jsonrpc":"2.0","id":1,"result":{"ünicode":1}}"#, Err(A)),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":7,"x":{"Request_State":1}}"#,
            Ok(()),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":{"requestState":"s"}}"#,
            Err(S),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":{"requestState":null}}"#,
            Ok(()),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":{"RequestState":null}}"#,
            Err(A),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"Message":"m"}}"#,
            Err(A),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"data":{"requestState":"s"}}}"#,
            Err(S),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"data":{"inputrequests":1}}}"#,
            Err(A),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"data":{"requestState":"s"}},"result":{"RESULTTYPE":1}}"#,
            Err(S),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":{"requestState":1},"error":{"Code":1}}"#,
            Err(S),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":"x","result":{"requestState":"s"}}"#,
            Ok(()),
        ),
    ] {
        assert_eq!(check(text), verdict, "{text}");
    }
}

#[test]
fn the_state_and_the_round_are_located() {
    let text = r#"{"jsonrpc":"2.0","id":"a","result":{"resultType":"input_\u0072equired","inputRequests":{"q":{}},"requestState":"plain"}}"#;
    let answer = scan_answer(text.as_bytes()).unwrap();
    assert!(answer.is_message());
    assert_eq!(answer.id(), Some(serde_json::json!("a")));
    assert!(answer.asks_for_input());
    let StateMember::String(span) = answer.state() else {
        panic!("a string state")
    };
    assert_eq!(&text[span], r#""plain""#);
    let (span, kind) = answer.result_member(ResultField::InputRequests).unwrap();
    assert_eq!((&text[span], kind), (r#"{"q":{}}"#, JsonKind::Object));
    for (text, state, asks) in [
        (r#"{"id":1,"result":{}}"#, StateMember::Absent, false),
        (
            r#"{"id":1,"result":{"requestState":null,"inputRequests":null}}"#,
            StateMember::Null(33..37),
            false,
        ),
        (
            r#"{"id":1,"result":{"requestState":3,"resultType":"complete"}}"#,
            StateMember::Other,
            false,
        ),
        (
            r#"{"id":1,"result":{"inputRequests":[]}}"#,
            StateMember::Absent,
            true,
        ),
        (
            r#"{"id":1,"result":[{"requestState":"s"}]}"#,
            StateMember::Absent,
            false,
        ),
    ] {
        let answer = scan_answer(text.as_bytes()).unwrap();
        assert_eq!(answer.state(), state, "{text}");
        assert_eq!(answer.asks_for_input(), asks, "{text}");
    }
}

#[test]
fn a_batch_gives_its_messages_and_strictness_is_the_gates() {
    let text = r#"[ {"id":1,"result":{}} , 2, [{"id":3},[[{}]]], {"a":[{"b":1}]} ]"#;
    let answer = scan_answer(text.as_bytes()).unwrap();
    assert!(!answer.is_message());
    let parts: Vec<&str> = answer.batch().unwrap().map(|r| &text[r]).collect();
    assert_eq!(
        parts,
        [
            r#"{"id":1,"result":{}}"#,
            r#"{"id":3}"#,
            "{}",
            r#"{"a":[{"b":1}]}"#
        ]
    );
    assert!(scan_answer(br#"{"id":1}"#).unwrap().batch().is_none());
    for (text, error) in [
        (&br#"{"a":1,"a":2}"#[..], ParseError::DuplicateKey),
        (
            br#"{"__proto__":{}}"#,
            ParseError::AmbiguousKey("__proto__".into()),
        ),
        (
            br#"{"x":{"$serde_json::private::Number":"1"}}"#,
            ParseError::AmbiguousKey("$serde_json::private::Number".into()),
        ),
        (b"\xef\xbb\xbf{}", ParseError::Bom),
        (br#"{"a":"\ud800"}"#, ParseError::Syntax),
        (b"{} x", ParseError::Syntax),
    ] {
        assert_eq!(scan_answer(text).unwrap_err(), error);
    }
    // No cap on values: a large legitimate result is no error.
    let many = format!("[{}0]", "0,".repeat(200_000));
    assert!(scan_answer(many.as_bytes()).is_ok());
}

#[test]
fn an_errors_code_reads_as_serde_json_reads_it() {
    for code in [
        "-32602",
        "0",
        "-0",
        "7",
        "1.0",
        "1e3",
        "-1E+2",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "\"7\"",
        "null",
        "true",
        "[7]",
        "{\"c\":7}",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"m"}}}}"#);
        let tree: serde_json::Value = serde_json::from_str(&text).unwrap();
        let expected = tree["error"]["code"].as_i64();
        assert_eq!(
            scan_answer(text.as_bytes()).unwrap().error_code(),
            expected,
            "{code}"
        );
    }
    for no_code in [
        r#"{"id":1,"error":[{"code":7}]}"#,
        r#"{"id":1,"error":{"message":"m"}}"#,
        r#"{"id":1,"result":{"code":7}}"#,
    ] {
        assert_eq!(
            scan_answer(no_code.as_bytes()).unwrap().error_code(),
            None,
            "{no_code}"
        );
    }
}
