//! One module per fuzz target; each `check(data)` panics when an invariant breaks.
//! Shared by the fuzz targets and by the main crate's regression test
//! (`tests/cases/fuzz_regressions.rs`), so there is one copy of every check.

pub mod answers;
pub mod gate;
pub mod oracle;
pub mod proxy;
pub mod ring;
pub mod scan;
pub mod sealing;
pub mod sse;
pub mod token_open;
pub mod upstream;
pub mod visible;

/// `data` cut into a header of `n` bytes and the rest (the header zero-padded when the
/// input is shorter), so any input is a valid one.
fn split_header<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut head = [0u8; N];
    let n = data.len().min(N);
    head[..n].copy_from_slice(&data[..n]);
    (head, &data[n..])
}
