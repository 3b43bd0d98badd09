//! Framing: the upstream receives each request framed one way, and the client its answer
//! in its own HTTP version (an HTTP/1.0 upstream does not set it). HTTP/1.1 framing,
//! attacked with the request-smuggling classes HTTP Garden reported against proxies and
//! the Transfer-Encoding mutations of smuggler's default list (written here from their
//! public descriptions), sent as raw bytes to the sidecar's listener, with a raw capture
//! at the upstream.
//!
//! Each case is either refused (the client reads the stated status, the upstream
//! receives nothing, and the refusal is counted once under its reason, hyper's own
//! refusals included) or normalised: the upstream receives exactly the stated number of
//! requests, each framed by one `Content-Length` that matches its body, no
//! `Transfer-Encoding` or look-alike, the gate's re-serialised JSON as the body, and no
//! byte the capture cannot account for (so no second request hides in the stream).
//!
//! | class | outcome |
//! |---|---|
//! | CL and TE together, either order, with or without a smuggled tail | 400 (the sidecar: `framing`) |
//! | two equal `Content-Length`, or with leading zeros | normalised (one request) |
//! | two different, comma-joined, signed, hex or empty `Content-Length` | 400 (hyper; counted as `framing`) |
//! | `Content-Length: 0` with a body after it | 400 -32700 (the body is empty), then 400 (hyper: the rest is no request) |
//! | TE `chunked` not last, unknown, quoted, empty, `xchunked`, vertical tab | 400 (hyper; counted as `framing`) |
//! | TE `gzip, chunked`, `chunked, chunked`, two TE fields | 400 (the sidecar: `framing`) |
//! | TE `Chunked`, `chunked ` with trailing space or leading tab | normalised |
//! | obs-fold, space before the colon, space or `(` in a name, NUL or bare CR in a value | 400 (hyper; counted as `framing`) |
//! | `Transfer_Encoding` / `Content_Length` look-alikes | 400 (the sidecar: `framing`) |
//! | `Connection` naming `Content-Length` / `Transfer-Encoding` | normalised |
//! | chunk extensions, chunk size with trailing whitespace, trailer fields | normalised (trailers dropped) |
//! | chunk size with leading whitespace, `0x`, `+`, overflowing; chunk longer than its size; LF-only chunk lines; a 20 KiB extension | 400 (`body_read`) |
//! | no CRLF after the last chunk | 408 (`body_timeout`) |
//! | HTTP/1.0 with TE, `http/1.1` in lowercase, `HTTP/1.2`, extra spaces in the request line | 400 (hyper; counted as `framing`) |
//! | `Expect: 100-continue`, `100-Continue`, an unknown expectation | normalised; `Expect` not forwarded |
//! | absolute-form naming another host, or with userinfo | 421 (`misdirected_request`) |
//! | absolute-form naming this host; two allowed `Host` fields | normalised (origin-form, one `Host`) |
//! | asterisk-form (`POST *`, `OPTIONS *`), authority-form (`CONNECT`) | 400 (the sidecar: `framing`) |
//! | GET with a body and a Content-Length | 400 (`body_not_allowed`) |
//! | two requests pipelined after a body | normalised (two requests, two answers) |
//! | empty lines before the request line, `\n`-only line endings | normalised (CRLF upstream) |

use crate::support::capture::{Capture, Exchange, exchange};
use crate::support::fake::{FakeUpstream, Step, tools_call};
use crate::support::http::post_mcp;
use crate::support::sidecar::{self, Sidecar};
use bytes::Bytes;
use mcp_state_guard::facade::error::ErrorKind;
use serde_json::Value;
use std::time::Duration;

const BODY: &str =
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"x":1}}}"#;
/// What a smuggled request would carry: the capture must never see this tool name.
const SMUGGLED_BODY: &str = r#"{"jsonrpc":"2.0","id":666,"method":"tools/call","params":{"name":"smuggled","arguments":{}}}"#;
const QUIET: Duration = Duration::from_millis(300);
const LIMIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The client reads this status first, the upstream receives nothing, and the
    /// refusal is counted once under this reason.
    Refused(u16, ErrorKind),
    /// As `Refused`; then hyper reads the bytes left after the refused request as the
    /// next request and refuses them too (400, `framing`).
    RefusedThenRest(u16, ErrorKind),
    /// The client reads this many 200s and the upstream frames exactly as many requests.
    Normalised(usize),
}
use Expect::{Normalised, Refused, RefusedThenRest};

