//! mcp-state-guard: a sidecar reverse proxy that gives an unmodified MCP server the
//! `requestState` protection MCP 2026-07-28 requires.
//!
//! # The journey of a request
//!
//! One line a step; each module's own docs (`//!`) hold the detail.
//!
//! 1. [`server`] accepts the connection within its limits ([`tls`], [`server::slots`],
//!    [`server::deadline`]) and hands the request to [`proxy::Proxy::handle`], which
//!    opens its one `Exchange` (with its audit record, [`telemetry::audit`]) that every
//!    step below takes; [`app`] wired it all from [`config`].
//! 2. [`proxy::ingress`]: the `Host`, the framing and the headers the sidecar reads are
//!    checked, hop-by-hop and forwarding headers made the sidecar's.
//! 3. [`auth`]: who is calling (a trusted header, a JWT, the client certificate).
//! 4. [`proxy::gate`]: a POST body is one JSON-RPC message [`jsonrpc`] scans strictly, read
//!    within its size, time and [`budget`] limits.
//! 5. [`proxy::state`]: a retry's state is opened by [`token`], checked by [`policy`] and,
//!    when single-use, consumed in the shared [`store`].
//! 6. [`tools`]: handle arguments unwrapped, an idempotency key reserved or answered.
//! 7. [`proxy::upstream`]: the message is forwarded, to an HTTP upstream or to a [`stdio`]
//!    child through the same [`proxy::pool`] of connections.
//! 8. [`proxy::outbound`] and [`proxy::response`]: the answer is classified and every state
//!    in it sealed ([`sse`] for streams), its round checked ([`policy::questions`]).
//! 9. [`error`] turns every failure into the client's response; outcomes are counted in
//!    each component's families on the [`registry`], served with [`health`] by [`admin`].
//!
//! Security invariant: no `requestState` reaches the upstream unless this sidecar minted
//! it and verified it on this request, and no plaintext `requestState` from the upstream
//! ever reaches the client.
//!
//! # The floors
//!
//! The crate is a house with floors: a module imports only from floors below its own.
//! Bottom to top:
//!
//! | floor | modules | what they hold |
//! | --- | --- | --- |
//! | ground | [`version`], [`text`], [`body`], [`budget`], [`shutdown`], [`file_watch`], [`glob`], [`registry`] | the build's name, printable client text, the body type, the memory budget, the shutdown signal, the file watcher, name patterns, the metrics registry and its closed labels: nothing of the crate |
//! | wire | [`jsonrpc`], [`mcp`], [`sse`] | strict scanning and writing of messages, the facts about MCP messages, event framing |
//! | config | [`config`] | typed settings, validated with every problem listed |
//! | crypto | [`token`], [`store`] | the one crypto seam (states and handles), the shared store |
//! | errors | [`error`] | every refusal and how the client sees it |
//! | rules | [`policy`], [`health`] | single use, capabilities, answers, rounds, revocation; readiness checks |
//! | edges | [`tls`], [`server`], [`auth`], [`stdio`] | the listener's TLS and peer identity, connections and their facts, who is calling, a stdio upstream run as the sidecar's child |
//! | tools | [`tools`] | handles and idempotent writes |
//! | path | [`proxy`], [`telemetry`] | the phases of steps 2 to 8, the audit record |
//! | top | [`admin`], [`app`], [`facade`] | the admin port, the wiring and start-up, what the binary, tests, fuzz targets and benches may use |
//!
//! The steps of the journey above are numbered the same way in [`proxy`].
#![forbid(unsafe_code)]
// Every `pub` is reached through `facade`; anything else is `pub(crate)` (the tests,
// benches and fuzz targets are crates of their own, so the lint is the library's).
#![warn(unreachable_pub)]
// The journey and the floors link into the private modules: the crate is read with
// `cargo doc --document-private-items` (README, code map).
#![allow(rustdoc::private_intra_doc_links)]

mod admin;
mod app;
mod auth;
mod body;
mod budget;
mod config;
mod error;
pub mod facade;
mod file_watch;
mod glob;
mod health;
mod jsonrpc;
mod mcp;
mod policy;
mod proxy;
mod registry;
mod server;
mod shutdown;
mod sse;
mod stdio;
mod store;
mod telemetry;
mod text;
mod tls;
mod token;
mod tools;
mod version;
