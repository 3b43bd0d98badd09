//! The real Helm engine (Helm v4's Go library from PyPI `helm-python-sdk`) and
//! `kubernetes-validate`, in their own pinned venv (`tests/py/helm-requirements.txt`,
//! created by `tests/run.sh` at `target/helmvenv`), driven by `tests/py/helm_chart.py`.
//!
//! A missing venv is a hard failure, never a skip.

use super::python::{run_json_with, venv_interpreter};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The venv interpreter: `STATE_GUARD_TEST_HELM_PYTHON`, else `target/helmvenv/bin/python`.
pub fn interpreter() -> PathBuf {
    venv_interpreter(
        "STATE_GUARD_TEST_HELM_PYTHON",
        "target/helmvenv",
        "the venv from tests/py/helm-requirements.txt",
    )
}

/// Run one command of `helm_chart.py` (writing under `out`) and return its answer,
/// after asserting that every check it made held.
pub fn chart(command: &str, out: &Path) -> Value {
    let answer = run_json_with(
        &interpreter(),
        "helm_chart.py",
        &json!({"command": command, "out": out}),
        Duration::from_secs(180),
    );
    let failures = answer["failures"].as_array().expect("a failures list");
    assert!(
        failures.is_empty(),
        "{command}: {} check(s) failed:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    );
    answer
}
