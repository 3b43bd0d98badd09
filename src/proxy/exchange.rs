//! One request's facts, held once from [`super::Proxy::handle`] to its response: the
//! one context every phase takes as `&mut` (as pingora's `CTX`). Each fact is written by
//! the phase that learns it and read by the phases after it; none is copied between
//! phases, and the audit [`Record`] inside it is only told, never read back.
//!
//! Invariant: the response phase gets only what it needs ([`Exchange::for_response`]):
//! nothing of the request body is held while the upstream works, and a spent single-use
//! state is given back by its one owner ([`super::call`]) only while the request was not
//! handed to the upstream.

use super::outbound::Asked;
use super::response::SealContext;
use crate::auth::{Caller, Recall};
use crate::jsonrpc::Id;
use crate::mcp::MethodClass;
use crate::policy::capabilities::Declared;
use crate::policy::single_use::Claim;
use crate::telemetry::audit::{self, Record};
use crate::token::{Flow, RequestBinding};
use crate::tools::Answering;
use http::Uri;
use http::uri::PathAndQuery;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// One request, as the phases learn it.
pub(crate) struct Exchange {
    /// The audit record: written once, when the response body is dropped.
    pub(crate) record: Record,
    /// Who sends it and where: the peer on the request's path until step 3 identifies
    /// the caller (and, behind a trusted proxy, the client it reports).
    pub(crate) caller: Caller,
    /// The JSON-RPC id (step 4), answered with every refusal.
    /// Shared with the response phase ([`Exchange::for_response`]), not copied.
    pub(crate) id: Option<Arc<Id>>,
    /// The method as logs show it (escaped, bounded), shared with the audit record.
    method: Option<Arc<str>>,
    /// What the answer may be, which decides what a 2xx body may hold.
    pub(crate) asked: Asked,
    /// The single-use state this request spent (step 5).
    pub(crate) spent: Option<Claim>,
    /// Whether the request was handed to the upstream (step 7): a spent state is given
    /// back only before, or when not a byte of it was written.
    pub(crate) handed_over: bool,
    /// The request's binding (step 5): a new state is sealed to it.
    pub(crate) binding: Option<RequestBinding>,
    /// The client capabilities it declared, checked against the next round's questions.
    pub(crate) capabilities: Option<Declared>,
    /// Where its token stood in the flow (step 5; `None`: a first call).
    pub(crate) flow: Option<Flow>,
    /// What the tool features do to the answer (step 6).
    pub(crate) answering: Answering,
}

impl Exchange {
    /// A request that arrived now, from `peer` (on a connection that recalls its last
    /// request's caller: `recall`), for `uri`, with these headers.
    pub(crate) fn begin(
        peer: Option<SocketAddr>,
        recall: Arc<Recall>,
        uri: &Uri,
        headers: &http::HeaderMap,
    ) -> Self {
        // The path and the query: one upstream may route tenants by either.
        let path = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Self {
            record: Record::begin(peer, headers),
            caller: Caller::new(path, None, peer.map(|p| p.ip()), recall),
            id: None,
            method: None,
            asked: Asked::Other,
            spent: None,
            handed_over: false,
            binding: None,
            capabilities: None,
            flow: None,
            answering: Answering::default(),
        }
    }

    /// Step 3 identified the caller as `principal` and, behind a trusted proxy, found
    /// the `client` it reports (when it is not the peer).
    pub(crate) fn identified(&mut self, principal: Option<Arc<str>>, client: Option<IpAddr>) {
        self.record.set_principal(principal.clone());
        if let Some(client) = client {
            self.record.set_forwarded_client(client);
        }
        self.caller = self.caller.identified(principal, client);
    }

    /// The route's class, and what its answer may be (refined by [`Exchange::named`]
    /// once a body names its method).
    pub(crate) fn routed(&mut self, (class, asked): (MethodClass, Asked)) {
        self.record.set_class(class);
        self.asked = asked;
    }

    /// Step 4 read the message's id, and for a call its method, target and `params`.
    pub(crate) fn named(
        &mut self,
        id: Option<Id>,
        call: Option<(&str, &crate::jsonrpc::Params<'_>)>,
    ) {
        let id = id.map(Arc::new);
        if let Some((method, params)) = call {
            let logged = audit::logged_method(method);
            self.record
                .set_call(method, logged.clone(), id.clone(), params);
            self.method = Some(logged);
        }
        self.asked = if id.is_some() {
            Asked::Call
        } else {
            Asked::Notification
        };
        self.id = id;
    }

    /// What the response phase needs, and only that: taken before the upstream is
    /// awaited, so the response (a stream, for minutes) holds no more of the request.
    pub(crate) fn for_response(&mut self) -> SealContext {
        SealContext::new(
            self.id.clone(),
            self.method.clone(),
            self.binding.take(),
            self.caller.shared_principal(),
        )
        .with_flow(self.capabilities.take(), self.flow.take())
        .with_tools(std::mem::take(&mut self.answering))
    }

    /// The audit record, to be written when the response body is dropped.
    pub(crate) fn into_record(self) -> Record {
        self.record
    }
}
