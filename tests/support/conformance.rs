//! The official MCP conformance suite's `input-required-result-*` scenarios
//! (`tests/conformance/run.sh`) against one endpoint, with the outcome per scenario.

use super::python::repo_path;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

/// The 14 scenarios take ~12 s; run.sh bounds each one (120 s), this bounds the whole run.
const SUITE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// What one run of the suite reported.
pub struct SuiteRun {
    /// `true` for `PASS <scenario>`, `false` for `FAIL <scenario>`.
    pub scenarios: BTreeMap<String, bool>,
    /// run.sh's stdout and stderr, for assertion messages.
    pub report: String,
}

impl SuiteRun {
    pub fn failed(&self) -> Vec<&str> {
        let failed = self.scenarios.iter().filter(|(_, passed)| !**passed);
        failed.map(|(name, _)| name.as_str()).collect()
    }
}

/// Run every scenario against `url`. Awaited asynchronously so an in-process sidecar keeps
/// serving on this runtime; run.sh gets its own process group so that on a timeout node and
/// every other descendant can be stopped by that group's id.
pub async fn run_suite(url: &str) -> SuiteRun {
    let results = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new("bash")
        .arg(repo_path("tests/conformance/run.sh"))
        .arg(url)
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
    let mut scenarios = BTreeMap::new();
    for line in stdout.lines() {
        if let Some(name) = line.strip_prefix("PASS ") {
            scenarios.insert(name.to_owned(), true);
        } else if let Some(name) = line.strip_prefix("FAIL ") {
            scenarios.insert(name.to_owned(), false);
        }
    }
    SuiteRun {
        scenarios,
        report: format!("{stdout}\n{stderr}"),
    }
}
