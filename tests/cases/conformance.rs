//! The official MCP conformance suite's 14 `input-required-result-*` scenarios
//! (`tests/conformance/run.sh`), run through the sidecar in front of the plaintext legacy
//! server. Directly, that server fails `tampered-state` (13/14); through the sidecar all 14
//! must pass, in both response modes, and the tampered state must be refused by us.

use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::repo_path;
use crate::support::sidecar::Sidecar;
use std::process::Stdio;
use std::time::Duration;

/// The suite takes ~25 s for the 14 scenarios; each scenario is bounded by run.sh itself
/// (120 s), this bounds the whole run.
const SUITE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

async fn suite_passes_through_the_sidecar(mode: Mode) {
    let upstream = LegacyServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let results = tempfile::tempdir().unwrap();
    // A child awaited asynchronously: the in-process sidecar must keep serving on this
    // runtime while the suite runs. Its own process group, so that on a timeout node and
    // every other descendant of run.sh can be stopped by that group's id.
    let child = tokio::process::Command::new("bash")
        .arg(repo_path("tests/conformance/run.sh"))
        .arg(sidecar.mcp_url())
        .arg(results.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("start tests/conformance/run.sh");
    let group = child.id().expect("a running child has an id");
    let Ok(output) = tokio::time::timeout(SUITE_TIMEOUT, child.wait_with_output()).await else {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
        panic!("the conformance suite did not finish within {SUITE_TIMEOUT:?}");
    };
    let output = output.expect("wait for run.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = format!("{mode:?} mode:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("PASS input-required-result-tampered-state"),
        "{report}"
    );
    assert!(
        stdout.lines().any(|l| l == "14 passed, 0 failed"),
        "{report}"
    );
    assert!(output.status.success(), "{report}");
    // The suite's tampered state was refused here (not by a lenient upstream), and the
    // genuine retries of every other scenario opened.
    let metrics = sidecar.metrics();
    assert!(metrics.verified_count("malformed") >= 1, "{report}");
    assert!(metrics.verified_count("ok") >= 1, "{report}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn input_required_scenarios_pass_through_the_sidecar_sse_mode() {
    suite_passes_through_the_sidecar(Mode::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn input_required_scenarios_pass_through_the_sidecar_json_mode() {
    suite_passes_through_the_sidecar(Mode::Json).await;
}
