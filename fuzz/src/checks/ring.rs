//! The fuzz targets' own key ring: a fixed secret and audience, so a target can mint a
//! valid token (and a sidecar started with the same key file opens it).

use mcp_state_guard::facade::token::{KeyRing, RequestBinding, StateSealer};
use std::sync::{Arc, OnceLock};

/// The secret in the sidecar's key file and in [`sealer`] (32 bytes at least).
pub const SECRET: &str = "mcp-state-guard-fuzz-secret-0123456789abcdef";
pub const AUDIENCE: &str = "fuzz-audience";
pub const TTL_SECONDS: u64 = 300;

/// The sealer of [`SECRET`] and [`AUDIENCE`], built once.
pub fn sealer() -> Arc<StateSealer> {
    static SEALER: OnceLock<Arc<StateSealer>> = OnceLock::new();
    SEALER
        .get_or_init(|| {
            let ring = KeyRing::from_secrets(&[SECRET], "fuzz").expect("a valid fuzz secret");
            Arc::new(StateSealer::new(
                ring,
                Some(AUDIENCE.to_owned()),
                TTL_SECONDS,
            ))
        })
        .clone()
}

/// The binding the token and SSE targets seal for: a `tools/call` of `provision`.
pub fn binding() -> RequestBinding {
    let params = serde_json::json!({"name": "provision", "arguments": {"size": 3}});
    RequestBinding::of("tools/call", params.as_object())
        .expect("a plain binding")
        .at_path("/mcp")
}
