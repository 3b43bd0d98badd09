//! Accepting connections: HTTP/1.1 and HTTP/2 (h2c, or h2 negotiated by ALPN over TLS)
//! on one listener, and graceful drain.
//!
//! Invariant: after shutdown is signalled no new connection is accepted; connections in
//! flight get until the drain deadline to finish (SSE streams never end on their own, so
//! the deadline is what ends them), then they are closed. A TLS handshake runs in the
//! connection's own task, never in the accept loop, so a slow client cannot stall others;
//! every request of a TLS connection carries the client's verified identity, if any.

use crate::auth::mtls::PeerIdentity;
use crate::proxy::ingress::Peer;
use crate::proxy::upstream::ProxyBody;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How a listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    pub name: &'static str,
    /// After shutdown, how long connections in flight may finish.
    pub drain: Duration,
    /// An HTTP/1.1 request head must arrive within this, or the connection is closed
    /// (a client that sends half a request line holds nothing for long).
    pub header_read_timeout: Duration,
}

/// Serve `handler` on `listener` until `shutdown` flips to true, then drain for at most
/// `options.drain`. Each request carries the peer's address as an [`Peer`] extension and,
/// with `tls` requiring client certificates, the client's [`PeerIdentity`].
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Arc<crate::tls::ServerTls>>,
    handler: H,
    mut shutdown: watch::Receiver<bool>,
    options: ServeOptions,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let ServeOptions {
        name,
        drain,
        header_read_timeout,
    } = options;
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Without a timer hyper silently skips its header read timeout.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    // HTTP/2 has no head to time out (hyper's header read timeout is HTTP/1.1 only): pings
    // close connections whose peer stopped answering.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(20));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(listener = name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let service = move |identity: Option<PeerIdentity>| {
                    service_fn(move |mut request: Request<Incoming>| {
                        request.extensions_mut().insert(Peer(peer));
                        if let Some(identity) = &identity {
                            request.extensions_mut().insert(identity.clone());
                        }
                        let response = handler(request);
                        async move { Ok::<_, Infallible>(response.await) }
                    })
                };
                let (builder, watcher, tls) = (builder.clone(), graceful.watcher(), tls.clone());
                tokio::spawn(async move {
                    let served = match tls {
                        None => {
                            let connection = builder.serve_connection(TokioIo::new(stream), service(None));
                            watcher.watch(connection.into_owned()).await
                        }
                        Some(tls) => {
                            let (stream, identity) = match tls.accept(stream).await {
                                Ok(accepted) => accepted,
                                Err(e) => {
                                    tracing::debug!(listener = name, %peer, error = %e, "TLS handshake failed");
                                    return;
                                }
                            };
                            let connection = builder.serve_connection(TokioIo::new(stream), service(identity));
                            watcher.watch(connection.into_owned()).await
                        }
                    };
                    if let Err(e) = served {
                        tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
                    }
                });
            }
            _ = stopped(&mut shutdown) => break,
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(listener = name, "drained"),
        _ = tokio::time::sleep(drain) => tracing::warn!(listener = name, drain_ms = drain.as_millis() as u64, "drain deadline reached; closing the remaining connections"),
    }
}

/// Resolves once shutdown is signalled (or its sender is gone). The guard `wait_for`
/// returns is not `Send`, so it is dropped here rather than held across a `select!`.
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
