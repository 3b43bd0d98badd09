//! mcp-state-guard: a sidecar reverse proxy that gives an unmodified MCP server the
//! `requestState` protection MCP 2026-07-28 requires.
//!
//! # The journey of a request
//!
//! 1. A client's multi-round-trip request arrives; if it echoes a `requestState`, the
//!    [`token`] module opens it and checks it is bound to this method, target, arguments,
//!    audience and caller, then hands the upstream its own plaintext back.
//! 2. When the upstream answers `input_required` with a plaintext `requestState`, the
//!    [`token`] module seals it into a `v1.` AES-256-GCM token before the client sees it.
//!
//! Security invariant: no `requestState` reaches the upstream unless this sidecar minted
//! it and verified it on this request, and no plaintext `requestState` from the upstream
//! ever reaches the client.
#![forbid(unsafe_code)]

pub mod token;
