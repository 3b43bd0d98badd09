use super::*;

/// The byte-at-a-time statement of what [`escaped_bytes`] flags: the word readings are
/// held to it.
fn needs_escape(b: u8) -> bool {
    !(b' '..=b'~').contains(&b) || b == b'"' || b == b'\\'
}

fn canon(json: &str) -> String {
    let value: Value = serde_json::from_str(json).unwrap();
    let mut out = String::new();
    write_python_json(&value, true, &mut out).unwrap();
    out
}

#[test]
fn objects_of_any_size_are_written_in_key_order() {
    // Around the number ordered on the stack: one short of it, it, one past, many.
    for n in [
        0,
        1,
        FEW_MEMBERS - 1,
        FEW_MEMBERS,
        FEW_MEMBERS + 1,
        3 * FEW_MEMBERS,
    ] {
        // Keys given in reverse order, each member's value its own small object.
        let members: Vec<String> = (0..n)
            .rev()
            .map(|i| format!("\"k{i:03}\": {{\"z\": {i}, \"a\": [{i}]}}"))
            .collect();
        let written = canon(&format!("{{{}}}", members.join(", ")));
        let expected: Vec<String> = (0..n)
            .map(|i| format!("\"k{i:03}\":{{\"a\":[{i}],\"z\":{i}}}"))
            .collect();
        assert_eq!(
            written,
            format!("{{{}}}", expected.join(",")),
            "{n} members"
        );
    }
}

