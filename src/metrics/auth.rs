//! The who-is-calling families: callers refused (`auth_failures_total{reason}`),
//! certificate and JWKS reloads, and TLS handshakes refused.
//!
//! Invariant: as for every family, labels come from closed sets ([`AuthFailure`],
//! `ok`/`error`) and every series exists at zero from the first scrape.

use super::Metrics;
use crate::error::AuthFailure;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// Who-is-calling outcomes: refused callers, certificate and JWKS reloads, handshakes.
pub(super) struct AuthMetrics {
    failures: IntCounterVec,
    tls_reloads: IntCounterVec,
    jwks_refreshes: IntCounterVec,
    handshake_failures: IntCounter,
}

impl AuthMetrics {
    pub(super) fn new(registry: &Registry) -> Self {
        let failures = IntCounterVec::new(
            Opts::new(
                "auth_failures_total",
                "Requests refused because the caller could not be identified (jwt, mtls), by reason.",
            ),
            &["reason"],
        )
        .unwrap();
        let tls_reloads = IntCounterVec::new(
            Opts::new(
                "tls_reloads_total",
                "Listener certificate, key or client CA changes seen, by result (error keeps the previous ones).",
            ),
            &["result"],
        )
        .unwrap();
        let jwks_refreshes = IntCounterVec::new(
            Opts::new(
                "jwks_refreshes_total",
                "Reads of the JWT key set, by result (error keeps the last good keys).",
            ),
            &["result"],
        )
        .unwrap();
        let handshake_failures = IntCounter::new(
            "tls_handshake_failures_total",
            "TLS handshakes refused or broken off (no or an invalid client certificate, timeouts).",
        )
        .unwrap();
        for reason in AuthFailure::ALL {
            failures.with_label_values(&[reason.as_str()]);
        }
        for result in ["ok", "error"] {
            tls_reloads.with_label_values(&[result]);
            jwks_refreshes.with_label_values(&[result]);
        }
        for collector in [
            Box::new(failures.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(tls_reloads.clone()),
            Box::new(jwks_refreshes.clone()),
            Box::new(handshake_failures.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Self {
            failures,
            tls_reloads,
            jwks_refreshes,
            handshake_failures,
        }
    }
}

fn outcome(ok: bool) -> &'static str {
    if ok { "ok" } else { "error" }
}

impl Metrics {
    pub fn auth_failed(&self, reason: AuthFailure) {
        self.auth
            .failures
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    pub fn auth_failure_count(&self, reason: AuthFailure) -> u64 {
        self.auth
            .failures
            .with_label_values(&[reason.as_str()])
            .get()
    }

    pub fn tls_reload(&self, ok: bool) {
        self.auth
            .tls_reloads
            .with_label_values(&[outcome(ok)])
            .inc();
    }

    pub fn tls_reload_count(&self, ok: bool) -> u64 {
        self.auth
            .tls_reloads
            .with_label_values(&[outcome(ok)])
            .get()
    }

    pub fn jwks_refresh(&self, ok: bool) {
        self.auth
            .jwks_refreshes
            .with_label_values(&[outcome(ok)])
            .inc();
    }

    pub fn jwks_refresh_count(&self, ok: bool) -> u64 {
        self.auth
            .jwks_refreshes
            .with_label_values(&[outcome(ok)])
            .get()
    }

    pub fn tls_handshake_failed(&self) {
        self.auth.handshake_failures.inc();
    }

    pub fn tls_handshake_failure_count(&self) -> u64 {
        self.auth.handshake_failures.get()
    }
}
