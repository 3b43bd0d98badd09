//! The sidecar started in-process on free loopback ports.

use mcp_state_guard::facade::app::Metrics;
use mcp_state_guard::facade::app::{self, Running};
use mcp_state_guard::facade::config::Config;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub struct Sidecar {
    running: Option<Running>,
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Keeps a key file alive for the sidecar's lifetime.
    pub keys_dir: Option<tempfile::TempDir>,
}

/// A valid configuration for `upstream` on free ports (ephemeral key, in-memory store).
pub fn config(upstream: &str) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        upstream: upstream.to_owned(),
        ..Config::default()
    }
}

impl Sidecar {
    /// Start with `config` after checking it validates (a test must not test an
    /// impossible configuration).
    pub async fn start(config: Config) -> Self {
        let problems = config.validate();
        assert!(
            problems.is_empty(),
            "invalid test configuration: {problems:?}"
        );
        let running = app::start(&config).await.expect("the sidecar starts");
        Self {
            addr: running.addr(),
            admin_addr: running.admin_addr(),
            running: Some(running),
            keys_dir: None,
        }
    }

    /// Start in front of `upstream` with the defaults.
    pub async fn in_front_of(upstream: &str) -> Self {
        Self::start(config(upstream)).await
    }

    /// Start with a key file holding `keys` (first mints) and `audience`.
    pub async fn with_keys(mut config: Config, keys: &[&str], audience: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, keys.join("\n") + "\n").unwrap();
        config.state.keys_file = Some(path);
        config.state.audience = Some(audience.to_owned());
        let mut sidecar = Self::start(config).await;
        sidecar.keys_dir = Some(dir);
        sidecar
    }

    /// The MCP endpoint through the sidecar.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        self.running.as_ref().unwrap().metrics()
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    /// Replace the key file (started by [`Sidecar::with_keys`]) atomically, the way a
    /// Secret update does, and wait until the sidecar has reloaded it.
    pub async fn rewrite_keys(&self, keys: &[&str]) {
        let dir = self.keys_dir.as_ref().expect("started with_keys").path();
        let reloads = || self.metrics().keys.key_reload_count(true);
        let before = reloads();
        std::fs::write(dir.join("keys.next"), keys.join("\n") + "\n").unwrap();
        std::fs::rename(dir.join("keys.next"), dir.join("keys")).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while reloads() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the key file was not reloaded"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Graceful shutdown with no readiness grace.
    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown(Duration::ZERO).await;
        }
    }
}
