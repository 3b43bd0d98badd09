//! The in-process Streamable HTTP server in front of the children: the proxy's pooled
//! client reaches it over an in-memory connection ([`super::Connector`]), so everything
//! the proxy does to a request and its answer happens exactly as for an HTTP upstream.
//!
//! Only requests the proxy's gated route marked are served ([`super::admit`]). A request
//! naming a session goes to that session's child ([`super::session`]: its POSTs, its GET
//! stream, its DELETE); a 2025 `initialize` opens one; anything else goes to the shared
//! child. One POSTed JSON-RPC request, read within the memory budget, becomes one line
//! on its child's stdin under a bridge id spliced into its bytes ([`super::ids`],
//! [`super::route`]), reserved until the child's stdin took it (a request that cannot
//! be reserved, or whose caller holds its share, is refused at once); its answer is
//! [`super::answer`]'s.

use super::BridgeShared;
use super::admit::{self, Place, QueueSlot};
use super::answer::{RouteClaim, error, first_message, status};
use super::ids::{self, NotARequest};
use super::metrics::{BridgeRefusal, Busy};
use super::outbox::StreamOpen;
use super::session::{InUse, SESSION_HEADER, Session, Sessions};
use crate::body::ProxyBody;
use crate::budget::Reservation;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;

/// Seconds a caller refused for a full queue, a spent budget or its share is asked to
/// wait.
const RETRY_AFTER_SECONDS: &str = "1";
/// How much of a body's start is kept to name its caller's id in a refusal.
const ID_PREFIX: usize = 256;

/// Serve one request from the proxy.
pub(crate) async fn serve(
    shared: Arc<BridgeShared>,
    sessions: Arc<Sessions>,
    request: http::Request<Incoming>,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    Ok(respond(&shared, &sessions, request).await)
}

