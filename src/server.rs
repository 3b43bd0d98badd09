//! Accepting connections: HTTP/1.1 and HTTP/2 (h2c, or h2 negotiated by ALPN over TLS)
//! on one listener, within a limit of concurrent connections, each under its
//! [`deadline`]s, and graceful drain.
//!
//! Invariant: at most `max_connections` connections are served at once (the rest wait in
//! the kernel's accept backlog, not in memory here), and at the limit an idle keep-alive
//! connection is closed to make room before anyone waits; one client address holds at
//! most `max_connections_per_peer` of them (past it a new connection of that address
//! closes one of its own idle ones, or is answered 429 and closed without taking a
//! slot); after shutdown is signalled no new connection is accepted, and every open one
//! is told through its [`deadline::Clock`] (so its task waits on one future, not two);
//! connections in flight get until the drain deadline to finish (SSE streams never end on
//! their own, so the deadline is what ends them), then they are closed. A TLS handshake
//! runs in the connection's own task (under its own timeout), never in the accept loop,
//! so a slow client cannot stall others; every request of a TLS connection carries the
//! client's verified identity, if any.

mod address;
pub(crate) mod deadline;
pub(crate) mod framing;
mod metrics;
pub(crate) mod slots;

pub use metrics::ConnectionMetrics;
pub use metrics::Listener;

use crate::auth::Recall;
use crate::body::{self, ProxyBody};
use crate::error::{ErrorKind, ProxyError, RefusalMetrics, Share};
use crate::registry::Held;
use crate::shutdown::stopped;
use crate::tls::peer::PeerIdentity;
use deadline::{Clock, Expired, OnItsWake, Watched};
use framing::{FramingScan, MixedFraming};
use futures_util::future::{self, Either};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use slots::{Slot, Slots, peer_key};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

/// The client's address ([`ConnectionFacts::peer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// What the server knows of a request's connection, handed to the handler beside each
/// request (not in its extensions: a value there costs the map, its table and a box, three
/// allocations per request).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionFacts {
    pub(crate) peer: Peer,
    /// Whether a head on the connection was framed both ways ([`MixedFraming`]).
    pub(crate) framing: MixedFraming,
    /// The verified client certificate's identity, on an mTLS listener.
    pub(crate) identity: Option<PeerIdentity>,
    /// The peer's address as `X-Forwarded-For` spells it, written once per connection.
    pub(crate) address: http::HeaderValue,
    /// What the connection's last request was identified by.
    pub(crate) recall: Arc<Recall>,
}

impl ConnectionFacts {
    pub(crate) fn new(
        peer: SocketAddr,
        framing: MixedFraming,
        identity: Option<PeerIdentity>,
    ) -> Self {
        Self {
            peer: Peer(peer),
            framing,
            identity,
            address: address::header_value(peer.ip()),
            recall: Arc::default(),
        }
    }
}

/// How a listener treats its connections.
#[derive(Clone)]
pub(crate) struct ServeOptions {
    pub(crate) name: &'static str,
    /// Which listener, for the connection metrics.
    pub(crate) listener: Listener,
    pub(crate) metrics: Arc<ConnectionMetrics>,
    /// Where refused connections and requests hyper refused are counted.
    pub(crate) refusals: Arc<RefusalMetrics>,
    /// After shutdown, how long connections in flight may finish.
    pub(crate) drain: Duration,
    /// An HTTP/1.1 request head must arrive within this, or the connection is closed
    /// (a client that sends half a request line holds nothing for long).
    pub(crate) header_read_timeout: Duration,
    /// A connection with no request in progress is closed after this.
    pub(crate) idle_timeout: Duration,
    /// Connections served at once; more wait in the accept backlog.
    pub(crate) max_connections: usize,
    /// Connections one client address may hold (see [`slots::peer_key`]).
    pub(crate) max_connections_per_peer: usize,
    /// Addresses exempt from that share: trusted front proxies carry many clients.
    pub(crate) shared_peer: Arc<dyn Fn(IpAddr) -> bool + Send + Sync>,
    pub(crate) http2_max_concurrent_streams: u32,
    pub(crate) http2_max_header_list_bytes: u32,
}

