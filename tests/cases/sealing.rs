//! The response half of the boundary against upstreams that misbehave on purpose: every
//! way a plaintext `requestState` could travel back (any chunking, any line ending, any
//! result, compressed, oversized, non-string, look-alike keys (Unicode ones included), cut
//! connections) ends as a
//! sealed token or a JSON-RPC internal error, never as the plaintext; and what the
//! upstream receives is a clean, re-serialised request. Fakes, because a real server
//! cannot be made to split its output into 1-byte chunks or reset mid-stream on demand.

use crate::support::fake::{
    FakeBody, FakeUpstream, Recorded, Reply, SECRET, Step, assert_internal_error, complete,
    contains, event, input_required, last_data, next_data, one_byte_chunks, open, pairs, plaintext,
    progress, read_to_end, sealed as token, sse_cut_in_the_result, tools_call, wait_until,
};
use crate::support::http::{self as client, mcp_headers, post_mcp, send};
use crate::support::sidecar::{self, Sidecar};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::config::{Config, PrincipalSource};
use mcp_state_guard::error::ErrorKind;
use mcp_state_guard::metrics::SealFailure;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(10);

async fn sidecar_with(fake: &FakeUpstream, tweak: impl FnOnce(&mut Config)) -> Sidecar {
    let mut config = sidecar::config(&fake.base_url());
    tweak(&mut config);
    Sidecar::start(config).await
}

fn case_of(request: &Recorded) -> String {
    request.header("x-case").unwrap_or_default().to_owned()
}

/// A tools/call with an `x-case` header the fake answers by (headers are forwarded).
async fn call_case(sidecar: &Sidecar, case: &str, id: u64) -> client::Reply {
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.push(("x-case".into(), case.into()));
    let body = serde_json::to_vec(&tools_call(id, None)).unwrap();
    send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await
}

fn first_progress() -> String {
    event("\r\n", &progress(1))
}

/// The line ending a case name stands for (headers cannot carry CR or LF); `multi` is
/// `\n` with the result split over two `data:` lines.
fn eol_of(name: &str) -> &'static str {
    match name {
        "crlf" => "\r\n",
        "cr" => "\r",
        _ => "\n",
    }
}

