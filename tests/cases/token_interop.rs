//! Live interop with the reference implementation (`mcp==2.3.0`, `RequestStateBoundary`):
//! tokens cross in both directions and argument digests agree on a generated corpus.

use crate::support::python::{reference_digests, run_json};
use mcp_state_guard::facade::token::{KeyRing, Reject, RequestBinding, SealOptions, StateSealer};
use serde_json::{Value, json};
use std::time::Duration;

const KEY_OLD: &str = "5f1c0b6a9e2d4f8a7b3c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a";
const KEY_NEW: &str = "a0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff";
const TIMEOUT: Duration = Duration::from_secs(60);

struct Case {
    method: &'static str,
    params: Value,
    principal: Option<&'static str>,
    state: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            method: "tools/call",
            params: json!({"name": "provision", "arguments": {"name": "web-1", "size": 3, "tags": ["a", "é"]}}),
            principal: None,
            state: r#"{"k":"provision","tier":"free"}"#,
        },
        Case {
            method: "tools/call",
            params: json!({"name": "provision", "arguments": {"ratio": 1e16, "tiny": 1e-5, "big": 123456789012345678901234567890u128}}),
            principal: Some("alice@example.com"),
            state: "r=2; ünïcode 😀",
        },
        Case {
            method: "prompts/get",
            params: json!({"name": "greet", "arguments": {"who": "bob"}}),
            principal: Some(r#"["client-1","https://issuer.example","user-42"]"#),
            state: "prompt-state",
        },
        Case {
            method: "resources/read",
            params: json!({"uri": "config://prod"}),
            principal: None,
            state: "confirm",
        },
        Case {
            method: "resources/read",
            params: json!({"uri": "config://dev"}),
            principal: Some("CN=svc,O=example"),
            state: "",
        },
    ]
}

fn binding(case: &Case) -> RequestBinding {
    RequestBinding::of(case.method, case.params.as_object()).unwrap()
}

fn case_json(case: &Case) -> Value {
    json!({"method": case.method, "params": case.params, "principal": case.principal})
}

#[test]
fn tokens_we_mint_open_in_the_reference() {
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY_OLD], "t").unwrap(),
        Some("svc".into()),
        600,
    );
    let all = cases();
    let mut requests = Vec::new();
    for case in &all {
        let options = SealOptions {
            principal: case.principal,
            single_use: true,
            no_upstream_state: false,
            asked: Some(&["region".to_owned()]),
            questions: None,
            flow: None,
        };
        let token = sealer.seal(case.state, &binding(case), &options);
        let mut req = case_json(case);
        req["token"] = Value::String(token);
        requests.push(req);
    }
    // The reference opens them under the same ring, and under a rotated ring [new, old].
    for keys in [vec![KEY_OLD], vec![KEY_NEW, KEY_OLD]] {
        let answer = run_json(
            "token_interop.py",
            &json!({"op": "open", "keys": keys, "audience": "svc", "cases": requests}),
            TIMEOUT,
        );
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), all.len());
        for (case, result) in all.iter().zip(results) {
            assert_eq!(result["ok"], true, "{} {result}", case.method);
            assert_eq!(result["state"], case.state);
        }
    }
}

