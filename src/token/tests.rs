//! ResponseSealer tests: reference vectors, every claim, every reason, and properties.

use super::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const SECRET: &str = "0123456789abcdef0123456789abcdef-test-secret";
const NOW: f64 = 1_800_000_000.0;

fn sealer(audience: Option<&str>) -> StateSealer {
    StateSealer::new(
        KeyRing::from_secrets(&[SECRET], "test").unwrap(),
        audience.map(str::to_owned),
        600,
    )
}

fn binding(method: &str, params: Value) -> RequestBinding {
    RequestBinding::of(method, params.as_object()).unwrap()
}

fn provision() -> RequestBinding {
    binding(
        "tools/call",
        json!({"name": "provision", "arguments": {"name": "web-1"}}),
    )
}

fn seal(s: &StateSealer, principal: Option<&str>) -> String {
    let options = SealOptions {
        principal,
        ..Default::default()
    };
    s.seal_at(NOW, "{\"tier\":\"free\"}", &provision(), &options)
}

fn reason(result: Result<Opened, Rejection>) -> Reject {
    match result {
        Ok(_) => panic!("token unexpectedly opened"),
        Err(r) => r.reason,
    }
}

/// Tokens minted by the Python SDK 2.3.0 with secret 00..1f (hex text), nonce 0a..15,
/// principal salt a0..a7 and `time.time() == 1.8e9`
/// (`echo '{"op":"vectors"}' | python tests/py/token_interop.py`).
/// (method, params, principal, state, audience, token)
type Vector = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
    Option<&'static str>,
    &'static str,
);

const REFERENCE_VECTORS: [Vector; 3] = [
    (
        "tools/call",
        r#"{"name":"provision","arguments":{"name":"web-1","n":[1,2.5]}}"#,
        None,
        r#"{"tier":"free"}"#,
        Some("svc-a"),
        "v1.pOA_PgoLDA0ODxAREhMUFfR3Wz1omRebJ1BqQx2fMXRFhF6jJ9iKV3j73jB_jCUlDUS7GAxejHCDt6uNCdFpEJCipA-Zu7g5LspxW6l3W8oRGpumWUFln-u8KHbcZuwfTQGMt0kP15T4ourOhc25euTAY2RY0YPaoyT5rfvhMf3y7ihCUMsst4SJIiK5-edgflTqqQDBOlB3wcTI4vixX6U5BcNHF9HOA3TpHmMOjy4kXb4",
    ),
    (
        "prompts/get",
        r#"{"name":"greet","arguments":{"who":"\u00e9\ud83d\ude00"}}"#,
        Some("alice@example.com"),
        "r=1",
        Some("svc-a"),
        "v1.pOA_PgoLDA0ODxAREhMUFfR3Wz1omRebJ1BqQx2fMXRFhF6jJ9iKV3j73jB_jCUlDUS7GAxejHCDt6uNCdFpEJCioBKZurtiPoR6Uv95VZxHAoP0TFx2k-z3azqfaPRcJUrco2EX3qntndD-vve2VKTTNlM5sdmS0HX3taqxNu6rnihXTMp80YTACGPy6qApAAa1sQ6MEGJ6jMi5_f6jF49zOTLALa7_EQkWqVr9H9Xk6L9wY8z3sa8tGVYYFqZGuJhVRYyekw",
    ),
    (
        "resources/read",
        r#"{"uri":"config://prod"}"#,
        None,
        "confirm",
        None,
        "v1.pOA_PgoLDA0ODxAREhMUFfR3Wz1omRebJ1BqQx2fMXRFhF6jJ9iKV3j73jB_jCUlDUS7GAxejHCDt6uNCdFpEJCiogWFuL5kLs5uGPk-GNoRDJuiCRQxlfe7IXGZcOFRH0nBlipSrY-J8oHPjOytQqXudExbj6nsgzaCtqWrYLHukCYUSoxkycXcEGa2-e8nX0In4rU1mbQGPkcu1AB1kYA",
    ),
];

