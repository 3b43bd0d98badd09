//! Tool-level features for unmodified servers, applied to `tools/call` after the state
//! is opened and before the call is forwarded: [`handles`] (ownership of the handles a
//! server issues). Each is a small phase type called in order from [`crate::proxy`].
//!
//! Invariant: a `tools/call` reaches the upstream only after every tool feature
//! admitted it; what a response must seal is computed at admission ([`Inbound`]), so
//! the response phase holds nothing of the request body.

pub mod handles;

use crate::error::ProxyError;
use serde_json::{Map, Value};

pub use handles::{Handles, Issue};

/// The tool phase: what every configured feature needs.
pub struct ToolFeatures {
    pub handles: Handles,
}

/// What admission decided for the response phase.
#[derive(Default)]
pub struct Inbound {
    /// Handles the response must seal.
    pub issue: Option<Issue>,
}

impl ToolFeatures {
    /// Apply the inbound rules to a `tools/call`'s params (other methods pass): handle
    /// arguments are unwrapped. Runs after the state opener, so a `requestState`
    /// binding is computed over the arguments as the client sent them.
    pub fn inbound(
        &self,
        method: &str,
        params: Option<&mut Map<String, Value>>,
        principal: Option<&str>,
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
        self.handles.unwrap(&tool, params, principal)?;
        Ok(Inbound {
            issue: self.handles.issue(&tool, principal),
        })
    }
}
