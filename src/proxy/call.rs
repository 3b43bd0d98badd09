//! Steps 4 to 8 for a POSTed JSON-RPC message: the gate, then for a call its state and
//! tool features (steps 5 and 6), then the upstream and the answer, or a stored answer
//! for a repeated write without the upstream.
//!
//! Invariant: a single-use state this request spent is given back in one place
//! ([`Proxy::unsent_claim`]), and only when nothing of the request was handed to the
//! upstream, or connecting failed before a byte of it was written.

use super::exchange::Exchange;
use super::failure::Failure;
use super::{Proxy, replay};
use crate::body::ProxyBody;
use crate::budget::Reservation;
use crate::jsonrpc::{LITE_ARENA_BYTES, LiteArena, Params, ParamsField};
use crate::policy::capabilities;
use crate::policy::single_use::Claim;
use crate::token::RequestBinding;
use crate::tools::{self, Replay};
use http::Response;
use http::header::{self, HeaderValue};
use hyper::body::Incoming;

impl Proxy {
    /// The spent single-use state to give back after `result`: the call was refused
    /// before it was handed to the upstream, or connecting failed, so not one byte of it
    /// was written and the user may try again. Anything later (a reset after the request
    /// went out, an answer that could not be made safe) leaves it spent: at most once,
    /// not exactly once. The one place this is decided; [`Proxy::forward`] awaits the
    /// release only when there is one (so a request's future does not carry it).
    pub(super) fn unsent_claim(
        result: &Result<Response<ProxyBody>, Failure>,
        exchange: &mut Exchange,
    ) -> Option<Claim> {
        let Err(failure) = result else {
            return None;
        };
        let claim = exchange.spent.take()?;
        (!exchange.handed_over || failure.error.never_sent()).then_some(claim)
    }

    /// Steps 4 to 8 for a POSTed JSON-RPC message: the gate, the state and the tool
    /// features for a call, then the upstream and the answer (or a stored answer for a
    /// repeated write, without the upstream). A single-use state it spent and did not
    /// send is given back by the caller ([`Proxy::unsent_claim`]).
    pub(super) async fn forward_call(
        &self,
        mut parts: http::request::Parts,
        body: Incoming,
        exchange: &mut Exchange,
    ) -> Result<Response<ProxyBody>, Failure> {
        let mut admitted = match self.gate.admit(&parts.headers, body).await {
            Ok(admitted) => admitted,
            Err(refusal) => {
                exchange.id = refusal.id.map(std::sync::Arc::new);
                return Err(refusal.error.into());
            }
        };
        let id = admitted.take_id();
        // What opening a state holds beside the body, given back once it is open.
        let held = admitted.reservation.beside();
        match admitted.call_mut() {
            Some((method, mut params)) => {
                exchange.named(id, Some((method, &params)));
                self.open_state(method, &mut params, exchange, held).await?;
                if self.tools.configured() {
                    // Boxed, and only when a tool feature is configured: every request's
                    // future would otherwise carry this step's size, and move it at each
                    // phase.
                    let step = self.apply_tools(method, &mut params, &mut parts.headers, exchange);
                    if let Some(answer) = Box::pin(step).await? {
                        // A repeat of a completed write: the stored answer under this
                        // request's id, and the upstream is not called.
                        return Ok(replay::replayed(exchange.id.as_deref(), answer));
                    }
                }
            }
            None => {
                drop(held);
                exchange.named(id, None);
            }
        }
        self.upstream
            .mark_gated(&mut parts.headers, &exchange.caller);
        // The parsed body ends here, before the upstream is awaited.
        let (forwarded, reservation) = admitted.into_forwarded();
        set_content_length(&mut parts.headers, forwarded.len());
        self.round_trip(
            parts,
            (crate::body::full(forwarded), Some(reservation)),
            exchange,
        )
        .await
    }

