//! Integration cases, one module per capability.
mod cli;
mod conformance;
mod e2e;
mod fake_upstream;
mod hostile;
mod hygiene;
mod ingress;
mod interop;
mod path_binding;
mod resources;
mod response_classes;
mod response_edges;
mod single_use;
mod smoke;
mod token_interop;
mod ts_conformance;
mod ts_upstream;
