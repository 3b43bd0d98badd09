//! `EventFramer` and `event_data` tests, unit and property.
use super::*;

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
pub(super) fn stream() -> impl Strategy<Value = (Vec<String>, String)> {
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
    // Failures become named unit tests, not regression files outside `src/`.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

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

#[test]
fn one_data_line_is_borrowed_where_it_stands() {
    let event = b"event: message\r\ndata: {\"a\":1}\r\n\r\n";
    let data = event_data_at(event).unwrap();
    assert_eq!((&data.bytes[..], data.at), (&b"{\"a\":1}"[..], Some(22)));
    assert!(matches!(data.bytes, std::borrow::Cow::Borrowed(_)));
    let data = event_data_at(b"id: 1\ndata\n\n").unwrap();
    assert_eq!((&data.bytes[..], data.at), (&b""[..], Some(10)));
    // Several data lines are joined, and stand nowhere in the event as one.
    let data = event_data_at(b"data: {\"a\":\ndata: 1}\n\n").unwrap();
    assert_eq!((&data.bytes[..], data.at), (&b"{\"a\":\n1}"[..], None));
}

// ---------------------------------------------------------------------------------------
// replace_data

#[test]
fn replace_data_keeps_other_lines_and_endings() {
    let event = b"event: message\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n";
    assert_eq!(
        &replace_data(event, b"{\"b\":2}")[..],
        b"event: message\r\nid: 7\r\ndata: {\"b\":2}\r\n\r\n"
    );
    let event = b": c\ndata:x\n\n";
    assert_eq!(&replace_data(event, b"y")[..], b": c\ndata: y\n\n");
    let event = b"data: x";
    assert_eq!(&replace_data(event, b"y")[..], b"data: y\r\n");
    let event = b"data\rretry: 5\r\r";
    assert_eq!(&replace_data(event, b"y")[..], b"data: y\rretry: 5\r\r");
    // Data read from several lines keeps them: a line break inside it is no field.
    let event = b"data: {\"a\":\ndata: 1}\n\n";
    assert_eq!(
        &replace_data(event, b"{\"a\":\n2}")[..],
        b"data: {\"a\":\ndata: 2}\n\n"
    );
}
