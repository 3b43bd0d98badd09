//! The client side the fake-upstream tests need beyond `support::http`: a response read
//! frame by frame (HTTP/1.1 or h2c prior knowledge), bodies of unknown length, waiting on
//! a condition.

use super::FakeBody;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::time::Duration;

/// Send a request over HTTP/1.1 (or h2c prior knowledge with `h2`) and return the
/// response with its body unread, for tests that read it frame by frame.
pub async fn open(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: FakeBody,
    h2: bool,
) -> Response<Incoming> {
    let client: Client<_, FakeBody> = Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build_http();
    let mut request = Request::builder()
        .method(method)
        .uri(url)
        .body(body)
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .expect("a response head within 10 s")
        .expect("the request is answered")
}

/// The next data bytes of `body` (`None` at its end), bounded by `timeout`.
pub async fn next_data(body: &mut Incoming, timeout: Duration) -> Option<Bytes> {
    loop {
        let frame = tokio::time::timeout(timeout, body.frame())
            .await
            .expect("the next frame within the timeout")?
            .expect("the client body does not fail");
        if let Ok(data) = frame.into_data() {
            return Some(data);
        }
    }
}

/// Read until `body` ends (bounded by `timeout` overall).
pub async fn read_to_end(body: Incoming, timeout: Duration) -> Bytes {
    tokio::time::timeout(timeout, body.collect())
        .await
        .expect("the body ends within the timeout")
        .expect("the client body does not fail")
        .to_bytes()
}

/// The JSON of the last `data:` line in an SSE byte stream (any line ending).
pub fn last_data(stream: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stream);
    let line = text
        .split(['\r', '\n'])
        .rfind(|l| l.starts_with("data:"))
        .unwrap_or_else(|| panic!("no data line in {text:?}"));
    serde_json::from_str(line["data:".len()..].trim()).unwrap()
}

/// Poll `condition` every 20 ms for up to 5 s.
pub async fn wait_until(condition: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Owned header pairs, as `support::http` takes them.
pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}
