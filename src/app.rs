//! Wiring: build the shared state from a validated [`Config`], bind both listeners,
//! spawn the serving and reload tasks (keys, TLS files, JWKS, the admin token, the
//! configuration file's live keys: `app::live`), and shut them down in order.
//!
//! Invariant: the sidecar is ready only once keys are loaded and both listeners are
//! bound; shutdown first fails readiness, then stops accepting, then drains.

pub(crate) mod files;
mod live;
mod metrics;
mod parts;

pub use metrics::Metrics;
pub use metrics::ProcessMetrics;

use crate::admin::{self, Readiness};
use crate::auth::jwks::{self, Jwks};
use crate::auth::jwt::JwtVerifier;
use crate::auth::{AuthMetrics, Identifier};
use crate::config::reload::ConfigSource;
use crate::config::{self, Config};
use crate::file_watch::{FilePoll, Seen};
use crate::policy::single_use::SingleUse;
use crate::proxy::ingress::HostPolicy;
use crate::proxy::{self, Proxy};
use crate::server;
use crate::server::Listener;
use crate::stdio::Bridge;
use crate::store::Store;
use crate::tls::FileError;
use crate::token::{KeyId, KeyMetrics, KeyRing, KeyRingError, StateSealer};
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Connections the admin listener serves at once.
const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Why the sidecar could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("state.keys_file: {0}")]
    Keys(#[from] KeyRingError),
    #[error("cannot bind {what} {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("upstream: {0}")]
    Upstream(&'static str),
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    File(#[from] FileError),
    #[error("principal.jwt.jwks_file ({env}): {path}: {source}", env = config::env_var_for("principal.jwt.jwks_file"), path = .path.display())]
    Jwks {
        path: PathBuf,
        source: jwks::JwksError,
    },
}

/// A running sidecar.
pub struct Running {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    /// A stdio upstream's child, stopped once the listeners have drained.
    bridge: Option<Arc<Bridge>>,
    drain: Duration,
    metrics: Arc<Metrics>,
    sealer: Arc<StateSealer>,
    readiness: Arc<Readiness>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// The client-facing address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn sealer(&self) -> &Arc<StateSealer> {
        &self.sealer
    }

    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// Fail readiness, wait `grace` for load balancers to notice, stop accepting, drain;
    /// then stop a stdio upstream's child (SIGTERM, SIGKILL at the drain deadline).
    pub async fn shutdown(self, grace: Duration) {
        self.readiness.set(false);
        tokio::time::sleep(grace).await;
        let deadline = tokio::time::Instant::now() + self.drain;
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Some(bridge) = self.bridge {
            bridge.stop(deadline).await;
        }
    }
}

/// Start the sidecar described by `config` (already validated), without watching a
/// configuration file.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    start_from(config, None).await
}

