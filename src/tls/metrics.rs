//! The listener's TLS families: certificate, key and client CA reloads
//! (`tls_reloads_total{result}`) and handshakes refused (`tls_handshake_failures_total`).
//!
//! Invariant: as for every family, labels come from a closed set ([`ReadResult`]) and
//! every series exists at zero from the first scrape.

use crate::registry::{Family, ReadResult, Registry};
use prometheus::{IntCounter, IntCounterVec};

/// Reloads of the listener's files and refused handshakes.
pub struct TlsMetrics {
    reloads: Family<IntCounterVec, ReadResult>,
    handshake_failures: IntCounter,
}

impl TlsMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            reloads: registry.counters(
                "tls_reloads_total",
                "Listener certificate, key or client CA changes seen, by result (error keeps the previous ones).",
                "result",
            ),
            handshake_failures: registry.counter(
                "tls_handshake_failures_total",
                "TLS handshakes refused or broken off (no or an invalid client certificate, timeouts).",
            ),
        }
    }

    pub(crate) fn tls_reload(&self, ok: bool) {
        self.reloads.at(ReadResult::of(ok)).inc();
    }

    pub fn tls_reload_count(&self, ok: bool) -> u64 {
        self.reloads.at(ReadResult::of(ok)).get()
    }

    pub(crate) fn tls_handshake_failed(&self) {
        self.handshake_failures.inc();
    }

    pub fn tls_handshake_failure_count(&self) -> u64 {
        self.handshake_failures.get()
    }
}
