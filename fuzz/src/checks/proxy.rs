//! `proxy`: the whole sidecar, in process, between arbitrary client bytes and arbitrary
//! upstream bytes (in the spirit of Envoy's capture fuzzing).
//!
//! Input: the client's bytes, then the line `@UPSTREAM@`, then what the fake upstream
//! answers to every connection (without the marker it answers nothing and closes).
//! Substitutions give the fuzzer what it could not guess:
//! - client `@TOKEN@`: a token of the fuzz ring (the sidecar's key file) sealing a state
//!   `fz-state-<n>` never minted before, for the first request's method, name, arguments
//!   and path;
//! - client `@LEN@`: the length of the first request's body (after substitution);
//! - upstream `@ID@`: the JSON id of the request the upstream received (`null` if none);
//! - upstream `@LEN@`: the length of the answer's body.
//!
//! Invariants, checked on every run: (1) every `requestState` a client can read in what
//! it received (JSON or SSE, whatever the label) is a token of the fuzz ring, so the
//! upstream's plaintext never reaches it; (2) every `requestState` the upstream received
//! is a state minted (by this process: a late request of an earlier run may arrive) for
//! exactly the request that carried it (method, target, arguments, path): no unverified
//! state reaches the upstream.
//!
//! With `FUZZ_PROXY_TRACE` set, each run prints the three byte streams (for triage).

use super::{ring, visible};
use mcp_state_guard::facade::app::{self, Running};
use mcp_state_guard::facade::config::Config;
use mcp_state_guard::facade::jsonrpc;
use mcp_state_guard::facade::token::{RequestBinding, SealOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::signal::unix::{SignalKind, signal};

const UPSTREAM_MARKER: &[u8] = b"\n@UPSTREAM@\n";
/// How long a run waits for the sidecar's first answer byte, then for more once it holds
/// a complete answer: the sidecar's own timeouts (below) end every stuck exchange sooner.
const FIRST_BYTE: Duration = Duration::from_millis(300);
const SETTLE: Duration = Duration::from_millis(5);
const QUIET: Duration = Duration::from_millis(40);

pub fn check(data: &[u8]) {
    let harness = harness();
    // One run at a time: the fake upstream's answer and log are per run.
    let _run = harness.lock.lock().unwrap_or_else(|e| e.into_inner());
    let (client, upstream) = match find(data, UPSTREAM_MARKER) {
        Some(at) => (&data[..at], &data[at + UPSTREAM_MARKER.len()..]),
        None => (data, &[][..]),
    };
    let client = substitute_client(client);
    {
        let mut exchange = harness.exchange.lock().unwrap();
        exchange.answer = upstream.to_vec();
        exchange.received.clear();
    }
    let answer = harness
        .runtime
        .block_on(converse(harness.sidecar.addr(), &client));
    // Let the upstream side finish recording what it read.
    let received = harness.runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        std::mem::take(&mut harness.exchange.lock().unwrap().received)
    });

    if std::env::var_os("FUZZ_PROXY_TRACE").is_some() {
        eprintln!(
            "client sent:\n{}\nupstream received:\n{}\nclient received:\n{}",
            String::from_utf8_lossy(&client),
            received
                .iter()
                .map(|r| String::from_utf8_lossy(r))
                .collect::<Vec<_>>()
                .join("\n--\n"),
            String::from_utf8_lossy(&answer)
        );
    }
    for message in http_messages(&answer, false) {
        visible::check_body(&message.body);
    }
    let minted = minted().lock().unwrap_or_else(|e| e.into_inner());
    for request in received {
        check_forwarded(&request, &minted);
    }
}

/// Every state a `@TOKEN@` sealed in this process, and the request it was sealed for.
fn minted() -> &'static Mutex<HashMap<String, RequestBinding>> {
    static MINTED: OnceLock<Mutex<HashMap<String, RequestBinding>>> = OnceLock::new();
    MINTED.get_or_init(Mutex::default)
}

/// (2): a state the upstream received is one this run minted for that very request.
fn check_forwarded(request: &[u8], minted: &HashMap<String, RequestBinding>) {
    for message in http_messages(request, true) {
        let Ok(value) = serde_json::from_slice::<Value>(&message.body) else {
            continue;
        };
        let Value::Object(envelope) = &value else {
            continue;
        };
        for (key, level) in envelope {
            let folded = jsonrpc::fold(key);
            if folded == "requeststate" {
                panic!("the upstream received a top-level `{key}`");
            }
            let (Some(Value::Object(params)), "params") = (Some(level), folded.as_str()) else {
                continue;
            };
            for (key, state) in params {
                if jsonrpc::fold(key) != "requeststate" || state.is_null() {
                    continue;
                }
                let Value::String(state) = state else {
                    panic!("the upstream received a non-string `{key}`: {state}");
                };
                let Some(bound) = minted.get(state) else {
                    panic!("the upstream received a state never minted: {state:?}");
                };
                let method = envelope.get("method").and_then(Value::as_str).unwrap_or("");
                let here = RequestBinding::of(method, Some(params))
                    .map(|b| b.at_path(&message.path))
                    .unwrap_or_else(|_| panic!("a forwarded state on an unbindable request"));
                assert_eq!(
                    &here, bound,
                    "the upstream received a state minted for another request"
                );
            }
        }
    }
}

