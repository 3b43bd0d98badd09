//! A connection fact: whether a request head on it named both `Content-Length` and
//! `Transfer-Encoding`, seen in the connection's own bytes (hyper keeps no trace of it);
//! the ingress phase refuses every request of such a connection.
//!
//! Invariant: the scan reads every byte the server reads, in any chunking, and sets
//! [`MixedFraming`] exactly when one head has both lines; it stops at the first hit and
//! on an HTTP/2 connection.

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
pub(crate) struct MixedFraming(Arc<AtomicBool>);

impl MixedFraming {
    pub(crate) fn seen(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Record that a head named both.
    pub(crate) fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
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
pub(crate) struct FramingScan {
    seen: MixedFraming,
    /// The current line's first bytes, lowercased, without `\r`.
    line: [u8; SCAN_LINE],
    kept: usize,
    /// Whether the current line has a byte other than `\r` (a blank line ends a head).
    content: bool,
    /// The current line's first kept byte starts none of the names: nothing of it is
    /// kept (it matches nothing; `kept` stays 0).
    passed: bool,
    first_line: bool,
    content_length: bool,
    transfer_encoding: bool,
    done: bool,
}

impl FramingScan {
    pub(crate) fn new(seen: MixedFraming) -> Self {
        Self {
            seen,
            line: [0; SCAN_LINE],
            kept: 0,
            content: false,
            passed: false,
            first_line: true,
            content_length: false,
            transfer_encoding: false,
            done: false,
        }
    }

    /// Bytes that arrived from the client, in order. Lines are found with `memchr`, and
    /// only a line's first `SCAN_LINE` bytes are looked at: a body costs a scan for
    /// newlines, not a step per byte.
    pub(crate) fn read(&mut self, mut bytes: &[u8]) {
        while !self.done && !bytes.is_empty() {
            let end = memchr::memchr(b'\n', bytes);
            // A line whose first kept byte starts none of the three names (most header
            // lines, and a body's) is a line with content and nothing more: all that
            // matters of it is where it ends, and it ends as `end_line` ends such a
            // line (no name seen, the first line over).
            if self.passed || self.kept == 0 && starts_no_name(bytes[0]) {
                let Some(end) = end else {
                    self.passed = true;
                    self.content = true;
                    return;
                };
                self.first_line = false;
                self.content = false;
                self.passed = false;
                bytes = &bytes[end + 1..];
                continue;
            }
            match end {
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

    /// A piece of the current line (no `\n` in it) that [`FramingScan::read`] did not
    /// pass over: its first bytes kept lowercased, `\r` left out.
    fn take(&mut self, piece: &[u8]) {
        let room = SCAN_LINE - self.kept;
        // A line's `\r` is its last byte as a rule: left out first (it is never kept),
        // so the bytes before it are the common piece below.
        let body = piece.strip_suffix(b"\r").unwrap_or(piece);
        let head = &body[..body.len().min(room)];
        // The common piece: no `\r` among the bytes that fit, all of them kept.
        if !head.contains(&b'\r') {
            for (kept, byte) in self.line[self.kept..].iter_mut().zip(head) {
                *kept = byte.to_ascii_lowercase();
            }
            self.kept += head.len();
            self.content |= !head.is_empty();
            return;
        }
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
                self.seen.mark();
                self.done = true;
            }
        }
        self.kept = 0;
        self.content = false;
        self.passed = false;
    }
}

/// Whether a line whose first kept byte is `byte` is a line with content that starts
/// none of the names the scan looks for (`content-length:`, `transfer-encoding:`, the
/// HTTP/2 preface's `pri`). A `\r` is never kept, so it decides nothing; a `\n` ends
/// the line before it has any content (a blank line ends a head).
fn starts_no_name(byte: u8) -> bool {
    !matches!(byte, b'\r' | b'\n') && !matches!(byte | 0x20, b'c' | b't' | b'p')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Rng;
    use proptest::test_runner::{RngAlgorithm, TestRng};

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
            // A `\r` inside a line is left out, wherever the pieces part.
            head("Con\rtent-Length: 5\r\nTransfer-Encoding\r\r: chunked\r\n"),
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
        for step in [1, 3, 7, 16, 17, 18, 19, 1000] {
            for bytes in &mixed {
                assert!(scanned(bytes.as_bytes(), step), "{bytes:?}");
            }
            for bytes in &clean {
                assert!(!scanned(bytes.as_bytes(), step), "{bytes:?}");
            }
        }
    }

    /// The scan's verdict as the ended lines spell it: every `\r` left out, lines lowercased,
    /// a blank line ending a head, an HTTP/2 preface as the first line ending the scan.
    fn model(bytes: &[u8]) -> bool {
        // Only ended lines count: the last piece has no `\n` after it yet.
        let ended = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        let lines = bytes[..ended].split_inclusive(|&b| b == b'\n').map(|line| {
            let line = &line[..line.len() - 1];
            let kept: Vec<u8> = line.iter().filter(|&&b| b != b'\r').copied().collect();
            kept.to_ascii_lowercase()
        });
        let (mut length, mut encoding) = (false, false);
        for (i, line) in lines.enumerate() {
            if i == 0 && line.starts_with(b"pri * http/2.0") {
                return false;
            }
            if line.is_empty() {
                (length, encoding) = (false, false);
                continue;
            }
            length |= line.starts_with(b"content-length:");
            encoding |= line.starts_with(b"transfer-encoding:");
            if length && encoding {
                return true;
            }
        }
        false
    }

    /// Random streams of the pieces that matter (the two names, `\r` anywhere, line
    /// ends, filler) agree with [`model`] in every chunking: the `\r` at a line's end
    /// and those inside it, wherever a read parts them.
    #[test]
    fn the_scan_agrees_with_the_lines_in_any_chunking() {
        const PIECES: [&[u8]; 9] = [
            b"Content-Length:",
            b"TRANSFER-ENCODING:",
            b"transfer-encodin",
            b"\r",
            b"\n",
            b"\r\n",
            b"x",
            b" 5",
            b"PRI * HTTP/2.0",
        ];
        // The same draws on every run (proptest's fixed seed).
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut next = move || rng.next_u64();
        let (mut hits, mut misses) = (0, 0);
        for _ in 0..3000 {
            let len = 1 + next() % 24;
            let bytes: Vec<u8> = (0..len)
                .flat_map(|_| {
                    PIECES[(next() % PIECES.len() as u64) as usize]
                        .iter()
                        .copied()
                })
                .collect();
            let expected = model(&bytes);
            if expected {
                hits += 1
            } else {
                misses += 1
            }
            for step in [1, 2, 5, 17, 18, 19, 64] {
                assert_eq!(
                    scanned(&bytes, step),
                    expected,
                    "{:?} in steps of {step}",
                    String::from_utf8_lossy(&bytes)
                );
            }
        }
        assert!(hits > 100 && misses > 100, "{hits} hits, {misses} misses");
    }
}