/// One upstream serving several MCP servers under different paths: our path claim (`u`)
/// rides in tokens the reference still opens (it ignores claims it does not know), and
/// Python's `json` reads it back as the exact path, escapes and all.
#[test]
fn tokens_bound_to_a_path_open_in_the_reference() {
    const PATHS: [&str; 5] = [
        "/mcp",
        "/tenants/a%2Fb/mcp",
        r#"/q"uo\te"#,
        "/ctl\u{1}\u{7f}",
        "/caf\u{e9}",
    ];
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY_OLD], "t").unwrap(),
        Some("svc".into()),
        600,
    );
    let all = cases();
    let mut requests = Vec::new();
    let mut tokens = Vec::new();
    for (case, &path) in all.iter().zip(PATHS.iter().cycle()) {
        let options = SealOptions {
            principal: case.principal,
            single_use: true,
            no_upstream_state: false,
            asked: Some(&["region".to_owned()]),
            questions: None,
            flow: None,
        };
        let at_path = binding(case).at_path(path);
        let token = sealer.seal(case.state, &at_path, &options);
        // Here it opens on its own path only.
        assert!(sealer.open(&token, &at_path, case.principal).is_ok());
        let elsewhere = binding(case).at_path("/elsewhere");
        assert_eq!(
            sealer
                .open(&token, &elsewhere, case.principal)
                .err()
                .map(|r| r.reason),
            Some(Reject::Binding)
        );
        let mut req = case_json(case);
        req["token"] = Value::String(token.clone());
        requests.push(req);
        tokens.push(token);
    }
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "open", "keys": [KEY_OLD], "audience": "svc", "cases": requests}),
        TIMEOUT,
    );
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), all.len());
    for (case, result) in all.iter().zip(results) {
        assert_eq!(result["ok"], true, "{} {result}", case.method);
        assert_eq!(result["state"], case.state);
    }
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "claims", "keys": [KEY_OLD], "tokens": tokens}),
        TIMEOUT,
    );
    let claims = answer["claims"].as_array().unwrap();
    assert_eq!(claims.len(), all.len());
    for ((case, path), claims) in all.iter().zip(PATHS.iter().cycle()).zip(claims) {
        assert_eq!(claims["u"], *path, "{claims}");
        assert_eq!(claims["m"], case.method);
    }
}

/// `exp` rounds up (a token lives at least its TTL) and `iat` down: the reference still
/// opens such tokens and reads both claims as the whole seconds they are.
#[test]
fn honest_expiry_opens_in_the_reference() {
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY_OLD], "t").unwrap(),
        Some("svc".into()),
        600,
    );
    let case = &cases()[0];
    let now = mcp_state_guard::facade::token::now();
    // Mid-second on purpose: flooring both claims would cut up to a second off the TTL.
    let minted = now.floor() + 0.75;
    let token = sealer.seal_at(minted, case.state, &binding(case), &SealOptions::default());
    let mut req = case_json(case);
    req["token"] = Value::String(token.clone());
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "open", "keys": [KEY_OLD], "audience": "svc", "cases": [req]}),
        TIMEOUT,
    );
    assert_eq!(answer["results"][0]["ok"], true, "{answer}");
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "claims", "keys": [KEY_OLD], "tokens": [token]}),
        TIMEOUT,
    );
    let claims = &answer["claims"][0];
    let (iat, exp) = (
        claims["iat"].as_f64().unwrap(),
        claims["exp"].as_f64().unwrap(),
    );
    assert_eq!(
        (iat, exp),
        (minted.floor(), minted.ceil() + 600.0),
        "{claims}"
    );
    assert!(exp >= minted + 600.0 && iat <= minted, "{claims}");
}

