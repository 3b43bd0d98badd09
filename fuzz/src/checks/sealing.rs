//! The proxy's response sealer as the `sse` and `upstream` targets build it: one
//! `tools/call` of the fuzz ring's binding, small flow limits and states, and the
//! capabilities its client declared. Below both targets, so that neither needs the other
//! for it (`sse` runs `upstream::compare` on each event's message).

use super::ring;
use mcp_state_guard::facade::policy::capabilities::Declared;
use mcp_state_guard::facade::policy::flow::FlowLimits;
use mcp_state_guard::facade::policy::single_use::SingleUsePolicy;
use mcp_state_guard::facade::proxy::Meters;
use mcp_state_guard::facade::proxy::response::{ResponseSealer, SealContext};
use mcp_state_guard::facade::registry::Registry;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// The flow limits of the sealers the targets build.
pub const LIMITS: FlowLimits = FlowLimits {
    max_rounds: 8,
    max_flow_seconds: 600,
};
/// The largest upstream state the targets' sealers take.
pub const MAX_STATE_BYTES: usize = 1024;

/// Every capability a client can declare.
pub fn every_capability() -> Value {
    serde_json::json!({
        "elicitation": {"form": {}, "url": {}},
        "sampling": {"tools": {}},
        "roots": {}
    })
}

/// The proxy's sealer for one `tools/call` (id 1) of the fuzz ring's binding, whose
/// client declared `capabilities`.
pub fn sealer_declaring(capabilities: Option<Value>) -> ResponseSealer {
    static METRICS: OnceLock<Meters> = OnceLock::new();
    let metrics = METRICS
        .get_or_init(|| Meters::register(&Registry::new()))
        .clone();
    let context = SealContext::new(
        Some(serde_json::json!(1)),
        Some("tools/call".into()),
        Some(ring::binding()),
        None,
    )
    .with_flow(capabilities.as_ref().and_then(Declared::of), None);
    ResponseSealer::new(
        ring::sealer(),
        Arc::new(SingleUsePolicy::default()),
        metrics,
        MAX_STATE_BYTES,
        LIMITS,
        context,
    )
}
