use super::*;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use http::HeaderMap;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// EventFramer

/// Frames `input` delivered in pieces of the given sizes (cycled); returns the events and
/// the leftover. With `eof`, the end of input is signalled as [`SseRewriteBody`] does.
fn frame_chunked(input: &[u8], sizes: &[usize], eof: bool) -> (Vec<Bytes>, Bytes) {
    let mut framer = EventFramer::new(usize::MAX);
    let mut events = Vec::new();
    let mut rest = input;
    let mut size = sizes.iter().copied().cycle();
    while !rest.is_empty() {
        let n = size.next().unwrap_or(1).clamp(1, rest.len());
        framer.push(&rest[..n]);
        rest = &rest[n..];
        while let Some(event) = framer.next_event().unwrap() {
            events.push(event);
        }
    }
    if eof {
        framer.mark_eof();
        while let Some(event) = framer.next_event().unwrap() {
            events.push(event);
        }
    }
    (events, framer.finish())
}

fn frame_all(input: &[u8]) -> (Vec<Bytes>, Bytes) {
    frame_chunked(input, &[usize::MAX], false)
}

fn strs(events: &[Bytes]) -> Vec<&str> {
    events
        .iter()
        .map(|e| std::str::from_utf8(e).unwrap())
        .collect()
}

#[test]
fn every_pair_of_terminators_ends_an_event() {
    let terminators = ["\n", "\r", "\r\n"];
    for first in terminators {
        for second in terminators {
            // "\r" then "\n" is one terminator, not two.
            if first == "\r" && second.starts_with('\n') {
                continue;
            }
            let event = format!("data: a{first}{second}");
            let input = format!("{event}data: b\n\n");
            for sizes in [&[usize::MAX][..], &[1]] {
                let (events, rest) = frame_chunked(input.as_bytes(), sizes, false);
                assert_eq!(strs(&events), [&event, "data: b\n\n"], "{input:?}");
                assert!(rest.is_empty());
            }
        }
    }
}

#[test]
fn spelled_out_terminator_combinations() {
    for (input, first) in [
        ("x\n\nrest", "x\n\n"),
        ("x\r\rrest", "x\r\r"),
        ("x\r\n\r\nrest", "x\r\n\r\n"),
        ("x\r\n\nrest", "x\r\n\n"),
        ("x\n\r\nrest", "x\n\r\n"),
        ("x\r\r\nrest", "x\r\r\n"),
        ("x\n\rrest", "x\n\r"),
        ("x\r\n\rrest", "x\r\n\r"),
    ] {
        let (events, rest) = frame_all(input.as_bytes());
        assert_eq!(strs(&events), [first], "{input:?}");
        assert_eq!(&rest[..], b"rest");
    }
}

#[test]
fn a_lone_cr_is_not_an_event_end() {
    // "\r\n" is one terminator: "x\r\n" then "y" is not a blank line.
    let (events, rest) = frame_all(b"x\r\ny\r\n");
    assert!(events.is_empty());
    assert_eq!(&rest[..], b"x\r\ny\r\n");
}

#[test]
fn cr_at_buffer_end_waits_for_the_next_byte() {
    let mut framer = EventFramer::new(1024);
    framer.push(b"data: a\r\n\r");
    // Could be "\r\n\r" + anything or "\r\n\r\n": the end is not known yet.
    assert_eq!(framer.next_event(), Ok(None));
    framer.push(b"\n");
    assert_eq!(
        framer.next_event(),
        Ok(Some(Bytes::from_static(b"data: a\r\n\r\n")))
    );
    // And a "\r" followed by something else ends the event before that byte.
    framer.push(b"data: b\r\r");
    assert_eq!(framer.next_event(), Ok(None));
    framer.push(b"d");
    assert_eq!(
        framer.next_event(),
        Ok(Some(Bytes::from_static(b"data: b\r\r")))
    );
    assert_eq!(&framer.finish()[..], b"d");
}

#[test]
fn cr_at_end_of_stream_is_a_terminator() {
    let mut framer = EventFramer::new(1024);
    framer.push(b"data: a\n\r");
    assert_eq!(framer.next_event(), Ok(None));
    framer.mark_eof();
    assert_eq!(
        framer.next_event(),
        Ok(Some(Bytes::from_static(b"data: a\n\r")))
    );
    assert!(framer.finish().is_empty());
}

