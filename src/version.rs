//! What this binary is: its version and the commit it was built from (embedded by
//! `build.rs`), for `--version` and the `build_info` metric.
//!
//! Invariant: both are compile-time constants; the commit is `unknown` when the build had
//! neither git nor `STATE_GUARD_COMMIT`, never a build failure.

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit, 12 hex digits (or what `STATE_GUARD_COMMIT` said), or `unknown`.
pub const COMMIT: &str = env!("STATE_GUARD_BUILD_COMMIT");

/// What `mcp-state-guard --version` prints after the name.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STATE_GUARD_BUILD_COMMIT"),
    ")"
);
