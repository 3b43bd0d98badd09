//! 2025-era sessions over stdio. A 2025 client opens a session with `initialize` and
//! names it in every later request (`Mcp-Session-Id`); a stdio server fixes its era on
//! its first request and keeps the session's state in its process, so each session gets
//! a child of its own, started for its `initialize` and stopped when the session ends:
//! its client sends `DELETE`, it stays idle for `upstream_command.session_idle_ms` (no
//! request in progress, no stream open), its child exits, or the sidecar stops. The
//! shared child keeps serving 2026-07-28 requests.
//!
//! Invariant: a session id is 128 random bits and names its session only for the caller
//! that opened it (its principal, or without one the owner the fair shares use): for
//! anyone else it names nothing (404). At most `max_sessions` are open, at most its share
//! per caller; a session's child is stopped (SIGTERM, then SIGKILL after a grace) when
//! the session ends, and no ended session's child is left running.

use super::child::Spec;
use super::metrics::{Busy, SessionEnd, StdioMetrics};
use super::outbox::Outbox;
use super::{BridgeShared, Supervised, ids};
use crate::budget::MemoryBudget;
use crate::config::Config;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

/// The header that names a session (its name as the 2025-11-25 transport spells it).
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// How long a session's child has after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// One session: its child, its client's events, and whether it is in use.
pub(crate) struct Session {
    pub(crate) id: String,
    /// The caller that opened it ([`Sessions::find`] compares in constant time).
    owner: String,
    child: Supervised,
    pub(crate) outbox: Arc<Outbox>,
    /// Requests of it in progress ([`InUse`]).
    in_use: AtomicUsize,
    /// When it was last used (a request ended, or it opened).
    last_used: Mutex<Instant>,
}

impl Session {
    /// The bridge to its child.
    pub(crate) fn bridge(&self) -> &Arc<BridgeShared> {
        &self.child.shared
    }

    /// Mark a request of it in progress until the guard is dropped.
    pub(crate) fn in_use(self: &Arc<Self>) -> InUse {
        self.in_use.fetch_add(1, Ordering::AcqRel);
        InUse(self.clone())
    }

    fn last_used(&self) -> MutexGuard<'_, Instant> {
        self.last_used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why it should end now, if it should: its child exited, or it has been idle
    /// (nothing in progress, no stream open) for `idle`.
    fn ending(&self, idle: Duration) -> Option<SessionEnd> {
        if self.bridge().is_stopped() {
            return Some(SessionEnd::Exited);
        }
        let busy = self.in_use.load(Ordering::Acquire) > 0 || self.outbox.has_stream();
        (!busy && self.last_used().elapsed() >= idle).then_some(SessionEnd::Idle)
    }
}

/// A request of a session in progress: the session is not idle while it is held.
pub(crate) struct InUse(Arc<Session>);

impl Drop for InUse {
    fn drop(&mut self) {
        *self.0.last_used() = Instant::now();
        self.0.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open sessions and what a new one needs.
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Arc<Session>>>,
    /// What each session's child is started from.
    config: Config,
    spec: Spec,
    metrics: Arc<StdioMetrics>,
    budget: Arc<MemoryBudget>,
    /// The gated route's mark, the same for every child's bridge.
    mark: http::HeaderValue,
    max: usize,
    share: usize,
    idle: Duration,
}

impl Sessions {
    pub(crate) fn new(
        config: &Config,
        metrics: Arc<StdioMetrics>,
        budget: Arc<MemoryBudget>,
        mark: http::HeaderValue,
    ) -> Self {
        let command = &config.upstream_command;
        Self {
            open: Mutex::new(HashMap::new()),
            spec: Spec::from_config(config).for_session(),
            config: config.clone(),
            metrics,
            budget,
            mark,
            max: command.max_sessions,
            share: config.upstream_command_session_share(),
            idle: Duration::from_millis(command.session_idle_ms),
        }
    }

    fn table(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        // Each change is one map operation: a panic cannot leave it half-changed.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Open a session for `owner`, its child started; or why not.
    pub(crate) fn open(&self, owner: &str) -> Result<Arc<Session>, Busy> {
        let mut table = self.table();
        if table.len() >= self.max {
            return Err(Busy::SessionLimit);
        }
        let held = table.values().filter(|s| s.owner == owner).count();
        if held >= self.share {
            return Err(Busy::SessionShare);
        }
        let outbox = Outbox::new(self.budget.clone());
        let (shared, queued) = BridgeShared::new(
            &self.config,
            self.metrics.clone(),
            self.budget.clone(),
            self.mark.clone(),
            None,
            Some(outbox.clone()),
        );
        let session = Arc::new(Session {
            id: ids::fresh(),
            owner: owner.to_owned(),
            child: Supervised::spawn(shared, self.spec.clone(), queued),
            outbox,
            in_use: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        });
        table.insert(session.id.clone(), session.clone());
        self.metrics.sessions_open(table.len());
        Ok(session)
    }

    /// The open session `id` names for `owner`: `None` when it names none, or another
    /// caller's.
    pub(crate) fn find(&self, id: &str, owner: &str) -> Option<Arc<Session>> {
        let session = self.table().get(id).cloned()?;
        let same = session.owner.as_bytes().ct_eq(owner.as_bytes());
        (bool::from(same) && !session.bridge().is_stopped()).then_some(session)
    }

    /// End the session `id` names for `owner` (its client's `DELETE`): whether it did.
    pub(crate) async fn end(&self, id: &str, owner: &str) -> bool {
        let Some(session) = self.find(id, owner) else {
            return false;
        };
        self.close(&session, SessionEnd::Deleted).await;
        true
    }

    /// End every session that should end now (idle, or its child gone).
    pub(crate) async fn reap(&self) {
        let ending: Vec<_> = self
            .table()
            .values()
            .filter_map(|s| s.ending(self.idle).map(|reason| (s.clone(), reason)))
            .collect();
        for (session, reason) in ending {
            self.close(&session, reason).await;
        }
    }

    /// How often [`Sessions::reap`] runs: a quarter of the idle timeout, within bounds.
    pub(crate) fn reap_every(&self) -> Duration {
        (self.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// The sidecar stops: every session ends, its child stopped by `deadline`.
    pub(crate) async fn stop_all(&self, deadline: Instant) {
        let all: Vec<_> = self.table().drain().map(|(_, s)| s).collect();
        self.metrics.sessions_open(0);
        // Every child told first, then each awaited: all share the one deadline.
        for session in &all {
            self.metrics.session_ended(SessionEnd::Shutdown);
            session.outbox.close();
            session.child.signal(deadline);
        }
        for session in &all {
            session.child.join().await;
        }
    }

    /// End one session: gone from the table first (no new request reaches it), then its
    /// stream ends and its child is stopped.
    async fn close(&self, session: &Arc<Session>, reason: SessionEnd) {
        let removed = {
            let mut table = self.table();
            let removed = table.remove(&session.id).is_some();
            self.metrics.sessions_open(table.len());
            removed
        };
        if !removed {
            return;
        }
        self.metrics.session_ended(reason);
        tracing::info!(
            reason = reason.as_str(),
            "stdio session ended; stopping its child"
        );
        session.outbox.close();
        session.child.stop(Instant::now() + STOP_GRACE).await;
    }
}

/// Run [`Sessions::reap`] until the bridge stops.
pub(crate) async fn reap(sessions: Arc<Sessions>) {
    let every = sessions.reap_every();
    loop {
        tokio::time::sleep(every).await;
        sessions.reap().await;
    }
}
