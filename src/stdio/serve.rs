//! The in-process Streamable HTTP server in front of the child: the proxy's pooled client
//! reaches it over an in-memory connection ([`super::Connector`]), so everything the
//! proxy does to a request and its answer happens exactly as for an HTTP upstream.
//!
//! One POSTed JSON-RPC request becomes one line on the child's stdin under a bridge id
//! ([`super::route`]); the response head waits for the first message of that request
//! (so `timeouts.response_head_ms` bounds a child that never answers): the answer alone
//! is sent as `application/json`; a notification first, to a caller that accepts
//! `text/event-stream`, opens an event stream that ends with the answer, as the SDK
//! servers do. A caller that goes away before its answer sends the child
//! `notifications/cancelled` for the bridge id ([`Ticket`]).

use super::Shared;
use super::route::{self, Answer, Fault, Receivers};
use crate::body::{BoxError, ProxyBody, full};
use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, oneshot};

/// Seconds a caller refused for a full queue is asked to wait.
const RETRY_AFTER_SECONDS: &str = "1";

/// Serve one request from the proxy.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    request: http::Request<Incoming>,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    Ok(respond(shared, request).await)
}

async fn respond(shared: Arc<Shared>, request: http::Request<Incoming>) -> Response<ProxyBody> {
    if request.method() != Method::POST {
        // A 2026-07-28 server has no GET stream and no session to DELETE.
        let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    let streams = accepts_events(request.headers());
    let body = match Limited::new(request.into_body(), shared.max_body)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                "unreadable body",
            );
        }
    };
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, Value::Null, -32700, "parse error");
    };
    let method = message.get("method").and_then(Value::as_str);
    let Some(method) = method.filter(|_| message.contains_key("id")) else {
        // A notification, or a response to a server-to-client request: at 2026-07-28
        // the only client notification is `notifications/cancelled`, and an HTTP caller's
        // own id cannot name a request on the shared child (its cancellation is the
        // request going away). Nothing waits for a response. Accepted, not forwarded.
        return status(StatusCode::ACCEPTED);
    };
    if method == "initialize" {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        return error(
            StatusCode::NOT_FOUND,
            id,
            -32601,
            "initialize is not served: this stdio server is bridged at protocol 2026-07-28 \
             (sessionless); retry without the handshake",
        );
    }
    if !shared.child_ready().await {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            -32603,
            "upstream process stopped",
        );
    }
    let id = shared.next_id();
    let (caller_id, token) = route::rewrite(&mut message, id);
    let line = route::line(&Value::Object(message));
    let receivers = shared.routes().open(id, caller_id.clone(), token, streams);
    let ticket = Ticket {
        shared: shared.clone(),
        id,
        settled: false,
    };
    if let Err(refused) = shared.enqueue(Some(id), line) {
        let mut ticket = ticket;
        ticket.withdraw();
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            caller_id,
            -32000,
            refused.message(),
        );
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
        return response;
    }
    first_message(receivers, ticket, caller_id, streams).await
}

/// Wait for the request's first message and answer with it: the answer as JSON, or an
/// event stream opened by a notification.
async fn first_message(
    receivers: Receivers,
    mut ticket: Ticket,
    caller_id: Value,
    streams: bool,
) -> Response<ProxyBody> {
    let Receivers {
        mut notices,
        mut answer,
    } = receivers;
    // Only a caller that takes events is ever handed a notification.
    if streams {
        tokio::select! {
            biased;
            Some(first) = notices.recv() => {
                let events = Events {
                    first: Some(first),
                    notices: Some(notices),
                    answer: Some(answer),
                    ready: None,
                    caller_id,
                    ticket,
                };
                let mut response = Response::new(events.boxed());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                response
                    .headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                return response;
            }
            result = &mut answer => return answered(&mut ticket, result, caller_id),
        }
    }
    let result = answer.await;
    answered(&mut ticket, result, caller_id)
}

