//! mcp-state-guard: a sidecar reverse proxy that gives an unmodified MCP server the
//! `requestState` protection MCP 2026-07-28 requires.
//!
//! # The journey of a request
//!
//! 1. [`server`] accepts the connection (HTTP/1.1 or h2c, or TLS with h2 / http/1.1 by
//!    ALPN and optionally a required client certificate, both from [`tls`]) while fewer
//!    than `limits.max_connections` are open (at the limit the connection idle the
//!    longest is closed to make room, and one address holds at most its share:
//!    [`server::slots`]), holds it to its [`server::deadline`]s (a
//!    request head in time, an idle keep-alive connection closed), tags the request with
//!    the peer's address and verified identity and hands it to [`proxy::Proxy::handle`],
//!    which opens the request's one audit record ([`telemetry::audit`]); [`app`] wired
//!    everything from a validated [`config`].
//! 2. [`proxy::ingress`]: a `Host` outside `allowed_hosts` gets 421; an HTTP/1.1 head
//!    naming both `Content-Length` and `Transfer-Encoding` (seen by a
//!    [`server::framing::FramingScan`] of the connection's bytes, as hyper drops one), a
//!    coding other than one `chunked`, a `_` spelling of a header the sidecar reads
//!    (`Transfer_Encoding`, `Mcp_Name`) or a target that is not a path gets 400; the client's
//!    hop-by-hop headers (what its `Connection` names, never a header the sidecar sets)
//!    are dropped; `Forwarded` / `X-Forwarded-*` survive only from
//!    `principal.trusted_proxies`, and `X-Forwarded-For` / `-Proto` are set from what the
//!    sidecar saw; behind a trusted proxy the client it reports owns the request's shares
//!    ([`proxy::ingress::ClientAddr`]).
//! 3. [`auth`] reads who is calling: nothing, a header a trusted front proxy set, a
//!    verified JWT access token (401 without one), or the client certificate's identity.
//! 4. [`proxy::gate`]: a POST body must be one JSON-RPC message that [`jsonrpc`] scans
//!    strictly in one pass (no duplicate, look-alike or non-ASCII keys where the sidecar
//!    looks, no batches, no BOM, at most `limits.max_json_values` values), indexing the
//!    members the next steps act on (no tree of the message is built), read within its size,
//!    time and [`budget`] limits, with `Mcp-Method`/`Mcp-Name` headers that agree
//!    with it. GET and DELETE pass through only without a body; configured
//!    `passthrough_paths` are forwarded untouched.
//! 5. [`proxy::state`]: a `params.requestState` is opened by [`token`] and checked
//!    against this request's method, target, argument digest, path, audience and
//!    principal; the flow's age, the caller's revocations and each answer against the
//!    question it answers are checked ([`policy`]); when the token or the live policy
//!    says the target is single-use, it is consumed in the shared [`store`] (a replay is
//!    refused; a caller past its share gets 429, a full store, or a consumption no Redis
//!    replica confirmed, 503, the state unspent);
//!    on success the upstream's own plaintext replaces it, and
//!    `inputResponses` keys the round did not ask for are dropped ([`jsonrpc::Params`]:
//!    members are parsed only when read, edits are splices). On any failure the
//!    client gets the one frozen error and nothing is sent. The request's binding is
//!    kept for step 8; the body's members are not.
//! 6. [`tools`], for a `tools/call`: handle arguments ([`tools::handles`]) must be sealed
//!    handles of their kind that open for this caller, issued after any revocation of
//!    it, and are replaced by the upstream's raw handles (after step 5, so a state binds
//!    the arguments as the client sent them); then an idempotency key
//!    ([`tools::idempotency`]) is reserved in the shared [`store`] (an owned lease,
//!    renewed while the call is in flight, within the caller's shares), or a repeat is answered from it (replayed
//!    with its handles sealed afresh, in progress, or conflict) without the upstream.
//! 7. [`proxy::upstream`] forwards the message as the sidecar writes it from the scanned
//!    tokens, edits spliced in, its bytes held against the [`budget`] until the upstream
//!    answers (pooled client, `Host`
//!    rewritten, the fixed hop-by-hop headers dropped, identity encoding, timeouts; TLS
//!    verified for an `https://` upstream). With `upstream = "stdio"` the pooled client
//!    dials [`stdio`] in memory instead: its in-process server takes only what this step
//!    marked with the process's secret (never a passthrough request), holds it in the
//!    [`budget`] within the caller's share, writes it to the child's stdin under a random
//!    id of its own and answers with what the child wrote for that id only, so steps 2 to
//!    8 are the same for both kinds of upstream.
//! 8. [`proxy::outbound`] classifies the answer (JSON by label or by its first byte,
//!    SSE, empty, or something a 2xx answer to an MCP request may not be) and
//!    [`proxy::response`] seals every `requestState` in it, in a JSON body or event by
//!    event in an SSE stream, each scanned as strictly as a client's body and the token
//!    spliced into the upstream's bytes ([`sse`]; what a stream buffers of an incomplete event is
//!    held against the [`budget`]), bound to the request of step 5, after checking
//!    the round ([`policy::questions`], read from the answer's bytes) against the
//!    client's declared capabilities and the round limit; what
//!    cannot be sealed becomes a JSON-RPC error instead (an upstream error status and
//!    the headers a client needs are kept); an issuing tool's handle is sealed in every
//!    result (rounds too), and a complete answer in a 2xx response to an idempotent call
//!    is recorded with its status and raw handles (anything else releases its key).
//! 9. Failures become responses in one place ([`error`]); outcomes are counted in the
//!    families each component registers on the [`registry`] and owns (the data path's
//!    in [`proxy`], the tool features' in [`tools`], the key ring's in [`token`], ...;
//!    only [`app`] holds them all), served with health and readiness ([`health`]: the
//!    upstream reachable, the key ring fresh) by [`admin`] (which refuses a foreign `Host` with 421 too);
//!    [`app`] applies a reloaded configuration's live keys and names the ones that need a
//!    restart ([`config::reload`]); client text reaches logs only through
//!    [`telemetry`], and the request's audit record is written when its response body
//!    is dropped. [`version`] names the build.
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
//! | top | [`admin`], [`app`] | the admin port, the wiring and start-up |
//!
//! The steps of the journey above are numbered the same way in [`proxy`].
#![forbid(unsafe_code)]
// Every `pub` is reached through `facade`; anything else is `pub(crate)` (the tests,
// benches and fuzz targets are crates of their own, so the lint is the library's).
#![warn(unreachable_pub)]

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
