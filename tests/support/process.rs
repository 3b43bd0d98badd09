//! The `mcp-state-guard` binary as a child process, for what only a real process shows:
//! its memory (`/proc/<pid>/status`), its log volume, and its signals.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// The binary, started on free ports; its address and its JSON log.
pub struct Process {
    child: std::process::Child,
    pub addr: String,
    log: Arc<Mutex<Vec<u8>>>,
}

impl Process {
    /// `run --listen 127.0.0.1:0` plus `args`, with `env` (and nothing else of the
    /// environment's `MCP_STATE_GUARD_*`); `env` may override the defaults here (a free
    /// admin port, `info`, JSON).
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-state-guard"));
        for (key, _) in std::env::vars() {
            if key.starts_with("MCP_STATE_GUARD_") {
                command.env_remove(key);
            }
        }
        let mut child = command
            .args(["run", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("MCP_STATE_GUARD_ADMIN_LISTEN", "127.0.0.1:0")
            .env("MCP_STATE_GUARD_LOG__LEVEL", "info")
            .env("MCP_STATE_GUARD_LOG__FORMAT", "json")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut addr = None;
        let mut line = String::new();
        while addr.is_none() && stderr.read_line(&mut line).unwrap() > 0 {
            log.lock().unwrap().extend_from_slice(line.as_bytes());
            if line.contains("mcp-state-guard ready") {
                let record: serde_json::Value = serde_json::from_str(&line).unwrap();
                addr = record["fields"]["addr"].as_str().map(str::to_owned);
            }
            line.clear();
        }
        drain_into(stderr, log.clone());
        Self {
            child,
            addr: addr.expect("the sidecar started"),
            log,
        }
    }

    /// Peak resident memory so far, in MiB (`VmHWM`).
    pub fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            / 1024
    }

    pub fn log_len(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    pub fn log(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` (a name `kill` knows: `TERM`, `HUP`).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal}");
    }

    /// The exit status, once the process has exited within `timeout` (`None` if not).
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Wait (up to 10 s) until the log contains `needle`.
    pub fn wait_for_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.log().contains(needle) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copy everything `reader` yields into `sink` from a thread of its own, until it ends
/// (a child's log, kept for the test to read while the child runs).
pub fn drain_into(mut reader: impl Read + Send + 'static, sink: Arc<Mutex<Vec<u8>>>) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buffer) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buffer[..n]);
        }
    });
}
