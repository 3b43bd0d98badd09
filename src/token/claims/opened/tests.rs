use super::super::{Flow, MintClaims, RequestBinding, StateText, principal_claim};
use super::*;
use proptest::prelude::*;
use serde_json::json;

/// Both readings of `text`, which must agree whenever the layout reads it.
fn readings(text: &str) -> (Option<OpenedClaims<'_>>, Option<OpenedClaims<'_>>) {
    (
        OpenedClaims::read_layout(text),
        OpenedClaims::read_general(text.as_bytes()),
    )
}

/// The reading with the questions (`decode_in`) against `decode` and a read of the
/// questions afterwards (what a token opened outside an arena has): the same claims, and
/// the same questions, tree for tree.
fn read_in_arena_as_after(text: &str) {
    let arena = LiteArena::new();
    let read_in = OpenedClaims::decode_in(text, &arena);
    let decoded = OpenedClaims::decode(text.as_bytes());
    assert_eq!(
        read_in.as_ref().map(|(claims, _)| claims),
        decoded.as_ref(),
        "{text}"
    );
    let (Some((_, questions)), Some(decoded)) = (read_in, decoded) else {
        return;
    };
    let later = LiteArena::new();
    let unread = decoded.qd.map(Questions::unread);
    assert_eq!(
        questions.as_ref().map(|q| q.read(&arena)),
        unread.as_ref().map(|q| q.read(&later)),
        "{text}"
    );
}

fn binding(path: Option<&str>) -> RequestBinding {
    let params = json!({"name": "provision", "arguments": {"name": "web-1"}});
    let binding = RequestBinding::of("tools/call", params.as_object()).unwrap();
    match path {
        Some(path) => binding.at_path(path),
        None => binding,
    }
}

