//! A stdio upstream (`upstream = "stdio"`): the MCP server is the sidecar's child
//! process, and this bridge serves it to the proxy over Streamable HTTP, so that every
//! protection the proxy gives an HTTP upstream applies unchanged.
//!
//! The proxy's connection pool dials a [`Connector`] that opens an in-memory connection
//! (no port: nothing else in the pod can reach the child around the sidecar) to the
//! bridge's HTTP server ([`serve`]), which answers only requests the proxy's gated route
//! marked with this process's secret ([`admit`]). Each request becomes one line on the
//! child's stdin under a fresh random id of the bridge's own ([`ids`]); its answer and its
//! progress notifications come back to that caller only ([`route`]). One task supervises
//! the child ([`child`]): starts it, asks it `server/discover` before calling it up,
//! writes the bounded queues to its stdin (the bridge's own lines first), reads its
//! stdout line by line within `limits.max_event_bytes` ([`lines`]), logs its stderr
//! clipped, fails every open request when it exits, and restarts it with backoff.
//!
//! Invariant: a line of the child's stdout reaches at most the one caller whose request
//! it names, and it can name one only by an id the child was given for it (the child's
//! stdout is shared by every caller); every byte the bridge holds for a request (its
//! body while read, its line until the child's stdin took it, its answer and its
//! notifications until its stream took them) is reserved in the process's one memory
//! budget, and what cannot be reserved is refused at once or cuts its caller off;
//! requests waiting for the child count against `queue_max`, and one caller's against
//! its share; nothing waits on a child that is gone (every open request is failed when
//! it exits, and a request waiting for the child is bounded by the proxy's head timeout).

mod admit;
mod answer;
mod ask;
mod child;
mod ids;
mod lines;
pub(crate) mod metrics;
mod notices;
mod outbox;
mod route;
mod serve;
mod session;
mod tools;

pub(crate) use admit::{GATED_HEADER, OWNER_HEADER};
pub use metrics::BridgeRefusal;
pub use metrics::CutOff;
pub use metrics::Dropped;
pub use metrics::SessionEnd;
pub use metrics::StdioMetrics;
pub use metrics::Unmatched;

use crate::budget::{MemoryBudget, Reservation};
use crate::config::Config;
use crate::health::ChildUp;
use crate::mcp::param_headers::LearnedParamHeaders;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use outbox::Outbox;
use route::Routes;
use session::Sessions;
use std::collections::HashMap;
use std::future::Ready;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::DuplexStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Bytes buffered in each direction of an in-memory connection.
const DUPLEX_BYTES: usize = 64 * 1024;

/// What is shared by the in-process server, the supervisor and the reader of one child:
/// the shared 2026-07-28 child, or a 2025-era session's ([`session`]).
pub(crate) struct BridgeShared {
    routes: Mutex<Routes>,
    /// The callers' lines for the child's stdin: a place in it ([`admit::Place`]) is
    /// taken before a request waits for the child, so `queue_max` counts both.
    queue: mpsc::Sender<Outgoing>,
    /// The bridge's own lines (its `server/discover` probe, its tool listing, the
    /// cancellations and refusals it writes): apart, so that they neither take a
    /// caller's place nor wait behind callers waiting for the child; written first.
    own: mpsc::Sender<Outgoing>,
    /// Whether the child answers (it answered `server/discover`); `None` once stopped.
    up: watch::Sender<Option<bool>>,
    /// The readiness the shared child reports (`/readyz`, `stdio_child_up`); a
    /// session's child reports none.
    child_up: Option<ChildUp>,
    /// A session's child: where what it sends its one client unasked goes.
    session: Option<Arc<Outbox>>,
    metrics: Arc<StdioMetrics>,
    max_body: usize,
    max_values: usize,
    /// The process's one memory budget, shared with the data path.
    budget: Arc<MemoryBudget>,
    /// The proxy's gated route sends this ([`GATED_HEADER`]); nothing else can.
    mark: http::HeaderValue,
    /// Requests each caller has at the bridge, and how many one may have.
    owners: Mutex<HashMap<String, usize>>,
    owner_share: usize,
    /// The child's tools' `Mcp-Param-*` annotations ([`tools`]), which the gate checks.
    param_headers: LearnedParamHeaders,
}

/// One line for the child's stdin: a request's (written only while its route is open)
/// or the bridge's own (`id` `None`: a cancellation, a refusal, the discovery probe's).
pub(crate) struct Outgoing {
    id: Option<ids::BridgeId>,
    line: Bytes,
    /// A request's line is reserved until the child's stdin took it.
    held: Option<Reservation>,
}

