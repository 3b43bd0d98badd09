//! The data path, phase by phase: steps 2 to 8 of the journey in the crate root, with
//! the same numbers. [`Proxy`] only wires the phases and calls them in this order; each
//! is a small type holding just what it needs, and none reaches back into the proxy.
//! What one request is travels with it as one [`exchange::Exchange`], made in
//! [`Proxy::handle`] and passed as `&mut` to every phase: each fact is held once,
//! written by the phase that learns it.
//!
//! 2. [`ingress`]: the `Host` is one we serve (`allowed_hosts`); the client's hop-by-hop
//!    headers are dropped (what its `Connection` names, never what the sidecar sets);
//!    forwarding headers are believed only from trusted proxies.
//! 3. [`crate::auth`]: who is calling (a header, a JWT, the client certificate).
//! 4. [`gate`]: a POSTed body is one strictly scanned JSON-RPC message, read within its
//!    size, time and [`crate::budget`] limits.
//! 5. [`state`]: a retry's `requestState` is opened and replaced by the upstream's
//!    plaintext; unasked `inputResponses` are dropped.
//! 6. [`crate::tools`]: a `tools/call`'s handle arguments are unwrapped and its
//!    idempotency key reserved, or the call is answered from the store ([`replay`]).
//! 7. [`leg`]: the message is forwarded as the sidecar writes it from the scanned
//!    tokens (the edits of steps 5 and 6 spliced in), to the [`upstream`] over its
//!    [`pool`] of connections.
//! 8. [`outbound`] and [`response`]: the answer is classified and every state in it sealed
//!    (the token spliced into the upstream's bytes),
//!    bound to the request of step 5 (its binding was computed at admission, so nothing
//!    of the request body is held while the upstream works), an issuing tool's handles
//!    sealed, and an idempotent call's answer recorded. The response phase takes only
//!    what it needs of the exchange ([`exchange::Exchange::for_response`]).
//!
//! Steps 2 and 3 run in [`head`] on every route (which also holds the bodyless route);
//! steps 4 to 8 of a POSTed message are wired in [`call`], which is also the one place a
//! spent single-use state is given back; every phase fails with a [`failure::Failure`],
//! which [`Proxy::handle`] turns into the response in one place.
//!
//! Invariant: [`Proxy::handle`] cannot fail; `Proxy::forward` can, and its error is
//! turned into a response in exactly one place, with the request id when the exchange
//! knows it.
//! `allowed_hosts` and `passthrough_paths` are live: a reload replaces them between two
//! requests, and each request reads them once.

mod call;
pub(crate) mod counted;
mod exchange;
mod failure;
pub(crate) mod gate;
mod head;
pub(crate) mod ingress;
mod leg;
mod metrics;
pub(crate) mod outbound;
pub(crate) mod pool;
pub(crate) mod replay;
pub(crate) mod response;
pub(crate) mod state;
pub(crate) mod upstream;

pub use metrics::Meters;
pub use metrics::PathMetrics;
pub(crate) use metrics::Route;
pub use metrics::SealFailure;
pub use metrics::SseEvent;
pub use metrics::StatusClass;

use crate::auth::Identifier;
use crate::body::{BoxError, ProxyBody};
use crate::budget::MemoryBudget;
use crate::config::hosts::EntryError;
use crate::mcp::MethodClass;
use crate::policy::flow::FlowLimits;
use crate::policy::revocation::Revocations;
use crate::policy::single_use::SingleUse;
use crate::server::ConnectionFacts;
use crate::token::StateSealer;
use crate::tools::{Handles, Idempotency, ToolFeatures};
use arc_swap::ArcSwap;
use exchange::Exchange;
use failure::Failure;
use gate::Gate;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use ingress::{HostPolicy, TrustedProxies};
use outbound::{Asked, Outbound};
use state::StateOpener;
use std::collections::HashSet;
use std::sync::Arc;
use upstream::Upstream;

