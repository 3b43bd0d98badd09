//! Closed-loop load: what the sidecar costs in throughput and latency, per MRTR kind.
//!
//! Four targets: the plaintext legacy Python server (JSON-response mode) directly and
//! through an in-process sidecar, and a trivial in-process hyper "instant" upstream
//! directly and through a second sidecar. The instant upstream answers with fixed bytes,
//! so its via/direct ratio shows the sidecar's own overhead without Python dominating.
//! Two kinds per target: a first call (the upstream's plaintext state gets sealed) and a
//! retry (a sealed state gets opened and checked). A retry reuses one state obtained
//! once through the same path: legal, as no tool there is single-use.
//!
//! Then what consuming a single-use state adds to a retry: the instant upstream through
//! the sidecar above (no single-use policy, the baseline) and through two with
//! `single_use.tools = ["provision"]`, one on the memory store and one on a real
//! `redis-server` this bench starts on a free loopback port. A single-use token opens
//! once, so each worker mints a fresh one with a first call before every retry, and the
//! two are timed apart (first calls get their own rows). They run with one worker (what a
//! consumption adds to a retry that waits for nothing else) and with 16 (under load, where
//! a request also queues behind the others' work), the three sidecars in interleaved
//! slices, so the changing load of a shared machine weighs on each alike.
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
use mcp_state_guard::config::{Config, SingleUseStore};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

const WORKERS: usize = 16;
/// The single-use rows run at each of these concurrencies: one worker shows what a
/// consumption adds to a retry that waits for nothing else; [`WORKERS`], what it costs
/// under load, where every request also queues behind the others' work.
const SINGLE_USE_WORKERS: [usize; 2] = [1, WORKERS];
const WARMUP: Duration = Duration::from_secs(1);
/// The single-use rows' measured time is split into this many slices per sidecar, run
/// in turn (a multiple of the three sidecars, so each runs in each position equally
/// often); every slice after the first warms up for [`SLICE_WARMUP`] only (the pools and
/// the store connection are warm by then).
const SLICES: u32 = 6;
const SLICE_WARMUP: Duration = Duration::from_millis(200);
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
/// The two halves of [`Step::MintThenRetry`].
const MINT: Kind = Kind::new("first call (mints the next)", "input_required");
const FRESH_RETRY: Kind = Kind::new("retry (fresh token)", "complete");

/// The sidecars of the single-use rows, by their `single_use` setting; the first is the
/// baseline the others are compared with.
const SINGLE_USE_OFF: &str = "via sidecar, single-use off";
const SINGLE_USE_MEMORY: &str = "via sidecar, single-use memory";
const SINGLE_USE_REDIS: &str = "via sidecar, single-use redis";

impl Kind {
    const fn new(label: &'static str, result_type: &'static str) -> Self {
        Kind { label, result_type }
    }
}

