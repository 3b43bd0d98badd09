//! The scanner against the tree path, rule by rule: each body's verdict is stated, and
//! [`agree`] checks that both paths reach it (and, on success, that every span holds the
//! tree's member). `mutations` adds a few thousand generated bodies.
use super::*;
use crate::jsonrpc::strict::NUMBER_TOKEN;
use crate::jsonrpc::{CAPABILITIES_META, best_effort_id, classify, parse_strict};
use serde_json::Value;

mod keys;
mod mutations;
mod values;

/// Both paths' verdict on `body` under a cap of `cap` values (and the id a refusal is
/// answered with); panics when they differ. The tree cannot tell serde_json's number
/// stand-in key from a number: any verdict of its own goes when the scanner refuses it.
pub(super) fn agree(body: &[u8], cap: usize) -> Result<Message, ParseError> {
    let parsed = parse_bounded(body, cap);
    let tree_id = parsed.as_ref().ok().and_then(best_effort_id);
    let tree = parsed.and_then(|v| classify(&v).map(|m| (v, m)));
    let scanned = scan(body, cap);
    let shown = String::from_utf8_lossy(body);
    match (tree, scanned) {
        (_, Err(Refused { error, id: None })) if error == ambiguous(NUMBER_TOKEN) => Err(error),
        (Ok((value, message)), Ok(scanned)) => {
            assert_eq!(scanned.message(), &message, "{shown}");
            same_spans(&value, &scanned, &shown);
            Ok(message)
        }
        (Err(tree), Err(scanned)) => {
            assert_eq!(scanned.error, tree, "cap {cap}: {shown}");
            assert_eq!(scanned.id, tree_id, "the id answered: {shown}");
            Err(tree)
        }
        (tree, scanned) => panic!("cap {cap}: tree {tree:?}, scanner {scanned:?}: {shown}"),
    }
}

