//! Closed-loop load: what the sidecar costs in throughput and latency, per MRTR kind.
//!
//! Four targets: the plaintext legacy Python server (JSON-response mode) directly and
//! through an in-process sidecar, and a trivial in-process hyper "instant" upstream
//! directly and through a second sidecar. The instant upstream answers with fixed bytes,
//! so its via/direct ratio shows the sidecar's own overhead without Python dominating.
//! Two kinds per target: a first call (the upstream's plaintext state gets sealed) and a
//! retry (a sealed state gets opened and checked). A retry reuses one state obtained
//! once through the same path: legal, as no tool here is single-use.
//!
//! `cargo bench --bench load [-- --quick]`
//! Exits non-zero if any request failed. Loopback only; every loop is bounded by time.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mcp_state_guard::app::{self, Running};
use mcp_state_guard::config::Config;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

const WORKERS: usize = 16;
const WARMUP: Duration = Duration::from_secs(1);
/// Bounds each request, so a hung peer cannot stall a worker past its deadline for long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
// Constants, so the load generator does not parse header names on every request.
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// The instant upstream's two answers (same shapes as the legacy server's `provision`).
const INPUT_REQUIRED: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"region":{"method":"elicitation/create","params":{"mode":"form","message":"Which region should be used?","requestedSchema":{"type":"object","properties":{"region":{"type":"string"}},"required":["region"]}}}},"requestState":"{\"k\":\"provision\",\"name\":\"web-1\",\"r\":1,\"tier\":\"free\"}"}}"#;
const COMPLETE: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Provisioned web-1 (tier=free) in eu-west-1"}],"isError":false,"resultType":"complete"}}"#;

/// A success must be the round the kind expects (`result_type`), not merely any result.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Kind {
    label: &'static str,
    result_type: &'static str,
}

const FIRST: Kind = Kind::new("first call", "input_required");
const RETRY: Kind = Kind::new("retry", "complete");

impl Kind {
    const fn new(label: &'static str, result_type: &'static str) -> Self {
        Kind { label, result_type }
    }
}

struct Row {
    upstream: &'static str,
    path: &'static str,
    kind: Kind,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    first_error: Option<String>,
}

