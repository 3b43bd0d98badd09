#![no_main]
//! See `mcp_state_guard_fuzz::checks::upstream` for the input format and the invariants.

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_state_guard_fuzz::checks::upstream::check(data));
