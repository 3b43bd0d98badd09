//! Steps 4 to 8 for a POSTed JSON-RPC message: the gate, then for a call its state and
//! tool features (steps 5 and 6), then the upstream and the answer, or a stored answer
//! for a repeated write without the upstream.
//!
//! Invariant: a single-use state this request spent is given back in one place
//! ([`Proxy::forward_message`]), and only when nothing of the request was handed to the
//! upstream, or connecting failed before a byte of it was written.

use super::failure::Failure;
use super::ingress::ClientAddr;
use super::outbound::Asked;
use super::response::SealContext;
use super::{Proxy, replay};
use crate::auth::Caller;
use crate::body::ProxyBody;
use crate::jsonrpc::{Id, Params, ParamsField};
use crate::policy::capabilities;
use crate::policy::single_use::Claim;
use crate::server::Peer;
use crate::telemetry::audit::Record;
use crate::token::RequestBinding;
use crate::tools::Inbound;
use http::Response;
use http::header::{self, HeaderValue};
use hyper::body::Incoming;

/// One call as steps 5 and 6 read it: its method and id, who sends it and where.
struct Call<'a> {
    method: &'a str,
    caller: &'a Caller<'a>,
    id: &'a Option<Id>,
}

/// A single-use state this request spent, and whether the request was handed to the
/// upstream: what decides, in one place, whether it is given back.
#[derive(Default)]
struct Spent {
    claim: Option<Claim>,
    handed_over: bool,
}

/// What steps 5 and 6 decided for the response phase of a call.
#[derive(Default)]
struct Prepared {
    /// The request's binding: a new state is sealed to it.
    binding: Option<RequestBinding>,
    /// The client capabilities it declared, checked against the next round's questions.
    capabilities: Option<serde_json::Value>,
    /// Where its token stood in the flow.
    flow: Option<crate::token::Flow>,
    /// What the tool features decided.
    tools: Inbound,
}

impl Proxy {
    /// Steps 4 to 8 for a POSTed JSON-RPC message: the gate, the state and the tool
    /// features for a call, then the upstream and the answer (or a stored answer for a
    /// repeated write, without the upstream).
    pub(super) async fn forward_message(
        &self,
        parts: http::request::Parts,
        body: Incoming,
        principal: Option<String>,
        record: &mut Record,
    ) -> Result<Response<ProxyBody>, Failure> {
        let mut spent = Spent::default();
        let result = self
            .forward_call(parts, body, principal, &mut spent, record)
            .await;
        // The one place a spent single-use state is given back: the call was refused
        // before it was handed to the upstream, or connecting failed, so not one byte of
        // it was written and the user may try again. Anything later (a reset after the
        // request went out, an answer that could not be made safe) leaves it spent: at
        // most once, not exactly once.
        if let (Err(failure), Some(claim)) = (&result, spent.claim.take())
            && (!spent.handed_over || failure.error.never_sent())
        {
            self.opener.release(claim).await;
        }
        result
    }

    /// [`Proxy::forward_message`]'s phases; a state it spends is noted in `spent`.
    async fn forward_call(
        &self,
        mut parts: http::request::Parts,
        body: Incoming,
        principal: Option<String>,
        spent: &mut Spent,
        record: &mut Record,
    ) -> Result<Response<ProxyBody>, Failure> {
        let mut admitted = self.gate.admit(&parts.headers, body).await?;
        let id = admitted.id().cloned();
        // The client: behind a trusted proxy the one it reports, else the peer.
        let client = parts
            .extensions
            .get::<ClientAddr>()
            .map(|c| c.0)
            .or_else(|| parts.extensions.get::<Peer>().map(|p| p.0.ip()));
        let caller = Caller::new(
            // The path and the query: one upstream may route tenants by either.
            parts
                .uri
                .path_and_query()
                .map_or("/", http::uri::PathAndQuery::as_str),
            principal.as_deref(),
            client,
        );
        let prepared = match admitted.call_mut() {
            Some((method, params)) => {
                let call = Call {
                    method,
                    caller: &caller,
                    id: &id,
                };
                self.prepare_call(call, params, &mut parts.headers, spent, record)
                    .await?
            }
            None => Prepared::default(),
        };
        if let Some(answer) = prepared.tools.replay {
            // A repeat of a completed write: the stored answer under this request's id,
            // and the upstream is not called.
            return Ok(replay::replayed(id.as_ref(), answer));
        }
        let ticket = prepared.tools.answering.ticket();
        self.upstream.mark_gated(&mut parts.headers, caller.owner());
        // The parsed body ends here, before the upstream is awaited.
        let (forwarded, reservation) = admitted.into_forwarded();
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(forwarded.len()));
        // The method as the audit record already escaped it, for the sealer's log lines.
        let context = SealContext::new(id, record.method(), prepared.binding, principal)
            .with_flow(prepared.capabilities, prepared.flow)
            .with_tools(prepared.tools.answering);
        let asked = if context.request_id().is_some() {
            Asked::Call
        } else {
            Asked::Notification
        };
        spent.handed_over = true;
        let response = self
            .exchange(
                parts,
                (crate::body::full(forwarded), Some(reservation)),
                context,
                asked,
                record,
            )
            .await;
        // A whole JSON answer is recorded before the client has it, so a repeat sent
        // after it is replayed; a stream's is recorded when the stream ends.
        if let Some(ticket) = ticket {
            ticket.finish_if_complete().await;
        }
        response
    }

    /// Steps 5 and 6 for a call: open its state (or compute its binding for the
    /// response), then apply the tool features. A state it spends is noted in `spent`
    /// as soon as it is, so that a later refusal gives it back.
    async fn prepare_call(
        &self,
        Call { method, caller, id }: Call<'_>,
        mut params: Params<'_>,
        headers: &mut http::HeaderMap,
        spent: &mut Spent,
        record: &mut Record,
    ) -> Result<Prepared, Failure> {
        let refused = |error| Failure {
            id: id.clone(),
            error,
            upstream_head: None,
        };
        record.set_call(method, id.as_ref(), &params);
        let opened = if params.is_present() {
            self.opener
                .open(method, &mut params, caller)
                .await
                .map_err(refused)?
        } else {
            None
        };
        let capabilities = capabilities::declared(&params);
        let (binding, flow) = match opened {
            Some(opened) => {
                if let Some(kid) = record.kid() {
                    self.metrics.keys.token_opened(kid);
                }
                spent.claim = opened.claim;
                (Some(opened.binding), opened.flow)
            }
            // Computed now, for the response: only the binding outlives the request's
            // phases, never the parsed body.
            None => (
                RequestBinding::of_members(
                    method,
                    params.get(ParamsField::target(method)),
                    params.get(ParamsField::Arguments),
                )
                .ok()
                .map(|b| b.at_path(caller.path)),
                None,
            ),
        };
        // After the binding: a state binds the arguments as the client sent them (sealed
        // handles), and the upstream gets its own raw handles.
        let tools = self
            .tools
            .inbound(
                method,
                &mut params,
                headers,
                caller,
                binding.as_ref().map(|b| b.args_digest.as_str()),
            )
            .await
            .map_err(refused)?;
        Ok(Prepared {
            binding,
            capabilities,
            flow,
            tools,
        })
    }
}
