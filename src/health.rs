//! Readiness checks that look outside the process: whether the upstream accepts a TCP
//! connection (or, for a stdio upstream, whether its child is up: [`ChildUp`]) (probed when `/readyz` asks, at most once a second, the answer cached in
//! between), and whether the key ring has gone stale (the key file has not been read back
//! valid for `readyz.max_key_age_seconds`, so the ring in use may no longer be the one
//! the operator deployed).
//!
//! Invariant: a probe never takes longer than its timeout, concurrent `/readyz` requests
//! share one attempt, and every failing check is named (in [`Checks::failing`]) for the
//! `/readyz` body; a check never sees a token, a key or a state.

use crate::config::UpstreamUrl;
use crate::token::KeyMetrics;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long one upstream probe's answer stands.
const PROBE_CACHE: Duration = Duration::from_secs(1);

/// Whether the upstream accepts connections.
pub(crate) struct UpstreamProbe {
    /// `host:port` of the upstream (never a path or userinfo).
    address: String,
    timeout: Duration,
    /// When the last attempt finished; locked across an attempt, so concurrent probes
    /// wait for it instead of connecting again.
    last: tokio::sync::Mutex<Option<Instant>>,
    down: AtomicBool,
}

impl UpstreamProbe {
    /// Probe the authority of `upstream`, within `timeout`.
    pub(crate) fn new(upstream: &UpstreamUrl, timeout: Duration) -> Self {
        let authority = upstream.authority();
        let port = authority.port_u16().unwrap_or(80);
        Self {
            address: format!("{}:{port}", authority.host()),
            timeout,
            last: tokio::sync::Mutex::new(None),
            down: AtomicBool::new(false),
        }
    }

    /// Connect (unless an answer less than a second old stands) and remember the verdict.
    pub(crate) async fn refresh(&self) {
        let mut last = self.last.lock().await;
        if last.is_some_and(|at| at.elapsed() < PROBE_CACHE) {
            return;
        }
        let connect = tokio::time::timeout(self.timeout, TcpStream::connect(&self.address));
        let down = !matches!(connect.await, Ok(Ok(_)));
        *last = Some(Instant::now());
        let was_down = self.down.swap(down, Ordering::SeqCst);
        if down && !was_down {
            tracing::warn!(upstream = %self.address, timeout_ms = self.timeout.as_millis() as u64, "upstream unreachable: not ready");
        } else if !down && was_down {
            tracing::info!(upstream = %self.address, "upstream reachable again");
        }
    }

    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }
}

/// Whether a stdio upstream's child process is running and has answered
/// `server/discover` (set by [`crate::stdio`], read by `/readyz`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ChildUp(Arc<AtomicBool>);

impl ChildUp {
    pub(crate) fn set(&self, up: bool) {
        self.0.store(up, Ordering::SeqCst);
    }

    pub(crate) fn is_up(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The checks configured under `[readyz]`.
#[derive(Default)]
pub(crate) struct Checks {
    pub(crate) upstream: Option<UpstreamProbe>,
    /// A stdio upstream's child (in place of the TCP probe).
    pub(crate) child: Option<ChildUp>,
    /// The ring is stale once the key file's age (from the metrics) passes this.
    pub(crate) key_age: Option<(Arc<KeyMetrics>, Duration)>,
}

impl Checks {
    /// Bring the probes up to date (bounded by the probe timeout).
    pub(crate) async fn refresh(&self) {
        if let Some(upstream) = &self.upstream {
            upstream.refresh().await;
        }
    }

    /// The names of the checks that failed at their last refresh.
    pub(crate) fn failing(&self, out: &mut Vec<&'static str>) {
        if self.upstream.as_ref().is_some_and(UpstreamProbe::is_down) {
            out.push("upstream unreachable");
        }
        if self.child.as_ref().is_some_and(|child| !child.is_up()) {
            out.push("upstream process not running (or not answering server/discover yet)");
        }
        if let Some((metrics, max)) = &self.key_age
            && metrics.key_ring_age().is_some_and(|age| age > *max)
        {
            out.push("key ring stale (key file unreadable or invalid; previous keys in use)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_upstream_probe_follows_the_listener_and_caches_a_second() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let uri = crate::config::parse_upstream(&format!("http://127.0.0.1:{port}/mcp")).unwrap();
        let probe = UpstreamProbe::new(&uri, Duration::from_millis(200));
        probe.refresh().await;
        assert!(!probe.is_down());
        drop(listener);
        // Cached: still up within the second.
        probe.refresh().await;
        assert!(!probe.is_down());
        *probe.last.lock().await = None;
        probe.refresh().await;
        assert!(probe.is_down());
        let mut failing = Vec::new();
        Checks {
            upstream: Some(probe),
            child: None,
            key_age: None,
        }
        .failing(&mut failing);
        assert_eq!(failing, ["upstream unreachable"]);
    }

    #[test]
    fn a_stale_ring_is_named() {
        let metrics = Arc::new(KeyMetrics::register(&crate::registry::Registry::new()));
        let checks = Checks {
            upstream: None,
            child: None,
            key_age: Some((metrics.clone(), Duration::ZERO)),
        };
        let mut failing = Vec::new();
        checks.failing(&mut failing);
        assert!(failing.is_empty(), "no key file, no age");
        metrics.key_file_confirmed();
        std::thread::sleep(Duration::from_millis(5));
        checks.failing(&mut failing);
        assert_eq!(failing.len(), 1);
        assert!(failing[0].starts_with("key ring stale"));
    }
}
