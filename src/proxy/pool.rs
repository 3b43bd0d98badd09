//! The upstream's connections: HTTP/1.1 to one configured upstream, each idle one kept
//! for the next request, at most [`Limits::max_idle`] of them and none longer than
//! [`Limits::idle_timeout`].
//!
//! Written here rather than taken from hyper-util's pooled client, which this replaced:
//! that client keys its pool by scheme and authority for any number of hosts, races a
//! new connection against each checkout and speaks HTTP/2 as well, and it spent about
//! 10 k instructions of a request doing so (a tenth of the sidecar's own work, most of
//! it hashing the authority three times). The sidecar has one upstream and speaks
//! HTTP/1.1 to it, so its pool is a stack of ready connections behind one lock; the
//! connection itself is hyper's (`hyper::client::conn::http1`).
//!
//! Invariants:
//! - a connection is put back only when hyper says it is ready for another request
//!   (the last answer read to its end); one whose answer was abandoned is closed;
//! - a request is sent again on another connection only when hyper hands it back
//!   unsent (a pooled connection that closed as it was taken), never after any of it
//!   was written: an upstream never sees a request twice;
//! - the newest idle connection is taken first, so the older ones age out;
//! - a connection idle longer than the timeout is never used, and is closed by the
//!   pool's sweep within half the timeout (50 ms at least) after it expired.

use crate::body::{BoxError, ProxyBody};
use crate::error::UpstreamError;
use futures_util::FutureExt;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tower_service::Service;

/// How idle upstream connections are kept for reuse.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// An idle connection is closed after this (`timeouts.upstream_idle_ms`).
    pub(crate) idle_timeout: Duration,
    /// At most this many idle connections are kept (`limits.upstream_max_idle_per_host`).
    pub(crate) max_idle: usize,
}

impl Limits {
    /// The limits `config` sets.
    pub(crate) fn of(config: &crate::config::Config) -> Self {
        Self {
            idle_timeout: Duration::from_millis(config.timeouts.upstream_idle_ms),
            max_idle: config.limits.upstream_max_idle_per_host,
        }
    }
}

/// The sweep never wakes more often than this, whatever the idle timeout.
const MIN_SWEEP: Duration = Duration::from_millis(50);

/// Connections to one upstream, dialled with `C` (TCP or TLS, or a stdio upstream's
/// in-memory pipe).
pub(crate) struct Pool<C> {
    connector: C,
    /// What the connector dials: the upstream's scheme and authority.
    target: Uri,
    idle: Arc<Idle>,
}

/// The ready connections, oldest first.
struct Idle {
    stack: Mutex<Vec<IdleConnection>>,
    limits: Limits,
    /// Whether the sweep's task runs: from the first connection put back until a sweep
    /// leaves the stack empty, so an idle pool (or one that never keeps a connection)
    /// runs no task and wakes nothing.
    sweeping: AtomicBool,
}

struct IdleConnection {
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

impl<C> Pool<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
    C::Error: Into<BoxError>,
    C::Future: Send,
{
    /// A pool dialling `target` (scheme and authority) with `connector`.
    pub(crate) fn new(connector: C, target: Uri, limits: Limits) -> Self {
        Self {
            connector,
            target,
            idle: Arc::new(Idle {
                stack: Mutex::new(Vec::new()),
                limits,
                sweeping: AtomicBool::new(false),
            }),
        }
    }

    /// Send `request` (its target in origin form) on an idle connection, or on a new one,
    /// and wait for the answer's head.
    pub(crate) async fn send(
        &self,
        mut request: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        while let Some(mut sender) = self.idle.take() {
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(self.answered(sender, response)),
                Err(mut error) => match error.take_message() {
                    // Nothing of it was written: the connection closed as it was taken.
                    Some(unsent) => request = unsent,
                    None => return Err(UpstreamError::Exchange(error.into_error())),
                },
            }
        }
        // A new connection takes its first request before its task has run. Dialling
        // holds a whole connection (2.4 KB over TLS) until its handshake ends: boxed, so
        // that every request's future does not carry it (4.3 KB for the upstream leg
        // where 2 KB is its own).
        let mut sender = Box::pin(self.connect()).await?;
        match sender.try_send_request(request).await {
            Ok(response) => Ok(self.answered(sender, response)),
            Err(mut error) => Err(match error.take_message() {
                Some(_) => UpstreamError::Unsent(error.into_error()),
                None => UpstreamError::Exchange(error.into_error()),
            }),
        }
    }

