//! The parts [`super::start_from`] wires, each built from the validated configuration:
//! the key ring, the upstream client, the shared store, the listener's TLS, the
//! readiness checks, how each listener treats its connections, and the tasks that watch
//! files while the sidecar runs.
//!
//! Invariant: nothing here starts serving; a part that cannot be built stops the start
//! with a [`StartError`] naming the setting.

use super::{ADMIN_MAX_CONNECTIONS, Metrics, StartError, live, reload_keys, watch_store};
use crate::admin;
use crate::auth::Identifier;
use crate::auth::jwks::Jwks;
use crate::budget::MemoryBudget;
use crate::config::reload::ConfigSource;
use crate::config::{self, Config};
use crate::file_watch::FilePoll;
use crate::health;
use crate::policy::revocation::Revocations;
use crate::policy::single_use::SingleUse;
use crate::proxy::pool::Limits;
use crate::proxy::upstream::Upstream;
use crate::server::{self, Listener};
use crate::stdio::Bridge;
use crate::store::Store;
use crate::tls::ServerTls;
use crate::token::{KeyId, KeyMetrics, KeyRing, StateSealer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The shared store, the single-use policy over it, and the revocations it holds.
pub(super) fn shared_store(
    config: &Config,
    metrics: &Metrics,
) -> Result<(Arc<SingleUse>, Arc<Revocations>), StartError> {
    let store = Store::from_config(config)
        .map(Arc::new)
        .map_err(|e| StartError::Config(format!("single_use: {e}")))?;
    let single_use = Arc::new(SingleUse::new(
        &config.single_use,
        store.clone(),
        metrics.policy.clone(),
    ));
    let revocations = Arc::new(Revocations::new(
        store,
        config.longest_token_seconds(),
        config.state.audience.clone(),
    ));
    Ok((single_use, revocations))
}

/// The listener's TLS (with the client certificate's identity when `principal.source`
/// is `mtls`) and the poll that watches its files; `None` without `tls`.
pub(super) fn listener_tls(
    config: &Config,
    metrics: &Metrics,
) -> Result<(Option<Arc<ServerTls>>, Option<FilePoll>), StartError> {
    let identity = (config.principal.source == config::PrincipalSource::Mtls)
        .then_some(config.principal.mtls.identity);
    Ok(
        match ServerTls::load(
            &config.tls,
            identity,
            Duration::from_millis(config.timeouts.header_read_ms),
            metrics.tls.clone(),
        )? {
            Some((tls, poll)) => (Some(Arc::new(tls)), Some(poll)),
            None => (None, None),
        },
    )
}

/// The key ring in use at start, and the poll that watches its file. The ring and the
/// reload watcher's baseline come from one read: a Secret update landing between two
/// reads would otherwise look like no change at all.
pub(super) fn key_ring(
    config: &Config,
    metrics: &KeyMetrics,
) -> Result<(Arc<StateSealer>, Option<FilePoll>), StartError> {
    let mut key_poll = None;
    let ring = match &config.state.keys_file {
        Some(path) => {
            let bytes = KeyRing::read(path)?;
            key_poll = Some(FilePoll::loaded(vec![path.clone()], &[&bytes[..]]));
            KeyRing::parse(&bytes, &path.display().to_string())?
        }
        None => {
            tracing::warn!(
                "no state.keys_file configured: sealing with a process-local random key. \
                 Tokens will not survive a restart and will not open on another replica; \
                 configure state.keys_file and state.audience for any real deployment"
            );
            KeyRing::ephemeral()
        }
    };
    tracing::info!(key_ids = ?ring.key_ids(), "key ring loaded; the first key mints");
    metrics.key_ring_loaded(&KeyId::of_ring(&ring), config.state.keys_file.is_some());
    let sealer = StateSealer::new(
        ring,
        config.state.audience.clone(),
        config.state.ttl_seconds,
    );
    Ok((Arc::new(sealer), key_poll))
}

/// Say at start-up when the configured principal source binds tokens to nobody, or
/// takes the identity header from any peer.
pub(super) fn warn_about_weak_principals(config: &Config, principal: &Identifier) {
    if config.state.keys_file.is_some() && matches!(principal, Identifier::None) {
        tracing::warn!(
            "principal.source is \"none\": tokens are bound to no caller, so anyone who obtains \
             a token can finish another caller's flow; configure header, jwt or mtls"
        );
    }
    if principal.header().is_some() && config.principal.trusted_proxies.is_empty() {
        tracing::warn!(
            header = %config.principal.header,
            "principal.trusted_proxies is empty: the identity header is taken from any peer; \
             list the front proxies' addresses so that only they can set it"
        );
    }
}

/// The one memory budget of the data path and a stdio upstream's bridge.
pub(super) fn memory_budget(config: &Config, metrics: &Metrics) -> Arc<MemoryBudget> {
    MemoryBudget::new(
        config.limits.max_buffered_bytes,
        metrics.path.buffered_bytes().clone(),
    )
}

/// The upstream: a URL, or a child process run by a [`Bridge`] (whose readiness is
/// [`health::ChildUp`]).
pub(super) enum UpstreamKind {
    Http(crate::config::UpstreamUrl),
    Stdio(Arc<Bridge>, health::ChildUp),
}

impl UpstreamKind {
    /// Parse the URL, or start the child (`upstream = "stdio"`).
    pub(super) fn start(
        config: &Config,
        metrics: &Metrics,
        budget: &Arc<MemoryBudget>,
    ) -> Result<Self, StartError> {
        if config.is_stdio() {
            let up = health::ChildUp::default();
            let bridge = Bridge::start(config, metrics.stdio.clone(), up.clone(), budget.clone());
            return Ok(UpstreamKind::Stdio(bridge, up));
        }
        config::parse_upstream(&config.upstream)
            .map(UpstreamKind::Http)
            .map_err(StartError::Upstream)
    }

    pub(super) fn bridge(&self) -> Option<Arc<Bridge>> {
        match self {
            UpstreamKind::Stdio(bridge, _) => Some(bridge.clone()),
            UpstreamKind::Http(_) => None,
        }
    }
}

/// The upstream and its connection pool, with `upstream_tls` for an `https://` upstream.
pub(super) fn upstream_client(
    config: &Config,
    upstream: &UpstreamKind,
    connect_timeout: Duration,
) -> Result<Upstream, StartError> {
    let pool = Limits::of(config);
    let head_timeout = Duration::from_millis(config.timeouts.response_head_ms);
    let upstream_uri = match upstream {
        UpstreamKind::Http(uri) => uri,
        UpstreamKind::Stdio(bridge, _) => {
            return Ok(Upstream::stdio(bridge.connector(), head_timeout, pool));
        }
    };
    let upstream_tls = &config.upstream_tls;
    let tls = crate::tls::client_config(
        upstream_tls
            .ca_file
            .as_deref()
            .map(|p| ("upstream_tls.ca_file", p)),
        upstream_tls
            .cert_file
            .as_deref()
            .zip(upstream_tls.key_file.as_deref())
            .map(|(cert, key)| {
                [
                    ("upstream_tls.cert_file", cert),
                    ("upstream_tls.key_file", key),
                ]
            }),
    )?;
    Ok(Upstream::with_tls(
        upstream_uri,
        tls,
        connect_timeout,
        head_timeout,
        pool,
    ))
}

/// Bind `addr` (`what` names the setting in the error).
pub(super) async fn bind(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { what, addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { what, addr, source })?;
    Ok((listener, bound))
}

/// What `/readyz` checks besides the process: the upstream (`readyz.check_upstream`:
/// a TCP probe, or for a stdio upstream its child being up) and the key file's age
/// (`readyz.max_key_age_seconds`, with a key file).
pub(super) fn readiness_checks(
    config: &Config,
    upstream: &UpstreamKind,
    keys: &Arc<KeyMetrics>,
) -> health::Checks {
    let check = config.readyz.check_upstream;
    health::Checks {
        upstream: match upstream {
            UpstreamKind::Http(uri) if check => {
                let timeout = Duration::from_millis(config.readyz.upstream_timeout_ms);
                Some(health::UpstreamProbe::new(uri, timeout))
            }
            _ => None,
        },
        child: match upstream {
            UpstreamKind::Stdio(_, up) if check => Some(up.clone()),
            _ => None,
        },
        key_age: (config.state.keys_file.is_some() && config.readyz.max_key_age_seconds > 0).then(
            || {
                let max = Duration::from_secs(config.readyz.max_key_age_seconds);
                (keys.clone(), max)
            },
        ),
    }
}

/// How each listener treats its connections.
pub(super) struct Listeners<'a> {
    config: &'a Config,
    metrics: &'a Metrics,
    /// Trusted front proxies carry many clients: no share of connections per address.
    shared_peer: Arc<dyn Fn(std::net::IpAddr) -> bool + Send + Sync>,
}

