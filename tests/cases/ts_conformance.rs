//! The official conformance suite's 14 `input-required-result-*` scenarios against the
//! TypeScript SDK v2 plaintext upstream, directly and through the sidecar, in both response
//! modes. Directly it fails exactly `tampered-state` (the SDK verifies no state by
//! default); through the sidecar all 14 pass. Each run prints its table (see
//! `--nocapture`).

use crate::support::conformance::{SuiteRun, run_suite};
use crate::support::legacy::Mode;
use crate::support::sidecar::Sidecar;
use crate::support::ts::TsServer;

const TAMPERED: &str = "input-required-result-tampered-state";

fn table(mode: Mode, direct: &SuiteRun, through: &SuiteRun) -> String {
    let outcome = |run: &SuiteRun, name: &str| match run.scenarios.get(name) {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "-",
    };
    let mut out = format!("TypeScript upstream, {mode:?} mode: scenario / direct / through\n");
    for name in direct.scenarios.keys() {
        let row = format!(
            "  {name:48} {:5} {}\n",
            outcome(direct, name),
            outcome(through, name)
        );
        out.push_str(&row);
    }
    out
}

async fn suite_direct_and_through(mode: Mode) {
    let upstream = TsServer::start(mode);
    let direct = run_suite(&upstream.mcp_url()).await;
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let through = run_suite(&sidecar.mcp_url()).await;
    let table = table(mode, &direct, &through);
    eprintln!("{table}");
    let report = format!(
        "{table}\ndirect:\n{}\nthrough:\n{}",
        direct.report, through.report
    );
    assert_eq!(direct.scenarios.len(), 14, "{report}");
    assert_eq!(direct.failed(), [TAMPERED], "{report}");
    assert_eq!(through.scenarios.len(), 14, "{report}");
    assert!(through.failed().is_empty(), "{report}");
    // The tampered state was refused here, and the genuine retries opened.
    let metrics = sidecar.metrics();
    assert!(metrics.path.verified_count("malformed") >= 1, "{report}");
    assert!(metrics.path.verified_count("ok") >= 1, "{report}");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn input_required_scenarios_typescript_upstream_json_mode() {
    suite_direct_and_through(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn input_required_scenarios_typescript_upstream_sse_mode() {
    suite_direct_and_through(Mode::Sse).await;
}