/// Every span the index gives holds what the tree has at that path, and the index gives
/// one exactly where the tree has a member.
fn same_spans(value: &Value, scanned: &Scanned<'_>, shown: &str) {
    let check =
        |member: Option<&Value>, span: Option<Range<usize>>, name: &str| match (member, span) {
            (None, None) => {}
            (Some(member), Some(span)) => {
                let raw = &scanned.body()[span.clone()];
                assert_eq!(
                    parse_strict(raw.as_bytes()).as_ref(),
                    Ok(member),
                    "{name}: {shown}"
                );
                let string = scanned.string(span);
                assert_eq!(string.as_deref(), member.as_str(), "{name}: {shown}");
                if let Some(string) = string {
                    let borrowed = matches!(string, Cow::Borrowed(_));
                    assert_eq!(borrowed, !raw.contains('\\'), "{name}: {shown}");
                }
            }
            (member, span) => panic!("{name}: tree {member:?}, span {span:?}: {shown}"),
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
        .and_then(|m| m.get(CAPABILITIES_META));
    check(
        declared,
        scanned.index().declared(),
        "declared capabilities",
    );
    let result = value.get("result").filter(|r| r.is_object());
    for field in ResultField::ALL {
        let member = result.and_then(|r| r.get(field.name()));
        check(member, scanned.index().result(field), field.name());
    }
}

/// `agree` without a cap, on text.
fn verdict(body: &str) -> Result<Message, ParseError> {
    agree(body.as_bytes(), usize::MAX)
}

fn refused(body: &str) -> ParseError {
    verdict(body).expect_err(body)
}

fn ambiguous(key: &str) -> ParseError {
    ParseError::AmbiguousKey(key.into())
}

/// A call with `params` as given.
fn call(params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#)
}

#[test]
fn the_text_is_json_as_serde_json_reads_it() {
    for body in [
        "",
        " ",
        "{} {}",
        "{}x",
        "{\"a\":1,}",
        "[1,]",
        "[,1]",
        "{,}",
        "{\"a\" 1}",
        "{1:1}",
        "{\"a\":}",
        "[1 2]",
        "nul",
        "truex",
        "True",
        "NaN",
        "'a'",
        "\u{c}{}",
        "\u{a0}{}",
        "{}\u{0}",
        "[\"\t\"]",
        "[\"\u{1f}\"]",
        "[\"\\x\"]",
        "[\"\\u12\"]",
        "[\"\\u12G4\"]",
        "[\"\\",
        "[\"abc",
    ] {
        assert_eq!(verdict(body), Err(ParseError::Syntax), "{body:?}");
    }
    // Whitespace is space, tab, LF and CR only; a DEL in a string is no control byte.
    assert_eq!(refused(" \t\r\n[\"\u{7f}\"] \n"), ParseError::Batch);
    assert_eq!(refused("\u{feff}{}"), ParseError::Bom);
    assert_eq!(agree(b"\xef\xbb\xbf\xff", 0), Err(ParseError::Bom));
    // Not UTF-8, in a string or outside one.
    for body in [
        &b"[\"\xff\"]"[..],
        b"[\"\xed\xa0\x80\"]",
        b"[1\xe5]",
        b"\xe9",
    ] {
        assert_eq!(agree(body, usize::MAX), Err(ParseError::Syntax));
    }
}

#[test]
fn nesting_stops_at_serde_jsons_limit() {
    let nested = |open: &str, close: &str, n: usize| open.repeat(n) + &close.repeat(n);
    assert_eq!(refused(&nested("[", "]", 127)), ParseError::Batch);
    assert_eq!(refused(&nested("[", "]", 128)), ParseError::Syntax);
    let objects = |n: usize| "{\"a\":".repeat(n) + "1" + &"}".repeat(n);
    assert_eq!(refused(&objects(127)), ParseError::Version);
    assert_eq!(refused(&objects(128)), ParseError::Syntax);
    // Depth past the limit is no JSON even after a refusal.
    let deep = format!(r#"{{"__proto__":1,"x":{}}}"#, nested("[", "]", 127));
    assert_eq!(refused(&deep), ParseError::Syntax);
    let deep = format!(r#"{{"__proto__":1,"x":{}}}"#, nested("[", "]", 126));
    assert_eq!(refused(&deep), ambiguous("__proto__"));
}

#[test]
fn values_are_counted_as_they_start_and_keys_are_not() {
    let body = r#"{"jsonrpc":"2.0","method":"m","params":{"a":[1,{}]}}"#;
    // The envelope, 3 members, `a`, its array's 2 items: 7 values.
    assert!(agree(body.as_bytes(), 7).is_ok());
    assert_eq!(agree(body.as_bytes(), 6), Err(ParseError::TooManyValues));
    assert_eq!(agree(b"1", 0), Err(ParseError::TooManyValues));
    assert_eq!(agree(b"", 0), Err(ParseError::Syntax));
    // Over the cap and not JSON further on: not JSON.
    assert_eq!(agree(b"[1,2,3,", 1), Err(ParseError::Syntax));
    assert_eq!(agree(b"[1,2,3,\"\\ud800\"]", 1), Err(ParseError::Syntax));
}

#[test]
fn the_first_refusal_in_document_order_wins() {
    let cap = |body: &str, cap| agree(body.as_bytes(), cap).expect_err(body);
    // A duplicate is found once its value was read: what the value breaks comes first.
    assert_eq!(
        cap(r#"{"a":1,"a":[1,2,3,4]}"#, 4),
        ParseError::TooManyValues
    );
    assert_eq!(cap(r#"{"a":1,"a":[1,2,3,4]}"#, 9), ParseError::DuplicateKey);
    assert_eq!(
        refused(r#"{"a":1,"a":{"__proto__":1}}"#),
        ambiguous("__proto__")
    );
    assert_eq!(
        refused(r#"{"a":1,"a":{"b":1,"b":2}}"#),
        ParseError::DuplicateKey
    );
    // `__proto__` is refused on its key, before its value is counted or read.
    assert_eq!(cap(r#"{"__proto__":[1,2,3]}"#, 2), ambiguous("__proto__"));
    assert_eq!(
        refused(r#"{"__proto__":{"a":1,"a":2}}"#),
        ambiguous("__proto__")
    );
    assert_eq!(
        refused(r#"{"__proto__":1,"__proto__":2}"#),
        ambiguous("__proto__")
    );
    assert_eq!(
        refused(r#"{"a":1,"a":2,"__proto__":1}"#),
        ParseError::DuplicateKey
    );
    assert_eq!(cap(r#"[1,2,{"a":1,"a":2}]"#, 2), ParseError::TooManyValues);
    // Refusals come before classification, wherever they are.
    assert_eq!(refused(r#"[{"a":1,"a":2}]"#), ParseError::DuplicateKey);
    // ... and a syntax error after any of them makes the body not JSON.
    for body in [
        r#"{"__proto__":1} x"#,
        r#"{"a":1,"a":2,"b":"\ud800"}"#,
        r#"{"a":1,"a":2,"b":01}"#,
        r#"{"a":1,"a":2,}"#,
    ] {
        assert_eq!(refused(body), ParseError::Syntax, "{body}");
    }
}

#[test]
fn the_envelope_takes_only_its_own_fields() {
    assert_eq!(refused("[]"), ParseError::Batch);
    assert_eq!(refused(r#""x""#), ParseError::NotAnObject);
    assert_eq!(refused("{}"), ParseError::Version);
    for (body, error) in [
        (r#"{"jsonrpc":"2.0","ID":1,"method":"m"}"#, ambiguous("ID")),
        (r#"{"Method":"m","jsonrpc":"2.0"}"#, ambiguous("Method")),
        (
            r#"{"jsonrpc":"2.0","m\u00e9":1,"method":"m"}"#,
            ParseError::NonAsciiKey("m\\u{e9}".into()),
        ),
        (
            r#"{"jsonrpc":"2.0","ſ":1,"Id":1}"#,
            ParseError::NonAsciiKey("\\u{17f}".into()),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","request_state":"x"}"#,
            ambiguous("request_state"),
        ),
        (r#"{"InputResponses":1,"ID":1}"#, ambiguous("ID")),
        (
            r#"{"jsonrpc":"2.0","inputResponses":{}}"#,
            ambiguous("inputResponses"),
        ),
        (r#"{"jsonrpc":"2.1","method":"m"}"#, ParseError::Version),
        (r#"{"jsonrpc":2.0,"method":"m"}"#, ParseError::Version),
        (r#"{"method":"m"}"#, ParseError::Version),
        (r#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#, ParseError::Id),
        (
            r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            ParseError::Id,
        ),
        (r#"{"jsonrpc":"2.0","method":1}"#, ParseError::Method),
        (
            r#"{"jsonrpc":"2.0","method":"m","params":[]}"#,
            ParseError::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","result":{}}"#,
            ParseError::Mixed,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"params":{},"error":{}}"#,
            ParseError::Mixed,
        ),
        (r#"{"jsonrpc":"2.0","result":1}"#, ParseError::Id),
        (r#"{"jsonrpc":"2.0","id":1}"#, ParseError::NotAnObject),
    ] {
        assert_eq!(verdict(body), Err(error), "{body}");
    }
    assert!(verdict(r#"{"jsonrpc":"2.\u0030","id":null,"method":"m\/x"}"#).is_ok());
    assert!(verdict(r#"{"jsonrpc":"2.0","id":"a","result":null}"#).is_ok());
}

#[test]
fn params_take_only_their_own_fields() {
    for (params, error) in [
        (r#"{"RequestState":"x"}"#, ambiguous("RequestState")),
        (
            r#"{"request_state":"x","requestState":"y"}"#,
            ambiguous("request_state"),
        ),
        (r#"{"requeſtState":"x"}"#, ambiguous("reque\\u{17f}tState")),
        (r#"{"idempotency-key":"k"}"#, ambiguous("idempotency-key")),
        (r#"{"task_id":"t"}"#, ambiguous("task_id")),
        (
            r#"{"naïve":1}"#,
            ParseError::NonAsciiKey("na\\u{ef}ve".into()),
        ),
        (r#"{"name":1}"#, ParseError::Target("name")),
        (r#"{"name":"t","uri":null}"#, ParseError::Target("uri")),
        (r#"{"uri":1,"name":1}"#, ParseError::Target("name")),
        (
            r#"{"inputResponses":{"regıon":{}}}"#,
            ParseError::NonAsciiKey("reg\\u{131}on".into()),
        ),
    ] {
        assert_eq!(verdict(&call(params)), Err(error), "{params}");
    }
    // Below the guarded levels, keys are the payload's business.
    assert!(
        verdict(&call(
            r#"{"arguments":{"naïve":1,"Name":2},"inputResponses":[]}"#
        ))
        .is_ok()
    );
    assert!(verdict(&call(r#"{"inputResponses":{"a":{"ſ":1}}}"#)).is_ok());
}

#[test]
fn declared_capabilities_have_no_look_alikes() {
    let meta = |meta: &str| verdict(&call(&format!(r#"{{"name":"t","_meta":{meta}}}"#)));
    let caps = |declared: &str| meta(&format!(r#"{{"{CAPABILITIES_META}":{declared}}}"#));
    assert!(
        caps(r#"{"elicitation":{"form":{},"url":{}},"sampling":{"tools":{}},"roots":{}}"#).is_ok()
    );
    assert!(
        caps(r#"{"elicitation":true,"sampling":[{"Tools":1}],"experimental":{"X":{}}}"#).is_ok()
    );
    assert!(caps(r#"[{"roots":1,"Roots":2}]"#).is_ok());
    assert!(caps(r#"{"elicitation":{"form":{"Form":1}}}"#).is_ok());
    for (declared, key) in [
        (
            r#"{"elicitation":{},"Elicitation":{"url":{}}}"#,
            "Elicitation",
        ),
        (r#"{"ELICITATION":{"url":{}}}"#, "ELICITATION"),
        (r#"{"elicitation":{"form":{},"Form":{}}}"#, "Form"),
        (r#"{"elicitation":{"URL":{}}}"#, "URL"),
        (r#"{"sampling":{"Tools":{}}}"#, "Tools"),
        (r#"{"Sampling":{}}"#, "Sampling"),
        (r#"{"roots":{},"ROOTS":{}}"#, "ROOTS"),
        (r#"{"root_s":{}}"#, "root_s"),
        (r#"{"samplin\u0067":{"t\u006fols":1,"TOOLS":2}}"#, "TOOLS"),
        // Paths are checked in their order: `elicitation.url` before `sampling`.
        (r#"{"Sampling":{},"elicitation":{"Url":1}}"#, "Url"),
    ] {
        assert_eq!(caps(declared), Err(ambiguous(key)), "{declared}");
    }
    let key = "io.modelcontextprotocol/client_capabilities";
    assert_eq!(meta(&format!(r#"{{"{key}":{{}}}}"#)), Err(ambiguous(key)));
    assert!(meta(r#"{"progressToken":1}"#).is_ok());
    assert!(meta("5").is_ok());
    // A look-alike of `_meta` itself is a params look-alike first.
    assert_eq!(verdict(&call(r#"{"_Meta":{}}"#)), Err(ambiguous("_Meta")));
    // The walk never meets an array index.
    for step in crate::jsonrpc::names::CAPABILITY_PATHS
        .iter()
        .flat_map(|p| p.iter())
    {
        assert!(!step.bytes().all(|b| b.is_ascii_digit()), "{step}");
    }
}

#[test]
fn a_clients_response_carries_no_state() {
    for (body, error) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"requestState":"x"}}"#,
            ParseError::StateInResponse,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"request_state":"x"}}"#,
            ambiguous("request_state"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"ResultType":"x"}}"#,
            ambiguous("ResultType"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"Message":"x"}}"#,
            ambiguous("Message"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"data":{"requestState":"x"}}}"#,
            ParseError::StateInResponse,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"data":{"input_requests":1}}}"#,
            ambiguous("input_requests"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"requestState":1},"error":{"Code":1}}"#,
            ParseError::StateInResponse,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"data":{"ſ":1}}}"#,
            ParseError::NonAsciiKey("\\u{17f}".into()),
        ),
    ] {
        assert_eq!(verdict(body), Err(error), "{body}");
    }
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","inputRequests":{},"x":1}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":[{"requestState":1}]}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"data":[{"requestState":1}]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":"x"}"#,
    ] {
        assert!(verdict(body).is_ok(), "{body}");
    }
}

#[test]
fn the_index_locates_the_members_the_sidecar_acts_on() {
    let body = call(
        r#"{"name":"t","arguments":{"a":[1,2]},"requestState":"s\u0074ate","inputResponses":{"q":{}},"_meta":{"k":1},"taskId":"x","idempotencyKey":"k","uri":"u"}"#,
    );
    let scanned = scan(body.as_bytes(), usize::MAX).unwrap();
    let at = |span: Option<Range<usize>>| &body[span.unwrap()];
    assert_eq!(
        at(scanned.index().envelope(EnvelopeField::Method)),
        r#""tools/call""#
    );
    assert_eq!(
        at(scanned.index().param(ParamsField::Arguments)),
        r#"{"a":[1,2]}"#
    );
    let state = scanned.index().param(ParamsField::RequestState).unwrap();
    assert_eq!(scanned.string(state).as_deref(), Some("state"));
    let name = scanned.index().param(ParamsField::Name).unwrap();
    assert!(matches!(scanned.string(name), Some(Cow::Borrowed("t"))));
    assert_eq!(
        scanned.string(scanned.index().param(ParamsField::Meta).unwrap()),
        None
    );
    assert_eq!(scanned.string(0..1), None);
    assert_eq!(scanned.index().result(ResultField::ResultType), None);
    agree(body.as_bytes(), usize::MAX).unwrap();

    let body = r#"{"jsonrpc":"2.0","id":"r","result":{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create"}}}}"#;
    let scanned = scan(body.as_bytes(), usize::MAX).unwrap();
    let span = scanned.index().result(ResultField::ResultType).unwrap();
    assert_eq!(&body[span], r#""input_required""#);
    assert!(scanned.index().param(ParamsField::Name).is_none());
    agree(body.as_bytes(), usize::MAX).unwrap();
}

#[test]
fn field_names_are_the_lists_fields() {
    let names = |names: &mut dyn Iterator<Item = &'static str>| {
        let mut names: Vec<_> = names.collect();
        names.sort();
        names
    };
    let sorted = |list: &[&'static str]| names(&mut list.iter().copied());
    assert_eq!(
        names(&mut EnvelopeField::ALL.iter().map(|f| f.name())),
        sorted(super::super::ENVELOPE_FIELDS)
    );
    assert_eq!(
        names(&mut ParamsField::ALL.iter().map(|f| f.name())),
        sorted(super::super::PARAMS_FIELDS)
    );
    assert_eq!(
        names(&mut ResultField::ALL.iter().map(|f| f.name())),
        sorted(super::super::RESULT_FIELDS)
    );
}