#[test]
fn rescans_start_where_the_last_scan_stopped() {
    // White-box: a long event arriving in small chunks must cost O(bytes), not O(bytes²).
    let mut framer = EventFramer::new(1024);
    framer.push(b"data: abc");
    assert_eq!(framer.next_event(), Ok(None));
    assert_eq!((framer.scan, framer.line_start), (9, false));
    framer.push(b"\r");
    assert_eq!(framer.next_event(), Ok(None));
    assert_eq!(
        framer.scan, 9,
        "a trailing \\r is rescanned once its successor is known"
    );
    framer.push(b"\nid");
    assert_eq!(framer.next_event(), Ok(None));
    assert_eq!((framer.scan, framer.line_start), (13, false));
    framer.push(b"\n\n");
    assert!(framer.next_event().unwrap().is_some());
    assert_eq!((framer.scan, framer.line_start), (0, true));
}

#[test]
fn ping_comment_is_an_event() {
    let input = b": ping\r\n\r\nevent: message\r\ndata: {}\r\n\r\n";
    let (events, rest) = frame_all(input);
    assert_eq!(
        strs(&events),
        [": ping\r\n\r\n", "event: message\r\ndata: {}\r\n\r\n"]
    );
    assert!(rest.is_empty());
    assert_eq!(event_data(&events[0]), None);
}

#[test]
fn mcp_sdk_framing() {
    let progress = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\r\n\r\n";
    let response = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"requestState\":\"s\"}}\r\n\r\n";
    let input = format!("{progress}{response}");
    let (events, rest) = frame_chunked(input.as_bytes(), &[7, 1, 30], false);
    assert_eq!(strs(&events), [progress, response]);
    assert!(rest.is_empty());
    assert_eq!(
        event_data(&events[1]).unwrap(),
        br#"{"jsonrpc":"2.0","id":4,"result":{"requestState":"s"}}"#
    );
}

#[test]
fn leading_blank_lines_are_their_own_events() {
    let (events, rest) = frame_all(b"\n\r\ndata: a\n\n");
    assert_eq!(strs(&events), ["\n", "\r\n", "data: a\n\n"]);
    assert!(rest.is_empty());
    assert_eq!(event_data(&events[0]), None);
}

#[test]
fn leftover_comes_back_from_finish() {
    let (events, rest) = frame_all(b"data: a\n\ndata: partial\r\nid: 7");
    assert_eq!(strs(&events), ["data: a\n\n"]);
    assert_eq!(&rest[..], b"data: partial\r\nid: 7");
    assert!(EventFramer::new(8).finish().is_empty());
}

#[test]
fn incomplete_event_over_the_cap_is_refused() {
    let mut framer = EventFramer::new(10);
    framer.push(b"data: 1234");
    assert_eq!(framer.next_event(), Ok(None), "exactly the cap is fine");
    framer.push(b"5");
    assert_eq!(
        framer.next_event(),
        Err(SseError::EventTooLarge { limit: 10 })
    );
    assert_eq!(
        SseError::EventTooLarge { limit: 10 }.to_string(),
        "sse event exceeds 10 bytes"
    );
}

#[test]
fn complete_event_over_the_cap_is_refused() {
    let mut framer = EventFramer::new(10);
    framer.push(b"data: 12\n\n");
    assert_eq!(
        framer.next_event(),
        Ok(Some(Bytes::from_static(b"data: 12\n\n")))
    );
    // One chunk holding an 11-byte event: complete, but still too large.
    framer.push(b"data: 123\n\ndata: 1\n\n");
    assert_eq!(
        framer.next_event(),
        Err(SseError::EventTooLarge { limit: 10 })
    );
}

#[test]
fn a_chunk_of_many_small_events_is_not_too_large() {
    let mut framer = EventFramer::new(10);
    framer.push(b"data: 1\n\ndata: 2\n\ndata: 3\n\n");
    for expected in ["data: 1\n\n", "data: 2\n\n", "data: 3\n\n"] {
        assert_eq!(framer.next_event().unwrap().unwrap(), expected.as_bytes());
    }
    assert_eq!(framer.next_event(), Ok(None));
}

// ---------------------------------------------------------------------------------------
// event_data