/// Serve `handler` on `listener` until `shutdown` flips to true, then drain for at most
/// `options.drain`. The handler gets each request with its connection's [`ConnectionFacts`]:
/// the peer's address, whether a head was framed both ways and, with `tls` requiring
/// client certificates, the client's [`PeerIdentity`].
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Arc<crate::tls::ServerTls>>,
    handler: H,
    mut shutdown: watch::Receiver<bool>,
    options: ServeOptions,
) where
    H: Fn(Request<Incoming>, ConnectionFacts) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let name = options.name;
    // One builder for every connection, each borrowing it: a copy of its 240 bytes in a
    // connection's task would cost every open connection that much more.
    let builder = Arc::new(connection_builder(&options));
    let limit = Arc::new(Semaphore::new(options.max_connections));
    let slots = Arc::new(Slots::default());
    // Connections answered 429 at once: beyond these, one over its share is just closed.
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let mut connections = JoinSet::new();
    // Logged when the limit is first reached, not for every connection of an overload.
    let mut at_limit = false;
    loop {
        while connections.try_join_next().is_some() {}
        // A permit before accepting: at the limit, new connections stay in the kernel's
        // backlog (bounded by it) instead of being accepted and queued here.
        let Some(permit) =
            take_permit(&limit, &slots, &mut shutdown, &options, &mut at_limit).await
        else {
            break;
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let _ = stream.set_nodelay(true);
        let key = peer_key(peer.ip());
        if slots.held_by(key) >= options.max_connections_per_peer
            && !(options.shared_peer)(peer.ip())
            && !slots.reclaim_idle(Some(key))
        {
            // Over its share with nothing idle to give: answered without a slot.
            drop(permit);
            refuse_over_share(&mut connections, &refusals, stream, peer, &tls, &options);
            continue;
        }
        let open = options.metrics.connection(options.listener);
        let clock = Clock::new(options.header_read_timeout, options.idle_timeout);
        let slot = slots.list(key, clock.clone());
        let accepted = Accepted {
            stream,
            peer,
            clock,
            handler: handler.clone(),
            name,
            refusals: options.refusals.clone(),
            tls: tls.clone(),
            builder: builder.clone(),
            held: (permit, open, slot),
        };
        // Spawned as it is, with no block around it: a wrapper's copy of what it moves
        // in would make every connection's task larger for as long as it lives.
        connections.spawn(accepted.run());
    }
    drop(listener);
    slots.stop_all();
    drain(connections, &options).await;
}

/// A permit for one more connection: at the limit (counted each time, logged when first
/// reached) idle connections are closed to make room, or it waits for one to end.
/// `None`: shutdown came first.
async fn take_permit(
    limit: &Arc<Semaphore>,
    slots: &Slots,
    shutdown: &mut watch::Receiver<bool>,
    options: &ServeOptions,
    at_limit: &mut bool,
) -> Option<OwnedSemaphorePermit> {
    let name = options.name;
    match limit.clone().try_acquire_owned() {
        Ok(permit) => {
            *at_limit = false;
            Some(permit)
        }
        Err(_) => {
            options.metrics.connection_limit_reached(options.listener);
            if !std::mem::replace(at_limit, true) {
                tracing::warn!(
                    listener = name,
                    max_connections = options.max_connections,
                    "connection limit reached; idle connections are closed to make room, \
                     new connections wait in the accept backlog"
                );
            }
            wait_for_slot(limit, slots, shutdown).await
        }
    }
}

/// A connection of an address over its share, with nothing idle to give, holds no slot:
/// it is answered 429 (within the head deadline) while few are, else just closed.
fn refuse_over_share(
    connections: &mut JoinSet<()>,
    refusals: &Arc<Semaphore>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: &Option<Arc<crate::tls::ServerTls>>,
    options: &ServeOptions,
) {
    let name = options.name;
    options.refusals.quota_refused(Share::Connections);
    tracing::debug!(listener = name, %peer, "connection refused: limits.max_connections_per_peer reached for its address");
    if let Ok(refusal) = refusals.clone().try_acquire_owned() {
        let tls = tls.clone();
        let timeout = options.header_read_timeout;
        connections.spawn(async move {
            let _held = refusal;
            let _ = tokio::time::timeout(timeout, refuse(stream, tls)).await;
        });
    }
}

/// After shutdown: connections in flight get until the drain deadline, then are closed.
async fn drain(mut connections: JoinSet<()>, options: &ServeOptions) {
    let name = options.name;
    let drained = tokio::time::timeout(options.drain, async {
        while connections.join_next().await.is_some() {}
    });
    match drained.await {
        Ok(()) => tracing::info!(listener = name, "drained"),
        Err(_) => {
            tracing::warn!(
                listener = name,
                drain_ms = options.drain.as_millis() as u64,
                "drain deadline reached; closing the remaining connections"
            );
            // Dropping the set aborts the tasks, which closes their connections.
            connections.shutdown().await;
        }
    }
}

/// How every connection of a listener is served: the head and idle deadlines are the
/// connection task's ([`deadline`]), not hyper's (its header read timer, 30 s unless
/// disabled, would also cut idle keep-alive connections); HTTP/2 has no head to time
/// out, and pings close connections whose peer stopped answering.
fn connection_builder(options: &ServeOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(20))
        .max_concurrent_streams(options.http2_max_concurrent_streams)
        .max_header_list_size(options.http2_max_header_list_bytes);
    builder
}

/// An accepted connection and what serving it needs.
struct Accepted<H> {
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    clock: Arc<Clock>,
    handler: H,
    name: &'static str,
    refusals: Arc<RefusalMetrics>,
    tls: Option<Arc<crate::tls::ServerTls>>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    /// Given back when the connection ends: its permit, its count in the open
    /// connections' gauge, its slot among its peer's.
    held: (OwnedSemaphorePermit, Held, Slot),
}

