//! Parser differentials: the upstream receives only messages that parse one way, and a
//! message the gate cannot classify forwards nothing. The request gate, attacked by
//! someone who knows the upstream parses with pydantic on Python's `json`: duplicate keys
//! (Python keeps the last), look-alike spellings pydantic accepts (`populate_by_name`
//! aliases, case), Unicode look-alikes Go's `encoding/json` folds (`requeſtState`),
//! escapes, NUL bytes, BOMs, trailing data, huge numbers, deep nesting, compressed or
//! mislabelled bodies, routing headers that disagree with the body, and every misuse of
//! `requestState`. Each refusal must carry the right status, JSON-RPC code and id, be
//! counted under the right metric label, and forward nothing; each control row, the same
//! content well-formed, must be forwarded (so the table fails if the gate refuses
//! everything). The controls are here, the rows by what they vary in `keys`, `bytes`,
//! `headers` and `states`.

use crate::support::fake::{
    FakeBody, FakeUpstream, Recorded, Reply, Step, complete, input_required, open, read_to_end,
};
use crate::support::http::{Reply as ClientReply, mcp_headers, send};
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::config::PrincipalSource;
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::{Value, json};
use std::time::Duration;

mod bytes;
mod headers;
mod keys;
mod states;

/// The well-formed request every row is a variation of (id 11).
const BASE: &str = concat!(
    r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","#,
    r#""params":{"name":"provision","arguments":{"name":"web-1","tier":"free"},"#,
    r#""_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#
);
/// The plaintext the fake upstream hands out; a verified retry must bring it back.
const PLAIN: &str = "PLAIN-STATE-1";
const T: Duration = Duration::from_secs(10);
const MAX_BODY: usize = 16 * 1024;
/// Beyond every 2026 client's number range; `1e400` is respelled `1e+400` by serde_json
/// (the one normalisation it makes, the same number for every parser), so it is sent so.
const NUMBERS: &str = r#""tier":123456789012345678901234567890123456789,"e":1e+400,"f":-0.0"#;