#[test]
fn data_lines_join_with_newline() {
    let event = b"event: message\r\ndata: one\ndata:  two\rid: 3\r\n: comment\ndata: three\n\n";
    assert_eq!(event_data(event).unwrap(), b"one\n two\nthree");
}

#[test]
fn data_field_spellings() {
    assert_eq!(event_data(b"data\n\n").unwrap(), b"");
    assert_eq!(event_data(b"data:x\n\n").unwrap(), b"x");
    assert_eq!(event_data(b"data: x\n\n").unwrap(), b"x");
    assert_eq!(event_data(b"data:\n\n").unwrap(), b"");
    assert_eq!(event_data(b"data: a:b\n\n").unwrap(), b"a:b");
    assert_eq!(event_data(b"data\ndata\n\n").unwrap(), b"\n");
    // Unterminated (a leftover) still parses.
    assert_eq!(event_data(b"data: tail").unwrap(), b"tail");
}

#[test]
fn no_data_field_is_none() {
    assert_eq!(event_data(b": data: no\n\n"), None);
    assert_eq!(event_data(b"event: message\nid: 1\nretry: 5\n\n"), None);
    assert_eq!(event_data(b"Data: x\ndatax: y\n data: z\n\n"), None);
    assert_eq!(event_data(b""), None);
}

// ---------------------------------------------------------------------------------------
// Property tests for the framer

/// One generated SSE line without its terminator.
fn line() -> impl Strategy<Value = String> {
    let value = "[ -~é☃]{0,12}";
    prop_oneof![
        (
            prop::sample::select(vec!["data", "event", "id", "retry", "x-unknown"]),
            prop::sample::select(vec![":", ": ", ""]),
            value,
        )
            .prop_map(|(field, colon, value)| if colon.is_empty() {
                field.to_owned()
            } else {
                format!("{field}{colon}{value}")
            }),
        value.prop_map(|value| format!(":{value}")),
    ]
}

fn terminator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["\n", "\r", "\r\n"])
}

/// A stream as the list of events it is made of plus an unterminated tail, each event
/// built so its intended boundary is the real one.
fn stream() -> impl Strategy<Value = (Vec<String>, String)> {
    let lines = prop::collection::vec((line(), terminator()), 0..4);
    let event = (lines, terminator()).prop_map(|(lines, blank)| {
        let mut event = String::new();
        let mut previous = "";
        for (line, terminator) in lines {
            event.push_str(&line);
            event.push_str(terminator);
            previous = terminator;
        }
        // After a lone "\r", a blank line starting with "\n" would merge into "\r\n".
        event.push_str(if previous == "\r" && blank.starts_with('\n') {
            "\r"
        } else {
            blank
        });
        event
    });
    let tail = (
        prop::collection::vec((line(), terminator()), 0..3),
        line(),
        any::<bool>(),
    )
        .prop_map(|(lines, last, terminated)| {
            let mut tail: String = lines.into_iter().map(|(l, t)| l + t).collect();
            if !tail.is_empty() || terminated {
                // A terminated last line with no blank line after it stays incomplete.
                tail.push_str(&last);
                if terminated {
                    tail.push('\n');
                }
            }
            tail
        });
    (prop::collection::vec(event, 0..8), tail).prop_map(|(mut events, tail)| {
        // An event ending in "\r" followed by a blank-line-only event starting with "\n"
        // would merge into one "\r\n"; make that blank line a "\r" as well.
        for i in 1..events.len() {
            if events[i - 1].ends_with('\r') && events[i].starts_with('\n') {
                events[i] = "\r".to_owned();
            }
        }
        (events, tail)
    })
}

