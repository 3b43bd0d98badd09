//! Who-is-calling families: callers refused (`auth_failures_total{reason}`), reads of
//! the JWT key set (`jwks_refreshes_total{result}`) and the JWT access tokens accepted
//! (`jwt_accepted_total{verified_by}`: a signature check, or a token checked before).
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
    jwt_accepted: Family<IntCounterVec, Verification>,
}

/// How an accepted JWT access token was verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Its signature was checked now.
    Signature,
    /// The same token was checked before and that check still holds.
    Cache,
}

crate::registry::labels!(pub Verification {
    Signature => "signature",
    Cache => "cache",
});

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
            jwt_accepted: registry.counters(
                "jwt_accepted_total",
                "JWT access tokens accepted, by how: their signature checked now, or the same \
                 token checked before and still valid under the current keys.",
                "verified_by",
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

    pub(crate) fn jwt_accepted(&self, how: Verification) {
        self.jwt_accepted.at(how).inc();
    }

    pub fn jwt_accepted_count(&self, how: Verification) -> u64 {
        self.jwt_accepted.at(how).get()
    }
}
