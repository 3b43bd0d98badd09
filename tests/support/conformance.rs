//! The official MCP conformance suite against one endpoint, with the outcome per
//! scenario: its `input-required-result-*` scenarios (`tests/conformance/run.sh`), or a
//! whole requirement set of a spec revision ([`run_requirements`]).

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

/// The suite's output, in a process group of its own so that on a timeout node and every
/// other descendant are stopped by that group's id.
async fn bounded(mut command: tokio::process::Command) -> std::process::Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("start the conformance suite");
    let group = child.id().expect("a running child has an id");
    let Ok(output) = tokio::time::timeout(SUITE_TIMEOUT, child.wait_with_output()).await else {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
        panic!("the conformance suite did not finish within {SUITE_TIMEOUT:?}");
    };
    output.expect("wait for the conformance suite")
}

/// Run every scenario against `url`. Awaited asynchronously so an in-process sidecar keeps
/// serving on this runtime.
pub async fn run_suite(url: &str) -> SuiteRun {
    let results = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(repo_path("tests/conformance/run.sh"))
        .arg(url)
        .arg(results.path());
    let output = bounded(command).await;
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

/// The suite's own installation (run.sh installs it on first use) and its Node 20 shim.
fn suite_command() -> tokio::process::Command {
    let install = std::process::Command::new("bash")
        .arg(repo_path("tests/conformance/run.sh"))
        .arg("--install-only")
        .status()
        .expect("install the conformance suite");
    assert!(install.success(), "installing the conformance suite failed");
    let dir = repo_path("target/conformance");
    let mut command = tokio::process::Command::new("node");
    command
        .current_dir(&dir)
        .arg("--import")
        .arg(repo_path("tests/conformance/register.mjs"))
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"));
    command
}

/// Run every server scenario a spec `revision` requires (and the ones it runs but does
/// not score) against `url`: a scenario passes when none of its checks failed. The
/// tasks extension's scenarios need a tasks server neither SDK ships: not applicable,
/// left out.
pub async fn run_requirements(url: &str, revision: &str) -> SuiteRun {
    let results = tempfile::tempdir().unwrap();
    let mut command = suite_command();
    command
        .args(["server", "--url", url, "--requirements", revision, "-o"])
        .arg(results.path());
    let output = bounded(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut scenarios = BTreeMap::new();
    // `✓ name: 3 passed, 0 failed` / `✗ name: 1 passed, 2 failed`, once per scenario.
    for line in stdout.lines() {
        let line = line.trim();
        let Some((mark, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some((name, counts)) = rest.split_once(": ") else {
            continue;
        };
        if !matches!(mark, "✓" | "✗") || !counts.ends_with(" failed") || name.starts_with("tasks-")
        {
            continue;
        }
        scenarios.entry(name.to_owned()).or_insert(mark == "✓");
    }
    SuiteRun {
        scenarios,
        report: format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr)),
    }
}