proptest! {
    #[test]
    fn chunking_never_changes_the_events(
        (events, tail) in stream(),
        sizes in prop::collection::vec(1usize..9, 1..8),
    ) {
        let input = format!("{}{tail}", events.concat());
        let expected: Vec<&str> = events.iter().map(String::as_str).collect();
        for eof in [false, true] {
            let (whole, whole_rest) = frame_chunked(input.as_bytes(), &[usize::MAX], eof);
            if eof {
                // Only at the end of input does every generated event come out whole (a
                // final "\r" may otherwise still be waiting for a "\n").
                prop_assert_eq!(&strs(&whole), &expected);
                prop_assert_eq!(&whole_rest[..], tail.as_bytes());
            }
            for sizes in [&sizes[..], &[1]] {
                let (chunked, rest) = frame_chunked(input.as_bytes(), sizes, eof);
                prop_assert_eq!(&chunked, &whole);
                prop_assert_eq!(&rest, &whole_rest);
                let mut joined: Vec<u8> = chunked.iter().flat_map(|e| e.iter().copied()).collect();
                joined.extend_from_slice(&rest);
                prop_assert_eq!(joined, input.as_bytes());
            }
        }
    }

    #[test]
    fn chunking_never_changes_where_the_cap_bites(
        (events, tail) in stream(),
        sizes in prop::collection::vec(1usize..9, 1..8),
        cap in 0usize..40,
    ) {
        let input = format!("{}{tail}", events.concat());
        let run = |sizes: &[usize]| {
            let mut framer = EventFramer::new(cap);
            let mut out = Vec::new();
            let mut rest = input.as_bytes();
            let mut size = sizes.iter().copied().cycle();
            while !rest.is_empty() {
                let n = size.next().unwrap().clamp(1, rest.len());
                framer.push(&rest[..n]);
                rest = &rest[n..];
                loop {
                    match framer.next_event() {
                        Ok(Some(event)) => out.push(Ok(event)),
                        Ok(None) => break,
                        Err(err) => {
                            out.push(Err(err));
                            return out;
                        }
                    }
                }
            }
            out
        };
        let whole = run(&[usize::MAX]);
        prop_assert_eq!(&run(&sizes), &whole);
        prop_assert_eq!(&run(&[1]), &whole);
        let refused = events.iter().any(|e| e.len() > cap) || tail.len() > cap;
        prop_assert_eq!(whole.last().is_some_and(Result::is_err), refused);
    }
}

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
struct Sealer {
    end_after_replace: bool,
    calls: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Sealer {
    fn log(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl EventRewriter for Sealer {
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

    fn fail(&mut self, reason: &'static str) -> Bytes {
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

type TestBody = SseRewriteBody<ScriptBody, Sealer>;

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
    let body = SseRewriteBody::new(inner, Sealer::default(), 1024);
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
    let mut body = Box::pin(SseRewriteBody::new(inner, Sealer::default(), 1024));
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
    let mut body = Box::pin(SseRewriteBody::new(inner, Sealer::default(), 1024));
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
    let sealer = Sealer::default();
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
    let mut body = Box::pin(SseRewriteBody::new(inner, Sealer::default(), 16));
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
    let sealer = Sealer {
        end_after_replace: true,
        ..Sealer::default()
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
        let sealer = Sealer::default();
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
    let sealer = Sealer::default();
    let calls = sealer.calls.clone();
    let mut body = Box::pin(SseRewriteBody::new(inner, sealer, 1024));
    assert_eq!(concat(&drain(&mut body)), "data: a\n\n");
    assert_eq!(*calls.lock().unwrap(), ["rewrite data: a\n\n"]);
}

#[test]
fn trailing_cr_at_end_of_stream_completes_the_event() {
    // Without EOF handling this "\r" would leave the secret response as a leftover.
    let (inner, _, _) = ScriptBody::new(vec![Step::Data(b"data: secret\n\r")]);
    let mut body = Box::pin(SseRewriteBody::new(inner, Sealer::default(), 1024));
    assert_eq!(concat(&drain(&mut body)), "data: sealed\r\n\r\n");
}

#[test]
fn empty_upstream_is_an_empty_body() {
    let (inner, _, _) = ScriptBody::new(vec![Step::Trailers]);
    let mut body = Box::pin(SseRewriteBody::new(inner, Sealer::default(), 1024));
    assert!(!body.is_end_stream());
    assert_eq!(body.size_hint().exact(), None);
    assert!(drain(&mut body).is_empty());
    assert!(body.is_end_stream());
}

#[test]
fn dropping_the_body_drops_the_upstream() {
    let (inner, _, dropped) = ScriptBody::new(vec![Step::Data(PROGRESS), Step::Pending]);
    let mut body = Box::pin(SseRewriteBody::new(inner, Sealer::default(), 1024));
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
    fn fail(&mut self, _: &'static str) -> Bytes {
        Bytes::from_static(b"FAILED")
    }
    fn finish(&mut self, _: &[u8]) -> Rewrite {
        Rewrite::Keep
    }
}

proptest! {
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