/// The in-process sidecar, its fake upstream and the runtime both run on.
struct Harness {
    runtime: Runtime,
    sidecar: Running,
    exchange: Arc<Mutex<Exchange>>,
    lock: Mutex<()>,
    /// Holds the key file for the sidecar's lifetime.
    _keys: tempfile::TempDir,
}

/// What the fake upstream answers in this run, and what it was sent.
#[derive(Default)]
struct Exchange {
    answer: Vec<u8>,
    received: Vec<Vec<u8>>,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let exchange = Arc::new(Mutex::new(Exchange::default()));
        let keys = tempfile::tempdir().expect("a temporary directory");
        let sidecar = runtime.block_on(async {
            // libFuzzer's `main` does not ignore SIGPIPE as Rust's does, so a vectored
            // write (hyper's `writev`) into a socket its peer closed killed the whole
            // run (found after 27,976 runs). A handler (tokio never removes it) turns
            // that into EPIPE, as in the sidecar's binary. The handler outlives the
            // stream, which nobody needs to read.
            drop(signal(SignalKind::pipe()).expect("a SIGPIPE handler"));
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind upstream");
            let upstream = listener.local_addr().expect("upstream address");
            tokio::spawn(serve_upstream(listener, exchange.clone()));
            let path = keys.path().join("keys");
            std::fs::write(&path, format!("{}\n", ring::SECRET)).expect("write the key file");
            let mut config = Config {
                listen: "127.0.0.1:0".parse().unwrap(),
                admin_listen: "127.0.0.1:0".parse().unwrap(),
                upstream: format!("http://{upstream}"),
                ..Config::default()
            };
            config.state.keys_file = Some(path);
            config.state.audience = Some(ring::AUDIENCE.to_owned());
            config.state.ttl_seconds = ring::TTL_SECONDS;
            config.timeouts.connect_ms = 100;
            config.timeouts.response_head_ms = 150;
            config.timeouts.header_read_ms = 60;
            config.timeouts.body_read_ms = 60;
            config.timeouts.client_idle_ms = 1_000;
            config.timeouts.upstream_idle_ms = 1_000;
            config.limits.max_body_bytes = 64 * 1024;
            config.limits.max_event_bytes = 16 * 1024;
            let problems = config.validate();
            assert!(
                problems.is_empty(),
                "invalid fuzz configuration: {problems:?}"
            );
            app::start(&config).await.expect("the sidecar starts")
        });
        Harness {
            runtime,
            sidecar,
            exchange,
            lock: Mutex::new(()),
            _keys: keys,
        }
    })
}

