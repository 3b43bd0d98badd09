//! Shared test plumbing: locating and driving the pinned Python MCP SDK.
pub mod python;
