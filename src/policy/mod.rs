//! Rules applied to a flow: single use (and, as they arrive, client capabilities,
//! answers against questions, round and flow limits).
//!
//! Invariant: every rule here decides from the verified token and the live policy only;
//! none trusts a field of the request the token does not bind.

pub(crate) mod answers;
pub(crate) mod capabilities;
pub(crate) mod flow;
mod metrics;
pub(crate) mod questions;
pub(crate) mod revocation;
pub(crate) mod single_use;

pub use metrics::Consumption;
pub use metrics::MrtrRefusal;
pub use metrics::PolicyMetrics;
