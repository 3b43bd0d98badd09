use super::*;
use serde_json::json;

fn scanned(body: &str) -> Box<ScannedBody> {
    ScannedBody::scan(Bytes::from(body.to_owned()), usize::MAX).expect(body)
}

fn forwarded(body: Box<ScannedBody>) -> String {
    String::from_utf8(body.into_forwarded().to_vec()).unwrap()
}

#[test]
fn slots_follow_the_fields_order() {
    for (i, field) in ParamsField::ALL.into_iter().enumerate() {
        assert_eq!(field as usize, i, "{field:?}");
    }
}

#[test]
fn members_are_read_and_edited_by_name() {
    let mut body = ScannedBody::call(
        "tools/call",
        &json!({
            "name": "t",
            "requestState": "v1.x",
            "arguments": {"a": {"b": "h1.sealed"}},
            "inputResponses": {"asked": 1, "unasked": 2},
            "idempotencyKey": "k"
        }),
    )
    .unwrap();
    let (method, mut params) = body.call_mut().unwrap();
    assert_eq!(method, "tools/call");
    assert!(params.is_present());
    assert_eq!(params.get_str(ParamsField::Name).as_deref(), Some("t"));
    assert!(params.set(ParamsField::RequestState, json!("plain")));
    assert!(!params.set(ParamsField::Uri, json!("u")), "no such member");
    assert!(params.remove(ParamsField::IdempotencyKey));
    assert_eq!(params.get(ParamsField::IdempotencyKey), None);
    assert!(!params.remove(ParamsField::IdempotencyKey));
    assert!(
        !params.set(ParamsField::IdempotencyKey, json!("k2")),
        "a removed member is not there to set"
    );
    assert_eq!(params.retain_answers(|k| k == "asked"), Ok(1));
    assert!(params.replace_at(ParamsField::Arguments, "/a/b", json!("raw")));
    assert!(!params.replace_at(ParamsField::Arguments, "/a/c", json!("raw")));
    assert_eq!(
        params.get(ParamsField::Arguments),
        Some(&json!({"a": {"b": "raw"}})),
        "an edit is what later phases read"
    );
    let sent: Value = serde_json::from_str(&forwarded(body)).unwrap();
    assert_eq!(
        sent,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "t",
            "requestState": "plain",
            "arguments": {"a": {"b": "raw"}},
            "inputResponses": {"asked": 1}
        }})
    );
}

#[test]
fn strings_are_read_from_the_body_until_the_member_is_parsed_or_edited() {
    let mut body = scanned(
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"a\u0041\n","requestState":"v1.tok","idempotencyKey":null,"inputResponses":7,"arguments":{}}}"#,
    );
    let (_, mut params) = body.call_mut().unwrap();
    let state = params.read(ParamsField::RequestState);
    let Some(ParamRead::Text(Cow::Borrowed(token))) = state else {
        panic!("a string without escapes is the body's own bytes");
    };
    assert_eq!(token, "v1.tok");
    let Some(ParamRead::Text(Cow::Owned(name))) = params.read(ParamsField::Name) else {
        panic!("a string with escapes is unescaped");
    };
    assert_eq!(name, "aA\n");
    assert!(matches!(
        params.read(ParamsField::IdempotencyKey),
        Some(ParamRead::Null)
    ));
    assert!(matches!(
        params.read(ParamsField::InputResponses),
        Some(ParamRead::Other)
    ));
    assert_eq!(
        params.get_str(ParamsField::InputResponses),
        None,
        "not a string"
    );
    assert!(params.read(ParamsField::Uri).is_none());
    // Once set, the member reads as the value it was given.
    assert!(params.set(ParamsField::RequestState, json!("plain")));
    assert!(matches!(
        params.read(ParamsField::RequestState),
        Some(ParamRead::Value(Value::String(s))) if s == "plain"
    ));
    assert_eq!(
        params.get_str(ParamsField::RequestState).as_deref(),
        Some("plain")
    );
    // Once parsed, it reads as the parsed value.
    assert_eq!(params.get(ParamsField::Name), Some(&json!("aA\n")));
    assert!(matches!(
        params.read(ParamsField::Name),
        Some(ParamRead::Value(_))
    ));
    assert!(params.remove(ParamsField::IdempotencyKey));
    assert!(params.read(ParamsField::IdempotencyKey).is_none());
    assert_eq!(
        forwarded(body),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"a\u0041\n","requestState":"plain","inputResponses":7,"arguments":{}}}"#
    );
}

#[test]
fn a_string_token_set_is_written_as_it_is_and_reads_as_its_value() {
    let mut body = scanned(
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"requestState":"v1.tok","name":"t"}}"#,
    );
    let (_, mut params) = body.call_mut().unwrap();
    let token = r#""a\u00e9\"\ud83d\ude00""#;
    assert!(params.set_string_token(ParamsField::RequestState, token.to_owned()));
    assert!(
        !params.set_string_token(ParamsField::Uri, token.to_owned()),
        "no such member"
    );
    assert_eq!(
        forwarded(body),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"requestState":{token},"name":"t"}}}}"#
        )
    );
    let mut body =
        scanned(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"requestState":"x"}}"#);
    let (_, mut params) = body.call_mut().unwrap();
    assert!(params.set_string_token(ParamsField::RequestState, token.to_owned()));
    assert_eq!(
        params.get(ParamsField::RequestState),
        Some(&json!("aé\"😀"))
    );
    assert_eq!(
        params.get_str(ParamsField::RequestState).as_deref(),
        Some("aé\"😀")
    );
    // Edited in place after it was read: the edit is what is written.
    assert!(params.replace_at(ParamsField::RequestState, "", json!("b")));
    assert_eq!(
        forwarded(body),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"requestState":"b"}}"#
    );
}