    /// Step 5 for a call: open its state (the state it spends goes to the exchange as
    /// soon as it is, so that a later refusal gives it back), or compute its binding for
    /// the response; and read the capabilities it declared.
    async fn open_state(
        &self,
        method: &str,
        params: &mut Params<'_>,
        exchange: &mut Exchange,
        mut held: Reservation,
    ) -> Result<(), Failure> {
        let caller = &exchange.caller;
        // One arena for all that is read of the body here (a retry's arguments, answers
        // and questions, a first call's arguments), kept as flags and bindings, never as
        // views: a call without params reads nothing. The declared capabilities were
        // read by the gate's scan.
        let mut arena = if params.is_present() {
            LiteArena::with_capacity(LITE_ARENA_BYTES)
        } else {
            LiteArena::new()
        };
        // A first call opens nothing: the opener's future is made (and awaited) only
        // for a request that carries a state.
        let opened = if params.is_there(ParamsField::RequestState) {
            self.opener
                .open(method, params, caller, &mut arena, &mut held)
                .await?
        } else {
            self.opener.without_state(params)?;
            None
        };
        exchange.capabilities = capabilities::declared(params);
        exchange.binding = match opened {
            Some(opened) => {
                exchange.spent = opened.claim;
                exchange.flow = opened.flow;
                Some(opened.binding)
            }
            // Computed now, for the response: only the binding outlives the request's
            // phases, never the parsed body.
            None => RequestBinding::of_params_in(method, params, &arena, Some(caller.path())).ok(),
        };
        Ok(())
    }

    /// Step 6 for a `tools/call`, when a tool feature is configured: its handle
    /// arguments unwrapped (after the binding: a state binds the arguments as the client
    /// sent them, sealed handles and all, and the upstream gets its own raw handles),
    /// then its idempotency key reserved; or the stored answer of a completed repeat.
    async fn apply_tools(
        &self,
        method: &str,
        params: &mut Params<'_>,
        headers: &mut http::HeaderMap,
        exchange: &mut Exchange,
    ) -> Result<Option<Replay>, Failure> {
        let Some(tool) = tools::called_tool(method, params) else {
            return Ok(None);
        };
        let caller = &exchange.caller;
        let arguments_changed = self.tools.unwrap_handles(&tool, params, caller).await?;
        // The binding's digest is taken for the arguments the upstream receives unless
        // a handle was spliced into them.
        let bound = exchange.binding.as_ref().filter(|_| !arguments_changed);
        let inbound = self
            .tools
            .admit(&tool, params, headers, caller, bound)
            .await?;
        exchange.answering = inbound.answering;
        Ok(inbound.replay)
    }
}

/// The forwarded body's length as its one `Content-Length`. The client's value stays
/// when it is already that, alone (a call forwarded as it came): a value of ours would be
/// one more allocation per request.
fn set_content_length(headers: &mut http::HeaderMap, length: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(length).as_bytes();
    let mut given = headers.get_all(header::CONTENT_LENGTH).iter();
    let kept =
        given.next().is_some_and(|value| value.as_bytes() == digits) && given.next().is_none();
    if !kept {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarded_length_is_the_one_content_length() {
        let lengths = |headers: &http::HeaderMap| {
            let values = headers.get_all(header::CONTENT_LENGTH).iter();
            values
                .map(|v| v.to_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        let mut headers = http::HeaderMap::new();
        set_content_length(&mut headers, 42);
        assert_eq!(lengths(&headers), ["42"], "set when absent");
        set_content_length(&mut headers, 42);
        assert_eq!(lengths(&headers), ["42"], "kept when it is the length");
        set_content_length(&mut headers, 7);
        assert_eq!(lengths(&headers), ["7"], "replaced when the body changed");
        headers.append(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        set_content_length(&mut headers, 7);
        assert_eq!(lengths(&headers), ["7"], "one value, even where two agreed");
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("07"));
        set_content_length(&mut headers, 7);
        assert_eq!(lengths(&headers), ["7"], "the digits, not the number");
    }
}
