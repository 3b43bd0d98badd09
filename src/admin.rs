//! The admin listener: `/metrics` (Prometheus text format 0.0.4), `/healthz` (the process
//! serves) and `/readyz` (the sidecar takes traffic: keys loaded, not draining, a
//! fail-closed single-use store reachable, and the [`health`](crate::health) checks: the
//! upstream reachable, the key ring not stale; the body names each failing check).
//!
//! Invariant: the admin port never proxies and never shows a token, a key or a state.

use crate::health::Checks;
use crate::metrics::Metrics;
use crate::proxy::upstream::{ProxyBody, full};
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Readiness: serving (flipped to false when draining starts so load balancers stop
/// sending), and every dependency check passing.
#[derive(Default)]
pub struct Readiness {
    serving: AtomicBool,
    /// A fail-closed single-use store does not answer.
    store_down: AtomicBool,
    /// The checks that look outside the process, set once at start.
    checks: OnceLock<Checks>,
}

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.serving.store(ready, Ordering::SeqCst);
    }

    pub fn set_store_down(&self, down: bool) {
        self.store_down.store(down, Ordering::SeqCst);
    }

    /// Install the outside checks (once; later calls are ignored).
    pub fn set_checks(&self, checks: Checks) {
        let _ = self.checks.set(checks);
    }

    /// Re-run the outside checks that are due (a probe at most once a second).
    pub async fn refresh(&self) {
        if let Some(checks) = self.checks.get() {
            checks.refresh().await;
        }
    }

    pub fn get(&self) -> bool {
        self.failing().is_empty()
    }

    /// The names of the checks that fail now.
    pub fn failing(&self) -> Vec<&'static str> {
        let mut failing = Vec::new();
        if !self.serving.load(Ordering::SeqCst) {
            failing.push("serving (starting or draining)");
        }
        if self.store_down.load(Ordering::SeqCst) {
            failing.push("single_use store unavailable");
        }
        if let Some(checks) = self.checks.get() {
            checks.failing(&mut failing);
        }
        failing
    }
}

pub async fn handle(
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    request: Request<Incoming>,
) -> Response<ProxyBody> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, &metrics.render());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match {
            readiness.refresh().await;
            readiness.failing()
        }
        .as_slice()
        {
            [] => text(StatusCode::OK, "ready\n"),
            failing => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("not ready: {}\n", failing.join(", ")),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &str) -> Response<ProxyBody> {
    let mut response = Response::new(full(body.to_owned()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
