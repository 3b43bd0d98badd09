//! The interop matrix's two axes: which SDK serves (the Python or the TypeScript plaintext
//! legacy server) and which SDK's client drives the flows. Both servers expose the same
//! tools and the same `/debug/*` endpoints; both client scripts take the same scenario
//! names and print the same JSON shapes, so one test body covers every cell.

use super::legacy::{LegacyServer, Mode};
use super::python::{interpreter, repo_path};
use super::ts::{self, TsServer};
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

/// The SDK a peer is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    Python,
    TypeScript,
}

/// A plaintext legacy server the sidecar sits in front of.
pub trait Upstream {
    fn sdk(&self) -> Sdk;
    fn base_url(&self) -> String;
    fn mcp_url(&self) -> String;
    /// Every request the server saw: `[{era, id, method, name, requestState, inputResponses}]`.
    fn seen(&self) -> Vec<Value>;
    /// Every HTTP request that reached `/mcp`: `[{method, path, query, headers, body}]`.
    fn http_log(&self) -> Vec<Value>;
    fn reset(&self);
}

impl Upstream for LegacyServer {
    fn sdk(&self) -> Sdk {
        Sdk::Python
    }
    fn base_url(&self) -> String {
        LegacyServer::base_url(self)
    }
    fn mcp_url(&self) -> String {
        LegacyServer::mcp_url(self)
    }
    fn seen(&self) -> Vec<Value> {
        LegacyServer::seen(self)
    }
    fn http_log(&self) -> Vec<Value> {
        LegacyServer::http_log(self)
    }
    fn reset(&self) {
        LegacyServer::reset(self)
    }
}

impl Upstream for TsServer {
    fn sdk(&self) -> Sdk {
        Sdk::TypeScript
    }
    fn base_url(&self) -> String {
        TsServer::base_url(self)
    }
    fn mcp_url(&self) -> String {
        TsServer::mcp_url(self)
    }
    fn seen(&self) -> Vec<Value> {
        TsServer::seen(self)
    }
    fn http_log(&self) -> Vec<Value> {
        TsServer::http_log(self)
    }
    fn reset(&self) {
        TsServer::reset(self)
    }
}

/// Start the `sdk`'s legacy server in `mode` (for TypeScript, `Sse` streams every answer).
pub fn start_upstream(sdk: Sdk, mode: Mode) -> Box<dyn Upstream> {
    match sdk {
        Sdk::Python => Box::new(LegacyServer::start(mode)),
        Sdk::TypeScript => Box::new(TsServer::start(mode)),
    }
}

/// How long one client process may run (each flow inside is bounded by the SDK's own
/// request timeout; this bounds the whole process).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Run `scenarios` with the `sdk`'s client against `url`, in one process, and parse the
/// JSON it prints (one key per scenario). Awaited asynchronously so an in-process sidecar
/// keeps serving on this runtime; killed when it outlives [`CLIENT_TIMEOUT`].
pub async fn run_client(sdk: Sdk, url: &str, scenarios: &[&str]) -> Value {
    let timeout = CLIENT_TIMEOUT.as_secs().saturating_sub(10).to_string();
    let command = match sdk {
        Sdk::Python => {
            let mut command = std::process::Command::new(interpreter());
            command.arg(repo_path("tests/py/interop_flows.py"));
            command
        }
        Sdk::TypeScript => ts::node_command("client_flows.mjs"),
    };
    let mut command = tokio::process::Command::from(command);
    command
        .args(["--url", url, "--timeout", &timeout])
        .args(scenarios)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().expect("start the client");
    let Ok(output) = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output()).await else {
        panic!("{sdk:?} client {scenarios:?} did not finish within {CLIENT_TIMEOUT:?}");
    };
    let output = output.expect("wait for the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{sdk:?} client {scenarios:?} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}