/// Two notifications with a `: ping` comment between them, then the input_required
/// result: (what must reach the client unchanged, the event to be sealed).
fn upstream_stream(name: &str) -> (String, String) {
    let eol = eol_of(name);
    let result = input_required(json!(7), json!(plaintext())).to_string();
    let (n1, n2) = (event(eol, &progress(1)), event(eol, &progress(2)));
    let prefix = format!("{n1}: ping{eol}{eol}{n2}");
    if name == "multi" {
        let (a, b) = result.split_at(result.find(",\"result\"").unwrap() + 1);
        return (prefix, format!("event: message\ndata: {a}\ndata: {b}\n\n"));
    }
    (
        prefix,
        format!("event: message{eol}data: {result}{eol}{eol}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn sse_sealing_is_independent_of_chunking_and_line_endings() {
    // The variant travels in a header so one fake serves them all; a retry carrying a
    // state is answered with a complete result echoing what the upstream received.
    let fake = FakeUpstream::start(|request| {
        if let Some(state) = request.json()["params"]["requestState"].as_str() {
            return Reply::json(complete(json!(8), &format!("got {state}")).to_string());
        }
        let case = case_of(request);
        let (name, split) = case.split_once('|').unwrap();
        let (prefix, last) = upstream_stream(name);
        let bytes = [prefix.as_bytes(), last.as_bytes()].concat();
        match split {
            "1" => Reply::sse(one_byte_chunks(&bytes)),
            _ => Reply::sse(vec![Step::Data(bytes.into())]),
        }
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let (mut tokens, expected) = (Vec::new(), input_required(json!(7), json!(plaintext())));
    for name in ["crlf", "lf", "cr", "multi"] {
        for split in ["0", "1"] {
            let what = format!("{name} split={split}");
            let reply = call_case(&sidecar, &format!("{name}|{split}"), 7).await;
            assert_eq!(reply.status, 200, "{what}");
            assert_eq!(reply.content_type(), "text/event-stream", "{what}");
            assert!(reply.headers.get("content-length").is_none(), "{what}");
            assert!(!contains(&reply.body, SECRET), "{what}: plaintext leaked");
            // Notifications and the comment pass byte for byte; only the last event changes.
            let (prefix, _) = upstream_stream(name);
            let rest = reply.body.strip_prefix(prefix.as_bytes());
            let rest = std::str::from_utf8(rest.expect(&what)).unwrap();
            let eol = eol_of(name);
            let data = rest
                .strip_prefix(&format!("event: message{eol}data: "))
                .and_then(|r| r.strip_suffix(&format!("{eol}{eol}")))
                .unwrap_or_else(|| panic!("{what}: last event reshaped: {rest:?}"));
            let mut sealed: Value = serde_json::from_str(data).unwrap();
            tokens.push(token(&sealed["result"]));
            sealed["result"]["requestState"] = json!(plaintext());
            assert_eq!(sealed, expected, "{what}");
        }
    }
    assert_eq!(sidecar.metrics().sealed_count(), 8);
    // The token is a real one, bound to this call: the retry reaches the upstream with
    // the plaintext back in place.
    let retry = tools_call(8, Some(json!(tokens[0])));
    let reply = post_mcp(&sidecar.mcp_url(), &retry).await.json();
    let got = format!("got {}", plaintext());
    assert_eq!(reply["result"]["content"][0]["text"], got);
    assert_eq!(fake.last().json()["params"]["requestState"], plaintext());
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn notifications_reach_the_client_before_the_upstream_finishes() {
    let (tx, rx) = mpsc::channel(8);
    let rx = Mutex::new(Some(rx));
    let fake = FakeUpstream::start(move |_| {
        let rx = rx.lock().unwrap().take().expect("one request");
        Reply::new(200, FakeBody::channel(rx)).header("content-type", "text/event-stream")
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    tx.send(Ok(first_progress().into())).await.unwrap();
    let body = FakeBody::whole(serde_json::to_vec(&tools_call(7, None)).unwrap());
    let headers = mcp_headers("tools/call", Some("provision"));
    let response = open(Method::POST, &sidecar.mcp_url(), &headers, body, false).await;
    let mut body = response.into_body();
    let mut seen = Vec::new();
    while seen.len() < first_progress().len() {
        seen.extend_from_slice(&next_data(&mut body, T).await.unwrap());
    }
    // The result has not even been written yet: the notification was not held back.
    assert_eq!(seen, first_progress().as_bytes());
    // Nothing more arrives while the upstream is silent.
    let more = tokio::time::timeout(Duration::from_secs(1), next_data(&mut body, T)).await;
    assert!(more.is_err());
    let last = event("\r\n", &input_required(json!(7), json!(plaintext())));
    tx.send(Ok(Bytes::from(last))).await.unwrap();
    drop(tx);
    let rest = read_to_end(body, T).await;
    token(&last_data(&rest)["result"]);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_events_and_bodies_become_internal_errors() {
    let fake = FakeUpstream::start(|request| {
        let mut big = input_required(json!(7), json!(plaintext()));
        big["result"]["inputRequests"]["region"]["params"]["message"] = json!("x".repeat(4000));
        if case_of(request) == "json" {
            return Reply::json(big.to_string());
        }
        // The plaintext comes first; the event then never ends, trickling for a minute.
        let mut steps = vec![Step::Data(first_progress().into())];
        let head = format!("event: message\r\ndata: {big}");
        let chunks = head.as_bytes().chunks(100);
        steps.extend(chunks.map(|c| Step::Data(Bytes::copy_from_slice(c))));
        let tick = [
            Step::Sleep(Duration::from_millis(100)),
            Step::Data("x".into()),
        ];
        steps.extend(tick.iter().cycle().take(1200).cloned());
        Reply::sse(steps)
    })
    .await;
    let sidecar = sidecar_with(&fake, |c| {
        c.limits.max_event_bytes = 1024;
        c.limits.max_body_bytes = 1024;
    })
    .await;
    let started = Instant::now();
    let reply = call_case(&sidecar, "sse", 7).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the stream must end, not wait"
    );
    assert_internal_error(&reply.body, 7, "oversized event");
    assert!(reply.body.starts_with(first_progress().as_bytes()));
    let metrics = sidecar.metrics();
    assert_eq!(metrics.seal_failure_count(SealFailure::EventTooLarge), 1);
    // The sidecar stopped reading: the upstream's response was dropped unfinished.
    wait_until(|| fake.unfinished() == 1, "the upstream stream is closed").await;

    let reply = call_case(&sidecar, "json", 9).await;
    assert_eq!(reply.status, 200);
    assert_internal_error(&reply.body, 9, "oversized JSON body");
    assert_eq!(metrics.seal_failure_count(SealFailure::ResponseTooLarge), 1);
    assert_eq!(metrics.refused_count(ErrorKind::UpstreamResponse), 1);
    assert_eq!(metrics.sealed_count(), 0);
    sidecar.stop().await;
}

/// Each SSE stream's incomplete event is held against `limits.max_buffered_bytes` while
/// it waits for its blank line: a stream that would pass the budget ends with an internal
/// error (counted as `over_budget`), the others go on, and every byte is given back.
#[tokio::test(flavor = "multi_thread")]
async fn incomplete_sse_events_share_the_memory_budget() {
    let fake = FakeUpstream::start(|request| {
        let mut big = input_required(json!(7), json!(plaintext()));
        big["result"]["inputRequests"]["region"]["params"]["message"] = json!("x".repeat(2500));
        let text = event("\r\n", &big);
        let (head, end) = text.split_at(text.len() - 4);
        let mut steps = vec![
            Step::Data(first_progress().into()),
            Step::Data(Bytes::copy_from_slice(head.as_bytes())),
        ];
        if case_of(request) == "slow" {
            steps.push(Step::Sleep(Duration::from_secs(2)));
        }
        steps.push(Step::Data(Bytes::copy_from_slice(end.as_bytes())));
        Reply::sse(steps)
    })
    .await;
    // Room for one incomplete event (about 2.7 KB), not for two.
    let sidecar = sidecar_with(&fake, |c| {
        c.limits.max_body_bytes = 4096;
        c.limits.max_buffered_bytes = 4096;
    })
    .await;
    let metrics = sidecar.metrics();
    let slow = call_case(&sidecar, "slow", 7);
    let second = async {
        let holding = || metrics.buffered_bytes().get() > 2500;
        wait_until(holding, "the slow stream holds its incomplete event").await;
        call_case(&sidecar, "fast", 8).await
    };
    let (slow, second) = tokio::join!(slow, second);

    assert_internal_error(&second.body, 8, "an event past the budget");
    assert!(second.body.starts_with(first_progress().as_bytes()));
    assert_eq!(metrics.seal_failure_count(SealFailure::OverBudget), 1);
    // The stream holding its share was not disturbed: its state arrives sealed.
    assert!(slow.body.starts_with(first_progress().as_bytes()));
    token(&last_data(&slow.body)["result"]);
    assert_eq!(metrics.sealed_count(), 1);
    wait_until(
        || metrics.buffered_bytes().get() == 0,
        "every buffered byte is given back",
    )
    .await;
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn compressed_upstream_bodies_are_refused_not_forwarded() {
    let gzip = |text: String| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).unwrap();
        Bytes::from(gz.finish().unwrap())
    };
    let result = input_required(json!(7), json!(plaintext()));
    let (json_gz, sse_gz) = (gzip(result.to_string()), gzip(event("\r\n", &result)));
    let (j, s) = (json_gz.clone(), sse_gz.clone());
    let fake = FakeUpstream::start(move |request| match case_of(request).as_str() {
        "sse" => Reply::sse(vec![Step::Data(s.clone())]).header("content-encoding", "gzip"),
        _ => Reply::json(j.clone()).header("content-encoding", "gzip"),
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    for (case, compressed) in [("json", &json_gz), ("sse", &sse_gz)] {
        let reply = call_case(&sidecar, case, 7).await;
        assert_eq!(reply.status, 200, "{case}");
        assert_internal_error(&reply.body, 7, case);
        // Not a single 8-byte run of the compressed body reached the client.
        let leaked = |w: &[u8]| compressed.windows(8).any(|c| c == w);
        assert!(!reply.body.windows(8).any(leaked), "{case}");
        assert!(reply.headers.get("content-encoding").is_none(), "{case}");
    }
    // The request asked for identity, so the upstream had no excuse.
    let identity = |r: &Recorded| r.header("accept-encoding") == Some("identity");
    assert!(fake.requests().iter().all(identity));
    let failures = sidecar
        .metrics()
        .seal_failure_count(SealFailure::UnsupportedEncoding);
    assert_eq!(failures, 2);
    sidecar.stop().await;
}

/// Upstream answers that cannot be sealed.
fn unsealable(case: &str) -> Reply {
    let state = |s: Value| input_required(json!(7), s);
    let sse = |message: String| {
        let last = format!("event: message\r\ndata: {message}\r\n\r\n");
        Reply::sse(vec![
            Step::Data(first_progress().into()),
            Step::Data(last.into()),
        ])
    };
    let renamed = |key: &str| {
        let mut m = state(json!(plaintext()));
        let s = m["result"].as_object_mut().unwrap().remove("requestState");
        m["result"][key] = s.unwrap();
        m.to_string()
    };
    // A lenient client parser could keep either value; the first one looks sealed.
    let duplicate = format!(
        r#"{{"jsonrpc":"2.0","id":7,"result":{{"requestState":"v1.x","requestState":{}}}}}"#,
        json!(plaintext())
    );
    match case {
        "json-number" => Reply::json(state(json!(4242)).to_string()),
        "json-object" => Reply::json(state(json!({"k": SECRET})).to_string()),
        "json-array" => Reply::json(state(json!([SECRET])).to_string()),
        "sse-number" => sse(state(json!(4242)).to_string()),
        "sse-object" => sse(state(json!({"k": SECRET})).to_string()),
        "sse-array" => sse(state(json!([SECRET])).to_string()),
        "json-snake" => Reply::json(renamed("request_state")),
        "json-pascal" => Reply::json(renamed("RequestState")),
        "sse-snake" => sse(renamed("request_state")),
        "json-duplicate" => Reply::json(duplicate),
        // Asked under a key the client's answer could not use (`inputResponses` keys must
        // be ASCII at the gate).
        "json-non-ascii-ask" => {
            let mut m = state(json!(plaintext()));
            let asks = m["result"]["inputRequests"].as_object_mut().unwrap();
            let ask = asks.remove("region").unwrap();
            asks.insert("régión".into(), ask);
            Reply::json(m.to_string())
        }
        "json-not-json" => Reply::json(format!("<html>{SECRET}</html>")),
        "sse-not-json" => sse(format!("{{\"requestState\":\"{SECRET}\"")),
        // Unlabelled and not JSON: a 2xx answer to an MCP request must be JSON, SSE or empty.
        "no-content-type" => Reply::new(200, FakeBody::whole(format!("state={SECRET}"))),
        _ => Reply::new(400, FakeBody::whole("Invalid Content-Type header"))
            .header("content-type", "text/plain; charset=utf-8"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn results_that_cannot_be_sealed_become_internal_errors() {
    let fake = FakeUpstream::start(|request| unsealable(&case_of(request))).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let metrics = sidecar.metrics();
    let cases = [
        ("json-number", SealFailure::NonStringState),
        ("json-object", SealFailure::NonStringState),
        ("json-array", SealFailure::NonStringState),
        ("sse-number", SealFailure::NonStringState),
        ("sse-object", SealFailure::NonStringState),
        ("sse-array", SealFailure::NonStringState),
        ("json-snake", SealFailure::AmbiguousKey),
        ("json-non-ascii-ask", SealFailure::AmbiguousKey),
        ("json-pascal", SealFailure::AmbiguousKey),
        ("sse-snake", SealFailure::AmbiguousKey),
        ("json-duplicate", SealFailure::UnparseableBody),
        ("json-not-json", SealFailure::UnparseableBody),
        ("sse-not-json", SealFailure::UnparseableBody),
        ("no-content-type", SealFailure::UnexpectedContentType),
    ];
    for (id, (case, failure)) in (100..).zip(cases) {
        let before = metrics.seal_failure_count(failure);
        let reply = call_case(&sidecar, case, id).await;
        assert_eq!(reply.status, 200, "{case}");
        assert_internal_error(&reply.body, id, case);
        assert!(
            !contains(&reply.body, "4242"),
            "{case}: the number state leaked"
        );
        // In a stream, what came before the bad event still streamed through.
        let streamed = reply.body.starts_with(first_progress().as_bytes());
        assert_eq!(streamed, case.starts_with("sse"), "{case}");
        assert_eq!(metrics.seal_failure_count(failure), before + 1, "{case}");
    }
    assert_eq!(metrics.sealed_count(), 0);
    // A declared non-JSON error page is no JSON-RPC message: passed through unchanged.
    let reply = call_case(&sidecar, "text-plain", 1).await;
    let text = "Invalid Content-Type header";
    assert_eq!((reply.status.as_u16(), reply.text().as_str()), (400, text));
    assert_eq!(reply.content_type(), "text/plain; charset=utf-8");
    sidecar.stop().await;
}

/// Upstream messages whose keys a Unicode-folding client reads as guarded fields (Go's
/// `encoding/json` takes `reſult` for `result`, `meſſage` for `message`), or that are
/// non-ASCII where only ASCII names belong; each hides the plaintext behind that key.
fn non_ascii_answer(case: &str) -> String {
    let plain = json!(plaintext());
    let asking = input_required(json!(7), plain.clone());
    let error = |error: Value| json!({"jsonrpc": "2.0", "id": 7, "error": error}).to_string();
    match case {
        "envelope" => json!({"jsonrpc": "2.0", "id": 7, "reſult": asking["result"]}).to_string(),
        // Escaped on the wire: the same key once decoded.
        "envelope-escaped" => non_ascii_answer("envelope").replace("reſult", "re\\u017fult"),
        "result" => {
            let mut message = asking;
            let result = message["result"].as_object_mut().unwrap();
            let state = result.remove("requestState").unwrap();
            result.insert("requeſtState".into(), state);
            message.to_string()
        }
        "error" => error(json!({"code": -32000, "message": "failed", "meſſage": plain})),
        "error-other" => error(json!({"code": -32000, "message": "failed", "é": plain})),
        "error-data" => error(json!({"code": -32000, "message": "failed",
            "data": {"requeſtState": plain}})),
        // A server→client request in the stream, its state under a look-alike key.
        "params" => json!({"jsonrpc": "2.0", "id": "s-1",
            "method": "elicitation/create", "params": {"requeſtState": plain}})
        .to_string(),
        _ => unreachable!("{case}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unicode_look_alike_keys_from_the_upstream_become_internal_errors() {
    // `x-case` is `json|<case>` or `sse|<case>`; `control` is a complete result whose
    // payload (not a guarded level) has non-ASCII keys: it must arrive unchanged.
    let control = json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "complete",
        "content": [], "structuredContent": {"é": "ü", "requeſtState": "tool data"}}});
    let answer = control.to_string();
    let fake = FakeUpstream::start(move |request| {
        let case = case_of(request);
        let (mode, case) = case.split_once('|').unwrap();
        let message = match case {
            "control" => answer.clone(),
            _ => non_ascii_answer(case),
        };
        match mode {
            "json" => Reply::json(message),
            _ => Reply::sse(vec![
                Step::Data(first_progress().into()),
                Step::Data(format!("event: message\r\ndata: {message}\r\n\r\n").into()),
            ]),
        }
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let metrics = sidecar.metrics();
    let cases = [
        "envelope",
        "envelope-escaped",
        "result",
        "error",
        "error-other",
        "error-data",
        "params",
    ];
    let mut id = 200;
    for mode in ["json", "sse"] {
        for case in cases {
            id += 1;
            let what = format!("{mode} {case}");
            let before = metrics.seal_failure_count(SealFailure::AmbiguousKey);
            let reply = call_case(&sidecar, &format!("{mode}|{case}"), id).await;
            assert_eq!(reply.status, 200, "{what}");
            // No plaintext, in any spelling, and a -32603 for this request.
            assert!(
                !contains(&reply.body, &plaintext()),
                "{what}: plaintext leaked"
            );
            assert_internal_error(&reply.body, id, &what);
            let streamed = reply.body.starts_with(first_progress().as_bytes());
            assert_eq!(streamed, mode == "sse", "{what}");
            let after = metrics.seal_failure_count(SealFailure::AmbiguousKey);
            assert_eq!(after, before + 1, "{what}");
        }
        let reply = call_case(&sidecar, &format!("{mode}|control"), 7).await;
        let received = match mode {
            "json" => reply.json(),
            _ => last_data(&reply.body),
        };
        assert_eq!(received, control, "{mode} control");
    }
    assert_eq!(metrics.sealed_count(), 0);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_in_any_result_is_sealed() {
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let state = message["params"].get("requestState");
        let result = match (message["method"].as_str().unwrap(), state) {
            ("tools/list", None) => json!({"tools": [], "requestState": "LIST-PLAIN"}),
            ("tools/list", Some(state)) => json!({"tools": [{"name": state}]}),
            // No resultType at all: still a result, still sealed.
            _ => json!({"content": [], "requestState": "CALL-PLAIN"}),
        };
        Reply::json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}).to_string())
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let params = json!({"_meta": client::meta()});
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
    let reply = post_mcp(&sidecar.mcp_url(), &list).await;
    assert!(!contains(&reply.body, "LIST-PLAIN"), "{}", reply.text());
    let list_token = token(&reply.json()["result"]);
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(2, None)).await;
    assert!(!contains(&reply.body, "CALL-PLAIN"), "{}", reply.text());
    token(&reply.json()["result"]);
    assert_eq!(sidecar.metrics().sealed_count(), 2);
    // And a tools/list retry with it is verified and unwrapped like any other.
    let mut retry = list.clone();
    retry["params"]["requestState"] = json!(list_token);
    let reply = post_mcp(&sidecar.mcp_url(), &retry).await;
    assert_eq!(reply.json()["result"]["tools"][0]["name"], "LIST-PLAIN");
    assert_eq!(sidecar.metrics().verified_count("ok"), 1);
    sidecar.stop().await;
}

/// A gateway error as the client sees it: (status, id, code).
fn gateway(reply: &client::Reply) -> (u16, Value, Value) {
    let body = reply.json();
    let (id, code) = (body["id"].clone(), body["error"]["code"].clone());
    (reply.status.as_u16(), id, code)
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_failures_become_gateway_errors_with_the_request_id() {
    // Hanging: no response head within response_head_ms → 504.
    let hanging = FakeUpstream::always(Reply::hang).await;
    let sidecar = sidecar_with(&hanging, |c| c.timeouts.response_head_ms = 500).await;
    let started = Instant::now();
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(41, None)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3));
    assert_eq!(gateway(&reply), (504, json!(41), json!(-32603)));
    assert_eq!(
        sidecar.metrics().refused_count(ErrorKind::UpstreamTimeout),
        1
    );
    assert_eq!(hanging.count(), 1);
    sidecar.stop().await;

    // Down: nothing listens on the port → 502.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let sidecar = Sidecar::in_front_of(&format!("http://127.0.0.1:{port}")).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(42, None)).await;
    assert_eq!(gateway(&reply), (502, json!(42), json!(-32603)));
    let unavailable = sidecar
        .metrics()
        .refused_count(ErrorKind::UpstreamUnavailable);
    assert_eq!(unavailable, 1);
    sidecar.stop().await;

    // Not HTTP at all → 502; a body cut short of its content-length → internal error.
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n";
    let cut = format!("{head}{{\"requestState\":\"{SECRET}");
    for (answer, status) in [("garbage\r\n\r\n".to_owned(), 502), (cut, 200)] {
        let raw = FakeUpstream::raw(vec![Step::Data(answer.into())], false).await;
        let sidecar = Sidecar::in_front_of(&raw.base_url()).await;
        let reply = post_mcp(&sidecar.mcp_url(), &tools_call(43, None)).await;
        assert_eq!(reply.status, status);
        assert_internal_error(&reply.body, 43, "malformed upstream answer");
        sidecar.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_cut_mid_stream_ends_with_an_error_event() {
    for reset in [false, true] {
        let steps = sse_cut_in_the_result(44);
        let raw = FakeUpstream::raw(steps, reset).await;
        let sidecar = Sidecar::in_front_of(&raw.base_url()).await;
        let reply = post_mcp(&sidecar.mcp_url(), &tools_call(44, None)).await;
        assert_eq!(reply.status, 200);
        assert!(
            reply.body.starts_with(first_progress().as_bytes()),
            "{}",
            reply.text()
        );
        assert_internal_error(&reply.body, 44, &format!("cut (reset={reset})"));
        let failures = sidecar
            .metrics()
            .seal_failure_count(SealFailure::UpstreamBodyError);
        assert_eq!(failures, 1);
        sidecar.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstream_sees_a_clean_request() {
    let fake = FakeUpstream::always(|| Reply::json(complete(json!(1), "ok").to_string())).await;
    let sidecar = sidecar_with(&fake, |c| {
        c.principal.source = PrincipalSource::Header;
        c.allowed_hosts = Some(vec!["public.example".into()]);
    })
    .await;
    // Odd but valid JSON: whitespace, escapes, a big integer the upstream must see verbatim.
    let body = r#"{ "jsonrpc" : "2.0", "id" : 1, "method" : "tools/call",
        "params" : {"name":"provision", "arguments": {"name": "web\u002d1",
        "n": 123456789012345678901234567890}, "_meta": {}} }"#;
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.extend(pairs(&[
        ("connection", "keep-alive, x-hop"),
        ("keep-alive", "timeout=5"),
        ("x-hop", "1"),
        ("te", "trailers"),
        ("proxy-authorization", "Basic c2VjcmV0"),
        ("host", "public.example:443"),
        ("accept-encoding", "gzip, br"),
        ("mcp-param-region", "eu-west-1"),
        ("x-forwarded-user", "alice"),
    ]));
    let hop = [
        "connection",
        "keep-alive",
        "x-hop",
        "te",
        "proxy-authorization",
    ];
    let host = format!("127.0.0.1:{}", fake.port);
    for path in ["/mcp?x=1", "//mcp", "/MCP"] {
        let url = format!("{}{path}", sidecar.base_url());
        let reply = send(Method::POST, &url, &headers, body, T).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let seen = fake.last();
        assert_eq!(seen.target, path);
        assert_eq!(seen.header("host"), Some(host.as_str()));
        for gone in hop.iter().chain(&["transfer-encoding", "x-forwarded-user"]) {
            assert!(
                seen.headers.get(*gone).is_none(),
                "{path}: {gone} forwarded"
            );
        }
        assert_eq!(seen.header("accept-encoding"), Some("identity"));
        for name in [
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
            "mcp-protocol-version",
        ] {
            let sent = headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str());
            assert_eq!(seen.header(name), sent, "{path}: {name}");
        }
        assert_eq!(seen.json(), serde_json::from_str::<Value>(body).unwrap());
        assert!(contains(&seen.body, "123456789012345678901234567890"));
        let length = seen.body.len().to_string();
        assert_eq!(seen.header("content-length"), Some(length.as_str()));
    }
    // A chunked client body reaches the upstream with a length instead.
    let chunked = FakeBody::steps(vec![Step::Data(body.into()), Step::Data(" ".into())]);
    let url = sidecar.mcp_url();
    let response = open(Method::POST, &url, &headers, chunked, false).await;
    assert_eq!(response.status(), 200);
    let seen = fake.last();
    assert!(seen.headers.get("transfer-encoding").is_none());
    assert_eq!(
        seen.header("content-length"),
        Some(seen.body.len().to_string().as_str())
    );
    sidecar.stop().await;
    // With forward_header the identity reaches the upstream as received.
    let sidecar = sidecar_with(&fake, |c| {
        c.principal.source = PrincipalSource::Header;
        c.principal.forward_header = true;
        c.allowed_hosts = Some(vec!["public.example".into()]);
    })
    .await;
    send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
    assert_eq!(fake.last().header("x-forwarded-user"), Some("alice"));
    sidecar.stop().await;
}

/// A 2025-era server: an endless GET stream, DELETE, and a form-posting OAuth endpoint.
fn legacy_answer(request: &Recorded) -> Reply {
    match (request.method.as_str(), request.target.as_str()) {
        // An event every 200 ms, for a minute.
        ("GET", _) => {
            let tick = |n| {
                [
                    Step::Data(event("\r\n", &progress(n)).into()),
                    Step::Sleep(MS_200),
                ]
            };
            Reply::sse((0..300).flat_map(tick).collect())
        }
        ("DELETE", _) => Reply::new(200, FakeBody::whole("")),
        (_, "/oauth/token") => Reply::new(200, FakeBody::whole(OAUTH_ANSWER))
            .header("content-type", "application/json"),
        _ => Reply::json(complete(json!(1), "ok").to_string()),
    }
}

const MS_200: Duration = Duration::from_millis(200);

/// Not what the sealer would produce: proves the passthrough answer is untouched.
const OAUTH_ANSWER: &str = "{ \"access_token\":\"a\", \"requestState\":\"x\" }";

#[tokio::test(flavor = "multi_thread")]
async fn legacy_traffic_passes_through_streaming() {
    let fake = FakeUpstream::start(legacy_answer).await;
    let sidecar = sidecar_with(&fake, |c| c.passthrough_paths = vec!["/oauth/token".into()]).await;
    let url = sidecar.mcp_url();
    let session = pairs(&[("accept", "text/event-stream"), ("mcp-session-id", "abc")]);
    let response = open(Method::GET, &url, &session, FakeBody::whole(""), false).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let (mut seen, started) = (Vec::new(), Instant::now());
    while seen.windows(4).filter(|w| w == b"\r\n\r\n").count() < 3 {
        seen.extend_from_slice(&next_data(&mut body, T).await.unwrap());
    }
    // Three events over ~400 ms: streamed as they came, not buffered to the end.
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(seen.starts_with(event("\r\n", &progress(0)).as_bytes()));
    drop(body);
    wait_until(
        || fake.unfinished() == 1,
        "the upstream GET stream is closed",
    )
    .await;
    assert_eq!(fake.last().header("mcp-session-id"), Some("abc"));

    let reply = send(Method::DELETE, &url, &session, "", T).await;
    assert_eq!(
        (reply.status.as_u16(), fake.last().method),
        (200, Method::DELETE)
    );
    let before = fake.count();
    let reply = send(Method::GET, &url, &session, "{\"requestState\":\"x\"}", T).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        sidecar.metrics().refused_count(ErrorKind::BodyNotAllowed),
        1
    );
    assert_eq!(fake.count(), before, "a GET body was forwarded");

    // The passthrough path forwards the form and its answer byte for byte; /mcp refuses it.
    let form_type = "application/x-www-form-urlencoded";
    let form = pairs(&[("content-type", form_type)]);
    let bytes = "grant_type=client_credentials&client_id=a%20b&requestState=x";
    let oauth = format!("{}/oauth/token", sidecar.base_url());
    let reply = send(Method::POST, &oauth, &form, bytes, T).await;
    assert_eq!(reply.text(), OAUTH_ANSWER);
    assert_eq!(fake.last().body, bytes);
    assert_eq!(fake.last().header("content-type"), Some(form_type));
    let before = fake.count();
    let reply = send(Method::POST, &url, &form, bytes, T).await;
    assert_eq!(reply.status, 415);
    assert_eq!(fake.count(), before);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h2c_clients_get_sealed_answers() {
    let answer = input_required(json!(5), json!(plaintext())).to_string();
    let fake = FakeUpstream::always(move || Reply::json(answer.clone())).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let body = FakeBody::whole(serde_json::to_vec(&tools_call(5, None)).unwrap());
    let headers = mcp_headers("tools/call", Some("provision"));
    let response = open(Method::POST, &sidecar.mcp_url(), &headers, body, true).await;
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let body = read_to_end(response.into_body(), T).await;
    token(&serde_json::from_slice::<Value>(&body).unwrap()["result"]);
    // The upstream leg is HTTP/1.1 with the upstream's authority as Host.
    let host = format!("127.0.0.1:{}", fake.port);
    assert_eq!(fake.last().header("host"), Some(host.as_str()));
    sidecar.stop().await;
}

/// Whether the plaintext reaches a client when the upstream answers `body` as `content_type`.
async fn leaks(content_type: &'static str, body: String) -> bool {
    let fake = FakeUpstream::always(move || {
        Reply::new(200, FakeBody::whole(body.clone())).header("content-type", content_type)
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(7, None)).await;
    sidecar.stop().await;
    contains(&reply.body, SECRET)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byte_order_mark_does_not_hide_an_sse_event() {
    // WHATWG SSE: the decoder strips one leading BOM, so EventSource and eventsource-parser
    // (TypeScript SDK) read this event's data; the sidecar must not let it through.
    let message = input_required(json!(7), json!(plaintext()));
    assert!(!leaks("text/event-stream", format!("\u{feff}data: {message}\n\n")).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn content_types_clients_read_as_json_are_sealed_or_refused() {
    // The reference SDK client picks its parser with `content_type.startswith(
    // "application/json")` / `startswith("text/event-stream")`; a framework that writes
    // `application/json, charset=utf-8` (comma for semicolon) gets its body read as JSON.
    let message = input_required(json!(7), json!(plaintext()));
    let mut leaked = Vec::new();
    for (content_type, body) in [
        ("application/json, charset=utf-8", message.to_string()),
        ("application/jsonl", message.to_string()),
        ("text/event-stream, text/plain", event("\n", &message)),
    ] {
        if leaks(content_type, body).await {
            leaked.push(content_type);
        }
    }
    assert!(leaked.is_empty(), "plaintext leaked under {leaked:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_json_acknowledgements_pass_through() {
    // mcp 2.3.0 `streamable_http.py` answers notifications and POSTed responses with
    // `_create_json_response(None, 202)`: content-type application/json, no body. The
    // POSTed response gets the same nothing chunked (unknown length until it ends).
    let fake = FakeUpstream::start(|request| {
        let body = match contains(&request.body, "result") {
            true => FakeBody::steps(Vec::new()),
            false => FakeBody::whole(""),
        };
        Reply::new(202, body).header("content-type", "application/json")
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    // 2025-era requests: a session id, no MCP 2026 routing headers.
    let headers = pairs(&[
        ("content-type", "application/json"),
        ("mcp-session-id", "abc"),
    ]);
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept","content":{}}}"#,
    ] {
        let reply = send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await;
        assert_eq!(
            (reply.status.as_u16(), reply.text()),
            (202, String::new()),
            "{body}"
        );
    }
    let metrics = sidecar.metrics();
    assert_eq!(metrics.seal_failure_count(SealFailure::UnparseableBody), 0);
    sidecar.stop().await;
}