#[test]
fn reference_vectors_are_byte_identical_and_open() {
    let secret = hex::encode((0u8..32).collect::<Vec<u8>>());
    for (method, params, principal, state, audience, expected) in REFERENCE_VECTORS {
        let s = StateSealer::new(
            KeyRing::from_secrets(&[&secret], "vectors").unwrap(),
            audience.map(str::to_owned),
            600,
        );
        let params: Value = serde_json::from_str(params).unwrap();
        let b = RequestBinding::of(method, params.as_object()).unwrap();
        let options = SealOptions {
            principal,
            ..Default::default()
        };
        let salt: [u8; 8] = core::array::from_fn(|i| 0xa0 + i as u8);
        let nonce: [u8; 12] = core::array::from_fn(|i| 0x0a + i as u8);
        let ours = s.seal_deterministic(1.8e9, state, &b, &options, salt, nonce);
        assert_eq!(ours, expected, "{method}");
        let opened = s.open_at(1.8e9 + 1.0, expected, &b, principal).unwrap();
        assert_eq!(opened.state(), state);
        assert!(!opened.single_use);
        assert_eq!(opened.asked, None);
    }
}

#[test]
fn round_trip_carries_our_claims() {
    let s = sealer(Some("svc"));
    let asked = vec!["region".to_owned(), "size".to_owned()];
    let options = SealOptions {
        principal: Some("alice"),
        single_use: true,
        no_upstream_state: true,
        asked: Some(&asked),
        questions: None,
        flow: None,
    };
    let token = s.seal_at(NOW, "state", &provision(), &options);
    let opened = s
        .open_at(NOW + 1.0, &token, &provision(), Some("alice"))
        .unwrap();
    assert_eq!(opened.state(), "state");
    assert!(opened.single_use);
    assert!(opened.no_upstream_state);
    assert_eq!(opened.asked.as_deref(), Some(&asked[..]));
    assert_eq!(opened.expires_at, NOW + 600.0);
    // The id is the token's key id and nonce, distinct per seal.
    let again = s.seal_at(NOW, "state", &provision(), &options);
    let other = s.open_at(NOW, &again, &provision(), Some("alice")).unwrap();
    assert_ne!(opened.id, other.id);
}

#[test]
fn time_window() {
    let s = sealer(None);
    let token = seal(&s, None);
    assert!(s.open_at(NOW + 599.9, &token, &provision(), None).is_ok());
    assert_eq!(
        reason(s.open_at(NOW + 600.0, &token, &provision(), None)),
        Reject::Expired
    );
    // Another replica's clock may run up to 60 s ahead of ours.
    assert!(s.open_at(NOW - 60.0, &token, &provision(), None).is_ok());
    let early = s.open_at(NOW - 60.5, &token, &provision(), None);
    assert_eq!(
        early.err().map(|r| (r.reason, r.detail)),
        Some((Reject::Expired, "minted in the future"))
    );
}

#[test]
fn a_token_lives_at_least_its_ttl_after_minting() {
    let s = sealer(None);
    let options = SealOptions::default();
    // Minted 0.9 s into a second: flooring `exp` with `iat` would cut 0.9 s off the TTL.
    for fraction in [0.0, 0.001, 0.5, 0.9, 0.999_9] {
        let minted = NOW + fraction;
        let token = s.seal_at(minted, "x", &provision(), &options);
        let valid = s.open_at(minted + 600.0 - 0.001, &token, &provision(), None);
        assert!(valid.is_ok(), "minted at +{fraction}");
        let expires_at = valid.unwrap().expires_at;
        assert!(expires_at >= minted + 600.0, "+{fraction}: {expires_at}");
        // Never more than a second beyond it either.
        assert!(expires_at < minted + 601.0, "+{fraction}: {expires_at}");
        assert_eq!(
            reason(s.open_at(expires_at, &token, &provision(), None)),
            Reject::Expired,
            "+{fraction}"
        );
        // `iat` is not in the future, so another replica's skew allowance is untouched.
        assert!(s.open_at(minted - 60.0, &token, &provision(), None).is_ok());
    }
}