impl<H, F> Accepted<H>
where
    H: Fn(Request<Incoming>, ConnectionFacts) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    /// Serve the connection to its end: closed at a missed deadline, asked to finish
    /// when shutdown starts (HTTP/1.1: after the response in progress; HTTP/2: GOAWAY,
    /// then the streams in progress).
    async fn run(self) {
        let Accepted {
            stream,
            peer,
            clock,
            handler,
            name,
            refusals,
            tls,
            builder,
            held: _held,
        } = self;
        // The handshake first, in a box of its own: held inline, its state would size
        // every connection's task for as long as the connection lives, TLS or not.
        let (stream, identity): (Box<dyn Io>, Option<PeerIdentity>) = match tls {
            None => (Box::new(stream), None),
            Some(tls) => match Box::pin(tls.accept(stream)).await {
                Ok((stream, identity)) => (Box::new(stream), identity),
                Err(e) => {
                    tracing::debug!(listener = name, %peer, error = %e, "TLS handshake failed");
                    return;
                }
            },
        };
        let mixed_framing = MixedFraming::default();
        let framing = FramingScan::new(mixed_framing.clone());
        let facts = ConnectionFacts::new(peer, mixed_framing, identity);
        let in_requests = clock.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let facts = facts.clone();
            // In progress until the response body is dropped: after its last byte, or
            // when the client went away.
            let in_request = in_requests.request();
            let response = handler(request, facts);
            async move {
                let response = response.await;
                Ok::<_, Infallible>(response.map(|body| body::holding(body, in_request)))
            }
        });
        let io = TokioIo::new(Watched::new(stream, clock.clone(), framing));
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        // Polled first on every wake-up; the clock's wait only when it was woken.
        let expiry = std::pin::pin!(OnItsWake::new(clock.expired()));
        let expired = match future::select(connection.as_mut(), expiry).await {
            Either::Left((ended, _)) => return connection_ended(ended, name, peer, &refusals),
            Either::Right((expired, _)) => expired,
        };
        match expired {
            Expired::Head => {
                tracing::debug!(listener = name, %peer, "request head not received in time; closing");
            }
            // HTTP/1.1 with nothing in progress: close now.
            Expired::Idle if !clock.is_http2() => {}
            // Shutdown (`Slots::stop_all`): finish what is in progress. Idle HTTP/2: a
            // GOAWAY tells the client not to open streams on it again.
            Expired::Idle | Expired::Stop => {
                connection.as_mut().graceful_shutdown();
                connection_ended(connection.await, name, peer, &refusals);
            }
        }
    }
}

/// What a connection's end says, told: a request hyper refused as not one well-framed
/// HTTP/1.1 request is counted and logged as a refusal.
fn connection_ended(
    ended: Result<(), Box<dyn std::error::Error + Send + Sync>>,
    name: &str,
    peer: SocketAddr,
    refusals: &RefusalMetrics,
) {
    if let Err(e) = ended {
        let parse = e.downcast_ref::<hyper::Error>();
        if parse.is_some_and(|e| e.is_parse() || e.is_parse_too_large()) {
            // hyper answered 400 (431, 414) to bytes that are not one HTTP/1.1 request,
            // and closed: a refusal like the gate's.
            refusals.refused(ErrorKind::Framing);
            tracing::info!(listener = name, %peer, error = %e, "request refused: not a well-framed HTTP/1.1 request");
        } else {
            tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
        }
    }
}

/// Connections over their address's share answered 429 at the same time.
const REFUSALS_AT_ONCE: usize = 64;

/// At the limit: close the connection idle the longest and take the slot it gives
/// back; while none is idle, wait for a slot, looking again every quarter second (a
/// busy connection may go idle). `None`: shutdown.
async fn wait_for_slot(
    limit: &Arc<Semaphore>,
    slots: &Slots,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        let reclaimed = slots.reclaim_idle(None);
        tokio::select! {
            permit = limit.clone().acquire_owned() => return Some(permit.expect("never closed")),
            _ = tokio::time::sleep(Duration::from_millis(250)), if !reclaimed => {}
            _ = stopped(shutdown) => return None,
        }
    }
}

/// Answer every request of a connection over its address's share with 429 and
/// `Retry-After` (HTTP/1.1: then close), after the TLS handshake if there is one.
async fn refuse(stream: tokio::net::TcpStream, tls: Option<Arc<crate::tls::ServerTls>>) {
    let stream: Box<dyn Io> = match tls {
        None => Box::new(stream),
        Some(tls) => match tls.accept(stream).await {
            Ok((stream, _)) => Box::new(stream),
            Err(_) => return,
        },
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(false);
    let service = service_fn(|_request: Request<Incoming>| async {
        let response = ProxyError::Quota(Share::Connections)
            .to_response(None)
            .map(body::full);
        Ok::<_, Infallible>(response)
    });
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// A client connection, plain or TLS: one type, so one code path serves both.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

#[cfg(test)]
mod tests;
