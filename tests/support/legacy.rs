//! The plaintext legacy MCP server (`tests/py/legacy_server.py`, on the real Python SDK)
//! as a child process on a free port, stopped when dropped.

use super::peer::Peer;
use super::python::{interpreter, repo_path};
use serde_json::Value;
use std::process::Command;

/// How the server answers: one JSON body, or (default SDK behaviour) SSE when it has
/// notifications to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Json,
    Sse,
}

pub struct LegacyServer {
    peer: Peer,
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
        let peer = Peer::spawn(command, script);
        Self {
            port: peer.port,
            peer,
            mode,
        }
    }

    /// Base URL (no path): the sidecar's `upstream`.
    pub fn base_url(&self) -> String {
        self.peer.base_url()
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base_url())
    }

    /// Every request the server's handlers saw: `[{era, id, method, name, requestState, inputResponses}]`.
    pub fn seen(&self) -> Vec<Value> {
        self.peer.debug_list("/debug/seen")
    }

    /// Every HTTP request that reached `/mcp`, with headers and body.
    pub fn http_log(&self) -> Vec<Value> {
        self.peer.debug_list("/debug/http")
    }

    pub fn reset(&self) {
        self.peer.debug("POST", "/debug/reset");
    }

    /// A debug endpoint's JSON answer.
    pub fn debug_json(&self, method: &str, path: &str) -> Value {
        self.peer.debug_json(method, path)
    }
}
