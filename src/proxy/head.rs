//! Steps 2 and 3 on every route, before any body is read ([`Proxy::admit_head`]), and
//! the bodyless route: a 2025-era GET stream or DELETE, forwarded with no body and its
//! answer still sealed ([`Proxy::forward_bodyless`]).

use super::Proxy;
use super::exchange::Exchange;
use super::failure::Failure;
use super::ingress;
use super::upstream;
use crate::body::ProxyBody;
use crate::error::ProxyError;
use crate::server::ConnectionFacts;
use bytes::Bytes;
use http::Response;
use hyper::body::{Body as _, Incoming};

impl Proxy {
    /// Steps 2 and 3, the same on every route and before the body is read: a foreign
    /// `Host`, ambiguous framing or an unidentified caller is refused outright; the
    /// client's hop-by-hop headers go, and the forwarding and identity headers are the
    /// sidecar's. The caller, when the route needs one, goes to the exchange.
    pub(super) async fn admit_head(
        &self,
        parts: &mut http::request::Parts,
        facts: &ConnectionFacts,
        passthrough: bool,
        exchange: &mut Exchange,
    ) -> Result<(), Failure> {
        self.hosts.load().check(parts)?;
        ingress::check_framing(parts, facts)?;
        // The client's hop-by-hop set goes now, named by its own `Connection` and before
        // anything of ours is added (forwarding, identity, idempotency): honoured later,
        // it deleted the sidecar's own headers. The framing was checked just above.
        upstream::strip_hop_by_hop_keeping(&mut parts.headers, &self.protected_headers);
        self.upstream.strip_internal(&mut parts.headers);
        let peer = Some(facts.peer);
        let trusted_peer = self.trusted_proxies.is_empty() || self.trusted_proxies.trusts(peer);
        let principal = if passthrough && !self.principal.required_on_passthrough() {
            None
        } else {
            (self.principal)
                .identify(parts, facts.identity.as_ref(), &facts.recall, trusted_peer)
                .await?
        };
        // Before the chain is extended with the peer: the owner of the request's shares,
        // behind a trusted proxy the client it reports.
        let forwarded = self
            .trusted_proxies
            .client(&parts.headers, peer)
            .filter(|client| peer.is_some_and(|p| p.0.ip().to_canonical() != *client));
        exchange.identified(principal, forwarded);
        self.principal.strip(&mut parts.headers);
        self.trusted_proxies.rewrite(
            &mut parts.headers,
            facts,
            self.scheme,
            self.principal.header(),
        );
        Ok(())
    }

    /// 2025-era GET streams and DELETEs pass through, streaming; a body on them would be
    /// forwarded unexamined, so there must be none. Their answers are still sealed (with
    /// no request to bind, a state in them is refused).
    pub(super) async fn forward_bodyless(
        &self,
        mut parts: http::request::Parts,
        body: Incoming,
        exchange: &mut Exchange,
    ) -> Result<Response<ProxyBody>, Failure> {
        if !body.is_end_stream() {
            return Err(ProxyError::BodyNotAllowed(parts.method).into());
        }
        self.upstream
            .mark_gated(&mut parts.headers, &exchange.caller);
        self.round_trip(parts, (crate::body::full(Bytes::new()), None), exchange)
            .await
    }
}
