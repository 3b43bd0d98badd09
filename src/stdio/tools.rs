//! The child's tools as the gate needs them: the `Mcp-Param-*` annotations of their
//! input schemas ([`crate::mcp::param_headers`]), listed once the child is up and again
//! whenever it says its tools changed (`notifications/tools/list_changed`).
//!
//! Invariant: the gate checks against one whole listing (every page, replaced at once),
//! never a partial one; a listing that fails keeps the last whole one and is logged.

use super::BridgeShared;
use super::ask::ask;
use crate::mcp::param_headers::ParamHeaders;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Pages one listing may take (a server that never ends its pagination is not waited on).
const MAX_PAGES: usize = 64;

/// List the child's tools and replace the annotations the gate checks.
pub(crate) async fn learn(shared: Arc<BridgeShared>, timeout: Duration) {
    let mut learned = ParamHeaders::default();
    let mut cursor: Option<Value> = None;
    for _ in 0..MAX_PAGES {
        let mut params = Map::new();
        if let Some(cursor) = cursor.take() {
            params.insert("cursor".into(), cursor);
        }
        let Some(answer) = ask(&shared, "tools/list", params, timeout).await else {
            tracing::warn!(
                "stdio upstream did not answer tools/list; Mcp-Param headers are checked against its last listing"
            );
            return;
        };
        let Some(result) = answer.get("result") else {
            // A server without tools: nothing is mirrored.
            tracing::debug!(
                "stdio upstream answered tools/list with an error: no Mcp-Param headers to check"
            );
            break;
        };
        if let Some(tools) = result.get("tools").and_then(Value::as_array) {
            learned.learn(tools);
        }
        match result.get("nextCursor") {
            Some(next @ Value::String(_)) => cursor = Some(next.clone()),
            _ => {
                shared.param_headers.store(Arc::new(learned));
                return;
            }
        }
    }
    tracing::warn!(
        pages = MAX_PAGES,
        "stdio upstream's tools/list did not end its pagination; Mcp-Param headers are checked against its last whole listing"
    );
}
