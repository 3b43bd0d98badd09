//! Lines from a child's pipe, each at most a configured size: a longer line is refused
//! without ever being held whole (what came past the bound is read and discarded up to
//! the next newline), and only its first bytes are kept, so the message it would have
//! been can still be named.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// How much of an overlong line's start is kept (enough for the `"id"` of an answer the
/// Python SDK writes: `{"jsonrpc":"2.0","id":7,...`).
const KEPT_PREFIX: usize = 256;
/// How much of its end is kept (the TypeScript SDK writes the id last: `...,"id":7}`).
const KEPT_TAIL: usize = 64;

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line, without its `\n` (nor a `\r` before it).
    Whole(Vec<u8>),
    /// A line over the bound: its first and last bytes, and how long it was.
    Overlong {
        prefix: Vec<u8>,
        tail: Vec<u8>,
        length: usize,
    },
}

/// Reads [`Line`]s of at most `max` bytes.
pub(crate) struct Lines<R> {
    inner: R,
    max: usize,
    /// The current line (or, once it went over `max`, its first bytes).
    line: Vec<u8>,
    /// The last bytes of the current line, once it went over `max`.
    tail: Vec<u8>,
    /// Bytes of the current line seen so far.
    length: usize,
    overlong: bool,
}

impl<R: AsyncBufRead + Unpin> Lines<R> {
    pub(crate) fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            max,
            line: Vec::new(),
            tail: Vec::new(),
            length: 0,
            overlong: false,
        }
    }

    /// The next line; `None` at the end of the stream. A last line without a newline
    /// counts as a line.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok((self.length > 0).then(|| self.finish()));
            }
            let (chunk, end) = match memchr::memchr(b'\n', buf) {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            let taken = chunk.len();
            self.length += taken;
            if !self.overlong && self.length > self.max {
                self.overlong = true;
                let room = KEPT_PREFIX.saturating_sub(self.line.len()).min(taken);
                self.line.extend_from_slice(&chunk[..room]);
                self.line.truncate(KEPT_PREFIX);
            } else if !self.overlong {
                self.line.extend_from_slice(chunk);
            }
            if self.overlong {
                let keep = chunk.len().min(KEPT_TAIL);
                self.tail.extend_from_slice(&chunk[chunk.len() - keep..]);
                let excess = self.tail.len().saturating_sub(KEPT_TAIL);
                self.tail.drain(..excess);
            }
            self.inner.consume(end.unwrap_or(taken));
            if end.is_some() {
                // The newline was consumed; an empty line still ends here.
                self.length = self.length.max(1);
                return Ok(Some(self.finish()));
            }
        }
    }

    /// The line read so far, and start the next one.
    fn finish(&mut self) -> Line {
        let mut line = std::mem::take(&mut self.line);
        let length = std::mem::take(&mut self.length);
        let tail = std::mem::take(&mut self.tail);
        if std::mem::take(&mut self.overlong) {
            return Line::Overlong {
                prefix: line,
                tail,
                length,
            };
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Line::Whole(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(input: &[u8], max: usize, chunk: usize) -> Vec<Line> {
        // A reader that hands out `chunk` bytes at a time, to split lines anywhere.
        let reader = tokio::io::BufReader::with_capacity(chunk, input);
        let mut lines = Lines::new(reader, max);
        let mut out = Vec::new();
        while let Some(line) = lines.next().await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn lines_split_anywhere_give_the_same_lines() {
        let input = b"{\"a\":1}\r\n\n{\"b\":2}\nlast";
        for chunk in 1..input.len() + 1 {
            assert_eq!(
                all(input, 64, chunk).await,
                [
                    Line::Whole(b"{\"a\":1}".to_vec()),
                    Line::Whole(Vec::new()),
                    Line::Whole(b"{\"b\":2}".to_vec()),
                    Line::Whole(b"last".to_vec()),
                ],
                "chunk {chunk}"
            );
        }
    }

    #[tokio::test]
    async fn an_overlong_line_is_refused_and_the_next_one_read() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.extend(b"\"}\nok\n");
        for chunk in [1, 7, 64, 8192] {
            let lines = all(&input, 100, chunk).await;
            assert_eq!(lines.len(), 2, "chunk {chunk}");
            match &lines[0] {
                Line::Overlong {
                    prefix,
                    tail,
                    length,
                } => {
                    assert!(prefix.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":7,"));
                    assert!(prefix.len() <= KEPT_PREFIX);
                    assert!(
                        tail.ends_with(b"xx\"}"),
                        "{}",
                        String::from_utf8_lossy(tail)
                    );
                    assert!(tail.len() <= KEPT_TAIL);
                    assert!(*length > 10_000, "{length}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(lines[1], Line::Whole(b"ok".to_vec()));
        }
        // Exactly at the bound is fine.
        assert_eq!(all(b"abc\n", 3, 1).await, [Line::Whole(b"abc".to_vec())]);
        assert!(matches!(
            all(b"abcd\n", 3, 1).await[0],
            Line::Overlong { .. }
        ));
    }
}
