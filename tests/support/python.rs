//! The pinned Python MCP SDK (`mcp==2.3.0`) as a real peer.
//!
//! `tests/run.sh` creates the venv; a missing venv is a hard failure, never a skip, so a
//! test that needs the reference cannot silently pass without it.

use serde_json::Value;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The venv interpreter: `STATE_GUARD_TEST_PYTHON`, else `target/pyvenv/bin/python`.
pub fn interpreter() -> PathBuf {
    venv_interpreter(
        "STATE_GUARD_TEST_PYTHON",
        "target/pyvenv",
        "the venv with mcp==2.3.0",
    )
}

/// A venv's interpreter: the variable `var`, else `<venv>/bin/python` in the repository;
/// `tests/run.sh` creates `what`.
pub fn venv_interpreter(var: &str, venv: &str, what: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path(&format!("{venv}/bin/python")));
    assert!(
        path.exists(),
        "{} does not exist: run `tests/run.sh` (it creates {what})",
        path.display()
    );
    path
}

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Run `tests/py/<script>` with `input` as JSON on stdin and parse its JSON stdout.
/// Bounded: a script that runs longer than `timeout` is killed and the test fails.
pub fn run_json(script: &str, input: &Value, timeout: Duration) -> Value {
    run_json_with(&interpreter(), script, input, timeout)
}

/// [`run_json`] with another venv's interpreter.
pub fn run_json_with(
    interpreter: &std::path::Path,
    script: &str,
    input: &Value,
    timeout: Duration,
) -> Value {
    let mut child = Command::new(interpreter)
        .arg(repo_path(&format!("tests/py/{script}")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python interpreter");
    let body = serde_json::to_vec(input).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    // Drain both pipes concurrently so a large answer cannot block the child.
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{script} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    writer
        .join()
        .unwrap()
        .expect("write the request to the script");
    let status = child.wait().unwrap();
    let stdout = stdout.join().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(
        status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&stderr)
    );
    serde_json::from_slice(&stdout).expect("the script prints one JSON document")
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

/// Run `tests/py/client_flows.py --url URL ARGS..` (the SDK client) and parse the JSON it
/// prints. Awaited asynchronously so the in-process sidecar keeps serving on this runtime;
/// killed (kill_on_drop) when it outlives two minutes.
pub async fn client_flows(url: &str, args: &[&str]) -> Value {
    let child = tokio::process::Command::new(interpreter())
        .arg(repo_path("tests/py/client_flows.py"))
        .args(["--url", url, "--timeout", "60"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start client_flows.py");
    let Ok(output) = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await
    else {
        panic!("client_flows {args:?} did not finish within 120 s");
    };
    let output = output.expect("wait for client_flows.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let ok = output.status.success();
    assert!(ok, "client_flows {args:?} failed:\n{stdout}\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The reference SDK's argument digest (`RequestStateBoundary`'s `_request_identity`) of
/// each `params.arguments` JSON text, through `tests/py/token_interop.py`.
pub fn reference_digests(texts: &[String], timeout: Duration) -> Vec<String> {
    let answer = run_json(
        "token_interop.py",
        &serde_json::json!({"op": "digest", "texts": texts}),
        timeout,
    );
    let digests: Vec<String> = answer["digests"]
        .as_array()
        .expect("a list of digests")
        .iter()
        .map(|d| d.as_str().expect("a digest").to_owned())
        .collect();
    assert_eq!(digests.len(), texts.len());
    digests
}
