//! A small HTTP client for tests, on hyper: sends exactly the headers and body bytes it
//! is given (duplicates, bad encodings and all).

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::time::Duration;

pub struct Reply {
    pub status: StatusCode,
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
    for (name, value) in headers {
        request.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    let exchange = async {
        let response = client
            .request(request)
            .await
            .expect("the request is answered");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body is read").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .expect("the exchange finishes in time")
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