struct Row {
    upstream: &'static str,
    path: &'static str,
    kind: Kind,
    workers: usize,
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
    // The children are dropped (killed) after the runtime is down, on every path.
    let outcome = Legacy::start().and_then(|legacy| {
        let redis = Redis::start()?;
        let rows = runtime.block_on(run(legacy.port, &redis.url(), measure));
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

async fn run(legacy_port: u16, redis_url: &str, measure: Duration) -> Result<Vec<Row>, String> {
    let (instant_addr, stop_instant, instant_task) = start_instant().await?;
    let instant_url = format!("http://{instant_addr}");
    let legacy_sidecar = start_sidecar(&format!("http://127.0.0.1:{legacy_port}"), |_| {}).await?;
    let instant_sidecar = start_sidecar(&instant_url, |_| {}).await?;
    let memory_sidecar = start_sidecar(&instant_url, |c| {
        c.single_use.tools = vec!["provision".into()];
    })
    .await?;
    let redis_sidecar = start_sidecar(&instant_url, |c| {
        c.single_use.tools = vec!["provision".into()];
        c.single_use.store = SingleUseStore::Redis;
        c.single_use.redis_url = Some(redis_url.to_owned());
    })
    .await?;
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
        let single_use = [
            (SINGLE_USE_OFF, &instant_sidecar),
            (SINGLE_USE_MEMORY, &memory_sidecar),
            (SINGLE_USE_REDIS, &redis_sidecar),
        ]
        .map(|(path, sidecar)| {
            let uri = format!("http://{}/mcp", sidecar.addr())
                .parse()
                .expect("a URI");
            (path, uri)
        });
        for workers in SINGLE_USE_WORKERS {
            rows.extend(load_single_use(&single_use, workers, measure).await);
        }
        Ok(rows)
    }
    .await;
    // Stop everything we started, whatever happened above.
    legacy_sidecar.shutdown(Duration::ZERO).await;
    instant_sidecar.shutdown(Duration::ZERO).await;
    memory_sidecar.shutdown(Duration::ZERO).await;
    redis_sidecar.shutdown(Duration::ZERO).await;
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
    state_of(&message)
}

fn state_of(message: &Value) -> Result<String, String> {
    message["result"]["requestState"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "no requestState in the first call's result".to_owned())
}

/// What each closed loop sends.
#[derive(Clone)]
enum Step {
    /// The same request every time.
    Fixed(Bytes, Kind),
    /// A first call that mints a token, then the retry that presents it: a single-use
    /// token opens only once. The two are timed apart.
    MintThenRetry,
}

/// When successes count: they must complete inside it. Errors count whenever they happen.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// One kind of exchange's latencies (inside the window) and failures (any time).
#[derive(Default)]
struct Series {
    latencies: Vec<Duration>,
    errors: u64,
    first_error: Option<String>,
}

impl Series {
    /// Record an exchange sent at `sent` that just ended with `outcome`.
    fn record<T>(
        &mut self,
        outcome: Result<T, String>,
        sent: Instant,
        window: Window,
    ) -> Option<T> {
        let done = Instant::now();
        match outcome {
            Ok(value) => {
                if done >= window.start && done <= window.end {
                    self.latencies.push(done - sent);
                }
                Some(value)
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
                None
            }
        }
    }

    fn merge(&mut self, other: Series) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    /// `measured`: the total length of the windows the latencies were collected in.
    fn into_row(
        mut self,
        (upstream, path, kind): (&'static str, &'static str, Kind),
        workers: usize,
        measured: Duration,
    ) -> Row {
        self.latencies.sort_unstable();
        let latencies = &self.latencies;
        let percentile = |q: f64| {
            let i = ((latencies.len().saturating_sub(1)) as f64 * q).round() as usize;
            latencies.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
        };
        Row {
            upstream,
            path,
            kind,
            workers,
            rps: latencies.len() as f64 / measured.as_secs_f64(),
            p50_ms: percentile(0.50),
            p99_ms: percentile(0.99),
            errors: self.errors,
            first_error: self.first_error,
        }
    }
}

/// [`WORKERS`] closed loops for warm-up + measure, on a fresh pool.
async fn load(
    upstream: &'static str,
    path: &'static str,
    uri: &Uri,
    body: Bytes,
    kind: Kind,
    measure: Duration,
) -> Row {
    let start = Instant::now() + WARMUP;
    let window = Window {
        start,
        end: start + measure,
    };
    let step = Step::Fixed(body, kind);
    let (requests, _) = drive(&client(), uri, &step, WORKERS, window).await;
    requests.into_row((upstream, path, kind), WORKERS, measure)
}

/// [`Step::MintThenRetry`] through each sidecar in turn, [`SLICES`] rounds, so that a
/// change in the machine's load (2 cores shared with other work) weighs on every sidecar
/// alike and their differences can be compared. One pool per sidecar throughout.
async fn load_single_use(
    sidecars: &[(&'static str, Uri)],
    workers: usize,
    measure: Duration,
) -> Vec<Row> {
    let slice = measure / SLICES;
    let mut collected: Vec<(HttpClient, Series, Series)> = sidecars
        .iter()
        .map(|_| (client(), Series::default(), Series::default()))
        .collect();
    for round in 0..SLICES as usize {
        let warmup = if round == 0 { WARMUP } else { SLICE_WARMUP };
        // Each round starts one sidecar further on, so none always runs right after the
        // same other one.
        for k in 0..sidecars.len() {
            let i = (round + k) % sidecars.len();
            let (_, uri) = &sidecars[i];
            let (client, retries, mints) = &mut collected[i];
            let start = Instant::now() + warmup;
            let window = Window {
                start,
                end: start + slice,
            };
            let (r, m) = drive(client, uri, &Step::MintThenRetry, workers, window).await;
            retries.merge(r);
            mints.merge(m);
        }
    }
    let measured = slice * SLICES;
    let mut rows = Vec::new();
    for ((path, _), (_, retries, mints)) in sidecars.iter().zip(collected) {
        rows.push(mints.into_row(("instant", path, MINT), workers, measured));
        rows.push(retries.into_row(("instant", path, FRESH_RETRY), workers, measured));
    }
    rows
}

/// `workers` closed loops until `window.end`. Returns the series of the requests
/// ([`Step::Fixed`]) or retries, and that of the first calls that minted them.
async fn drive(
    client: &HttpClient,
    uri: &Uri,
    step: &Step,
    workers: usize,
    window: Window,
) -> (Series, Series) {
    let first = request_body(None);
    let mut loops = JoinSet::new();
    for _ in 0..workers {
        let (client, uri, step, first) = (client.clone(), uri.clone(), step.clone(), first.clone());
        loops.spawn(async move {
            let (mut requests, mut mints) = (Series::default(), Series::default());
            loop {
                let sent = Instant::now();
                if sent >= window.end {
                    break;
                }
                match &step {
                    Step::Fixed(body, kind) => {
                        let outcome = exchange(&client, &uri, body.clone(), *kind).await;
                        requests.record(outcome, sent, window);
                    }
                    Step::MintThenRetry => {
                        let minted = exchange(&client, &uri, first.clone(), FIRST)
                            .await
                            .and_then(|m| state_of(&m));
                        let Some(state) = mints.record(minted, sent, window) else {
                            continue;
                        };
                        // Built before the clock starts: only the exchange is timed.
                        let retry = request_body(Some(&state));
                        let sent = Instant::now();
                        let outcome = exchange(&client, &uri, retry, RETRY).await;
                        requests.record(outcome, sent, window);
                    }
                }
            }
            (requests, mints)
        });
    }
    let (mut requests, mut mints) = (Series::default(), Series::default());
    while let Some(joined) = loops.join_next().await {
        let (r, m) = joined.expect("a worker does not panic");
        requests.merge(r);
        mints.merge(m);
    }
    (requests, mints)
}

async fn start_sidecar(
    upstream: &str,
    configure: impl FnOnce(&mut Config),
) -> Result<Running, String> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = Config {
        listen: loopback,
        admin_listen: loopback,
        upstream: upstream.to_owned(),
        ..Config::default()
    };
    // Nothing should be in flight at shutdown; bound the drain anyway.
    config.timeouts.drain_ms = 2000;
    configure(&mut config);
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

/// A `redis-server` on a free loopback port, nothing persisted, stopped when dropped. It
/// runs under a `sh` that stops it when its stdin (a pipe from this process) closes: on
/// drop, and also if this process dies without dropping it.
struct Redis {
    shell: Child,
    port: u16,
}

impl Redis {
    const SHELL: &str = r#"redis-server "$@" & pid=$!; read -r _; kill "$pid"; wait "$pid""#;

    fn start() -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port for redis-server: {e}"))?
            .port();
        let shell = Command::new("sh")
            .args(["-c", Self::SHELL, "redis-server"])
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("sh: {e}"))?;
        // Dropped on every return below: the server stops.
        let redis = Redis { shell, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis.answers() {
            if Instant::now() >= deadline {
                return Err("redis-server did not answer PING within 10 s \
                            (apt-get install redis-server)"
                    .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn answers(&self) -> bool {
        let ping = || -> std::io::Result<bool> {
            let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_read_timeout(Some(Duration::from_secs(1)))?;
            stream.write_all(b"PING\r\n")?;
            let mut reply = [0u8; 7];
            stream.read_exact(&mut reply)?;
            Ok(&reply == b"+PONG\r\n")
        };
        ping().unwrap_or(false)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // End of input: the shell kills the server and waits for it.
        drop(self.shell.stdin.take());
        let _ = self.shell.wait();
    }
}

fn print_report(rows: &[Row], measure: Duration) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\nClosed-loop load: {WORKERS} workers (unless said otherwise), {} s measured after {} s warm-up, HTTP/1.1 pooled, loopback, \
         tools/call provision. This machine has {cores} cores, shared by the load generator, the \
         sidecar and the upstream (the Python server included), so absolute numbers are \
         pessimistic; compare rows.\n",
        measure.as_secs(),
        WARMUP.as_secs(),
    );
    println!("| target | kind | workers | req/s | p50 ms | p99 ms | errors |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} {} | {} | {} | {:.0} | {:.3} | {:.3} | {} |",
            r.upstream, r.path, r.kind.label, r.workers, r.rps, r.p50_ms, r.p99_ms, r.errors
        );
    }
    for r in rows.iter().filter(|r| r.errors > 0) {
        let first = r.first_error.as_deref().unwrap_or("?");
        println!(
            "\nFAILED {} {} {} ({} workers): first error: {first}",
            r.upstream, r.path, r.kind.label, r.workers
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
    println!(
        "\nSingle-use consumption on a retry (instant upstream; each worker mints a fresh token \
         with a first call before every retry; retries only, req/s counts retries, each \
         preceded by a first call; {SLICES} interleaved slices per sidecar):\n"
    );
    println!(
        "| workers | single-use | retry req/s | p50 ms | p99 ms | added p50 ms | added p99 ms |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for workers in SINGLE_USE_WORKERS {
        let retry = |path| {
            rows.iter()
                .find(|r| r.path == path && r.kind == FRESH_RETRY && r.workers == workers)
        };
        let Some(baseline) = retry(SINGLE_USE_OFF) else {
            continue;
        };
        for (label, path) in [
            ("off (baseline)", SINGLE_USE_OFF),
            ("memory store", SINGLE_USE_MEMORY),
            ("redis store", SINGLE_USE_REDIS),
        ] {
            if let Some(r) = retry(path) {
                let (d50, d99) = (r.p50_ms - baseline.p50_ms, r.p99_ms - baseline.p99_ms);
                println!(
                    "| {workers} | {label} | {:.0} | {:.3} | {:.3} | {d50:+.3} | {d99:+.3} |",
                    r.rps, r.p50_ms, r.p99_ms
                );
            }
        }
    }
}