/// The receiving ends of one child's queues, read by its stdin's writer.
pub(crate) struct Queued {
    own: mpsc::Receiver<Outgoing>,
    callers: mpsc::Receiver<Outgoing>,
}

/// Why a line was not queued.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NotQueued {
    Full,
    Stopped,
}

impl<T> From<mpsc::error::TrySendError<T>> for NotQueued {
    fn from(error: mpsc::error::TrySendError<T>) -> Self {
        match error {
            mpsc::error::TrySendError::Full(_) => NotQueued::Full,
            mpsc::error::TrySendError::Closed(_) => NotQueued::Stopped,
        }
    }
}

impl NotQueued {
    fn message(self) -> &'static str {
        match self {
            NotQueued::Full => "the upstream process's input queue is full; retry later",
            NotQueued::Stopped => "the upstream process is stopping",
        }
    }
}

impl BridgeShared {
    /// One child's bridge: the shared child's (reporting readiness to `child_up`), or a
    /// session's (sending what its child sends unasked to `session`). The receiving
    /// end of its queue goes to the child's supervisor.
    fn new(
        config: &Config,
        metrics: Arc<StdioMetrics>,
        budget: Arc<MemoryBudget>,
        mark: http::HeaderValue,
        child_up: Option<ChildUp>,
        session: Option<Arc<Outbox>>,
    ) -> (Arc<Self>, Queued) {
        let command = &config.upstream_command;
        let (queue, callers) = mpsc::channel(command.queue_max);
        let (own, own_queued) = mpsc::channel(command.queue_max);
        let shared = Arc::new(BridgeShared {
            routes: Mutex::new(Routes::new(budget.clone())),
            queue,
            own,
            up: watch::Sender::new(Some(false)),
            child_up,
            session,
            metrics,
            max_body: config.limits.max_body_bytes,
            max_values: config.limits.max_json_values,
            budget,
            mark,
            owners: Mutex::new(HashMap::new()),
            owner_share: config.upstream_command_queue_share(),
            param_headers: LearnedParamHeaders::default(),
        });
        shared.set_up(false);
        let queued = Queued {
            own: own_queued,
            callers,
        };
        (shared, queued)
    }

    pub(crate) fn routes(&self) -> MutexGuard<'_, Routes> {
        // A panic while holding the table cannot leave it half-changed (each change is
        // one map operation): keep serving.
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a caller's line (a notification or a response the client wrote) for the
    /// child's stdin, or say why not (never waits). `held`: its reservation, given back
    /// once the child's stdin took it.
    pub(crate) fn enqueue(
        self: &Arc<Self>,
        line: Bytes,
        held: Reservation,
    ) -> Result<(), NotQueued> {
        admit::Place::take(self)?.send(None, line, held)
    }

    /// Queue one of the bridge's own lines (a cancellation, a refusal), or say why not
    /// (never waits).
    pub(crate) fn enqueue_own(&self, line: Bytes) -> Result<(), NotQueued> {
        let own = Outgoing {
            id: None,
            line,
            held: None,
        };
        let sent = self.own.try_send(own);
        self.metrics.queue_depth(self.queued());
        sent.map_err(NotQueued::from)
    }

    /// Lines waiting for the child's stdin (the callers' and the bridge's own), and
    /// callers' requests waiting for the child (each holds its place).
    fn queued(&self) -> usize {
        let own = self.own.max_capacity() - self.own.capacity();
        self.queue.max_capacity() - self.queue.capacity() + own
    }

    /// Whether the child answers now.
    fn is_up(&self) -> bool {
        *self.up.borrow() == Some(true)
    }

    /// Wait until the child answers; false once the bridge stopped.
    pub(crate) async fn child_ready(&self) -> bool {
        let mut up = self.up.subscribe();
        matches!(
            up.wait_for(|up| *up != Some(false)).await.map(|up| *up),
            Ok(Some(true))
        )
    }

    fn set_up(&self, up: bool) {
        self.up.send_if_modified(|state| {
            let changed = state.is_some() && *state != Some(up);
            if changed {
                *state = Some(up);
            }
            changed
        });
        if let Some(child_up) = &self.child_up {
            child_up.set(up);
            self.metrics.set_up(up);
        }
    }

    /// The child is gone for good: whoever waits for it is told so.
    fn stopped(&self) {
        self.up.send_replace(None);
    }

    /// Whether the child is gone for good.
    fn is_stopped(&self) -> bool {
        self.up.borrow().is_none()
    }
}

