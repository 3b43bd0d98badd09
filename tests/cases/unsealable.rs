//! What cannot be sealed is never shown: an upstream answer the sidecar cannot seal, or
//! could not read the way a client would, becomes a JSON-RPC internal error (counted under
//! its seal failure), never the plaintext. Non-string states, look-alike keys (Unicode
//! ones included), duplicate keys, oversized events and bodies, compressed bodies, a state
//! in an error, and headers or a byte-order mark that make a client decode a body
//! differently from the sealer (several from a security review). Each case fails if its
//! guard is removed.

use crate::support::fake::{
    FakeBody, FakeUpstream, Recorded, Reply, SECRET, Step, assert_internal_error, call_case,
    case_of, contains, event, first_progress, input_required, last_data, plaintext, sidecar_with,
    tools_call, wait_until,
};
use crate::support::flow::{NOBODY, tool_call};
use crate::support::http::{post_mcp, post_mcp_with};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::Sidecar;
use bytes::Bytes;
use mcp_state_guard::facade::error::ErrorKind;
use mcp_state_guard::facade::proxy::SealFailure;
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread")]
async fn a_nonstring_state_becomes_an_internal_error() {
    let upstream = LegacyServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let message = tool_call(7, "nonstring_state", json!({}));
    let reply = post_mcp_with(&sidecar.mcp_url(), &message, NOBODY).await;
    let body = reply.json();
    assert_eq!([&body["id"], &body["error"]["code"]], [7, -32603], "{body}");
    assert!(body.get("result").is_none(), "{body}");
    assert!(!reply.text().contains("12345"), "{body}");
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics.path.seal_failure_count(SealFailure::NonStringState),
        1
    );
    assert_eq!(
        metrics.refusals.refused_count(ErrorKind::UpstreamResponse),
        1
    );
    assert_eq!(metrics.path.sealed_count(), 0);
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
        let before = metrics.path.seal_failure_count(failure);
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
        assert_eq!(
            metrics.path.seal_failure_count(failure),
            before + 1,
            "{case}"
        );
    }
    assert_eq!(metrics.path.sealed_count(), 0);
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
            let before = metrics.path.seal_failure_count(SealFailure::AmbiguousKey);
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
            let after = metrics.path.seal_failure_count(SealFailure::AmbiguousKey);
            assert_eq!(after, before + 1, "{what}");
        }
        let reply = call_case(&sidecar, &format!("{mode}|control"), 7).await;
        let received = match mode {
            "json" => reply.json(),
            _ => last_data(&reply.body),
        };
        assert_eq!(received, control, "{mode} control");
    }
    assert_eq!(metrics.path.sealed_count(), 0);
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
    assert_eq!(
        metrics.path.seal_failure_count(SealFailure::EventTooLarge),
        1
    );
    // The sidecar stopped reading: the upstream's response was dropped unfinished.
    wait_until(|| fake.unfinished() == 1, "the upstream stream is closed").await;

    let reply = call_case(&sidecar, "json", 9).await;
    assert_eq!(reply.status, 200);
    assert_internal_error(&reply.body, 9, "oversized JSON body");
    assert_eq!(
        metrics
            .path
            .seal_failure_count(SealFailure::ResponseTooLarge),
        1
    );
    assert_eq!(
        metrics.refusals.refused_count(ErrorKind::UpstreamResponse),
        1
    );
    assert_eq!(metrics.path.sealed_count(), 0);
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
        .path
        .seal_failure_count(SealFailure::UnsupportedEncoding);
    assert_eq!(failures, 2);
    sidecar.stop().await;
}

/// Raw response headers of a fake upstream.
type RawHeaders = Vec<(&'static str, Vec<u8>)>;

/// What a client receives when the upstream answers `body` under `headers`.
pub(super) async fn through(headers: RawHeaders, body: Vec<u8>) -> bytes::Bytes {
    let fake = FakeUpstream::always(move || {
        let mut reply = Reply::new(200, FakeBody::whole(body.clone()));
        for (name, value) in &headers {
            reply = reply.raw_header(name, value);
        }
        reply
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(7, None)).await;
    sidecar.stop().await;
    reply.body
}

fn utf16(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_a_client_decodes_differently_are_refused() {
    let message = input_required(json!(7), json!(plaintext()));
    let sse = event("\r\n", &message);
    let ct = |v: &str| ("content-type", v.as_bytes().to_vec());
    let ce = |v: &str| ("content-encoding", v.as_bytes().to_vec());
    let cases: Vec<(&str, RawHeaders, Vec<u8>)> = vec![
        // A client honours the charset; the sealer reads bytes as UTF-8.
        (
            "utf-16 events",
            vec![ct("text/event-stream; charset=utf-16")],
            utf16(&sse),
        ),
        (
            "utf-16 json",
            vec![ct("application/json; charset=UTF-16LE")],
            utf16(&message.to_string()),
        ),
        // Clients merge repeated headers: `identity, gzip` is decoded as gzip.
        (
            "two encodings",
            vec![ct("text/event-stream"), ce("identity"), ce("gzip")],
            gzip(sse.as_bytes()),
        ),
        // Latin-1 bytes in the type: clients still see `application/json`.
        (
            "non-ascii type",
            vec![("content-type", b"application/json; x=\xe9".to_vec())],
            message.to_string().into_bytes(),
        ),
        // Two types: some clients take the last, some search for `json`.
        (
            "two types",
            vec![ct("text/plain"), ct("application/json")],
            message.to_string().into_bytes(),
        ),
    ];
    for (what, headers, body) in cases {
        let received = through(headers, body).await;
        assert!(!contains(&received, SECRET), "{what}: plaintext leaked");
        assert_internal_error(&received, 7, what);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_in_an_error_is_refused() {
    let error = json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": "retry",
        "data": {"requestState": plaintext()}}});
    let ct = ("content-type", b"application/json".to_vec());
    let received = through(vec![ct], error.to_string().into_bytes()).await;
    assert_internal_error(&received, 7, "error.data.requestState");
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
