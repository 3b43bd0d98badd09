//! The stdio upstream's families: the child's life (`stdio_child_up`,
//! `stdio_child_restarts_total`), its input queue (`stdio_queue_depth`,
//! `stdio_queue_full_total`), and what came out of it that no caller got
//! (`stdio_unmatched_lines_total{reason}`, `stdio_overlong_lines_total`,
//! `stdio_dropped_notifications_total{reason}`, `stdio_server_requests_refused_total`,
//! `stdio_stderr_lines_dropped_total`, `stdio_unreadable_answers_total`), the
//! cancellations sent for callers that left (`stdio_cancellations_total`), the requests
//! the bridge refused (`stdio_requests_refused_total{reason}`), the callers it cut off
//! (`stdio_callers_cut_off_total{reason}`), and 2025-era sessions (`stdio_sessions`,
//! `stdio_sessions_ended_total{reason}`).
//!
//! Invariant: as for every family, labels come from closed sets ([`Unmatched`],
//! [`Dropped`], [`BridgeRefusal`], [`CutOff`], [`SessionEnd`]) and every series exists at zero from the first
//! scrape (in every mode).

use crate::registry::{Family, Registry};
use prometheus::{IntCounter, IntCounterVec, IntGauge};

/// Why a line from the child's stdout reached no caller (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// Not a JSON object (a stray `print`, a banner).
    NotJson,
    /// An answer whose id is no open request's (it left, or it was never ours).
    UnknownId,
    /// A notification naming no open request (a log message: stdio has no per-request
    /// stream to tie it to; progress with an unknown token).
    Notification,
    /// A JSON object that is neither a request, an answer nor a notification.
    Invalid,
}

crate::registry::labels!(pub Unmatched {
    NotJson => "not_json",
    UnknownId => "unknown_id",
    Notification => "notification",
    Invalid => "invalid",
});

/// Why a notification that belonged to a caller was not delivered (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The caller did not accept `text/event-stream`: a JSON answer has no room for it.
    JsonCaller,
    /// A 2025-era session's event could not be held in `limits.max_buffered_bytes`.
    OverBudget,
}

crate::registry::labels!(pub Dropped {
    JsonCaller => "json_caller",
    OverBudget => "over_budget",
});

/// Why the bridge refused a request before it reached the child's queue (`reason`
/// label; a full queue has its own counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BridgeRefusal {
    /// It did not come through the proxy's gated route (no mark, or a wrong one): 403.
    Ungated,
    /// What it would hold could not be reserved in `limits.max_buffered_bytes`: 503.
    OverBudget,
    /// Its caller holds `upstream_command.queue_max_per_principal` requests already: 429.
    PrincipalShare,
    /// An `initialize` while `upstream_command.max_sessions` sessions are open: 503.
    SessionLimit,
    /// An `initialize` from a caller holding `max_sessions_per_principal` sessions: 429.
    SessionShare,
    /// A session id that names no open session of this caller's (ended, never issued,
    /// or another caller's): 404.
    UnknownSession,
}

/// A refusal that says "not now" (429 or 503 with `Retry-After`): the bridge's reasons
/// a caller may retry, as `serve::refused` answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    OverBudget,
    PrincipalShare,
    SessionLimit,
    SessionShare,
}

impl From<Busy> for BridgeRefusal {
    fn from(busy: Busy) -> Self {
        match busy {
            Busy::OverBudget => BridgeRefusal::OverBudget,
            Busy::PrincipalShare => BridgeRefusal::PrincipalShare,
            Busy::SessionLimit => BridgeRefusal::SessionLimit,
            Busy::SessionShare => BridgeRefusal::SessionShare,
        }
    }
}

crate::registry::labels!(pub BridgeRefusal {
    Ungated => "ungated",
    OverBudget => "over_budget",
    PrincipalShare => "principal_share",
    SessionLimit => "session_limit",
    SessionShare => "session_share",
    UnknownSession => "unknown_session",
});

/// Why a 2025-era session ended, its child stopped (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// Its client sent `DELETE`.
    Deleted,
    /// No request in progress and no stream open for `upstream_command.session_idle_ms`.
    Idle,
    /// Its child exited.
    Exited,
    /// The sidecar stopped.
    Shutdown,
}

crate::registry::labels!(pub SessionEnd {
    Deleted => "deleted",
    Idle => "idle",
    Exited => "exited",
    Shutdown => "shutdown",
});

/// Why a caller was cut off: its route failed, its stream ended with an error and the
/// child was told to stop (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutOff {
    /// It read too slowly: its buffered notifications reached the per-route bound.
    SlowReader,
    /// What came for it could not be reserved in `limits.max_buffered_bytes`.
    OverBudget,
}

crate::registry::labels!(pub CutOff {
    SlowReader => "slow_reader",
    OverBudget => "over_budget",
});

/// The bridge's families.
pub struct StdioMetrics {
    up: IntGauge,
    restarts: IntCounter,
    queue_depth: IntGauge,
    queue_full: IntCounter,
    unmatched: Family<IntCounterVec, Unmatched>,
    overlong: IntCounter,
    dropped: Family<IntCounterVec, Dropped>,
    server_requests: IntCounter,
    stderr_dropped: IntCounter,
    cancellations: IntCounter,
    unreadable: IntCounter,
    refused: Family<IntCounterVec, BridgeRefusal>,
    cut_off: Family<IntCounterVec, CutOff>,
    sessions: IntGauge,
    sessions_ended: Family<IntCounterVec, SessionEnd>,
}