#[test]
fn every_binding_claim() {
    let s = sealer(None);
    let token = seal(&s, None);
    let other_tool = binding(
        "tools/call",
        json!({"name": "deprovision", "arguments": {"name": "web-1"}}),
    );
    let other_args = binding(
        "tools/call",
        json!({"name": "provision", "arguments": {"name": "web-2"}}),
    );
    let extra_args = binding(
        "tools/call",
        json!({"name": "provision", "arguments": {"name": "web-1", "x": 1}}),
    );
    let other_method = binding(
        "prompts/get",
        json!({"name": "provision", "arguments": {"name": "web-1"}}),
    );
    for b in [other_tool, other_args, extra_args, other_method] {
        assert_eq!(
            reason(s.open_at(NOW, &token, &b, None)),
            Reject::Binding,
            "{b:?}"
        );
    }
    // Reordered keys are the same arguments.
    let reordered = binding(
        "tools/call",
        json!({"arguments": {"name": "web-1"}, "name": "provision"}),
    );
    assert!(s.open_at(NOW, &token, &reordered, None).is_ok());
}

fn detail(result: Result<Opened, Rejection>) -> (Reject, &'static str) {
    match result {
        Ok(_) => panic!("token unexpectedly opened"),
        Err(r) => (r.reason, r.detail),
    }
}

#[test]
fn path_round_trip() {
    let s = sealer(Some("svc"));
    let at_a = provision().at_path("/mcp/a");
    assert_eq!(at_a.path(), Some("/mcp/a"));
    let token = s.seal_at(NOW, "state", &at_a, &SealOptions::default());
    let opened = s.open_at(NOW, &token, &at_a, None).unwrap();
    assert_eq!(opened.state(), "state");
}

#[test]
fn wrong_path_is_refused() {
    let s = sealer(None);
    let token = s.seal_at(
        NOW,
        "x",
        &provision().at_path("/mcp/a"),
        &SealOptions::default(),
    );
    // Compared byte for byte: no normalisation of case, trailing slashes or escapes.
    for other in ["/mcp/b", "/mcp/a/", "/MCP/a", "/mcp%2Fa", "", "/mcp/a?x=1"] {
        assert_eq!(
            detail(s.open_at(NOW, &token, &provision().at_path(other), None)),
            (Reject::Binding, "minted for another path"),
            "{other}"
        );
    }
    // The path is checked on top of the request, not instead of it.
    let other_args = binding(
        "tools/call",
        json!({"name": "provision", "arguments": {"name": "web-2"}}),
    )
    .at_path("/mcp/a");
    assert_eq!(
        reason(s.open_at(NOW, &token, &other_args, None)),
        Reject::Binding
    );
}

#[test]
fn token_without_path_opens_under_a_path() {
    // What the reference (and ours before paths) mints: no `u` claim.
    let s = sealer(Some("svc"));
    let token = seal(&s, None);
    let opened = s
        .open_at(NOW, &token, &provision().at_path("/mcp/a"), None)
        .unwrap();
    assert_eq!(opened.state(), "{\"tier\":\"free\"}");
}

#[test]
fn token_with_path_needs_a_path() {
    let s = sealer(None);
    let token = s.seal_at(
        NOW,
        "x",
        &provision().at_path("/mcp/a"),
        &SealOptions::default(),
    );
    assert_eq!(
        detail(s.open_at(NOW, &token, &provision(), None)),
        (Reject::Binding, "minted for a path, request has none")
    );
}

#[test]
fn odd_paths_survive_a_round_trip() {
    let s = sealer(None);
    let paths = [
        r#"/a"b"#,
        r"/a\b",
        r#"/\"\\"#,
        "/tenant%2Fone/mcp",
        "/a%22b%5C",
        "/q?x=\"1\"&y=\\",
        "/\u{0}\u{1f}\u{7f}",
        "/caf\u{e9}/\u{1f600}",
        "",
    ];
    for path in paths {
        let b = provision().at_path(path);
        let token = s.seal_at(NOW, "x", &b, &SealOptions::default());
        assert!(s.open_at(NOW, &token, &b, None).is_ok(), "{path:?}");
    }
    // `%2F` is not `/`: the path is bound as received.
    let encoded = provision().at_path("/tenant%2Fone/mcp");
    let token = s.seal_at(NOW, "x", &encoded, &SealOptions::default());
    assert_eq!(
        reason(s.open_at(NOW, &token, &provision().at_path("/tenant/one/mcp"), None)),
        Reject::Binding
    );
}

