//! Tests of the outbound classification: labels, first bytes, statuses.

use super::head::label_of;
use super::*;
use crate::mcp::json_like;
use http::{HeaderMap, HeaderValue};

#[test]
fn what_opens_like_json() {
    for yes in [
        &b"{"[..],
        b"  \r\n[1]",
        b"\xef\xbb\xbf{}",
        b"\xff\xfe{\x00",
        b"\x00{",
    ] {
        assert_eq!(json_like(yes), Some(true), "{yes:?}");
    }
    for no in [
        &b"<html>"[..],
        b"Invalid Origin header",
        b" x",
        b"\xef\xbd\x88",
    ] {
        assert_eq!(json_like(no), Some(false), "{no:?}");
    }
    for undecided in [&b""[..], b"  \n", b"\xef", b"\xef\xbb"] {
        assert_eq!(json_like(undecided), None, "{undecided:?}");
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

/// The two exact spellings read without the rules read as the rules read them.
#[test]
fn the_common_types_read_as_the_rules_read_them() {
    for (value, expected) in [
        ("application/json", BodyLabel::Json),
        ("text/event-stream", BodyLabel::EventStream),
    ] {
        let rules = label_of(&HeaderValue::from_static(value));
        assert_eq!(rules, expected, "{value}");
        assert_eq!(
            AnswerHead::read(&headers(&[("content-type", value)])).label,
            rules,
            "{value}"
        );
    }
}

#[test]
fn labels() {
    let of = |pairs: &[(&str, &str)]| AnswerHead::read(&headers(pairs)).label;
    assert_eq!(of(&[("content-type", "application/json")]), BodyLabel::Json);
    assert_eq!(
        of(&[("content-type", "application/problem+json")]),
        BodyLabel::Json
    );
    assert_eq!(
        of(&[("content-type", "text/event-stream")]),
        BodyLabel::EventStream
    );
    assert_eq!(of(&[("content-type", "text/html")]), BodyLabel::Other);
    assert_eq!(of(&[]), BodyLabel::Other);
    // Read as clients read them: case-blind, the charset too.
    assert_eq!(
        of(&[("content-type", " Application/JSON; Charset=UTF-8")]),
        BodyLabel::Json
    );
    assert_eq!(
        of(&[("content-type", "TEXT/Event-Stream")]),
        BodyLabel::EventStream
    );
    assert_eq!(
        of(&[("content-type", "Application/Json; charset=UTF-16")]),
        BodyLabel::Unreadable
    );
    assert_eq!(
        of(&[("content-type", "application/json; charset=utf-16")]),
        BodyLabel::Unreadable
    );
    assert_eq!(
        of(&[("content-type", "text/x-json")]),
        BodyLabel::Unreadable
    );
    assert_eq!(
        of(&[
            ("content-type", "text/plain"),
            ("content-type", "application/json")
        ]),
        BodyLabel::Unreadable
    );
    assert_eq!(
        of(&[
            ("content-type", "text/plain"),
            ("content-type", "text/html")
        ]),
        BodyLabel::Other
    );
}

#[test]
fn transfer_codings() {
    let chunked_only = |h: &HeaderMap| AnswerHead::read(h).chunked_only;
    assert!(chunked_only(&headers(&[])));
    assert!(chunked_only(&headers(&[("transfer-encoding", "Chunked")])));
    assert!(!chunked_only(&headers(&[(
        "transfer-encoding",
        "gzip, chunked"
    )])));
    assert!(!chunked_only(&headers(&[
        ("transfer-encoding", "chunked"),
        ("transfer-encoding", "br")
    ])));
}
