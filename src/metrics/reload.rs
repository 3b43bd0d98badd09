//! The families that say whether what an operator changed is in force: configuration
//! reloads (`config_reloads_total{result}`) and admin token file reloads
//! (`admin_token_reloads_total{result}`).
//!
//! Invariant: a reload is counted `ok` only when everything it changed was applied; a
//! changed key that needs a restart counts `restart_required`, a file that does not load
//! counts `error` (and the previous settings stay). Every label value is created at zero.

use super::Metrics;
use prometheus::{IntCounterVec, Opts, Registry};

/// What became of a configuration reload (`result` label of `config_reloads_total`):
/// the configuration's own outcome.
pub use crate::config::reload::ReloadOutcome as ConfigReload;

impl ConfigReload {
    pub const ALL: [ConfigReload; 3] = [
        ConfigReload::Ok,
        ConfigReload::RestartRequired,
        ConfigReload::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConfigReload::Ok => "ok",
            ConfigReload::RestartRequired => "restart_required",
            ConfigReload::Error => "error",
        }
    }
}

/// The families of this module; a field of [`Metrics`].
pub(super) struct ReloadMetrics {
    config: IntCounterVec,
    admin_token: IntCounterVec,
}

impl ReloadMetrics {
    pub(super) fn register(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), &["result"]).expect("valid counter")
        };
        let reloads = Self {
            config: counter(
                "config_reloads_total",
                "Configuration file changes (or SIGHUP), by result: ok (applied), restart_required (a changed key takes effect on restart; the live ones were applied), error (the previous configuration stays).",
            ),
            admin_token: counter(
                "admin_token_reloads_total",
                "admin.token_file changes seen, by result (error keeps the previous token).",
            ),
        };
        for result in ConfigReload::ALL {
            reloads.config.with_label_values(&[result.as_str()]);
        }
        for result in ["ok", "error"] {
            reloads.admin_token.with_label_values(&[result]);
        }
        for family in [&reloads.config, &reloads.admin_token] {
            registry
                .register(Box::new(family.clone()))
                .expect("metric names are unique");
        }
        reloads
    }
}

impl Metrics {
    pub fn config_reload(&self, result: ConfigReload) {
        self.reload
            .config
            .with_label_values(&[result.as_str()])
            .inc();
    }

    pub fn config_reload_count(&self, result: ConfigReload) -> u64 {
        self.reload
            .config
            .with_label_values(&[result.as_str()])
            .get()
    }

    /// The admin token file changed: `ok` (the new token is in use) or not.
    pub fn admin_token_reload(&self, ok: bool) {
        self.reload
            .admin_token
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
    }

    pub fn admin_token_reload_count(&self, ok: bool) -> u64 {
        self.reload
            .admin_token
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_exists_from_the_first_scrape() {
        let m = Metrics::new();
        let text = m.render();
        for result in ConfigReload::ALL {
            let series = format!(
                "mcp_state_guard_config_reloads_total{{result=\"{}\"}} 0",
                result.as_str()
            );
            assert!(text.contains(&series), "{series}");
        }
        assert!(text.contains("mcp_state_guard_admin_token_reloads_total{result=\"error\"} 0"));
        m.config_reload(ConfigReload::RestartRequired);
        m.admin_token_reload(true);
        assert_eq!(m.config_reload_count(ConfigReload::RestartRequired), 1);
        assert_eq!(m.config_reload_count(ConfigReload::Ok), 0);
        assert_eq!(m.admin_token_reload_count(true), 1);
    }
}