/// One child, supervised (started, and for the shared child restarted) until stopped.
pub(crate) struct Supervised {
    shared: Arc<BridgeShared>,
    /// Set to stop: the instant by which the child must be gone.
    stop: watch::Sender<Option<tokio::time::Instant>>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl Supervised {
    fn spawn(shared: Arc<BridgeShared>, spec: child::Spec, queued: Queued) -> Self {
        let (stop, stopping) = watch::channel(None);
        let supervisor = tokio::spawn(child::supervise(shared.clone(), spec, queued, stopping));
        Self {
            shared,
            stop,
            supervisor: Mutex::new(Some(supervisor)),
        }
    }

    /// Tell the child to stop: its stdin closed and SIGTERM now, SIGKILL when it is
    /// still there at `deadline` (and at least a moment later).
    fn signal(&self, deadline: tokio::time::Instant) {
        let earliest = tokio::time::Instant::now() + Duration::from_millis(500);
        let _ = self.stop.send(Some(deadline.max(earliest)));
    }

    /// Wait until the child is gone.
    async fn join(&self) {
        let supervisor = self
            .supervisor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(supervisor) = supervisor {
            let _ = supervisor.await;
        }
        self.shared.stopped();
    }

    async fn stop(&self, deadline: tokio::time::Instant) {
        self.signal(deadline);
        self.join().await;
    }
}

/// The shared child (2026-07-28), the 2025-era sessions' children, and the bridge to
/// them.
pub(crate) struct Bridge {
    child: Supervised,
    sessions: Arc<Sessions>,
    /// Ends idle sessions and those whose child exited.
    reaper: JoinHandle<()>,
}

impl Bridge {
    /// Start the child `config.upstream_command` describes (the configuration is
    /// validated and `upstream = "stdio"`), and supervise it until [`Bridge::stop`].
    pub(crate) fn start(
        config: &Config,
        metrics: Arc<StdioMetrics>,
        child_up: ChildUp,
        budget: Arc<MemoryBudget>,
    ) -> Arc<Self> {
        let mark = admit::fresh_mark();
        let sessions = Arc::new(Sessions::new(
            config,
            metrics.clone(),
            budget.clone(),
            mark.clone(),
        ));
        let (shared, queued) =
            BridgeShared::new(config, metrics, budget, mark, Some(child_up), None);
        let spec = child::Spec::from_config(config);
        Arc::new(Self {
            child: Supervised::spawn(shared, spec, queued),
            reaper: tokio::spawn(session::reap(sessions.clone())),
            sessions,
        })
    }

    /// What the proxy's client dials.
    pub(crate) fn connector(self: &Arc<Self>) -> Connector {
        Connector {
            shared: self.child.shared.clone(),
            sessions: self.sessions.clone(),
        }
    }

    /// Stop the children once the proxy has drained: every session's and the shared
    /// one, each told at once (stdin closed, SIGTERM), each killed when it is still
    /// there at `deadline` (and at least a moment later).
    pub(crate) async fn stop(&self, deadline: tokio::time::Instant) {
        self.reaper.abort();
        self.child.signal(deadline);
        self.sessions.stop_all(deadline).await;
        self.child.join().await;
    }
}

/// Dials the bridge: each connection is an in-memory pipe to a new HTTP/1.1 server
/// connection of the bridge (pooled and reused by the client like any other).
#[derive(Clone)]
pub(crate) struct Connector {
    shared: Arc<BridgeShared>,
    sessions: Arc<Sessions>,
}

impl Connector {
    /// The value of [`GATED_HEADER`] the bridge answers: the proxy's gated route sets it
    /// (and only it: no client learns it).
    pub(crate) fn mark(&self) -> http::HeaderValue {
        self.shared.mark.clone()
    }

    /// The `Mcp-Param-*` annotations of the child's tools, as last listed.
    pub(crate) fn param_headers(&self) -> LearnedParamHeaders {
        self.shared.param_headers.clone()
    }
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = Pipe;
    type Error = std::io::Error;
    type Future = Ready<Result<Pipe, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let (client, server) = tokio::io::duplex(DUPLEX_BYTES);
        let (shared, sessions) = (self.shared.clone(), self.sessions.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                serve::serve(shared.clone(), sessions.clone(), request)
            });
            // Ends when the client side closes the pipe, which drops a request still
            // waiting (its ticket cancels it at the child).
            // No header timeout: the only client is the sidecar's own pool, which closes
            // an idle connection first (`timeouts.upstream_idle_ms`).
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(None)
                .serve_connection(TokioIo::new(server), service)
                .await;
        });
        std::future::ready(Ok(Pipe(TokioIo::new(client))))
    }
}

/// The client's end of an in-memory connection.
pub(crate) struct Pipe(TokioIo<DuplexStream>);

impl hyper::rt::Read for Pipe {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Pipe {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
