//! The one integration test binary: real peers (the Python MCP SDK) and in-process sidecars.
mod cases;
mod support;
