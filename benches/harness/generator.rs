//! The harness's own load generator (the soak's too), for what wrk cannot do: an open
//! loop (requests sent on a fixed schedule whatever the answers do, each timed from the
//! moment it was due, so a stall shows as the latency of every request it delayed
//! instead of hiding as a pause in sending: no coordinated omission; [`Schedule`] runs
//! any work per slot, [`open_loop`] the harness's one request), a closed loop that
//! collects answers (minting single-use tokens), and holding many idle streams open.
//!
//! It runs on one thread of a pinned core. The scheduler spins (yielding to the runtime,
//! which polls the sockets on every turn) rather than sleeping, because tokio's timer
//! has a 1 ms grain and the gaps between requests are shorter than that.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc};

/// Who the harness says the caller is (`principal.source = "header"`).
pub const PRINCIPAL_HEADER: &str = "x-forwarded-user";
pub const PRINCIPAL: &str = "alice@example.com";

/// Where requests go, and what a good answer looks like.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: &'static str,
    /// A good answer is a 200 whose body holds this (`"resultType":"complete"`, ...).
    pub expect: &'static str,
    /// ... and not this (the plaintext state, through the sidecar).
    pub forbid: Option<&'static str>,
}

/// What each request carries: the same body every time, or a body of its own (a fresh
/// single-use token each).
#[derive(Clone)]
pub enum Bodies {
    Same(Bytes),
    Each(Arc<Vec<Bytes>>),
}

impl Bodies {
    fn get(&self, i: usize) -> Bytes {
        match self {
            Bodies::Same(b) => b.clone(),
            Bodies::Each(all) => all[i].clone(),
        }
    }
}

/// Latencies inside the measured window, and every failure.
#[derive(Default)]
pub struct Outcome {
    pub latencies: Vec<Duration>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// From the first slot's due time until every slot finished.
    pub elapsed: Duration,
}

impl Outcome {
    fn failed(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    /// The `q` quantile in microseconds (nearest rank).
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        self.latencies.sort_unstable();
        let n = self.latencies.len();
        if n == 0 {
            return f64::NAN;
        }
        let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
        self.latencies[i].as_secs_f64() * 1e6
    }
}

/// A `tools/call` of `tool` as a 2026-07-28 client sends it, `extra` members added to its
/// `params` (a retry's state and answers, an idempotency key). `params.name` comes first:
/// the upstream tells its tools apart by the first `"name":"`.
pub fn call_body(id: &Value, tool: &str, arguments: Value, extra: Value) -> Bytes {
    let mut params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-state-guard-harness", "version": "0"}
        }
    });
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    Bytes::from(serde_json::to_vec(&message).expect("serialises"))
}

/// The `params` a retry adds: the state, and the answer to the upstream's question.
pub fn retry_params(state: &str) -> Value {
    json!({
        "requestState": state,
        "inputResponses": {"region": {"action": "accept", "content": {"region": "eu-west-1"}}}
    })
}

/// The JSON-RPC message of an answer: a JSON body, or the first `data:` of an SSE event.
pub fn message_of(answer: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(answer).map_err(|_| "answer not UTF-8")?;
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(text);
    serde_json::from_str(json).map_err(|e| format!("answer: {e}: {json}"))
}

/// A request as every client of the harness sends it.
pub fn request(target: &Target, body: Bytes) -> Request<Full<Bytes>> {
    // A static header value: the harness counts the client's allocations too.
    let principal = HeaderValue::from_static(PRINCIPAL);
    request_as(target.addr, target.path, "provision", principal, body)
}

/// A `tools/call` of `tool` to `path` on `addr`, on behalf of `principal`.
pub fn request_as(
    addr: SocketAddr,
    path: &str,
    tool: &str,
    principal: HeaderValue,
    body: Bytes,
) -> Request<Full<Bytes>> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(
            HeaderName::from_static("mcp-protocol-version"),
            "2026-07-28",
        )
        .header(HeaderName::from_static("mcp-method"), "tools/call")
        .header(HeaderName::from_static("mcp-name"), tool)
        .header(HeaderName::from_static(PRINCIPAL_HEADER), principal)
        .body(Full::new(body))
        .expect("a valid request");
    // The run's access token, when it minted one: static, as the principal.
    if let Some(bearer) = AUTHORIZATION.get() {
        (request.headers_mut()).insert(header::AUTHORIZATION, HeaderValue::from_static(bearer));
    }
    request
}

