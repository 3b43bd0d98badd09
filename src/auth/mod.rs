//! Who is calling: the principal a `requestState` token is bound to, from the one
//! configured source: nothing, a header a trusted front proxy sets ([`header`]), a
//! verified JWT access token ([`jwt`], keys from [`jwks`]), or the verified client
//! certificate of the TLS connection ([`crate::tls`]).
//!
//! Invariant: an identity is taken only from the configured source and is unambiguous;
//! a request whose identity cannot be established is refused, never treated as
//! anonymous (with `header`, a request without the header is unbound; with `jwt` and
//! `mtls` every request must carry an identity). What the upstream must not see of the
//! identity is removed before forwarding. What a connection recalls of its last caller
//! ([`Recall`]: the owner its shares went to, its verified bearer token's entry) serves a
//! request only when that request's own facts are the same, compared whole.

pub(crate) mod header;
pub(crate) mod jwks;
pub(crate) mod jwt;
mod metrics;
mod verified;

pub use metrics::{AuthMetrics, Verification};

// The reasons live with the errors, below this floor (`error` names them in
// `ProxyError::Unauthorized`); `auth::AuthFailure` still names them.
use crate::error::AuthFailure;

use crate::error::ProxyError;
use crate::store::{LastOwner, Owner};
use crate::tls::peer::PeerIdentity;
use http::{HeaderMap, HeaderName, header::AUTHORIZATION};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::OnceLock;
pub(crate) use verified::LastBearer;

/// Who sends a request and where: what the phases after the gate key their decisions on
/// (a state's principal binding, a handle's owner, idempotency records, the shares of
/// the shared stores). Held once per request, by the proxy's exchange; the principal is
/// shared (not copied) with what outlives the request's phases (the audit record, a
/// stream's sealer).
pub(crate) struct Caller {
    /// The request's path and query: one upstream may route tenants by either.
    path: http::uri::PathAndQuery,
    /// The identified principal, if any.
    principal: Option<Arc<str>>,
    /// The client's address, which owns the request's shares without a principal.
    peer: Option<IpAddr>,
    /// Computed when a share is first spent: most requests spend none.
    owner: OnceLock<Owner>,
    /// What the connection's last request was identified by.
    recall: Arc<Recall>,
}

impl Caller {
    pub(crate) fn new(
        path: http::uri::PathAndQuery,
        principal: Option<Arc<str>>,
        peer: Option<IpAddr>,
        recall: Arc<Recall>,
    ) -> Self {
        Self {
            path,
            principal,
            peer,
            owner: OnceLock::new(),
            recall,
        }
    }

    /// The same request, identified: its `principal`, and behind a trusted proxy the
    /// `client` it reports in place of the peer.
    #[must_use]
    pub(crate) fn identified(&self, principal: Option<Arc<str>>, client: Option<IpAddr>) -> Self {
        Self::new(
            self.path.clone(),
            principal,
            client.or(self.peer),
            self.recall.clone(),
        )
    }

    /// The request's path and query, exactly as received.
    pub(crate) fn path(&self) -> &str {
        self.path.as_str()
    }

    /// The identified principal, if any.
    pub(crate) fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The principal, shared with what outlives the request's phases.
    pub(crate) fn shared_principal(&self) -> Option<Arc<str>> {
        self.principal.clone()
    }

    /// Whose share of the shared stores the request spends ([`Owner::of`], the
    /// connection's last when it is the same caller's).
    pub(crate) fn owner(&self) -> &Owner {
        self.owner
            .get_or_init(|| (self.recall.owner).of(self.principal.as_ref(), self.peer))
    }
}

/// What a connection's last request was identified by, kept for its next: the requests
/// of one connection are one caller's as a rule, and each of these costs a SHA-256
/// digest (and a token a cache lookup) to find again. Held by the connection's facts;
/// a request of another caller names its own and leaves them in place of the last.
#[derive(Debug, Default)]
pub(crate) struct Recall {
    /// The owner its last request's shares were charged to.
    pub(crate) owner: LastOwner,
    /// The last bearer token verified on it (or found verified), and that verification.
    pub(crate) bearer: LastBearer,
}

/// A configured identity source.
pub(crate) enum Identifier {
    /// Tokens are not bound to a caller.
    None,
    /// The identity a trusted front proxy put in `name` (e.g. `x-forwarded-user`).
    Header { name: HeaderName, forward: bool },
    /// The bearer token's `[client_id, iss, sub]`.
    Jwt(Arc<jwt::JwtVerifier>),
    /// The verified client certificate's identity ([`PeerIdentity`], set by the server).
    Mtls,
}

impl Identifier {
    /// The principal string of this request, or `None` when it is not bound to one.
    /// `from_trusted_peer`: the peer may set the identity header (`header` source).
    /// `identity`: the connection's verified client certificate; `recall`: what its
    /// last request was identified by.
    pub(crate) async fn identify(
        &self,
        parts: &http::request::Parts,
        identity: Option<&PeerIdentity>,
        recall: &Recall,
        from_trusted_peer: bool,
    ) -> Result<Option<Arc<str>>, ProxyError> {
        match self {
            Identifier::None => Ok(None),
            Identifier::Header { name, .. } => {
                header::identify(name, &parts.headers, from_trusted_peer)
            }
            Identifier::Jwt(verifier) => {
                match verifier.principal(&parts.headers, &recall.bearer).await {
                    Ok(principal) => Ok(Some(principal)),
                    Err(reason) => Err(ProxyError::Unauthorized {
                        reason,
                        challenge: Some(verifier.challenge().clone()),
                    }),
                }
            }
            Identifier::Mtls => match identity {
                Some(PeerIdentity(identity)) => Ok(Some(identity.clone())),
                // The handshake refuses clients without one; this is the belt to its braces.
                None => Err(ProxyError::Unauthorized {
                    reason: AuthFailure::ClientCertificate,
                    challenge: None,
                }),
            },
        }
    }

    /// Whether a request on a `passthrough_paths` entry needs an identity. Those paths
    /// are forwarded untouched and carry no state, and with `jwt` they are where a client
    /// without a token yet goes (an OAuth token endpoint, the resource metadata).
    pub(crate) fn required_on_passthrough(&self) -> bool {
        !matches!(self, Identifier::Jwt(_))
    }

    /// The identity header, when there is one.
    pub(crate) fn header(&self) -> Option<&HeaderName> {
        match self {
            Identifier::Header { name, .. } => Some(name),
            _ => None,
        }
    }

    /// Remove what the upstream must not see: the identity header (unless forwarded)
    /// and its look-alikes; `Authorization` when `forward_authorization` is off.
    pub(crate) fn strip(&self, headers: &mut HeaderMap) {
        match self {
            Identifier::Header { name, forward } => header::strip(name, *forward, headers),
            Identifier::Jwt(verifier) if !verifier.forwards_authorization() => {
                headers.remove(AUTHORIZATION);
            }
            _ => {}
        }
    }
}