/// The phases, wired once and shared by all connections.
pub(crate) struct Proxy {
    pub(crate) metrics: Meters,
    pub(crate) hosts: ArcSwap<HostPolicy>,
    pub(crate) trusted_proxies: TrustedProxies,
    /// The scheme clients reached us with, for `X-Forwarded-Proto`.
    scheme: &'static str,
    pub(crate) principal: Identifier,
    pub(crate) gate: Gate,
    pub(crate) opener: StateOpener,
    pub(crate) tools: ToolFeatures,
    pub(crate) upstream: Upstream,
    pub(crate) outbound: Outbound,
    pub(crate) passthrough_paths: ArcSwap<HashSet<String>>,
    /// What a client's `Connection` header cannot name away ([`ingress::protected_headers`]).
    pub(crate) protected_headers: Vec<http::HeaderName>,
}

/// What the proxy shares with the rest of the process: the single-use and revocation
/// stores (with the tool features and the admin port) and the memory budget (with a
/// stdio upstream's bridge).
pub(crate) struct Shared {
    pub(crate) single_use: Arc<SingleUse>,
    pub(crate) revocations: Arc<Revocations>,
    pub(crate) budget: Arc<MemoryBudget>,
}

impl Shared {
    pub(crate) fn new(
        single_use: Arc<SingleUse>,
        revocations: Arc<Revocations>,
        budget: Arc<MemoryBudget>,
    ) -> Self {
        Self {
            single_use,
            revocations,
            budget,
        }
    }
}

impl Proxy {
    /// Build the phases from a validated configuration.
    pub(crate) fn new(
        config: &crate::config::Config,
        sealer: Arc<StateSealer>,
        shared: Shared,
        metrics: Meters,
        principal: Identifier,
        upstream: Upstream,
    ) -> Result<Self, EntryError> {
        let Shared {
            single_use,
            revocations,
            budget,
        } = shared;
        let flow_limits = FlowLimits {
            max_rounds: config.mrtr.max_rounds,
            max_flow_seconds: config.mrtr.max_flow_seconds,
        };
        use std::time::Duration;
        let limits = &config.limits;
        let head_timeout = upstream.timeout();
        let idempotency_key = http::HeaderName::from_static(crate::tools::idempotency::HEADER);
        let protected_headers = ingress::protected_headers(
            principal
                .header()
                .cloned()
                .into_iter()
                .chain([idempotency_key]),
        );
        Ok(Self {
            hosts: ArcSwap::from_pointee(HostPolicy::new(
                config.allowed_hosts.as_deref(),
                config.listen,
            )?),
            trusted_proxies: TrustedProxies::new(&config.principal.trusted_proxies)?,
            scheme: if config.tls.enabled() {
                "https"
            } else {
                "http"
            },
            principal,
            gate: Gate::new(
                limits.clone(),
                budget.clone(),
                Duration::from_millis(config.timeouts.body_read_ms),
                upstream.transport_rules(),
            ),
            tools: ToolFeatures {
                handles: Handles::new(
                    &config.handles,
                    sealer.clone(),
                    metrics.tools.clone(),
                    metrics.keys.clone(),
                    revocations.clone(),
                    single_use.clone(),
                ),
                idempotency: Idempotency::new(
                    &config.idempotency,
                    config.state.audience.clone(),
                    single_use.shared_store(),
                    metrics.tools.clone(),
                    metrics.refusals.clone(),
                ),
            },
            opener: StateOpener {
                sealer: sealer.clone(),
                single_use: single_use.clone(),
                revocations,
                flow_limits,
                metrics: metrics.clone(),
                max_token_bytes: crate::token::max_token_bytes(limits.max_state_bytes),
            },
            upstream,
            outbound: Outbound::new(
                sealer,
                single_use,
                metrics.clone(),
                limits.clone(),
                budget,
                flow_limits,
                head_timeout,
            ),
            passthrough_paths: ArcSwap::from_pointee(
                config.passthrough_paths.iter().cloned().collect(),
            ),
            protected_headers,
            metrics,
        })
    }

    /// Apply a reloaded `allowed_hosts` (for `listen`, which does not change live).
    pub(crate) fn replace_hosts(&self, hosts: HostPolicy) {
        self.hosts.store(Arc::new(hosts));
    }

    /// Apply a reloaded `passthrough_paths`.
    pub(crate) fn replace_passthrough_paths(&self, paths: &[String]) {
        self.passthrough_paths
            .store(Arc::new(paths.iter().cloned().collect()));
    }