impl Expect {
    /// The refusals the client reads, in order.
    fn refusals(self) -> Vec<(u16, ErrorKind)> {
        match self {
            Refused(status, kind) => vec![(status, kind)],
            RefusedThenRest(status, kind) => vec![(status, kind), (400, ErrorKind::Framing)],
            Normalised(_) => Vec::new(),
        }
    }
}

/// Refused by hyper's parser before a request exists (counted as `framing` when hyper
/// closes the connection).
fn hyper(status: u16) -> Expect {
    Refused(status, ErrorKind::Framing)
}

/// Parsed by hyper, refused by the sidecar's ingress phase.
fn framing() -> Expect {
    Refused(400, ErrorKind::Framing)
}

/// The request line and the MCP headers, then `extra` header lines (each ending CRLF),
/// then the blank line.
fn head_with(request_line: &str, extra: &str) -> String {
    format!(
        "{request_line}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: t\r\n{extra}\r\n"
    )
}

fn head(extra: &str) -> String {
    head_with("POST /mcp HTTP/1.1", extra)
}

fn cl(n: usize) -> String {
    format!("Content-Length: {n}\r\n")
}

/// `body` in one chunk, with `size` as the chunk-size line, then the last chunk.
fn chunked_as(size: &str, body: &str) -> String {
    format!("{size}\r\n{body}\r\n0\r\n\r\n")
}

fn chunked(body: &str) -> String {
    chunked_as(&format!("{:x}", body.len()), body)
}

/// A whole, valid request (Content-Length framing) for the smuggled body.
fn smuggled_request() -> String {
    head(&cl(SMUGGLED_BODY.len())) + SMUGGLED_BODY
}