/// Accept every connection the sidecar opens: read one request, record it, write this
/// run's answer (its `@ID@` and `@LEN@` filled in) and close.
async fn serve_upstream(listener: TcpListener, exchange: Arc<Mutex<Exchange>>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let exchange = exchange.clone();
        tokio::spawn(async move {
            let request = read_request(&mut stream).await;
            let answer = {
                let mut exchange = exchange.lock().unwrap();
                exchange.received.push(request.clone());
                exchange.answer.clone()
            };
            let answer = substitute_upstream(&answer, &request);
            let _ = stream.write_all(&answer).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// One request as the sidecar sends it: the head, then the body its framing announces.
async fn read_request(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(100);
    let mut chunk = [0u8; 8192];
    while http_messages(&buf, true).iter().all(|m| !m.complete) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    buf
}

/// Send the client's bytes and collect the answer: until the sidecar closes, goes quiet
/// after a complete answer, or never answers.
async fn converse(addr: SocketAddr, client: &[u8]) -> Vec<u8> {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        panic!("the sidecar does not accept connections");
    };
    let _ = stream.write_all(client).await;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16384];
    let start = Instant::now();
    loop {
        let complete = http_messages(&answer, false)
            .iter()
            .filter(|m| m.complete)
            .count();
        let wait = match complete {
            0 if answer.is_empty() => FIRST_BYTE.saturating_sub(start.elapsed()),
            0 => QUIET,
            _ => SETTLE,
        };
        match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    answer
}

/// Fill in the client's `@TOKEN@` (recording the minted state) and `@LEN@`.
fn substitute_client(client: &[u8]) -> Vec<u8> {
    const TOKEN: &[u8] = b"@TOKEN@";
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut bytes = client.to_vec();
    if find(&bytes, TOKEN).is_some() {
        let binding = first_request_binding(&bytes).unwrap_or_else(ring::binding);
        let state = format!("fz-state-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let token = ring::sealer().seal(&state, &binding, &SealOptions::default());
        bytes = replace_all(&bytes, TOKEN, token.as_bytes());
        minted()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(state, binding);
    }
    let len = body_start(&bytes).map_or(0, |start| bytes.len() - start);
    // `@LEN@` sits in the head: replacing it does not change the body's length.
    replace_all(&bytes, b"@LEN@", len.to_string().as_bytes())
}

/// The binding of the first request in `client`, as the sidecar will compute it.
fn first_request_binding(client: &[u8]) -> Option<RequestBinding> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let start = match request.parse(client) {
        Ok(httparse::Status::Complete(start)) => start,
        _ => return None,
    };
    let path = request.path?.to_owned();
    let value: Value = serde_json::from_slice(&client[start..]).ok()?;
    let method = value.get("method")?.as_str()?;
    let binding = RequestBinding::of(method, value.get("params")?.as_object()).ok()?;
    Some(binding.at_path(&path))
}

/// Fill in the upstream's `@ID@` (the id it was sent) and `@LEN@` (its body's length).
fn substitute_upstream(answer: &[u8], request: &[u8]) -> Vec<u8> {
    let id = http_messages(request, true)
        .first()
        .and_then(|m| serde_json::from_slice::<Value>(&m.body).ok())
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null);
    let bytes = replace_all(answer, b"@ID@", id.to_string().as_bytes());
    let len = body_start(&bytes).map_or(0, |start| bytes.len() - start);
    replace_all(&bytes, b"@LEN@", len.to_string().as_bytes())
}

/// One HTTP/1.1 message read out of a byte stream.
struct Message {
    /// The request target (empty for a response).
    path: String,
    body: Vec<u8>,
    /// Its whole body arrived (by `Content-Length`, chunked framing, or none announced
    /// on a request).
    complete: bool,
}

/// The HTTP/1.1 messages in `bytes`, in order; the last may be incomplete. A response
/// without framing runs to the end of `bytes`.
fn http_messages(mut bytes: &[u8], requests: bool) -> Vec<Message> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let (head_len, path, status) = if requests {
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(bytes) {
                Ok(httparse::Status::Complete(n)) => {
                    (n, request.path.unwrap_or_default().to_owned(), 0)
                }
                _ => break,
            }
        } else {
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(bytes) {
                Ok(httparse::Status::Complete(n)) => (n, String::new(), response.code.unwrap_or(0)),
                _ => break,
            }
        };
        let header = |name: &str| {
            headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
                .next()
        };
        let chunked = header("transfer-encoding").is_some_and(|t| t.ends_with("chunked"));
        let length = header("content-length").and_then(|l| l.parse::<usize>().ok());
        let rest = &bytes[head_len..];
        let (body, used, complete) =
            if (100..200).contains(&status) || status == 204 || status == 304 {
                (Vec::new(), 0, true)
            } else if chunked {
                dechunk(rest)
            } else if let Some(length) = length {
                let n = length.min(rest.len());
                (rest[..n].to_vec(), n, n == length)
            } else if requests {
                (Vec::new(), 0, true)
            } else {
                (rest.to_vec(), rest.len(), false)
            };
        out.push(Message {
            path,
            body,
            complete,
        });
        bytes = &rest[used..];
    }
    out
}

/// A chunked body: its data, the bytes its framing took, and whether it ended.
fn dechunk(bytes: &[u8]) -> (Vec<u8>, usize, bool) {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = find(&bytes[at..], b"\r\n") else {
            return (body, bytes.len(), false);
        };
        let line = String::from_utf8_lossy(&bytes[at..at + line_end]);
        let size = line.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size, 16) else {
            return (body, bytes.len(), false);
        };
        at += line_end + 2;
        if size == 0 {
            // Trailers, then the blank line.
            return match find(&bytes[at..], b"\r\n\r\n") {
                _ if bytes[at..].starts_with(b"\r\n") => (body, at + 2, true),
                Some(end) => (body, at + end + 4, true),
                None => (body, bytes.len(), false),
            };
        }
        let end = (at + size).min(bytes.len());
        body.extend_from_slice(&bytes[at..end]);
        if at + size + 2 > bytes.len() {
            return (body, bytes.len(), false);
        }
        at += size + 2;
    }
}

fn body_start(bytes: &[u8]) -> Option<usize> {
    find(bytes, b"\r\n\r\n").map(|at| at + 4)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest, from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}