async fn respond(
    shared: &Arc<BridgeShared>,
    sessions: &Arc<Sessions>,
    request: http::Request<Incoming>,
) -> Response<ProxyBody> {
    let Some(owner) = admit::gated_owner(shared, request.headers()) else {
        // Not through the proxy's gated route (a passthrough path, say): the child is
        // never a raw channel.
        shared.metrics.refused(BridgeRefusal::Ungated);
        tracing::warn!(
            "a request reached the stdio bridge without the gated route's mark; refused"
        );
        return error(
            StatusCode::FORBIDDEN,
            Value::Null,
            -32600,
            "the upstream process is reached only through the sidecar's gated route",
        );
    };
    if let Some(named) = request.headers().get(SESSION_HEADER) {
        let found = named.to_str().ok().and_then(|id| sessions.find(id, &owner));
        let Some(session) = found else {
            // Ended, never issued, or another caller's: the same answer for each.
            shared.metrics.refused(BridgeRefusal::UnknownSession);
            return error(
                StatusCode::NOT_FOUND,
                Value::Null,
                -32001,
                "Session not found",
            );
        };
        return in_session(&session, sessions, owner, request).await;
    }
    if request.method() != Method::POST {
        // A 2026-07-28 server has no GET stream and no session to DELETE; a 2025
        // client names its session in both.
        let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    post(shared, Entry::Sessionless(sessions), owner, request).await
}

/// Where a POST goes: to the shared child (an `initialize` opens a session), or to a
/// session's own child.
#[derive(Clone, Copy)]
enum Entry<'a> {
    Sessionless(&'a Arc<Sessions>),
    Session(&'a Arc<Session>),
}

/// A request naming its session: a POST goes to the session's child, a GET opens its
/// stream of what the child sends unasked, a DELETE ends it.
async fn in_session(
    session: &Arc<Session>,
    sessions: &Arc<Sessions>,
    owner: String,
    request: http::Request<Incoming>,
) -> Response<ProxyBody> {
    match *request.method() {
        Method::POST => post(session.bridge(), Entry::Session(session), owner, request).await,
        Method::GET => open_stream(session, request.headers()),
        Method::DELETE => {
            sessions.end(&session.id, &owner).await;
            status(StatusCode::OK)
        }
        _ => {
            let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            response
        }
    }
}

/// The event a reconnecting client saw last: a number this bridge gave an event. Anything
/// else names no event of ours and reads as none (the client gets what it has not had).
fn last_event_id(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// A session's GET stream (one at a time, 409 for another), resumed after its
/// `Last-Event-ID` when it names one.
fn open_stream(session: &Arc<Session>, headers: &http::HeaderMap) -> Response<ProxyBody> {
    if !accepts_events(headers) {
        return status(StatusCode::NOT_ACCEPTABLE);
    }
    match session.outbox.open_stream(last_event_id(headers)) {
        Ok(stream) => {
            let mut response = Response::new(stream.boxed());
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Err(StreamOpen) => error(
            StatusCode::CONFLICT,
            Value::Null,
            -32000,
            "Conflict: only one SSE stream is allowed per session",
        ),
    }
}

/// One POSTed message: a request is answered by its child (an `initialize` without a
/// session first opens one, whose id its answer carries); a notification or a response
/// to the child's request goes to a session's child, and to the shared child nowhere.
async fn post(
    shared: &Arc<BridgeShared>,
    entry: Entry<'_>,
    owner: String,
    request: http::Request<Incoming>,
) -> Response<ProxyBody> {
    let streams = accepts_events(request.headers());
    let modern = names_a_modern_version(request.headers());
    let (body, parsed, held) = match read(shared, request.into_body()).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let Some(parsed) = parsed else {
        return match entry {
            Entry::Session(_) => pass_on(shared, &body, held),
            // At 2026-07-28 the only client notification is `notifications/cancelled`,
            // and an HTTP caller's own id cannot name a request on the shared child (its
            // cancellation is the request going away). Accepted, not forwarded.
            Entry::Sessionless(_) => status(StatusCode::ACCEPTED),
        };
    };
    let session = match entry {
        // A 2026-07-28 client's `initialize` names a removed method: answered as the
        // transport answers it (the child's era is fixed; it would call the version
        // unsupported).
        Entry::Sessionless(_) if parsed.initialize && modern => {
            return error(
                StatusCode::NOT_FOUND,
                parsed.caller_id,
                -32601,
                "Method not found: initialize (removed at 2026-07-28; send requests without it)",
            );
        }
        Entry::Sessionless(sessions) if parsed.initialize => match sessions.open(&owner) {
            Ok(session) => Some(session),
            Err(reason) => return refused(shared, reason, parsed.caller_id),
        },
        Entry::Session(session) => Some(session.clone()),
        Entry::Sessionless(_) => None,
    };
    let Some(session) = session else {
        return request_child(shared, owner, body, parsed, held, streams, None).await;
    };
    let opened = matches!(entry, Entry::Sessionless(_));
    let in_use = session.in_use();
    let mut response = request_child(
        session.bridge(),
        owner,
        body,
        parsed,
        held,
        streams,
        Some(in_use),
    )
    .await;
    if opened {
        // The session's id goes with the answer to its `initialize`.
        response.headers_mut().insert(
            SESSION_HEADER,
            HeaderValue::from_str(&session.id).expect("a session id is hex"),
        );
    }
    response
}

/// A notification or a response for a session's child, as the client wrote it.
fn pass_on(shared: &Arc<BridgeShared>, body: &[u8], mut held: Reservation) -> Response<ProxyBody> {
    let mut line = Vec::with_capacity(body.len() + 1);
    line.extend_from_slice(body);
    line.push(b'\n');
    if held.resize_to(line.len()).is_err() {
        return refused(shared, Busy::OverBudget, Value::Null);
    }
    match shared.enqueue(Bytes::from(line), held) {
        Ok(()) => status(StatusCode::ACCEPTED),
        Err(refused) => unavailable(Value::Null, refused.message()),
    }
}

/// A request for `shared`'s child, under a fresh bridge id: its answer, or the event
/// stream its notifications open. `in_use`: the session it belongs to is busy until the
/// caller has its answer or left.
async fn request_child(
    shared: &Arc<BridgeShared>,
    owner: String,
    body: Bytes,
    parsed: ids::Parsed,
    mut held: Reservation,
    streams: bool,
    in_use: Option<InUse>,
) -> Response<ProxyBody> {
    let caller_id = parsed.caller_id.clone();
    let Some(slot) = QueueSlot::take(shared, owner) else {
        return refused(shared, Busy::PrincipalShare, caller_id);
    };
    // The body and its line are both held for a moment: reserved for that peak, then for
    // the line alone until the child's stdin took it.
    if held.grow(parsed.line_size(body.len())).is_err() {
        return refused(shared, Busy::OverBudget, caller_id);
    }
    let id = ids::fresh();
    let line = parsed.line(&body, &id);
    drop(body);
    let _ = held.resize_to(line.len());
    let place = match Place::take(shared) {
        Ok(place) => place,
        Err(full) => return unavailable(caller_id, full.message()),
    };
    if let Err(response) = wait_for_child(shared, &caller_id).await {
        return response;
    }
    let receivers = shared
        .routes()
        .open(id.clone(), caller_id.clone(), parsed.token, streams);
    let mut ticket = RouteClaim::new(shared.clone(), id.clone(), slot, in_use);
    if let Err(refused) = place.send(Some(id), line, held) {
        ticket.withdraw();
        return unavailable(caller_id, refused.message());
    }
    first_message(receivers, ticket, caller_id, streams).await
}

/// Read a message's body within the budget, and for a request its id and progress
/// token (`None`: a notification or a response); or the answer when it cannot be read.
async fn read(
    shared: &BridgeShared,
    body: Incoming,
) -> Result<(Bytes, Option<ids::Parsed>, Reservation), Response<ProxyBody>> {
    let mut held = shared.budget.reservation();
    let body = match collect(body, shared.max_body, &mut held).await {
        Ok(body) => body,
        Err(Unread::OverBudget(prefix)) => {
            return Err(refused(
                shared,
                Busy::OverBudget,
                ids::caller_id_in(&prefix),
            ));
        }
        Err(Unread::Other) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                "unreadable body",
            ));
        }
    };
    match ids::parse(&body, shared.max_values) {
        Ok(parsed) => Ok((body, Some(parsed), held)),
        // A notification, or a response to a server-to-client request: nothing waits
        // for an answer.
        Err(NotARequest::NoAnswer) => Ok((body, None, held)),
        Err(NotARequest::Unreadable) => Err(error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32700,
            "parse error",
        )),
    }
}

