//! `SseRewriteBody` tests: a scripted upstream body and a rewriter that replaces the
//! events carrying a secret.
use super::*;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::tests::stream;
use http::HeaderMap;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// SseRewriteBody

enum Step {
    Data(&'static [u8]),
    Trailers,
    Fail(&'static str),
    /// Returns Pending once (waking the task, so executors poll again).
    Pending,
}

/// A scripted upstream body that counts its polls and reports being dropped.
struct ScriptBody {
    steps: VecDeque<Step>,
    polls: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

impl ScriptBody {
    fn new(steps: Vec<Step>) -> (Self, Arc<AtomicUsize>, Arc<AtomicBool>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicBool::new(false));
        let body = Self {
            steps: steps.into(),
            polls: polls.clone(),
            dropped: dropped.clone(),
        };
        (body, polls, dropped)
    }
}

impl Drop for ScriptBody {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl Body for ScriptBody {
    type Data = Bytes;
    type Error = String;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, String>>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(match self.steps.pop_front() {
            None => None,
            Some(Step::Data(bytes)) => Some(Ok(Frame::data(Bytes::from_static(bytes)))),
            Some(Step::Trailers) => Some(Ok(Frame::trailers(HeaderMap::new()))),
            Some(Step::Fail(message)) => Some(Err(message.to_owned())),
            Some(Step::Pending) => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        })
    }
}

/// Replaces events whose data mentions "secret"; records every call.
#[derive(Default)]
struct ResponseSealer {
    end_after_replace: bool,
    calls: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ResponseSealer {
    fn log(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl EventRewriter for ResponseSealer {
    fn rewrite(&mut self, event: &[u8]) -> Rewrite {
        self.log(format!("rewrite {}", String::from_utf8_lossy(event)));
        let data = event_data(event).unwrap_or_default();
        if !data.windows(6).any(|w| w == b"secret") {
            Rewrite::Keep
        } else if self.end_after_replace {
            Rewrite::ReplaceAndEnd(Bytes::from_static(b"data: sealed\r\n\r\n"))
        } else {
            Rewrite::Replace(Bytes::from_static(b"data: sealed\r\n\r\n"))
        }
    }

    fn fail(&mut self, failure: StreamFailure) -> Bytes {
        let reason = failure.as_str();
        self.log(format!("fail {reason}"));
        Bytes::from(format!("data: failed: {reason}\n\n"))
    }

    fn finish(&mut self, leftover: &[u8]) -> Rewrite {
        self.log(format!("finish {}", String::from_utf8_lossy(leftover)));
        if leftover.starts_with(b"drop") {
            Rewrite::Replace(Bytes::new())
        } else if leftover.starts_with(b"data: secret") {
            Rewrite::Replace(Bytes::from_static(b"data: sealed tail"))
        } else {
            Rewrite::Keep
        }
    }
}

type TestBody = SseRewriteBody<ScriptBody, ResponseSealer>;

fn poll(body: &mut Pin<Box<TestBody>>) -> Poll<Option<Bytes>> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    body.as_mut()
        .poll_frame(&mut cx)
        .map(|frame| frame.map(|f| f.unwrap().into_data().unwrap()))
}

/// Every frame until the end, skipping Pendings (the script wakes itself).
fn drain(body: &mut Pin<Box<TestBody>>) -> Vec<Bytes> {
    let mut frames = Vec::new();
    loop {
        match poll(body) {
            Poll::Ready(Some(frame)) => frames.push(frame),
            Poll::Ready(None) => return frames,
            Poll::Pending => {}
        }
    }
}

fn concat(frames: &[Bytes]) -> String {
    frames
        .iter()
        .map(|f| std::str::from_utf8(f).unwrap())
        .collect()
}

const PROGRESS: &[u8] = b"event: message\r\ndata: {\"method\":\"notifications/progress\"}\r\n\r\n";
const RESPONSE: &[u8] =
    b"event: message\r\ndata: {\"id\":1,\"result\":{\"requestState\":\"secret\"}}\r\n\r\n";

#[tokio::test]
async fn only_the_secret_event_is_replaced() {
    use http_body_util::BodyExt;
    let (inner, _, _) = ScriptBody::new(vec![
        Step::Data(b": ping\r\n\r\nevent: mess"),
        Step::Pending,
        Step::Data(b"age\r\ndata: {\"method\":\"notifications/progress\"}\r\n\r"),
        Step::Data(b"\n"),
        Step::Data(RESPONSE),
        Step::Trailers,
    ]);
    let body = SseRewriteBody::new(inner, ResponseSealer::default(), 1024);
    let out = body.collect().await.unwrap().to_bytes();
    let expected = [&b": ping\r\n\r\n"[..], PROGRESS, b"data: sealed\r\n\r\n"].concat();
    assert_eq!(out, expected);
}

#[test]
fn a_complete_event_is_emitted_before_the_upstream_is_polled_again() {
    let (inner, polls, _) = ScriptBody::new(vec![
        Step::Data(b": ping\r\n\r\n"),
        Step::Data(PROGRESS),
        Step::Pending,
        Step::Data(RESPONSE),
    ]);
    let mut body = Box::pin(SseRewriteBody::new(inner, ResponseSealer::default(), 1024));
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(b": ping\r\n\r\n")))
    );
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(PROGRESS)))
    );
    assert_eq!(poll(&mut body), Poll::Pending);
    assert!(!body.is_end_stream());
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(b"data: sealed\r\n\r\n")))
    );
    assert_eq!(poll(&mut body), Poll::Ready(None));
    assert!(body.is_end_stream());
    assert_eq!(body.size_hint().exact(), Some(0));
}

