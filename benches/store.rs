//! The memory store (`single_use.store = "memory"`): what one consumption costs, and how
//! much resident memory its bound (`memory_max_entries`, 1,000,000 by default) implies.
//!
//! Memory first, in this still small process: VmRSS (`/proc/self/status`) once the store
//! is built, then with 100,000 and with 1,000,000 live ids (one store, filled in two
//! steps). Ids are 16 bytes like the real ones (the first 16 bytes of a SHA-256),
//! remembered for 10 minutes, so none expires during the run. Then criterion
//! times `consume` on that full store: a fresh id (released again, untimed, after each
//! sample, so the store stays at 1,000,000) and a replayed one.
//!
//! Then idempotency records (`idempotency.*`): 100,000 of them, each a 32-hex-character
//! key and a recorded answer of about 300 bytes, held by 1,000 callers, in the same
//! store: resident memory added per record against what the store charges for it
//! (`RECORD_OVERHEAD_BYTES` plus its key and value), to check that the byte budget
//! (`idempotency.memory_max_bytes`) does not under-count.
//!
//! `cargo bench --bench store [-- --quick]`

use criterion::{Criterion, Throughput};
use mcp_state_guard::facade::store::memory::{MemoryStore, RECORD_OVERHEAD_BYTES, RecordBounds};
use mcp_state_guard::facade::store::{Consumed, ConsumptionId};
use sha2::{Digest, Sha256};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Ten times `single_use.memory_max_entries`'s default (100 000): a busy replica's bound.
const BOUND: usize = 1_000_000;
const TTL: Duration = Duration::from_secs(600);
const MIB: f64 = 1024.0 * 1024.0;

/// The first 16 bytes of a SHA-256 of `n`.
fn digest(n: u64) -> [u8; 16] {
    Sha256::digest(n.to_le_bytes())[..16]
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

/// The `n`th id: 16 bytes of a digest, as `Opened::consumption_id` makes them.
fn id(n: u64) -> ConsumptionId {
    ConsumptionId(digest(n))
}

/// The owner of the `n`th id: one of a thousand callers, named as
/// `store::Owner` names them (32 hex characters).
fn owner(n: u64) -> String {
    hex::encode(digest(u64::MAX / 2 - n % 1000))
}

/// The owner of the timed consumptions.
const OWNER: &str = "0123456789abcdef0123456789abcdef";

/// `VmRSS` and `VmHWM` (peak) of this process, in bytes.
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("{name} in /proc/self/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Fill a store to [`BOUND`] live ids, printing resident memory on the way.
/// Returns it, full, for the timing. Its own bound is twice the default so that the
/// fresh consumptions timed afterwards are never refused.
fn fill_and_measure() -> MemoryStore {
    let store = MemoryStore::with_record_bounds(
        2 * BOUND,
        RecordBounds {
            max_bytes: 1 << 40,
            per_owner: 1_000_000,
            per_owner_bytes: 1 << 40,
        },
    );
    let (before, _) = resident();
    println!(
        "Memory store, resident memory per live id (VmRSS from /proc/self/status, \
         before: {:.1} MiB):\n",
        before as f64 / MIB
    );
    println!("| live ids | resident added | bytes per id | peak added |");
    println!("| ---: | ---: | ---: | ---: |");
    let mut inserted = 0u64;
    for target in [BOUND / 10, BOUND] {
        while inserted < target as u64 {
            let fresh = store.consume(id(inserted), TTL, &owner(inserted));
            assert_eq!(fresh, Ok(Consumed::Fresh), "id {inserted}");
            inserted += 1;
        }
        // Runs moka's pending maintenance, so what is counted is what stays.
        assert_eq!(store.len(), target);
        let (rss, peak) = resident();
        let added = rss.saturating_sub(before);
        println!(
            "| {target} | {:.1} MiB | {:.0} | {:.1} MiB |",
            added as f64 / MIB,
            added as f64 / target as f64,
            peak.saturating_sub(before) as f64 / MIB,
        );
        if target == BOUND {
            println!(
                "\nA bound of memory_max_entries = {BOUND} holds about {:.0} MiB \
                 resident when full.\n",
                added as f64 / MIB,
            );
        }
    }
    store
}

/// Fill `store` with 100,000 recorded answers and print what they cost resident
/// against what the store charges for them.
fn measure_records(store: &MemoryStore) {
    const RECORDS: u64 = 100_000;
    let answer = format!(
        "a:{}:200:{{\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}],\"isError\":false}}}}",
        "d".repeat(64),
        "x".repeat(170)
    );
    let (before, _) = resident();
    for n in 0..RECORDS {
        let key = hex::encode(digest(u64::MAX - n));
        let reserved = format!("p:{}:{}", "d".repeat(64), "0".repeat(32));
        let owner = hex::encode(digest(n % 1000));
        assert_eq!(
            store.reserve_record(&key, &reserved, TTL, &owner, 1_048_576),
            Ok(None)
        );
        assert!(store.swap_record(&key, &reserved, Some(&answer), TTL));
    }
    let charged = store.record_bytes();
    let (rss, _) = resident();
    let added = rss.saturating_sub(before);
    println!(
        "Idempotency records ({} bytes of answer each, {RECORDS} of them): resident added \
         {:.1} MiB, {:.0} B per record; charged {:.1} MiB, {:.0} B per record \
         (RECORD_OVERHEAD_BYTES = {RECORD_OVERHEAD_BYTES}).\n",
        answer.len(),
        added as f64 / MIB,
        added as f64 / RECORDS as f64,
        charged as f64 / MIB,
        charged as f64 / RECORDS as f64,
    );
}

fn consume(c: &mut Criterion, store: &MemoryStore) {
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));
    // Ids never used by the fill, so every one is fresh.
    let mut next = BOUND as u64;
    group.bench_function("consume/fresh, 1M live", |b| {
        b.iter_custom(|iters| {
            let ids: Vec<ConsumptionId> = (0..iters).map(|i| id(next + i)).collect();
            next += iters;
            let started = Instant::now();
            let fresh = ids
                .iter()
                .filter(|&&i| store.consume(black_box(i), TTL, OWNER) == Ok(Consumed::Fresh))
                .count();
            let elapsed = started.elapsed();
            assert_eq!(fresh as u64, iters, "every id was fresh");
            for &i in &ids {
                store.release(i);
            }
            assert_eq!(store.len(), BOUND);
            elapsed
        })
    });
    let mut seen = 0u64;
    group.bench_function("consume/replayed, 1M live", |b| {
        b.iter_custom(|iters| {
            let ids: Vec<ConsumptionId> =
                (0..iters).map(|i| id((seen + i) % BOUND as u64)).collect();
            seen += iters;
            let started = Instant::now();
            let replayed = ids
                .iter()
                .filter(|&&i| store.consume(black_box(i), TTL, OWNER) == Ok(Consumed::Replayed))
                .count();
            let elapsed = started.elapsed();
            assert_eq!(replayed as u64, iters, "every id was replayed");
            elapsed
        })
    });
    group.finish();
}

fn main() {
    // Before criterion allocates anything, so the baseline is this process at rest.
    let store = fill_and_measure();
    measure_records(&store);
    let mut criterion = Criterion::default().configure_from_args();
    consume(&mut criterion, &store);
    criterion.final_summary();
}
