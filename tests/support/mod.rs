//! Shared test plumbing: the sidecar in-process, the Python peers, a small HTTP client.
#![allow(dead_code)]

pub mod fake;
pub mod http;
pub mod legacy;
pub mod python;
pub mod sidecar;