impl StdioMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            up: registry.gauge(
                "stdio_child_up",
                "1 while the stdio upstream's child runs and has answered server/discover.",
            ),
            restarts: registry.counter(
                "stdio_child_restarts_total",
                "Times the stdio upstream's child was started again after it exited (or never answered server/discover).",
            ),
            queue_depth: registry.gauge(
                "stdio_queue_depth",
                "Messages waiting for the child's standard input (the callers' and the bridge's own), and requests waiting for the child.",
            ),
            queue_full: registry.counter(
                "stdio_queue_full_total",
                "Requests refused with 503 because upstream_command.queue_max messages were waiting.",
            ),
            unmatched: registry.counters(
                "stdio_unmatched_lines_total",
                "Lines on the child's stdout that belonged to no open request, by reason (counted and logged, never delivered).",
                "reason",
            ),
            overlong: registry.counter(
                "stdio_overlong_lines_total",
                "Lines on the child's stdout over limits.max_event_bytes, discarded unread (the request they answered gets an error when it can be named).",
            ),
            dropped: registry.counters(
                "stdio_dropped_notifications_total",
                "Notifications of an open request not delivered to its caller, by reason.",
                "reason",
            ),
            server_requests: registry.counter(
                "stdio_server_requests_refused_total",
                "Requests the child sent to the client (sampling, elicitation, roots, ping): answered with a JSON-RPC error, as 2026-07-28 has no server-to-client requests.",
            ),
            stderr_dropped: registry.counter(
                "stdio_stderr_lines_dropped_total",
                "Lines of the child's stderr not logged because it wrote more than the log takes per second.",
            ),
            cancellations: registry.counter(
                "stdio_cancellations_total",
                "notifications/cancelled sent to the child for callers that went away before the answer.",
            ),
            unreadable: registry.counter(
                "stdio_unreadable_answers_total",
                "Lines on the child's stdout that named an open request but could not be read (not JSON, a lone surrogate escape): the request failed at once.",
            ),
            refused: registry.counters(
                "stdio_requests_refused_total",
                "Requests the bridge refused before queueing them, by reason (ungated: not through the proxy's gated route; over_budget; principal_share; session_limit, session_share: an initialize past max_sessions or the caller's share; unknown_session).",
                "reason",
            ),
            cut_off: registry.counters(
                "stdio_callers_cut_off_total",
                "Callers whose request was failed because what came for them could not be held (slow_reader: too many notifications waiting; over_budget).",
                "reason",
            ),
            sessions: registry.gauge(
                "stdio_sessions",
                "2025-era sessions open, each with a child of its own.",
            ),
            sessions_ended: registry.counters(
                "stdio_sessions_ended_total",
                "2025-era sessions ended and their child stopped, by reason (deleted, idle, exited, shutdown).",
                "reason",
            ),
        }
    }

    pub(crate) fn set_up(&self, up: bool) {
        self.up.set(i64::from(up));
    }

    pub fn up(&self) -> bool {
        self.up.get() == 1
    }

    pub(crate) fn restarted(&self) {
        self.restarts.inc();
    }

    pub fn restarts(&self) -> u64 {
        self.restarts.get()
    }

    pub(crate) fn queue_depth(&self, depth: usize) {
        self.queue_depth
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    pub fn queue_depth_now(&self) -> u64 {
        u64::try_from(self.queue_depth.get()).unwrap_or(0)
    }

    pub(crate) fn queue_full(&self) {
        self.queue_full.inc();
    }

    pub fn queue_full_count(&self) -> u64 {
        self.queue_full.get()
    }

    pub(crate) fn unmatched(&self, reason: Unmatched) {
        self.unmatched.at(reason).inc();
    }

    pub fn unmatched_count(&self, reason: Unmatched) -> u64 {
        self.unmatched.at(reason).get()
    }

    pub(crate) fn overlong(&self) {
        self.overlong.inc();
    }

    pub fn overlong_count(&self) -> u64 {
        self.overlong.get()
    }

    pub(crate) fn dropped(&self, reason: Dropped) {
        self.dropped.at(reason).inc();
    }

    pub fn dropped_count(&self, reason: Dropped) -> u64 {
        self.dropped.at(reason).get()
    }

    pub(crate) fn server_request_refused(&self) {
        self.server_requests.inc();
    }

    pub fn server_requests_refused(&self) -> u64 {
        self.server_requests.get()
    }

    pub(crate) fn stderr_dropped(&self, lines: u64) {
        self.stderr_dropped.inc_by(lines);
    }

    pub fn stderr_dropped_count(&self) -> u64 {
        self.stderr_dropped.get()
    }

    pub(crate) fn cancelled(&self) {
        self.cancellations.inc();
    }

    pub fn cancellations(&self) -> u64 {
        self.cancellations.get()
    }

    pub(crate) fn unreadable(&self) {
        self.unreadable.inc();
    }

    pub(crate) fn refused(&self, reason: BridgeRefusal) {
        self.refused.at(reason).inc();
    }

    pub fn refused_count(&self, reason: BridgeRefusal) -> u64 {
        self.refused.at(reason).get()
    }

    pub(crate) fn cut_off(&self, reason: CutOff) {
        self.cut_off.at(reason).inc();
    }

    pub fn cut_off_count(&self, reason: CutOff) -> u64 {
        self.cut_off.at(reason).get()
    }

    pub(crate) fn sessions_open(&self, open: usize) {
        self.sessions.set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    pub fn sessions_now(&self) -> u64 {
        u64::try_from(self.sessions.get()).unwrap_or(0)
    }

    pub(crate) fn session_ended(&self, reason: SessionEnd) {
        self.sessions_ended.at(reason).inc();
    }

    pub fn sessions_ended_count(&self, reason: SessionEnd) -> u64 {
        self.sessions_ended.at(reason).get()
    }
}
