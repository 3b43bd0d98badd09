//! A small HTTP client for tests, on hyper: sends exactly the headers and body bytes it
//! is given (duplicates, bad encodings and all).

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub version: http::Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The JSON-RPC message answered: the JSON body, or the last event of an SSE body.
    pub fn message(&self) -> Value {
        if !self.content_type().starts_with("text/event-stream") {
            return self.json();
        }
        let mut buffer = BytesMut::from(&self.body[..]);
        let events = split_events(&mut buffer);
        assert!(buffer.is_empty(), "unterminated event: {}", self.text());
        event_json(events.last().expect("at least one event"))
    }
}

/// The headers an MCP 2026-07-28 client sends for `method` (and `name`, when given).
pub fn mcp_headers(method: &str, name: Option<&str>) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".into(), "application/json".into()),
        (
            "accept".into(),
            "application/json, text/event-stream".into(),
        ),
        ("mcp-protocol-version".into(), "2026-07-28".into()),
        ("mcp-method".into(), method.into()),
    ];
    if let Some(name) = name {
        headers.push(("mcp-name".into(), name.into()));
    }
    headers
}

/// The per-request `_meta` a 2026-07-28 request must carry.
pub fn meta() -> Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-state-guard-tests", "version": "0"}
    })
}

/// Send one request and read the whole response (bounded by `timeout`).
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: impl Into<Bytes>,
    timeout: Duration,
) -> Reply {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(body.into()))
        .unwrap();
    append_headers(&mut request, headers.iter().cloned());
    let exchange = async {
        let response = client
            .request(request)
            .await
            .expect("the request is answered");
        reply_of(response).await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .expect("the exchange finishes in time")
}

/// `headers` appended to `request`'s, exactly as given.
fn append_headers<B>(
    request: &mut Request<B>,
    headers: impl IntoIterator<Item = (String, String)>,
) {
    for (name, value) in headers {
        request.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
}

/// A response read whole.
async fn reply_of(response: Response<Incoming>) -> Reply {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("the body is read").to_bytes();
    Reply {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        body,
    }
}

/// POST a JSON-RPC message with MCP headers for its method and name.
pub async fn post_mcp(url: &str, message: &Value) -> Reply {
    let method = message["method"].as_str().unwrap_or_default();
    let name = message["params"]["name"]
        .as_str()
        .or_else(|| message["params"]["uri"].as_str());
    let name = name.filter(|_| matches!(method, "tools/call" | "prompts/get" | "resources/read"));
    let headers = mcp_headers(method, name);
    send(
        Method::POST,
        url,
        &headers,
        serde_json::to_vec(message).unwrap(),
        Duration::from_secs(30),
    )
    .await
}

/// [`post_mcp`] with `extra` headers (an identity header, say).
pub async fn post_mcp_with(url: &str, message: &Value, extra: &[(&str, &str)]) -> Reply {
    let method = message["method"].as_str().unwrap_or_default();
    let name = message["params"]["name"]
        .as_str()
        .or(message["params"]["uri"].as_str());
    let mut headers = mcp_headers(method, name);
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let body = serde_json::to_vec(message).unwrap();
    send(Method::POST, url, &headers, body, Duration::from_secs(30)).await
}

/// One keep-alive HTTP/1.1 connection: every request on it goes on this one
/// connection, as a client's session does (where [`post_mcp_with`] opens a new one).
pub struct Connection {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    uri: http::Uri,
}

impl Connection {
    /// A connection to `url`'s authority; its requests go to `url`.
    pub async fn open(url: &str) -> Self {
        let uri: http::Uri = url.parse().expect("a URL");
        let authority = uri.authority().expect("a URL with a host").as_str();
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .expect("the sidecar accepts");
        let io = hyper_util::rt::TokioIo::new(stream);
        let (send, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .expect("an HTTP/1.1 connection");
        tokio::spawn(connection);
        Self { send, uri }
    }

    /// [`post_mcp_with`] on this connection; it must still be open.
    pub async fn post_mcp_with(&mut self, message: &Value, extra: &[(&str, &str)]) -> Reply {
        let method = message["method"].as_str().unwrap_or_default();
        let name = message["params"]["name"].as_str();
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.path())
            .header(http::header::HOST, self.uri.authority().unwrap().as_str())
            .body(Full::new(Bytes::from(serde_json::to_vec(message).unwrap())))
            .unwrap();
        let extra = extra.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        append_headers(
            &mut request,
            mcp_headers(method, name).into_iter().chain(extra),
        );
        let exchange = async {
            self.send
                .ready()
                .await
                .expect("the connection is still open");
            let response = self.send.send_request(request).await.expect("answered");
            reply_of(response).await
        };
        tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .expect("the exchange finishes in time")
    }
}

/// Send one request and return as soon as the response head arrives (bounded by
/// `timeout`); the body streams on.
pub async fn open(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Response<Incoming> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(Bytes::new())).unwrap();
    let head = tokio::time::timeout(timeout, client.request(request)).await;
    head.expect("the response head arrives in time")
        .expect("the request is answered")
}

