//! 2025-era sessions over stdio: each `initialize` gets a child of its own, the session
//! id names it only for the caller that opened it, sessions are bounded in all and per
//! caller, an idle session's child is stopped, and so is every child when the sidecar
//! stops. The child is our conformance server on the Python SDK
//! (`tests/py/conformance_server.py --stdio`), the clients speak 2025-11-25 as the SDKs do.

use crate::cases::stdio_upstream::{eventually, stdio_config, up};
use crate::support::http::{event_json, send, split_events};
use crate::support::python::{interpreter, repo_path};
use crate::support::sidecar::Sidecar;
use bytes::{Bytes, BytesMut};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_state_guard::facade::config::{Config, PrincipalSource};
use mcp_state_guard::facade::stdio::{BridgeRefusal, SessionEnd};
use serde_json::{Value, json};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

/// A stdio sidecar whose callers are named by `x-user`, running the conformance server;
/// its children carry `marker` in their environment, so the test can count them.
fn sessions_config(marker: &str) -> Config {
    let argv = vec![
        interpreter().display().to_string(),
        repo_path("tests/py/conformance_server.py")
            .display()
            .to_string(),
        "--stdio".into(),
    ];
    let mut config = stdio_config(argv);
    config.principal.source = PrincipalSource::Header;
    config.principal.header = "x-user".into();
    config
        .upstream_command
        .env
        .insert("STATE_GUARD_SESSION_TEST".into(), marker.into());
    config
}

/// Processes running now with `marker` in their environment (this test's children).
fn children(marker: &str) -> usize {
    let wanted = format!("STATE_GUARD_SESSION_TEST={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|entry| std::fs::read(entry.path().join("environ")).ok())
        .filter(|environ| {
            environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_bytes())
        })
        .count()
}

fn headers(user: &str, session: Option<&str>) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (
            "accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ),
        ("x-user".to_owned(), user.to_owned()),
    ];
    if let Some(session) = session {
        headers.push(("mcp-session-id".into(), session.into()));
        headers.push(("mcp-protocol-version".into(), "2025-11-25".into()));
    }
    headers
}

async fn post(
    url: &str,
    user: &str,
    session: Option<&str>,
    message: &Value,
) -> crate::support::http::Reply {
    let body = serde_json::to_vec(message).unwrap();
    send(Method::POST, url, &headers(user, session), body, TIMEOUT).await
}

/// `initialize` (declaring sampling) and `notifications/initialized`: the session's id.
async fn open_session(url: &str, user: &str) -> Result<String, crate::support::http::Reply> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "session-test", "version": "0"}}});
    let reply = post(url, user, None, &init).await;
    let Some(session) = reply.headers.get("mcp-session-id") else {
        return Err(reply);
    };
    assert_eq!(reply.message()["result"]["protocolVersion"], "2025-11-25");
    let session = session.to_str().unwrap().to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(url, user, Some(&session), &initialized).await.status,
        202
    );
    Ok(session)
}

/// Call `test_sampling` with `prompt` in `session`: the sampling request must arrive on
/// the call's stream asking exactly `prompt`; it is answered with `answer`, and the
/// tool's result must carry it.
async fn sample(url: &str, user: &str, session: &str, prompt: &str, answer: &str) -> Value {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "test_sampling", "arguments": {"prompt": prompt}}});
    let mut request = Request::post(url);
    for (name, value) in headers(user, Some(session)) {
        request = request.header(name, value);
    }
    let request = request
        .body(Full::new(serde_json::to_vec(&call).unwrap().into()))
        .unwrap();
    let exchange = async {
        let response = client.request(request).await.expect("answered");
        assert_eq!(response.status(), 200);
        let (mut body, mut buffer) = (response.into_body(), BytesMut::new());
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.expect("the stream is read").into_data() else {
                continue;
            };
            buffer.extend_from_slice(&data);
            for event in split_events(&mut buffer) {
                let message = event_json(&event);
                if message["method"] == "sampling/createMessage" {
                    let asked = &message["params"]["messages"][0]["content"]["text"];
                    assert_eq!(asked, prompt, "only its own session's request");
                    let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                        "role": "assistant", "model": "test",
                        "content": {"type": "text", "text": answer}}});
                    assert_eq!(post(url, user, Some(session), &reply).await.status, 202);
                } else if message.get("id") == Some(&json!(1)) {
                    return message;
                }
            }
        }
        panic!("the call's stream ended without its answer");
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .expect("the call is answered in time")
}

