//! Load on an in-process sidecar and what it leaves behind: `tools/call`s sent at once,
//! and the gauges that hold per-request resources (requests in flight, SSE streams open,
//! buffered bytes, runtime tasks) read from `/metrics` until they are back at idle.

use super::fake::tools_call;
use super::http::{Reply as ClientReply, post_mcp, send};
use http::Method;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a scrape may take.
const T: Duration = Duration::from_secs(10);

/// `tools/call`s with ids 1..=n sent at once; their replies in id order.
pub async fn at_once(url: &str, n: u64) -> Vec<ClientReply> {
    let tasks: Vec<_> = (1..=n)
        .map(|id| tokio::spawn(post_mcp_owned(url.to_owned(), id)))
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.expect("one answer per request"));
    }
    replies
}

/// A `tools/call` with `id`, as a task can own it.
pub async fn post_mcp_owned(url: String, id: u64) -> ClientReply {
    post_mcp(&url, &tools_call(id, None)).await
}

/// `/metrics` as an operator scrapes it.
pub async fn scrape(admin: SocketAddr) -> String {
    let url = format!("http://{admin}/metrics");
    send(Method::GET, &url, &[], "", T).await.text()
}

/// A sample's value in an exposition (`name` with its labels, if any).
pub fn sample(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in the exposition"))
        .parse()
        .unwrap()
}

/// The gauges that hold per-request resources.
pub const HELD: [&str; 4] = [
    "mcp_state_guard_requests_in_flight",
    "mcp_state_guard_sse_streams_open",
    "mcp_state_guard_buffered_bytes",
    "mcp_state_guard_runtime_alive_tasks",
];

pub async fn held(admin: SocketAddr) -> Vec<f64> {
    let text = scrape(admin).await;
    HELD.iter().map(|name| sample(&text, name)).collect()
}

/// Wait (up to 5 s) until every held gauge is back at (or below) `idle`.
pub async fn until_idle(admin: SocketAddr, idle: &[f64]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = held(admin).await;
        if now.iter().zip(idle).all(|(now, idle)| now <= idle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            HELD.iter().zip(now.iter().zip(idle)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
