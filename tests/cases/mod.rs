//! Integration cases, one module per capability.
mod smoke;
mod token_interop;
