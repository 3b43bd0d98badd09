//! The plaintext legacy MCP server (`tests/py/legacy_server.py`, on the real Python SDK)
//! as a child process on a free port, stopped when dropped.

use super::python::{interpreter, repo_path};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How the server answers: one JSON body, or (default SDK behaviour) SSE when it has
/// notifications to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Json,
    Sse,
}

pub struct LegacyServer {
    child: Child,
    pub port: u16,
    pub mode: Mode,
}

impl LegacyServer {
    pub fn start(mode: Mode) -> Self {
        Self::start_script("tests/py/legacy_server.py", mode)
    }

    /// Another server of the same shape (`LISTENING <port>`, stdin watchdog, `/debug/*`).
    pub fn start_script(script: &str, mode: Mode) -> Self {
        let mut command = Command::new(interpreter());
        command.arg(repo_path(script)).args(["--port", "0"]);
        if mode == Mode::Json {
            command.arg("--json-response");
        }
        // stdin stays a pipe: the server exits when it closes (when this test process dies).
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the legacy server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(port.trim().parse::<u16>().unwrap());
                    break;
                }
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(port) => port,
            Err(_) => {
                let _ = child.kill();
                panic!("the legacy server did not start within 30 s");
            }
        };
        Self { child, port, mode }
    }

    /// Base URL (no path): the sidecar's `upstream`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base_url())
    }

    /// Every request the server's handlers saw: `[{era, id, method, name, requestState, inputResponses}]`.
    pub fn seen(&self) -> Vec<Value> {
        let body = self.debug("GET", "/debug/seen");
        serde_json::from_slice::<Value>(&body)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Every HTTP request that reached `/mcp`, with headers and body.
    pub fn http_log(&self) -> Vec<Value> {
        let body = self.debug("GET", "/debug/http");
        serde_json::from_slice::<Value>(&body)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn reset(&self) {
        self.debug("POST", "/debug/reset");
    }

    /// A debug endpoint's JSON answer.
    pub fn debug_json(&self, method: &str, path: &str) -> Value {
        serde_json::from_slice(&self.debug(method, path)).unwrap()
    }

    /// A tiny blocking HTTP/1.0 exchange for the debug endpoints.
    fn debug(&self, method: &str, path: &str) -> Vec<u8> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let split = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an HTTP response")
            + 4;
        assert!(
            response.starts_with(b"HTTP/1.1 200") || response.starts_with(b"HTTP/1.0 200"),
            "{path}: {}",
            String::from_utf8_lossy(&response[..split])
        );
        response[split..].to_vec()
    }
}

impl Drop for LegacyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