enum Expect {
    /// HTTP status, JSON-RPC code, id, metric label, and the `state_verified_total`
    /// label that must move (for rows that reach token verification).
    Refused(u16, i64, Value, ErrorKind, Option<&'static str>),
    /// Forwarded; the check sees the request the upstream received.
    Forwarded(fn(&Recorded)),
}

struct Row {
    name: &'static str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    expect: Expect,
}

fn row(name: &'static str, body: impl Into<Vec<u8>>, expect: Expect) -> Row {
    let headers = mcp_headers("tools/call", Some("provision"));
    let body = body.into();
    Row {
        name,
        headers,
        body,
        expect,
    }
}

impl Row {
    /// Add a header (a second one when the name is already there).
    fn add(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Replace every header named `name` (`None`: just remove them).
    fn set(mut self, name: &str, value: Option<&str>) -> Self {
        self.headers.retain(|(n, _)| n != name);
        match value {
            Some(value) => self.add(name, value),
            None => self,
        }
    }
}

/// `BASE` with its first occurrence of `from` replaced.
fn base(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replacen(from, to, 1)
}

/// `BASE` with `extra` members added to the envelope, to `params`, to `arguments`.
fn envelope(extra: &str) -> String {
    base(r#""id":11"#, &format!(r#""id":11,{extra}"#))
}

fn params(extra: &str) -> String {
    base(
        r#""name":"provision""#,
        &format!(r#"{extra},"name":"provision""#),
    )
}

fn arguments(extra: &str) -> String {
    base(r#""tier":"free""#, &format!(r#""tier":"free",{extra}"#))
}

/// A retry of `BASE` carrying `state` (raw JSON text) and an answer to the asked key.
fn retry(state: &str) -> String {
    let answer = r#"{"region":{"action":"accept","content":{"region":"eu"}}}"#;
    params(&format!(
        r#""requestState":{state},"inputResponses":{answer}"#
    ))
}

fn parse_error() -> Expect {
    Expect::Refused(400, -32700, Value::Null, ErrorKind::Parse, None)
}

/// A JSON value that is not one message: there is no id to answer.
fn not_a_message() -> Expect {
    Expect::Refused(400, -32600, Value::Null, ErrorKind::Parse, None)
}

/// An object that parsed but is refused: answered with its id.
fn invalid_request() -> Expect {
    Expect::Refused(400, -32600, json!(11), ErrorKind::Parse, None)
}

fn invalid_params() -> Expect {
    Expect::Refused(400, -32602, json!(11), ErrorKind::Parse, None)
}

fn refused(status: u16, kind: ErrorKind) -> Expect {
    Expect::Refused(status, -32600, Value::Null, kind, None)
}

fn mismatch() -> Expect {
    Expect::Refused(400, -32020, json!(11), ErrorKind::HeaderMismatch, None)
}

fn bad_state(label: &'static str) -> Expect {
    Expect::Refused(400, -32602, json!(11), ErrorKind::InvalidState, Some(label))
}

fn forwarded(check: fn(&Recorded)) -> Expect {
    Expect::Forwarded(check)
}

fn as_sent(seen: &Recorded) {
    assert_eq!(seen.json(), serde_json::from_str::<Value>(BASE).unwrap());
}

fn numbers_verbatim(seen: &Recorded) {
    assert!(
        String::from_utf8_lossy(&seen.body).contains(NUMBERS),
        "{:?}",
        seen.body
    );
}

fn without_state(seen: &Recorded) {
    assert!(
        seen.json()["params"].get("requestState").is_none(),
        "{:?}",
        seen.body
    );
}

/// The tool's own arguments keep their non-ASCII keys: they are its business.
fn non_ascii_arguments(seen: &Recorded) {
    let arguments = &seen.json()["params"]["arguments"];
    for key in ["requeſtState", "é", "\u{212a}"] {
        assert_eq!(arguments[key], 1, "{key}: {arguments}");
    }
}

fn with_plaintext(seen: &Recorded) {
    assert_eq!(seen.json()["params"]["requestState"], PLAIN);
}

/// Every row, the controls first; `anon` and `alice` are tokens minted for `BASE` (alice's
/// bound to her).
fn rows(anon: &str, alice: &str) -> Vec<Row> {
    let (anon, alice) = (json!(anon).to_string(), json!(alice).to_string());
    let mut rows = controls(&anon);
    rows.extend(keys::rows(&anon));
    rows.extend(bytes::rows());
    rows.extend(headers::rows());
    rows.extend(states::rows(&anon, &alice));
    rows
}

/// `BASE` with its tier nested `n` arrays deep.
fn deep(n: usize) -> String {
    base(r#""free""#, &format!("{}1{}", "[".repeat(n), "]".repeat(n)))
}

/// The controls (`anon`: a token minted for `BASE`, as JSON).
fn controls(anon: &str) -> Vec<Row> {
    let (ct, mcp_name) = ("content-type", "mcp-name");
    vec![
        // Controls: the same content, well-formed, goes through.
        row("control", BASE, forwarded(as_sent)),
        row(
            "control: charset, base64 Mcp-Name",
            BASE,
            forwarded(as_sent),
        )
        .set(ct, Some("application/json; charset=UTF-8"))
        .set(mcp_name, Some("=?base64?cHJvdmlzaW9u?="))
        .add("content-encoding", "identity"),
        row(
            "control: huge numbers",
            base(r#""tier":"free""#, NUMBERS),
            forwarded(numbers_verbatim),
        ),
        row("control: depth 100", deep(100), forwarded(|_| {})),
        row(
            "control: related keys",
            arguments(r#""requestStates":1,"stateful":2"#),
            forwarded(|_| {}),
        ),
        row(
            "control: non-ASCII argument keys",
            arguments(r#""requeſtState":1,"é":1,"\u212a":1,"city":"Zürich""#),
            forwarded(non_ascii_arguments),
        ),
        row(
            "control: null state is absent",
            retry("null"),
            forwarded(without_state),
        ),
        row(
            "control: a minted token",
            retry(anon),
            forwarded(with_plaintext),
        ),
    ]
}

/// An upstream that asks for input (state `PLAIN`) when told to with `x-ask`, and
/// otherwise completes; every request is recorded.
async fn upstream() -> FakeUpstream {
    FakeUpstream::start(|request: &Recorded| {
        let id = request.json()["id"].clone();
        match request.header("x-ask") {
            Some(_) => Reply::json(input_required(id, json!(PLAIN)).to_string()),
            None => Reply::json(complete(id, "ok").to_string()),
        }
    })
    .await
}

async fn gate(fake: &FakeUpstream) -> Sidecar {
    let mut config = sidecar::config(&fake.base_url());
    config.principal.source = PrincipalSource::Header;
    config.limits.max_body_bytes = MAX_BODY;
    // Small states keep the longest acceptable token (~6 KB) under the body limit.
    config.limits.max_state_bytes = 64;
    Sidecar::start(config).await
}

/// A token the sidecar minted for `BASE`, bound to `user` when given.
async fn mint(sidecar: &Sidecar, user: Option<&str>) -> String {
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.push(("x-ask".into(), "1".into()));
    if let Some(user) = user {
        headers.push(("x-forwarded-user".into(), user.into()));
    }
    let reply = send(Method::POST, &sidecar.mcp_url(), &headers, BASE, T).await;
    let token = reply.json()["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.starts_with("v1."), "{token}");
    token
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gate_refuses_what_it_cannot_classify_and_forwards_nothing() {
    let fake = upstream().await;
    let sidecar = gate(&fake).await;
    let anon = mint(&sidecar, None).await;
    let alice = mint(&sidecar, Some("alice")).await;
    let metrics = sidecar.metrics();
    let total = || {
        ErrorKind::ALL
            .iter()
            .map(|k| metrics.refusals.refused_count(*k))
            .sum::<u64>()
    };
    let counts = |kind, label: Option<&str>| {
        (
            metrics.refusals.refused_count(kind),
            label.map(|l| metrics.path.verified_count(l)),
        )
    };
    let rows = rows(&anon, &alice);
    assert!(rows.len() > 60);
    for Row {
        name,
        headers,
        body,
        expect,
    } in rows
    {
        let (forwarded, refused, before) = match &expect {
            Expect::Refused(.., kind, label) => (fake.count(), total(), counts(*kind, *label)),
            Expect::Forwarded(_) => (fake.count(), total(), (0, None)),
        };
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
        match expect {
            Expect::Forwarded(check) => {
                assert_eq!(reply.status, 200, "{name}: {}", reply.text());
                assert_eq!(fake.count(), forwarded + 1, "{name}: not forwarded");
                check(&fake.last());
            }
            Expect::Refused(status, code, id, kind, label) => {
                assert_refused(&reply, name, (status, code, &id), kind);
                assert_eq!(fake.count(), forwarded, "{name}: forwarded to the upstream");
                assert_eq!(total(), refused + 1, "{name}: counted once");
                let expected = (before.0 + 1, before.1.map(|n| n + 1));
                assert_eq!(counts(kind, label), expected, "{name}: {kind:?}, {label:?}");
            }
        }
    }
    sidecar.stop().await;
}

fn assert_refused(reply: &ClientReply, name: &str, want: (u16, i64, &Value), kind: ErrorKind) {
    let (status, code, id) = want;
    assert_eq!(reply.status, status, "{name}: {}", reply.text());
    assert_eq!(reply.content_type(), "application/json", "{name}");
    let body = reply.json();
    assert_eq!(body["jsonrpc"], "2.0", "{name}: {body}");
    assert_eq!(body["error"]["code"], code, "{name}: {body}");
    assert_eq!(&body["id"], id, "{name}: {body}");
    if kind == ErrorKind::InvalidState {
        // Every refused state is the one frozen error: the reason is only in the log.
        let frozen = json!({"code": -32602, "message": "Invalid or expired requestState",
            "data": {"reason": "invalid_request_state"}});
        assert_eq!(body["error"], frozen, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chunked_body_over_the_limit_is_refused_without_content_length() {
    let fake = upstream().await;
    let sidecar = gate(&fake).await;
    let url = sidecar.mcp_url();
    let headers = mcp_headers("tools/call", Some("provision"));
    // 1 KiB chunks, no content-length: the limit must hold while reading, not up front.
    let (open_brace, close) = BASE.split_at(BASE.len() - 1);
    let mut steps = vec![Step::Data(open_brace.to_owned().into())];
    steps.extend((0..20).map(|_| Step::Data(vec![b' '; 1024].into())));
    steps.push(Step::Data(close.to_owned().into()));
    let response = open(Method::POST, &url, &headers, FakeBody::steps(steps), false).await;
    assert_eq!(response.status(), 413);
    let body = read_to_end(response.into_body(), T).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (&body["id"], &body["error"]["code"]),
        (&Value::Null, &json!(-32600))
    );
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .refused_count(ErrorKind::BodyTooLarge),
        1
    );
    assert_eq!(fake.count(), 0);
    // The same body, small enough, is fine chunked too.
    let (a, b) = BASE.split_at(20);
    let steps = vec![
        Step::Data(a.to_owned().into()),
        Step::Data(b.to_owned().into()),
    ];
    let response = open(Method::POST, &url, &headers, FakeBody::steps(steps), false).await;
    assert_eq!(response.status(), 200);
    assert_eq!(fake.count(), 1);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_id_is_echoed_once_the_body_parsed() {
    // JSON-RPC 2.0 §5 allows null only when the id could not be detected, and the
    // reference SDK answers its -32602 schema failures with the request's id.
    let fake = upstream().await;
    let sidecar = gate(&fake).await;
    let headers = mcp_headers("tools/call", None);
    for body in [
        params(r#""request_state":"forged""#),
        base(r#""provision""#, "7"),
        envelope(r#""PARAMS":{}"#),
    ] {
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body.clone(), T).await;
        assert_eq!(reply.status, 400);
        assert_eq!(reply.json()["id"], 11, "{body}: {}", reply.text());
    }
    assert_eq!(fake.count(), 0);
    sidecar.stop().await;
}