#[test]
fn path_claim_of_the_wrong_type_is_malformed() {
    let s = sealer(None);
    let b = provision().at_path("/mcp");
    let claims = |u: &str| {
        format!(
            r#"{{"v":1,"iat":{NOW:.1},"exp":{:.1},"m":"tools/call","t":"provision","a":"{}","s":"x"{u}}}"#,
            NOW + 600.0,
            b.args_digest()
        )
    };
    // The hand-written claims are right: with a string path they open.
    let good = s.ring().seal(&claims(r#","u":"/mcp""#));
    assert!(s.open_at(NOW, &good, &b, None).is_ok());
    for bad in [
        r#","u":null"#,
        r#","u":5"#,
        r#","u":["/mcp"]"#,
        r#","u":{"p":"/mcp"}"#,
        r#","u":true"#,
    ] {
        let token = s.ring().seal(&claims(bad));
        assert_eq!(
            detail(s.open_at(NOW, &token, &b, None)),
            (Reject::Malformed, "claims do not parse"),
            "{bad}"
        );
    }
}

#[test]
fn resource_tokens_bind_the_uri() {
    let s = sealer(None);
    let b = binding("resources/read", json!({"uri": "config://prod"}));
    let token = s.seal_at(NOW, "x", &b, &SealOptions::default());
    let other = binding("resources/read", json!({"uri": "config://dev"}));
    assert!(s.open_at(NOW, &token, &b, None).is_ok());
    assert_eq!(
        reason(s.open_at(NOW, &token, &other, None)),
        Reject::Binding
    );
}

#[test]
fn audience() {
    let a = sealer(Some("svc-a"));
    let b = sealer(Some("svc-b"));
    let none = sealer(None);
    let token = seal(&a, None);
    assert_eq!(
        reason(b.open_at(NOW, &token, &provision(), None)),
        Reject::Audience
    );
    assert_eq!(
        reason(none.open_at(NOW, &token, &provision(), None)),
        Reject::Audience
    );
    let unscoped = seal(&none, None);
    assert_eq!(
        reason(a.open_at(NOW, &unscoped, &provision(), None)),
        Reject::Audience
    );
}

#[test]
fn principal_binding_and_drift() {
    let s = sealer(None);
    let bound = seal(&s, Some("alice"));
    let unbound = seal(&s, None);
    assert!(s.open_at(NOW, &bound, &provision(), Some("alice")).is_ok());
    let cases = [
        (&bound, Some("bob"), "principal mismatch"),
        (&bound, Some("Alice"), "principal mismatch"),
        (&bound, None, "principal drift"),
        (&unbound, Some("alice"), "principal drift"),
    ];
    for (token, principal, detail) in cases {
        let err = s
            .open_at(NOW, token, &provision(), principal)
            .err()
            .unwrap();
        assert_eq!((err.reason, err.detail), (Reject::Principal, detail));
    }
}

#[test]
fn key_problems() {
    let s = sealer(None);
    let token = seal(&s, None);
    let stranger = StateSealer::new(
        KeyRing::from_secrets(&["another-secret-of-at-least-32-bytes!!"], "t").unwrap(),
        None,
        600,
    );
    assert_eq!(
        reason(stranger.open_at(NOW, &token, &provision(), None)),
        Reject::UnknownKey
    );
    assert_eq!(
        reason(s.open_at(NOW, "plaintext", &provision(), None)),
        Reject::Malformed
    );
    assert_eq!(
        reason(s.open_at(NOW, "v1.", &provision(), None)),
        Reject::Malformed
    );
    assert_eq!(
        reason(s.open_at(NOW, &token[..token.len() - 4], &provision(), None)),
        Reject::Malformed
    );
}

#[test]
fn hot_rotation_keeps_old_tokens_opening() {
    let old = KeyRing::from_secrets(&[SECRET], "t").unwrap();
    let s = StateSealer::new(old, None, 600);
    let before = seal(&s, None);
    let new_secret = "fedcba9876543210fedcba9876543210-rotated";
    // Phase 2: the new key mints, the old one still opens.
    s.replace_ring(KeyRing::from_secrets(&[new_secret, SECRET], "t").unwrap());
    assert!(s.open_at(NOW, &before, &provision(), None).is_ok());
    let after = seal(&s, None);
    // Phase 3: the old key is gone.
    s.replace_ring(KeyRing::from_secrets(&[new_secret], "t").unwrap());
    assert_eq!(
        reason(s.open_at(NOW, &before, &provision(), None)),
        Reject::UnknownKey
    );
    assert!(s.open_at(NOW, &after, &provision(), None).is_ok());
}

#[test]
fn reject_labels_are_the_contract_names() {
    let labels: Vec<&str> = Reject::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        labels,
        [
            "malformed",
            "unknown_key",
            "expired",
            "binding",
            "audience",
            "principal",
            "replayed",
            "store_unavailable",
            "revoked"
        ]
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    // Failures are turned into named unit tests, not regression files outside `src/`.
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn open_inverts_seal(
        state in ".{0,200}",
        name in "[a-z_]{1,12}",
        args in json_value(),
        principal in proptest::option::of(".{0,20}"),
        single_use in any::<bool>(),
        path in proptest::option::of(".{0,40}"),
    ) {
        let s = sealer(Some("svc"));
        let b = binding("tools/call", json!({"name": name, "arguments": args}))
            .with_path(path.as_deref());
        let options = SealOptions { principal: principal.as_deref(), single_use, ..Default::default() };
        let token = s.seal_at(NOW, &state, &b, &options);
        let opened = s.open_at(NOW, &token, &b, principal.as_deref()).unwrap();
        prop_assert_eq!(&opened.state(), &state);
        prop_assert_eq!(opened.single_use, single_use);
    }

    #[test]
    fn any_bit_flip_fails(state in ".{0,64}", bit in any::<prop::sample::Index>()) {
        let s = sealer(None);
        let token = s.seal_at(NOW, &state, &provision(), &SealOptions::default());
        let mut raw = URL_SAFE_NO_PAD.decode_to_vec(&token[3..]).unwrap();
        let i = bit.index(raw.len() * 8);
        raw[i / 8] ^= 1 << (i % 8);
        let flipped = format!("v1.{}", URL_SAFE_NO_PAD.encode_to_string(&raw));
        prop_assert!(s.open_at(NOW, &flipped, &provision(), None).is_err());
    }

    #[test]
    fn any_change_of_request_fails(
        args in json_value(),
        other in json_value(),
        principal in ".{1,12}",
        other_principal in ".{1,12}",
    ) {
        prop_assume!(principal != other_principal);
        let s = sealer(Some("svc"));
        let b = binding("tools/call", json!({"name": "t", "arguments": args}));
        // Falsy arguments all digest as `{}`: only truly different arguments must fail.
        let changed_args = binding("tools/call", json!({"name": "t", "arguments": other}));
        prop_assume!(b.args_digest() != changed_args.args_digest());
        let token = s.seal_at(NOW, "x", &b, &SealOptions { principal: Some(&principal), ..Default::default() });
        let changed = [
            changed_args,
            binding("tools/call", json!({"name": "t2", "arguments": args.clone()})),
            binding("prompts/get", json!({"name": "t", "arguments": args.clone()})),
        ];
        for c in &changed {
            prop_assert_eq!(reason(s.open_at(NOW, &token, c, Some(&principal))), Reject::Binding);
        }
        prop_assert_eq!(reason(s.open_at(NOW, &token, &b, Some(&other_principal))), Reject::Principal);
        prop_assert_eq!(reason(sealer(Some("svc2")).open_at(NOW, &token, &b, Some(&principal))), Reject::Audience);
    }
}

use base64_simd::URL_SAFE_NO_PAD;

#[test]
fn a_counted_seal_names_the_key_that_minted_it() {
    let s = sealer(Some("aud"));
    let (token, kid) = s.seal_counted("st".into(), &provision(), &SealOptions::default());
    assert_eq!(KeyId::of_token(&token), Some(kid));
    assert_eq!(KeyId::of_ring(&s.ring())[0], kid, "the minting key");
    assert_eq!(s.open(&token, &provision(), None).unwrap().state(), "st");
}

mod arena;
mod binding;
mod consumption;
mod plain;
