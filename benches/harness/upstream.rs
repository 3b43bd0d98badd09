//! The upstream of every row: a fast hyper server (one thread, HTTP/1.1 keep-alive) that
//! answers MRTR-shaped bodies without parsing them. A POST whose body names a
//! `requestState` is a retry and gets the final result; any other POST is a first call
//! and gets an `input_required` round with a plaintext state of about 200 bytes. A path
//! ending in `/sse` answers as one SSE event (`text/event-stream`), any other as JSON. A
//! GET opens an SSE stream that sends one comment and then stays open and idle (what a
//! 2025-era client holds), for the open-streams row.
//!
//! The soak adds three tools, told apart by the body's first `"name":"` (`params.name`
//! as the clients and the sidecar write it) and then parsed: `start_import` issues an
//! import id (`imp-N`) at `/structuredContent/importId`, `append_rows` echoes the import
//! id it received (the raw one, when a sidecar unwrapped a sealed handle), and `record`
//! answers how many times its `params.idempotencyKey` was applied, so that a write
//! applied twice shows in the answer.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::net::TcpListener;

/// The upstream's plaintext state: about 200 bytes, as a real server's context would be.
pub const STATE: &str = r#"{"k":"provision","name":"web-1","r":1,"tier":"free","owner":"team-a","ctx":"3f1c9a0e7b5d4c2a9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b","t":1764568800}"#;

const COMPLETE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Provisioned web-1 (tier=free) in eu-west-1"}],"isError":false,"resultType":"complete"}}"#;

/// The retry's answer (id 1).
pub fn complete() -> &'static str {
    COMPLETE
}

/// The first call's answer: one elicitation, and the state to send back with its answer.
pub fn input_required() -> String {
    let state = serde_json::to_string(STATE).expect("a string serialises");
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"input_required","inputRequests":{{"region":{{"method":"elicitation/create","params":{{"mode":"form","message":"Which region should be used?","requestedSchema":{{"type":"object","properties":{{"region":{{"type":"string"}}}},"required":["region"]}}}}}}}},"requestState":{state}}}}}"#
    )
}

/// The four answers, built once, and the soak tools' state.
#[derive(Clone)]
struct Answers {
    first_json: Bytes,
    retry_json: Bytes,
    first_sse: Bytes,
    retry_sse: Bytes,
    imports: Arc<AtomicU64>,
    /// Applications per idempotency key (`record`).
    applied: Arc<Mutex<HashMap<String, u64>>>,
}

fn sse(json: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {json}\n\n"))
}

/// When `args` (the process's, after its name) say this process is the upstream
/// (`--role-upstream PORT`, as [`crate::procs::Children::spawn_upstream`] starts it),
/// serve until killed; `false` otherwise.
pub fn run_if_asked(args: &[String]) -> bool {
    let Some(i) = args.iter().position(|a| a == "--role-upstream") else {
        return false;
    };
    let port = args
        .get(i + 1)
        .and_then(|p| p.parse().ok())
        .expect("a port");
    run(port);
    true
}

/// Serve on 127.0.0.1:`port` until killed (the harness runs this in a child process).
fn run(port: u16) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the upstream port is free");
        serve(listener).await;
    });
}

/// Serve on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) {
    let first = input_required();
    let answers = Answers {
        first_json: Bytes::from(first.clone()),
        retry_json: Bytes::from_static(COMPLETE.as_bytes()),
        first_sse: sse(&first),
        retry_sse: sse(COMPLETE),
        imports: Arc::default(),
        applied: Arc::default(),
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let answers = answers.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(answers.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

type Body = Either<Full<Bytes>, Idle>;

async fn answer(
    answers: Answers,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if request.method() == Method::GET {
        let mut response = Response::new(Either::Right(Idle::default()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        return Ok(response);
    }
    let sse = request.uri().path().ends_with("/sse");
    let body = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if let Some(answer) = soak_tool(&answers, &body) {
        let mut response = Response::new(Either::Left(Full::new(answer)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Ok(response);
    }
    let key = b"\"requestState\"";
    let retry = body.windows(key.len()).any(|w| w == key);
    let (bytes, content_type) = match (retry, sse) {
        (false, false) => (answers.first_json, "application/json"),
        (true, false) => (answers.retry_json, "application/json"),
        (false, true) => (answers.first_sse, "text/event-stream"),
        (true, true) => (answers.retry_sse, "text/event-stream"),
    };
    let mut response = Response::new(Either::Left(Full::new(bytes)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

/// The answer of a soak tool (see the module's doc), or `None` for any other call.
fn soak_tool(answers: &Answers, body: &[u8]) -> Option<Bytes> {
    const NAME: &[u8] = b"\"name\":\"";
    let at = body.windows(NAME.len()).position(|w| w == NAME)? + NAME.len();
    let tool = &body[at..];
    let soak = [&b"start_import\""[..], b"append_rows\"", b"record\""];
    if !soak.iter().any(|t| tool.starts_with(t)) {
        return None;
    }
    let message: Value = serde_json::from_slice(body).ok()?;
    let params = &message["params"];
    let structured = match params["name"].as_str()? {
        "start_import" => {
            let n = answers.imports.fetch_add(1, Ordering::Relaxed) + 1;
            json!({"importId": format!("imp-{n}")})
        }
        "append_rows" => json!({"importId": params["arguments"]["importId"]}),
        _ => {
            let key = params["idempotencyKey"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut applied = answers.applied.lock().expect("not poisoned");
            let count = applied.entry(key).or_default();
            *count += 1;
            json!({"applied": *count})
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false,
        "resultType": "complete",
    }});
    Some(Bytes::from(answer.to_string()))
}

/// An idle stream's body: one SSE comment, then nothing, ever.
#[derive(Default)]
struct Idle {
    sent: bool,
}

impl http_body::Body for Idle {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if std::mem::replace(&mut self.sent, true) {
            Poll::Pending
        } else {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b": open\n\n")))))
        }
    }
}
