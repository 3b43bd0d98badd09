//! Byte-preserving, streaming Server-Sent-Events rewriting for upstream `text/event-stream`
//! answers: [`EventFramer`] splits the upstream bytes into complete events exactly as
//! received, and [`SseRewriteBody`] emits each event the moment its terminating blank line
//! arrives, handing it to a caller-supplied [`EventRewriter`] (this module knows nothing of
//! JSON-RPC). Invariant: every byte the client receives is either an upstream byte passed
//! through in order, untouched, or bytes the rewriter chose to emit for a whole event; an
//! event is never split, merged with its neighbours, delayed waiting for later input, or
//! buffered beyond `max_event_bytes`, and what is buffered is held against a [`Buffered`]
//! account (the proxy's memory budget) or the stream ends.

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// Splits a byte stream into complete SSE events, byte-exact.
///
/// An event ends at a blank line, i.e. two consecutive line terminators, where a terminator
/// is `"\r\n"`, `"\n"` or `"\r"` (SSE spec), mixed freely: `"\n\n"`, `"\r\r"`, `"\r\n\r\n"`,
/// `"\r\n\n"`, `"\n\r\n"`, `"\r\r\n"`, `"\n\r"`, ... A `"\r"` at the very end of the buffer
/// waits for the next byte, because it may be the first half of `"\r\n"`; that is what makes
/// the split points independent of how the upstream chunks its writes. Blank lines before an
/// event (a stream starting with `"\n"`) come out as their own tiny event made only of
/// terminators, so the caller can pass them through.
#[derive(Debug)]
pub struct EventFramer {
    /// Bytes of the current (first unreturned) event onwards.
    buf: BytesMut,
    /// Bytes of `buf` already examined, so a rescan after `push` costs O(new bytes).
    scan: usize,
    /// Whether `buf[scan]` starts a line: a terminator there makes a blank line.
    line_start: bool,
    /// Set by [`SseRewriteBody`] once the upstream ended: a trailing `"\r"` can no longer
    /// grow into `"\r\n"`, so it counts as a terminator on its own.
    eof: bool,
    max_event_bytes: usize,
}

impl EventFramer {
    /// A framer refusing any event longer than `max_event_bytes` (terminators included).
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            scan: 0,
            line_start: true,
            eof: false,
            max_event_bytes,
        }
    }

    /// Append bytes from the upstream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes received and not yet returned as events.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete event: all its bytes including the blank line that terminates it,
    /// exactly as received. `Ok(None)` when no complete event is buffered yet.
    ///
    /// `Err(SseError::EventTooLarge)` when the buffered, still incomplete event exceeds
    /// `max_event_bytes`, or a complete event does. The framer keeps returning the error;
    /// the caller is expected to give up on the stream.
    pub fn next_event(&mut self) -> Result<Option<Bytes>, SseError> {
        let too_large = SseError::EventTooLarge {
            limit: self.max_event_bytes,
        };
        match self.scan_for_end() {
            Some(end) if end > self.max_event_bytes => Err(too_large),
            Some(end) => {
                self.scan = 0;
                self.line_start = true;
                // `split_to` hands out the event without copying it.
                Ok(Some(self.buf.split_to(end).freeze()))
            }
            // Everything buffered belongs to the one incomplete event: nothing before it
            // is left unreturned, so the buffer length is that event's length so far.
            None if self.buf.len() > self.max_event_bytes => Err(too_large),
            None => Ok(None),
        }
    }

    /// At end of stream: whatever incomplete bytes remain (possibly empty).
    pub fn finish(mut self) -> Bytes {
        self.take_rest()
    }

    /// Marks the end of the upstream: see [`EventFramer::eof`].
    fn mark_eof(&mut self) {
        self.eof = true;
    }

    fn take_rest(&mut self) -> Bytes {
        self.scan = 0;
        self.line_start = true;
        self.buf.split().freeze()
    }

    /// Resumes the scan where the previous call stopped; returns the end (exclusive) of the
    /// first complete event in `buf`.
    fn scan_for_end(&mut self) -> Option<usize> {
        let buf = &self.buf[..];
        let mut i = self.scan;
        let mut line_start = self.line_start;
        let found = loop {
            // Every byte but a terminator only ends a line's start: jump to the next
            // terminator (a vectorised search, as a data line is most of an event).
            let Some(next) = buf
                .get(i..)
                .and_then(|rest| memchr::memchr2(b'\n', b'\r', rest))
            else {
                if i < buf.len() {
                    line_start = false;
                    i = buf.len();
                }
                break None;
            };
            if next > 0 {
                line_start = false;
                i += next;
            }
            let terminator_len = match buf[i] {
                b'\n' => 1,
                _ => match buf.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    None if self.eof => 1,
                    // Maybe the first half of "\r\n": decide when the next byte arrives.
                    None => break None,
                },
            };
            if line_start {
                break Some(i + terminator_len);
            }
            line_start = true;
            i += terminator_len;
        };
        self.scan = i;
        self.line_start = line_start;
        found
    }
}

