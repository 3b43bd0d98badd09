//! The performance harness: the same MRTR workload (a `tools/call` first call whose
//! ~200-byte state gets sealed; its retry, whose token gets opened and checked) sent
//! (A) to a fast upstream directly, (B) through mcp-state-guard (this build, keys, an
//! audience, a header principal), (C) through nginx as a plain reverse proxy with
//! upstream keep-alive and (D) through a bare hyper proxy built like the sidecar but
//! only forwarding (the floor of its stack, `bare.rs`), in one run, JSON and SSE answers:
//!
//! - throughput: wrk, one thread, 64 connections, the servers of a row in interleaved
//!   rounds (1 s each after a 1 s warm-up, six, or two with `--quick`; `wrk.rs`), the
//!   median of each server's;
//! - latency: the harness's own open-loop generator at a fixed rate (2 000 req/s by
//!   default, 16 connections, 5 s after 1 s), each request timed from when it was due,
//!   p50 / p99 / p99.9;
//! - single-use on (memory and Redis stores; Redis alone, and a primary whose replica
//!   confirms each consumption, `WAIT`, the default with a replica): the retry with a
//!   fresh token each time; and the same feed through the plain sidecar, the control
//!   that tells the store's cost from the feed's, taken in the same rounds as the
//!   memory store's row (the floor beside both);
//! - a JWT principal (`jwt.rs`: RS256, the keys in a JWKS file): the first call and the
//!   retry through a sidecar that verifies every request's access token;
//! - memory: the sidecar's idle RSS, and per open idle SSE stream with 10 000 of them
//!   held through it (nginx and the bare hyper proxy beside it);
//! - allocations per request in the sidecar, counted in-process.
//!
//! `-- --memory` measures only the memory table (no load before the streams).
//! `-- --instructions` measures only instructions per request instead: B and D under
//! callgrind, one worker thread each (`instructions.rs`). `-- --ab OTHER` compares this
//! build with another on the CPU (`ab.rs`). `-- --train SIDECAR` runs the workload a
//! profile-guided build learns from through that binary, `-- --train-floor` the floor's
//! (`train.rs`).
//!
//! The generator (this process, and wrk) runs on core 0; upstream, proxy and redis share
//! core 1 (`taskset`), as the servers of a sidecar pod would share its CPU. Every process
//! started is killed on exit, on error or on panic. Prints Markdown tables.
//!
//! `cargo bench --bench harness [-- --quick] [-- --rate N] [-- --memory] [-- --instructions]
//! [-- --ab OTHER [--rounds N]] [-- --train SIDECAR | --train-floor [--requests N] [--profiles DIR]]`;
//! `HARNESS_SIDECAR_BIN=path` measures another build of the sidecar as B,
//! `HARNESS_BARE_BIN=path` another build of this harness as D.
//! Linux, 2+ cores; installs nginx, wrk and redis-server (or, for `--instructions`,
//! valgrind) with apt when missing (root).

mod ab;
mod allocs;
mod bare;
mod generator;
mod instructions;
mod jwt;
mod memory;
mod procs;
mod report;
mod setup;
mod stdio;
mod train;
mod upstream;
mod wrk;

use bytes::Bytes;
use generator::{Bodies, Outcome, Target};
use procs::Children;
use serde_json::json;
use setup::{Setup, loopback, sidecar_config, spawn_sidecar, start};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every role of this executable (the upstream A, the floor D, the clients) allocates
/// through jemalloc, as the sidecar does (`src/main.rs`): D is the sidecar's stack with
/// nothing on it, and the allocator is part of that stack (it decides, among other
/// things, what an idle stream costs in RSS). Counted, for the allocation rows.
#[global_allocator]
static ALLOCATOR: stats_alloc::StatsAlloc<tikv_jemallocator::Jemalloc> =
    stats_alloc::StatsAlloc::new(tikv_jemallocator::Jemalloc);

/// The open streams held through each proxy for the memory row.
const STREAMS: usize = 10_000;
/// Connections of the open-loop generator.
const OPEN_LOOP_CONNECTIONS: usize = 16;

