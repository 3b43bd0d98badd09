//! The inbound half of the state boundary: a retry's `params.requestState` is opened
//! and replaced by the upstream's own plaintext.
//!
//! Invariant: after [`StateOpener::open`] succeeds, a `requestState` in `params` is the
//! plaintext of a token this sidecar verified for this very request (method, target,
//! arguments, path, audience, principal), consumed in the shared store when it is
//! single-use, and `inputResponses` holds only what the minting round asked for. On
//! failure the caller gets the one frozen error, the reason goes to the log and to
//! `state_verified_total`, and nothing is forwarded.

use super::metrics::{Meters, VerifyResult};
use crate::auth::Caller;
use crate::budget::{OverBudget, Reservation};
use crate::error::{ProxyError, Resource, Share};
use crate::jsonrpc::{
    JsonView, LiteArena, NotAnObject, ParamRead, ParamView, Params, ParamsField, ParseError,
};
use crate::policy::MrtrRefusal;
use crate::policy::answers;
use crate::policy::flow::FlowLimits;
use crate::policy::revocation::{NotCleared, Revocations};
use crate::policy::single_use::{Claim, NotConsumed, SingleUse};
use crate::store::Owner;
use crate::text::Clipped;
use crate::token::{Flow, KeyId, Opened, Reject, RequestBinding, StateSealer};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

/// Opens states; holds only what that needs.
pub(crate) struct StateOpener {
    pub(super) sealer: Arc<StateSealer>,
    pub(super) single_use: Arc<SingleUse>,
    pub(super) revocations: Arc<Revocations>,
    pub(super) flow_limits: FlowLimits,
    pub(super) metrics: Meters,
    pub(super) max_token_bytes: usize,
}

/// A retry whose state was opened.
pub(crate) struct OpenedRetry {
    /// The request's binding, computed to open the token (the response reuses it).
    pub(crate) binding: RequestBinding,
    /// The single-use consumption recorded for it, if any.
    pub(crate) claim: Option<Claim>,
    /// Where its token stood in the flow (the next round counts from it).
    pub(crate) flow: Option<Flow>,
}

impl StateOpener {
    /// Verify, consume when single-use (held by `owner`), and unwrap
    /// `params.requestState` in place. `None`: the request carried no state. What is read
    /// of the body (the arguments, the answers and the questions) goes to `arena`, the
    /// request's one (a `&mut`: a shared borrow of an arena cannot cross an `await`);
    /// what that and the opened state hold is reserved in `held` before each wait for the
    /// store, or the request is refused as overloaded before the store is asked.
    pub(crate) async fn open(
        &self,
        method: &str,
        params: &mut Params<'_>,
        caller: &Caller,
        arena: &mut LiteArena,
        held: &mut Reservation,
    ) -> Result<Option<OpenedRetry>, ProxyError> {
        let (path, principal) = (caller.path(), caller.principal());
        // Read as the body holds it: the token is not copied into a value.
        let token = match params.read(ParamsField::RequestState) {
            None => return self.without_state(params).map(|()| None),
            // The reference treats an explicit null as absent; so does the upstream after us.
            Some(ParamRead::Null | ParamRead::Value(Value::Null)) => {
                params.remove(ParamsField::RequestState);
                return self.without_state(params).map(|()| None);
            }
            Some(ParamRead::Text(token)) => token,
            Some(ParamRead::Value(Value::String(token))) => Cow::Borrowed(token.as_str()),
            Some(ParamRead::Other | ParamRead::Value(_)) => {
                return Err(self.refuse(method, Reject::Malformed, "non-string requestState"));
            }
        };
        if token.len() > self.max_token_bytes {
            return Err(self.refuse(
                method,
                Reject::Malformed,
                "token longer than any this sidecar mints",
            ));
        }
        let binding = RequestBinding::of_params_in(method, params, arena, Some(path))
            .map_err(|_| ProxyError::Parse(ParseError::Params))?;
        let kid = KeyId::of_token(&token);
        let opened = self
            .sealer
            .open_in(&token, &binding, principal, arena)
            .map_err(|rejection| self.refuse(method, rejection.reason, rejection.detail))?;
        hold(held, arena, &opened)?;
        self.still_good(method, &opened, principal).await?;
        self.check_answers(method, params, &opened, arena)?;
        hold(held, arena, &opened)?;
        // Last, after every other check passed and right before forwarding: a request
        // refused for another reason must not spend the state. A replay is found here, on
        // any replica sharing the store.
        let claim = self
            .consume(method, &opened, &binding, || caller.owner())
            .await?;
        self.metrics.path.verified(VerifyResult::Ok);
        if let Some(kid) = kid {
            self.metrics.keys.token_opened(kid);
        }
        let flow = opened.flow;
        if opened.no_upstream_state {
            // The upstream sent no state this round; it gets none back.
            params.remove(ParamsField::RequestState);
        } else {
            // As the claims spell it: a string token, not unescaped to be escaped again.
            params.set_string_token(ParamsField::RequestState, opened.state_json);
        }
        Ok(Some(OpenedRetry {
            binding,
            claim,
            flow,
        }))
    }