#[test]
fn events_buffered_in_one_chunk_go_out_without_polling_the_upstream() {
    let chunk: &'static [u8] = b": ping\n\ndata: a\n\ndata: b\n\n";
    let (inner, polls, _) = ScriptBody::new(vec![Step::Data(chunk), Step::Pending]);
    let mut body = Box::pin(SseRewriteBody::new(inner, ResponseSealer::default(), 1024));
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(b": ping\n\n")))
    );
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(b"data: a\n\n")))
    );
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(b"data: b\n\n")))
    );
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert_eq!(poll(&mut body), Poll::Pending);
    assert_eq!(polls.load(Ordering::SeqCst), 2);
}

#[test]
fn upstream_error_becomes_the_final_fail_event() {
    let (inner, polls, dropped) = ScriptBody::new(vec![
        Step::Data(PROGRESS),
        Step::Data(b"data: half an ev"),
        Step::Fail("connection reset"),
        Step::Data(b"data: never\n\n"),
    ]);
    let sealer = ResponseSealer::default();
    let calls = sealer.calls.clone();
    let mut body = Box::pin(SseRewriteBody::new(inner, sealer, 1024));
    let frames = drain(&mut body);
    assert_eq!(
        concat(&frames),
        format!(
            "{}data: failed: upstream body error\n\n",
            std::str::from_utf8(PROGRESS).unwrap()
        )
    );
    assert_eq!(frames.len(), 2);
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(polls.load(Ordering::SeqCst), 3);
    let calls = calls.lock().unwrap();
    assert_eq!(calls.last().unwrap(), "fail upstream body error");
    assert!(!calls.iter().any(|c| c.starts_with("finish")));
}

#[test]
fn oversized_event_fails_the_stream_without_buffering_on() {
    let (inner, polls, dropped) = ScriptBody::new(vec![
        Step::Data(b"data: ok\n\n"),
        Step::Data(b"data: 0123456789A"),
        Step::Data(b"0123456789"),
        Step::Data(b"\n\n"),
    ]);
    let mut body = Box::pin(SseRewriteBody::new(inner, ResponseSealer::default(), 16));
    assert_eq!(
        concat(&drain(&mut body)),
        "data: ok\n\ndata: failed: event too large\n\n"
    );
    assert_eq!(polls.load(Ordering::SeqCst), 2);
    assert!(dropped.load(Ordering::SeqCst));
    assert!(body.is_end_stream());
}