/// The whole answer as `application/json`.
fn answered(
    ticket: &mut Ticket,
    result: Result<Answer, oneshot::error::RecvError>,
    caller_id: Value,
) -> Response<ProxyBody> {
    ticket.settled = true;
    match result.unwrap_or(Err(Fault::Exited)) {
        Ok(message) => {
            let mut response = Response::new(full(message));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(fault) => error(
            StatusCode::BAD_GATEWAY,
            caller_id,
            -32603,
            fault_message(fault),
        ),
    }
}

fn fault_message(fault: Fault) -> &'static str {
    match fault {
        Fault::Exited => "the upstream process exited before answering",
        Fault::Overlong => "the upstream process's answer was over limits.max_event_bytes",
    }
}

/// An event stream of one request: its notifications as they come, then its answer.
struct Events {
    first: Option<Bytes>,
    notices: Option<mpsc::Receiver<Bytes>>,
    answer: Option<oneshot::Receiver<Answer>>,
    /// The answer, once it came, held back until the notifications before it are out.
    ready: Option<Answer>,
    caller_id: Value,
    ticket: Ticket,
}

impl http_body::Body for Events {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(event(&first))));
        }
        if this.ready.is_none()
            && let Some(answer) = &mut this.answer
            && let Poll::Ready(result) = Pin::new(answer).poll(cx)
        {
            this.answer = None;
            this.ready = Some(result.unwrap_or(Err(Fault::Exited)));
        }
        if let Some(notices) = &mut this.notices {
            // Notifications the child wrote before its answer go first.
            let next = if this.ready.is_some() {
                notices.try_recv().ok()
            } else {
                match notices.poll_recv(cx) {
                    Poll::Ready(next) => next,
                    Poll::Pending => return Poll::Pending,
                }
            };
            match next {
                Some(notice) => return Poll::Ready(Some(Ok(event(&notice)))),
                None if this.ready.is_none() => {
                    // The route is gone: only its answer (or its failure) is left.
                    this.notices = None;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                None => this.notices = None,
            }
        }
        match this.ready.take() {
            Some(result) => {
                this.ticket.settled = true;
                let message = result.unwrap_or_else(|fault| {
                    error_message(this.caller_id.clone(), -32603, fault_message(fault))
                });
                Poll::Ready(Some(Ok(event(&message))))
            }
            None if this.answer.is_none() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

/// One event, framed as the Python SDK frames them (`\r\n`).
fn event(message: &[u8]) -> Frame<Bytes> {
    let mut out = Vec::with_capacity(message.len() + 26);
    out.extend_from_slice(b"event: message\r\ndata: ");
    out.extend_from_slice(message);
    out.extend_from_slice(b"\r\n\r\n");
    Frame::data(Bytes::from(out))
}

/// A caller's claim on its route: when it goes away before its answer, the route is
/// closed and the child told to stop working on it.
struct Ticket {
    shared: Arc<Shared>,
    id: u64,
    settled: bool,
}

impl Ticket {
    /// The request never reached the queue: close the route, tell nobody.
    fn withdraw(&mut self) {
        self.settled = true;
        self.shared.routes().close(self.id);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.settled || !self.shared.routes().close(self.id) {
            return;
        }
        let cancel = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": "the client went away"},
        });
        if self.shared.enqueue(None, route::line(&cancel)).is_ok() {
            self.shared.metrics.cancelled();
        }
    }
}

/// Whether `Accept` takes `text/event-stream` (or `text/*`, `*/*`).
fn accepts_events(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|range| range.split(';').next().unwrap_or("").trim())
        .any(|range| {
            range.eq_ignore_ascii_case("text/event-stream")
                || range.eq_ignore_ascii_case("text/*")
                || range == "*/*"
        })
}

fn status(status: StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

fn error_message(id: Value, code: i64, message: &str) -> Bytes {
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    Bytes::from(serde_json::to_vec(&error).expect("JSON serialises"))
}

fn error(status: StatusCode, id: Value, code: i64, message: &str) -> Response<ProxyBody> {
    let mut response = Response::new(full(error_message(id, code, message)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
