//! The answer to one request at the child: its head waits for the request's first
//! message ([`first_message`]); the answer alone is sent as `application/json` with the
//! status its error calls for, a notification first opens an event stream that ends
//! with the answer ([`Events`]). A caller that goes away before its answer sends the
//! child `notifications/cancelled` for the bridge id ([`RouteClaim`]).

use super::BridgeShared;
use super::admit::QueueSlot;
use super::ids::BridgeId;
use super::metrics::CutOff;
use super::notices::Notices;
use super::route::{self, ChildAnswer, NoAnswer, Receivers};
use super::session::InUse;
use crate::body::{BoxError, ProxyBody, full};
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// Wait for the request's first message and answer with it: the answer as JSON, or an
/// event stream opened by a notification.
pub(super) async fn first_message(
    receivers: Receivers,
    mut ticket: RouteClaim,
    caller_id: Value,
    streams: bool,
) -> Response<ProxyBody> {
    let Receivers {
        notices,
        mut answer,
    } = receivers;
    // Only a caller that takes events is ever handed a notification.
    if streams {
        tokio::select! {
            biased;
            Some(first) = notices.next() => {
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
    ticket: &mut RouteClaim,
    result: Result<ChildAnswer, oneshot::error::RecvError>,
    caller_id: Value,
) -> Response<ProxyBody> {
    ticket.settled = true;
    match result.unwrap_or(Err(NoAnswer::Exited)) {
        Ok(reply) => {
            let mut response = Response::new(reply.held.hold_full(reply.message));
            // The child's error is the whole answer: its status, as the SDKs' HTTP
            // transports answer it (a 404 for a method the child does not serve).
            *response.status_mut() = reply.status;
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

fn fault_message(fault: NoAnswer) -> &'static str {
    match fault {
        NoAnswer::Exited => "the upstream process exited before answering",
        NoAnswer::Overlong => "the upstream process's answer was over limits.max_event_bytes",
        NoAnswer::Unreadable => "the upstream process's answer could not be read",
        NoAnswer::CutOff(CutOff::SlowReader) => {
            "the caller read its notifications too slowly and was cut off"
        }
        NoAnswer::CutOff(CutOff::OverBudget) => {
            "the sidecar's memory budget is spent: the caller was cut off"
        }
    }
}

/// An event stream of one request: its notifications as they come, then its answer.
struct Events {
    first: Option<Bytes>,
    notices: Option<Arc<Notices>>,
    answer: Option<oneshot::Receiver<ChildAnswer>>,
    /// The answer, once it came, held back until the notifications before it are out.
    ready: Option<ChildAnswer>,
    caller_id: Value,
    ticket: RouteClaim,
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
            this.ready = Some(result.unwrap_or(Err(NoAnswer::Exited)));
        }
        if let Some(notices) = &mut this.notices {
            // Notifications the child wrote before its answer go first.
            let next = if this.ready.is_some() {
                notices.try_next()
            } else {
                match notices.poll_next(cx) {
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
                let frame = match result {
                    Ok(reply) => event(&reply.message),
                    Err(fault) => event(&error_message(
                        this.caller_id.clone(),
                        -32603,
                        fault_message(fault),
                    )),
                };
                Poll::Ready(Some(Ok(frame)))
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
pub(super) struct RouteClaim {
    shared: Arc<BridgeShared>,
    id: BridgeId,
    settled: bool,
    /// One of its caller's share, held until the caller has its answer or left.
    _slot: QueueSlot,
    /// Its session is in use until then too.
    _in_use: Option<InUse>,
}

impl RouteClaim {
    /// The claim of `slot`'s caller on the open route `id` (its session in use meanwhile).
    pub(super) fn new(
        shared: Arc<BridgeShared>,
        id: BridgeId,
        slot: QueueSlot,
        in_use: Option<InUse>,
    ) -> Self {
        Self {
            shared,
            id,
            settled: false,
            _slot: slot,
            _in_use: in_use,
        }
    }

    /// The request never reached the queue: close the route, tell nobody.
    pub(super) fn withdraw(&mut self) {
        self.settled = true;
        self.shared.routes().close(&self.id);
    }
}

impl Drop for RouteClaim {
    fn drop(&mut self) {
        if self.settled || !self.shared.routes().close(&self.id) {
            return;
        }
        let cancel = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": "the client went away"},
        });
        if self.shared.enqueue_own(route::line(&cancel)).is_ok() {
            self.shared.metrics.cancelled();
        }
    }
}

pub(super) fn status(status: StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

pub(super) fn error_message(id: Value, code: i64, message: &str) -> Bytes {
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    Bytes::from(serde_json::to_vec(&error).expect("JSON serialises"))
}

pub(super) fn error(
    status: StatusCode,
    id: Value,
    code: i64,
    message: &str,
) -> Response<ProxyBody> {
    let mut response = Response::new(full(error_message(id, code, message)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