#[test]
fn floats_follow_python_repr() {
    // Expected strings are `json.dumps(json.loads(x))` from CPython 3.11.
    let cases = [
        ("1E2", "100.0"),
        ("1e16", "1e+16"),
        ("1e15", "1000000000000000.0"),
        ("1e-5", "1e-05"),
        ("0.0001", "0.0001"),
        ("-0.0", "-0.0"),
        ("0.0", "0.0"),
        ("1.5e-7", "1.5e-07"),
        ("123456789012345678.0", "1.2345678901234568e+17"),
        ("0.1", "0.1"),
        ("2.5", "2.5"),
        ("1e400", "Infinity"),
        ("-1e400", "-Infinity"),
        ("1e-400", "0.0"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("5e-324", "5e-324"),
        ("12345.678e3", "12345678.0"),
        // Integral below 1e16, positive and negative, beside fractions next to them.
        ("9999999999999998.0", "9999999999999998.0"),
        ("-42.0", "-42.0"),
        ("4503599627370495.5", "4503599627370495.5"),
        ("-9007199254740993.0", "-9007199254740992.0"),
        ("1800000000.0", "1800000000.0"),
        ("1e100", "1e+100"),
        // A tie between two shortest spellings: CPython picks the even digit.
        ("-7.052182864350623E+14", "-705218286435062.2"),
    ];
    for (input, expected) in cases {
        assert_eq!(canon(input), expected, "input {input}");
    }
}

#[test]
fn integers_are_verbatim_at_any_size() {
    assert_eq!(canon("-0"), "0");
    assert_eq!(
        canon("123456789012345678901234567890"),
        "123456789012345678901234567890"
    );
    assert_eq!(canon("-18446744073709551617"), "-18446744073709551617");
}

#[test]
fn integers_python_refuses_are_errors() {
    let huge: Value = serde_json::from_str(&"9".repeat(4301)).unwrap();
    let mut out = String::new();
    assert_eq!(
        write_python_json(&huge, true, &mut out),
        Err(CanonicalError::IntegerTooLong)
    );
    let fits: Value = serde_json::from_str(&"9".repeat(4300)).unwrap();
    assert!(write_python_json(&fits, true, &mut String::new()).is_ok());
}

#[test]
fn strings_escape_like_ensure_ascii() {
    assert_eq!(canon(r#""é""#), r#""\u00e9""#);
    assert_eq!(canon(r#""😀""#), r#""\ud83d\ude00""#);
    assert_eq!(
        canon("\"\\u0000\\u001f\\u007f\""),
        r#""\u0000\u001f\u007f""#
    );
    assert_eq!(canon(r#""\b\f\n\r\t\"\\/""#), r#""\b\f\n\r\t\"\\/""#);
    assert_eq!(canon(r#""\u2028""#), r#""\u2028""#);
}

#[test]
fn verbatim_runs_stop_at_every_byte_that_needs_escaping() {
    for special in [0x00u8, 0x1f, b'"', b'\\', 0x7f, 0x80, 0xc3, 0xff] {
        for at in 0..20 {
            let mut bytes = vec![b'a'; 20];
            bytes[at] = special;
            assert_eq!(verbatim_prefix_len(&bytes), at, "byte {special:#x} at {at}");
        }
    }
    assert_eq!(verbatim_prefix_len(b" !~}0123456789abcdef"), 20);
    assert_eq!(verbatim_prefix_len(b""), 0);
}

#[test]
fn objects_sort_by_code_point_and_nest() {
    assert_eq!(
        canon(r#"{"b":1,"a":{"z":[1,{"y":null,"x":true}],"é":false,"Z":0}}"#),
        r#"{"a":{"Z":0,"z":[1,{"x":true,"y":null}],"\u00e9":false},"b":1}"#
    );
    assert_eq!(
        canon(r#"{"😀":1,"\uffff":2}"#),
        r#"{"\uffff":2,"\ud83d\ude00":1}"#
    );
}

#[test]
fn lone_surrogates_do_not_parse() {
    // The reference would digest the escaped surrogate; we refuse the text instead.
    assert!(serde_json::from_str::<Value>(r#""\ud800""#).is_err());
}

#[test]
fn a_token_is_spelled_as_python_spells_it_only_when_written_so() {
    let spelled = [
        (r#""""#, 0),
        (r#""plain""#, 5),
        (r#""{\"k\":\"v\"}""#, 9),
        (r#""a\\b\n\r\t\b\f""#, 8),
    ];
    for (token, len) in spelled {
        assert_eq!(python_spelled_len(token), Some(len), "{token}");
    }
    // Escapes `write_string` does not write, or bytes it escapes.
    for token in [
        r#""\/""#,
        r#""\u0041""#,
        r#""\u00e9""#,
        "\"é\"",
        "\"\u{7f}\"",
        r#""\""#,
        "x",
        "\"",
    ] {
        assert_eq!(python_spelled_len(token), None, "{token}");
    }
}

/// Long tokens against the definition: a token said to be spelled so is what
/// `write_string` writes for the value serde_json reads from it, and that value's
/// length; a token without a `\u` escape (which `python_spelled_len` never takes as
/// is) is said so exactly then. Every byte that matters, alone or as an escape's
/// second byte, at every place between 90 plain bytes.
#[test]
fn python_spelled_len_reads_long_tokens_as_write_string_writes_them() {
    let written_so = |token: &str| -> Option<usize> {
        let value: String = serde_json::from_str(token).ok()?;
        let mut written = String::new();
        write_string(&value, &mut written);
        (written == token).then_some(value.len())
    };
    let pieces = [
        "\\\"", "\\\\", "\\n", "\\b", "\\/", "\\u0041", "\\u0001", "\"", "\\", "é", "\u{7f}",
        "\u{1f}", "~", " ",
    ];
    for piece in pieces {
        for at in 0..=90 {
            let token = format!("\"{}{piece}{}\"", "a".repeat(at), "b".repeat(90 - at));
            let spelled = python_spelled_len(&token);
            match piece.contains("\\u") {
                false => assert_eq!(spelled, written_so(&token), "{token:?}"),
                true => assert_eq!(spelled, None, "{token:?}"),
            }
        }
    }
}

proptest::proptest! {
    /// What `write_string` writes is spelled so, with the value's length; and a token
    /// said to be spelled so is what `write_string` writes for its value, whatever
    /// spelling it came in (serde_json's, or escapes chosen at random).
    #[test]
    fn python_spelled_len_holds_to_write_string(
        value in "[ -~\t\n\r\u{8}\u{c}\u{1}\u{7f}é\u{1F600}\"\\\\/]{0,40}",
        escape_slash in proptest::bool::ANY,
    ) {
        let mut written = String::new();
        write_string(&value, &mut written);
        // Spelled so unless `write_string` wrote a `\u` escape (not taken as is).
        let two_char_escapes_only = value
            .chars()
            .all(|c| matches!(c, ' '..='~' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}'));
        proptest::prop_assert_eq!(
            python_spelled_len(&written),
            two_char_escapes_only.then_some(value.len())
        );
        let mut token = serde_json::to_string(&value).unwrap();
        if escape_slash {
            token = token.replace('/', "\\/");
        }
        if let Some(len) = python_spelled_len(&token) {
            let read: String = serde_json::from_str(&token).unwrap();
            let mut rewritten = String::new();
            write_string(&read, &mut rewritten);
            proptest::prop_assert_eq!(&rewritten, &token);
            proptest::prop_assert_eq!(len, read.len());
        }
    }
}

/// [`read_string_rest`] one byte at a time: where the closing quote is, whether the
/// inside is as `write_string` writes it, and its escapes then.
fn read_string_rest_bytewise(bytes: &[u8], mut at: usize) -> Option<(usize, bool, usize)> {
    let (mut spelled, mut escapes) = (true, 0);
    loop {
        match *bytes.get(at)? {
            b'"' => return Some((at, spelled, escapes)),
            b'\\' => {
                match bytes.get(at + 1)? {
                    b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f' => escapes += 1,
                    _ => spelled = false,
                }
                at += 2;
            }
            b' '..=b'~' => at += 1,
            _ => {
                spelled = false;
                at += 1;
            }
        }
    }
}

/// Escape-dense strings (a JSON text carried as a string: an escape every few bytes,
/// several in one word, one across two words, marks of the word test above the first
/// that are wrong): the word reading agrees with the byte reading on twenty thousand of
/// them.
#[test]
fn escape_dense_strings_read_as_the_byte_reading_reads_them() {
    const ALPHABET: &[u8] = b"\\\\\"\"nrtbfu/a~ \x00\x1f\x7f\x80\xff";
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) as usize
    };
    for _ in 0..20_000 {
        let len = next() % 40;
        let bytes: Vec<u8> = (0..len)
            .map(|_| ALPHABET[next() % ALPHABET.len()])
            .collect();
        let from = next() % 4;
        let read = read_string_rest(&bytes, from).map(|r| (r.quote, r.spelled, r.escapes));
        let by_byte = read_string_rest_bytewise(&bytes, from);
        match (read, by_byte) {
            (Some((q, true, e)), Some((bq, true, be))) => assert_eq!((q, e), (bq, be), "{bytes:?}"),
            (Some((q, false, _)), Some((bq, false, _))) => assert_eq!(q, bq, "{bytes:?}"),
            (a, b) => assert!(a.is_none() && b.is_none(), "{a:?} {b:?} {bytes:?}"),
        }
    }
}

/// DEL first in a word of printable bytes: escaped, and no part of a spelled token
/// (the word test marks it by its carry into the high bit, which the quote, backslash
/// and control tests do not see).
#[test]
fn del_in_a_word_is_found_by_the_word_readings() {
    let bytes = b"\x7faaaaaaa\"";
    assert_eq!(verbatim_prefix_len(bytes), 0);
    let read = read_string_rest(bytes, 0).expect("a closing quote");
    assert_eq!((read.quote, read.spelled), (8, false));
}

proptest::proptest! {
    // A failing case is shown, not written next to the sources.
    #![proptest_config(proptest::prelude::ProptestConfig {
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The word-at-a-time readings agree with the byte-at-a-time ones on any bytes: the
    /// first byte `write_string` escapes, and a string token's end and spelling, wherever
    /// the special bytes fall against the eight-byte words (controls, DEL, high bytes,
    /// quotes, backslashes, the end of the input).
    #[test]
    fn the_word_readings_agree_with_the_byte_readings(
        bytes in proptest::collection::vec(
            proptest::prop_oneof![
                8 => proptest::sample::select(b"ab~ /".to_vec()),
                1 => proptest::sample::select(b"\"\\nu\x00\x1f\x7f\x80\xc3\xa9\xff".to_vec()),
            ],
            0..64,
        ),
        from in 0usize..10,
    ) {
        let expected = bytes.iter().position(|&b| needs_escape(b)).unwrap_or(bytes.len());
        proptest::prop_assert_eq!(verbatim_prefix_len(&bytes), expected);
        let read = read_string_rest(&bytes, from).map(|r| (r.quote, r.spelled, r.escapes));
        let by_byte = read_string_rest_bytewise(&bytes, from);
        match (read, by_byte) {
            // The escapes are counted only for a spelled inside.
            (Some((q, true, e)), Some((bq, true, be))) => {
                proptest::prop_assert_eq!((q, e), (bq, be));
            }
            (Some((q, false, _)), Some((bq, false, _))) => proptest::prop_assert_eq!(q, bq),
            (a, b) => proptest::prop_assert!(a.is_none() && b.is_none(), "{:?} {:?}", a, b),
        }
    }
}
