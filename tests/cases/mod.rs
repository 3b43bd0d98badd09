//! Integration cases, one module per capability.
mod token_interop;