impl<'a> Listeners<'a> {
    pub(super) fn new(config: &'a Config, metrics: &'a Metrics) -> Result<Self, StartError> {
        let front_proxies =
            crate::proxy::ingress::TrustedProxies::new(&config.principal.trusted_proxies)
                .map_err(|e| StartError::Config(format!("principal.trusted_proxies: {e}")))?;
        Ok(Self {
            config,
            metrics,
            shared_peer: Arc::new(move |ip| {
                front_proxies.trusts(Some(crate::server::Peer(SocketAddr::new(ip, 0))))
            }),
        })
    }

    pub(super) fn serve(&self, name: &'static str, listener: Listener) -> server::ServeOptions {
        let config = self.config;
        server::ServeOptions {
            name,
            listener,
            metrics: self.metrics.connections.clone(),
            refusals: self.metrics.refusals.clone(),
            drain: Duration::from_millis(config.timeouts.drain_ms),
            header_read_timeout: Duration::from_millis(config.timeouts.header_read_ms),
            idle_timeout: Duration::from_millis(config.timeouts.client_idle_ms),
            max_connections: match listener {
                Listener::Proxy => config.limits.max_connections,
                // Probes and scrapes: a few at a time, on a listener of their own so
                // that a full proxy listener never starves them.
                Listener::Admin => ADMIN_MAX_CONNECTIONS,
            },
            max_connections_per_peer: match listener {
                Listener::Proxy => config.connections_share(),
                Listener::Admin => ADMIN_MAX_CONNECTIONS,
            },
            shared_peer: self.shared_peer.clone(),
            http2_max_concurrent_streams: config.limits.http2_max_concurrent_streams,
            http2_max_header_list_bytes: config.limits.http2_max_header_list_bytes,
        }
    }
}