/// Why a stream could not be framed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// One event (or the incomplete tail) is longer than the configured cap.
    #[error("sse event exceeds {limit} bytes")]
    EventTooLarge { limit: usize },
}

/// The `data` of one event per the SSE spec: the values of all `data` fields joined with
/// `"\n"`. The field name is `data` (case-sensitive), a single space after the colon is
/// removed, a line `data` without colon has an empty value. `None` if the event has no
/// `data` field. Comments (lines starting with `:`), `event`, `id`, `retry` and unknown
/// fields are ignored. A byte-order mark is the caller's business.
pub fn event_data(event: &[u8]) -> Option<Vec<u8>> {
    event_data_at(event).map(|data| data.bytes.into_owned())
}

/// An event's data ([`event_data`]), borrowed from the event when one data line holds
/// it all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventData<'a> {
    pub(crate) bytes: Cow<'a, [u8]>,
    /// Where `bytes` start in the event, when they are borrowed from it.
    pub(crate) at: Option<usize>,
}

/// [`event_data`] without a copy when one data line holds it all.
pub(crate) fn event_data_at(event: &[u8]) -> Option<EventData<'_>> {
    let mut data: Option<EventData<'_>> = None;
    for line in lines(event) {
        let (field, value) = match line.iter().position(|&b| b == b':') {
            // Empty lines (the terminating blank line) and comments carry no field.
            _ if line.is_empty() => continue,
            Some(0) => continue,
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            // An empty value where the line ends (still within the event).
            None => (line, &line[line.len()..]),
        };
        if field == b"data" {
            match &mut data {
                Some(data) => {
                    let joined = data.bytes.to_mut();
                    joined.push(b'\n');
                    joined.extend_from_slice(value);
                    data.at = None;
                }
                None => {
                    data = Some(EventData {
                        bytes: Cow::Borrowed(value),
                        // Within `event`: both are its bytes.
                        at: Some(value.as_ptr() as usize - event.as_ptr() as usize),
                    });
                }
            }
        }
    }
    data
}

/// The lines of `bytes` without their terminators (`"\r\n"`, `"\n"` or `"\r"`).
fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    split_lines(bytes).map(|(line, _)| line)
}

/// The one line splitter of the crate: each line of `bytes` and its terminator apart
/// (`"\r\n"`, `"\n"`, `"\r"`, or empty for an unterminated last line), so what reads
/// an event and what rewrites one agree on every line.
pub fn split_lines(mut bytes: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) else {
            let line = bytes;
            bytes = &[];
            return Some((line, &[][..]));
        };
        let terminator_len = if bytes[end..].starts_with(b"\r\n") {
            2
        } else {
            1
        };
        let (line, rest) = bytes.split_at(end);
        let (ending, rest) = rest.split_at(terminator_len);
        bytes = rest;
        Some((line, ending))
    })
}

/// What the rewriter decides for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// Emit the event's bytes unchanged.
    Keep,
    /// Emit these bytes in the event's place (empty: drop the event).
    Replace(Bytes),
    /// Emit these bytes in the event's place, then end the stream and close the upstream.
    ReplaceAndEnd(Bytes),
}

/// Why a stream could not be carried to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFailure {
    /// An event grew past the size cap before it was complete.
    EventTooLarge,
    /// The upstream body failed (a reset, a truncated chunk).
    UpstreamError,
    /// Buffering the incomplete event would exceed the account ([`Buffered`]).
    OverBudget,
}

impl StreamFailure {
    #[cfg(test)]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StreamFailure::EventTooLarge => "event too large",
            StreamFailure::UpstreamError => "upstream body error",
            StreamFailure::OverBudget => "over the memory budget",
        }
    }
}

