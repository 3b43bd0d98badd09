//! Fake upstreams that answer by case: a request's `x-case` header (forwarded like any
//! header) names the variant the fake is to produce, so one fake serves a whole table.

use super::{FakeUpstream, Recorded, event, progress, tools_call};
use crate::support::http::{self as client, mcp_headers, send};
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::config::Config;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

pub async fn sidecar_with(fake: &FakeUpstream, tweak: impl FnOnce(&mut Config)) -> Sidecar {
    let mut config = sidecar::config(&fake.base_url());
    tweak(&mut config);
    Sidecar::start(config).await
}

pub fn case_of(request: &Recorded) -> String {
    request.header("x-case").unwrap_or_default().to_owned()
}

/// A tools/call with an `x-case` header the fake answers by (headers are forwarded).
pub async fn call_case(sidecar: &Sidecar, case: &str, id: u64) -> client::Reply {
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.push(("x-case".into(), case.into()));
    let body = serde_json::to_vec(&tools_call(id, None)).unwrap();
    send(Method::POST, &sidecar.mcp_url(), &headers, body, T).await
}

pub fn first_progress() -> String {
    event("\r\n", &progress(1))
}
