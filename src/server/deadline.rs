//! Per-connection deadlines that hyper keeps as one: an HTTP/1.1 request head must
//! arrive within `header_read`, and a connection with no request in progress is closed
//! after `idle`. (hyper's own header read timer also runs while a keep-alive connection
//! waits for its next request, so with it alone the idle timeout would be the header
//! timeout, 10 s, shorter than the front proxies that reuse the connection.)
//!
//! Invariant: a connection is under exactly one deadline at a time: the head deadline
//! (it just opened, or the first bytes of a new HTTP/1.1 request arrived), the idle
//! deadline (no request in progress and nothing read since the last one ended), or none
//! (a request in progress: its body and its response have their own limits).

use super::framing::FramingScan;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the connection is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    /// A request head, since this instant.
    Head(Instant),
    /// Nothing: idle since this instant.
    Idle(Instant),
    /// Requests are in progress.
    Busy,
}

/// Which deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// A request head did not arrive in time: close at once.
    Head,
    /// Idle for too long: close (HTTP/2: after a GOAWAY).
    Idle,
    /// The listener is shutting down ([`Clock::stop`]): finish what is in progress
    /// (HTTP/2: after a GOAWAY), then close.
    Stop,
}

/// The HTTP/2 connection preface; a connection that starts with it has no HTTP/1.1 heads.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug)]
struct ClockState {
    phase: Awaiting,
    in_flight: usize,
    /// Decided from the first bytes: `None` until enough arrived.
    http2: Option<bool>,
    prefix: Vec<u8>,
    /// Asked to close while idle ([`Clock::reclaim`]): its idle deadline has passed.
    reclaimed: bool,
}

/// The deadlines of one connection, shared by its reader, its service and its task.
#[derive(Debug)]
pub(crate) struct Clock {
    state: Mutex<ClockState>,
    changed: Notify,
    /// Set once the listener shuts down ([`Clock::stop`]).
    stopping: AtomicBool,
    header_read: Duration,
    idle: Duration,
}

impl Clock {
    /// A connection accepted now: its first request head is due within `header_read`.
    pub(crate) fn new(header_read: Duration, idle: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(ClockState {
                phase: Awaiting::Head(Instant::now()),
                in_flight: 0,
                http2: None,
                prefix: Vec::new(),
                reclaimed: false,
            }),
            changed: Notify::new(),
            stopping: AtomicBool::new(false),
            header_read,
            idle,
        })
    }

    fn update(&self, change: impl FnOnce(&mut ClockState)) {
        let mut state = self.state.lock().expect("not poisoned");
        let before = state.phase;
        change(&mut state);
        if state.phase != before {
            // A reclaim is for the idle spell it found, not for the next one.
            if !matches!(state.phase, Awaiting::Idle(_)) {
                state.reclaimed = false;
            }
            drop(state);
            self.changed.notify_waiters();
        }
    }

    /// Bytes arrived from the client.
    fn read(&self, bytes: &[u8]) {
        self.update(|state| {
            if state.http2.is_none() {
                let wanted = H2_PREFACE.len() - state.prefix.len();
                state
                    .prefix
                    .extend_from_slice(&bytes[..wanted.min(bytes.len())]);
                if !H2_PREFACE.starts_with(&state.prefix) {
                    state.http2 = Some(false);
                } else if state.prefix.len() == H2_PREFACE.len() {
                    state.http2 = Some(true);
                    // HTTP/2 frames between requests (pings, settings) are no request
                    // head: the connection is idle until a stream opens.
                    if state.in_flight == 0 {
                        state.phase = Awaiting::Idle(Instant::now());
                    }
                }
                if state.http2.is_some() {
                    state.prefix = Vec::new();
                }
            }
            if let (Awaiting::Idle(_), Some(false)) = (state.phase, state.http2) {
                state.phase = Awaiting::Head(Instant::now());
            }
        });
    }

    /// A request's head was read; it is in progress until [`Clock::finished`].
    pub(crate) fn started(&self) {
        self.update(|state| {
            state.in_flight += 1;
            state.phase = Awaiting::Busy;
        });
    }

    /// A request's response was written (or abandoned).
    pub(crate) fn finished(&self) {
        self.update(|state| {
            state.in_flight = state.in_flight.saturating_sub(1);
            if state.in_flight == 0 {
                state.phase = Awaiting::Idle(Instant::now());
            }
        });
    }

    /// Whether the client speaks HTTP/2 (known once its first bytes arrived).
    pub(crate) fn is_http2(&self) -> bool {
        self.state.lock().expect("not poisoned").http2 == Some(true)
    }

    fn deadline(&self) -> Option<(Instant, Expired)> {
        let state = self.state.lock().expect("not poisoned");
        match state.phase {
            Awaiting::Head(since) => Some((since + self.header_read, Expired::Head)),
            // Reclaimed: due since it went idle, so it closes now.
            Awaiting::Idle(since) if state.reclaimed => Some((since, Expired::Idle)),
            Awaiting::Idle(since) => Some((since + self.idle, Expired::Idle)),
            Awaiting::Busy => None,
        }
    }

    /// Since when the connection has been idle (no request in progress, nothing read
    /// since the last one ended), if it is and was not reclaimed already.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let state = self.state.lock().expect("not poisoned");
        match state.phase {
            Awaiting::Idle(since) if !state.reclaimed => Some(since),
            _ => None,
        }
    }

    /// Close the connection now if it is idle (the listener needs its slot): its idle
    /// deadline is moved to the moment it went idle. Returns whether it was idle. A
    /// request that starts meanwhile cancels it (the phase changes).
    pub(crate) fn reclaim(&self) -> bool {
        let mut state = self.state.lock().expect("not poisoned");
        if !matches!(state.phase, Awaiting::Idle(_)) || state.reclaimed {
            return false;
        }
        state.reclaimed = true;
        drop(state);
        self.changed.notify_waiters();
        true
    }

    /// The listener is shutting down: [`Clock::expired`] answers [`Expired::Stop`] from
    /// now on. (The wait the connection's task already has, rather than a second future
    /// it would poll at each wake-up.)
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Resolves when the deadline in force passes without the phase changing, or once
    /// the listener stops.
    pub(crate) async fn expired(&self) -> Expired {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the deadline and the stop are read, so no change slips
            // in between.
            changed.as_mut().enable();
            if self.stopping.load(Ordering::Acquire) {
                return Expired::Stop;
            }
            match self.deadline() {
                Some((at, expired)) => tokio::select! {
                    _ = tokio::time::sleep_until(at) => {
                        if self.deadline() == Some((at, expired)) {
                            return expired;
                        }
                    }
                    _ = &mut changed => {}
                },
                None => changed.await,
            }
        }
    }

    /// A guard for one request: started now, finished when dropped (with the response
    /// body, after its last byte or when the client went away).
    pub(crate) fn request(self: &Arc<Self>) -> InRequest {
        self.started();
        InRequest(self.clone())
    }
}

