//! Live reconfiguration: the configuration file is watched (its content hash polled by
//! [`crate::file_watch::FilePoll`], which survives Kubernetes' symlink swaps, and re-read at once on
//! `SIGHUP`); each new configuration that loads and validates is compared with the one
//! in force, key by key, and what changed is applied or reported by its [`Reload`]
//! class (declared once, in the table of keys in `load.rs`).
//!
//! Invariants: a configuration that fails to load or validate changes nothing: the
//! previous one stays in force, the problems are logged once per change, and
//! `config_reloads_total{result="error"}` counts it. Otherwise every changed live key
//! is applied and logged; every changed restart-class key is logged at warn by name
//! ("takes effect on restart") and the reload counts as `restart_required`, never `ok`,
//! for as long as the file asks for something the running process does not do.

mod loosened;

use super::load::{LEAVES, Leaf, Reload, read_file};
use super::{Config, ConfigErrors, Overrides};
use crate::file_watch::{FilePoll, Seen};
use std::path::PathBuf;
use std::time::Duration;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

/// Where the running configuration came from, so it can be loaded again, and what its
/// file held when it was loaded (the watch's baseline).
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub(crate) file: PathBuf,
    pub(crate) overrides: Overrides,
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

#[cfg(test)]
/// The reload class of a leaf key (`single_use.tools`); `None` for a key that is not one.
pub(crate) fn reload_class(key: &str) -> Option<Reload> {
    LEAVES
        .iter()
        .find(|leaf| leaf.key == key)
        .map(|leaf| leaf.reload)
}

#[cfg(test)]
/// Every leaf key with its reload class, in table order.
pub(crate) fn classes() -> impl Iterator<Item = (&'static str, Reload)> {
    LEAVES.iter().map(|leaf| (leaf.key, leaf.reload))
}

/// The leaf keys whose values differ between the configuration in force and a new one,
/// by reload class, in table order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Changes {
    pub(crate) live: Vec<&'static str>,
    pub(crate) restart: Vec<&'static str>,
}

impl Changes {
    pub(crate) fn between(in_force: &Config, new: &Config) -> Self {
        let mut changes = Self::default();
        for Leaf {
            key,
            reload,
            differs,
            ..
        } in LEAVES
        {
            if differs(in_force, new) {
                match reload {
                    Reload::Live => changes.live.push(key),
                    Reload::Restart => changes.restart.push(key),
                }
            }
        }
        changes
    }
}

impl Config {
    /// This configuration with every live key taken from `new`: what is in force once a
    /// reload to `new` is applied (restart-class keys keep their running values).
    pub(crate) fn with_live_from(&self, new: &Config) -> Config {
        let mut in_force = self.clone();
        for leaf in LEAVES.iter().filter(|leaf| leaf.reload == Reload::Live) {
            (leaf.adopt)(&mut in_force, new);
        }
        in_force
    }
}

/// Listen for `SIGHUP` from now on. Called before the sidecar reports ready: until a
/// handler is installed, `SIGHUP` would terminate the process.
pub(crate) fn hangups() -> Option<Signal> {
    signal(SignalKind::hangup())
        .inspect_err(|e| tracing::warn!(error = %e, "no SIGHUP handler; the file is still polled"))
        .ok()
}

/// What became of one reload (counted by the caller: `config_reloads_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// Every changed key was applied (or nothing changed).
    Ok,
    /// A key that needs a restart changed: logged by name, not applied.
    RestartRequired,
    /// The file could not be read, parsed or validated: nothing changed.
    Error,
}

crate::registry::labels!(pub ReloadOutcome {
    Ok => "ok",
    RestartRequired => "restart_required",
    Error => "error",
});