    /// A new connection, its task spawned.
    async fn connect(&self) -> Result<SendRequest<ProxyBody>, UpstreamError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| UpstreamError::Connect(e.into()))?;
        let io = connector
            .call(self.target.clone())
            .await
            .map_err(|e| UpstreamError::Connect(e.into()))?;
        let (sender, connection) = http1::handshake(io)
            .await
            .map_err(|e| UpstreamError::Connect(e.into()))?;
        // Mapped, not awaited in an `async` block: a block holds the connection (1 744
        // bytes over TLS or TCP) twice, as its capture and as its awaitee, and its task
        // took jemalloc's 4 KiB class where this one takes the 2 KiB (1 920 bytes).
        tokio::spawn(connection.map(|ended| {
            if let Err(error) = ended {
                tracing::debug!(%error, "upstream connection ended");
            }
        }));
        Ok(sender)
    }

    /// The connection goes back once it is ready for another request: now, when the
    /// whole answer was read with its head, or when its body has been read to its end.
    fn answered(
        &self,
        mut sender: SendRequest<ProxyBody>,
        response: Response<Incoming>,
    ) -> Response<Incoming> {
        if sender.is_ready() {
            self.idle.put(sender);
        } else if !sender.is_closed() {
            let idle = Arc::downgrade(&self.idle);
            tokio::spawn(async move {
                // An error: the connection closed (an abandoned answer closes it).
                if sender.ready().await.is_ok()
                    && let Some(idle) = idle.upgrade()
                {
                    idle.put(sender);
                }
            });
        }
        response
    }

    /// How many idle connections are kept (tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle.stack.lock().expect("the idle stack").len()
    }
}

impl Idle {
    /// The newest ready idle connection, if any; expired or closed ones on the way go.
    fn take(&self) -> Option<SendRequest<ProxyBody>> {
        let now = Instant::now();
        let mut stack = self.stack.lock().expect("the idle stack");
        while let Some(kept) = stack.pop() {
            if now.duration_since(kept.since) >= self.limits.idle_timeout {
                // The newest expired: so did every older one.
                stack.clear();
                return None;
            }
            if kept.sender.is_ready() {
                return Some(kept.sender);
            }
        }
        None
    }

    /// Keep a ready connection, unless the stack is full (then it closes).
    fn put(self: &Arc<Self>, sender: SendRequest<ProxyBody>) {
        let kept = IdleConnection {
            sender,
            since: Instant::now(),
        };
        {
            let mut stack = self.stack.lock().expect("the idle stack");
            if stack.len() >= self.limits.max_idle {
                return;
            }
            stack.push(kept);
        }
        // After the push: a sweep that found the stack empty said so under its lock, so
        // either it sees this connection or this sees it stopped.
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            self.start_sweep();
        }
    }

    /// Close the connections idle for longer than the timeout, or closed by the upstream,
    /// every half timeout, until none is left or the pool is gone.
    fn start_sweep(self: &Arc<Self>) {
        let idle = Arc::downgrade(self);
        let every = (self.limits.idle_timeout / 2).max(MIN_SWEEP);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(idle) = Weak::upgrade(&idle) else {
                    return;
                };
                if idle.sweep(Instant::now()) {
                    return;
                }
            }
        });
    }

    /// One sweep; `true` when it left nothing to sweep (the task then ends).
    fn sweep(&self, now: Instant) -> bool {
        let mut stack = self.stack.lock().expect("the idle stack");
        let timeout = self.limits.idle_timeout;
        stack.retain(|kept| now.duration_since(kept.since) < timeout && !kept.sender.is_closed());
        let done = stack.is_empty();
        if done {
            self.sweeping.store(false, Ordering::Release);
        }
        done
    }
}

#[cfg(test)]
mod tests;
