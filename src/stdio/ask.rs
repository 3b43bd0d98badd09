//! The bridge's own requests to its child, never a caller's: `server/discover` before the
//! child is called up ([`super::child`]) and `tools/list` for the `Mcp-Param-*`
//! annotations the gate checks ([`super::tools`]). Each goes under a fresh bridge id, as
//! a caller's request does, so its answer comes back to the bridge alone.

use super::route;
use super::{BridgeShared, Outgoing, ids};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Ask the child `method` with `params` (given the `_meta` of a 2026-07-28 client),
/// waiting at most `timeout` for its answer: the answer message (a result or an error),
/// or `None` when it gave none in time or is gone.
pub(crate) async fn ask(
    shared: &BridgeShared,
    method: &str,
    params: Map<String, Value>,
    timeout: Duration,
) -> Option<Value> {
    let id = ids::fresh();
    let receivers = shared.routes().open(id.clone(), json!(null), None, false);
    let answered = match send(shared, &id, method, params).await {
        true => tokio::time::timeout(timeout, receivers.answer).await.ok(),
        false => None,
    };
    shared.routes().close(&id);
    let reply = answered?.ok()?.ok()?;
    serde_json::from_slice(&reply.message).ok()
}

/// Queue the bridge's own request `method` with `params` under the open route `id`
/// (waiting for room in the bridge's own queue); false once the child's queue is gone.
pub(crate) async fn send(
    shared: &BridgeShared,
    id: &ids::BridgeId,
    method: &str,
    mut params: Map<String, Value>,
) -> bool {
    params.insert(
        "_meta".into(),
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-state-guard", "version": crate::version::VERSION},
        }),
    );
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let own = Outgoing {
        id: Some(id.clone()),
        line: route::line(&request),
        held: None,
    };
    let sent = shared.own.send(own).await.is_ok();
    shared.metrics.queue_depth(shared.queued());
    sent
}