/// The per-stream policy supplied by the proxy.
pub trait EventRewriter: Send + 'static {
    /// Called for every complete event (bytes include the terminating blank line).
    fn rewrite(&mut self, event: &[u8]) -> Rewrite;
    /// Called once if the stream cannot be framed (event too large) or the upstream body
    /// errors; returns the bytes to emit as the final event before the stream ends.
    fn fail(&mut self, failure: StreamFailure) -> Bytes;
    /// Called once at the end of a stream with the leftover incomplete bytes (not terminated
    /// by a blank line); only when there are some. Returns what to emit in their place
    /// (`Keep` = the leftover as is; `ReplaceAndEnd` acts like `Replace`).
    fn finish(&mut self, leftover: &[u8]) -> Rewrite;
}

/// An account of the bytes a stream holds buffered (the start of an event still waiting
/// for its blank line), so that one budget bounds what all streams hold together.
pub trait Buffered {
    /// The stream now holds `bytes` in all (more or fewer than before). `false`: it may
    /// not hold that many, and the stream ends with [`StreamFailure::OverBudget`].
    fn holding(&mut self, bytes: usize) -> bool;
}

/// No account: only `max_event_bytes` bounds a stream.
impl Buffered for () {
    fn holding(&mut self, _: usize) -> bool {
        true
    }
}

/// The proxy's account: an incomplete event is held against the memory budget.
impl Buffered for crate::budget::Reservation {
    fn holding(&mut self, bytes: usize) -> bool {
        self.resize_to(bytes).is_ok()
    }
}

/// Where [`SseRewriteBody`] is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamPhase {
    /// Reading the upstream and emitting events.
    Streaming,
    /// The upstream ended: emit what is still buffered, then the leftover.
    Draining,
    /// Nothing more to emit; the upstream body is dropped.
    Done,
}

pin_project_lite::pin_project! {
    /// An `http_body::Body<Data = Bytes>` that frames the inner body's data into events and
    /// emits each (possibly rewritten) event as soon as it is complete, one frame per event.
    ///
    /// Errors never reach the client as a broken body: an upstream error or an oversized
    /// event becomes the rewriter's [`EventRewriter::fail`] event, then a clean end. Dropping
    /// this body (the client went away) drops the upstream body, which closes that
    /// connection; that is the 2026 cancellation signal to the upstream.
    pub struct SseRewriteBody<B, R, H = ()> {
        // `None` once we stopped reading: dropping the upstream body early closes it.
        #[pin]
        inner: Option<B>,
        framer: EventFramer,
        rewriter: R,
        // What the framer holds is held here too; released when this body is dropped.
        held: H,
        phase: StreamPhase,
    }
}

impl<B, R> SseRewriteBody<B, R>
where
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Display,
    R: EventRewriter,
{
    #[cfg(test)]
    /// Wraps the upstream body `inner`; no event may exceed `max_event_bytes`.
    pub(crate) fn new(inner: B, rewriter: R, max_event_bytes: usize) -> Self {
        Self::accounted(inner, rewriter, max_event_bytes, ())
    }
}

impl<B, R, H> SseRewriteBody<B, R, H>
where
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Display,
    R: EventRewriter,
    H: Buffered,
{
    /// As `SseRewriteBody::new` (tests), and what the framer buffers is held in `held`.
    pub fn accounted(inner: B, rewriter: R, max_event_bytes: usize, held: H) -> Self {
        Self {
            inner: Some(inner),
            framer: EventFramer::new(max_event_bytes),
            rewriter,
            held,
            phase: StreamPhase::Streaming,
        }
    }
}

type PollFrame = Poll<Option<Result<Frame<Bytes>, Infallible>>>;

/// A data frame, or the end of the body for empty final bytes (a zero-length frame would
/// tell the client nothing).
fn final_frame(bytes: Bytes) -> PollFrame {
    if bytes.is_empty() {
        Poll::Ready(None)
    } else {
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }
}

