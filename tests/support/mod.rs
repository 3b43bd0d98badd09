//! Shared test plumbing: the sidecar in-process, the Python and TypeScript peers, a real
//! Redis, a small HTTP client.
#![allow(dead_code)]

pub mod capture;
pub mod conformance;
pub mod fake;
pub mod flow;
pub mod helm;
pub mod http;
pub mod image;
pub mod interop;
pub mod legacy;
pub mod load;
pub mod peer;
pub mod pki;
pub mod process;
pub mod prometheus;
pub mod python;
pub mod redis;
pub mod redis_ha;
pub mod sidecar;
pub mod tls;
pub mod ts;