/// Wait until the child is up (the caller holds its place in the queue meanwhile).
async fn wait_for_child(
    shared: &BridgeShared,
    caller_id: &Value,
) -> Result<(), Response<ProxyBody>> {
    if shared.is_up() || shared.child_ready().await {
        return Ok(());
    }
    Err(error(
        StatusCode::SERVICE_UNAVAILABLE,
        caller_id.clone(),
        -32603,
        "upstream process stopped",
    ))
}

/// Why a body was not read whole.
enum Unread {
    /// The budget is spent: the first bytes, to name the caller's id.
    OverBudget(Bytes),
    /// Over `limits.max_body_bytes`, or the body failed.
    Other,
}

/// Read a whole body of at most `limit` bytes, each byte held in `held` before it is
/// buffered.
async fn collect(
    mut body: Incoming,
    limit: usize,
    held: &mut Reservation,
) -> Result<Bytes, Unread> {
    let mut buffer = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| Unread::Other)?.into_data() else {
            continue;
        };
        let total = buffer.len() + data.len();
        if total > limit {
            return Err(Unread::Other);
        }
        if held.grow_to(total).is_err() {
            let start = if buffer.is_empty() {
                &data[..]
            } else {
                &buffer[..]
            };
            let prefix = Bytes::copy_from_slice(&start[..start.len().min(ID_PREFIX)]);
            drop(buffer);
            // Read past the rest without holding it: an answer before the whole request
            // was read makes the proxy's client see a reset instead of the refusal.
            while let Some(Ok(_)) = body.frame().await {}
            return Err(Unread::OverBudget(prefix));
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
}

/// A refusal before the request reached the queue: counted, 429 past one of the caller's
/// shares, else 503; both with `Retry-After`.
fn refused(shared: &BridgeShared, reason: Busy, caller_id: Value) -> Response<ProxyBody> {
    shared.metrics.refused(reason.into());
    let (status, message) = match reason {
        Busy::PrincipalShare => (
            StatusCode::TOO_MANY_REQUESTS,
            "this caller holds its share of the upstream process \
             (upstream_command.queue_max_per_principal); retry later",
        ),
        Busy::SessionShare => (
            StatusCode::TOO_MANY_REQUESTS,
            "this caller holds its share of the sessions \
             (upstream_command.max_sessions_per_principal); end one or retry later",
        ),
        Busy::SessionLimit => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the sidecar runs as many sessions as it may (upstream_command.max_sessions); \
             retry later",
        ),
        Busy::OverBudget => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the sidecar's memory budget is spent; retry later",
        ),
    };
    let mut response = error(status, caller_id, -32000, message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

/// 503 with `Retry-After`.
fn unavailable(caller_id: Value, message: &str) -> Response<ProxyBody> {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, caller_id, -32000, message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

/// Whether the request names protocol 2026-07-28 or later in `MCP-Protocol-Version` (a
/// 2025 client sends none with its `initialize`, and its session's version after).
fn names_a_modern_version(headers: &http::HeaderMap) -> bool {
    const FIRST_MODERN: &[u8] = b"2026-07-28";
    headers
        .get("mcp-protocol-version")
        .is_some_and(|v| v.as_bytes().trim_ascii() >= FIRST_MODERN)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_last_event_id_is_a_number_we_gave_or_none() {
        let read = |value: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(value) = value {
                headers.insert("last-event-id", HeaderValue::from_str(value).unwrap());
            }
            last_event_id(&headers)
        };
        assert_eq!(read(Some("7")), Some(7));
        assert_eq!(read(Some(" 12 ")), Some(12));
        for other in ["abc", "-1", "7a", "", "1.5", "99999999999999999999999"] {
            assert_eq!(read(Some(other)), None, "{other:?}");
        }
        assert_eq!(read(None), None);
    }
}
