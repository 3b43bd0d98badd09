//! Fake upstreams for what a real MCP server cannot be made to do on demand: split its
//! output into 1-byte chunks, stall, compress, reset the connection mid-stream, or answer
//! bytes that are not HTTP at all. Each fake is bound to 127.0.0.1:0, records every
//! request it receives (so a test can prove that nothing was forwarded), and stops when
//! dropped: its accept task owns every connection task (a `JoinSet`), so aborting it
//! closes them all.
//!
//! Beside them: the messages they answer with and what a client may see of them
//! ([`messages`]), and the client side these tests need beyond `support::http` ([`client`]:
//! a response read frame by frame, h2c prior knowledge, bodies of unknown length).

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

mod cases;
mod client;
mod messages;

pub use cases::{call_case, case_of, first_progress, sidecar_with};
pub use client::{contains, last_data, next_data, open, pairs, read_to_end, wait_until};
pub use messages::{
    SECRET, assert_internal_error, complete, event, input_required, plaintext, progress, sealed,
    sse_cut_in_the_result, tools_call,
};

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    /// Path and query exactly as on the request line (`//mcp`, `/mcp?x=1`).
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "upstream got non-JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One step of a scripted body or raw answer.
#[derive(Debug, Clone)]
pub enum Step {
    Data(Bytes),
    Sleep(Duration),
}

/// `bytes` as a list of 1-byte data steps: the worst chunking an upstream can produce.
pub fn one_byte_chunks(bytes: &[u8]) -> Vec<Step> {
    bytes
        .iter()
        .map(|b| Step::Data(Bytes::copy_from_slice(&[*b])))
        .collect()
}

/// A response body: whole bytes (exact length), scripted chunks with delays, or chunks a
/// test feeds through a channel. Counts itself in `unfinished` when dropped before its end
/// (hyper drops a response body when the peer went away: that is how a test sees that
/// the sidecar closed the upstream request).
pub struct FakeBody {
    steps: VecDeque<Step>,
    exact: Option<u64>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    channel: Option<mpsc::Receiver<Result<Bytes, io::Error>>>,
    done: bool,
    unfinished: Option<Arc<AtomicUsize>>,
}

impl FakeBody {
    pub fn whole(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        let exact = Some(bytes.len() as u64);
        let steps = if bytes.is_empty() {
            VecDeque::new()
        } else {
            VecDeque::from([Step::Data(bytes)])
        };
        Self::build(steps, exact, None)
    }

    /// Length unknown up front: sent with `transfer-encoding: chunked`.
    pub fn steps(steps: Vec<Step>) -> Self {
        Self::build(steps.into(), None, None)
    }

    pub fn channel(rx: mpsc::Receiver<Result<Bytes, io::Error>>) -> Self {
        Self::build(VecDeque::new(), None, Some(rx))
    }

    fn build(
        steps: VecDeque<Step>,
        exact: Option<u64>,
        channel: Option<mpsc::Receiver<Result<Bytes, io::Error>>>,
    ) -> Self {
        Self {
            steps,
            exact,
            sleep: None,
            channel,
            done: false,
            unfinished: None,
        }
    }
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if let Some(rx) = this.channel.as_mut() {
            let next = ready!(rx.poll_recv(cx));
            this.done = next.is_none();
            return Poll::Ready(next.map(|r| r.map(Frame::data)));
        }
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
            }
            match this.steps.pop_front() {
                None => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Some(Step::Sleep(d)) => this.sleep = Some(Box::pin(tokio::time::sleep(d))),
                Some(Step::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.exact == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        self.exact.map(SizeHint::with_exact).unwrap_or_default()
    }
}

