//! The connections behind the Redis store: one server, a Redis Cluster, or the primary
//! Sentinel names, each as a small pool, since a `WAIT` holds its connection (Redis
//! serves a client's next command only once its `WAIT` returned): commands that wait
//! for replicas take turns on their own connections, everything else shares one, so a
//! stalled replica slows the writes waiting for it and nothing else.
//!
//! Invariant: a write and the `WAIT` confirming it travel in one pipeline on one
//! connection to the node that owns the key (a cluster routes a pipeline by its first
//! keyed command), so the `WAIT` counts that very write. A connection that failed, or that
//! reached a node that is no longer the primary (`READONLY`), is dropped, and the next
//! use connects again (for Sentinel, to the primary the sentinels name now); nothing is
//! contacted before the first command, so the sidecar starts while Redis is down.

use crate::config::redis_url::{Sentinel as SentinelTarget, Target};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, Pipeline, RedisConnectionInfo, RedisError, RedisResult,
    Value,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Mutex;

/// Connections per pool: one for commands that do not wait, the rest for those that do
/// (a `WAIT` blocks only its own).
const POOL: usize = 5;

pub(super) enum Link {
    Single(Vec<ConnectionManager>),
    Cluster(Box<Lazy<ClusterClient, ClusterConnection>>),
    Sentinel(Box<Lazy<Mutex<SentinelClient>, MultiplexedConnection>>),
}

/// A pool of connections made on first use and again after a failure.
pub(super) struct Lazy<F, C> {
    factory: F,
    config: AsyncConnectionConfig,
    slots: Vec<Mutex<Option<C>>>,
    next: AtomicUsize,
    /// Connections made so far: what a node said about itself may be stale after a new
    /// one (Sentinel may have named another primary).
    generation: AtomicU64,
}

impl<F, C> Lazy<F, C> {
    fn new(factory: F, config: AsyncConnectionConfig) -> Self {
        Self {
            factory,
            config,
            slots: (0..POOL).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
        }
    }

    fn slot(&self, waits: bool) -> &Mutex<Option<C>> {
        &self.slots[pick(&self.next, waits)]
    }
}

impl<F, C: Clone> Lazy<F, C> {
    /// Run `request` on the connection held in `slot`, made by `connect` first when the
    /// slot is empty (a new generation); a failure `lost` calls fatal empties the slot, so
    /// the next request connects again.
    async fn run<Fut>(
        &self,
        slot: &Mutex<Option<C>>,
        connect: impl FnOnce() -> Fut,
        request: &Request<'_>,
        lost: fn(&RedisError) -> bool,
    ) -> RedisResult<Vec<Value>>
    where
        Fut: Future<Output = RedisResult<C>>,
        C: redis::aio::ConnectionLike,
    {
        let mut connection = {
            let mut held = slot.lock().await;
            match held.as_ref() {
                Some(connection) => connection.clone(),
                None => {
                    let connection = connect().await?;
                    self.generation.fetch_add(1, Ordering::Relaxed);
                    *held = Some(connection.clone());
                    connection
                }
            }
        };
        let result = request.on(&mut connection).await;
        if result.as_ref().is_err_and(lost) {
            *slot.lock().await = None;
        }
        result
    }
}