    /// A request that carries no state: no verified round asked anything, so every
    /// answer is unasked and dropped. (Rounds without upstream state carry a token of
    /// ours, so real answers always have one.)
    pub(crate) fn without_state(&self, params: &mut Params<'_>) -> Result<(), ProxyError> {
        self.filter_input_responses(params, &[])
    }

    /// The opened token still holds: its flow was not older than allowed when it was
    /// opened (the instant its expiry was checked at), and its principal was not revoked
    /// since it was issued.
    async fn still_good(
        &self,
        method: &str,
        opened: &Opened<'_>,
        principal: Option<&str>,
    ) -> Result<(), ProxyError> {
        if self.flow_limits.too_old(opened.flow, opened.opened_at) {
            self.metrics.policy.mrtr_refused(MrtrRefusal::FlowLimit);
            return Err(self.refuse(
                method,
                Reject::Expired,
                "flow older than mrtr.max_flow_seconds",
            ));
        }
        let fails_open = self.single_use.fails_open();
        match self
            .revocations
            .check(principal, opened.issued_at, fails_open, "requestState")
            .await
        {
            Ok(()) => Ok(()),
            Err(NotCleared::Revoked) => {
                Err(self.refuse(method, Reject::Revoked, "principal revoked since"))
            }
            Err(NotCleared::StoreUnavailable) => Err(self.refuse(
                method,
                Reject::StoreUnavailable,
                "revocations could not be checked",
            )),
        }
    }

    /// `inputResponses` answers what the minting round asked, and only that: entries it
    /// did not ask for are dropped (the spec says servers should ignore them, and legacy
    /// servers often trust them), an answer that does not answer its question refuses
    /// the request (the token itself was good: counted as verified). The answers are
    /// read over the body's text; a tree is built only to drop an entry.
    fn check_answers(
        &self,
        method: &str,
        params: &mut Params<'_>,
        opened: &Opened<'_>,
        arena: &LiteArena,
    ) -> Result<(), ProxyError> {
        if !params.is_there(ParamsField::InputResponses) {
            return Ok(());
        }
        let (unasked, verdict) = match params.view(ParamsField::InputResponses, arena) {
            None => return Ok(()),
            Some(ParamView::Text(answers)) => self.answered(method, opened, &answers, arena),
            Some(ParamView::Value(answers)) => self.answered(method, opened, answers, arena),
        };
        // Dropped (and counted) whatever the verdict, as they always were.
        if let Some(asked) = &opened.asked
            && unasked > 0
        {
            self.filter_input_responses(params, asked)?;
        }
        verdict
    }

