//! Live reconfiguration: the configuration file is watched (its content hash polled by
//! [`super::poll`], which survives Kubernetes' symlink swaps, and re-read at once on
//! `SIGHUP`), and each new configuration that loads and validates is handed to the
//! parts that can change without a restart.
//!
//! Invariant: a configuration that fails to load or validate changes nothing: the
//! previous one stays in force, the problems are logged once per change, and
//! `config_reloads_total{result="error"}` counts it.

use super::poll::{FilePoll, Seen};
use super::{Config, Overrides};
use crate::metrics::Metrics;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

/// Where the running configuration came from, so it can be loaded again.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub file: PathBuf,
    pub overrides: Overrides,
}

/// Listen for `SIGHUP` from now on. Called before the sidecar reports ready: until a
/// handler is installed, `SIGHUP` would terminate the process.
pub fn hangups() -> Option<Signal> {
    signal(SignalKind::hangup())
        .inspect_err(|e| tracing::warn!(error = %e, "no SIGHUP handler; the file is still polled"))
        .ok()
}

/// Watch `source` until `stop`; call `apply` with every new valid configuration.
///
/// The baseline digest is taken when this is called, not when the returned task first
/// runs: a change made after the sidecar started is never mistaken for the baseline.
pub fn watch(
    source: ConfigSource,
    hangup: Option<Signal>,
    interval: Duration,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
    apply: impl Fn(&Config) + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let poll = FilePoll::now(vec![source.file.clone()]);
    poll.run(interval, hangup, stop, move |seen| match seen {
        Seen::Unchanged => {}
        Seen::Unreadable { path, error } => {
            tracing::error!(path = %path.display(), %error, "configuration file unreadable; keeping the running configuration");
            metrics.config_reload(false);
        }
        Seen::Changed(_) => match Config::load(Some(&source.file), &source.overrides) {
            Ok(config) => {
                apply(&config);
                metrics.config_reload(true);
            }
            Err(errors) => {
                for problem in &errors.0 {
                    tracing::error!(%problem, "configuration changed but is invalid; keeping the running configuration");
                }
                metrics.config_reload(false);
            }
        },
    })
}
