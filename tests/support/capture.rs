//! Raw bytes on both sides of the sidecar, for the HTTP/1.1 framing corpus.
//!
//! [`Capture`] is an upstream that records every byte it receives on each connection and
//! frames requests itself with a strict parser of its own (`httparse` for the head, then
//! exactly one `Content-Length` and no `Transfer-Encoding`: the only framing the sidecar
//! may send), answering each request it frames with a JSON-RPC result for its id. Whatever
//! it cannot frame stays in the connection's leftover, where a test sees it.
//!
//! [`exchange`] is the client side: raw bytes written to the sidecar's listener, and every
//! response read back with its status, until the connection closes or stays quiet.

use bytes::BytesMut;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// One request the capture framed.
#[derive(Debug, Clone)]
pub struct Framed {
    pub method: String,
    pub target: String,
    /// Names lowercased, values as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Framed {
    pub fn all(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
            .collect()
    }
}

#[derive(Default)]
struct Log {
    requests: Vec<Framed>,
    /// Per connection: bytes received that no framed request accounts for (yet).
    leftovers: Vec<Vec<u8>>,
    /// Per connection: a framing the capture refuses (and then closes on).
    violations: Vec<String>,
}

/// A strict raw upstream; stopped when dropped.
pub struct Capture {
    pub port: u16,
    log: Arc<Mutex<Log>>,
    task: JoinHandle<()>,
}

impl Capture {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Log::default()));
        let l = log.clone();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let index = {
                    let mut log = l.lock().unwrap();
                    log.leftovers.push(Vec::new());
                    log.leftovers.len() - 1
                };
                connections.spawn(serve(stream, index, l.clone()));
                while connections.try_join_next().is_some() {}
            }
        });
        Self { port, log, task }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Framed> {
        self.log.lock().unwrap().requests.clone()
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().requests.len()
    }

    /// Bytes no framed request accounts for, on any connection.
    pub fn leftover(&self) -> usize {
        self.log
            .lock()
            .unwrap()
            .leftovers
            .iter()
            .map(Vec::len)
            .sum()
    }

    pub fn violations(&self) -> Vec<String> {
        self.log.lock().unwrap().violations.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, index: usize, log: Arc<Mutex<Log>>) {
    let mut buf = BytesMut::new();
    loop {
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        // Every request complete in the buffer, answered in order.
        loop {
            let answer = {
                let mut l = log.lock().unwrap();
                let framed = frame(&buf);
                if let Ok(Some((_, used))) = &framed {
                    let _ = buf.split_to(*used);
                }
                l.leftovers[index] = buf.to_vec();
                match framed {
                    Ok(None) => break,
                    Err(violation) => {
                        l.violations.push(violation);
                        return;
                    }
                    Ok(Some((request, _))) => {
                        let id = serde_json::from_slice::<Value>(&request.body)
                            .ok()
                            .and_then(|v| v.get("id").cloned())
                            .unwrap_or(Value::Null);
                        l.requests.push(request);
                        answer(id)
                    }
                }
            };
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// A JSON-RPC result for `id`, framed by Content-Length.
fn answer(id: Value) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": {
        "resultType": "complete", "content": [], "isError": false}})
    .to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One request from the front of `buf`, and how many bytes it used; `Ok(None)`: not
/// complete yet; `Err`: a framing the sidecar must never send.
fn frame(buf: &[u8]) -> Result<Option<(Framed, usize)>, String> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let head = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("unparsable head: {e}")),
    };
    if buf[..head]
        .windows(2)
        .any(|w| w[1] == b'\n' && w[0] != b'\r')
    {
        return Err("a line ending that is not CRLF".into());
    }
    let headers: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    let framing = |name: &str| headers.iter().filter(|(n, _)| n == name).count();
    if framing("transfer-encoding") > 0 {
        return Err("transfer-encoding".into());
    }
    let lengths: Vec<&[u8]> = headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_slice())
        .collect();
    let length = match lengths.as_slice() {
        [] => 0,
        [one] if !one.is_empty() && one.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(one).unwrap().parse::<usize>().unwrap()
        }
        _ => return Err(format!("content-length {lengths:?}")),
    };
    if buf.len() < head + length {
        return Ok(None);
    }
    let framed = Framed {
        method: request.method.unwrap().to_owned(),
        target: request.path.unwrap().to_owned(),
        headers,
        body: buf[head..head + length].to_vec(),
    };
    Ok(Some((framed, head + length)))
}

/// What the client read back: the status of each response, in order, and whether the
/// sidecar closed the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub statuses: Vec<u16>,
    pub closed: bool,
    /// Everything read, for messages.
    pub raw: Vec<u8>,
}

/// Write `bytes` to `addr` and read responses until the connection closes, or nothing
/// more arrived for `quiet` after `expect` responses, or `limit` passed.
pub async fn exchange(
    addr: SocketAddr,
    bytes: &[u8],
    expect: usize,
    quiet: Duration,
    limit: Duration,
) -> Exchange {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let started = tokio::time::Instant::now();
    let mut raw = Vec::new();
    let mut closed = false;
    let mut chunk = [0u8; 8192];
    loop {
        let statuses = statuses(&raw);
        let wait = if statuses.len() >= expect {
            quiet
        } else {
            limit.saturating_sub(started.elapsed())
        };
        match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
            Err(_) => break,
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => raw.extend_from_slice(&chunk[..n]),
        }
    }
    Exchange {
        statuses: statuses(&raw),
        closed,
        raw,
    }
}

/// The final statuses of the complete responses in `raw` (interim 1xx left out).
fn statuses(mut raw: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(head)) = response.parse(raw) else {
            return out;
        };
        let status = response.code.unwrap();
        let length = response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok());
        let chunked = response
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
        let used = match (status, length, chunked) {
            (100..=199, ..) => head,
            (_, Some(n), false) if raw.len() >= head + n => head + n,
            (_, None, true) => match raw[head..].windows(5).position(|w| w == b"0\r\n\r\n") {
                Some(end) => head + end + 5,
                None => return out,
            },
            // No length: the body runs to the close.
            (_, None, false) => raw.len(),
            _ => return out,
        };
        if status >= 200 {
            out.push(status);
        }
        raw = &raw[used..];
    }
}