/// What a command may be: one command or a pipeline (which may end in a `WAIT`).
pub(super) enum Request<'a> {
    Command(&'a Cmd),
    Pipeline { pipeline: &'a Pipeline, waits: bool },
}

/// The pool member for a request: the first for one that does not wait, the others in
/// turn for those that do.
fn pick(next: &AtomicUsize, waits: bool) -> usize {
    if waits {
        1 + next.fetch_add(1, Ordering::Relaxed) % (POOL - 1)
    } else {
        0
    }
}

impl Link {
    /// Set up the pool for `target`; `timeout` bounds each request (a write's `WAIT`
    /// included).
    pub(super) fn new(target: Target, timeout: Duration) -> RedisResult<Self> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        Ok(match target {
            Target::Single(url) => {
                let client = Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    // Reconnect attempts happen in the background; a command fails fast
                    // (and the caller's deadline bounds it) rather than waiting them out.
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                let managers = (0..POOL)
                    .map(|_| {
                        ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                    })
                    .collect::<RedisResult<_>>()?;
                Link::Single(managers)
            }
            Target::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(1)
                    .build()?;
                Link::Cluster(Box::new(Lazy::new(client, config)))
            }
            Target::Sentinel(sentinel) => {
                let client = sentinel_client(&sentinel)?;
                Link::Sentinel(Box::new(Lazy::new(Mutex::new(client), config)))
            }
        })
    }

    /// A counter that moves whenever a new connection was made.
    pub(super) fn generation(&self) -> u64 {
        match self {
            Link::Single(_) => 0,
            Link::Cluster(lazy) => lazy.generation.load(Ordering::Relaxed),
            Link::Sentinel(lazy) => lazy.generation.load(Ordering::Relaxed),
        }
    }

    /// Send a command (its reply as a one-element list) or a pipeline. The future is
    /// boxed as a trait object: the client's futures (Sentinel discovery above all) nest
    /// deeper than the compiler follows when it checks the data path's futures for
    /// `Send`.
    pub(super) fn send<'a>(
        &'a self,
        request: Request<'a>,
    ) -> Pin<Box<dyn Future<Output = RedisResult<Vec<Value>>> + Send + 'a>> {
        Box::pin(self.send_now(request))
    }

    async fn send_now(&self, request: Request<'_>) -> RedisResult<Vec<Value>> {
        match self {
            Link::Single(managers) => {
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                let mut manager = managers[pick(&NEXT, request.waits())].clone();
                request.on(&mut manager).await
            }
            Link::Cluster(lazy) => {
                let connect = || lazy.factory.get_async_connection();
                let slot = lazy.slot(request.waits());
                lazy.run(slot, connect, &request, RedisError::is_unrecoverable_error)
                    .await
            }
            Link::Sentinel(lazy) => {
                // Asks the sentinels for the primary now (and checks that the node it
                // names says it is one).
                let connect = || async {
                    let mut factory = lazy.factory.lock().await;
                    factory.get_async_connection_with_config(&lazy.config).await
                };
                let slot = lazy.slot(request.waits());
                lazy.run(slot, connect, &request, lost_primary).await
            }
        }
    }

    /// Send `command` to the primary serving hash `slot` (a cluster), or to the one
    /// primary (boxed, as [`Link::send`]).
    pub(super) fn to_slot_primary(
        &self,
        command: Cmd,
        slot: u16,
    ) -> Pin<Box<dyn Future<Output = RedisResult<Value>> + Send + '_>> {
        Box::pin(self.to_slot_primary_now(command, slot))
    }

    async fn to_slot_primary_now(&self, command: Cmd, slot: u16) -> RedisResult<Value> {
        match self {
            Link::Cluster(lazy) => {
                let mut connection = {
                    let held = lazy.slot(false).lock().await;
                    match held.as_ref() {
                        Some(connection) => connection.clone(),
                        None => lazy.factory.get_async_connection().await?,
                    }
                };
                let route = Route::new(slot, SlotAddr::Master);
                connection
                    .route_command(
                        command,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await
            }
            _ => {
                let mut values = self.send(Request::Command(&command)).await?;
                Ok(values.pop().unwrap_or(Value::Nil))
            }
        }
    }
}

impl Request<'_> {
    fn waits(&self) -> bool {
        matches!(self, Request::Pipeline { waits: true, .. })
    }

    async fn on<C: redis::aio::ConnectionLike>(
        &self,
        connection: &mut C,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Request::Command(command) => {
                let value: Value = command.query_async(connection).await?;
                Ok(vec![value])
            }
            Request::Pipeline { pipeline, .. } => pipeline.query_async(connection).await,
        }
    }
}

/// After a failover the old primary is gone (the connection fails) or comes back as a
/// replica (`READONLY`); a timeout may be a primary that vanished from the network.
fn lost_primary(error: &RedisError) -> bool {
    error.is_unrecoverable_error()
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.code() == Some("READONLY")
}

/// The sentinels are asked without credentials; the URL's go to the primary.
fn sentinel_client(target: &SentinelTarget) -> RedisResult<SentinelClient> {
    let mut redis = RedisConnectionInfo::default().set_db(target.db);
    if let Some(username) = &target.username {
        redis = redis.set_username(username);
    }
    if let Some(password) = &target.password {
        redis = redis.set_password(password);
    }
    let mut node = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis);
    if target.tls {
        node = node.set_tls_mode(redis::TlsMode::Secure);
    }
    SentinelClient::build(
        target.sentinels.iter().map(String::as_str).collect(),
        &target.service,
        Some(node),
        SentinelServerType::Master,
    )
}
