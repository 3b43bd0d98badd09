//! The upstream of every row: a fast hyper server (one thread, HTTP/1.1 keep-alive) that
//! answers MRTR-shaped bodies without parsing them. A POST whose body names a
//! `requestState` is a retry and gets the final result; any other POST is a first call
//! and gets an `input_required` round with a plaintext state of about 200 bytes. A path
//! ending in `/sse` answers as one SSE event (`text/event-stream`), any other as JSON. A
//! GET opens an SSE stream that sends one comment and then stays open and idle (what a
//! 2025-era client holds), for the open-streams row.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::net::TcpListener;

/// The upstream's plaintext state: about 200 bytes, as a real server's context would be.
pub const STATE: &str = r#"{"k":"provision","name":"web-1","r":1,"tier":"free","owner":"team-a","ctx":"3f1c9a0e7b5d4c2a9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b","t":1764568800}"#;

const COMPLETE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Provisioned web-1 (tier=free) in eu-west-1"}],"isError":false,"resultType":"complete"}}"#;

/// The first call's answer: one elicitation, and the state to send back with its answer.
pub fn input_required() -> String {
    let state = serde_json::to_string(STATE).expect("a string serialises");
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"input_required","inputRequests":{{"region":{{"method":"elicitation/create","params":{{"mode":"form","message":"Which region should be used?","requestedSchema":{{"type":"object","properties":{{"region":{{"type":"string"}}}},"required":["region"]}}}}}}}},"requestState":{state}}}}}"#
    )
}

/// The four answers, built once.
#[derive(Clone)]
struct Answers {
    first_json: Bytes,
    retry_json: Bytes,
    first_sse: Bytes,
    retry_sse: Bytes,
}

fn sse(json: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {json}\n\n"))
}

/// Serve on 127.0.0.1:`port` until killed (the harness runs this in a child process).
pub fn run(port: u16) {
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
