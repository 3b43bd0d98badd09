//! What a 2025-era session's child sends its client unasked: notifications that name no
//! request (log messages, list changes, resource updates) and requests to the client
//! (sampling, elicitation, roots, ping). The session has one client, so each goes to it:
//! on the session's GET stream when one is open, else on the event stream of a request
//! of the session in progress (as an SDK's HTTP transport sends a request's related
//! messages), else it waits for the next GET stream. Events are numbered, and the last
//! [`KEPT_EVENTS`] are kept so that a client reconnecting with `Last-Event-ID` gets what
//! it missed.
//!
//! Invariant: every kept event's bytes are reserved in the memory budget; at most
//! [`KEPT_EVENTS`] are kept (the oldest goes first), and an event that cannot be reserved
//! is dropped and counted, never held outside the budget. One GET stream at a time.

use super::metrics::{Dropped, StdioMetrics};
use super::notices::Notices;
use crate::body::BoxError;
use crate::budget::{MemoryBudget, Reservation};
use bytes::Bytes;
use http_body::Frame;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

/// Events kept for a client that resumes its GET stream.
pub(crate) const KEPT_EVENTS: usize = 64;

/// One session's unasked events.
pub(crate) struct Outbox {
    state: Mutex<OutboxState>,
    budget: Arc<MemoryBudget>,
}

struct OutboxState {
    /// The number the next event gets.
    next: u64,
    /// The last events: number, message, and whether it reached the client.
    kept: VecDeque<Kept>,
    /// The bytes of `kept`, reserved.
    held: Reservation,
    /// The GET stream's queue, while one is open.
    stream: Option<Arc<Notices>>,
}

struct Kept {
    number: u64,
    message: Bytes,
    delivered: bool,
}

/// A second GET stream while one is open (409).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StreamOpen;

impl Outbox {
    pub(crate) fn new(budget: Arc<MemoryBudget>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(OutboxState {
                next: 1,
                kept: VecDeque::new(),
                held: budget.reservation(),
                stream: None,
            }),
            budget,
        })
    }

    fn state(&self) -> MutexGuard<'_, OutboxState> {
        // Each change is a few field updates that cannot panic half-way.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send `message` (one JSON-RPC message) to the session's client: on its GET stream,
    /// else on `in_progress` (the event stream of one of its requests), else later.
    pub(crate) fn send(
        &self,
        message: Bytes,
        in_progress: Option<Arc<Notices>>,
        metrics: &StdioMetrics,
    ) {
        let mut state = self.state();
        while state.kept.len() >= KEPT_EVENTS {
            forget_oldest(&mut state);
        }
        if state.held.grow(message.len()).is_err() {
            metrics.dropped(Dropped::OverBudget);
            tracing::warn!(
                "a stdio session's event could not be held in the memory budget; dropped"
            );
            return;
        }
        let number = state.next;
        state.next += 1;
        let delivered = match &state.stream {
            Some(stream) => match stream.push(framed(number, &message)) {
                Ok(()) => true,
                Err(_) => {
                    // A client that does not read its GET stream loses it (it may resume).
                    stream.cut();
                    state.stream = None;
                    false
                }
            },
            None => in_progress.is_some_and(|notices| notices.push(message.clone()).is_ok()),
        };
        state.kept.push_back(Kept {
            number,
            message,
            delivered,
        });
    }

    /// Open the GET stream: with `last_event` (a reconnecting client's `Last-Event-ID`),
    /// the kept events after it come first; without, every kept event that has not
    /// reached the client. Refused while another GET stream is open.
    pub(crate) fn open_stream(
        self: &Arc<Self>,
        last_event: Option<u64>,
    ) -> Result<SessionStream, StreamOpen> {
        let mut state = self.state();
        if state.stream.as_ref().is_some_and(|s| !s.is_closed()) {
            return Err(StreamOpen);
        }
        let notices = Notices::new(&self.budget);
        for kept in state.kept.iter_mut() {
            let wanted = match last_event {
                Some(last) => kept.number > last,
                None => !kept.delivered,
            };
            if wanted && notices.push(framed(kept.number, &kept.message)).is_ok() {
                kept.delivered = true;
            }
        }
        state.stream = Some(notices.clone());
        Ok(SessionStream {
            notices,
            outbox: self.clone(),
        })
    }

    /// Whether the client has a GET stream open.
    pub(crate) fn has_stream(&self) -> bool {
        self.state().stream.as_ref().is_some_and(|s| !s.is_closed())
    }

    /// The session ended: its GET stream ends after what waits.
    pub(crate) fn close(&self) {
        if let Some(stream) = self.state().stream.take() {
            stream.close();
        }
    }

    fn detach(&self, notices: &Arc<Notices>) {
        let mut state = self.state();
        if state
            .stream
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, notices))
        {
            state.stream = None;
        }
    }
}

fn forget_oldest(state: &mut OutboxState) {
    if let Some(old) = state.kept.pop_front() {
        let left = state.held.bytes().saturating_sub(old.message.len());
        let _ = state.held.resize_to(left);
    }
}

/// One event of the GET stream, numbered for `Last-Event-ID`.
fn framed(number: u64, message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 48);
    out.extend_from_slice(format!("id: {number}\r\nevent: message\r\ndata: ").as_bytes());
    out.extend_from_slice(message);
    out.extend_from_slice(b"\r\n\r\n");
    Bytes::from(out)
}

/// A session's GET stream: its events as they come, until the session ends or the
/// client goes away (which frees the session for a new one).
pub(crate) struct SessionStream {
    notices: Arc<Notices>,
    outbox: Arc<Outbox>,
}

impl http_body::Body for SessionStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.notices
            .poll_next(cx)
            .map(|next| next.map(|event| Ok(Frame::data(event))))
    }
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        self.notices.cut();
        self.outbox.detach(&self.notices);
    }
}

#[cfg(test)]
mod tests;
