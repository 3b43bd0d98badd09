//! The child's tools as the gate needs them: the `Mcp-Param-*` annotations of their
//! input schemas ([`crate::mcp::param_headers`]), listed once the child is up and again
//! whenever it says its tools changed (`notifications/tools/list_changed`, to whomever
//! it says it). A 2026-07-28 server tells changes only to its listeners, so the bridge
//! listens itself ([`watch`]).
//!
//! Invariant: the gate checks against one whole listing (every page, replaced at once),
//! never a partial one; a listing that fails keeps the last whole one and is logged.

use super::BridgeShared;
use super::ask::{ask, send};
use super::ids;
use super::route::Receivers;
use crate::mcp::param_headers::ParamHeaders;
use serde_json::{Map, Value, json};
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

/// Listen to the child's tool changes (`subscriptions/listen`, SEP-2575) until the child
/// is gone or answers the listen (a server without listen support): the route hearing a
/// change flags it, and the reader lists the tools again; the stream's events are only
/// drained here.
pub(crate) async fn watch(shared: Arc<BridgeShared>) {
    let id = ids::fresh();
    let Receivers { notices, answer } = shared.routes().open(id.clone(), Value::Null, None, true);
    let mut params = Map::new();
    params.insert("notifications".into(), json!({"toolsListChanged": true}));
    if send(&shared, &id, "subscriptions/listen", params).await {
        let drain = async { while notices.next().await.is_some() {} };
        tokio::select! {
            () = drain => {}
            _ = answer => {}
        }
    }
    shared.routes().close(&id);
}
