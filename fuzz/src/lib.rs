//! The fuzz targets' checks, one module per target, with no fuzzing engine in them: the
//! targets under `fuzz_targets/` hand each input to `checks::<target>::check`, and the
//! main crate's `tests/cases/fuzz_regressions.rs` includes the same module with `#[path]`
//! and runs every seed and reproducer under `fuzz/seeds/` and `fuzz/regressions/`.
#![forbid(unsafe_code)]

pub mod checks;
