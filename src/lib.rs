//! mcp-state-guard: a sidecar reverse proxy that gives an unmodified MCP server the
//! `requestState` protection MCP 2026-07-28 requires.
//!
//! # The journey of a request
//!
//! 1. [`server`] accepts the connection (HTTP/1.1 or h2c) and hands each request to
//!    [`proxy::Proxy::handle`]; [`app`] wired everything from a validated [`config`].
//! 2. [`principal`] reads who is calling (nothing, or a header a trusted front proxy set).
//! 3. [`proxy::request`] is the gate: a POST body must be one JSON-RPC message that
//!    [`jsonrpc`] parses strictly (no duplicate or look-alike keys, no batches, no BOM),
//!    with `Mcp-Method`/`Mcp-Name` headers that agree with it. GET and DELETE pass
//!    through only without a body; configured `passthrough_paths` are forwarded untouched.
//! 4. A `params.requestState` is opened by [`token`] and checked against this request's
//!    method, target, argument digest, audience and principal; on success the upstream's
//!    own plaintext replaces it, and `inputResponses` keys the round did not ask for are
//!    dropped. On any failure the client gets the one frozen error and nothing is sent.
//! 5. [`proxy::upstream`] forwards the re-serialised message (pooled client, `Host`
//!    rewritten, hop-by-hop headers dropped, identity encoding, timeouts).
//! 6. [`proxy::response`] seals every `requestState` in the answer, in a JSON body or
//!    event by event in an SSE stream ([`sse`]), bound to the request of step 4; what
//!    cannot be sealed becomes a JSON-RPC internal error instead.
//! 7. Failures become responses in one place ([`error`]); outcomes are counted in
//!    [`metrics`], served with health and readiness by [`admin`].
//!
//! Security invariant: no `requestState` reaches the upstream unless this sidecar minted
//! it and verified it on this request, and no plaintext `requestState` from the upstream
//! ever reaches the client.
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod config;
pub mod error;
pub mod jsonrpc;
pub mod metrics;
pub mod principal;
pub mod proxy;
pub mod server;
pub mod sse;
pub mod token;