/// 20 sessions of two callers at once: each session's server request reaches only its
/// client and its answer only its call; a session id is nothing to the other caller.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_sessions_under_load_each_get_only_their_own() {
    let marker = format!("{:x}", rand::random::<u64>());
    let mut config = sessions_config(&marker);
    config.upstream_command.max_sessions = 20;
    config.upstream_command.max_sessions_per_principal = Some(10);
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let users = |i: usize| if i.is_multiple_of(2) { "alice" } else { "bob" };
    let opened = (0..20).map(|i| {
        let url = url.clone();
        async move { open_session(&url, users(i)).await.expect("a session") }
    });
    let sessions = tokio_join_all(opened).await;
    assert_eq!(sidecar.metrics().stdio.sessions_now(), 20);
    assert_eq!(
        children(&marker),
        21,
        "one child per session, and the shared one"
    );
    let calls = sessions.iter().cloned().enumerate().map(|(i, session)| {
        let url = url.clone();
        async move {
            let (prompt, answer) = (format!("prompt {i}"), format!("answer {i}"));
            let answer = sample(&url, users(i), &session, &prompt, &answer).await;
            assert_eq!(
                answer["result"]["content"][0]["text"],
                format!("LLM response: answer {i}")
            );
        }
    });
    tokio_join_all(calls).await;
    // Alice's session is not found for bob, and stays alice's.
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let stolen = post(&url, "bob", Some(&sessions[0]), &ping).await;
    assert_eq!(stolen.status, 404);
    assert_eq!(stolen.json()["error"]["code"], -32001);
    let stdio = sidecar.metrics().stdio.clone();
    assert_eq!(stdio.refused_count(BridgeRefusal::UnknownSession), 1);
    assert_eq!(
        post(&url, "alice", Some(&sessions[0]), &ping).await.status,
        200
    );
    sidecar.stop().await;
    eventually("every child to be gone", || children(&marker) == 0).await;
}

/// The session cap (503) and one caller's share (429) refuse with `Retry-After`; an idle
/// session ends and its child is stopped; `DELETE` ends one at once; stopping the
/// sidecar stops every child.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_sessions_are_bounded_and_their_children_stopped() {
    let marker = format!("{:x}", rand::random::<u64>());
    let mut config = sessions_config(&marker);
    config.upstream_command.max_sessions = 3;
    config.upstream_command.max_sessions_per_principal = Some(2);
    config.upstream_command.session_idle_ms = 2000;
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let stdio = sidecar.metrics().stdio.clone();
    // Alice holds each of her sessions' GET stream open: busy, not idle, however long
    // the rest takes.
    let first = open_session(&url, "alice").await.unwrap();
    let first_stream = stream(&url, "alice", &first).await;
    let second = open_session(&url, "alice").await.unwrap();
    let second_stream = stream(&url, "alice", &second).await;
    let over_share = open_session(&url, "alice").await.unwrap_err();
    assert_eq!(over_share.status, 429);
    assert_eq!(over_share.headers["retry-after"], "1");
    assert_eq!(over_share.json()["id"], 0);
    let bobs = open_session(&url, "bob").await.unwrap();
    let over_cap = open_session(&url, "carol").await.unwrap_err();
    assert_eq!(over_cap.status, 503);
    assert_eq!(over_cap.headers["retry-after"], "1");
    assert_eq!(stdio.refused_count(BridgeRefusal::SessionShare), 1);
    assert_eq!(stdio.refused_count(BridgeRefusal::SessionLimit), 1);
    assert_eq!(children(&marker), 4);
    // One GET stream a session.
    let again = send(
        Method::GET,
        &url,
        &headers("alice", Some(&first)),
        Vec::new(),
        TIMEOUT,
    )
    .await;
    assert_eq!(again.status, 409);

    // DELETE ends bob's at once; then its id names nothing.
    let delete = send(
        Method::DELETE,
        &url,
        &headers("bob", Some(&bobs)),
        Vec::new(),
        TIMEOUT,
    )
    .await;
    assert_eq!(delete.status, 200);
    assert_eq!(stdio.sessions_ended_count(SessionEnd::Deleted), 1);
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(post(&url, "bob", Some(&bobs), &ping).await.status, 404);
    assert_eq!(stdio.sessions_ended_count(SessionEnd::Idle), 0);
    drop((first_stream, second_stream));

    // Alice's two, left alone, end idle, their children with them.
    eventually("the idle sessions to end", || {
        stdio.sessions_ended_count(SessionEnd::Idle) == 2
    })
    .await;
    eventually("their children to be gone", || children(&marker) == 1).await;
    assert_eq!(post(&url, "alice", Some(&first), &ping).await.status, 404);
    assert_eq!(stdio.sessions_now(), 0);

    // Stopping the sidecar stops a session's child too.
    open_session(&url, "carol").await.unwrap();
    assert_eq!(children(&marker), 2);
    sidecar.stop().await;
    assert_eq!(stdio.sessions_ended_count(SessionEnd::Shutdown), 1);
    eventually("every child to be gone", || children(&marker) == 0).await;
}

/// A session's GET stream, open (its head came).
async fn stream(url: &str, user: &str, session: &str) -> http::Response<hyper::body::Incoming> {
    let response =
        crate::support::http::open(Method::GET, url, &headers(user, Some(session)), TIMEOUT).await;
    assert_eq!(response.status(), 200);
    response
}

/// Await every future, concurrently.
async fn tokio_join_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("the task completes"));
    }
    out
}
