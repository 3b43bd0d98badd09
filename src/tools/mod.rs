//! Tool-level features for unmodified servers, applied to `tools/call` after the state
//! is opened and before the call is forwarded: [`handles`] (ownership of the handles a
//! server issues) then [`idempotency`] (writes applied once). Each is a small phase type
//! called in order from [`crate::proxy`].
//!
//! Invariant: a `tools/call` reaches the upstream only after every tool feature admitted
//! it; what the response phase must do (handles to seal, an answer to record) is decided
//! at admission ([`Inbound`]), so it holds nothing of the request body.

pub mod handles;
pub mod idempotency;
mod metrics;

use crate::error::ProxyError;
use http::HeaderMap;
use serde_json::{Map, Value};
use std::sync::Arc;

pub use handles::{Handles, Issue};
pub use idempotency::{Admission, Idempotency, Replay, Ticket};
pub use metrics::{HandleResult, IdempotencyResult, ToolMetrics};

/// The tool phase: what every configured feature needs.
pub struct ToolFeatures {
    pub handles: Handles,
    pub idempotency: Idempotency,
}

/// What admission decided for the response phase.
#[derive(Default)]
pub struct Inbound {
    /// Handles the response must seal.
    pub issue: Option<Issue>,
    /// The idempotency reservation the response completes.
    pub ticket: Option<Arc<Ticket>>,
    /// A repeat of a completed call: its stored answer (its issued handles sealed for
    /// this caller now), answered without the upstream.
    pub replay: Option<Replay>,
}

impl ToolFeatures {
    /// Apply the inbound rules to a `tools/call` (other methods pass): handle arguments
    /// are unwrapped, then the idempotency key is reserved (over the arguments the
    /// upstream will receive) or answered from the store. Runs after the state opener,
    /// so a `requestState` binding is computed over the arguments as the client sent them.
    pub async fn inbound(
        &self,
        method: &str,
        path: &str,
        params: Option<&mut Map<String, Value>>,
        headers: &mut HeaderMap,
        principal: Option<&str>,
        owner: &crate::store::Owner,
    ) -> Result<Inbound, ProxyError> {
        let Some(params) = params else {
            return Ok(Inbound::default());
        };
        if method != "tools/call" {
            return Ok(Inbound::default());
        }
        let Some(tool) = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Ok(Inbound::default());
        };
        self.handles.unwrap(&tool, path, params, principal).await?;
        let mut inbound = Inbound {
            issue: self.handles.issue(&tool, path, principal),
            ..Inbound::default()
        };
        match self
            .idempotency
            .admit(&tool, path, params, headers, principal, owner)
            .await?
        {
            Admission::Untracked => {}
            Admission::Reserved(ticket) => inbound.ticket = Some(ticket),
            Admission::Replay(mut replay) => {
                if let (Some(issue), Some(Value::Object(result)), true) = (
                    &inbound.issue,
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
