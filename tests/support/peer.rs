//! A peer server as a child process: the Python and TypeScript legacy servers share its
//! shape (print `LISTENING <port>` once bound, exit when stdin closes, answer `/debug/*`
//! with JSON). Stopped when dropped.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Peer {
    child: Child,
    pub port: u16,
}

impl Peer {
    /// Spawn `command` and wait (at most 30 s) for its `LISTENING <port>` line; `what`
    /// names it in the panic if it never comes.
    pub fn spawn(mut command: Command, what: &str) -> Self {
        // stdin stays a pipe: the server exits when it closes (when this test process dies).
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
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
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(port) => Self { child, port },
            Err(_) => {
                let _ = child.kill();
                panic!("{what} did not start within 30 s");
            }
        }
    }

    /// Base URL (no path): the sidecar's `upstream`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A debug endpoint's JSON answer.
    pub fn debug_json(&self, method: &str, path: &str) -> Value {
        serde_json::from_slice(&self.debug(method, path)).unwrap()
    }

    /// A debug endpoint's JSON list (empty when it answers anything else).
    pub fn debug_list(&self, path: &str) -> Vec<Value> {
        self.debug_json("GET", path)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A tiny blocking HTTP/1.0 exchange for the debug endpoints; the body of a 200.
    pub fn debug(&self, method: &str, path: &str) -> Vec<u8> {
        let port = self.port;
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n"
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

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
