//! The TypeScript SDK v2 peers (`tests/ts/`, on `@modelcontextprotocol/server` and
//! `/client` 2.4.0): the plaintext legacy server as a child process on a free port, stopped
//! when dropped, and the client flows.
//!
//! `tests/run.sh` installs the pinned packages into `target/ts` (`tests/ts/install.sh`); a
//! missing install is a hard failure, never a skip. The scripts run in place with
//! `node --import tests/ts/register.mjs`, which resolves their imports from `target/ts`.

use super::legacy::Mode;
use super::peer::Peer;
use super::python::repo_path;
use bytes::{Bytes, BytesMut};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The Node.js binary: `STATE_GUARD_TEST_NODE`, else `node` on `PATH`.
pub fn node() -> PathBuf {
    std::env::var_os("STATE_GUARD_TEST_NODE").map_or_else(|| "node".into(), PathBuf::from)
}

/// `node --import tests/ts/register.mjs tests/ts/<script>`, after checking the install.
pub fn node_command(script: &str) -> Command {
    let stamp = repo_path("target/ts/node_modules/.package-lock.pinned");
    assert!(
        stamp.exists(),
        "{} does not exist: run `tests/run.sh` (or `tests/ts/install.sh`) to install the \
         pinned TypeScript SDK into target/ts",
        stamp.display()
    );
    let mut command = Command::new(node());
    command
        .arg("--import")
        .arg(repo_path("tests/ts/register.mjs"))
        .arg(repo_path(&format!("tests/ts/{script}")));
    command
}

/// The SDK's response shaping (`createMcpHandler({ responseMode })`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMode {
    /// Never stream; notifications emitted before the result are dropped.
    Json,
    /// Every 2026 answer is an SSE stream.
    Sse,
    /// JSON unless the handler emits a notification first (the SDK's default).
    Auto,
}

impl ResponseMode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Sse => "sse",
            Self::Auto => "auto",
        }
    }
}

impl From<Mode> for ResponseMode {
    /// The matrix's two modes: JSON, and SSE for every answer (the Python server's SSE
    /// mode only streams when there are notifications; `sse` here always does).
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Json => Self::Json,
            Mode::Sse => Self::Sse,
        }
    }
}

/// `tests/ts/legacy_server.mjs` on a free 127.0.0.1 port.
pub struct TsServer {
    peer: Peer,
    pub port: u16,
    pub mode: ResponseMode,
}

impl TsServer {
    pub fn start(mode: impl Into<ResponseMode>) -> Self {
        Self::start_with(mode.into(), &[])
    }

    /// Start with extra command-line flags (`--keep-alive-ms 100`, say).
    pub fn start_with(mode: ResponseMode, extra: &[&str]) -> Self {
        let mut command = node_command("legacy_server.mjs");
        command
            .args(["--port", "0", "--response-mode", mode.as_arg()])
            .args(extra);
        let peer = Peer::spawn(command, "the TypeScript legacy server");
        Self {
            port: peer.port,
            peer,
            mode,
        }
    }

    /// Base URL (no path): the sidecar's `upstream`.
    pub fn base_url(&self) -> String {
        self.peer.base_url()
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base_url())
    }

    /// Every JSON-RPC request POSTed to `/mcp`, recorded before the SDK parsed it:
    /// `[{era, id, method, name, requestState, inputResponses}]`.
    pub fn seen(&self) -> Vec<Value> {
        self.peer.debug_list("/debug/seen")
    }

    /// Every HTTP request that reached `/mcp`, with headers and body.
    pub fn http_log(&self) -> Vec<Value> {
        self.peer.debug_list("/debug/http")
    }

    pub fn reset(&self) {
        self.peer.debug("POST", "/debug/reset");
    }
}

/// Complete SSE events split off `buffer`, whichever line ending the server frames them
/// with: the TypeScript SDK writes `\n\n`, the Python SDK `\r\n\r\n`.
pub fn split_sse_events(buffer: &mut BytesMut) -> Vec<Bytes> {
    let mut events = Vec::new();
    loop {
        let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
        let crlf = buffer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| i + 4);
        let end = match (lf, crlf) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(end) => end,
                None => break,
            },
        };
        events.push(buffer.split_to(end).freeze());
    }
    events
}

/// The data of one SSE event parsed as JSON, or `None` for a comment-only event.
pub fn sse_event_json(event: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(event).unwrap();
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    let value = serde_json::from_str(&data.join("\n"));
    Some(value.unwrap_or_else(|e| panic!("event data is not JSON ({e}): {text}")))
}

/// One POST whose answer is read frame by frame, as a streaming client does.
pub struct Streamed {
    pub status: http::StatusCode,
    pub content_type: String,
    /// Each complete SSE event (or, for a JSON answer, the whole body) with the time since
    /// sending at which it was complete.
    pub events: Vec<(Duration, Bytes)>,
}

/// POST `body` with `headers` and record the answer's SSE events as they complete
/// (bounded by 30 s).
pub async fn post_streaming(url: &str, headers: &[(String, String)], body: Vec<u8>) -> Streamed {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use std::time::Instant;

    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = http::Request::post(url);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(body.into())).unwrap();
    let exchange = async {
        let started = Instant::now();
        let response = client
            .request(request)
            .await
            .expect("the request is answered");
        let status = response.status();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let streaming = content_type.starts_with("text/event-stream");
        let (mut body, mut buffer, mut events) = (response.into_body(), BytesMut::new(), vec![]);
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.expect("the stream is read").into_data() {
                buffer.extend_from_slice(&data);
                if streaming {
                    let complete = split_sse_events(&mut buffer);
                    events.extend(complete.into_iter().map(|e| (started.elapsed(), e)));
                }
            }
        }
        if !streaming {
            events.push((started.elapsed(), buffer.split().freeze()));
        }
        assert!(buffer.is_empty(), "unterminated event: {buffer:?}");
        Streamed {
            status,
            content_type,
            events,
        }
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the stream ends in time")
}

impl Streamed {
    /// The JSON-RPC message answered: the JSON body, or the last data event of the stream.
    pub fn message(&self) -> Value {
        if !self.content_type.starts_with("text/event-stream") {
            let body = &self.events.last().expect("a body").1;
            return serde_json::from_slice(body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)));
        }
        let data = self
            .events
            .iter()
            .rev()
            .find_map(|(_, e)| sse_event_json(e));
        data.expect("an event with data")
    }
}
