//! Every family of the process, wired: one [`Registry`], each component's own families
//! registered on it, and the process's own (configuration and admin token reloads,
//! build info, tasks alive). The components get their part ([`Metrics::meters`] for the
//! data path, [`Metrics::keys`] for the key ring, ...); only the wiring holds the whole.
//!
//! Invariant: each family is registered once, by the component that counts it, with
//! every label value at zero; `/metrics` renders the one registry.

use crate::admin::AdminMetrics;
use crate::auth::AuthMetrics;
use crate::config::reload::ReloadOutcome;
use crate::error::RefusalMetrics;
use crate::policy::PolicyMetrics;
use crate::proxy::{Meters, PathMetrics};
use crate::registry::{Family, ReadResult, Registry};
use crate::server::ConnectionMetrics;
use crate::stdio::StdioMetrics;
use crate::tls::TlsMetrics;
use crate::token::KeyMetrics;
use crate::tools::ToolMetrics;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use std::sync::Arc;

/// The process's metrics: the registry and each component's families.
pub struct Metrics {
    pub(crate) registry: Arc<Registry>,
    pub path: Arc<PathMetrics>,
    pub refusals: Arc<RefusalMetrics>,
    pub policy: Arc<PolicyMetrics>,
    pub keys: Arc<KeyMetrics>,
    pub tools: Arc<ToolMetrics>,
    pub auth: Arc<AuthMetrics>,
    pub tls: Arc<TlsMetrics>,
    pub connections: Arc<ConnectionMetrics>,
    pub stdio: Arc<StdioMetrics>,
    pub process: Arc<ProcessMetrics>,
    pub(crate) admin: Arc<AdminMetrics>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let registry = Registry::new();
        Self {
            path: Arc::new(PathMetrics::register(&registry)),
            refusals: Arc::new(RefusalMetrics::register(&registry)),
            policy: Arc::new(PolicyMetrics::register(&registry)),
            keys: Arc::new(KeyMetrics::register(&registry)),
            tools: Arc::new(ToolMetrics::register(&registry)),
            auth: Arc::new(AuthMetrics::register(&registry)),
            tls: Arc::new(TlsMetrics::register(&registry)),
            connections: Arc::new(ConnectionMetrics::register(&registry)),
            stdio: Arc::new(StdioMetrics::register(&registry)),
            process: Arc::new(ProcessMetrics::register(&registry)),
            admin: Arc::new(AdminMetrics::register(&registry)),
            registry: Arc::new(registry),
        }
    }

    /// Text exposition format 0.0.4.
    pub fn render(&self) -> String {
        self.registry.render()
    }

    /// What the data path counts into.
    pub(crate) fn meters(&self) -> Meters {
        Meters {
            path: self.path.clone(),
            refusals: self.refusals.clone(),
            policy: self.policy.clone(),
            keys: self.keys.clone(),
            tools: self.tools.clone(),
            auth: self.auth.clone(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's own families: what an operator changed and whether it is in force,
/// the build, the runtime's tasks.
pub struct ProcessMetrics {
    config_reloads: Family<IntCounterVec, ReloadOutcome>,
    admin_token_reloads: Family<IntCounterVec, ReadResult>,
}

impl ProcessMetrics {
    fn register(registry: &Registry) -> Self {
        let build_info = registry.register(
            IntGaugeVec::new(
                Opts::new(
                    "build_info",
                    "Always 1; the version and commit this binary was built from.",
                ),
                &["version", "commit"],
            )
            .expect("a valid gauge"),
        );
        build_info
            .with_label_values(&[crate::version::VERSION, crate::version::COMMIT])
            .set(1);
        let tasks = registry.gauge(
            "runtime_alive_tasks",
            "Tasks alive in the sidecar's runtime (connections, streams, pollers).",
        );
        registry.on_scrape(move || {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let alive = runtime.metrics().num_alive_tasks();
                tasks.set(i64::try_from(alive).unwrap_or(i64::MAX));
            }
        });
        Self {
            config_reloads: registry.counters(
                "config_reloads_total",
                "Configuration file changes (or SIGHUP), by result: ok (applied), restart_required (a changed key takes effect on restart; the live ones were applied), error (the previous configuration stays).",
                "result",
            ),
            admin_token_reloads: registry.counters(
                "admin_token_reloads_total",
                "admin.token_file changes seen, by result (error keeps the previous token).",
                "result",
            ),
        }
    }

    pub(crate) fn config_reload(&self, result: ReloadOutcome) {
        self.config_reloads.at(result).inc();
    }

    pub fn config_reload_count(&self, result: ReloadOutcome) -> u64 {
        self.config_reloads.at(result).get()
    }

    /// The admin token file changed: `ok` (the new token is in use) or not.
    pub(crate) fn admin_token_reload(&self, ok: bool) {
        self.admin_token_reloads.at(ReadResult::of(ok)).inc();
    }

    #[cfg(test)]
    pub(crate) fn admin_token_reload_count(&self, ok: bool) -> u64 {
        self.admin_token_reloads.at(ReadResult::of(ok)).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AuthFailure;

    #[tokio::test]
    async fn alive_tasks_are_counted_at_each_scrape() {
        let m = Metrics::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = stopped.await;
        });
        assert!(
            m.render()
                .contains("mcp_state_guard_runtime_alive_tasks 1\n"),
            "the waiting task is alive"
        );
        stop.send(()).unwrap();
        task.await.unwrap();
        assert!(
            m.render()
                .contains("mcp_state_guard_runtime_alive_tasks 0\n")
        );
    }

    #[test]
    fn every_family_is_registered_once_with_its_series_at_zero() {
        let m = Metrics::new();
        let text = m.render();
        for needle in [
            "mcp_state_guard_client_connections_open{listener=\"proxy\"} 0",
            "mcp_state_guard_connection_limit_waits_total{listener=\"admin\"} 0",
            "mcp_state_guard_admin_requests_misdirected_total 0",
            "mcp_state_guard_key_ring_age_seconds 0",
            "mcp_state_guard_runtime_alive_tasks 0",
            "mcp_state_guard_key_reloads_total{result=\"error\"} 0",
            "mcp_state_guard_tls_reloads_total{result=\"ok\"} 0",
            "mcp_state_guard_jwks_refreshes_total{result=\"ok\"} 0",
            "mcp_state_guard_jwt_accepted_total{verified_by=\"cache\"} 0",
            "mcp_state_guard_single_use_consumptions_total{result=\"quota\",store=\"redis\"} 0",
            "mcp_state_guard_store_fill_ratio{resource=\"idempotency\"} 0",
            "mcp_state_guard_admin_token_reloads_total{result=\"error\"} 0",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        for reason in AuthFailure::ALL {
            let series = format!(
                "mcp_state_guard_auth_failures_total{{reason=\"{}\"}} 0",
                reason.as_str()
            );
            assert!(text.contains(&series), "{series}");
        }
        for result in ReloadOutcome::ALL {
            let series = format!(
                "mcp_state_guard_config_reloads_total{{result=\"{}\"}} 0",
                result.as_str()
            );
            assert!(text.contains(&series), "{series}");
        }
        let info = format!(
            "mcp_state_guard_build_info{{commit=\"{}\",version=\"{}\"}} 1",
            crate::version::COMMIT,
            crate::version::VERSION
        );
        assert!(text.contains(&info), "{info}");
    }

    #[test]
    fn reloads_count_by_result() {
        let m = Metrics::new();
        m.process.config_reload(ReloadOutcome::RestartRequired);
        m.process.admin_token_reload(true);
        assert_eq!(
            m.process
                .config_reload_count(ReloadOutcome::RestartRequired),
            1
        );
        assert_eq!(m.process.config_reload_count(ReloadOutcome::Ok), 0);
        assert_eq!(m.process.admin_token_reload_count(true), 1);
    }
}