impl Drop for FakeBody {
    fn drop(&mut self) {
        if let Some(counter) = &self.unfinished
            && !self.done
        {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What the fake answers to one request.
pub struct Reply {
    pub status: u16,
    /// Raw values: a hostile upstream may send bytes that are not visible ASCII.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: FakeBody,
    pub delay: Duration,
    pub hang: bool,
}

impl Reply {
    pub fn new(status: u16, body: FakeBody) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
            delay: Duration::ZERO,
            hang: false,
        }
    }

    /// `200 application/json` with these exact bytes.
    pub fn json(body: impl Into<Bytes>) -> Self {
        Self::new(200, FakeBody::whole(body)).header("content-type", "application/json")
    }

    /// `200 text/event-stream`, chunked, as the SDK sends it.
    pub fn sse(steps: Vec<Step>) -> Self {
        Self::new(200, FakeBody::steps(steps))
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache, no-transform")
    }

    /// Never send a response head.
    pub fn hang() -> Self {
        let mut reply = Self::new(200, FakeBody::whole(""));
        reply.hang = true;
        reply
    }

    pub fn header(self, name: &str, value: &str) -> Self {
        self.raw_header(name, value.as_bytes())
    }

    pub fn raw_header(mut self, name: &str, value: &[u8]) -> Self {
        self.headers.push((name.into(), value.to_vec()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

type Handler = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

/// A scripted upstream; stopped when dropped.
pub struct FakeUpstream {
    pub port: u16,
    log: Arc<Mutex<Vec<Recorded>>>,
    unfinished: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FakeUpstream {
    /// An HTTP/1.1 server (hyper) answering each request with `handler(request)`.
    pub async fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_at(0, handler).await
    }

    /// [`FakeUpstream::start`] on a given port (0: any), to bring an upstream back where
    /// a stopped one was.
    pub async fn start_at(
        port: u16,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let (listener, port) = bind_at(port).await;
        let log = Arc::new(Mutex::new(Vec::new()));
        let unfinished = Arc::new(AtomicUsize::new(0));
        let handler: Handler = Arc::new(handler);
        let (l, u) = (log.clone(), unfinished.clone());
        let task = tokio::spawn(accept_loop(listener, move |stream| {
            serve_hyper(stream, handler.clone(), l.clone(), u.clone())
        }));
        Self {
            port,
            log,
            unfinished,
            task,
        }
    }

    /// A server that answers every request with the same reply.
    pub async fn always(make: impl Fn() -> Reply + Send + Sync + 'static) -> Self {
        Self::start(move |_| make()).await
    }

    /// A raw-socket server: reads one request per connection, records it, runs `steps`
    /// (written verbatim: they need not be HTTP), then closes the socket, with a TCP
    /// reset when `reset` (zero linger) or a clean FIN otherwise.
    pub async fn raw(steps: Vec<Step>, reset: bool) -> Self {
        Self::raw_at(0, steps, reset).await
    }

    /// [`FakeUpstream::raw`] on a given port (0: any).
    pub async fn raw_at(port: u16, steps: Vec<Step>, reset: bool) -> Self {
        let (listener, port) = bind_at(port).await;
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let task = tokio::spawn(accept_loop(listener, move |stream| {
            serve_raw(stream, steps.clone(), reset, l.clone())
        }));
        Self {
            port,
            log,
            unfinished: Arc::new(AtomicUsize::new(0)),
            task,
        }
    }

    /// The sidecar's `upstream`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// The last request received (panics when there is none).
    pub fn last(&self) -> Recorded {
        self.requests()
            .pop()
            .expect("the upstream received a request")
    }

    /// Response bodies dropped before their end (the sidecar closed the upstream request).
    pub fn unfinished(&self) -> usize {
        self.unfinished.load(Ordering::SeqCst)
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn bind_at(port: u16) -> (TcpListener, u16) {
    // A fake just dropped releases its port when its aborted task is next polled.
    let mut attempts = 0;
    let listener = loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => break listener,
            Err(_) if port != 0 && attempts < 100 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("bind 127.0.0.1:{port}: {e}"),
        }
    };
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Accept forever; every connection task lives in the `JoinSet`, so aborting this task
/// (dropping the set) aborts them too.
async fn accept_loop<F, Fut>(listener: TcpListener, serve: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        connections.spawn(serve(stream));
        while connections.try_join_next().is_some() {}
    }
}

async fn serve_hyper(
    stream: TcpStream,
    handler: Handler,
    log: Arc<Mutex<Vec<Recorded>>>,
    unfinished: Arc<AtomicUsize>,
) {
    let service = service_fn(move |request: Request<Incoming>| {
        let (handler, log, unfinished) = (handler.clone(), log.clone(), unfinished.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let recorded = Recorded {
                method: parts.method,
                target: parts
                    .uri
                    .path_and_query()
                    .map_or("", |p| p.as_str())
                    .to_owned(),
                headers: parts.headers,
                body,
            };
            log.lock().unwrap().push(recorded.clone());
            let mut reply = handler(&recorded);
            if reply.hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(reply.delay).await;
            reply.body.unfinished = Some(unfinished);
            let mut response = Response::new(reply.body);
            *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
            for (name, value) in &reply.headers {
                response.headers_mut().append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_bytes(value).unwrap(),
                );
            }
            Ok::<_, Infallible>(response)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn serve_raw(
    mut stream: TcpStream,
    steps: Vec<Step>,
    reset: bool,
    log: Arc<Mutex<Vec<Recorded>>>,
) {
    let Some(recorded) = read_request(&mut stream).await else {
        return;
    };
    log.lock().unwrap().push(recorded);
    for step in steps {
        match step {
            Step::Data(bytes) => {
                if stream.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Step::Sleep(d) => tokio::time::sleep(d).await,
        }
    }
    if reset {
        // SO_LINGER 0: close() sends RST instead of FIN.
        let _ = stream.set_zero_linger();
    } else {
        let _ = stream.shutdown().await;
    }
}

/// Just enough HTTP/1.1 to record what the sidecar sends: the head, and a body of
/// `content-length` bytes (the sidecar always sets it on what it forwards).
async fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut buf = BytesMut::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if stream.read_buf(&mut buf).await.ok()? == 0 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = Method::from_bytes(request_line.next()?.as_bytes()).ok()?;
    let target = request_line.next()?.to_owned();
    let mut headers = HeaderMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.append(
            HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
            HeaderValue::from_str(value.trim()).ok()?,
        );
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        if stream.read_buf(&mut buf).await.ok()? == 0 {
            return None;
        }
    }
    let body = Bytes::copy_from_slice(&buf[head_end..head_end + length]);
    Some(Recorded {
        method,
        target,
        headers,
        body,
    })
}
