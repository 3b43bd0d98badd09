//! Wiring: build the shared state from a validated [`Config`], bind both listeners,
//! spawn the serving and reload tasks (keys, TLS files, JWKS, the admin token, the
//! configuration file's live keys: `app::live`), and shut them down in order.
//!
//! Invariant: the sidecar is ready only once keys are loaded and both listeners are
//! bound; shutdown first fails readiness, then stops accepting, then drains.

pub mod files;
mod live;

use crate::admin::{self, Readiness};
use crate::auth::Identifier;
use crate::auth::jwks::{self, Jwks};
use crate::auth::jwt::JwtVerifier;
use crate::config::reload::ConfigSource;
use crate::config::{self, Config};
use crate::file_watch::{FilePoll, Seen};
use crate::health;
use crate::metrics::Listener;
use crate::metrics::Metrics;
use crate::policy::revocation::Revocations;
use crate::policy::single_use::SingleUse;
use crate::proxy::Proxy;
use crate::proxy::ingress::HostPolicy;
use crate::proxy::upstream::{Pool, Upstream};
use crate::server;
use crate::store::Store;
use crate::tls::{FileError, ServerTls};
use crate::token::{KeyId, KeyRing, KeyRingError, StateSealer};
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
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
    metrics: Arc<Metrics>,
    sealer: Arc<StateSealer>,
    single_use: Arc<SingleUse>,
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

    pub fn single_use(&self) -> &Arc<SingleUse> {
        &self.single_use
    }

    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// Fail readiness, wait `grace` for load balancers to notice, stop accepting, drain.
    pub async fn shutdown(self, grace: Duration) {
        self.readiness.set(false);
        tokio::time::sleep(grace).await;
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
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
    // The ring and the reload watcher's baseline come from one read: a Secret update
    // landing between two reads would otherwise look like no change at all.
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
    let sealer = Arc::new(StateSealer::new(
        ring,
        config.state.audience.clone(),
        config.state.ttl_seconds,
    ));
    let upstream_uri = config::parse_upstream(&config.upstream).map_err(StartError::Upstream)?;
    let connect_timeout = Duration::from_millis(config.timeouts.connect_ms);
    let (principal, jwks) = principal_source(config, &metrics, connect_timeout).await?;
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
    let upstream_tls = &config.upstream_tls;
    let upstream = Upstream::with_tls(
        &upstream_uri,
        crate::tls::client_config(
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
        )?,
        connect_timeout,
        Duration::from_millis(config.timeouts.response_head_ms),
        Pool {
            idle_timeout: Duration::from_millis(config.timeouts.upstream_idle_ms),
            max_idle: config.limits.upstream_max_idle_per_host,
        },
    );
    let store = Store::from_config(config)
        .map(Arc::new)
        .map_err(|e| StartError::Config(format!("single_use: {e}")))?;
    let single_use = Arc::new(SingleUse::new(
        &config.single_use,
        store.clone(),
        metrics.clone(),
    ));
    let revocations = Arc::new(Revocations::new(
        store,
        config.longest_token_seconds(),
        config.state.audience.clone(),
    ));
    let (admin_token, token_poll) =
        live::load_admin_token(config.admin.token_file.as_deref()).map_err(StartError::Config)?;
    let identity = (config.principal.source == config::PrincipalSource::Mtls)
        .then_some(config.principal.mtls.identity);
    let (server_tls, tls_poll) = match ServerTls::load(
        &config.tls,
        identity,
        Duration::from_millis(config.timeouts.header_read_ms),
        metrics.clone(),
    )? {
        Some((tls, poll)) => (Some(Arc::new(tls)), Some(poll)),
        None => (None, None),
    };
    let mut proxy = Proxy::new(
        config,
        sealer.clone(),
        single_use.clone(),
        revocations.clone(),
        metrics.clone(),
        principal,
        upstream,
    )
    .map_err(StartError::Config)?;
    if server_tls.is_some() {
        proxy.scheme = "https";
    }
    let proxy = Arc::new(proxy);
    let admin_hosts = HostPolicy::for_admin(config.allowed_hosts.as_deref(), config.admin_listen)
        .map_err(StartError::Config)?;
    let bind = |what, addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { what, addr, source })
    };
    let listener = bind("listen", config.listen).await?;
    let admin_listener = bind("admin_listen", config.admin_listen).await?;
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let admin_addr = admin_listener
        .local_addr()
        .expect("a bound listener has an address");

    let (shutdown, stop) = watch::channel(false);
    let readiness = Arc::new(Readiness::default());
    readiness.set_checks(health::Checks {
        upstream: config.readyz.check_upstream.then(|| {
            let timeout = Duration::from_millis(config.readyz.upstream_timeout_ms);
            health::UpstreamProbe::new(&upstream_uri, timeout)
        }),
        key_age: (config.state.keys_file.is_some() && config.readyz.max_key_age_seconds > 0).then(
            || {
                let max = Duration::from_secs(config.readyz.max_key_age_seconds);
                (metrics.clone(), max)
            },
        ),
    });
    // Trusted front proxies carry many clients: no share of connections per address.
    let front_proxies = Arc::new(
        crate::proxy::ingress::TrustedProxies::new(&config.principal.trusted_proxies)
            .map_err(|e| StartError::Config(format!("principal.trusted_proxies: {e}")))?,
    );
    let shared_peer: Arc<dyn Fn(std::net::IpAddr) -> bool + Send + Sync> = Arc::new(move |ip| {
        front_proxies.trusts(Some(crate::server::Peer(std::net::SocketAddr::new(ip, 0))))
    });
    let options = |name, listener| server::ServeOptions {
        name,
        listener,
        metrics: metrics.clone(),
        drain: Duration::from_millis(config.timeouts.drain_ms),
        header_read_timeout: Duration::from_millis(config.timeouts.header_read_ms),
        idle_timeout: Duration::from_millis(config.timeouts.client_idle_ms),
        max_connections: match listener {
            Listener::Proxy => config.limits.max_connections,
            // Probes and scrapes: a few at a time, on a listener of their own so that
            // a full proxy listener never starves them.
            Listener::Admin => ADMIN_MAX_CONNECTIONS,
        },
        max_connections_per_peer: match listener {
            Listener::Proxy => config.connections_share(),
            Listener::Admin => ADMIN_MAX_CONNECTIONS,
        },
        shared_peer: shared_peer.clone(),
        http2_max_concurrent_streams: config.limits.http2_max_concurrent_streams,
        http2_max_header_list_bytes: config.limits.http2_max_header_list_bytes,
    };
    let mut tasks = Vec::new();
    let serving = proxy.clone();
    tasks.push(tokio::spawn(server::serve(
        listener,
        server_tls.clone(),
        // Boxed where it is made: the request future is large, and hyper moves the one
        // it is given into its dispatcher (a copy of every byte of it per request).
        move |request| Box::pin(serving.clone().handle(request)),
        stop.clone(),
        options("proxy", Listener::Proxy),
    )));
    let admin = Arc::new(admin::Admin {
        metrics: metrics.clone(),
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
        move |request| admin::handle(serving.clone(), request),
        stop.clone(),
        options("admin", Listener::Admin),
    )));
    if let (Some(tls), Some(poll)) = (server_tls, tls_poll) {
        let interval = Duration::from_millis(config.tls.reload_interval_ms);
        tasks.push(tokio::spawn(tls.watch(poll, interval, stop.clone())));
    }
    if let Some(jwks) = jwks {
        let interval = Duration::from_secs(config.principal.jwt.jwks_refresh_seconds);
        tasks.push(tokio::spawn(jwks.run(interval, stop.clone())));
    }
    let reload_interval = Duration::from_millis(config.state.reload_interval_ms);
    if let (Some(path), Some(poll)) = (&config.state.keys_file, key_poll) {
        tasks.push(tokio::spawn(reload_keys(
            path.clone(),
            poll,
            sealer.clone(),
            metrics.clone(),
            reload_interval,
            stop.clone(),
        )));
    }
    if let (Some(path), Some(poll)) = (&config.admin.token_file, token_poll) {
        tasks.push(tokio::spawn(live::reload_admin_token(
            path.clone(),
            poll,
            admin.clone(),
            metrics.clone(),
            reload_interval,
            stop.clone(),
        )));
    }
    if let Some(source) = source {
        let live = live::Live {
            proxy,
            admin,
            single_use: single_use.clone(),
            listen: config.listen,
            admin_listen: config.admin_listen,
        };
        tasks.push(tokio::spawn(config::reload::watch(
            source,
            config::reload::hangups(),
            reload_interval,
            {
                let metrics = metrics.clone();
                move |outcome| metrics.config_reload(outcome)
            },
            stop.clone(),
            config.clone(),
            move |in_force, changed| live.apply(in_force, changed),
        )));
    }
    if matches!(single_use.store(), Store::Redis(_)) {
        tasks.push(tokio::spawn(watch_store(
            single_use.clone(),
            readiness.clone(),
            stop,
        )));
    }
    readiness.set(true);
    tracing::info!(%addr, %admin_addr, upstream = %config.upstream, "mcp-state-guard ready");
    Ok(Running {
        addr,
        admin_addr,
        metrics,
        sealer,
        single_use,
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
                    "single-use store unreachable: not ready (on_store_error = reject)"
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
    metrics: &Arc<Metrics>,
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
            let verifier = JwtVerifier::new(&jwt, keys.clone()).map_err(|_| {
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
    metrics: Arc<Metrics>,
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
