//! The official MCP conformance suite's 14 `input-required-result-*` scenarios
//! (`tests/conformance/run.sh`), run through the sidecar in front of the plaintext legacy
//! server. Directly, that server fails `tampered-state` (13/14); through the sidecar all 14
//! must pass, in both response modes, and the tampered state must be refused by us.

use crate::support::conformance::run_suite;
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::Sidecar;

async fn suite_passes_through_the_sidecar(mode: Mode) {
    let upstream = LegacyServer::start(mode);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let run = run_suite(&sidecar.mcp_url()).await;
    let report = format!("{mode:?} mode:\n{}", run.report);
    assert_eq!(run.scenarios.len(), 14, "{report}");
    assert!(
        run.failed().is_empty(),
        "failed {:?}: {report}",
        run.failed()
    );
    assert_eq!(
        run.scenarios.get("input-required-result-tampered-state"),
        Some(&true),
        "{report}"
    );
    // The suite's tampered state was refused here (not by a lenient upstream), and the
    // genuine retries of every other scenario opened.
    let metrics = sidecar.metrics();
    assert!(metrics.path.verified_count("malformed") >= 1, "{report}");
    assert!(metrics.path.verified_count("ok") >= 1, "{report}");
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