struct Settings {
    warmup: Duration,
    /// The open loop's measured span.
    measure: Duration,
    /// wrk's interleaved rounds for throughput.
    rounds: wrk::Rounds,
    rate: u32,
    streams: usize,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if upstream::run_if_asked(&args) || stdio::run_if_asked(&args) {
        return ExitCode::SUCCESS;
    }
    if let Some(i) = args.iter().position(|a| a == "--role-bare-proxy") {
        let port = |k: usize| -> u16 {
            args.get(i + k)
                .and_then(|p| p.parse().ok())
                .expect("two ports")
        };
        bare::run(port(1), port(2));
        return ExitCode::SUCCESS;
    }
    if let Some(trained) = train::run_if_asked(&args) {
        return trained;
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--instructions") {
        return count_instructions(quick);
    }
    if args.iter().any(|a| a == "--memory") {
        return memory::run(&settings(&[], quick));
    }
    if let Some(i) = args.iter().position(|a| a == "--ab") {
        let Some(other) = args.get(i + 1) else {
            eprintln!("harness: --ab needs the path of the other build's binary");
            return ExitCode::FAILURE;
        };
        let rounds = (args.iter().position(|a| a == "--rounds"))
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(10);
        return match ab::run(other.into(), rounds) {
            Ok(table) => {
                println!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("harness: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = settings(&args, quick);
    let wall = Instant::now();
    match run(&settings) {
        Ok(report) => {
            println!("{report}");
            println!("wall time: {:.0} s", wall.elapsed().as_secs_f64());
            if report.contains("ERRORS") {
                eprintln!("harness: some requests failed (see the tables)");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The run's settings from its arguments (`--quick`, `--rate N`).
fn settings(args: &[String], quick: bool) -> Settings {
    let rate = args
        .iter()
        .position(|a| a == "--rate")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(2000);
    Settings {
        warmup: Duration::from_secs(1),
        measure: Duration::from_secs(if quick { 2 } else { 5 }),
        rounds: wrk::Rounds {
            warmup: Duration::from_secs(1),
            count: if quick { 2 } else { 6 },
            each: Duration::from_secs(1),
        },
        rate,
        // Two sockets per stream in the proxy (client and upstream), within its limit of
        // open files with room to spare (the pools, the listeners, the logs).
        streams: STREAMS
            .min((procs::nofile() as usize).saturating_sub(2000) / 2)
            .min(if quick { 2000 } else { STREAMS }),
    }
}

/// `--instructions`: B's and D's instructions per request under callgrind, and only
/// that (`instructions.rs`).
fn count_instructions(quick: bool) -> ExitCode {
    let counts = instructions::Counts {
        warmup: if quick { 100 } else { 200 },
        measured: if quick { 500 } else { 2000 },
    };
    let wall = Instant::now();
    match instructions::run(&counts) {
        Ok(table) => {
            println!("{table}");
            println!("wall time: {:.0} s", wall.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(settings: &Settings) -> Result<String, String> {
    with_servers(|setup, runtime, dir| {
        let report = runtime.block_on(measure(settings, setup, dir))?;
        let allocations = runtime.block_on(allocs::per_request(dir))?;
        Ok(format!("{report}\n{allocations}"))
    })
}

/// Every server of a run started (`setup::start`) in a temporary directory, `work` done
/// with them on a current-thread runtime, then each checked still alive; all of them
/// stopped however it ends.
fn with_servers<T>(
    work: impl FnOnce(&Setup, &tokio::runtime::Runtime, &Path) -> Result<T, String>,
) -> Result<T, String> {
    procs::ensure_tools()?;
    procs::pin_self()?;
    procs::in_temp_dir(|dir| {
        let mut children = Children::default();
        let setup = start(&mut children, dir)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let done = work(&setup, &runtime, dir)?;
        children.check_alive()?;
        Ok(done)
    })
}

/// The `tools/call provision` a 2026-07-28 client sends; with a state, its retry.
pub fn request_body(state: Option<&str>) -> Bytes {
    let extra = state.map_or_else(|| json!({}), generator::retry_params);
    generator::call_body(&json!(1), "provision", json!({"name": "web-1"}), extra)
}

/// The `requestState` of a first call's answer (JSON, or the `data:` of an SSE event).
fn state_of(answer: &[u8]) -> Result<String, String> {
    let message = generator::message_of(answer)?;
    message["result"]["requestState"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no requestState in {message}"))
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    First,
    Retry,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::First => "first call (seal)",
            Phase::Retry => "retry (verify)",
        }
    }

    fn expect(self) -> &'static str {
        match self {
            Phase::First => "\"resultType\":\"input_required\"",
            Phase::Retry => "\"resultType\":\"complete\"",
        }
    }
}

const WORKLOADS: [(&str, &str); 2] = [("JSON", "/mcp"), ("SSE", "/mcp/sse")];
/// The single-use section of the memory-store sidecar. The harness is one caller (one
/// principal) spending tens of thousands of states within their lifetime: its share of
/// the memory store is the whole store, as a single-tenant deployment would set it (the
/// default share is a fraction, so the row would measure 429s).
const SINGLE_USE_MEMORY: &str = "[single_use]\ntools = [\"provision\"]\nstore = \"memory\"\n\
     memory_max_entries = 1000000\nmax_entries_per_principal = 1000000\n";
/// The upstream's plaintext state holds this; a sealed answer must not. The quote is
/// part of it: every letter of `team-a` is in base64url's alphabet, so a token carries
/// the word by chance about once in 10^8 (a full run mints a million), and no token
/// carries a quote, while the state in the clear has one before the word however it is
/// written (`"owner":"team-a"`, or escaped in a string, `\"owner\":\"team-a\"`).
const PLAINTEXT_MARK: &str = "\"team-a";

struct Row {
    workload: &'static str,
    phase: Phase,
    /// Direct, sidecar, nginx, the hyper floor (None where a row has no such column).
    rps: [Option<wrk::Throughput>; 4],
    latency: [Option<Outcome>; 4],
}

async fn measure(settings: &Settings, setup: &Setup, dir: &Path) -> Result<String, String> {
    // Every server warm (pages touched, pools filled, caches hot) before any row counts:
    // without this the first row measured start-up.
    let file = dir.join("body.json");
    std::fs::write(&file, request_body(None)).map_err(|e| format!("body file: {e}"))?;
    for addr in [setup.direct, setup.sidecar, setup.nginx, setup.bare] {
        let target = Target {
            addr,
            path: WORKLOADS[0].1,
            expect: Phase::First.expect(),
            forbid: None,
        };
        let script = dir.join("wrk.lua");
        wrk::run(
            &target,
            wrk::WrkBody::Same(&file),
            2 * settings.warmup,
            &script,
        )?;
    }
    let mut rows = Vec::new();
    for (workload, path) in WORKLOADS {
        for phase in [Phase::First, Phase::Retry] {
            let mut row = Row {
                workload,
                phase,
                rps: [None, None, None, None],
                latency: [None, None, None, None],
            };
            let what = |e| format!("{workload} {}: {e}", phase.label());
            let (mut contenders, mut bodies) = (Vec::new(), Vec::new());
            for (i, addr) in [setup.direct, setup.sidecar, setup.nginx, setup.bare]
                .into_iter()
                .enumerate()
            {
                let target = Target {
                    addr,
                    path,
                    expect: phase.expect(),
                    forbid: (i == 1 && phase == Phase::First).then_some(PLAINTEXT_MARK),
                };
                let body = match phase {
                    Phase::First => request_body(None),
                    // A, C and D forward the upstream's own plaintext; B needs its token.
                    Phase::Retry if i == 1 => minted_retry(&target).await?,
                    Phase::Retry => request_body(Some(upstream::STATE)),
                };
                contenders.push(
                    checked(target, &body, dir, &i.to_string())
                        .await
                        .map_err(what)?,
                );
                bodies.push(body);
            }
            let rps = wrk::interleaved(&contenders, settings.rounds).map_err(what)?;
            for (i, (rps, body)) in rps.into_iter().zip(bodies).enumerate() {
                let latency = latency(settings, &contenders[i].target, &Bodies::Same(body))
                    .await
                    .map_err(what)?;
                row.rps[i] = Some(rps);
                row.latency[i] = Some(latency);
            }
            rows.push(row);
        }
    }
    // The fastest round of the JSON retry, through the sidecar or the floor: the single-use
    // rows feed both the same files of tokens, so each file must outlast either.
    let retry_rps = rows
        .iter()
        .find(|r| r.workload == "JSON" && r.phase == Phase::Retry)
        .map_or(10_000.0, |r| {
            [&r.rps[1], &r.rps[3]]
                .into_iter()
                .flatten()
                .flat_map(|t| t.rounds.iter().copied())
                .fold(0.0, f64::max)
        });
    // Rows with a sidecar column only: single use, the stdio upstream, a JWT principal;
    // each taken in turn with the floor's JSON row of its phase.
    // The control (the plain sidecar fed as the single-use rows are: a token of its own
    // for each request, from the same kind of files) and the memory store's single use
    // in the same rounds, so that single use's own cost reads as the one's figure beside
    // the other's, with no drift of the machine between them; the Redis rows apart.
    let mut single_use = single_use_rows(
        settings,
        setup,
        &[
            ("retry, a fresh token each (no single use)", setup.sidecar),
            ("retry, single-use (memory)", setup.memory),
        ],
        retry_rps,
        dir,
    )
    .await?;
    for sidecar in [
        ("retry, single-use (Redis)", setup.redis),
        (
            "retry, single-use (Redis + replica, WAIT)",
            setup.redis_replicated,
        ),
    ] {
        single_use.extend(single_use_rows(settings, setup, &[sidecar], retry_rps, dir).await?);
    }
    single_use.extend(sidecar_rows(settings, setup, setup.stdio, "stdio upstream (E)", dir).await?);
    single_use.extend(sidecar_rows(settings, setup, setup.jwt, "JWT principal", dir).await?);
    let after_load_rss = procs::rss(setup.sidecar_pid)?;
    // A failure here (a proxy out of sockets) is reported with the tables, not instead.
    let streams = memory::hold_streams(settings, setup).await;
    Ok(report::markdown(
        settings,
        &mut rows,
        &mut single_use,
        setup,
        after_load_rss,
        &streams,
    ))
}

/// A row with a sidecar column only (single use, a stdio upstream, a JWT principal): its
/// throughput taken in turn with the floor's on the JSON workload of the same phase.
struct SidecarRow {
    label: String,
    phase: Phase,
    rps: wrk::Throughput,
    floor: wrk::Throughput,
    latency: Outcome,
}

/// The floor (D) on the JSON workload in `phase`, checked, as a contender beside a row.
async fn floor_contender(
    setup: &Setup,
    phase: Phase,
    dir: &Path,
) -> Result<wrk::Contender, String> {
    let target = Target {
        addr: setup.bare,
        path: WORKLOADS[0].1,
        expect: phase.expect(),
        forbid: None,
    };
    let body = match phase {
        Phase::First => request_body(None),
        Phase::Retry => request_body(Some(upstream::STATE)),
    };
    checked(target, &body, dir, "floor").await
}

/// The JSON workload's first call and retry through the sidecar at `addr` (the retry with
/// a token it minted), labelled `<phase>, <what>` for the report.
async fn sidecar_rows(
    settings: &Settings,
    setup: &Setup,
    addr: SocketAddr,
    what: &str,
    dir: &Path,
) -> Result<Vec<SidecarRow>, String> {
    let mut rows = Vec::new();
    for phase in [Phase::First, Phase::Retry] {
        let label = format!("{}, {what}", phase.label());
        let what = |e| format!("{what} {}: {e}", phase.label());
        let target = Target {
            addr,
            path: WORKLOADS[0].1,
            expect: phase.expect(),
            forbid: (phase == Phase::First).then_some(PLAINTEXT_MARK),
        };
        let body = match phase {
            Phase::First => request_body(None),
            Phase::Retry => minted_retry(&target).await?,
        };
        let contenders = [
            checked(target, &body, dir, "row").await.map_err(what)?,
            floor_contender(setup, phase, dir).await.map_err(what)?,
        ];
        let [rps, floor] =
            <[_; 2]>::try_from(wrk::interleaved(&contenders, settings.rounds).map_err(what)?)
                .map_err(|_| "two contenders, two figures".to_owned())?;
        let latency = latency(settings, &contenders[0].target, &Bodies::Same(body))
            .await
            .map_err(what)?;
        rows.push(SidecarRow {
            label,
            phase,
            rps,
            floor,
            latency,
        });
    }
    Ok(rows)
}

/// The open loop's latency at `target`, each request carrying what `bodies` gives.
async fn latency(settings: &Settings, target: &Target, bodies: &Bodies) -> Result<Outcome, String> {
    generator::open_loop(
        target,
        bodies,
        settings.rate,
        settings.warmup,
        settings.measure,
        OPEN_LOOP_CONNECTIONS,
    )
    .await
}

/// A retry of the workload through a sidecar, with the token it mints for `target`.
async fn minted_retry(target: &Target) -> Result<Bytes, String> {
    let first = Target {
        expect: Phase::First.expect(),
        ..target.clone()
    };
    let answers = generator::closed_loop(&first, request_body(None), 1, 1).await?;
    Ok(request_body(Some(&state_of(&answers[0])?)))
}

/// `target` as a contender sending `body` again and again, after one checked exchange (a
/// wrong answer fails the run, not a row).
async fn checked(
    target: Target,
    body: &Bytes,
    dir: &Path,
    tag: &str,
) -> Result<wrk::Contender, String> {
    generator::closed_loop(&target, body.clone(), 1, 1).await?;
    wrk::Contender::same(target, body, dir, tag)
}

/// Sidecars' retries, each with a token of its own minted through that sidecar just
/// before, taken in the same rounds beside the floor (so a drift of the machine falls on
/// all of them alike): wrk's throughput and the open loop's latency, a row each.
async fn single_use_rows(
    settings: &Settings,
    setup: &Setup,
    sidecars: &[(&str, SocketAddr)],
    retry_rps: f64,
    dir: &Path,
) -> Result<Vec<SidecarRow>, String> {
    let (_, path) = WORKLOADS[0];
    let first = |addr| Target {
        addr,
        path,
        expect: Phase::First.expect(),
        forbid: Some(PLAINTEXT_MARK),
    };
    let retry = |addr| Target {
        expect: Phase::Retry.expect(),
        forbid: None,
        ..first(addr)
    };
    let mint = |addr, count: usize| {
        let first = first(addr);
        async move {
            let answers = generator::closed_loop(&first, request_body(None), count, 32).await?;
            answers
                .iter()
                .map(|a| Ok(request_body(Some(&state_of(a)?))))
                .collect::<Result<Vec<_>, String>>()
        }
    };
    // wrk: a file of tokens for each round and sidecar, each enough for 1.5× the fastest
    // round of the reusable retry; one line each.
    let rounds = settings.rounds;
    let per_round = (retry_rps * 1.5 * rounds.each.as_secs_f64()) as usize + 1000;
    let mut contenders = Vec::new();
    let mut floor_files = None;
    for (k, &(_, addr)) in sidecars.iter().enumerate() {
        let bodies = mint(addr, per_round * rounds.count).await?;
        let mut files = Vec::new();
        for (round, chunk) in bodies.chunks(per_round).enumerate() {
            let file = dir.join(format!("tokens-{k}-{round}.jsonl"));
            let mut lines = Vec::with_capacity(chunk.iter().map(|b| b.len() + 1).sum());
            for body in chunk {
                lines.extend_from_slice(body);
                lines.push(b'\n');
            }
            std::fs::write(&file, lines).map_err(|e| format!("token file: {e}"))?;
            files.push(file);
        }
        floor_files.get_or_insert_with(|| (files.clone(), bodies[0].clone()));
        contenders.push(wrk::Contender {
            target: retry(addr),
            feed: wrk::Feed::EachRound(files),
            script: dir.join("wrk-row.lua"),
        });
    }
    // The floor is sent the very same bodies, a file a round, through the same script:
    // with one body sent again and again its wrk would do less work a request than the
    // sidecars' (about 2 % more requests a second on this machine), and the ratio would
    // charge that to the sidecars. The floor does not read the tokens; its upstream
    // answers any retry.
    let (files, body) = floor_files.ok_or("no sidecar to measure")?;
    let floor = floor_contender(setup, Phase::Retry, dir).await?;
    generator::closed_loop(&floor.target, body, 1, 1).await?;
    contenders.push(wrk::Contender {
        feed: wrk::Feed::EachRound(files),
        ..floor
    });
    let labels = sidecars
        .iter()
        .map(|(label, _)| *label)
        .collect::<Vec<_>>()
        .join(", ");
    let mut taken = wrk::interleaved(&contenders, rounds).map_err(|e| format!("{labels}: {e}"))?;
    let floor = taken.pop().ok_or("the floor's figure")?;
    let count = (f64::from(settings.rate) * (settings.warmup + settings.measure).as_secs_f64())
        as usize
        + 1;
    let mut rows = Vec::new();
    for (&(label, addr), rps) in sidecars.iter().zip(taken) {
        let bodies = Bodies::Each(Arc::new(mint(addr, count).await?));
        rows.push(SidecarRow {
            label: label.to_owned(),
            phase: Phase::Retry,
            rps,
            floor: floor.clone(),
            latency: latency(settings, &retry(addr), &bodies).await?,
        });
    }
    Ok(rows)
}