/// POST a JSON-RPC message and record each SSE event of the answer with the time (since
/// sending) at which it was complete, reading frame by frame as a streaming client does.
pub async fn post_mcp_streaming(url: &str, message: &Value) -> (String, Vec<(Duration, Bytes)>) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::post(url);
    for (name, value) in mcp_headers("tools/call", message["params"]["name"].as_str()) {
        request = request.header(name, value);
    }
    let request = request
        .body(Full::new(serde_json::to_vec(message).unwrap().into()))
        .unwrap();
    let exchange = async {
        let started = Instant::now();
        let response = client
            .request(request)
            .await
            .expect("the request is answered");
        let content_type = response.headers()[http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .into();
        let (mut body, mut buffer, mut events) = (response.into_body(), BytesMut::new(), vec![]);
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.expect("the stream is read").into_data() {
                buffer.extend_from_slice(&data);
                events.extend(
                    split_events(&mut buffer)
                        .into_iter()
                        .map(|e| (started.elapsed(), e)),
                );
            }
        }
        assert!(buffer.is_empty(), "unterminated event: {buffer:?}");
        (content_type, events)
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the stream ends in time")
}

/// Complete `\r\n\r\n`-terminated SSE events (the SDK's framing), split off `buffer`.
pub fn split_events(buffer: &mut BytesMut) -> Vec<Bytes> {
    let mut events = Vec::new();
    while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
        events.push(buffer.split_to(end + 4).freeze());
    }
    events
}

/// The data lines of one SSE event, parsed as JSON.
pub fn event_json(event: &[u8]) -> Value {
    let text = std::str::from_utf8(event).unwrap();
    let lines = text.lines().filter_map(|l| l.strip_prefix("data:"));
    let data: Vec<&str> = lines.map(|d| d.strip_prefix(' ').unwrap_or(d)).collect();
    serde_json::from_str(&data.join("\n"))
        .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {text}"))
}

/// The headers of a 2025-era request (no MCP 2026 headers), in `session` once there is one.
pub fn session_headers(session: Option<&str>, accept: &str) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), accept.to_owned()),
    ];
    if let Some(session) = session {
        headers.push(("mcp-session-id".into(), session.into()));
        headers.push(("mcp-protocol-version".into(), "2025-11-25".into()));
    }
    headers
}

/// A 2025-era `initialize` through `url`; returns the new session's id.
pub async fn initialize_session(url: &str) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "mcp-state-guard-tests", "version": "0"}}});
    let headers = session_headers(None, "application/json, text/event-stream");
    let body = serde_json::to_vec(&init).unwrap();
    let reply = send(Method::POST, url, &headers, body, Duration::from_secs(30)).await;
    assert_eq!(reply.message()["result"]["protocolVersion"], "2025-11-25");
    let session = reply.headers.get("mcp-session-id").expect("a session id");
    session.to_str().unwrap().to_owned()
}