/// Claims as the sidecar mints them, every optional member present or not.
fn minted(state: &str, all: bool, path: Option<&str>) -> String {
    let binding = binding(path);
    let asked = ["region".to_owned(), "z\u{e9}".to_owned()];
    let claims = MintClaims {
        iat: 1_800_000_000.0,
        exp: 1_800_000_600.0,
        binding: &binding,
        state: StateText::Plain(state),
        audience: all.then_some("svc"),
        principal_claim: all.then(|| principal_claim("alice", *b"saltsalt")),
        single_use: all,
        no_upstream_state: all,
        asked: all.then_some(&asked[..]),
        questions: all.then_some(r#"{"region":{"m":"elicitation/create","k":"form","s":{"type":"object","n":[1,2.5,null,true]}}}"#),
        flow: all.then_some(Flow {
            round: 3,
            started: 1_799_999_000.0,
        }),
    };
    let mut text = String::new();
    claims.encode_into(&mut text);
    text
}

#[test]
fn minted_claims_are_read_by_their_layout_as_serde_json_reads_them() {
    for state in ["", "plain", "{\"k\":\"v\"}", "é\u{1}\n😀\\"] {
        for all in [false, true] {
            for path in [None, Some("/mcp"), Some("/a\"b")] {
                let text = minted(state, all, path);
                let (layout, general) = readings(&text);
                assert!(layout.is_some(), "{text}");
                assert_eq!(layout, general, "{text}");
                let decoded = OpenedClaims::decode(text.as_bytes()).unwrap();
                assert_eq!(serde_json::from_str::<String>(decoded.s).unwrap(), state);
                read_in_arena_as_after(&text);
            }
        }
    }
}

#[test]
fn a_float_claim_is_read_as_serde_json_reads_it() {
    for token in [
        "0.0",
        "0",
        "1",
        "1800000000",
        "999999999999999",
        "9999999999999999",
        "-1",
        "1.0",
        "1800000000.0",
        "999999999999999.0",
        "9999999999999999.0",
        "9007199254740993.0",
        "-1.0",
        "1.5",
        "1.00",
        "1e3",
        "1764568800.1234567",
        "0.5",
        "0.0000000000000000001",
        "1234567890.123456789",
        "12345678901234567890",
        "1234567890.1234567890",
        "18446744073709551615",
        "18446744073709551616",
        "1.",
        ".5",
        "1.2.3",
        "1..2",
    ] {
        let expected = serde_json::from_str::<f64>(token).ok();
        assert_eq!(
            float(token).map(f64::to_bits),
            expected.map(f64::to_bits),
            "{token}"
        );
    }
}

/// Times as every minter writes them (Python's `repr` of `time.time()`, its shortest
/// round-trip spelling): read to the same bits as serde_json reads them, over a spread of
/// magnitudes and of fraction lengths (where the digits pass 2^53 and round twice).
#[test]
fn a_minted_time_is_read_as_serde_json_reads_it() {
    let mut time = 1.0f64;
    for step in 0..200_000u64 {
        time = (time * 1.000_173 + (step % 997) as f64 / 1e6) % 1e12;
        for token in [
            format!("{time:?}"),
            format!("{time:.1}"),
            format!("{time:.7}"),
            format!("{time:.9}"),
        ] {
            let expected = serde_json::from_str::<f64>(&token).ok();
            assert_eq!(
                float(&token).map(f64::to_bits),
                expected.map(f64::to_bits),
                "{token}"
            );
        }
    }
}

#[test]
fn the_references_claims_are_read_alike() {
    // As the reference writes them: `time.time()` with a fraction, no member of ours.
    let text = r#"{"v":1,"iat":1764568800.1234567,"exp":1764569400.1234567,"m":"tools/call","t":"provision","a":"RBNvo1WzZ4oRRq0W9-hknp","s":"{\"k\":1}","aud":"svc","p":"c2FsdA"}"#;
    let (layout, general) = readings(text);
    assert!(layout.is_some());
    assert_eq!(layout, general);
}

#[test]
fn anything_laid_out_otherwise_is_left_to_serde_json() {
    let base = minted("s", true, Some("/mcp"));
    let variants = [
        // Whitespace, another order, an unknown member, a `null` where a string goes.
        base.replacen(',', ", ", 1),
        base.replacen(r#"{"v":1,"iat""#, r#"{"iat""#, 1)
            .replacen(r#""exp""#, r#""v":1,"exp""#, 1),
        base.replacen('}', r#","zz":1}"#, 1),
        base.replacen(r#""aud":"svc""#, r#""aud":null"#, 1),
        base.replacen(r#""qd":{"#, r#""qd":null,"x":{"#, 1),
        base.replacen(r#""n":3"#, r#""n":3.0"#, 1),
        base.replacen(r#""n":3"#, r#""n":1e0"#, 1),
        base.replacen(r#""su":true"#, r#""su":false"#, 1),
    ];
    for text in &variants {
        let (layout, general) = readings(text);
        if let Some(layout) = &layout {
            assert_eq!(Some(layout), general.as_ref(), "{text}");
        }
    }
    // Where the layout reads `false` it reads what serde_json reads.
    let (layout, general) = readings(&variants[7]);
    assert!(layout.is_some() && layout == general);
    // Out of order: only serde_json reads it, and it does.
    let (layout, general) = readings(&variants[1]);
    assert!(layout.is_none() && general.is_some());
}

proptest! {
    /// Any edit of minted claims (a byte changed, dropped or added, anywhere): the
    /// layout reading gives up, or reads exactly what serde_json reads.
    #[test]
    fn the_layout_reads_nothing_serde_json_reads_otherwise(
        state in "[a-z\"\\\\é\u{1}]{0,12}",
        all in any::<bool>(),
        at in 0usize..1000,
        edit in 0u8..3,
        byte in prop::sample::select(b"\"\\,:{}[]01.-+eEtfnul \x7fa\xc3\xa9".to_vec()),
    ) {
        let mut text = minted(&state, all, Some("/mcp")).into_bytes();
        let at = at % text.len();
        match edit {
            0 => text[at] = byte,
            1 => { text.remove(at); }
            _ => text.insert(at, byte),
        }
        let Ok(text) = std::str::from_utf8(&text) else {
            return Ok(());
        };
        let (layout, general) = readings(text);
        if layout.is_some() {
            prop_assert_eq!(layout, general, "{}", text);
        }
        read_in_arena_as_after(text);
    }
}

/// Questions the strict parse refuses but serde_json reads (a key twice, `__proto__`, a
/// nesting past the layout's depth) open the same with the claims read in an arena:
/// the claims read, the questions do not (their check refuses the retry).
#[test]
fn questions_read_with_the_claims_refuse_what_the_strict_parse_refuses() {
    let base = minted("st", true, Some("/mcp"));
    let with = |qd: &str| {
        let at = base.find(r#""qd":"#).unwrap() + 5;
        let end = base.rfind(r#","n":"#).unwrap();
        format!("{}{qd}{}", &base[..at], &base[end..])
    };
    let deep = |levels: usize| format!("{{\"a\":{}1{}}}", "[".repeat(levels), "]".repeat(levels));
    for (qd, reads) in [
        (r#"{"region":{"m":"elicitation/create"}}"#.to_owned(), true),
        (
            r#"{"region":{"m":"a"},"region":{"m":"b"}}"#.to_owned(),
            false,
        ),
        (r#"{"__proto__":{}}"#.to_owned(), false),
        (
            r#"{"r":{"$serde_json::private::Number":"1"}}"#.to_owned(),
            false,
        ),
        (deep(40), true),
        (deep(126), true),
        // serde_json passes over a raw value at any depth; the strict parse does not.
        (deep(127), false),
    ] {
        let text = with(&qd);
        read_in_arena_as_after(&text);
        let arena = LiteArena::new();
        let (_, questions) = OpenedClaims::decode_in(&text, &arena).expect(&text);
        assert_eq!(questions.unwrap().read(&arena).is_some(), reads, "{qd}");
    }
}
