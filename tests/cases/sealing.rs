//! Sealing: the client never sees the upstream's state. Every `requestState` an upstream
//! answers, in JSON or in any SSE event however it is chunked and whatever its line
//! endings, in any result (`tools/list` too), over HTTP/1.1 or h2c, reaches the client as
//! a fresh `v1.` token and comes back to the upstream as its own plaintext; notifications
//! before it stream through unchanged and are not held back. First with the real Python
//! SDK on both sides, then against fakes, because a real server cannot be made to split
//! its output into 1-byte chunks on demand.

use crate::support::fake::{
    FakeBody, FakeUpstream, Reply, SECRET, Step, call_case, case_of, complete, contains, event,
    first_progress, input_required, last_data, next_data, one_byte_chunks, open, plaintext,
    progress, read_to_end, sealed as token, tools_call,
};
use crate::support::flow::{
    CONFIG, GREETED, NOBODY, PROVISIONED, SSE, TWO_STEP, assert_token, confirmed, progress_ask,
    text, token_of,
};
use crate::support::http::{self as client, event_json, mcp_headers, post_mcp};
use crate::support::http::{post_mcp_streaming, post_mcp_with};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::client_flows;
use crate::support::sidecar::Sidecar;
use bytes::Bytes;
use http::Method;
use mcp_state_guard::facade::token::Reject;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(10);