fn cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    let n = BODY.len();
    let te = |value: &str| format!("Transfer-Encoding: {value}\r\n");
    let with_te = |value: &str| head(&te(value)) + &chunked(BODY);
    let smuggled = smuggled_request();
    let mut cases: Vec<(&'static str, String, Expect)> = vec![
        // The controls: both framings, well-formed.
        (
            "control: content-length",
            head(&cl(n)) + BODY,
            Normalised(1),
        ),
        ("control: chunked", with_te("chunked"), Normalised(1)),
        // CL + TE.
        (
            "CL then TE",
            head(&(cl(n) + &te("chunked"))) + &chunked(BODY),
            framing(),
        ),
        (
            "TE then CL",
            head(&(te("chunked") + &cl(n))) + &chunked(BODY),
            framing(),
        ),
        (
            "CL.TE: a tail after the last chunk, inside Content-Length",
            {
                let chunks = chunked(BODY) + &smuggled;
                head(&(cl(chunks.len()) + &te("chunked"))) + &chunks
            },
            framing(),
        ),
        (
            "TE.CL: Content-Length covers the first chunk only",
            head(&(te("chunked") + &cl(4))) + &chunked(BODY) + &smuggled,
            framing(),
        ),
        // Content-Length variants.
        (
            "two equal Content-Length",
            head(&(cl(n) + &cl(n))) + BODY,
            Normalised(1),
        ),
        (
            "two different Content-Length",
            head(&(cl(n) + &cl(n + 1))) + BODY + " ",
            hyper(400),
        ),
        (
            "comma-joined Content-Length",
            head(&format!("Content-Length: {n}, {n}\r\n")) + BODY,
            hyper(400),
        ),
        (
            "Content-Length with a plus sign",
            head(&format!("Content-Length: +{n}\r\n")) + BODY,
            hyper(400),
        ),
        (
            "Content-Length in hex",
            head(&format!("Content-Length: 0x{n:x}\r\n")) + BODY,
            hyper(400),
        ),
        (
            "empty Content-Length",
            head("Content-Length: \r\n") + BODY,
            hyper(400),
        ),
        // Transfer-Encoding values.
        (
            "TE chunked, identity",
            with_te("chunked, identity"),
            hyper(400),
        ),
        ("TE gzip, chunked", with_te("gzip, chunked"), framing()),
        (
            "TE chunked, chunked",
            with_te("chunked, chunked"),
            framing(),
        ),
        (
            "two TE fields",
            head(&(te("chunked") + &te("chunked"))) + &chunked(BODY),
            framing(),
        ),
        ("TE identity", with_te("identity"), hyper(400)),
        ("TE Chunked", with_te("Chunked"), Normalised(1)),
        (
            "TE chunked + trailing space",
            with_te("chunked "),
            Normalised(1),
        ),
        ("TE tab + chunked", with_te("\tchunked"), Normalised(1)),
        ("TE xchunked", with_te("xchunked"), hyper(400)),
        (
            "TE chunked + vertical tab",
            with_te("chunked\x0b"),
            hyper(400),
        ),
        ("TE quoted", with_te("\"chunked\""), hyper(400)),
        ("TE empty", with_te(""), hyper(400)),
        (
            "TE folded onto a continuation line (obs-fold)",
            head("Transfer-Encoding:\r\n chunked\r\n") + &chunked(BODY),
            hyper(400),
        ),
        (
            "space before the colon",
            head("Transfer-Encoding : chunked\r\n") + &chunked(BODY),
            hyper(400),
        ),
        (
            "Transfer_Encoding look-alike, with Content-Length",
            head(&(cl(n) + "Transfer_Encoding: chunked\r\n")) + BODY,
            framing(),
        ),
        (
            "Content_Length look-alike, chunked",
            head(&(te("chunked") + "Content_Length: 4\r\n")) + &chunked(BODY),
            framing(),
        ),
        (
            "NUL in a header value",
            head(&(cl(n) + "X-Note: a\0b\r\n")) + BODY,
            hyper(400),
        ),
        (
            "bare CR in a header value",
            head(&(cl(n) + "X-Note: a\rb\r\n")) + BODY,
            hyper(400),
        ),
        (
            "space in a header name",
            head(&(cl(n) + "Content Length: 4\r\n")) + BODY,
            hyper(400),
        ),
        (
            "non-token byte in a header name",
            head(&(cl(n) + "X(Note: 1\r\n")) + BODY,
            hyper(400),
        ),
        // Chunk framing.
        (
            "chunk extension",
            head(&te("chunked")) + &chunked_as(&format!("{:x};ext=\"v\"", n), BODY),
            Normalised(1),
        ),
        (
            "chunk size with trailing whitespace",
            head(&te("chunked")) + &chunked_as(&format!("{:x} \t", n), BODY),
            Normalised(1),
        ),
        (
            "chunk size with leading whitespace",
            head(&te("chunked")) + &chunked_as(&format!(" {:x}", n), BODY),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "chunk size with 0x",
            head(&te("chunked")) + &chunked_as(&format!("0x{:x}", n), BODY),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "chunk size with +",
            head(&te("chunked")) + &chunked_as(&format!("+{:x}", n), BODY),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "chunk size overflowing 64 bits",
            head(&te("chunked")) + &chunked_as(&format!("1{:016x}", n), BODY),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "no CRLF after the last chunk",
            head(&te("chunked")) + &format!("{:x}\r\n{BODY}\r\n0\r\n", n),
            Refused(408, ErrorKind::BodyTimeout),
        ),
        (
            "HTTP/1.0 with TE",
            head_with("POST /mcp HTTP/1.0", &te("chunked")) + &chunked(BODY),
            hyper(400),
        ),
        // Expectations.
        (
            "Expect: 100-continue",
            head(&(cl(n) + "Expect: 100-continue\r\n")) + BODY,
            Normalised(1),
        ),
        (
            "Expect: 100-Continue",
            head(&(cl(n) + "Expect: 100-Continue\r\n")) + BODY,
            Normalised(1),
        ),
        (
            "Expect: an unknown expectation",
            head(&(cl(n) + "Expect: 200-ok\r\n")) + BODY,
            Normalised(1),
        ),
        // Targets and methods.
        (
            "absolute-form naming another host",
            head_with("POST http://evil.example/mcp HTTP/1.1", &cl(n)) + BODY,
            Refused(421, ErrorKind::MisdirectedRequest),
        ),
        (
            "absolute-form naming this host",
            head_with("POST http://127.0.0.1/mcp HTTP/1.1", &cl(n)) + BODY,
            Normalised(1),
        ),
        (
            "GET with a body and a Content-Length",
            head_with("GET /mcp HTTP/1.1", &cl(n)) + BODY,
            Refused(400, ErrorKind::BodyNotAllowed),
        ),
        (
            "two requests pipelined after a body",
            head(&cl(n)) + BODY + &head(&cl(n)) + BODY,
            Normalised(2),
        ),
        (
            "extra spaces in the request line",
            head_with("POST  /mcp HTTP/1.1", &cl(n)) + BODY,
            hyper(400),
        ),
        (
            "empty lines before the request line",
            "\r\n\r\n".to_owned() + &head(&cl(n)) + BODY,
            Normalised(1),
        ),
        (
            "lowercase version",
            head_with("POST /mcp http/1.1", &cl(n)) + BODY,
            hyper(400),
        ),
        (
            "HTTP/1.2",
            head_with("POST /mcp HTTP/1.2", &cl(n)) + BODY,
            hyper(400),
        ),
        (
            "two Host fields",
            head(&(cl(n) + "Host: localhost\r\n")) + BODY,
            Normalised(1),
        ),
        (
            "Content-Length with leading zeros",
            head(&format!("Content-Length: 000{n}\r\n")) + BODY,
            Normalised(1),
        ),
        (
            "Content-Length: 0 with the body after it",
            head(&cl(0)) + BODY,
            RefusedThenRest(400, ErrorKind::Parse),
        ),
        (
            "chunk longer than its size",
            head(&te("chunked")) + &chunked_as(&format!("{:x}", n - 1), BODY),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "LF-only chunk lines",
            head(&te("chunked")) + &chunked(BODY).replace("\r\n", "\n"),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "trailer fields after the last chunk",
            head(&te("chunked"))
                + &format!("{n:x}\r\n{BODY}\r\n0\r\nX-Trailer: 1\r\nContent-Length: 4\r\n\r\n"),
            Normalised(1),
        ),
        (
            "a 20 KiB chunk extension",
            head(&te("chunked")) + &chunked_as(&format!("{n:x};x={}", "a".repeat(20 * 1024)), BODY),
            Refused(400, ErrorKind::BodyRead),
        ),
        (
            "Connection naming Content-Length",
            head(&(cl(n) + "Connection: content-length, transfer-encoding\r\n")) + BODY,
            Normalised(1),
        ),
        (
            "absolute-form with userinfo",
            head_with("POST http://a@127.0.0.1/mcp HTTP/1.1", &cl(n)) + BODY,
            Refused(421, ErrorKind::MisdirectedRequest),
        ),
        (
            "asterisk-form target",
            head_with("POST * HTTP/1.1", &cl(n)) + BODY,
            framing(),
        ),
        (
            "OPTIONS asterisk-form",
            head_with("OPTIONS * HTTP/1.1", ""),
            framing(),
        ),
        (
            "CONNECT authority-form",
            head_with("CONNECT 127.0.0.1:80 HTTP/1.1", ""),
            framing(),
        ),
        (
            "LF-only line endings",
            (head(&cl(n)) + BODY).replace("\r\n", "\n"),
            Normalised(1),
        ),
    ];
    cases.sort_by_key(|(name, ..)| *name);
    cases
        .into_iter()
        .map(|(name, bytes, expect)| (name, bytes.into_bytes(), expect))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn framing_attacks_are_refused_or_normalised() {
    let capture = Capture::start().await;
    let mut config = sidecar::config(&capture.base_url());
    config.timeouts.body_read_ms = 500;
    let sidecar = Sidecar::start(config).await;
    let metrics = sidecar.metrics().clone();
    let sent: Value = serde_json::from_str(BODY).unwrap();
    let cases = cases();
    assert_eq!(cases.len(), 64, "the table above counts them");
    let mut failures = Vec::new();
    for (name, bytes, expect) in cases {
        let (before, refused) = (capture.count(), total(&metrics));
        let refusals = expect.refusals();
        let kinds_before: Vec<u64> = refusals
            .iter()
            .map(|(_, kind)| metrics.refusals.refused_count(*kind))
            .collect();
        let expected_answers = match expect {
            Normalised(n) => n,
            _ => refusals.len(),
        };
        let got = exchange(sidecar.addr, &bytes, expected_answers, QUIET, LIMIT).await;
        // hyper's own refusals are counted when the connection task ends, just after the
        // client read the close.
        for _ in 0..100 {
            if total(&metrics) >= refused + refusals.len() as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let check = || -> Result<(), String> {
            let framed = capture.requests().split_off(before);
            if capture.leftover() != 0 || !capture.violations().is_empty() {
                return Err(format!(
                    "unframed bytes upstream: {} left over, {:?}",
                    capture.leftover(),
                    capture.violations()
                ));
            }
            match expect {
                Refused(..) | RefusedThenRest(..) => {
                    let statuses: Vec<u16> = refusals.iter().map(|(status, _)| *status).collect();
                    if got.statuses != statuses {
                        return Err(format!("expected {statuses:?}, got {}", show(&got)));
                    }
                    if !framed.is_empty() {
                        return Err(format!("refused, yet forwarded {framed:?}"));
                    }
                    let counted = total(&metrics) - refused;
                    for ((_, kind), before) in refusals.iter().zip(&kinds_before) {
                        let times = refusals.iter().filter(|(_, k)| k == kind).count() as u64;
                        if counted != refusals.len() as u64
                            || metrics.refusals.refused_count(*kind) != before + times
                        {
                            return Err(format!("counted {counted}, expected {refusals:?}"));
                        }
                    }
                    Ok(())
                }
                Normalised(n) => {
                    if got.statuses != vec![200; n] {
                        return Err(format!("expected {n} × 200, got {}", show(&got)));
                    }
                    if framed.len() != n {
                        return Err(format!("{} requests upstream, expected {n}", framed.len()));
                    }
                    for request in &framed {
                        let body: Value = serde_json::from_slice(&request.body)
                            .map_err(|e| format!("upstream body not JSON: {e}"))?;
                        if body != sent || request.method != "POST" || request.target != "/mcp" {
                            return Err(format!("upstream got {request:?}"));
                        }
                        let lengths = request.all("content-length");
                        if lengths != [request.body.len().to_string().as_bytes()] {
                            return Err(format!("content-length {lengths:?}"));
                        }
                        for (header, _) in &request.headers {
                            let folded = header.replace('_', "-");
                            let framing = ["transfer-encoding", "content-length", "expect"];
                            if framing.contains(&folded.as_str()) && header != "content-length" {
                                return Err(format!("forwarded {header}"));
                            }
                        }
                    }
                    Ok(())
                }
            }
        };
        if let Err(e) = check() {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The sidecar still serves.
    let control = head(&cl(BODY.len())) + BODY;
    let got = exchange(sidecar.addr, control.as_bytes(), 1, QUIET, LIMIT).await;
    assert_eq!(got.statuses, [200], "{}", show(&got));
    sidecar.stop().await;
}

fn show(got: &Exchange) -> String {
    format!(
        "{:?} (closed: {}): {}",
        got.statuses,
        got.closed,
        String::from_utf8_lossy(&got.raw)
    )
}

fn total(metrics: &mcp_state_guard::facade::app::Metrics) -> u64 {
    ErrorKind::ALL
        .iter()
        .map(|k| metrics.refusals.refused_count(*k))
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_1_0_upstream_does_not_set_the_clients_version() {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
    let raw = format!(
        "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let fake = FakeUpstream::raw(vec![Step::Data(Bytes::from(raw))], false).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.version, http::Version::HTTP_11);
    assert_eq!(reply.json()["result"]["content"], serde_json::json!([]));
    sidecar.stop().await;
}
