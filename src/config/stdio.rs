//! `upstream = "stdio"`: the MCP server is a program the sidecar runs as its child and
//! speaks to over its standard input and output ([`crate::stdio`]). These settings say
//! what to run and how; every one of them needs a restart.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Config, ConfigProblem};

/// The value of `upstream` that switches to a child process.
pub(crate) const STDIO: &str = "stdio";

/// How the child is started, restarted and fed (`[upstream_command]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamCommandConfig {
    /// The program and its arguments (no shell): required with `upstream = "stdio"`,
    /// refused without it.
    pub argv: Vec<String>,
    /// Variables set in the child's environment (over the inherited or minimal one).
    pub env: BTreeMap<String, String>,
    /// The child's working directory; unset: the sidecar's.
    pub(crate) cwd: Option<PathBuf>,
    /// Pass the sidecar's whole environment on. Default false: only `PATH`, `HOME`,
    /// `LANG` (when set) and `env`, so the sidecar's own settings and secrets in its
    /// environment do not reach the server.
    pub(crate) inherit_env: bool,
    /// The first restart delay after the child exits, doubled per failed start up to
    /// `restart_max_ms`, in milliseconds; at least 1.
    pub restart_min_ms: u64,
    /// The longest restart delay, in milliseconds; at least `restart_min_ms`.
    pub(crate) restart_max_ms: u64,
    /// Callers' messages waiting for the child's standard input or for it to come up;
    /// past it 503 + `Retry-After` (the bridge's own lines queue apart, as many again).
    /// At least 1.
    pub queue_max: usize,
    /// One caller's share of the requests at the shared child (queued for its stdin,
    /// waiting for it to come up, or in progress there); past it 429 + `Retry-After`.
    /// Unset: a quarter of `queue_max` ([`Config::upstream_command_queue_share`]); set: 1
    /// to `queue_max`.
    pub queue_max_per_principal: Option<usize>,
    /// 2025-era sessions (each with a child of its own) open at once; past it 503 +
    /// `Retry-After`. At least 1.
    pub max_sessions: usize,
    /// One caller's share of the sessions; past it 429 + `Retry-After`. Unset: a quarter
    /// of `max_sessions` ([`Config::upstream_command_session_share`]); set: 1 to
    /// `max_sessions`.
    pub max_sessions_per_principal: Option<usize>,
    /// A session with no request in progress and no stream open for this long ends,
    /// and its child is stopped, in milliseconds. At least 1.
    pub session_idle_ms: u64,
}

impl Default for UpstreamCommandConfig {
    fn default() -> Self {
        UpstreamCommandConfig {
            argv: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            inherit_env: false,
            restart_min_ms: 100,
            restart_max_ms: 30_000,
            queue_max: 256,
            queue_max_per_principal: None,
            max_sessions: 64,
            max_sessions_per_principal: None,
            session_idle_ms: 600_000,
        }
    }
}

impl Config {
    /// Whether the upstream is a child process (`upstream = "stdio"`).
    pub(crate) fn is_stdio(&self) -> bool {
        self.upstream == STDIO
    }
}

/// The rules of `[upstream_command]`, against `upstream`.
pub(super) fn validate(config: &Config, problems: &mut Vec<ConfigProblem>) {
    let command = &config.upstream_command;
    let mut problem = |key: &str, message: &str| problems.push(ConfigProblem::new(key, message));
    if !config.is_stdio() {
        if !command.argv.is_empty() {
            problem(
                "upstream_command.argv",
                "is set but upstream is not \"stdio\" (set upstream = \"stdio\" to run it)",
            );
        }
        return;
    }
    match command.argv.first() {
        None => problem(
            "upstream_command.argv",
            "must name the program to run when upstream is \"stdio\"",
        ),
        Some(program) if program.is_empty() => {
            problem("upstream_command.argv", "the program must not be empty")
        }
        Some(_) => {}
    }
    if command.argv.iter().any(|a| a.contains('\0')) {
        problem("upstream_command.argv", "must not contain NUL characters");
    }
    for (name, value) in &command.env {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            problem(
                "upstream_command.env",
                "names must be non-empty without '=' or NUL, values without NUL",
            );
            break;
        }
    }
    if command
        .cwd
        .as_ref()
        .is_some_and(|d| d.as_os_str().is_empty())
    {
        problem("upstream_command.cwd", "must not be empty");
    }
    if command.restart_min_ms < 1 {
        problem("upstream_command.restart_min_ms", "must be at least 1");
    }
    if command.restart_max_ms < command.restart_min_ms {
        problem(
            "upstream_command.restart_max_ms",
            "must be at least upstream_command.restart_min_ms",
        );
    }
    if command.queue_max < 1 {
        problem("upstream_command.queue_max", "must be at least 1");
    }
    if command.max_sessions < 1 {
        problem("upstream_command.max_sessions", "must be at least 1");
    }
    if command.session_idle_ms < 1 {
        problem("upstream_command.session_idle_ms", "must be at least 1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(config: &Config) -> Vec<String> {
        let mut problems = Vec::new();
        validate(config, &mut problems);
        problems.into_iter().map(|p| p.key).collect()
    }

    #[test]
    fn argv_goes_with_stdio_mode_only() {
        let mut config = Config::default();
        assert!(keys(&config).is_empty());
        config.upstream_command.argv = vec!["python".into()];
        assert_eq!(keys(&config), ["upstream_command.argv"]);
        config.upstream = STDIO.into();
        assert!(keys(&config).is_empty());
        assert!(config.validate().is_empty(), "{:?}", config.validate());
        config.upstream_command.argv.clear();
        assert_eq!(keys(&config), ["upstream_command.argv"]);
    }

    #[test]
    fn restart_delays_and_queue_are_bounded() {
        let mut config = Config {
            upstream: STDIO.into(),
            ..Config::default()
        };
        config.upstream_command.argv = vec!["server".into()];
        config.upstream_command.restart_min_ms = 0;
        config.upstream_command.queue_max = 0;
        config.upstream_command.env.insert("A=B".into(), "x".into());
        assert_eq!(
            keys(&config),
            [
                "upstream_command.env",
                "upstream_command.restart_min_ms",
                "upstream_command.queue_max"
            ]
        );
        config.upstream_command.restart_min_ms = 10;
        config.upstream_command.restart_max_ms = 5;
        assert!(keys(&config).contains(&"upstream_command.restart_max_ms".to_owned()));
    }
}