/// Watch `source` until `stop`; `running` is the configuration the process started
/// with. Each new valid configuration is compared with the one in force; when live keys
/// changed, `apply` gets the configuration now in force (`running`'s restart-class
/// values, the file's live ones) and the live keys that changed, and must apply them.
///
/// The baseline is what [`ConfigSource::load`] loaded, not what the returned task first
/// sees: a change made while the sidecar started is never mistaken for the baseline.
pub(crate) fn watch(
    source: ConfigSource,
    hangup: Option<Signal>,
    interval: Duration,
    count: impl Fn(ReloadOutcome) + Send + 'static,
    stop: watch::Receiver<bool>,
    running: Config,
    apply: impl Fn(&Config, &[&'static str]) + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let poll = source.baseline.clone();
    let mut in_force = running;
    poll.run(interval, hangup, stop, move |seen| match seen {
        Seen::Unchanged => {}
        Seen::Unreadable { path, error } => {
            tracing::error!(path = %path.display(), %error, "configuration file unreadable; keeping the running configuration");
            count(ReloadOutcome::Error);
        }
        Seen::Changed(contents) => {
            let loaded = Config::load_read(&source.file, &contents[0], &source.overrides);
            count(reload(&mut in_force, loaded, &apply));
        }
    })
}

/// Apply one loaded configuration (or its problems) to the one in force.
fn reload(
    in_force: &mut Config,
    loaded: Result<Config, super::ConfigErrors>,
    apply: &impl Fn(&Config, &[&'static str]),
) -> ReloadOutcome {
    let config = match loaded {
        Ok(config) => config,
        Err(errors) => {
            for problem in &errors.0 {
                tracing::error!(%problem, "configuration changed but is invalid; keeping the running configuration");
            }
            return ReloadOutcome::Error;
        }
    };
    let changes = Changes::between(in_force, &config);
    if !changes.live.is_empty() {
        let next = in_force.with_live_from(&config);
        // The file's live keys beside this process's restart-class values: a file that
        // is valid alone can still ask for what the running process must not do
        // (passthrough paths while a stdio child still runs, since `upstream` waits for
        // a restart).
        let problems = next.validate();
        if !problems.is_empty() {
            for problem in &problems {
                tracing::error!(%problem, "configuration changed but is invalid with the running process's restart-class keys; keeping the running configuration");
            }
            return ReloadOutcome::Error;
        }
        for loosened::Loosened { key, what } in loosened::loosened(in_force, &next) {
            tracing::warn!(key, change = %what, "configuration reload removes protection; applied (check the file was written whole)");
        }
        *in_force = next;
        apply(in_force, &changes.live);
        for key in &changes.live {
            tracing::info!(
                key = *key,
                "configuration key changed; applied without a restart"
            );
        }
    }
    // Said on every reload while it holds: the file asks for something this process
    // does not do, and an operator may have missed the first one.
    for key in &changes.restart {
        tracing::warn!(
            key = *key,
            "configuration key changed; takes effect on restart"
        );
    }
    if changes.restart.is_empty() {
        ReloadOutcome::Ok
    } else {
        ReloadOutcome::RestartRequired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written whole and renamed into place, as Kubernetes and careful editors do: a
    /// poll never sees half of it.
    fn write(file: &std::path::Path, tools: &str) {
        let next = file.with_extension("next");
        std::fs::write(
            &next,
            format!("upstream = \"http://127.0.0.1:9\"\n[single_use]\ntools = [{tools}]\n"),
        )
        .unwrap();
        std::fs::rename(&next, file).unwrap();
    }

    /// An edit that lands after the configuration was loaded but before the watch first
    /// polls (the sidecar was still starting: a JWKS fetch, a Redis connection) is
    /// applied, not taken for the baseline.
    ///
    /// Loading reads the `MCP_STATE_GUARD_*` environment: the test runs inside a
    /// `figment::Jail`, like every test that sets it, so another test's variables (an
    /// invalid value, a live key) can never land in the middle of its reload.
    #[test]
    // `figment::Jail`'s closure returns `figment::Error`, as every Jail test's does.
    #[allow(clippy::result_large_err)]
    fn an_edit_made_while_starting_is_applied() {
        figment::Jail::expect_with(|_jail| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let dir = tempfile::tempdir().unwrap();
                let file = dir.path().join("config.toml");
                write(&file, "");
                let (loaded, source) =
                    ConfigSource::load(file.clone(), Overrides::default()).unwrap();
                assert!(loaded.single_use.tools.is_empty());
                write(&file, "\"deploy\"");

                let (stop_tx, stop) = watch::channel(false);
                let (applied_tx, mut applied) = tokio::sync::mpsc::unbounded_channel();
                let watching = tokio::spawn(watch(
                    source,
                    None,
                    Duration::from_millis(10),
                    |_| {},
                    stop,
                    loaded,
                    move |config, changed| {
                        assert_eq!(changed, ["single_use.tools"]);
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
            });
            Ok(())
        });
    }

    /// A file valid alone but not beside the running process's restart-class keys:
    /// `upstream` becomes an URL only on restart, so passthrough paths it allows would
    /// reach the running stdio child without the gate. Refused, nothing applied.
    #[test]
    fn a_reload_must_be_valid_with_the_keys_that_wait_for_a_restart() {
        let mut running = Config {
            upstream: super::super::stdio::STDIO.into(),
            ..Config::default()
        };
        running.upstream_command.argv = vec!["server".into()];
        assert!(running.validate().is_empty(), "{:?}", running.validate());
        let file = Config {
            passthrough_paths: vec!["/oauth/token".into()],
            ..Config::default()
        };
        assert!(file.validate().is_empty(), "valid alone");
        let mut in_force = running.clone();
        let applied = std::cell::Cell::new(false);
        let outcome = reload(
            &mut in_force,
            Ok(file.clone()),
            &|_: &Config, _: &[&str]| applied.set(true),
        );
        assert_eq!(outcome, ReloadOutcome::Error);
        assert!(!applied.get(), "nothing applied");
        assert_eq!(in_force, running);
        // Without the stdio child the same file is applied (and upstream waits).
        let mut in_force = Config::default();
        let outcome = reload(&mut in_force, Ok(file), &|_: &Config, _: &[&str]| {
            applied.set(true)
        });
        assert_eq!(outcome, ReloadOutcome::Ok);
        assert!(applied.get());
        assert_eq!(in_force.passthrough_paths, ["/oauth/token"]);
    }

    #[test]
    fn every_key_has_one_class_and_the_live_ones_are_these() {
        assert_eq!(reload_class("passthrough_paths"), Some(Reload::Live));
        assert_eq!(reload_class("listen"), Some(Reload::Restart));
        assert_eq!(reload_class("admin.token_file"), Some(Reload::Restart));
        assert_eq!(reload_class("single_use"), None, "a section is not a key");
        // Pinned: making a key live is a decision with an applier in `app` behind it.
        let live: Vec<&str> = classes()
            .filter(|(_, class)| *class == Reload::Live)
            .map(|(key, _)| key)
            .collect();
        assert_eq!(
            live,
            [
                "passthrough_paths",
                "allowed_hosts",
                "single_use.tools",
                "single_use.prompts",
                "single_use.resources",
                "single_use.default",
                "single_use.on_store_error",
            ]
        );
    }

    #[test]
    fn changes_are_told_apart_by_class_and_only_live_ones_come_into_force() {
        let running = Config::default();
        assert_eq!(Changes::between(&running, &running), Changes::default());
        let mut new = running.clone();
        new.listen = "127.0.0.1:1".parse().unwrap();
        new.passthrough_paths = vec!["/oauth/token".into()];
        new.single_use.on_store_error = super::super::OnStoreError::Allow;
        new.single_use.redis_url = Some("redis://:secret@redis".into());
        new.limits.max_connections = 7;
        let changes = Changes::between(&running, &new);
        assert_eq!(
            changes.live,
            ["passthrough_paths", "single_use.on_store_error"]
        );
        assert_eq!(
            changes.restart,
            ["listen", "single_use.redis_url", "limits.max_connections"]
        );
        let in_force = running.with_live_from(&new);
        assert_eq!(in_force.passthrough_paths, new.passthrough_paths);
        assert_eq!(
            in_force.single_use.on_store_error,
            new.single_use.on_store_error
        );
        assert_eq!(in_force.listen, running.listen);
        assert_eq!(
            in_force.limits.max_connections,
            running.limits.max_connections
        );
        // Against what is in force, the restart-class keys still differ: the next reload
        // says so again rather than count `ok`.
        let again = Changes::between(&in_force, &new);
        assert!(again.live.is_empty());
        assert_eq!(again.restart, changes.restart);
    }

    /// The configuration doc's table of keys says of every key whether it is live or needs a
    /// restart (design §5), and says what `LEAVES` says.
    #[test]
    fn the_configuration_doc_table_gives_every_key_its_class() {
        let doc = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/configuration.md"
        ));
        let table = doc
            .split("\n## Keys\n")
            .nth(1)
            .and_then(|rest| rest.split("\n#").next())
            .expect("a Keys section");
        let mut documented = std::collections::BTreeMap::new();
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split(" | ").collect();
            let class = match cells.last().map(|c| c.trim_end_matches(" |").trim()) {
                Some(c) if c.starts_with("live") => Reload::Live,
                Some(c) if c.starts_with("restart") => Reload::Restart,
                other => panic!("no live/restart in the last cell of {row:?}: {other:?}"),
            };
            for key in keys_of(cells[0].trim_start_matches("| ")) {
                documented.insert(key, class);
            }
        }
        for leaf in LEAVES {
            assert_eq!(
                documented.get(leaf.key),
                Some(&leaf.reload),
                "docs/configuration.md table of keys on {}",
                leaf.key
            );
        }
    }

    /// The keys a row of that table names: `a.b` / `.c` / `d` is `a.b`, `a.c`, `a.d`; a
    /// `[[handles]]` row is the one key `handles`.
    fn keys_of(cell: &str) -> Vec<String> {
        let names: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        if names.first().is_some_and(|n| n.starts_with("[[")) {
            return vec![names[0].trim_matches(|c| c == '[' || c == ']').to_owned()];
        }
        let Some(first) = names.first() else {
            return Vec::new();
        };
        let parent = first.rsplit_once('.').map(|(p, _)| p);
        let mut keys = vec![(*first).to_owned()];
        for name in &names[1..] {
            keys.push(match (name.strip_prefix('.'), parent) {
                (Some(child), Some(parent)) => format!("{parent}.{child}"),
                (None, Some(parent)) if !name.contains('.') => format!("{parent}.{name}"),
                _ => (*name).to_owned(),
            });
        }
        keys
    }
}