impl<B, R, H> Body for SseRewriteBody<B, R, H>
where
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Display,
    R: EventRewriter,
    H: Buffered,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> PollFrame {
        let mut this = self.project();
        // Loop instead of waking ourselves: each pass either emits, ends, returns the
        // inner body's Pending, or consumed an inner frame and has something new to frame.
        loop {
            if *this.phase == StreamPhase::Done {
                return Poll::Ready(None);
            }
            // Buffered complete events go out before the upstream is polled again, so a
            // notification never waits behind later input.
            match this.framer.next_event() {
                Ok(Some(event)) => {
                    // Fewer bytes held: giving them back cannot fail.
                    this.held.holding(this.framer.buffered());
                    match this.rewriter.rewrite(&event) {
                        Rewrite::Keep => return Poll::Ready(Some(Ok(Frame::data(event)))),
                        // An empty replacement drops the event: look at the next one.
                        Rewrite::Replace(bytes) if bytes.is_empty() => continue,
                        Rewrite::Replace(bytes) => {
                            return Poll::Ready(Some(Ok(Frame::data(bytes))));
                        }
                        Rewrite::ReplaceAndEnd(bytes) => {
                            this.inner.set(None);
                            this.framer.take_rest();
                            this.held.holding(0);
                            *this.phase = StreamPhase::Done;
                            return final_frame(bytes);
                        }
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "sse stream abandoned");
                    // Stop buffering at once: the oversized event is never read further.
                    this.inner.set(None);
                    this.framer.take_rest();
                    this.held.holding(0);
                    *this.phase = StreamPhase::Done;
                    return final_frame(this.rewriter.fail(StreamFailure::EventTooLarge));
                }
            }
            if *this.phase == StreamPhase::Draining {
                *this.phase = StreamPhase::Done;
                let leftover = this.framer.take_rest();
                this.held.holding(0);
                if leftover.is_empty() {
                    return Poll::Ready(None);
                }
                return match this.rewriter.finish(&leftover) {
                    Rewrite::Keep => final_frame(leftover),
                    Rewrite::Replace(bytes) | Rewrite::ReplaceAndEnd(bytes) => final_frame(bytes),
                };
            }
            let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                // Unreachable: `inner` is only dropped on the way to Draining or Done.
                *this.phase = StreamPhase::Done;
                continue;
            };
            match inner.poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    // SSE has no trailers; anything that is not data is dropped.
                    if let Ok(data) = frame.into_data() {
                        if !this.held.holding(this.framer.buffered() + data.len()) {
                            tracing::warn!(
                                "sse stream abandoned: its incomplete event would exceed the memory budget"
                            );
                            this.inner.set(None);
                            this.framer.take_rest();
                            this.held.holding(0);
                            *this.phase = StreamPhase::Done;
                            return final_frame(this.rewriter.fail(StreamFailure::OverBudget));
                        }
                        this.framer.push(&data);
                    }
                }
                Poll::Ready(Some(Err(err))) => {
                    // Only the error's Display: body bytes may carry tokens or state.
                    tracing::warn!(error = %err, "upstream sse body failed");
                    this.inner.set(None);
                    this.framer.take_rest();
                    this.held.holding(0);
                    *this.phase = StreamPhase::Done;
                    return final_frame(this.rewriter.fail(StreamFailure::UpstreamError));
                }
                Poll::Ready(None) => {
                    this.inner.set(None);
                    this.framer.mark_eof();
                    *this.phase = StreamPhase::Draining;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // Conservative: in the other phases rewriter decisions may still emit bytes.
        self.phase == StreamPhase::Done
    }

    fn size_hint(&self) -> SizeHint {
        if self.phase == StreamPhase::Done {
            SizeHint::with_exact(0)
        } else {
            // Rewriting changes lengths, so nothing is known up front.
            SizeHint::default()
        }
    }
}

/// Rebuild an event with `data` as its data, where its first data line stood: one data
/// line per line of `data` (a message read from several data lines, which SSE joins with
/// LF, keeps them), each with the first data line's ending; every other line (`event:`,
/// `id:`, `retry:`, comments) and its ending is kept.
pub(crate) fn replace_data(event: &[u8], data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(event.len() + data.len());
    let mut written = false;
    for (content, ending) in split_lines(event) {
        let is_data = content == b"data" || content.starts_with(b"data:");
        if !is_data {
            out.extend_from_slice(content);
            out.extend_from_slice(ending);
        } else if !written {
            let ending = if ending.is_empty() { b"\r\n" } else { ending };
            for line in data.split(|&b| b == b'\n') {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(line);
                out.extend_from_slice(ending);
            }
            written = true;
        }
    }
    out.freeze()
}

#[cfg(test)]
mod body_tests;
#[cfg(test)]
mod tests;
