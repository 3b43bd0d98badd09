//! Rules applied to a flow: single use (and, as they arrive, client capabilities,
//! answers against questions, round and flow limits).
//!
//! Invariant: every rule here decides from the verified token and the live policy only;
//! none trusts a field of the request the token does not bind.

pub mod answers;
pub mod capabilities;
pub mod flow;
mod metrics;
pub mod questions;
pub mod revocation;
pub mod single_use;

pub use metrics::{Consumption, MrtrRefusal, PolicyMetrics};
