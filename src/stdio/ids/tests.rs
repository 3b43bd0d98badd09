use super::*;

#[test]
fn ids_are_fresh_unguessable_strings() {
    let ids: std::collections::HashSet<_> = (0..1000).map(|_| fresh()).collect();
    assert_eq!(ids.len(), 1000);
    assert!(
        ids.iter()
            .all(|id| id.len() == 32 && bridge_id(&format!("\"{id}\"")).as_ref() == Some(id))
    );
}

#[test]
fn the_id_and_token_are_spliced_in_and_everything_else_kept() {
    let body = br#"{"jsonrpc":"2.0","params":{"name":"t","arguments":{"big":123456789012345678901234567890},"_meta":{"progressToken":"p"}},"method":"tools/call","id":7}"#;
    let parsed = parse(body, 1000).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(parsed.caller_id, serde_json::json!(7));
    assert_eq!(parsed.token, Some(serde_json::json!("p")));
    let id = fresh();
    let line = parsed.line(body, &id);
    assert!(line.len() <= parsed.line_size(body.len()));
    let expected = String::from_utf8_lossy(body)
        .replace(
            r#""progressToken":"p""#,
            &format!(r#""progressToken":"{id}""#),
        )
        .replace(r#""id":7}"#, &format!(r#""id":"{id}"}}"#))
        + "\n";
    assert_eq!(String::from_utf8_lossy(&line), expected);
    // Without a token, only the id.
    let body = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t"}}"#;
    let parsed = parse(body, 1000).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(parsed.token, None);
    assert!(
        String::from_utf8_lossy(&parsed.line(body, &id))
            .starts_with(&format!(r#"{{"jsonrpc":"2.0","id":"{id}","#))
    );
}

#[test]
fn what_is_not_a_request_is_named() {
    let parsed = |body: &[u8]| parse(body, 1000).err();
    assert_eq!(
        parsed(br#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#),
        Some(NotARequest::NoAnswer)
    );
    assert_eq!(
        parsed(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        Some(NotARequest::NoAnswer)
    );
    let initialize = parse(
        br#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}"#,
        1000,
    );
    let initialize = initialize.ok().unwrap();
    assert!(initialize.initialize);
    assert_eq!(initialize.caller_id, serde_json::json!(3));
    assert_eq!(parsed(b"{\"id\":1,"), Some(NotARequest::Unreadable));
}

#[test]
fn a_line_is_named_by_its_first_or_last_bytes() {
    let id = fresh();
    let none = b"".as_slice();
    let leading = |prefix: &str| named_in(prefix.as_bytes(), none);
    assert_eq!(
        leading(&format!(r#"{{"jsonrpc":"2.0","id":"{id}","result":{{"x":"#)),
        Some(id.clone())
    );
    assert_eq!(
        leading(&format!(r#"{{ "jsonrpc" : "2.0" , "id" : "{id}" }}"#)),
        Some(id.clone())
    );
    assert_eq!(
        leading(&format!(r#"{{"id":"{id}","result":"#)),
        Some(id.clone())
    );
    assert_eq!(
        leading(&format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{{"id":"{id}","#
        )),
        None
    );
    // Counters and other shapes are no bridge id.
    assert_eq!(leading(r#"{"jsonrpc":"2.0","id":7,"#), None);
    assert_eq!(leading(r#"{"jsonrpc":"2.0","id":"7","#), None);
    assert_eq!(named_in(b"garbage", b"garbage"), None);
    // The TypeScript SDK writes the id last; the kept tail may start inside a character.
    let ts = br#"{"result":{"content":[]},"jsonrpc":"2.0","id":"#;
    let tail = format!("\u{e9}\"}}]}},\"jsonrpc\":\"2.0\",\"id\":\"{id}\"}}");
    assert_eq!(named_in(ts, &tail.as_bytes()[1..]), Some(id.clone()));
    // A nested id at the end is not the message's.
    let nested = format!(r#"xx","item":{{"id":"{id}"}}}}}}"#);
    assert_eq!(named_in(ts, nested.as_bytes()), None);
    // A caller's id at the start of its body, for a refusal.
    assert_eq!(
        caller_id_in(br#"{"jsonrpc":"2.0","id":42,"me"#),
        serde_json::json!(42)
    );
    assert_eq!(caller_id_in(br#"{"id":"x","#), serde_json::json!("x"));
    assert_eq!(caller_id_in(br#"{"method":"a","id":1}"#), Value::Null);
}
