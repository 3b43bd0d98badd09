//! Token core throughput: one MRTR round costs a seal (upstream answer) and an open
//! (client retry). Compare with the reference SDK's 43–63 µs (64 B) and 100–180 µs (4 KiB)
//! per round on the same machine (`../shared/mcp-wire-notes.md` §5).
//!
//! `cargo bench --bench token`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mcp_state_guard::facade::token::{
    KeyRing, RequestBinding, SealOptions, StateSealer, args_digest,
};
use serde_json::{Value, json};
use std::hint::black_box;

const SECRET: &str = "5f1c0b6a9e2d4f8a7b3c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a";
const PRINCIPAL: &str = r#"["client-1","https://issuer.example","user-42"]"#;

fn sealer() -> StateSealer {
    StateSealer::new(
        KeyRing::from_secrets(&[SECRET], "bench").unwrap(),
        Some("svc".into()),
        600,
    )
}

fn binding() -> RequestBinding {
    RequestBinding::of(
        "tools/call",
        json!({"name": "provision", "arguments": {"name": "web-1", "size": 3}}).as_object(),
    )
    .unwrap()
}

/// A JSON-ish plaintext state of `len` bytes, as a legacy server would emit.
fn state(len: usize) -> String {
    let mut s = String::from("{\"k\":\"provision\",\"tier\":\"free\",\"pad\":\"");
    while s.len() < len - 2 {
        s.push('x');
    }
    s.push_str("\"}");
    s
}

fn seal_open(c: &mut Criterion) {
    let sealer = sealer();
    let binding = binding();
    let mut group = c.benchmark_group("token");
    for size in [64usize, 4096] {
        let state = state(size);
        for (label, principal) in [("anonymous", None), ("principal", Some(PRINCIPAL))] {
            let options = SealOptions {
                principal,
                ..Default::default()
            };
            let token = sealer.seal(&state, &binding, &options);
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("seal/{label}"), size),
                &state,
                |b, s| b.iter(|| sealer.seal(black_box(s), black_box(&binding), &options)),
            );
            group.bench_with_input(
                BenchmarkId::new(format!("open/{label}"), size),
                &token,
                |b, t| {
                    b.iter(|| {
                        sealer
                            .open(black_box(t), black_box(&binding), principal)
                            .unwrap()
                    })
                },
            );
            group.bench_with_input(
                BenchmarkId::new(format!("round_trip/{label}"), size),
                &state,
                |b, s| {
                    b.iter(|| {
                        let token = sealer.seal(black_box(s), &binding, &options);
                        sealer.open(&token, &binding, principal).unwrap()
                    })
                },
            );
        }
    }
    group.finish();
}

/// An arguments object of about `len` bytes of JSON with nested values, numbers and
/// non-ASCII strings (the digest escapes and sorts all of them).
fn arguments(len: usize) -> Value {
    let mut map = serde_json::Map::new();
    let mut i = 0;
    while serde_json::to_string(&map).unwrap().len() < len {
        map.insert(
            format!("key-{i:05}-é"),
            json!({"n": i, "f": i as f64 * 0.25, "s": "wert ✓", "l": [true, null, i]}),
        );
        i += 1;
    }
    Value::Object(map)
}

fn digest(c: &mut Criterion) {
    let mut group = c.benchmark_group("args_digest");
    for size in [1024usize, 64 * 1024] {
        let args = arguments(size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &args, |b, a| {
            b.iter(|| args_digest(Some(black_box(a))).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, seal_open, digest);
criterion_main!(benches);
