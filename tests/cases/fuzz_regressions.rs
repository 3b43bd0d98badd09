//! The fuzz targets' seeds and crash reproducers, run through the very checks the targets
//! run (`fuzz/src/checks/`, included here rather than copied): a finding, once fixed,
//! stays fixed in the ordinary test command, without a nightly toolchain.

#[path = "../../fuzz/src/checks/mod.rs"]
pub(super) mod checks;

use std::path::{Path, PathBuf};

/// Every input under `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/`.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for kind in ["seeds", "regressions"] {
        let Ok(dir) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        files.extend(dir.map(|entry| entry.unwrap().path()));
    }
    files.sort();
    files
}

/// Run `check` on every input of `target`; name each one that breaks an invariant.
fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no seeds for the {target} target");
    let failed: Vec<String> = files
        .iter()
        .filter(|file| {
            let data = std::fs::read(file).unwrap();
            std::panic::catch_unwind(|| check(&data)).is_err()
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(failed.is_empty(), "invariants broken by {failed:#?}");
}

#[test]
fn gate_inputs_keep_their_invariants() {
    replay("gate", checks::gate::check);
}

#[test]
fn sse_inputs_keep_their_invariants() {
    replay("sse", checks::sse::check);
}

#[test]
fn token_inputs_keep_their_invariants() {
    replay("token_open", checks::token_open::check);
}

#[test]
fn answer_inputs_keep_their_invariants() {
    replay("answers", checks::answers::check);
}

#[test]
fn whole_proxy_inputs_keep_their_invariants() {
    replay("proxy", checks::proxy::check);
}

#[test]
fn upstream_inputs_keep_their_invariants() {
    replay("upstream", checks::upstream::check);
}

#[test]
fn scan_inputs_keep_their_invariants() {
    replay("scan", checks::scan::check);
}

/// The scanner gets the tree path's verdict on every input of every target, bodies or
/// not: the seeds and reproducers of the other targets are JSON the project cared about.
#[test]
fn every_fuzz_input_gets_the_trees_verdict_from_the_scanner() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut targets: Vec<String> = ["seeds", "regressions"]
        .iter()
        .flat_map(|kind| std::fs::read_dir(root.join(kind)).unwrap())
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    targets.sort();
    targets.dedup();
    assert!(targets.len() >= 6, "{targets:?}");
    for target in targets {
        replay(&target, checks::scan::check);
    }
}
