//! Build script: embeds the commit the binary was built from, for `--version` and the
//! `build_info` metric.
//!
//! Invariant: never fails the build. The commit comes from `STATE_GUARD_COMMIT` when
//! set (a release pipeline that builds from a tarball), else from `git rev-parse` in the
//! source tree, else it is `unknown` (no git, not a checkout).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=STATE_GUARD_COMMIT");
    let commit = std::env::var("STATE_GUARD_COMMIT")
        .ok()
        .filter(|c| is_commit(c))
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=STATE_GUARD_BUILD_COMMIT={commit}");
}

/// `HEAD`'s commit, 12 hex digits; also asks cargo to rerun when `HEAD` moves (in a
/// worktree `.git` is a file, so the paths come from git itself).
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    // `logs/HEAD` grows on every commit and checkout; the others cover a missing reflog.
    // Only existing paths: cargo reruns the script on every build for a missing one.
    let reference = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = ["HEAD", "logs/HEAD", "packed-refs"]
        .into_iter()
        .chain(reference.as_deref());
    for path in watched {
        if let Some(p) = git(&["rev-parse", "--git-path", path])
            && std::path::Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| is_commit(c))
}

fn is_commit(text: &str) -> bool {
    (7..=40).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}