#[test]
fn a_compact_body_nobody_edited_is_forwarded_as_it_came() {
    let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1}}}"#;
    let body = scanned(text);
    let before = body.bytes().as_ptr();
    let mut body = body;
    let (_, params) = body.call_mut().unwrap();
    assert_eq!(params.get(ParamsField::Arguments), Some(&json!({"a": 1})));
    let sent = body.into_forwarded();
    assert_eq!(sent.as_ptr(), before, "no copy");
    assert_eq!(&sent[..], text.as_bytes());
}

#[test]
fn whitespace_between_tokens_is_left_out_and_strings_keep_their_spelling() {
    let body = scanned(
        "{ \"jsonrpc\" : \"2.0\",\r\n \"id\":1,\t\"method\":\"m\", \"params\": { \"name\" : \"a b\\u0041\" , \"n\": [ 1E2 , -0.5 ] } }\n",
    );
    assert_eq!(
        forwarded(body),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"a b\u0041","n":[1E2,-0.5]}}"#
    );
}

/// `params` as forwarded after removing `fields` from `params_text`.
fn removing(params_text: &str, fields: &[ParamsField]) -> String {
    let mut body = scanned(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{params_text}}}"#
    ));
    let (_, mut params) = body.call_mut().unwrap();
    for field in fields {
        assert!(params.remove(*field), "{field:?} in {params_text}");
    }
    let sent = forwarded(body);
    let start = sent.find(r#""params":"#).unwrap() + 9;
    sent[start..sent.len() - 1].to_owned()
}

#[test]
fn a_removed_member_takes_one_comma_with_it() {
    use ParamsField::{Arguments as A, IdempotencyKey as K, RequestState as S};
    let three = r#"{ "requestState" : "s" , "arguments" : {"x": 1} , "idempotencyKey" : "k" }"#;
    assert_eq!(
        removing(three, &[S]),
        r#"{"arguments":{"x":1},"idempotencyKey":"k"}"#
    );
    assert_eq!(
        removing(three, &[A]),
        r#"{"requestState":"s","idempotencyKey":"k"}"#
    );
    assert_eq!(
        removing(three, &[K]),
        r#"{"requestState":"s","arguments":{"x":1}}"#
    );
    assert_eq!(removing(three, &[S, A]), r#"{"idempotencyKey":"k"}"#);
    assert_eq!(removing(three, &[A, K]), r#"{"requestState":"s"}"#);
    assert_eq!(removing(three, &[S, K]), r#"{"arguments":{"x":1}}"#);
    assert_eq!(removing(three, &[S, A, K]), "{}");
    assert_eq!(removing(r#"{"requestState":null}"#, &[S]), "{}");
    assert_eq!(
        removing(r#"{"a":1,"requestState":"s","b":[2]}"#, &[S]),
        r#"{"a":1,"b":[2]}"#
    );
    assert_eq!(
        removing(r#"{"a":1,"requestState":"s"}"#, &[S]),
        r#"{"a":1}"#
    );
    for params in [
        three,
        r#"{"requestState":"s","a":{"b":[1,{}]},"idempotencyKey":"k"}"#,
    ] {
        for fields in [&[S][..], &[K], &[S, K]] {
            let sent = removing(params, fields);
            let value: Value = serde_json::from_str(&sent).expect(&sent);
            for field in fields {
                assert!(value.get(field.name()).is_none(), "{sent}");
            }
        }
    }
}

#[test]
fn answers_that_are_not_an_object_are_told_apart_from_none() {
    let mut body = ScannedBody::call("m", &json!({"inputResponses": [1]})).unwrap();
    let (_, mut params) = body.call_mut().unwrap();
    assert_eq!(params.retain_answers(|_| true), Err(NotAnObject));
    let mut body = ScannedBody::call("m", &json!({"inputResponses": null})).unwrap();
    let (_, mut params) = body.call_mut().unwrap();
    assert_eq!(params.retain_answers(|_| false), Ok(0));
    let mut absent = Params::absent();
    assert!(!absent.is_present());
    assert_eq!(absent.retain_answers(|_| false), Ok(0));
    assert_eq!(absent.get(ParamsField::Name), None);
    let mut body = scanned(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#);
    let (_, params) = body.call_mut().unwrap();
    assert!(!params.is_present());
}

/// The body is checked as text once, in the scan's order: a byte order mark first (even
/// before bytes that are not UTF-8), then UTF-8, each refused as the scan refuses it.
#[test]
fn the_body_is_text_checked_in_the_scans_order() {
    let call = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let cases: [(Vec<u8>, Option<ParseError>); 5] = [
        (call.to_vec(), None),
        ([&b"\xef\xbb\xbf"[..], call].concat(), Some(ParseError::Bom)),
        (
            [&b"\xef\xbb\xbf\xff"[..], call].concat(),
            Some(ParseError::Bom),
        ),
        (
            [&call[..30], b"\xff", &call[30..]].concat(),
            Some(ParseError::Syntax),
        ),
        (b"\xef\xbb{}".to_vec(), Some(ParseError::Syntax)),
    ];
    for (body, refusal) in cases {
        let tree = super::super::scan(&body, usize::MAX).map(|s| s.message().clone());
        let held = ScannedBody::scan(Bytes::from(body.clone()), usize::MAX);
        assert_eq!(
            held.as_ref().err().map(|r| r.error.clone()),
            refusal,
            "{body:?}"
        );
        assert_eq!(held.map(|s| s.message().clone()), tree, "{body:?}");
    }
}