/// What is watched while the sidecar runs: the listener's TLS files, the JWT key set,
/// the key file, the admin token file, the configuration file and a Redis store.
pub(super) struct WatchedSources {
    pub(super) tls: Option<(Arc<ServerTls>, FilePoll)>,
    pub(super) jwks: Option<Arc<Jwks>>,
    pub(super) keys: Option<FilePoll>,
    pub(super) admin_token: Option<(FilePoll, Arc<admin::Admin>)>,
    pub(super) config: Option<(ConfigSource, live::Live)>,
    /// A fail-closed shared store whose reachability readiness follows (Redis).
    pub(super) store: Option<(Arc<SingleUse>, Arc<admin::Readiness>)>,
}

impl WatchedSources {
    /// Spawn one task per watched source, each stopping with `stop`.
    pub(super) fn spawn(
        self,
        config: &Config,
        sealer: &Arc<StateSealer>,
        metrics: &Metrics,
        stop: &watch::Receiver<bool>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) {
        if let Some((tls, poll)) = self.tls {
            let interval = Duration::from_millis(config.tls.reload_interval_ms);
            tasks.push(tokio::spawn(tls.watch(poll, interval, stop.clone())));
        }
        if let Some(jwks) = self.jwks {
            let interval = Duration::from_secs(config.principal.jwt.jwks_refresh_seconds);
            tasks.push(tokio::spawn(jwks.run(interval, stop.clone())));
        }
        let reload_interval = Duration::from_millis(config.state.reload_interval_ms);
        if let (Some(path), Some(poll)) = (&config.state.keys_file, self.keys) {
            tasks.push(tokio::spawn(reload_keys(
                path.clone(),
                poll,
                sealer.clone(),
                metrics.keys.clone(),
                reload_interval,
                stop.clone(),
            )));
        }
        if let (Some(path), Some((poll, admin))) = (&config.admin.token_file, self.admin_token) {
            tasks.push(tokio::spawn(live::reload_admin_token(
                path.clone(),
                poll,
                admin,
                metrics.process.clone(),
                reload_interval,
                stop.clone(),
            )));
        }
        if let Some((source, live)) = self.config {
            let process = metrics.process.clone();
            tasks.push(tokio::spawn(config::reload::watch(
                source,
                config::reload::hangups(),
                reload_interval,
                move |outcome| process.config_reload(outcome),
                stop.clone(),
                config.clone(),
                move |in_force, changed| live.apply(in_force, changed),
            )));
        }
        if let Some((single_use, readiness)) = self.store {
            tasks.push(tokio::spawn(watch_store(
                single_use,
                readiness,
                stop.clone(),
            )));
        }
    }
}
