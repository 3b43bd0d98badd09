//! Who-is-calling families: callers refused (`auth_failures_total{reason}`) and reads of
//! the JWT key set (`jwks_refreshes_total{result}`).
//!
//! Invariant: as for every family, labels come from closed sets ([`AuthFailure`],
//! [`ReadResult`]) and every series exists at zero from the first scrape.

use crate::error::AuthFailure;
use crate::registry::{Family, ReadResult, Registry};
use prometheus::IntCounterVec;

/// Refused callers and key set reads.
pub struct AuthMetrics {
    failures: Family<IntCounterVec, AuthFailure>,
    jwks_refreshes: Family<IntCounterVec, ReadResult>,
}

impl AuthMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            failures: registry.counters(
                "auth_failures_total",
                "Requests refused because the caller could not be identified (jwt, mtls), by reason.",
                "reason",
            ),
            jwks_refreshes: registry.counters(
                "jwks_refreshes_total",
                "Reads of the JWT key set, by result (error keeps the last good keys).",
                "result",
            ),
        }
    }

    pub(crate) fn auth_failed(&self, reason: AuthFailure) {
        self.failures.at(reason).inc();
    }

    pub fn auth_failure_count(&self, reason: AuthFailure) -> u64 {
        self.failures.at(reason).get()
    }

    pub(crate) fn jwks_refresh(&self, ok: bool) {
        self.jwks_refreshes.at(ReadResult::of(ok)).inc();
    }

    pub fn jwks_refresh_count(&self, ok: bool) -> u64 {
        self.jwks_refreshes.at(ReadResult::of(ok)).get()
    }
}
