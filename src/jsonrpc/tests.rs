//! The strict parser and the classifier, attacked: duplicates, look-alikes in every
//! Unicode case folding, value caps, and the shapes a message may not take.
use super::*;
use serde_json::json;

fn parse(text: &str) -> Result<Value, ParseError> {
    parse_strict(text.as_bytes())
}

#[test]
fn duplicate_keys_anywhere_are_refused() {
    for text in [
        r#"{"a":1,"a":2}"#,
        r#"{"params":{"requestState":"x","requestState":"y"}}"#,
        r#"{"x":[{"deep":{"k":1,"k":1}}]}"#,
        r#"{"requestState":1,"request\u0053tate":2}"#,
    ] {
        assert_eq!(parse(text), Err(ParseError::DuplicateKey), "{text}");
    }
    assert!(parse(r#"{"a":{"k":1},"b":{"k":1}}"#).is_ok());
}

#[test]
fn only_one_clean_value_parses() {
    assert_eq!(parse("\u{feff}{}"), Err(ParseError::Bom));
    assert_eq!(parse("{} {}"), Err(ParseError::Syntax));
    assert_eq!(parse("{}x"), Err(ParseError::Syntax));
    assert_eq!(parse(r#"{"a":"\ud800"}"#), Err(ParseError::Syntax));
    assert_eq!(parse_strict(b"{\"a\":\"\xff\"}"), Err(ParseError::Syntax));
    assert_eq!(parse(r#"{"a":NaN}"#), Err(ParseError::Syntax));
    assert_eq!(parse(""), Err(ParseError::Syntax));
    assert_eq!(
        parse(&format!("{}{}", "[".repeat(200), "]".repeat(200))),
        Err(ParseError::Syntax)
    );
    assert!(parse(" \n{}\r\n ").is_ok());
}

#[test]
fn numbers_keep_their_spelling() {
    // serde_json normalises only the exponent's spelling (`1E2` -> `1e+2`).
    let text = r#"{"a":1E2,"b":123456789012345678901234567890,"c":-0.0,"d":1.50}"#;
    let v = parse(text).unwrap();
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        r#"{"a":1e+2,"b":123456789012345678901234567890,"c":-0.0,"d":1.50}"#
    );
}

#[test]
fn classify_requests_notifications_and_responses() {
    let call =
        parse(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#).unwrap();
    assert!(matches!(
        classify(&call),
        Ok(Message::Call { id: Some(_), .. })
    ));
    let note = parse(r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#).unwrap();
    assert!(matches!(
        classify(&note),
        Ok(Message::Call { id: None, .. })
    ));
    let resp = parse(r#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}"#).unwrap();
    assert_eq!(classify(&resp), Ok(Message::Response { id: json!("s-1") }));
}

#[test]
fn classify_refusals() {
    let cases = [
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#,
            ParseError::Batch,
        ),
        (r#""text""#, ParseError::NotAnObject),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
            ParseError::Version,
        ),
        (r#"{"id":1,"method":"x"}"#, ParseError::Version),
        (r#"{"jsonrpc":"2.0","id":1,"method":5}"#, ParseError::Method),
        (r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#, ParseError::Id),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
            ParseError::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","result":{}}"#,
            ParseError::Mixed,
        ),
        (r#"{"jsonrpc":"2.0","id":1}"#, ParseError::NotAnObject),
        (r#"{"jsonrpc":"2.0","result":{}}"#, ParseError::Id),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"requestState":"x"}}"#,
            ParseError::StateInResponse,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{"request_state":"x"}}"#,
            ParseError::AmbiguousKey("request_state".into()),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","data":{"requestState":"x"}}}"#,
            ParseError::StateInResponse,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","Data":{}}}"#,
            ParseError::AmbiguousKey("Data".into()),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
            ParseError::Target("name"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":null}}"#,
            ParseError::Target("uri"),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(classify(&parse(text).unwrap()), Err(expected), "{text}");
    }
}

#[test]
fn ambiguous_spellings_of_guarded_fields_are_refused() {
    for key in [
        "RequestState",
        "request_state",
        "REQUEST-STATE",
        "requestState\u{0}",
        "input_responses",
        "Name",
        "_URI",
    ] {
        let params = json!({"name": "x", key: "v"});
        let envelope = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let err = classify(&envelope).unwrap_err();
        assert!(matches!(err, ParseError::AmbiguousKey(_)), "{key}: {err:?}");
    }
    for key in ["Params", "METHOD", "json_rpc", "ID", "Result"] {
        let top = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", key: "v"});
        assert!(
            matches!(classify(&top), Err(ParseError::AmbiguousKey(_))),
            "{key}"
        );
    }
    // Unrelated keys, and the exact names, are fine.
    let ok = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "x", "requestState": "t", "inputResponses": {}, "stateful": 1}});
    assert!(classify(&ok).is_ok());
    assert!(check_result_fields(json!({"request_state": "x"}).as_object().unwrap()).is_err());
}

#[test]
fn prototype_keys_and_misplaced_state_are_refused() {
    let proto = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","__proto__":{"requestState":"f"}}}"#;
    assert_eq!(
        parse(proto),
        Err(ParseError::AmbiguousKey("__proto__".into()))
    );
    assert!(parse(r#"{"a":[{"b":{"__proto__":1}}]}"#).is_err());
    assert!(parse(r#"{"proto":1,"__proto":2}"#).is_ok());
    for key in ["requestState", "request_state", "inputResponses"] {
        let top =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", key: "x", "params": {}});
        assert!(
            matches!(classify(&top), Err(ParseError::AmbiguousKey(_))),
            "{key}"
        );
    }
}

/// Every non-ASCII character whose Unicode case mappings contain ASCII letters, with
/// those letters (lowercased): what a folding parser may read it as.
fn ascii_look_alikes() -> Vec<(char, String)> {
    let letters = |mapping: &mut dyn Iterator<Item = char>| -> String {
        mapping
            .filter(char::is_ascii_alphabetic)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    (0..=0x10FFFF)
        .filter_map(char::from_u32)
        .filter(|c| !c.is_ascii())
        .filter_map(|c| {
            let (lower, upper) = (
                letters(&mut c.to_lowercase()),
                letters(&mut c.to_uppercase()),
            );
            // No character maps to ASCII letters both ways: which mapping a parser
            // uses cannot change what the character stands for.
            assert!(
                lower.is_empty() || upper.is_empty(),
                "{c:?}: {lower} / {upper}"
            );
            let letters = lower + &upper;
            (!letters.is_empty()).then_some((c, letters))
        })
        .collect()
}

/// Every spelling of `name` with one run of its letters replaced by a look-alike.
fn look_alike_spellings(name: &str, alikes: &[(char, String)]) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    let mut spellings = Vec::new();
    for (c, letters) in alikes {
        for (at, _) in lower.match_indices(letters.as_str()) {
            spellings.push(format!("{}{c}{}", &name[..at], &name[at + letters.len()..]));
        }
    }
    spellings
}

/// Why `key` is refused at `level`, if it is: each level through the check that
/// guards it (the gate's `classify`, or the sealer's own checks).
fn refusal_at(level: &str, key: &str) -> Option<ParseError> {
    let call = |params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let single = json!({key: 1});
    let single = single.as_object().unwrap();
    let outcome = match level {
        "envelope" => {
            classify(&json!({"jsonrpc": "2.0", "id": 1, "method": "x", key: 1})).map(drop)
        }
        "params" => classify(&call(json!({"name": "x", key: 1}))).map(drop),
        "result" => classify(&json!({"jsonrpc": "2.0", "id": 1, "result": {key: 1}}))
            .map(drop)
            .and(check_result_fields(single)),
        "error" => check_reserved(single, ERROR_FIELDS),
        "error.data" => check_result_fields(single),
        "inputResponses" => {
            classify(&call(json!({"name": "x", "inputResponses": {key: {}}}))).map(drop)
        }
        _ => unreachable!("{level}"),
    };
    outcome.err()
}

#[test]
fn unicode_look_alikes_of_guarded_fields_are_refused_at_every_level() {
    let alikes = ascii_look_alikes();
    for c in ['\u{17f}', '\u{212a}', '\u{130}', '\u{131}'] {
        assert!(alikes.iter().any(|(a, _)| *a == c), "{c:?} missing");
    }
    let misplaced = ["requestState", "inputResponses"];
    let all: Vec<&str> = [ENVELOPE_FIELDS, PARAMS_FIELDS, RESULT_FIELDS, ERROR_FIELDS]
        .concat()
        .into_iter()
        .chain(misplaced)
        .collect();
    let levels: [(&str, &[&str]); 6] = [
        ("envelope", ENVELOPE_FIELDS),
        ("envelope", &misplaced),
        ("params", PARAMS_FIELDS),
        ("result", RESULT_FIELDS),
        ("error", ERROR_FIELDS),
        ("error.data", RESULT_FIELDS),
    ];
    let mut checked = 0;
    for (level, names) in levels {
        for name in names {
            for key in look_alike_spellings(name, &alikes) {
                assert_eq!(fold(&key), fold(name), "{key:?}");
                let refusal = refusal_at(level, &key);
                let expected = match *name {
                    // Refused on the envelope as a non-ASCII key before the misplaced
                    // check looks, which is just as final.
                    "requestState" | "inputResponses" if level == "envelope" => {
                        matches!(refusal, Some(ParseError::NonAsciiKey(_)))
                    }
                    _ => matches!(refusal, Some(ParseError::AmbiguousKey(_))),
                };
                assert!(expected, "{level}: {key:?} -> {refusal:?}");
                checked += 1;
            }
        }
    }
    // Answers have no reserved names: every non-ASCII key is refused as such.
    for name in &all {
        for key in look_alike_spellings(name, &alikes) {
            let refusal = refusal_at("inputResponses", &key);
            assert!(
                matches!(refusal, Some(ParseError::NonAsciiKey(_))),
                "inputResponses: {key:?} -> {refusal:?}"
            );
            checked += 1;
        }
    }
    // 19 characters today (ß, İ, ı, ſ, K, the ﬀ–ﬆ ligatures, ...): the loops ran.
    assert!(checked > 100, "{checked}");
}

#[test]
fn fold_reads_keys_as_folding_parsers_do() {
    for (key, folded) in [
        ("requeſtState", "requeststate"),
        ("REQUEſTſTATE", "requeststate"),
        ("ınputResponses", "inputresponses"),
        ("İd", "id"),
        ("\u{212a}ind", "kind"),
        ("claß", "class"),
        ("\u{fb03}x", "ffix"),
        ("request_state\u{0}", "requeststate"),
        ("é", ""),
    ] {
        assert_eq!(fold(key), folded, "{key:?}");
    }
}

#[test]
fn non_ascii_keys_are_refused_where_names_are_guarded_only() {
    for level in [
        "envelope",
        "params",
        "result",
        "error",
        "error.data",
        "inputResponses",
    ] {
        for key in ["é", "\u{212a}", "名前", "x\u{200b}"] {
            let refusal = refusal_at(level, key);
            assert!(
                matches!(refusal, Some(ParseError::NonAsciiKey(_))),
                "{level}: {key:?} -> {refusal:?}"
            );
        }
    }
    // The tool's arguments, and values anywhere, are the upstream's business.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "naïve", "arguments": {"requeſtState": "x", "é": {"ı": 1}},
        "inputResponses": {"region": {"content": {"é": "ü"}}}}});
    assert!(classify(&call).is_ok());
}

#[test]
fn refused_keys_are_rendered_printable_and_bounded() {
    let err = check_reserved(
        json!({"reque\u{17f}tState": 1}).as_object().unwrap(),
        PARAMS_FIELDS,
    );
    assert_eq!(
        err,
        Err(ParseError::AmbiguousKey(r"reque\u{17f}tState".into()))
    );
    assert_eq!(printable("a\\b c\u{0}\n"), r"a\u{5c}b c\u{0}\u{a}");
    let long = printable(&"\u{202e}".repeat(100));
    assert!(
        long.len() <= 64 + 3 && long.ends_with("...") && long.is_ascii(),
        "{long}"
    );
    assert_eq!(printable(&"x".repeat(64)), "x".repeat(64));
}

#[test]
fn the_value_count_is_capped() {
    for (text, values) in [
        ("1", 1),
        (r#""s""#, 1),
        ("[[],{}]", 3),
        // The object, the array, 1, the inner object, null, "x": keys are not values.
        (r#"{"a":[1,{"b":null}],"c":"x"}"#, 6),
        // An arbitrary-precision number reaches the visitor as a map: one value still.
        (r#"[123456789012345678901234567890,1.5e+300,-0.0,7]"#, 5),
    ] {
        let bytes = text.as_bytes();
        assert!(parse_bounded(bytes, values).is_ok(), "{text}");
        assert_eq!(
            parse_bounded(bytes, values - 1),
            Err(ParseError::TooManyValues),
            "{text}"
        );
        assert_eq!(parse_bounded(bytes, values), parse_strict(bytes), "{text}");
    }
    assert_eq!(parse_bounded(b"1", 0), Err(ParseError::TooManyValues));
}

#[test]
fn a_huge_array_stops_at_the_cap() {
    // 4 MiB of zeros: the cap answers, so the parse never built two million values.
    let mut body = br#"{"params":{"name":"x","arguments":{"a":["#.to_vec();
    while body.len() < 4 << 20 {
        body.extend_from_slice(b"0,");
    }
    let mut valid = body.clone();
    valid.extend_from_slice(b"0]}}}");
    assert_eq!(
        parse_bounded(&valid, 100_000),
        Err(ParseError::TooManyValues)
    );
    // Ending in a syntax error, it is not JSON at all: that is what the client hears.
    body.extend_from_slice(b"x]}}}");
    assert_eq!(parse_bounded(&body, 100_000), Err(ParseError::Syntax));
}

#[test]
fn text_that_is_not_json_is_a_syntax_error_whatever_was_refused_first() {
    // Found by the `gate` fuzz target: a prototype key, a duplicate or the value cap
    // before a syntax error answered -32600 for a body that is not JSON (-32700).
    for text in [
        r#"{"params":{"__proto__":{":"2.0","id":3"#,
        r#"{"a":1,"a":2,"#,
        r#"[1,2,3,"#,
    ] {
        assert_eq!(
            parse_bounded(text.as_bytes(), 2),
            Err(ParseError::Syntax),
            "{text}"
        );
        assert_eq!(ParseError::Syntax.code(), PARSE_ERROR);
    }
    // Invalid UTF-8 after the refusal, which a syntax pass skipping strings would miss.
    let text = b"{\"params\":{\"__proto__\":{},\"in\x8cutResponses\":{}}}";
    assert_eq!(parse_bounded(text, 100), Err(ParseError::Syntax));
    assert_eq!(
        parse_bounded(br#"{"params":{"__proto__":{}}}"#, 100),
        Err(ParseError::AmbiguousKey("__proto__".into()))
    );
    assert_eq!(parse_bounded(b"[1,2,3]", 2), Err(ParseError::TooManyValues));
}

#[test]
fn the_cap_changes_no_other_refusal() {
    let cap = |text: &str| parse_bounded(text.as_bytes(), 1000);
    assert_eq!(cap(r#"{"a":{"k":1,"k":2}}"#), Err(ParseError::DuplicateKey));
    assert_eq!(
        cap(r#"{"a":[{"__proto__":{}}]}"#),
        Err(ParseError::AmbiguousKey("__proto__".into()))
    );
    assert_eq!(cap("{}x"), Err(ParseError::Syntax));
    let v = cap(r#"{"a":1E2,"b":123456789012345678901234567890,"d":1.50}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        r#"{"a":1e+2,"b":123456789012345678901234567890,"d":1.50}"#
    );
    let (too_many, non_ascii) = (
        ParseError::TooManyValues,
        ParseError::NonAsciiKey("x".into()),
    );
    assert_eq!(
        (too_many.code(), too_many.label()),
        (INVALID_REQUEST, "too_many_values")
    );
    assert_eq!(
        (non_ascii.code(), non_ascii.label()),
        (INVALID_REQUEST, "non_ascii_key")
    );
}

#[test]
fn error_bodies() {
    let body = error_body(
        Some(&json!(3)),
        INVALID_PARAMS,
        "Invalid or expired requestState",
        Some(json!({"reason": "invalid_request_state"})),
    );
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Invalid or expired requestState","data":{"reason":"invalid_request_state"}}}"#
    );
    let body = error_body(None, PARSE_ERROR, "Parse error", None);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
    );
}

/// A body that is not JSON (too deep, a lone surrogate escape, bad UTF-8) is -32700
/// whether or not a refusal (`__proto__`, a duplicate key) came first in it.
#[test]
fn syntax_decides_the_same_with_or_without_a_refusal_first() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let not_json: [&[u8]; 4] = [deep.as_bytes(), br#""\ud800""#, b"\"\xff\"", b"[1,]"];
    for body in not_json {
        let alone = parse_bounded(body, 100_000);
        assert_eq!(
            alone,
            Err(ParseError::Syntax),
            "{:?}",
            String::from_utf8_lossy(body)
        );
        for refusal in [&br#"{"__proto__":1,"a":"#[..], br#"{"a":1,"a":"#] {
            let both = [refusal, body, b"}"].concat();
            assert_eq!(
                parse_bounded(&both, 100_000),
                Err(ParseError::Syntax),
                "{:?}",
                String::from_utf8_lossy(&both)
            );
        }
    }
    // A refusal in a body that is JSON keeps its own code.
    let fine = format!(
        "{{\"__proto__\":1,\"a\":{}{}}}",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert_eq!(
        parse_bounded(fine.as_bytes(), 100_000),
        Err(ParseError::AmbiguousKey("__proto__".into()))
    );
}

#[test]
fn folds_equal_is_fold_compared() {
    let names = [
        "requestState",
        "RequestState",
        "request_state",
        "request-state",
        "requeſtState",
        "REQUESTSTATE",
        "requestStat",
        "requestStates",
        "",
        "_",
        "K",
        "\u{212a}",
        "k",
        "straße",
        "STRASSE",
        "io.modelcontextprotocol/clientCapabilities",
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientInfo",
        "requestStatE",
        "requestState_",
        "requestStateſ",
        "ﬁle",
        "FILE",
        "İd",
        "id",
    ];
    for a in names {
        for b in names {
            assert_eq!(folds_equal(a, b), fold(a) == fold(b), "{a:?} {b:?}");
        }
    }
}

proptest::proptest! {
    /// Names from ASCII and the characters whose folds are special (several letters,
    /// none, a look-alike of an ASCII letter): `folds_equal` is `fold` compared, whether
    /// the names part in their ASCII or after a non-ASCII character.
    #[test]
    fn folds_equal_is_fold_compared_for_any_names(
        a in "[a-zA-Z0-9_./ -]{0,6}[ßſKİıﬁ€中é]{0,2}[a-zA-Z0-9_-]{0,6}",
        b in "[a-zA-Z0-9_./ -]{0,6}[ßſKİıﬁ€中é]{0,2}[a-zA-Z0-9_-]{0,6}",
    ) {
        proptest::prop_assert_eq!(folds_equal(&a, &b), fold(&a) == fold(&b), "{:?} {:?}", a, b);
        let twin = fold(&a);
        proptest::prop_assert!(folds_equal(&a, &twin), "{:?} {:?}", a, twin);
    }

    /// Names that share their ends (the first and last bytes say nothing then) and part
    /// in their middle, in ASCII or not.
    #[test]
    fn folds_equal_is_fold_compared_between_shared_ends(
        first in "[a-zA-Z0-9_éK]{0,2}",
        a in "[éèßſK€a-zA-Z_.]{0,3}",
        b in "[éèßſK€a-zA-Z_.]{0,3}",
        last in "[a-zA-Z0-9_ſK]{0,2}",
    ) {
        let (a, b) = (format!("{first}{a}{last}"), format!("{first}{b}{last}"));
        proptest::prop_assert_eq!(folds_equal(&a, &b), fold(&a) == fold(&b), "{:?} {:?}", a, b);
    }

    /// Names that share a prefix (compared as bytes and skipped): also when they part
    /// inside a character, between characters whose UTF-8 starts the same (`é` `è` `ß`
    /// share their first byte, the Kelvin sign and `€` their first).
    #[test]
    fn folds_equal_is_fold_compared_after_a_shared_prefix(
        prefix in "[a-zA-Z0-9_./-]{0,12}[éſ中K]{0,2}[a-z]{0,9}",
        a in "[éèßſK€a-zA-Z_]{0,3}",
        b in "[éèßſK€a-zA-Z_]{0,3}",
    ) {
        let (a, b) = (format!("{prefix}{a}"), format!("{prefix}{b}"));
        proptest::prop_assert_eq!(folds_equal(&a, &b), fold(&a) == fold(&b), "{:?} {:?}", a, b);
    }
}
