//! Integration cases. The modules of the first group are the guarantees of the security
//! model, in the order of its table in docs/security-model.md ("What is protected, against whom, and
//! the test that proves it"), each named by the guarantee it proves; `security_model`
//! checks that table against these files. The second group is everything else: what the
//! sidecar must not break, how it is run and observed, and the peers it interoperates with.

// The client never sees the upstream's state.
mod sealing;
// What cannot be sealed (or read as a client would) is never shown.
mod unsealable;
// An upstream answer is classified before the client may read it.
mod response_classes;
// No state reaches the upstream unless this sidecar sealed and verified it.
mod tampering;
// A token opens only for the request it was minted for.
mod request_binding;
// A token opens only for the caller it was minted for ...
mod caller_binding;
// ... with callers verified by a JWT ...
mod jwt;
// ... or by a client certificate.
mod mtls;
// Every failure looks the same, and no token or state is logged.
mod audit;
// A single-use target runs at most once per token; a store outage fails closed.
mod single_use;
// ... and a failover of the store loses no consumption, write record or revocation.
mod store_failover;
// Answers go only to the questions a verified round asked.
mod answers;
// A revoked caller's flows stop on every replica.
mod revocation;
// A handle is used only by its owner, within its TTL.
mod handles;
// An idempotent write is applied once per completed answer.
mod idempotency;
// The upstream receives only messages that parse one way ...
mod parser_differentials;
// ... whatever look-alike spellings a name has ...
mod look_alikes;
// ... on a corpus nobody here wrote ...
mod json_corpus;
// ... framed one way ...
mod framing;
// ... and clean.
mod clean_requests;
// Only requests addressed to this service; forwarding and identity headers only from
// trusted proxies; the admin listener for local names only.
mod ingress;
// A reload applies what it counts as applied.
mod reload;
// Memory, connections and time per client are bounded.
mod bounded_resources;
// One caller cannot starve or weaken another.
mod fairness;
// Several callers on one keep-alive connection.
mod one_connection;
// Faults end in one answer per accepted request, and the sidecar recovers.
mod faults;
mod upstream_faults;
// A stdio server behind the sidecar gets every protection, and its answers reach only
// their caller.
mod stdio_upstream;
// ... within the memory budget and its shares, whatever the child writes ...
mod stdio_bounds;
// ... and in 2025-era sessions, each with a child of its own, named only for its caller.
mod stdio_sessions;

// Not guarantees of the security model (the allow-list in `security_model`).
mod cli;
mod conformance;
mod fuzz_regressions;
mod helm;
mod image;
mod interop;
mod jwt_interop;
mod layers;
mod observability;
mod operations;
mod passthrough;
mod security_model;
mod stdio_conformance;
mod stdio_everything;
mod tls;
mod token_interop;
mod ts_conformance;
mod ts_upstream;