/// `Bearer <token>`, set once when the run mints an access token (the harness's
/// `jwt.rs`): every request carries it from then on.
pub static AUTHORIZATION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// One connection's sending half.
pub type Sender = SendRequest<Full<Bytes>>;

pub async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(send)
}

/// Send `request` on `send` and read the whole answer.
pub async fn send(
    send: &mut Sender,
    request: Request<Full<Bytes>>,
) -> Result<(http::response::Parts, Bytes), String> {
    send.ready().await.map_err(|e| format!("connection: {e}"))?;
    let response = send
        .send_request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let (head, body) = response.into_parts();
    let bytes = body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok((head, bytes))
}

/// One exchange on `send`: the body of a good answer.
pub async fn exchange(send: &mut Sender, target: &Target, body: Bytes) -> Result<Bytes, String> {
    let (head, bytes) = self::send(send, request(target, body)).await?;
    let status = head.status;
    let text = String::from_utf8_lossy(&bytes);
    let excerpt = || text.chars().take(300).collect::<String>();
    if status != StatusCode::OK || !text.contains(target.expect) {
        return Err(format!("HTTP {status}: {}", excerpt()));
    }
    if let Some(at) = target.forbid.and_then(|f| text.find(f)) {
        // Where it was found: in the clear, or by chance inside a token's base64url (the
        // mark's letters are all in that alphabet).
        let around: String = text[text.floor_char_boundary(at.saturating_sub(80))..]
            .chars()
            .take(200)
            .collect();
        return Err(format!(
            "plaintext state leaked: {} ... at byte {at}: {around}",
            excerpt()
        ));
    }
    Ok(bytes)
}

/// Send `rate` requests a second for `warmup + measure` over `connections` connections,
/// each due at its slot on the schedule; latencies (due → whole answer read) of requests
/// due inside the measured window. A request still unanswered 10 s after the schedule
/// ends counts as an error.
pub async fn open_loop(
    target: &Target,
    bodies: &Bodies,
    rate: u32,
    warmup: Duration,
    measure: Duration,
    connections: usize,
) -> Result<Outcome, String> {
    let total = (f64::from(rate) * (warmup + measure).as_secs_f64()) as usize;
    if let Bodies::Each(all) = bodies
        && all.len() < total
    {
        return Err(format!("{} bodies for {total} requests", all.len()));
    }
    let measured_from = (f64::from(rate) * warmup.as_secs_f64()) as usize;
    let (target, bodies) = (target.clone(), bodies.clone());
    let schedule = Schedule {
        addr: target.addr,
        rate,
        total,
        measured_from,
        connections,
    };
    let outcome = schedule
        .run(move |i, mut send| {
            let (target, body) = (target.clone(), bodies.get(i));
            async move {
                let result = exchange(&mut send, &target, body).await.map(drop);
                (send, result)
            }
        })
        .await?;
    Ok(outcome)
}

/// An open loop's schedule: `total` slots `1 / rate` apart, served by `connections`
/// keep-alive connections to `addr`; slots from `measured_from` on are timed.
pub struct Schedule {
    pub addr: SocketAddr,
    pub rate: u32,
    pub total: usize,
    pub measured_from: usize,
    pub connections: usize,
}

impl Schedule {
    /// Run `work(slot, connection)` for every slot, each on the next free connection once
    /// it is due; `work` gives the connection back with its verdict. Latencies (due →
    /// `work` done) of the measured slots, and every failure; a connection `work` left
    /// closed is replaced. A slot still unfinished 10 s after the schedule ends counts as
    /// an error.
    pub async fn run<W, F>(&self, work: W) -> Result<Outcome, String>
    where
        W: Fn(usize, Sender) -> F + Clone + Send + 'static,
        F: Future<Output = (Sender, Result<(), String>)> + Send,
    {
        let mut senders = Vec::with_capacity(self.connections);
        for _ in 0..self.connections {
            senders.push(connect(self.addr).await?);
        }
        let (due_tx, due_rx) = mpsc::unbounded_channel::<(usize, Instant)>();
        let due_rx = Arc::new(Mutex::new(due_rx));
        let start = Instant::now() + Duration::from_millis(20);
        let (addr, measured_from) = (self.addr, self.measured_from);
        let mut workers = tokio::task::JoinSet::new();
        for mut send in senders {
            let (due_rx, work) = (due_rx.clone(), work.clone());
            workers.spawn(async move {
                let mut outcome = Outcome::default();
                loop {
                    let next = due_rx.lock().await.recv().await;
                    let Some((i, due)) = next else { break };
                    let (back, result) = work(i, send).await;
                    send = back;
                    let done = Instant::now();
                    match result {
                        Ok(()) if i >= measured_from => outcome.latencies.push(done - due),
                        Ok(()) => {}
                        Err(e) => outcome.failed(e),
                    }
                    // A broken connection is replaced; the next request waits for it.
                    if send.is_closed() {
                        match connect(addr).await {
                            Ok(fresh) => send = fresh,
                            Err(e) => {
                                outcome.failed(e);
                                break;
                            }
                        }
                    }
                }
                outcome
            });
        }
        let interval = Duration::from_secs_f64(1.0 / f64::from(self.rate));
        for i in 0..self.total {
            let due = start + interval * i as u32;
            pace_until(due).await;
            if due_tx.send((i, due)).is_err() {
                break;
            }
        }
        drop(due_tx);
        let mut outcome = Outcome::default();
        let collected = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(done) = workers.join_next().await {
                let part = done.map_err(|e| format!("worker: {e}"))?;
                outcome.latencies.extend(part.latencies);
                outcome.errors += part.errors;
                outcome.first_error = outcome.first_error.take().or(part.first_error);
            }
            Ok::<_, String>(())
        })
        .await;
        match collected {
            Ok(result) => result?,
            Err(_) => outcome.failed("requests still unanswered 10 s after the schedule".into()),
        }
        outcome.elapsed = start.elapsed();
        Ok(outcome)
    }
}

