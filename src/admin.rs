//! The admin listener: `/metrics` (Prometheus text format 0.0.4), `/healthz` (the process
//! serves), `/readyz` (the sidecar takes traffic: keys loaded, not draining, a
//! fail-closed single-use store reachable, and the [`health`](crate::health) checks: the
//! upstream reachable, the key ring not stale; the body names each failing check), and
//! `POST /admin/revoke` (stop every flow of one caller now). A full memory store shows
//! in `store_fill_ratio` and in `/readyz`'s body, but does not fail readiness: whoever
//! filled it could otherwise take every replica out of service.
//!
//! Invariant: the admin port never proxies and never shows a token, a key or a state;
//! a request whose `Host` the admin listener does not answer to gets 421 before anything
//! else (the DNS-rebinding defence of the proxy port, with the admin port's own default:
//! see [`HostPolicy::for_admin`]); its one mutating endpoint is refused unless
//! `admin.token_file` is configured, and then answers only a request carrying the secret
//! the file holds now (compared in constant time; the file is watched, and a new secret
//! replaces the old one, which is refused from then on).

use crate::body::{ProxyBody, full};
use crate::error::{RefusalMetrics, Resource};
use crate::health::Checks;
use crate::policy::revocation::Revocations;
use crate::proxy::ingress::HostPolicy;
use crate::registry::Registry;
use crate::store::Store;
use arc_swap::ArcSwap;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use prometheus::IntCounter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// What the admin listener serves from.
pub(crate) struct Admin {
    /// What `/metrics` renders.
    pub(crate) registry: Arc<Registry>,
    /// The admin listener's own family.
    pub(crate) metrics: Arc<AdminMetrics>,
    /// Where the store's fill gauges are set.
    pub(crate) refusals: Arc<RefusalMetrics>,
    pub(crate) readiness: Arc<Readiness>,
    pub(crate) revocations: Arc<Revocations>,
    /// The bearer secret of the mutating endpoints, as `admin.token_file` holds it now;
    /// `None`: they are refused.
    pub(crate) token: Option<Token>,
    /// Which `Host` values this listener answers to (live with `allowed_hosts`).
    pub(crate) hosts: ArcSwap<HostPolicy>,
    /// The shared store, for how full it is.
    pub(crate) store: Arc<Store>,
}

/// The admin listener's refusals for a foreign `Host`.
pub(crate) struct AdminMetrics {
    misdirected: IntCounter,
}

impl AdminMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            misdirected: registry.counter(
                "admin_requests_misdirected_total",
                "Admin listener requests answered 421 because their Host is not one the admin listener answers to (a DNS-rebinding defence).",
            ),
        }
    }

    /// An admin request was refused with 421 for its `Host`.
    pub(crate) fn admin_misdirected(&self) {
        self.misdirected.inc();
    }
}

impl Admin {
    /// Set the fill gauges from the store; the bounds it has reached.
    fn observe_store(&self) -> Vec<&'static str> {
        let Some(usage) = self.store.usage() else {
            return Vec::new();
        };
        self.refusals.store_fill(
            Resource::SingleUse,
            usage.entries as u64,
            usage.max_entries as u64,
        );
        self.refusals.store_fill(
            Resource::Idempotency,
            usage.record_bytes,
            usage.max_record_bytes,
        );
        usage.full()
    }
}

/// The admin bearer secret in use, replaced when `admin.token_file` changes.
pub(crate) type Token = ArcSwap<Zeroizing<String>>;

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
    pub(crate) fn set(&self, ready: bool) {
        self.serving.store(ready, Ordering::SeqCst);
    }

    pub(crate) fn set_store_down(&self, down: bool) {
        self.store_down.store(down, Ordering::SeqCst);
    }

    /// Install the outside checks (once; later calls are ignored).
    pub(crate) fn set_checks(&self, checks: Checks) {
        let _ = self.checks.set(checks);
    }

    /// Re-run the outside checks that are due (a probe at most once a second).
    pub(crate) async fn refresh(&self) {
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

pub(crate) async fn handle(admin: Arc<Admin>, request: Request<Incoming>) -> Response<ProxyBody> {
    // First, as on the proxy port: a rebound name must not read `/metrics` (or probe
    // `/admin/revoke`) from a browser.
    if admin
        .hosts
        .load()
        .check_head(request.uri(), request.headers())
        .is_err()
    {
        admin.metrics.admin_misdirected();
        return text(StatusCode::MISDIRECTED_REQUEST, "misdirected request\n");
    }
    if request.uri().path() == "/admin/revoke" {
        return revoke(&admin, request).await;
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    let (registry, readiness) = (&admin.registry, &admin.readiness);
    match request.uri().path() {
        "/metrics" => {
            admin.observe_store();
            let mut response = text(StatusCode::OK, &registry.render());
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
            [] => match admin.observe_store().as_slice() {
                [] => text(StatusCode::OK, "ready\n"),
                // Still ready: new entries of every caller are refused with 503 until some
                // expire, but serving goes on and a restart would not help.
                full => text(
                    StatusCode::OK,
                    &format!("ready (memory store full: {})\n", full.join(", ")),
                ),
            },
            failing => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("not ready: {}\n", failing.join(", ")),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `POST /admin/revoke` with `{"principal": "..."}`: refuse every token of that
/// principal minted before now, on every replica sharing the store.
async fn revoke(admin: &Admin, request: Request<Incoming>) -> Response<ProxyBody> {
    let Some(token) = &admin.token else {
        return text(
            StatusCode::FORBIDDEN,
            "admin.token_file is not configured: revocation over HTTP is off\n",
        );
    };
    if request.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    let secret = token.load();
    if !bool::from(presented.ct_eq(secret.as_bytes())) {
        let mut response = text(StatusCode::UNAUTHORIZED, "unauthorized\n");
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return response;
    }
    let Ok(body) = Limited::new(request.into_body(), 64 * 1024).collect().await else {
        return text(StatusCode::BAD_REQUEST, "body unreadable or over 64 KiB\n");
    };
    let principal = serde_json::from_slice::<serde_json::Value>(&body.to_bytes())
        .ok()
        .and_then(|v| v.get("principal")?.as_str().map(str::to_owned))
        .filter(|p| !p.is_empty());
    let Some(principal) = principal else {
        return text(
            StatusCode::BAD_REQUEST,
            "body must be {\"principal\": \"<non-empty string>\"}\n",
        );
    };
    match admin.revocations.revoke(&principal).await {
        Ok(at) => {
            // The principal itself stays out of the log (the caller knows whom it named).
            tracing::warn!(not_before = at, "principal revoked over the admin endpoint");
            text(
                StatusCode::OK,
                &format!("{{\"revoked\":true,\"notBefore\":{at}}}\n"),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "revocation could not be recorded");
            // An unconfirmed record refuses on the primary, but a failover could lose it:
            // the operator is told to try again, never that it holds.
            let said = match e {
                crate::store::StoreError::Unconfirmed => {
                    "store did not confirm on a replica: not revoked; retry\n"
                }
                _ => "store unavailable: not revoked\n",
            };
            text(StatusCode::SERVICE_UNAVAILABLE, said)
        }
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
