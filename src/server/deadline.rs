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
//!
//! And the wait for it is lazy: the task's timer is set for the deadline it last read
//! (`armed`; with none in force, for the nearest one a later change can bring), and
//! reads the deadline again when it fires. A change that brings no nearer deadline (a
//! request starts, ends, or the next one's bytes arrive on a keep-alive connection)
//! wakes nothing; only a nearer one (or a reclaim, or the stop) does. So the timer in
//! wait never fires after the deadline in force, and a request costs the connection's
//! task no wake-up of its own ([`OnItsWake`] keeps the task's other wake-ups from
//! polling the wait).

use super::framing::FramingScan;
use futures_util::task::AtomicWaker;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
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
    /// When the waiting task's timer fires ([`Clock::expired`]), once one waits.
    armed: Option<Instant>,
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
                armed: None,
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
            // The waiting task reads the deadline again when its timer fires: only a
            // deadline nearer than that must wake it now.
            let nearer = match (self.deadline_of(&state), state.armed) {
                (Some((at, _)), Some(armed)) => at < armed,
                // Nothing waits yet.
                (Some(_), None) => true,
                (None, _) => false,
            };
            drop(state);
            if nearer {
                self.changed.notify_waiters();
            }
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

    /// When the waiting task's timer is set for from now on, and what passed then: the
    /// deadline in force; with none (a request in progress), a look again at the
    /// nearest a deadline set from now on can be (a new head's, or an idle one's), so
    /// that no deadline a request brings later is nearer than the timer in wait.
    fn arm(&self) -> (Instant, Option<Expired>) {
        let mut state = self.state.lock().expect("not poisoned");
        let (at, expired) = match self.deadline_of(&state) {
            Some((at, expired)) => (at, Some(expired)),
            None => (Instant::now() + self.header_read.min(self.idle), None),
        };
        state.armed = Some(at);
        (at, expired)
    }

    fn deadline_of(&self, state: &ClockState) -> Option<(Instant, Expired)> {
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

    /// Resolves when the deadline in force has passed, or once the listener stops.
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
            let (at, expired) = self.arm();
            if let Some(expired) = expired
                && at <= Instant::now()
            {
                return expired;
            }
            // Fired or woken, the deadline in force is read again.
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = &mut changed => {}
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
    /// A connection's task polls the clock's wait through this: only when the wait's own
    /// waker was woken (its timer fired, a nearer deadline, the stop), and on its first poll.
    /// The task is woken for every read and write of the connection, and polling the wait
    /// each time (its notification, its timer) cost more than the deadlines themselves.
    /// (`futures_util::future::select` and `tokio::select!` poll every branch on each
    /// wake-up; the per-branch wakers of `FuturesUnordered` are this, for one future.)
    pub(crate) struct OnItsWake<F> {
        #[pin]
        future: F,
        flag: Arc<WakeFlag>,
        waker: Waker,
    }
}

/// Set by the wrapped future's waker, which then wakes the task.
struct WakeFlag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> OnItsWake<F> {
    pub(crate) fn new(future: F) -> Self {
        let flag = Arc::new(WakeFlag {
            // The first poll polls it.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            future,
            waker: Waker::from(flag.clone()),
            flag,
        }
    }
}

impl<F: Future> Future for OnItsWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Registered before the flag is read: a wake from now on wakes this task again.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.future.poll(&mut Context::from_waker(this.waker))
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
mod tests;