    /// Serve one request. Never fails: errors become JSON-RPC error responses here.
    pub(crate) async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        facts: ConnectionFacts,
    ) -> Response<ProxyBody> {
        // Held by the response body: streams count until they end, and a client that
        // goes away mid-request or mid-stream still decrements (and still leaves its
        // one record).
        let in_flight = self.metrics.path.in_flight_guard();
        let mut exchange = Exchange::begin(
            Some(facts.peer.0),
            facts.recall.clone(),
            request.uri(),
            request.headers(),
        );
        // Boxed apart: the forwarding future is most of a request's state, and the
        // handler's future, small now, is what the server moves and boxes per request.
        let response = match Box::pin(self.forward(request, &facts, &mut exchange)).await {
            Ok(response) => response,
            Err(failure) => self.refusal(failure, &mut exchange),
        };
        let record = &mut exchange.record;
        record.set_status(response.status());
        self.metrics.path.observe_request(
            record.class(),
            record.outcome(),
            record.started().elapsed(),
            record.upstream_wait(),
        );
        let record = exchange.into_record();
        response.map(|body| crate::body::holding(body, (in_flight, record)))
    }

    /// The one place a failure becomes a response, answering the request's id when the
    /// exchange knows it.
    fn refusal(
        &self,
        Failure {
            error,
            upstream_head,
        }: Failure,
        exchange: &mut Exchange,
    ) -> Response<ProxyBody> {
        let kind = error.kind();
        self.metrics.refusals.refused(kind);
        if let Some(reason) = error.auth_failure() {
            self.metrics.auth.auth_failed(reason);
        }
        // A refusal's one line is the request's audit record, written when it ends.
        exchange.record.failed(&error);
        if kind.is_upstream() {
            tracing::warn!(kind = kind.as_str(), error = %error, cause = ?std::error::Error::source(&error), "upstream failure");
        }
        let mut response = error
            .to_response(exchange.id.as_deref())
            .map(crate::body::full);
        if let Some(head) = upstream_head {
            outbound::keep_upstream_head(&mut response, head);
        }
        response
    }

    /// Where a request goes: every route through steps 2 and 3, then a passthrough
    /// untouched, a bodyless request ([`head`]) or a message ([`call`]).
    async fn forward(
        &self,
        request: Request<Incoming>,
        facts: &ConnectionFacts,
        exchange: &mut Exchange,
    ) -> Result<Response<ProxyBody>, Failure> {
        let (mut parts, body) = request.into_parts();
        let passthrough = self.passthrough_paths.load().contains(parts.uri.path());
        let gated = !passthrough && parts.method == Method::POST;
        exchange.routed(match parts.method {
            _ if passthrough => (MethodClass::Passthrough, Asked::Other),
            // Refined once the body names its method.
            Method::POST => (MethodClass::Other, Asked::Call),
            Method::GET => (MethodClass::GetStream, Asked::Stream),
            Method::DELETE => (MethodClass::Delete, Asked::Other),
            _ => (MethodClass::Passthrough, Asked::Other),
        });
        self.metrics.path.request(if gated {
            Route::Mcp
        } else {
            Route::Passthrough
        });
        self.admit_head(&mut parts, facts, passthrough, exchange)
            .await?;
        if passthrough {
            return self
                .send_untouched(parts, body.map_err(BoxError::from).boxed(), exchange)
                .await;
        }
        if !gated {
            return self.forward_bodyless(parts, body, exchange).await;
        }
        let result = self.forward_call(parts, body, exchange).await;
        if let Some(claim) = Self::unsent_claim(&result, exchange) {
            self.opener.release(claim).await;
        }
        result
    }
}

/// Every head of up to `lines` lines over `names` (a name repeated, in every order): what
/// the one-pass readers of a request's and an answer's head are held to.
#[cfg(test)]
fn every_head<'n>(names: &[&'n str], lines: usize) -> Vec<Vec<&'n str>> {
    let mut heads = vec![Vec::new()];
    let mut longest: Vec<Vec<&str>> = heads.clone();
    for _ in 0..lines {
        longest = (longest.iter())
            .flat_map(|head| names.iter().map(move |name| [&head[..], &[*name]].concat()))
            .collect();
        heads.extend(longest.iter().cloned());
    }
    heads
}
