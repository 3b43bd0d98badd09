//! `sse`: the SSE framer ([`EventFramer`]) and the rewriting body ([`SseRewriteBody`]),
//! with a pass-through rewriter and with the proxy's own [`ResponseSealer`].
//!
//! Input: a byte `n`, then `n % 8` split points (two bytes each, big-endian, taken modulo
//! the stream's length), then the upstream stream.
//!
//! Invariants: never panics; the split stream and the whole one give the same events and
//! leftover from the framer, the same frames from a pass-through body (and, when no event
//! is too large, exactly the input bytes), and the same frames from the sealing body once
//! each token (random nonce) is opened back to what it seals; each event's message is
//! sealed as the tree sealer it replaced sealed it (`upstream::compare`); every
//! `requestState` the sealing body emits is a token of the fuzz ring; what a body holds against its
//! [`Buffered`] account never exceeds one event's cap plus the chunk being read, and is all
//! given back once the body has ended.

use super::oracle::sealer;
use super::sealing::{every_capability, sealer_declaring};
use super::{ring, upstream, visible};
use bytes::Bytes;
use http_body::{Body, Frame};
use mcp_state_guard::facade::proxy::response::ResponseSealer;
use mcp_state_guard::facade::sse::{
    Buffered, EventFramer, EventRewriter, Rewrite, SseRewriteBody, StreamFailure, event_data,
};
use serde_json::Value;
use std::cell::Cell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Small, so the fuzzer reaches the cap.
const MAX_EVENT_BYTES: usize = 512;

pub fn check(data: &[u8]) {
    let ([n], rest) = super::split_header::<1>(data);
    let points = usize::from(n % 8);
    let (cuts, stream) = rest.split_at((points * 2).min(rest.len()));
    let mut at: Vec<usize> = cuts
        .chunks_exact(2)
        .map(|c| usize::from(u16::from_be_bytes([c[0], c[1]])) % (stream.len() + 1))
        .collect();
    at.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for cut in at.into_iter().chain([stream.len()]) {
        chunks.push(Bytes::copy_from_slice(&stream[start..cut]));
        start = cut;
    }
    let whole = vec![Bytes::copy_from_slice(stream)];

    assert_eq!(
        frame(&chunks),
        frame(&whole),
        "the framer depends on chunking"
    );

    let (passed, failed) = run(&chunks, PassThrough);
    assert_eq!((passed.clone(), failed), run(&whole, PassThrough));
    if !failed {
        assert_eq!(passed.concat(), stream, "a pass-through body changed bytes");
    }

    let (sealed, _) = run(&chunks, sealer());
    let (sealed_whole, _) = run(&whole, sealer());
    let normal = |frames: &[Bytes]| frames.iter().map(|f| opened(f)).collect::<Vec<_>>();
    assert_eq!(
        normal(&sealed),
        normal(&sealed_whole),
        "the sealing body depends on chunking"
    );
    for frame in &sealed {
        visible::check_event(frame);
    }
    // Each event's message is sealed as the tree sealer sealed it.
    for event in frame(&whole).0 {
        let event = event.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&event);
        if let Some(data) = event_data(event)
            && data
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .is_some_and(|b| *b == b'{' || *b == b'[')
        {
            upstream::compare(&data, Some(every_capability()));
        }
    }
}

/// The framer's events, whether it refused an event, and its leftover.
fn frame(chunks: &[Bytes]) -> (Vec<Bytes>, bool, Bytes) {
    let mut framer = EventFramer::new(MAX_EVENT_BYTES);
    let mut events = Vec::new();
    for chunk in chunks {
        framer.push(chunk);
        loop {
            match framer.next_event() {
                Ok(Some(event)) => events.push(event),
                Ok(None) => break,
                Err(_) => return (events, true, Bytes::new()),
            }
        }
    }
    (events, false, framer.finish())
}

/// Emits every event as it came; marks a failure.
struct PassThrough;

const FAILED: &[u8] = b"<failed>";

impl EventRewriter for PassThrough {
    fn rewrite(&mut self, _event: &[u8]) -> Rewrite {
        Rewrite::Keep
    }
    fn fail(&mut self, _failure: StreamFailure) -> Bytes {
        Bytes::from_static(FAILED)
    }
    fn finish(&mut self, _leftover: &[u8]) -> Rewrite {
        Rewrite::Keep
    }
}

/// The proxy's sealer for one `tools/call` whose client declared every capability.
fn sealer() -> ResponseSealer {
    sealer_declaring(Some(every_capability()))
}

/// The frames a rewriting body emits for the upstream `chunks`, and whether the stream
/// failed.
fn run<R: EventRewriter>(chunks: &[Bytes], rewriter: R) -> (Vec<Bytes>, bool) {
    let inner = Chunks(chunks.iter().cloned().collect());
    let held = Rc::new(Cell::new(0));
    let ledger = Ledger {
        held: held.clone(),
        bound: MAX_EVENT_BYTES + chunks.iter().map(Bytes::len).max().unwrap_or(0),
    };
    let body = SseRewriteBody::accounted(inner, rewriter, MAX_EVENT_BYTES, ledger);
    let mut body = std::pin::pin!(body);
    let mut cx = Context::from_waker(Waker::noop());
    let mut frames = Vec::new();
    loop {
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let data = frame.into_data().expect("only data frames");
                assert!(!data.is_empty(), "an empty frame");
                frames.push(data);
            }
            Poll::Ready(None) => break,
            Poll::Pending => panic!("pending on a body that is always ready"),
        }
    }
    assert_eq!(held.get(), 0, "bytes still held after the body ended");
    let failed = frames.last().is_some_and(|f| f == FAILED);
    (frames, failed)
}

/// An account with no limit that checks what the body says it holds.
struct Ledger {
    held: Rc<Cell<usize>>,
    bound: usize,
}

impl Buffered for Ledger {
    fn holding(&mut self, bytes: usize) -> bool {
        assert!(
            bytes <= self.bound,
            "holds {bytes} bytes, over one event's cap plus a chunk ({})",
            self.bound
        );
        self.held.set(bytes);
        true
    }
}

/// An upstream body that is always ready with its next chunk.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// A frame with each token (a random nonce each time) opened back to what it seals: its
/// lines other than data, and its data (the data lines joined, as a client reads them)
/// with its JSON read and its tokens opened.
fn opened(frame: &[u8]) -> (Vec<String>, Option<String>) {
    let lines = mcp_state_guard::facade::sse::split_lines(frame)
        .filter(|(content, _)| !(*content == b"data" || content.starts_with(b"data:")))
        .map(|(content, ending)| String::from_utf8_lossy(&[content, ending].concat()).into_owned())
        .collect();
    let data = event_data(frame).map(|data| match serde_json::from_slice::<Value>(&data) {
        Ok(value) => sealer::opened(value, &ring::binding()).to_string(),
        Err(_) => String::from_utf8_lossy(&data).into_owned(),
    });
    (lines, data)
}