#[test]
fn replace_and_end_stops_polling_and_drops_the_upstream() {
    let (inner, polls, dropped) = ScriptBody::new(vec![
        Step::Data(PROGRESS),
        Step::Data(RESPONSE),
        Step::Data(b"data: after the response\n\n"),
    ]);
    let sealer = ResponseSealer {
        end_after_replace: true,
        ..ResponseSealer::default()
    };
    let mut body = Box::pin(SseRewriteBody::new(inner, sealer, 1024));
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(PROGRESS)))
    );
    assert!(!dropped.load(Ordering::SeqCst));
    assert_eq!(
        poll(&mut body),
        Poll::Ready(Some(Bytes::from_static(b"data: sealed\r\n\r\n")))
    );
    assert!(dropped.load(Ordering::SeqCst));
    assert!(body.is_end_stream());
    assert_eq!(poll(&mut body), Poll::Ready(None));
    assert_eq!(polls.load(Ordering::SeqCst), 2);
}

#[test]
fn leftover_is_kept_or_replaced_by_finish() {
    for (tail, expected) in [
        (&b"data: partial"[..], "data: partial"),
        (b"data: secret tail", "data: sealed tail"),
        (b"drop me", ""),
    ] {
        let tail: &'static [u8] = Box::leak(tail.to_vec().into_boxed_slice());
        let (inner, _, _) = ScriptBody::new(vec![Step::Data(b"data: a\n\n"), Step::Data(tail)]);
        let sealer = ResponseSealer::default();
        let calls = sealer.calls.clone();
        let mut body = Box::pin(SseRewriteBody::new(inner, sealer, 1024));
        assert_eq!(concat(&drain(&mut body)), format!("data: a\n\n{expected}"));
        assert_eq!(
            calls.lock().unwrap().last().unwrap(),
            &format!("finish {}", std::str::from_utf8(tail).unwrap())
        );
    }
}

#[test]
fn no_leftover_means_no_finish_call() {
    let (inner, _, _) = ScriptBody::new(vec![Step::Data(b"data: a\n\n")]);
    let sealer = ResponseSealer::default();
    let calls = sealer.calls.clone();
    let mut body = Box::pin(SseRewriteBody::new(inner, sealer, 1024));
    assert_eq!(concat(&drain(&mut body)), "data: a\n\n");
    assert_eq!(*calls.lock().unwrap(), ["rewrite data: a\n\n"]);
}

#[test]
fn trailing_cr_at_end_of_stream_completes_the_event() {
    // Without EOF handling this "\r" would leave the secret response as a leftover.
    let (inner, _, _) = ScriptBody::new(vec![Step::Data(b"data: secret\n\r")]);
    let mut body = Box::pin(SseRewriteBody::new(inner, ResponseSealer::default(), 1024));
    assert_eq!(concat(&drain(&mut body)), "data: sealed\r\n\r\n");
}

#[test]
fn empty_upstream_is_an_empty_body() {
    let (inner, _, _) = ScriptBody::new(vec![Step::Trailers]);
    let mut body = Box::pin(SseRewriteBody::new(inner, ResponseSealer::default(), 1024));
    assert!(!body.is_end_stream());
    assert_eq!(body.size_hint().exact(), None);
    assert!(drain(&mut body).is_empty());
    assert!(body.is_end_stream());
}

#[test]
fn dropping_the_body_drops_the_upstream() {
    let (inner, _, dropped) = ScriptBody::new(vec![Step::Data(PROGRESS), Step::Pending]);
    let mut body = Box::pin(SseRewriteBody::new(inner, ResponseSealer::default(), 1024));
    assert!(poll(&mut body).is_ready());
    assert!(!dropped.load(Ordering::SeqCst));
    drop(body);
    assert!(dropped.load(Ordering::SeqCst));
}

struct KeepAll;

impl EventRewriter for KeepAll {
    fn rewrite(&mut self, _: &[u8]) -> Rewrite {
        Rewrite::Keep
    }
    fn fail(&mut self, _: StreamFailure) -> Bytes {
        Bytes::from_static(b"FAILED")
    }
    fn finish(&mut self, _: &[u8]) -> Rewrite {
        Rewrite::Keep
    }
}