#[test]
fn reference_refuses_what_we_refuse() {
    let sealer = StateSealer::new(
        KeyRing::from_secrets(&[KEY_OLD], "t").unwrap(),
        Some("svc".into()),
        600,
    );
    let case = &cases()[1];
    let token = sealer.seal(
        case.state,
        &binding(case),
        &SealOptions {
            principal: case.principal,
            ..Default::default()
        },
    );
    let mut tampered = token.clone();
    tampered.push('A');
    let mut other_args = case_json(case);
    other_args["params"]["arguments"]["ratio"] = json!(1e15);
    let mut other_principal = case_json(case);
    other_principal["principal"] = json!("mallory@example.com");
    let requests: Vec<Value> = [
        (case_json(case), tampered),
        (other_args, token.clone()),
        (other_principal, token.clone()),
    ]
    .into_iter()
    .map(|(mut req, token)| {
        req["token"] = Value::String(token);
        req
    })
    .collect();
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "open", "keys": [KEY_OLD], "audience": "svc", "cases": requests}),
        TIMEOUT,
    );
    let reasons: Vec<String> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["ok"], false, "{r}");
            r["reason"].as_str().unwrap().to_owned()
        })
        .collect();
    // One more character decodes to a longer ciphertext whose tag fails ("seal").
    assert!(reasons[0].ends_with("seal"), "{reasons:?}");
    assert!(reasons[1].contains("request binding"), "{reasons:?}");
    assert!(reasons[2].contains("principal"), "{reasons:?}");
    // The reference refusing under another audience, too.
    let mut req = case_json(case);
    req["token"] = Value::String(token);
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "open", "keys": [KEY_OLD], "audience": "other", "cases": [req]}),
        TIMEOUT,
    );
    assert!(
        answer["results"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("audience")
    );
}

#[test]
fn tokens_the_reference_mints_open_here() {
    let all = cases();
    let requests: Vec<Value> = all
        .iter()
        .map(|c| {
            let mut req = case_json(c);
            req["state"] = Value::String(c.state.to_owned());
            req
        })
        .collect();
    let answer = run_json(
        "token_interop.py",
        &json!({"op": "mint", "keys": [KEY_OLD], "audience": "svc", "ttl": 600.0, "cases": requests}),
        TIMEOUT,
    );
    let tokens = answer["tokens"].as_array().unwrap();
    let ours = StateSealer::new(
        KeyRing::from_secrets(&[KEY_NEW, KEY_OLD], "t").unwrap(),
        Some("svc".into()),
        600,
    );
    for (case, token) in all.iter().zip(tokens) {
        let token = token.as_str().unwrap();
        let opened = ours
            .open(token, &binding(case), case.principal)
            .unwrap_or_else(|r| panic!("{}: {r:?}", case.method));
        assert_eq!(opened.state(), case.state);
        assert!(!opened.single_use, "reference tokens carry no `su` claim");
        assert_eq!(opened.asked, None);
        // The reference knows no paths: its tokens carry no `u` claim and open on any.
        let at_path = binding(case).at_path("/mcp");
        assert!(ours.open(token, &at_path, case.principal).is_ok());
        // And the binding checks hold for reference tokens too.
        if case.principal.is_some() {
            let err = ours
                .open(token, &binding(case), Some("someone-else"))
                .err()
                .unwrap();
            assert_eq!(err.reason, Reject::Principal);
        }
        let other = RequestBinding::of(
            case.method,
            json!({"name": "zz", "uri": "zz://"}).as_object(),
        )
        .unwrap();
        assert_eq!(
            ours.open(token, &other, case.principal)
                .err()
                .unwrap()
                .reason,
            Reject::Binding
        );
    }
}

#[test]
fn argument_digests_agree_on_a_generated_corpus() {
    let mut texts: Vec<String> = EDGE_CASES.iter().map(|s| s.to_string()).collect();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    while texts.len() < 1200 {
        let mut text = String::new();
        random_object(&mut rng, 0, &mut text);
        texts.push(text);
    }
    let theirs = reference_digests(&texts, TIMEOUT);
    let mut mismatches = Vec::new();
    for (text, expected) in texts.iter().zip(&theirs) {
        let args: Value = serde_json::from_str(text).unwrap();
        let ours = RequestBinding::of(
            "tools/call",
            json!({"name": "x", "arguments": args}).as_object(),
        )
        .unwrap();
        if ours.args_digest() != expected {
            mismatches.push(text.clone());
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} digests differ, first: {:?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(5)]
    );
}