/// Start the sidecar described by `config`, loaded from `source` (when given): the file
/// is watched, the live keys follow it, and a changed restart-class key is reported.
pub async fn start_from(
    config: &Config,
    source: Option<ConfigSource>,
) -> Result<Running, StartError> {
    let metrics = Arc::new(Metrics::new());
    let (sealer, key_poll) = parts::key_ring(config, &metrics.keys)?;
    let budget = parts::memory_budget(config, &metrics);
    let upstream_kind = parts::UpstreamKind::start(config, &metrics, &budget)?;
    let connect_timeout = Duration::from_millis(config.timeouts.connect_ms);
    let (principal, jwks) = principal_source(config, &metrics.auth, connect_timeout).await?;
    parts::warn_about_weak_principals(config, &principal);
    let upstream = parts::upstream_client(config, &upstream_kind, connect_timeout)?;
    let (single_use, revocations) = parts::shared_store(config, &metrics)?;
    let (admin_token, token_poll) =
        live::load_admin_token(config.admin.token_file.as_deref()).map_err(StartError::Config)?;
    let (server_tls, tls_poll) = parts::listener_tls(config, &metrics)?;
    let proxy = Proxy::new(
        config,
        sealer.clone(),
        proxy::Shared::new(single_use.clone(), revocations.clone(), budget),
        metrics.meters(),
        principal,
        upstream,
    )
    .map(Arc::new)
    .map_err(|e| StartError::Config(e.to_string()))?;
    let admin_hosts = HostPolicy::for_admin(config.allowed_hosts.as_deref(), config.admin_listen)
        .map_err(|e| StartError::Config(e.to_string()))?;
    let (listener, addr) = parts::bind("listen", config.listen).await?;
    let (admin_listener, admin_addr) = parts::bind("admin_listen", config.admin_listen).await?;

    let (shutdown, stop) = watch::channel(false);
    let readiness = Arc::new(Readiness::default());
    let checks = parts::readiness_checks(config, &upstream_kind, &metrics.keys);
    readiness.set_checks(checks);
    let options = parts::Listeners::new(config, &metrics)?;
    let mut tasks = Vec::new();
    let serving = proxy.clone();
    tasks.push(tokio::spawn(server::serve(
        listener,
        server_tls.clone(),
        // Boxed where it is made: the request future is large, and hyper moves the one
        // it is given into its dispatcher (a copy of every byte of it per request).
        move |request, facts| Box::pin(serving.clone().handle(request, facts)),
        stop.clone(),
        options.serve("proxy", Listener::Proxy),
    )));
    let admin = Arc::new(admin::Admin {
        registry: metrics.registry.clone(),
        metrics: metrics.admin.clone(),
        refusals: metrics.refusals.clone(),
        readiness: readiness.clone(),
        revocations,
        token: admin_token,
        hosts: ArcSwap::from_pointee(admin_hosts),
        store: single_use.shared_store(),
    });
    let serving = admin.clone();
    tasks.push(tokio::spawn(server::serve(
        admin_listener,
        None,
        move |request, _| admin::handle(serving.clone(), request),
        stop.clone(),
        options.serve("admin", Listener::Admin),
    )));
    parts::WatchedSources {
        tls: server_tls.zip(tls_poll),
        jwks,
        keys: key_poll,
        admin_token: token_poll.map(|poll| (poll, admin.clone())),
        store: matches!(single_use.store(), Store::Redis(_))
            .then(|| (single_use.clone(), readiness.clone())),
        config: source.map(|source| {
            let live = live::Live {
                proxy,
                admin,
                single_use: single_use.clone(),
                listen: config.listen,
                admin_listen: config.admin_listen,
            };
            (source, live)
        }),
    }
    .spawn(config, &sealer, &metrics, &stop, &mut tasks);
    readiness.set(true);
    tracing::info!(%addr, %admin_addr, upstream = %config.upstream, "mcp-state-guard ready");
    Ok(Running {
        addr,
        admin_addr,
        bridge: upstream_kind.bridge(),
        drain: Duration::from_millis(config.timeouts.drain_ms),
        metrics,
        sealer,
        readiness,
        shutdown,
        tasks,
    })
}

/// Keep readiness equal to whether a fail-closed store answers (once a second).
async fn watch_store(
    single_use: Arc<SingleUse>,
    readiness: Arc<Readiness>,
    mut stop: watch::Receiver<bool>,
) {
    let mut was_down = false;
    loop {
        let down = single_use.blocking_outage().await;
        if down != was_down {
            if down {
                tracing::error!(
                    "single-use store unreachable, or its writes not confirmed by replicas: not ready (on_store_error = reject)"
                );
            } else {
                tracing::info!("single-use store reachable again");
            }
            was_down = down;
        }
        readiness.set_store_down(down);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = crate::shutdown::stopped(&mut stop) => return,
        }
    }
}