fn main() -> ExitCode {
    let wall = Instant::now();
    // `--quick` shortens the run; anything else cargo bench passes (`--bench`) is ignored.
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    let measure = Duration::from_secs(if quick { 2 } else { 5 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // The child is dropped (killed) after the runtime is down, on every path.
    let outcome = Legacy::start().and_then(|legacy| {
        let rows = runtime.block_on(run(legacy.port, measure));
        runtime.shutdown_timeout(Duration::from_secs(2));
        rows
    });
    let rows = match outcome {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::FAILURE;
        }
    };
    print_report(&rows, measure);
    println!("\nwall time: {:.1} s", wall.elapsed().as_secs_f64());
    if rows.iter().any(|r| r.errors > 0) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run(legacy_port: u16, measure: Duration) -> Result<Vec<Row>, String> {
    let (instant_addr, stop_instant, instant_task) = start_instant().await?;
    let legacy_sidecar = start_sidecar(&format!("http://127.0.0.1:{legacy_port}")).await?;
    let instant_sidecar = start_sidecar(&format!("http://{instant_addr}")).await?;
    let targets = [
        ("legacy", "direct", format!("127.0.0.1:{legacy_port}")),
        ("legacy", "via sidecar", legacy_sidecar.addr().to_string()),
        ("instant", "direct", instant_addr.to_string()),
        ("instant", "via sidecar", instant_sidecar.addr().to_string()),
    ];
    let measured = async {
        let mut rows = Vec::new();
        for (upstream, path, authority) in targets {
            let uri: Uri = format!("http://{authority}/mcp").parse().expect("a URI");
            rows.push(load(upstream, path, &uri, request_body(None), FIRST, measure).await);
            let state = obtain_state(&uri)
                .await
                .map_err(|e| format!("{upstream} {path}: no state to retry with: {e}"))?;
            let retry = request_body(Some(&state));
            rows.push(load(upstream, path, &uri, retry, RETRY, measure).await);
        }
        Ok(rows)
    }
    .await;
    // Stop everything we started, whatever happened above.
    legacy_sidecar.shutdown(Duration::ZERO).await;
    instant_sidecar.shutdown(Duration::ZERO).await;
    let _ = stop_instant.send(());
    let _ = instant_task.await;
    measured
}

/// A fresh pool per run, so one run's connections do not serve the next.
fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// The `tools/call provision` a 2026-07-28 client sends; with a state, its retry.
/// The id is fixed: 2026 is sessionless, and the instant upstream answers fixed bytes.
fn request_body(state: Option<&str>) -> Bytes {
    let mut params = json!({
        "name": "provision",
        "arguments": {"name": "web-1"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-state-guard-load", "version": "0"}
        }
    });
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu-west-1"}}});
    }
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    Bytes::from(serde_json::to_vec(&message).expect("serialises"))
}

/// One exchange, bounded by [`REQUEST_TIMEOUT`]; the parsed message when it is a 200
/// carrying the expected result.
async fn exchange(
    client: &HttpClient,
    uri: &Uri,
    body: Bytes,
    kind: Kind,
) -> Result<Value, String> {
    tokio::time::timeout(REQUEST_TIMEOUT, exchange_unbounded(client, uri, body, kind))
        .await
        .unwrap_or_else(|_| Err("timed out".to_owned()))
}

async fn exchange_unbounded(
    client: &HttpClient,
    uri: &Uri,
    body: Bytes,
    kind: Kind,
) -> Result<Value, String> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(MCP_PROTOCOL_VERSION, "2026-07-28")
        .header(MCP_METHOD, "tools/call")
        .header(MCP_NAME, "provision")
        .body(Full::new(body))
        .expect("a valid request");
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    let excerpt = || String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}: {}", excerpt()));
    }
    let message: Value =
        serde_json::from_slice(&bytes).map_err(|_| format!("not JSON: {}", excerpt()))?;
    match message.get("result").and_then(|r| r.get("resultType")) {
        Some(t) if t == kind.result_type => Ok(message),
        _ => Err(format!("not a {} result: {}", kind.result_type, excerpt())),
    }
}

async fn obtain_state(uri: &Uri) -> Result<String, String> {
    let message = exchange(&client(), uri, request_body(None), FIRST).await?;
    message["result"]["requestState"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "no requestState in the first call's result".to_owned())
}

/// [`WORKERS`] closed loops for warm-up + measure; successes count only when they complete
/// inside the measured window, errors count whenever they happen (warm-up included).
async fn load(
    upstream: &'static str,
    path: &'static str,
    uri: &Uri,
    body: Bytes,
    kind: Kind,
    measure: Duration,
) -> Row {
    let client = client();
    let window = Instant::now() + WARMUP;
    let end = window + measure;
    let mut workers = JoinSet::new();
    for _ in 0..WORKERS {
        let (client, uri, body) = (client.clone(), uri.clone(), body.clone());
        workers.spawn(async move {
            let (mut latencies, mut errors, mut first_error) = (Vec::new(), 0u64, None);
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let outcome = exchange(&client, &uri, body.clone(), kind).await;
                let done = Instant::now();
                match outcome {
                    Ok(_) if done >= window && done <= end => latencies.push(done - sent),
                    Ok(_) => {}
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (latencies, errors, first_error)
        });
    }
    let (mut latencies, mut errors, mut first_error) = (Vec::new(), 0, None);
    while let Some(joined) = workers.join_next().await {
        let (l, e, f) = joined.expect("a worker does not panic");
        latencies.extend(l);
        errors += e;
        first_error = first_error.or(f);
    }
    latencies.sort_unstable();
    let percentile = |q: f64| {
        let i = ((latencies.len().saturating_sub(1)) as f64 * q).round() as usize;
        latencies.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    Row {
        upstream,
        path,
        kind,
        rps: latencies.len() as f64 / measure.as_secs_f64(),
        p50_ms: percentile(0.50),
        p99_ms: percentile(0.99),
        errors,
        first_error,
    }
}

async fn start_sidecar(upstream: &str) -> Result<Running, String> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = Config {
        listen: loopback,
        admin_listen: loopback,
        upstream: upstream.to_owned(),
        ..Config::default()
    };
    // Nothing should be in flight at shutdown; bound the drain anyway.
    config.timeouts.drain_ms = 2000;
    app::start(&config)
        .await
        .map_err(|e| format!("sidecar: {e}"))
}

/// The instant upstream: fixed answers, no parsing beyond one substring search. Only POSTs
/// arrive here, so the method is not checked.
async fn start_instant() -> Result<(SocketAddr, oneshot::Sender<()>, JoinHandle<()>), String> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| format!("instant upstream: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (stop, mut stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        // Dropping this set when the loop ends aborts every connection task.
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let _ = stream.set_nodelay(true);
                    connections.spawn(async move {
                        let _ = auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), service_fn(instant))
                            .await;
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = &mut stopped => break,
            }
        }
    });
    Ok((addr, stop, task))
}