/// Hand-picked texts for every corner of Python's encoder.
const EDGE_CASES: &[&str] = &[
    r#"{}"#,
    r#"{"a":1E2,"b":1e16,"c":1e15,"d":1e-5,"e":0.0001,"f":-0.0,"g":100.0,"h":1.5e-7}"#,
    r#"{"big":123456789012345678901234567890,"neg":-98765432109876543210987654321,"z":-0}"#,
    r#"{"f":[0.1,0.2,0.30000000000000004,1.7976931348623157e308,5e-324,2.2250738585072014e-308]}"#,
    r#"{"inf":1e400,"ninf":-1e400,"under":1e-400}"#,
    r#"{"é":"café","😀":"astral 😀 𝄞","ctl":"\u0000\u0001\u001f\u007f\b\f\n\r\t","q":"\"\\/"}"#,
    r#"{"sep":"\u2028\u2029","bom":"\ufeff","max":"\uffff","nul":"a\u0000b"}"#,
    r#"{"b":{"z":1,"a":{"y":[{"k":2,"j":1}]}},"a":[[],{},[[]],null,true,false]}"#,
    r#"{"Z":1,"a":2,"_":3,"~":4," ":5,"":6,"aa":7,"a\u0000":8}"#,
    r#"{"n":[1.0,1.10,12345.678e3,1E-7,9007199254740993,9007199254740993.0,0.5e1]}"#,
    r#"{"deep":[[[[[[[[[[{"x":[[[[1]]]]}]]]]]]]]]]}"#,
    r#"{"x":1e22,"y":1e21,"w":123456789012345680000.0,"v":1.2345678901234567e-300}"#,
];

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_object(rng: &mut XorShift, depth: usize, out: &mut String) {
    out.push('{');
    let n = rng.below(if depth == 0 { 6 } else { 4 });
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        random_string(rng, out);
        out.push(':');
        random_value(rng, depth + 1, out);
    }
    out.push('}');
}

fn random_value(rng: &mut XorShift, depth: usize, out: &mut String) {
    let kinds = if depth > 4 { 6 } else { 8 };
    match rng.below(kinds) {
        0 => out.push_str(["null", "true", "false"][rng.below(3) as usize]),
        1 => out.push_str(&(rng.next() as i64 >> rng.below(60)).to_string()),
        2 => {
            // Integers beyond 64 bits.
            let digits = 19 + rng.below(30) as usize;
            if rng.below(2) == 0 {
                out.push('-');
            }
            out.push(char::from(b'1' + rng.below(9) as u8));
            for _ in 1..digits {
                out.push(char::from(b'0' + rng.below(10) as u8));
            }
        }
        3 => {
            // Floats written in every JSON spelling, including exponents either side of
            // Python's positional window.
            let mantissa =
                (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi(rng.below(6) as i32);
            let exp = rng.below(50) as i32 - 25;
            let v = if rng.below(2) == 0 {
                -mantissa
            } else {
                mantissa
            };
            match rng.below(3) {
                0 => out.push_str(&format!("{v}")),
                1 => out.push_str(&format!("{v:e}")),
                _ => out.push_str(&format!("{v}E{exp:+}")),
            }
        }
        4 | 5 => random_string(rng, out),
        6 => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                random_value(rng, depth + 1, out);
            }
            out.push(']');
        }
        _ => random_object(rng, depth, out),
    }
}

fn random_string(rng: &mut XorShift, out: &mut String) {
    const POOL: &[&str] = &[
        "a",
        "b",
        "Z",
        "_",
        " ",
        "~",
        "\\\"",
        "\\\\",
        "\\/",
        "\\n",
        "\\t",
        "\\u0000",
        "\\u001f",
        "\\u007f",
        "é",
        "ß",
        "中",
        "😀",
        "𝄞",
        "\\u00e9",
        "\\ud83d\\ude00",
        "\\u2028",
        "\u{7f}",
        "\u{ffff}",
        "key",
        "0",
    ];
    out.push('"');
    for _ in 0..rng.below(6) {
        out.push_str(POOL[rng.below(POOL.len() as u64) as usize]);
    }
    out.push('"');
}
