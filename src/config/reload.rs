//! Live reconfiguration: the configuration file is watched (its content hash polled by
//! [`super::poll`], which survives Kubernetes' symlink swaps, and re-read at once on
//! `SIGHUP`), and each new configuration that loads and validates is handed to the
//! parts that can change without a restart.
//!
//! Invariant: a configuration that fails to load or validate changes nothing: the
//! previous one stays in force, the problems are logged once per change, and
//! `config_reloads_total{result="error"}` counts it.

use super::load::read_file;
use super::poll::{FilePoll, Seen};
use super::{Config, ConfigErrors, Overrides};
use crate::metrics::Metrics;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

/// Where the running configuration came from, so it can be loaded again, and what its
/// file held when it was loaded (the watch's baseline).
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub file: PathBuf,
    pub overrides: Overrides,
    baseline: FilePoll,
}

impl ConfigSource {
    /// Load the configuration from `file` and `overrides`, as the watch reloads it. The
    /// watch's baseline is the very bytes loaded: an edit landing while the sidecar
    /// starts (between this load and the watch's first poll) is a change to apply.
    pub fn load(file: PathBuf, overrides: Overrides) -> Result<(Config, Self), ConfigErrors> {
        let contents = read_file(&file)?;
        let config = Config::load_read(&file, &contents, &overrides)?;
        let baseline = FilePoll::loaded(vec![file.clone()], &[&contents]);
        let source = Self {
            file,
            overrides,
            baseline,
        };
        Ok((config, source))
    }
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
/// The baseline is what [`ConfigSource::load`] loaded, not what the returned task first
/// sees: a change made while the sidecar started is never mistaken for the baseline.
pub fn watch(
    source: ConfigSource,
    hangup: Option<Signal>,
    interval: Duration,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
    apply: impl Fn(&Config) + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let poll = source.baseline.clone();
    poll.run(interval, hangup, stop, move |seen| match seen {
        Seen::Unchanged => {}
        Seen::Unreadable { path, error } => {
            tracing::error!(path = %path.display(), %error, "configuration file unreadable; keeping the running configuration");
            metrics.config_reload(false);
        }
        Seen::Changed(contents) => match Config::load_read(&source.file, &contents[0], &source.overrides) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(file: &std::path::Path, tools: &str) {
        std::fs::write(
            file,
            format!("upstream = \"http://127.0.0.1:9\"\n[single_use]\ntools = [{tools}]\n"),
        )
        .unwrap();
    }

    /// An edit that lands after the configuration was loaded but before the watch first
    /// polls (the sidecar was still starting: a JWKS fetch, a Redis connection) is
    /// applied, not taken for the baseline.
    #[tokio::test]
    async fn an_edit_made_while_starting_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        write(&file, "");
        let (loaded, source) = ConfigSource::load(file.clone(), Overrides::default()).unwrap();
        assert!(loaded.single_use.tools.is_empty());
        write(&file, "\"deploy\"");

        let (stop_tx, stop) = watch::channel(false);
        let (applied_tx, mut applied) = tokio::sync::mpsc::unbounded_channel();
        let watching = tokio::spawn(watch(
            source,
            None,
            Duration::from_millis(10),
            Arc::new(Metrics::new()),
            stop,
            move |config| {
                let _ = applied_tx.send(config.single_use.tools.clone());
            },
        ));
        let tools = tokio::time::timeout(Duration::from_secs(5), applied.recv())
            .await
            .expect("the edit is applied within 5 s")
            .unwrap();
        assert_eq!(tools, ["deploy"]);
        stop_tx.send(true).unwrap();
        watching.await.unwrap();
    }
}
