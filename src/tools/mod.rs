//! Tool-level features for unmodified servers, applied to `tools/call` after the state
//! is opened and before the call is forwarded: [`handles`] (ownership of the handles a
//! server issues) then [`idempotency`] (writes applied once). Each is a small phase type
//! called in order from [`crate::proxy`].
//!
//! Invariant: a `tools/call` reaches the upstream only after every tool feature admitted
//! it ([`ToolFeatures::unwrap_handles`], then [`ToolFeatures::admit`]); what the response
//! phase must do (handles to seal, an answer to record) is decided
//! at admission ([`Inbound`]), so it holds nothing of the request body.

pub(crate) mod handles;
pub(crate) mod idempotency;
mod metrics;

use crate::auth::Caller;
use crate::error::ProxyError;
use crate::jsonrpc::{Params, ParamsField};
use crate::token::RequestBinding;
use http::HeaderMap;
use serde_json::{Map, Value};

pub(crate) use handles::{Handles, Issue};
pub(crate) use idempotency::{Admission, Completed, Idempotency, Replay, Ticket};
pub use metrics::HandleResult;
pub use metrics::IdempotencyResult;
pub use metrics::ToolMetrics;

/// The tool phase: what every configured feature needs.
pub(crate) struct ToolFeatures {
    pub(crate) handles: Handles,
    pub(crate) idempotency: Idempotency,
}

/// What admission decided for the response phase.
#[derive(Default)]
pub(crate) struct Inbound {
    /// What the tool features do to the answer.
    pub(crate) answering: Answering,
    /// A repeat of a completed call: its stored answer (its issued handles sealed for
    /// this caller now), answered without the upstream.
    pub(crate) replay: Option<Replay>,
}

/// What the tool features do to each message of a call's answer, decided at admission:
/// record a complete answer (idempotency) and seal the handles an issuing tool's result
/// holds. The response phase calls these as steps of its own order; it knows nothing of
/// handles or records.
#[derive(Default)]
pub(crate) struct Answering {
    /// Handles the response must seal.
    ///
    /// Boxed, as is `ticket`: every request's futures carry an `Answering` from the
    /// gate to the answer, and most calls have neither (a few bytes moved instead of
    /// three hundred, at each of the response's phases).
    issue: Option<Box<Issue>>,
    /// The idempotency reservation the response completes: its one owner (dropped
    /// unfinished, it gives the key back or, with an answer, records it).
    ticket: Option<Box<Ticket>>,
}

impl Answering {
    /// The upstream's response head came with `status` (an idempotent call records only
    /// a 2xx answer).
    pub(crate) fn upstream_status(&self, status: http::StatusCode) {
        if let Some(ticket) = &self.ticket {
            ticket.upstream_status(status);
        }
    }

    /// `answer` answers the call (its id is the call's): record it, as it reaches the
    /// client (states sealed, handles raw: they are sealed afresh for each replay).
    pub(crate) fn record(&self, answer: Completed<'_>) {
        if let Some(ticket) = &self.ticket {
            ticket.complete(answer);
        }
    }

    /// Whether [`Answering::record`] keeps anything (the call holds a reservation).
    pub(crate) fn records(&self) -> bool {
        self.ticket.is_some()
    }

    /// Whether an answer's result has handles to seal (an issuing tool was called).
    pub(crate) fn issues(&self) -> bool {
        self.issue.is_some()
    }

    /// Seal the raw handles in a `result` of the answer (a complete one or a round
    /// asking for input: no raw handle at its pointer reaches the client). Whether it
    /// changed.
    pub(crate) fn seal_handles(&self, result: &mut Map<String, Value>) -> bool {
        match &self.issue {
            Some(issue) => {
                issue.seal(result);
                true
            }
            None => false,
        }
    }

    /// A whole answer was sealed: record it now, before the client has it, so a repeat
    /// sent right after is replayed (a stream's answer is recorded when the stream ends
    /// and its sealer, holding this, is dropped).
    pub(crate) async fn finish(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            ticket.finish_if_complete().await;
        }
    }
}

/// The tool a `tools/call` names; other methods, and a call without a name or params,
/// have none and pass the tool features.
pub(crate) fn called_tool(method: &str, params: &Params<'_>) -> Option<String> {
    if !params.is_present() || method != "tools/call" {
        return None;
    }
    params
        .get_str(ParamsField::Name)
        .map(std::borrow::Cow::into_owned)
}

impl ToolFeatures {
    /// Whether a feature is configured for any tool: when none is, every call passes
    /// the tool steps untouched, and they are not taken.
    pub(crate) fn configured(&self) -> bool {
        self.handles.configured() || self.idempotency.configured()
    }

    /// The first tool step: each accepted handle argument of a call of `tool` is
    /// unwrapped to the upstream's raw handle (or the call refused). Whether the
    /// arguments changed: a digest computed over them before no longer holds.
    pub(crate) async fn unwrap_handles(
        &self,
        tool: &str,
        params: &mut Params<'_>,
        caller: &Caller,
    ) -> Result<bool, ProxyError> {
        self.handles.unwrap(tool, params, caller).await
    }

    /// The second: the idempotency key is reserved over the arguments the upstream
    /// will receive, or the call answered from the store. `bound`: the request's binding
    /// when it was computed over those very arguments (its digest is taken rather than
    /// computed again).
    pub(crate) async fn admit(
        &self,
        tool: &str,
        params: &mut Params<'_>,
        headers: &mut HeaderMap,
        caller: &Caller,
        bound: Option<&RequestBinding>,
    ) -> Result<Inbound, ProxyError> {
        let mut inbound = Inbound {
            answering: Answering {
                issue: self.handles.issue(tool, caller).map(Box::new),
                ticket: None,
            },
            replay: None,
        };
        match self
            .idempotency
            .admit(tool, params, headers, caller, bound)
            .await?
        {
            Admission::Untracked => {}
            Admission::Reserved(ticket) => inbound.answering.ticket = Some(Box::new(ticket)),
            Admission::Replay(mut replay) => {
                if let (Some(issue), Some(Value::Object(result)), true) = (
                    &inbound.answering.issue,
                    replay.answer.get_mut("result"),
                    replay.raw_handles,
                ) {
                    issue.seal(result);
                }
                inbound.replay = Some(replay);
            }
        }
        Ok(inbound)
    }
}
