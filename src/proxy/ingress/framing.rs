//! Part of the ingress phase: is a request's HTTP/1.1 framing one that the sidecar and
//! every parser behind it read alike. [`FramingScan`] watches a connection's bytes for a
//! head naming both `Content-Length` and `Transfer-Encoding` (hyper keeps no trace of
//! it), and [`check_framing`] refuses what the scan saw and the ambiguous spellings hyper
//! lets through.

use crate::error::ProxyError;
use http::header::{self, HeaderName};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set on a connection once a request head on it named both `Content-Length` and
/// `Transfer-Encoding`; every request of the connection carries it as an extension.
///
/// hyper follows RFC 9112 §6.1's other option for such a request (frame the body by
/// `Transfer-Encoding` alone, drop `Content-Length`, close after answering), which leaves
/// no trace of the `Content-Length` in the request the sidecar sees; a front proxy that
/// framed the same bytes by `Content-Length` disagrees about where the body ends, the
/// classic CL.TE / TE.CL desync. The sidecar refuses the request instead (nginx does
/// since 1.21.1), so it learns of the head from [`FramingScan`]. hyper reads ahead, so a
/// request whose check runs after a head pipelined behind it tripped the scan is refused
/// too: failing closed, on the connection of the client that sent the ambiguous head.
#[derive(Debug, Clone, Default)]
pub struct MixedFraming(Arc<AtomicBool>);