/// One request in progress on a connection.
#[derive(Debug)]
pub(crate) struct InRequest(Arc<Clock>);

impl Drop for InRequest {
    fn drop(&mut self) {
        self.0.finished();
    }
}

pin_project_lite::pin_project! {
    /// The client's stream, telling the [`Clock`] when bytes arrive, and showing them to
    /// the connection's [`FramingScan`].
    pub(crate) struct Watched<I> {
        #[pin]
        inner: I,
        clock: Arc<Clock>,
        framing: FramingScan,
    }
}

impl<I> Watched<I> {
    pub(crate) fn new(inner: I, clock: Arc<Clock>, framing: FramingScan) -> Self {
        Self {
            inner,
            clock,
            framing,
        }
    }
}

impl<I: AsyncRead> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let poll = this.inner.poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = poll
            && buf.filled().len() > before
        {
            this.clock.read(&buf.filled()[before..]);
            this.framing.read(&buf.filled()[before..]);
        }
        poll
    }
}

impl<I: AsyncWrite> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real time (tokio's paused clock needs a feature the crate does not otherwise
    // use): short deadlines, generous margins for a loaded machine.
    const HEAD: Duration = Duration::from_millis(150);
    const IDLE: Duration = Duration::from_millis(400);

    /// `expired` within a few seconds (a deadline missed would wait an hour).
    async fn within(expired: impl Future<Output = Expired>) -> Expired {
        tokio::time::timeout(Duration::from_secs(5), expired)
            .await
            .expect("the deadline fired")
    }

    fn about(elapsed: Duration, expected: Duration) {
        assert!(
            elapsed >= expected && elapsed < expected + Duration::from_millis(300),
            "{elapsed:?} for {expected:?}"
        );
    }

    #[tokio::test]
    async fn a_silent_connection_misses_its_head_deadline() {
        let clock = Clock::new(HEAD, IDLE);
        let started = Instant::now();
        assert_eq!(clock.expired().await, Expired::Head);
        about(started.elapsed(), HEAD);
    }

    #[tokio::test]
    async fn http1_keep_alive_waits_idle_then_heads_again() {
        let clock = Clock::new(HEAD, IDLE);
        clock.read(b"POST /mcp HTTP/1.1\r\n");
        let request = clock.request();
        // In progress: no deadline, however long it takes.
        let waited = tokio::time::timeout(IDLE + HEAD, clock.expired()).await;
        assert!(waited.is_err());
        drop(request);
        // Idle; a new request's first bytes put the head deadline back in force.
        tokio::time::sleep(IDLE / 2).await;
        clock.read(b"GET");
        let head_since = Instant::now();
        assert_eq!(clock.expired().await, Expired::Head);
        about(head_since.elapsed(), HEAD);
        // Without further bytes: idle.
        let clock = Clock::new(HEAD, IDLE);
        clock.read(b"GET / HTTP/1.1\r\n\r\n");
        drop(clock.request());
        let idle_since = Instant::now();
        assert_eq!(clock.expired().await, Expired::Idle);
        about(idle_since.elapsed(), IDLE);
    }

    /// Finding 9 of the second review: idle keep-alive connections held every slot for
    /// `client_idle_ms`. A reclaimed idle connection closes at once; a busy one, or one
    /// that started a request meanwhile, is not reclaimed.
    #[tokio::test]
    async fn an_idle_connection_is_reclaimed_at_once_and_a_busy_one_never() {
        let clock = Clock::new(HEAD, Duration::from_secs(3600));
        clock.read(b"GET / HTTP/1.1\r\n\r\n");
        let request = clock.request();
        assert_eq!(clock.idle_since(), None);
        assert!(!clock.reclaim(), "a request is in progress");
        drop(request);
        assert!(clock.idle_since().is_some());
        let started = Instant::now();
        assert!(clock.reclaim());
        assert!(!clock.reclaim(), "once");
        assert_eq!(clock.idle_since(), None, "not offered twice");
        assert_eq!(clock.expired().await, Expired::Idle);
        assert!(started.elapsed() < Duration::from_millis(300));
        // Bytes of a new request after the reclaim: the reclaim is void.
        let clock = Clock::new(HEAD, Duration::from_secs(3600));
        clock.read(b"GET / HTTP/1.1\r\n\r\n");
        drop(clock.request());
        assert!(clock.reclaim());
        clock.read(b"GET");
        assert_eq!(clock.expired().await, Expired::Head);
    }

    /// The task already waits on a far idle deadline when a request's first bytes bring
    /// a nearer head deadline: the head deadline holds all the same; and a deadline that
    /// appears while the task waits (a request's end) is the one that fires.
    #[tokio::test]
    async fn a_head_deadline_nearer_than_the_idle_one_in_wait_holds() {
        let clock = Clock::new(HEAD, Duration::from_secs(3600));
        clock.read(b"GET / HTTP/1.1\r\n\r\n");
        drop(clock.request());
        let bytes_later = async {
            tokio::time::sleep(HEAD / 2).await;
            clock.read(b"GET");
            Instant::now()
        };
        let (expired, head_since) = tokio::join!(within(clock.expired()), bytes_later);
        assert_eq!(expired, Expired::Head);
        about(head_since.elapsed(), HEAD);
        // And a busy connection whose request ends: its idle deadline, in wait already.
        let clock = Clock::new(HEAD, IDLE);
        clock.read(b"GET / HTTP/1.1\r\n\r\n");
        let request = clock.request();
        let ends_later = async {
            tokio::time::sleep(HEAD * 2).await;
            drop(request);
            Instant::now()
        };
        let (expired, idle_since) = tokio::join!(within(clock.expired()), ends_later);
        assert_eq!(expired, Expired::Idle);
        about(idle_since.elapsed(), IDLE);
    }

    /// Shutdown reaches a connection through its clock, busy or not, and at once.
    #[tokio::test]
    async fn a_stop_ends_the_wait_at_once_even_with_a_request_in_progress() {
        let clock = Clock::new(Duration::from_secs(3600), Duration::from_secs(3600));
        clock.read(b"POST /mcp HTTP/1.1\r\n");
        let _request = clock.request();
        let started = Instant::now();
        let stop_later = async {
            tokio::time::sleep(HEAD).await;
            clock.stop();
        };
        let (expired, ()) = tokio::join!(within(clock.expired()), stop_later);
        assert_eq!(expired, Expired::Stop);
        about(started.elapsed(), HEAD);
        // And a wait that starts after the stop ends on its first poll.
        assert_eq!(clock.expired().await, Expired::Stop);
    }

    #[tokio::test]
    async fn http2_frames_between_streams_are_not_heads() {
        let clock = Clock::new(HEAD, IDLE);
        clock.read(&H2_PREFACE[..10]);
        assert!(!clock.is_http2());
        clock.read(&H2_PREFACE[10..]);
        assert!(clock.is_http2());
        let idle_since = Instant::now();
        tokio::time::sleep(IDLE / 2).await;
        // A ping: still idle since the preface, and no head deadline.
        clock.read(b"\0\0\x08\x06\0\0\0\0\0");
        assert_eq!(clock.expired().await, Expired::Idle);
        about(idle_since.elapsed(), IDLE);
        // Two streams: busy until both ended.
        let (a, b) = (clock.request(), clock.request());
        drop(a);
        let waited = tokio::time::timeout(IDLE + HEAD, clock.expired()).await;
        assert!(waited.is_err());
        drop(b);
        assert_eq!(clock.expired().await, Expired::Idle);
    }
}