    /// How many answers the round did not ask for, and the verdict on the others.
    fn answered<A: JsonView>(
        &self,
        method: &str,
        opened: &Opened<'_>,
        answers: &A,
        arena: &LiteArena,
    ) -> (usize, Result<(), ProxyError>) {
        let asked = opened.asked.as_deref();
        if answers.is_null() || (!answers.is_object() && asked.is_none()) {
            return (0, Ok(()));
        }
        let Some(entries) = answers.entries() else {
            // The token itself was good; the request around it was not.
            self.metrics.path.verified(VerifyResult::Ok);
            return (0, Err(ProxyError::InputResponses));
        };
        let is_asked = |key: &str| asked.is_none_or(|asked| asked.iter().any(|a| a == key));
        let unasked = entries.filter(|(key, _)| !is_asked(key)).count();
        let Some(questions) = &opened.questions else {
            return (unasked, Ok(()));
        };
        // Read with the claims (or now, for a token opened outside a request's arena).
        // A token of ours recorded an object (its claims said so when it opened);
        // anything else fails closed.
        let Some(questions) = questions.read(arena) else {
            let refusal = self.refuse(method, Reject::Malformed, "recorded questions do not read");
            return (unasked, Err(refusal));
        };
        // Each answer must answer its question (the client's mistake when it does not:
        // told which key and rule, not the frozen state error).
        if let Err(bad) = answers::check(&questions, answers, is_asked) {
            self.metrics.path.verified(VerifyResult::Ok);
            self.metrics.policy.mrtr_refused(MrtrRefusal::InvalidAnswer);
            tracing::info!(key = %bad.key, rule = %bad.rule, "inputResponses refused");
            let refusal = ProxyError::InvalidAnswer {
                key: bad.key,
                rule: bad.rule,
            };
            return (unasked, Err(refusal));
        }
        (unasked, Ok(()))
    }

    /// Spend a single-use state in the shared store (a replay is refused here); the
    /// claim, if any, is given back should the request not reach the upstream.
    async fn consume<'o>(
        &self,
        method: &str,
        opened: &Opened<'_>,
        binding: &RequestBinding,
        owner: impl FnOnce() -> &'o Owner,
    ) -> Result<Option<Claim>, ProxyError> {
        match self
            .single_use
            .consume(opened, binding.method(), binding.target(), owner)
            .await
        {
            Ok(claim) => Ok(claim),
            Err(NotConsumed::Refused(reason)) => {
                Err(self.refuse(method, reason, "single-use state"))
            }
            // The token was good and stays unspent: the client may retry it later.
            Err(NotConsumed::Share) => {
                self.metrics.path.verified(VerifyResult::Ok);
                self.metrics.refusals.quota_refused(Share::SingleUseEntries);
                Err(ProxyError::Quota(Share::SingleUseEntries))
            }
            Err(NotConsumed::Full) => {
                self.metrics.path.verified(VerifyResult::Ok);
                Err(ProxyError::StoreFull(Resource::SingleUse))
            }
            // Released by the store: the client may present it again shortly.
            Err(NotConsumed::Unconfirmed) => {
                self.metrics.path.verified(VerifyResult::Unconfirmed);
                Err(ProxyError::StoreUnconfirmed(Resource::SingleUse))
            }
        }
    }

    /// Give back a consumption whose request never reached the upstream.
    pub(crate) async fn release(&self, claim: Claim) {
        self.single_use.release(claim).await;
    }

    fn refuse(&self, method: &str, reason: Reject, detail: &'static str) -> ProxyError {
        self.metrics.path.verified(VerifyResult::Rejected(reason));
        tracing::warn!(
            method = %Clipped(method),
            reason = reason.as_str(),
            detail,
            "requestState refused"
        );
        ProxyError::InvalidState { reason, detail }
    }

    /// Drop `inputResponses` entries the minting round did not ask for: the spec says
    /// servers should ignore them, and legacy servers often trust them.
    fn filter_input_responses(
        &self,
        params: &mut Params<'_>,
        asked: &[String],
    ) -> Result<(), ProxyError> {
        let dropped = params
            .retain_answers(|key| asked.iter().any(|a| a == key))
            .map_err(|NotAnObject| ProxyError::InputResponses)?;
        if dropped > 0 {
            self.metrics.path.input_responses_dropped(dropped);
            tracing::info!(dropped, "dropped inputResponses the round did not ask for");
        }
        Ok(())
    }
}

/// Reserve what an opening holds across the store's round trips, beside the body: the
/// request's arena (its chunks, whatever was read into them) and what the opened token
/// holds of its own (the upstream's state as the claims spell it, the asked keys, the
/// questions of a plaintext too large to copy). Past the budget the request is refused
/// before the store is asked, so nothing is spent or forwarded.
fn hold(held: &mut Reservation, arena: &LiteArena, opened: &Opened<'_>) -> Result<(), ProxyError> {
    let bytes = arena.allocated_bytes() + opened.held_bytes();
    held.grow_to(bytes).map_err(|OverBudget| {
        tracing::warn!(
            bytes,
            "an opened requestState would exceed limits.max_buffered_bytes"
        );
        ProxyError::Overloaded
    })
}