/// The configured identity source, and the JWKS cache to refresh when it is `jwt`. A
/// JWKS file must load now; a JWKS URL that cannot be fetched yet is retried (requests
/// get 503 until it answers), so an issuer outage does not keep the sidecar down.
async fn principal_source(
    config: &Config,
    metrics: &Arc<AuthMetrics>,
    connect_timeout: Duration,
) -> Result<(Identifier, Option<Arc<Jwks>>), StartError> {
    let principal = &config.principal;
    let invalid = |problems: Vec<config::ConfigProblem>| {
        StartError::Config(config::ConfigErrors(problems).to_string())
    };
    Ok(match principal.source {
        config::PrincipalSource::None => (Identifier::None, None),
        config::PrincipalSource::Header => (
            Identifier::Header {
                name: principal.header_name().map_err(|p| invalid(vec![p]))?,
                forward: principal.forward_header,
            },
            None,
        ),
        config::PrincipalSource::Mtls => (Identifier::Mtls, None),
        config::PrincipalSource::Jwt => {
            let jwt = principal.jwt.settings().map_err(invalid)?;
            let source = match &jwt.keys {
                config::JwksKeys::File(path) => jwks::Source::File(path.clone()),
                config::JwksKeys::Url { uri, ca_file } => {
                    let tls = crate::tls::client_config(
                        ca_file
                            .as_deref()
                            .map(|p| ("principal.jwt.jwks_ca_file", p)),
                        None,
                    )?;
                    let connector = crate::tls::https_connector(tls, connect_timeout, true);
                    jwks::Source::Url {
                        uri: uri.clone(),
                        client: Box::new(
                            hyper_util::client::legacy::Client::builder(
                                hyper_util::rt::TokioExecutor::new(),
                            )
                            .build(connector),
                        ),
                    }
                }
            };
            let cooldown = Duration::from_secs(jwt.jwks_cooldown_seconds);
            let keys = Arc::new(Jwks::new(source, cooldown, metrics.clone()));
            if let Err(source) = keys.refresh().await {
                match &jwt.keys {
                    config::JwksKeys::File(path) => {
                        return Err(StartError::Jwks {
                            path: path.clone(),
                            source,
                        });
                    }
                    config::JwksKeys::Url { .. } => tracing::warn!(
                        "principal.jwt.jwks_url could not be fetched at startup; requests \
                         get 503 until it answers"
                    ),
                }
            }
            let verifier = JwtVerifier::new(&jwt, keys.clone(), metrics.clone()).map_err(|_| {
                invalid(vec![config::ConfigProblem::new(
                    "principal.jwt.resource_metadata",
                    "cannot be sent in WWW-Authenticate",
                )])
            })?;
            (Identifier::Jwt(Arc::new(verifier)), Some(keys))
        }
    })
}

/// Swap the ring when the key file changes ([`FilePoll`]). A bad new file keeps the old
/// keys, logs, and counts.
async fn reload_keys(
    path: PathBuf,
    poll: FilePoll,
    sealer: Arc<StateSealer>,
    metrics: Arc<KeyMetrics>,
    interval: Duration,
    stop: watch::Receiver<bool>,
) {
    // Whether the file's content is the ring in use (a broken file is remembered too,
    // so that it is reported once, but it confirms nothing).
    let mut in_use = true;
    poll.run(interval, None, stop, |seen| match seen {
        // Read back valid: the ring's age (and its readiness check) restarts.
        Seen::Unchanged if in_use => metrics.key_file_confirmed(),
        Seen::Unchanged => {}
        Seen::Unreadable { path, error } => {
            tracing::error!(%error, path = %path.display(), "key file unreadable; keeping the previous keys");
            metrics.key_reload(false);
        }
        Seen::Changed(contents) => match KeyRing::parse(&contents[0], &path.display().to_string()) {
            Ok(ring) => {
                tracing::info!(key_ids = ?ring.key_ids(), "key file changed; new key ring in use");
                let kids = KeyId::of_ring(&ring);
                sealer.replace_ring(ring);
                metrics.key_ring_loaded(&kids, true);
                metrics.key_reload(true);
                in_use = true;
            }
            Err(e) => {
                tracing::error!(error = %e, "key file changed but is invalid; keeping the previous keys");
                metrics.key_reload(false);
                in_use = false;
            }
        },
    })
    .await
}