proptest! {
    // Failures become named unit tests, not regression files outside `src/`.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn pass_through_body_is_byte_identical(
        (events, tail) in stream(),
        cuts in prop::collection::vec((1usize..9, any::<bool>()), 1..8),
    ) {
        let input = format!("{}{tail}", events.concat());
        let mut steps = Vec::new();
        let mut rest: &'static [u8] = Box::leak(input.clone().into_bytes().into_boxed_slice());
        for (size, pending) in cuts.iter().copied().cycle() {
            if rest.is_empty() {
                break;
            }
            let n = size.min(rest.len());
            steps.push(Step::Data(&rest[..n]));
            rest = &rest[n..];
            if pending {
                steps.push(Step::Pending);
            }
        }
        let (inner, _, _) = ScriptBody::new(steps);
        let mut body = Box::pin(SseRewriteBody::new(inner, KeepAll, usize::MAX));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        loop {
            match body.as_mut().poll_frame(&mut cx) {
                Poll::Ready(Some(frame)) => out.extend_from_slice(&frame.unwrap().into_data().unwrap()),
                Poll::Ready(None) => break,
                Poll::Pending => {}
            }
        }
        prop_assert_eq!(out, input.into_bytes());
    }
}

/// Every total an [`Account`] was asked to hold, in order.
type HeldLog = Arc<std::sync::Mutex<Vec<usize>>>;
type AccountedBody = Pin<Box<SseRewriteBody<ScriptBody, ResponseSealer, Account>>>;

/// An account that records what a stream holds and allows at most `cap` bytes.
struct Account {
    cap: usize,
    held: HeldLog,
}

impl Buffered for Account {
    fn holding(&mut self, bytes: usize) -> bool {
        if bytes > self.cap {
            return false;
        }
        self.held.lock().unwrap().push(bytes);
        true
    }
}

fn accounted(steps: Vec<Step>, cap: usize) -> (AccountedBody, HeldLog, Arc<AtomicBool>) {
    let (inner, _, dropped) = ScriptBody::new(steps);
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let account = Account {
        cap,
        held: held.clone(),
    };
    let body = SseRewriteBody::accounted(inner, ResponseSealer::default(), 1024, account);
    (Box::pin(body), held, dropped)
}

fn drain_accounted(body: &mut AccountedBody) -> String {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut out = String::new();
    loop {
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(frame)) => {
                out.push_str(std::str::from_utf8(&frame.unwrap().into_data().unwrap()).unwrap())
            }
            Poll::Ready(None) => return out,
            Poll::Pending => {}
        }
    }
}

#[test]
fn what_the_framer_buffers_is_held_and_given_back_event_by_event() {
    let (mut body, held, _) = accounted(
        vec![
            Step::Data(b"data: a"),
            Step::Data(b"bc\n\ndata: d"),
            Step::Data(b"\n\n"),
        ],
        64,
    );
    assert_eq!(drain_accounted(&mut body), "data: abc\n\ndata: d\n\n");
    // 7 held, then 18 (one event and the start of the next), 7 once the first went out,
    // 9 when the second completed, 0 once it went out (and at the upstream's end).
    assert_eq!(*held.lock().unwrap(), [7, 18, 7, 9, 0, 0]);
}

#[test]
fn an_event_the_account_cannot_hold_ends_the_stream_with_the_failure_event() {
    let (mut body, held, dropped) = accounted(
        vec![
            Step::Data(PROGRESS),
            Step::Data(b"data: {\"id\":1,\"result\":{\"big\":\""),
            Step::Data(&[b'x'; 64]),
            Step::Data(b"\"}}\n\n"),
        ],
        // The notification fits; the response's start too, but not with 64 more bytes.
        PROGRESS.len(),
    );
    let out = drain_accounted(&mut body);
    let progress = std::str::from_utf8(PROGRESS).unwrap();
    assert_eq!(
        out,
        format!("{progress}data: failed: over the memory budget\n\n")
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the upstream body is let go"
    );
    assert_eq!(held.lock().unwrap().last(), Some(&0), "nothing held after");
}