/// `client_flows.py manual` arguments, rounds, and the final text.
const MANUAL: [(&str, usize, &str); 6] = [
    (r#"tool provision --args {"name":"web-1"}"#, 2, PROVISIONED),
    ("tool two_step", 3, TWO_STEP),
    ("tool state_only", 2, "state_only done job-42"),
    ("tool progress_ask", 2, "progress_ask done ok=true"),
    ("prompt greet_prompt", 2, GREETED),
    ("resource config://prod", 2, CONFIG),
];

/// The manual loop shows every state the client sees: each is a token, none repeats.
async fn manual_loop(mode: Mode) {
    let upstream = LegacyServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let mut runs = tokio::task::JoinSet::new();
    for (args, rounds, last) in MANUAL {
        let url = sidecar.mcp_url();
        let argv: Vec<&str> = ["manual"].into_iter().chain(args.split(' ')).collect();
        runs.spawn(async move { (args, rounds, last, client_flows(&url, &argv).await) });
    }
    let mut all = Vec::new();
    while let Some(run) = runs.join_next().await {
        let (args, rounds, last, out) = run.unwrap();
        assert_eq!(
            (&out["rounds"], &out["final"]),
            (&json!(rounds), &json!(last)),
            "{args}"
        );
        let states: Vec<String> = serde_json::from_value(out["states"].clone()).unwrap();
        assert_eq!(states.len(), rounds - 1, "{args}: {out}");
        states.iter().for_each(|s| assert_token(s));
        all.extend(states);
    }

    // progress_ask again with a progress token: SSE in SSE mode, in both rounds.
    let (url, streams) = (sidecar.mcp_url(), mode == Mode::Sse);
    let first = post_mcp_with(&url, &progress_ask(10, 0), NOBODY).await;
    assert_eq!(first.content_type() == SSE, streams, "{:?}", first.headers);
    let token = token_of(&first.message());
    let last = post_mcp_with(&url, &confirmed(progress_ask(11, 0), &token), NOBODY).await;
    assert_eq!(last.content_type() == SSE, streams, "{:?}", last.headers);
    assert_eq!(text(&last.message()), "progress_ask done ok=true");
    all.push(token);

    // Fresh per round and per flow (random nonces): two_step's two rounds differ too.
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a token repeated: {all:?}");
    assert_eq!(
        sidecar.metrics().path.verified_count("ok"),
        all.len() as u64
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_loop_sees_only_fresh_tokens_json_mode() {
    manual_loop(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_loop_sees_only_fresh_tokens_sse_mode() {
    manual_loop(Mode::Sse).await;
}

/// The SDK's automatic loop over every asking tool, prompt and resource gives the same
/// answers through the sidecar as directly; every state went out sealed and came back.
async fn sdk_automatic_loop(mode: Mode) {
    let upstream = LegacyServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let direct = client_flows(&upstream.mcp_url(), &["auto-all"]).await;
    upstream.reset();
    let through = client_flows(&sidecar.mcp_url(), &["auto-all"]).await;
    assert_eq!(through["results"], direct["results"]);
    let results = &through["results"];
    assert_eq!(results["tool:provision"], PROVISIONED);
    assert_eq!(results["tool:two_step"], TWO_STEP);
    assert_eq!(results["prompt:greet_prompt"], GREETED);
    assert_eq!(results["resource:config://prod"], CONFIG);
    // SSE mode streams progress (2 rounds x 3) through; JSON mode has nowhere to put it.
    let progress = through["progress"].as_array().unwrap().len();
    assert_eq!(progress, if mode == Mode::Sse { 6 } else { 0 }, "{through}");
    assert_eq!(through["progress"], direct["progress"]);
    assert_eq!(through["logs"], direct["logs"]);
    let auto = client_flows(&sidecar.mcp_url(), &["auto-provision"]).await;
    assert_eq!(auto["text"], PROVISIONED);

    let metrics = sidecar.metrics();
    let sealed = metrics.path.sealed_count();
    assert!(sealed >= 10, "sealed {sealed}");
    assert_eq!(
        metrics.path.verified_count("ok"),
        sealed,
        "each came back once"
    );
    for reject in Reject::ALL.map(Reject::as_str) {
        assert_eq!(metrics.path.verified_count(reject), 0, "{reject}");
    }
    // The upstream got its own plaintext back every time, never a token.
    let seen = upstream.seen();
    let states: Vec<&Value> = seen.iter().map(|e| &e["requestState"]).collect();
    let states: Vec<&&Value> = states.iter().filter(|s| !s.is_null()).collect();
    // Rounds in which the upstream sent no state are sealed too (the token binds their
    // inputResponses to what was asked); their retries reach it with no state, as sent.
    let stateless_retries = seen
        .iter()
        .filter(|e| e["requestState"].is_null())
        .filter(|e| {
            e["inputResponses"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        })
        .count();
    assert!(
        stateless_retries > 0,
        "the fixtures include stateless rounds: {seen:?}"
    );
    assert_eq!(
        (states.len() + stateless_retries) as u64,
        sealed,
        "{states:?}"
    );
    let plain = |s: &&&Value| s.as_str().is_some_and(|s| s.starts_with('{'));
    assert!(states.iter().all(plain), "{states:?}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_automatic_loop_json_mode() {
    sdk_automatic_loop(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_automatic_loop_sse_mode() {
    sdk_automatic_loop(Mode::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sse_events_stream_through_unchanged_and_the_last_is_sealed() {
    let upstream = LegacyServer::start(Mode::Sse);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let message = progress_ask(1, 300);
    let (direct_type, direct) = post_mcp_streaming(&upstream.mcp_url(), &message).await;
    let (through_type, through) = post_mcp_streaming(&sidecar.mcp_url(), &message).await;
    assert_eq!([direct_type.as_str(), &through_type], [SSE, SSE]);
    // 3 progress notifications and a log message, then the response.
    assert_eq!([direct.len(), through.len()], [5, 5], "{through:?}");
    let (notifications, last) = through.split_at(4);
    for ((_, ours), (_, theirs)) in notifications.iter().zip(&direct) {
        assert_eq!(ours, theirs, "a notification event was altered");
    }
    // The handler sleeps 300 ms after each progress step: a sidecar that buffered the
    // stream would deliver every event at the end.
    let progress = |e: &&(Duration, Bytes)| event_json(&e.1)["method"] == "notifications/progress";
    let first = notifications.iter().find(progress).unwrap().0;
    let lead = last[0].0 - first;
    assert!(lead >= Duration::from_millis(600), "only {lead:?} ahead");

    // The response, framed as the upstream framed it, differs only in its sealed state.
    assert!(
        last[0].1.starts_with(b"event: message\r\ndata: {"),
        "{:?}",
        last[0].1
    );
    let mut ours = event_json(&last[0].1);
    let mut theirs = event_json(&direct[4].1);
    let token = token_of(&ours);
    ours["result"]["requestState"] = Value::Null;
    let plaintext = theirs["result"]["requestState"].take();
    assert_eq!(plaintext, r#"{"k":"progress_ask","r":1}"#);
    assert_eq!(ours, theirs);

    // The second round streams too, and its token opens.
    let retry = confirmed(progress_ask(2, 300), &token);
    let (_, events) = post_mcp_streaming(&sidecar.mcp_url(), &retry).await;
    let last = event_json(&events.last().expect("events").1);
    assert_eq!(text(&last), "progress_ask done ok=true");
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 1);
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
    assert_eq!(sidecar.metrics().path.sealed_count(), 2);
    // And a tools/list retry with it is verified and unwrapped like any other.
    let mut retry = list.clone();
    retry["params"]["requestState"] = json!(list_token);
    let reply = post_mcp(&sidecar.mcp_url(), &retry).await;
    assert_eq!(reply.json()["result"]["tools"][0]["name"], "LIST-PLAIN");
    assert_eq!(sidecar.metrics().path.verified_count("ok"), 1);
    sidecar.stop().await;
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
            let lines = rest
                .strip_prefix(&format!("event: message{eol}"))
                .and_then(|r| r.strip_suffix(&format!("{eol}{eol}")))
                .unwrap_or_else(|| panic!("{what}: last event reshaped: {rest:?}"));
            // The state is spliced in where it stood: the event keeps its data lines.
            let lines: Vec<&str> = lines.split(eol).collect();
            let upstream_lines = if name == "multi" { 2 } else { 1 };
            assert_eq!(lines.len(), upstream_lines, "{what}: {lines:?}");
            let data: Vec<&str> = lines
                .iter()
                .map(|line| line.strip_prefix("data: ").expect("a data line"))
                .collect();
            let mut sealed: Value = serde_json::from_str(&data.join("\n")).unwrap();
            tokens.push(token(&sealed["result"]));
            sealed["result"]["requestState"] = json!(plaintext());
            assert_eq!(sealed, expected, "{what}");
        }
    }
    assert_eq!(sidecar.metrics().path.sealed_count(), 8);
    // The token is a real one, bound to this call: the retry reaches the upstream with
    // the plaintext back in place.
    let retry = tools_call(8, Some(json!(tokens[0])));
    let reply = post_mcp(&sidecar.mcp_url(), &retry).await.json();
    let got = format!("got {}", plaintext());
    assert_eq!(reply["result"]["content"][0]["text"], got);
    assert_eq!(fake.last().json()["params"]["requestState"], plaintext());
    sidecar.stop().await;
}

/// An answer as an upstream may write it: whitespace, escapes, an exponent.
const SPACED: &str = r#"{ "jsonrpc" : "2.0", "id" : 7, "result" : { "resultType" : "input_\u0072equired", "n" : 1E2,
  "inputRequests" : { "region" : { "method" : "elicitation/create", "params" : { "mode" : "form", "message" : "Which region?",
  "requestedSchema" : { "type" : "object", "properties" : { "region" : { "type" : "string" } } } } } }STATE } }"#;

/// The client gets the upstream's bytes as they were but for the sealed token, spliced in
/// where the state stood (or appended to a round's result that had none): no
/// re-serialisation reshapes what the upstream wrote.
#[tokio::test(flavor = "multi_thread")]
async fn the_answer_keeps_the_upstreams_bytes_but_the_state() {
    let state = r#", "requestState" : "plain\u002dstate""#;
    for (what, upstream) in [
        ("with a state", SPACED.replace("STATE", state)),
        ("without", SPACED.replace("STATE", "")),
    ] {
        let answer = upstream.clone();
        let fake = FakeUpstream::always(move || Reply::json(answer.clone())).await;
        let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
        let reply = post_mcp(&sidecar.mcp_url(), &tools_call(7, None)).await;
        assert_eq!(reply.status, 200, "{what}");
        let got = reply.text();
        let token = token(&reply.json()["result"]);
        let expected = if what == "without" {
            let at = upstream[..upstream.len() - 1].rfind('}').unwrap();
            let appended = format!(r#","requestState":"{token}""#);
            [&upstream[..at], &appended, &upstream[at..]].concat()
        } else {
            upstream.replace(r#""plain\u002dstate""#, &format!(r#""{token}""#))
        };
        assert_eq!(got, expected, "{what}");
        assert_eq!(sidecar.metrics().path.sealed_count(), 1, "{what}");
        sidecar.stop().await;
    }
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