async fn instant(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let key = b"\"requestState\"";
    let is_retry = body.windows(key.len()).any(|w| w == key);
    let answer = if is_retry { COMPLETE } else { INPUT_REQUIRED };
    let mut response = Response::new(Full::new(Bytes::from_static(answer)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// `tests/py/legacy_server.py --json-response` as a child, killed when dropped. Its stdin
/// stays a pipe, so it also exits if this process dies without dropping it.
struct Legacy {
    child: Child,
    port: u16,
}

impl Legacy {
    fn start() -> Result<Self, String> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        // The venv tests/run.sh creates (mcp==2.3.0).
        let python = root.join("target/pyvenv/bin/python");
        let mut child = Command::new(&python)
            .arg(root.join("tests/py/legacy_server.py"))
            .args(["--port", "0", "--json-response"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e} (run tests/run.sh first)", python.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                    break;
                }
            }
            // Keep draining so the child never blocks on a full pipe; ends with the child.
            for _ in lines {}
        });
        let mut legacy = Legacy { child, port: 0 };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(port)) => legacy.port = port,
            _ => return Err("the legacy server did not report its port within 30 s".into()),
        }
        Ok(legacy)
    }
}

impl Drop for Legacy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn print_report(rows: &[Row], measure: Duration) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\nClosed-loop load: {WORKERS} workers, {} s measured after {} s warm-up, HTTP/1.1 pooled, loopback, \
         tools/call provision. This machine has {cores} cores, shared by the load generator, the \
         sidecar and the upstream (the Python server included), so absolute numbers are \
         pessimistic; compare rows.\n",
        measure.as_secs(),
        WARMUP.as_secs(),
    );
    println!("| target | kind | req/s | p50 ms | p99 ms | errors |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} {} | {} | {:.0} | {:.2} | {:.2} | {} |",
            r.upstream, r.path, r.kind.label, r.rps, r.p50_ms, r.p99_ms, r.errors
        );
    }
    for r in rows.iter().filter(|r| r.errors > 0) {
        let first = r.first_error.as_deref().unwrap_or("?");
        println!(
            "\nFAILED {} {} {}: first error: {first}",
            r.upstream, r.path, r.kind.label
        );
    }
    println!("\nvia sidecar / direct:\n");
    println!("| upstream | kind | req/s ratio | p50 ratio | p99 ratio |");
    println!("| --- | --- | ---: | ---: | ---: |");
    for upstream in ["legacy", "instant"] {
        for kind in [FIRST, RETRY] {
            let find = |path| {
                rows.iter()
                    .find(|r| r.upstream == upstream && r.path == path && r.kind == kind)
            };
            if let (Some(d), Some(v)) = (find("direct"), find("via sidecar")) {
                let (rps, p50, p99) = (v.rps / d.rps, v.p50_ms / d.p50_ms, v.p99_ms / d.p99_ms);
                let kind = kind.label;
                println!("| {upstream} | {kind} | {rps:.2} | {p50:.2} | {p99:.2} |");
            }
        }
    }
}