impl MixedFraming {
    pub fn seen(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The longest header-name prefix the scan compares: `transfer-encoding:`.
const SCAN_LINE: usize = 18;

/// Reads a connection's bytes as the server receives them and sets [`MixedFraming`] when
/// one block of lines (a head: no blank line inside) has a line starting
/// `content-length:` and one starting `transfer-encoding:`, the only spellings hyper
/// takes for either (no space before the colon, no folding). Body bytes are scanned too:
/// a JSON body cannot hold such a line (raw line breaks are only whitespace between
/// tokens, and a chunk-size line starts with a hex digit), so only a client that sends
/// non-JSON bytes of that shape can trip it, and only on its own connection. Stops at
/// the first hit, and on an HTTP/2 connection (its first line is the preface's).
#[derive(Debug)]
pub struct FramingScan {
    seen: MixedFraming,
    /// The current line's first bytes, lowercased, without `\r`.
    line: [u8; SCAN_LINE],
    kept: usize,
    /// Whether the current line has a byte other than `\r` (a blank line ends a head).
    content: bool,
    first_line: bool,
    content_length: bool,
    transfer_encoding: bool,
    done: bool,
}

impl FramingScan {
    pub fn new(seen: MixedFraming) -> Self {
        Self {
            seen,
            line: [0; SCAN_LINE],
            kept: 0,
            content: false,
            first_line: true,
            content_length: false,
            transfer_encoding: false,
            done: false,
        }
    }

    /// Bytes that arrived from the client, in order. Lines are found with `memchr`, and
    /// only a line's first `SCAN_LINE` bytes are looked at: a body costs a scan for
    /// newlines, not a step per byte.
    pub fn read(&mut self, mut bytes: &[u8]) {
        while !self.done && !bytes.is_empty() {
            match memchr::memchr(b'\n', bytes) {
                Some(end) => {
                    self.take(&bytes[..end]);
                    self.end_line();
                    bytes = &bytes[end + 1..];
                }
                None => {
                    self.take(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// A piece of the current line (no `\n` in it): its first bytes kept lowercased,
    /// `\r` left out.
    fn take(&mut self, piece: &[u8]) {
        for &byte in piece {
            if self.kept == SCAN_LINE {
                return;
            }
            if byte != b'\r' {
                self.line[self.kept] = byte.to_ascii_lowercase();
                self.kept += 1;
                self.content = true;
            }
        }
    }

    fn end_line(&mut self) {
        let line = &self.line[..self.kept];
        if std::mem::take(&mut self.first_line) && line.starts_with(b"pri * http/2.0") {
            self.done = true;
        } else if !self.content {
            self.content_length = false;
            self.transfer_encoding = false;
        } else {
            self.content_length |= line.starts_with(b"content-length:");
            self.transfer_encoding |= line.starts_with(b"transfer-encoding:");
            if self.content_length && self.transfer_encoding {
                self.seen.0.store(true, Ordering::Relaxed);
                self.done = true;
            }
        }
        self.kept = 0;
        self.content = false;
    }
}

/// The request's framing is one the sidecar and every parser behind it read alike: no
/// `Content-Length` beside `Transfer-Encoding` (see [`MixedFraming`]); a
/// `Transfer-Encoding`, if any, that is one field saying exactly `chunked` (hyper decodes
/// one `chunked` and keeps the codings before it, so `gzip, chunked` or `chunked, chunked`
/// would reach the gate still encoded); and no `_` spelling of a header the sidecar
/// reads ([`READ_HEADERS`]: `Transfer_Encoding`, `Mcp_Name`, `Idempotency_Key`, ...),
/// which WSGI and CGI servers read as the real field (`Transfer_Encoding` and
/// `Transfer-Encoding` both become `HTTP_TRANSFER_ENCODING`): the upstream would act on a
/// value the sidecar never checked. hyper itself refuses the
/// rest with 400: a `chunked` that is not last, differing or malformed lengths, HTTP/1.0
/// with a coding.
///
/// A target must be a path (origin- or absolute-form): the asterisk-form (`POST *`) and
/// authority-form (`CONNECT host:port`) name no resource under the upstream's base path.
/// The headers with a `-` in their name that the sidecar reads (framing, the body's
/// type and coding, the MCP routing headers it checks against the body, the idempotency
/// key). The identity header has its own rule (`auth::header`), and forwarding headers
/// theirs (`ingress`), both in every `_` spelling.
const READ_HEADERS: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "content-type",
    "content-encoding",
    "mcp-method",
    "mcp-name",
    "idempotency-key",
];

pub fn check_framing(parts: &http::request::Parts) -> Result<(), ProxyError> {
    if !parts.uri.path().starts_with('/') {
        return Err(ProxyError::Framing("request target is not a path"));
    }
    if parts
        .extensions
        .get::<MixedFraming>()
        .is_some_and(MixedFraming::seen)
    {
        return Err(ProxyError::Framing("Content-Length with Transfer-Encoding"));
    }
    let look_alike = |name: &HeaderName| {
        let name = name.as_str();
        name.contains('_') && READ_HEADERS.contains(&name.replace('_', "-").as_str())
    };
    if parts.headers.keys().any(look_alike) {
        return Err(ProxyError::Framing(
            "an `_` spelling of a header the sidecar reads",
        ));
    }
    let mut codings = parts.headers.get_all(header::TRANSFER_ENCODING).iter();
    match (codings.next(), codings.next()) {
        (None, _) => Ok(()),
        (Some(one), None) if one.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(()),
        (Some(_), None) => Err(ProxyError::Framing("a transfer coding other than chunked")),
        (Some(_), Some(_)) => Err(ProxyError::Framing("Transfer-Encoding repeated")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn scanned(bytes: &[u8], step: usize) -> bool {
        let seen = MixedFraming::default();
        let mut scan = FramingScan::new(seen.clone());
        bytes.chunks(step).for_each(|piece| scan.read(piece));
        seen.seen()
    }

    #[test]
    fn the_scan_spots_content_length_beside_transfer_encoding_in_one_head() {
        let head = |lines: &str| format!("POST /mcp HTTP/1.1\r\nHost: h\r\n{lines}\r\n");
        let mixed = [
            head("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
            head("transfer-encoding: chunked\r\nX: 1\r\ncontent-length: 5\r\n"),
            head("TRANSFER-ENCODING:chunked\nCONTENT-LENGTH:5\n"),
            // The second request of a connection.
            head("Content-Length: 2\r\n")
                + "{}"
                + &head("Content-Length: 5\r\nTransfer-Encoding: x\r\n"),
        ];
        let clean = [
            head("Content-Length: 5\r\n") + "{\r\n\r\n}",
            head("Transfer-Encoding: chunked\r\n") + "2\r\n{}\r\n0\r\ncontent-length: 5\r\n\r\n",
            head("Content_Length: 5\r\nTransfer-Encoding: chunked\r\n"),
            head("X-Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\ncontent-length:\ntransfer-encoding:\n".to_owned(),
        ];
        for step in [1, 3, 1000] {
            for bytes in &mixed {
                assert!(scanned(bytes.as_bytes(), step), "{bytes:?}");
            }
            for bytes in &clean {
                assert!(!scanned(bytes.as_bytes(), step), "{bytes:?}");
            }
        }
    }

    #[test]
    fn transfer_codings_other_than_one_chunked_are_refused() {
        let parts = |codings: &[&str], mixed: bool| {
            let mut builder = http::Request::builder().uri("/mcp");
            for coding in codings {
                builder = builder.header(header::TRANSFER_ENCODING, *coding);
            }
            let seen = MixedFraming::default();
            seen.0.store(mixed, Ordering::Relaxed);
            builder.extension(seen).body(()).unwrap().into_parts().0
        };
        assert!(check_framing(&parts(&[], false)).is_ok());
        let mut asterisk = parts(&[], false);
        asterisk.uri = http::Uri::from_static("*");
        assert!(check_framing(&asterisk).is_err());
        assert!(check_framing(&parts(&["chunked"], false)).is_ok());
        assert!(check_framing(&parts(&["Chunked "], false)).is_ok());
        for codings in [
            &["gzip, chunked"][..],
            &["chunked, chunked"],
            &["chunked", "chunked"],
        ] {
            assert!(
                check_framing(&parts(codings, false)).is_err(),
                "{codings:?}"
            );
        }
        assert!(check_framing(&parts(&["chunked"], true)).is_err());
        let mut look_alike = parts(&["chunked"], false);
        look_alike
            .headers
            .insert("content_length", HeaderValue::from_static("4"));
        assert!(check_framing(&look_alike).is_err());
        // Every header the sidecar reads, in its `_` spelling, alone.
        for name in READ_HEADERS {
            let mut look_alike = parts(&[], false);
            let spelled = name.replace('-', "_");
            look_alike.headers.insert(
                HeaderName::from_bytes(spelled.as_bytes()).unwrap(),
                HeaderValue::from_static("x"),
            );
            assert!(check_framing(&look_alike).is_err(), "{spelled}");
        }
        let mut unrelated = parts(&[], false);
        unrelated
            .headers
            .insert("x_custom_thing", HeaderValue::from_static("x"));
        assert!(check_framing(&unrelated).is_ok());
        assert!(check_framing(&parts(&[], true)).is_err());
    }
}