/// Wait until `at`, sleeping while more than 2 ms remain and spinning (yielding) after.
async fn pace_until(at: Instant) {
    loop {
        let now = Instant::now();
        if now >= at {
            return;
        }
        let left = at - now;
        if left > Duration::from_millis(2) {
            tokio::time::sleep(left - Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// `count` exchanges as fast as `connections` connections go; the answers' bodies in
/// any order.
pub async fn closed_loop(
    target: &Target,
    body: Bytes,
    count: usize,
    connections: usize,
) -> Result<Vec<Bytes>, String> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let mut send = connect(target.addr).await?;
        let (next, target, body) = (next.clone(), target.clone(), body.clone());
        workers.spawn(async move {
            let mut answers = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < count {
                answers.push(exchange(&mut send, &target, body.clone()).await?);
            }
            Ok::<_, String>(answers)
        });
    }
    let mut answers = Vec::with_capacity(count);
    while let Some(done) = workers.join_next().await {
        answers.extend(done.map_err(|e| format!("worker: {e}"))??);
    }
    Ok(answers)
}

/// Open `count` idle SSE streams (`GET path`) to `addr` and keep them: each is held
/// once its response head and first event arrived. Dropping the result closes them.
/// Stops at the first failure: the streams held so far, and the failure.
pub async fn hold_streams(
    addr: SocketAddr,
    path: &str,
    count: usize,
) -> (Vec<TcpStream>, Option<String>) {
    const AT_ONCE: usize = 64;
    let mut held = Vec::with_capacity(count);
    while held.len() < count {
        let batch = AT_ONCE.min(count - held.len());
        let mut opening = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let request = format!(
                "GET {path} HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\
                 mcp-protocol-version: 2025-11-25\r\n{PRINCIPAL_HEADER}: {PRINCIPAL}\r\n\r\n"
            );
            opening.spawn(async move {
                let mut stream = TcpStream::connect(addr)
                    .await
                    .map_err(|e| format!("connect: {e}"))?;
                stream
                    .write_all(request.as_bytes())
                    .await
                    .map_err(|e| format!("write: {e}"))?;
                let mut seen = Vec::new();
                let mut buffer = [0u8; 1024];
                while !seen.windows(8).any(|w| w == b": open\n\n") {
                    let n = stream
                        .read(&mut buffer)
                        .await
                        .map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err(format!("stream closed: {}", String::from_utf8_lossy(&seen)));
                    }
                    seen.extend_from_slice(&buffer[..n]);
                }
                if !seen.starts_with(b"HTTP/1.1 200") {
                    return Err(format!("not a 200: {}", String::from_utf8_lossy(&seen)));
                }
                Ok(stream)
            });
        }
        let Ok(opened) = tokio::time::timeout(Duration::from_secs(30), opening.join_all()).await
        else {
            let e = format!("streams not open after 30 s ({} held)", held.len());
            return (held, Some(e));
        };
        for stream in opened {
            match stream {
                Ok(stream) => held.push(stream),
                Err(e) => {
                    let e = format!("after {} streams: {e}", held.len());
                    return (held, Some(e));
                }
            }
        }
    }
    (held, None)
}
