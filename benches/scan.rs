//! The gate's classification of a body, two ways: the tree path the proxy uses today
//! (`parse_bounded` then `classify`) and the one-pass scanner of issue 22
//! (`jsonrpc::scan`), on a typical `tools/call` retry (~1 KiB: a ~300-byte
//! `requestState`, arguments, `_meta` with declared capabilities, `inputResponses`) and on
//! a response carrying `inputRequests`.
//!
//! `cargo bench --bench scan`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mcp_state_guard::facade::jsonrpc;
use std::hint::black_box;

/// The gate's default `limits.max_json_values` is far above these bodies' counts; the
/// cap costs the same either way.
const MAX_VALUES: usize = 10_000;

fn retry() -> String {
    let state = "A".repeat(300);
    format!(
        r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"provision_server","arguments":{{"name":"web-1","size":3,"region":"eu-west-1","tags":["prod","web"],"spec":{{"cpu":4,"memory_gb":16.5,"disk":{{"size_gb":200,"kind":"ssd"}}}}}},"requestState":"{state}","inputResponses":{{"confirm":{{"action":"accept","content":{{"approved":true,"note":"go ahead"}}}},"pick_zone":{{"action":"accept","content":{{"zone":"b"}}}}}},"_meta":{{"progressToken":"tok-17","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{"form":{{}},"url":{{}}}},"sampling":{{"tools":{{}}}},"roots":{{"listChanged":true}}}}}},"idempotencyKey":"0b6f3e2c-7a41-4c2e-9d1a-5f3b2e8c9a10"}}}}"#
    )
}

fn response() -> String {
    r#"{"jsonrpc":"2.0","id":"srv-9","result":{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create","params":{"mode":"form","message":"Provision web-1 (4 CPU, 16.5 GB) in eu-west-1?","requestedSchema":{"type":"object","properties":{"approved":{"type":"boolean","title":"Approve"},"note":{"type":"string","maxLength":200}},"required":["approved"]}}},"pick_zone":{"method":"elicitation/create","params":{"mode":"form","message":"Which zone?","requestedSchema":{"type":"object","properties":{"zone":{"type":"string","enum":["a","b","c"]}}}}}}}}"#.to_owned()
}

fn gate(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");
    for (name, body) in [("retry", retry()), ("response", response())] {
        let body = body.into_bytes();
        let tree = jsonrpc::parse_bounded(&body, MAX_VALUES).and_then(|v| jsonrpc::classify(&v));
        let scanned = jsonrpc::scan(&body, MAX_VALUES)
            .map(|s| s.into_message())
            .map_err(|r| r.error);
        assert_eq!(scanned, tree, "{name}: the paths disagree");
        assert!(tree.is_ok(), "{name}: {tree:?}");
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("tree", name), &body, |b, body| {
            b.iter(|| {
                let value = jsonrpc::parse_bounded(black_box(body), MAX_VALUES).unwrap();
                jsonrpc::classify(&value).unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("scan", name), &body, |b, body| {
            b.iter(|| jsonrpc::scan(black_box(body), MAX_VALUES).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, gate);
criterion_main!(benches);
