//! The soak: at least a million mixed requests through the release sidecar at a steady
//! rate, every answer checked, the sidecar watched for growth.
//!
//! The sidecar (this build's binary, as a child process) runs as a deployment would:
//! keys, an audience, a header principal from a trusted front proxy, single-use for
//! `approve` and idempotency for `record` in the memory store (or Redis: `SOAK_STORE=redis`
//! starts a `redis-server` on a free loopback port), handles issued by `start_import`
//! and accepted by `append_rows`, and the admin revocation endpoint. Its upstream is the
//! harness's fast MRTR server (`benches/harness/upstream.rs`). The mix ([`flows`]):
//! first calls and their retries (JSON and SSE), tampered tokens, single-use retries and
//! their replays, issued handles used and tampered, idempotent writes and their repeats,
//! and about once a second a caller revoked between minting and presenting a state and
//! a handle; each answer is checked for its one expected outcome (status, JSON-RPC
//! result or error code).
//!
//! The open loop (the harness's generator: 32 keep-alive connections, each request timed
//! from when it was due) runs on core 0; upstream, sidecar (and redis) share core 1.
//! Tokens and handles live 10 s and idempotency records 30 s, so every store turns over
//! many times during the run: the warm-up (the first 10 % of the requests, and at least
//! twice the 90 s a consumed single-use id is kept: its token's life plus 60 s of skew)
//! ends when the stores are full to their steady state and the heap has settled around
//! them (the stores' counts are steady after one such span; in three runs' courses the
//! resident memory rose through the minutes after it, then held). After it, the sidecar
//! must hold its resident memory within 10 %; idle before and after the load (client
//! connections closed, the upstream pool's idle connections expired) its open files and
//! alive tasks must be the same, with nothing in flight; and no answer may differ from
//! what its request expects. Prints a Markdown report; exits non-zero when a criterion
//! fails.
//!
//! `cargo bench --bench soak`; `SOAK_REQUESTS` (default 1 000 000), `SOAK_RATE` (req/s,
//! default 2 000), `SOAK_STORE` (`memory` or `redis`), `SOAK_SIDECAR_BIN` (another
//! build of the sidecar). Linux, 2+ cores. Not part of `tests/run.sh`.

// The harness's modules, shared: the soak uses part of each.
#[allow(dead_code)]
#[path = "../harness/generator.rs"]
mod generator;
#[allow(dead_code)]
#[path = "../harness/procs.rs"]
mod procs;
#[allow(dead_code)]
#[path = "../harness/upstream.rs"]
mod upstream;

mod admin;
mod flows;
mod log;
mod report;
mod samples;

use flows::Mix;
use generator::Schedule;
use procs::Children;
use samples::{Sample, Sampler};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// Keep-alive connections of the open loop.
pub const CONNECTIONS: usize = 32;
/// The sidecar's token and handle lifetime, and its idempotency records'.
const TOKEN_SECONDS: u64 = 10;
const RECORD_SECONDS: u64 = 30;
/// How long a consumed single-use id is kept: its token's life plus the skew allowed.
const STEADY_AFTER: Duration = Duration::from_secs(TOKEN_SECONDS + 60 + 20);
/// How many times [`STEADY_AFTER`] the warm-up lasts: once for the stores to reach their
/// steady counts, once more for the heap to settle around them.
const WARM_UP_SPANS: usize = 2;
/// Idle pooled upstream connections close after this (`timeouts.upstream_idle_ms`).
const UPSTREAM_IDLE: Duration = Duration::from_secs(2);
/// Idle upstream connections the pool keeps (`limits.upstream_max_idle_per_host`, the
/// default, written into the soak's configuration so its bounds follow it).
pub const UPSTREAM_MAX_IDLE: usize = 256;
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The single-use store's bound and one caller's share of it, as the soak configures
/// them (`single_use.memory_max_entries`, `.max_entries_per_principal`).
const SINGLE_USE_ENTRIES: usize = 100_000;
const SINGLE_USE_SHARE: usize = 10_000;
/// States consumed per request of the mix: one flow in five is single-use, and flows
/// average 2.4 requests (a first call, its retry, half a tampered copy; an SSE pair; a
/// single-use call, retry and replay; a handle issued, used, half a tampered use; a
/// write and its repeat: 12 requests per five flows).
const CONSUMED_PER_REQUEST: f64 = 1.0 / 12.0;
pub const MIB: f64 = 1024.0 * 1024.0;

pub struct Settings {
    requests: usize,
    rate: u32,
    redis: bool,
    warmup: usize,
    /// Principals the flows are spread over ([`tenants`]).
    tenants: u64,
}

/// How many callers a deployment at `rate` has at least, from the shares the soak
/// configures: the consumed ids kept at steady state (the rate of consumption times how
/// long one is kept), spread so that each caller holds at most half its share. One
/// caller alone would outgrow its share by design: the shares are right, so the soak
/// models tenants. At least four. An error when the store's whole bound could not hold
/// them.
fn tenants(rate: u32) -> Result<u64, String> {
    let kept = f64::from(rate) * CONSUMED_PER_REQUEST * STEADY_AFTER.as_secs_f64();
    if kept > SINGLE_USE_ENTRIES as f64 / 2.0 {
        return Err(format!(
            "SOAK_RATE={rate} keeps about {kept:.0} consumed ids, over half the store's \
             bound of {SINGLE_USE_ENTRIES}"
        ));
    }
    Ok(((2.0 * kept / SINGLE_USE_SHARE as f64).ceil() as u64).max(4))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(v) => v.parse().map_err(|_| format!("{name}={v} is not valid")),
        Err(_) => Ok(default),
    }
}

fn settings() -> Result<Settings, String> {
    let requests: usize = env_or("SOAK_REQUESTS", 1_000_000)?;
    let rate: u32 = env_or("SOAK_RATE", 2000)?;
    let redis = match env_or("SOAK_STORE", "memory".to_string())?.as_str() {
        "memory" => false,
        "redis" => true,
        other => return Err(format!("SOAK_STORE={other}: memory or redis")),
    };
    if rate == 0 || requests < 1000 {
        return Err("SOAK_RATE must be positive and SOAK_REQUESTS at least 1000".into());
    }
    let steady = (STEADY_AFTER.as_secs_f64() * f64::from(rate)) as usize;
    Ok(Settings {
        requests,
        rate,
        redis,
        warmup: (requests / 10)
            .max(WARM_UP_SPANS * steady)
            .min(requests / 2),
        tenants: tenants(rate)?,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if upstream::run_if_asked(&args) {
        return ExitCode::SUCCESS;
    }
    let result = settings().and_then(|s| run(&s));
    match result {
        Ok((report, passed)) => {
            println!("{report}");
            if passed {
                ExitCode::SUCCESS
            } else {
                eprintln!("soak: a criterion failed (see the verdict)");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The sidecar under soak.
struct Sidecar {
    addr: SocketAddr,
    admin: SocketAddr,
    pid: u32,
    admin_token: String,
}

fn run(settings: &Settings) -> Result<(String, bool), String> {
    procs::pin_self()?;
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let mut children = Children::default();
    let sidecar = start(&mut children, dir.path(), settings.redis)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let observed = runtime.block_on(soak(settings, &sidecar))?;
    children.check_alive()?;
    let log = log::summarise(&dir.path().join("sidecar.log"), flows::PLAINTEXT_MARK)?;
    Ok(report::write(settings, &observed, &log))
}

fn start(children: &mut Children, dir: &Path, redis: bool) -> Result<Sidecar, String> {
    let sidecar_bin = procs::sidecar_bin("SOAK_SIDECAR_BIN");
    let upstream_port = children.spawn_upstream(dir)?;
    let store = if redis {
        let port = children.spawn_redis(dir, None)?;
        format!("store = \"redis\"\nredis_url = \"redis://127.0.0.1:{port}\"\n")
    } else {
        "store = \"memory\"\n".to_owned()
    };
    let admin_token = "5f".repeat(16);
    std::fs::write(dir.join("keys"), format!("{}\n", "5e".repeat(32)))
        .and_then(|()| std::fs::write(dir.join("admin-token"), &admin_token))
        .map_err(|e| format!("secrets: {e}"))?;
    let (port, admin) = (procs::free_port(), procs::free_port());
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         upstream = \"http://127.0.0.1:{upstream_port}\"\n\
         [state]\nkeys_file = \"{keys}\"\naudience = \"soak.example\"\n\
         ttl_seconds = {TOKEN_SECONDS}\n\
         [principal]\nsource = \"header\"\nheader = \"{header}\"\n\
         trusted_proxies = [\"127.0.0.1/32\"]\n\
         [single_use]\ntools = [\"approve\"]\n{store}\
         memory_max_entries = {SINGLE_USE_ENTRIES}\n\
         max_entries_per_principal = {SINGLE_USE_SHARE}\n\
         [idempotency]\ntools = [\"record\"]\nttl_seconds = {RECORD_SECONDS}\n\
         [admin]\ntoken_file = \"{token}\"\n\
         [timeouts]\nupstream_idle_ms = {idle}\n\
         [limits]\nupstream_max_idle_per_host = {UPSTREAM_MAX_IDLE}\n\
         [log]\nlevel = \"warn\"\n\
         [[handles]]\nkind = \"import\"\nissued_by = [\"start_import\"]\n\
         result_pointer = \"/structuredContent/importId\"\naccepted_by = [\"append_rows\"]\n\
         argument_pointer = \"/importId\"\nttl_seconds = {TOKEN_SECONDS}\n",
        keys = dir.join("keys").display(),
        header = generator::PRINCIPAL_HEADER,
        token = dir.join("admin-token").display(),
        idle = UPSTREAM_IDLE.as_millis(),
    );
    let file = dir.join("sidecar.toml");
    std::fs::write(&file, config).map_err(|e| format!("config: {e}"))?;
    let pid = children.spawn(
        "sidecar",
        &sidecar_bin,
        &["run", "--config", file.to_str().expect("a UTF-8 temp path")],
        &dir.join("sidecar.log"),
    )?;
    let (addr, admin) = (loopback(port), loopback(admin));
    procs::wait_ready(children, loopback(upstream_port), "/")?;
    procs::wait_ready(children, admin, "/readyz")?;
    Ok(Sidecar {
        addr,
        admin,
        pid,
        admin_token,
    })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// What a schedule of the mix did.
pub struct Run {
    mix: Arc<Mix>,
    outcome: generator::Outcome,
}

/// The sidecar idle: client connections closed, the upstream pool's expired.
async fn idle(sidecar: &Sidecar) -> Result<Sample, String> {
    tokio::time::sleep(UPSTREAM_IDLE * 2 + Duration::from_secs(1)).await;
    samples::take(sidecar.pid, sidecar.admin, 0.0, 0)
}

async fn soak(settings: &Settings, sidecar: &Sidecar) -> Result<Observed, String> {
    let mix = |run, done| {
        let token = sidecar.admin_token.clone();
        let tenants = settings.tenants;
        Mix::new(run, sidecar.addr, sidecar.admin, token, tenants, done)
    };
    // Every path warm (pools, caches, the allocator's arenas) before the idle baseline.
    let rate = settings.rate;
    let priming = mix("priming", Arc::default());
    let priming = run_mix(priming, sidecar, rate, rate as usize * 3, 0).await?;
    let start = samples::take(sidecar.pid, sidecar.admin, 0.0, 0)?;
    let before = idle(sidecar).await?;
    let started = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let sampler = Sampler::start(sidecar.pid, sidecar.admin, SAMPLE_EVERY, done.clone());
    let soak = run_mix(
        mix("soak", done),
        sidecar,
        rate,
        settings.requests,
        settings.warmup,
    )
    .await?;
    let wall = started.elapsed();
    let (samples, sample_failures) = sampler.finish();
    let after = idle(sidecar).await?;
    let (_, metrics) = admin::request(sidecar.admin, "GET", "/metrics", &[], "")?;
    Ok(Observed {
        priming,
        soak,
        wall,
        start,
        before,
        after,
        samples,
        sample_failures,
        metrics,
    })
}

/// Send `total` requests of `mix` at `rate`; slots from `measured_from` on are timed.
async fn run_mix(
    mix: Mix,
    sidecar: &Sidecar,
    rate: u32,
    total: usize,
    measured_from: usize,
) -> Result<Run, String> {
    let mix = Arc::new(mix);
    let schedule = Schedule {
        addr: sidecar.addr,
        rate,
        total,
        measured_from,
        connections: CONNECTIONS,
    };
    let serving = mix.clone();
    let outcome = schedule
        .run(move |_, mut send| {
            let mix = serving.clone();
            async move {
                let result = mix.serve(&mut send).await;
                (send, result)
            }
        })
        .await?;
    Ok(Run { mix, outcome })
}

/// Everything the report is made of.
pub struct Observed {
    priming: Run,
    soak: Run,
    wall: Duration,
    /// Right after the priming load, and idle before and after the soak.
    start: Sample,
    before: Sample,
    after: Sample,
    samples: Vec<Sample>,
    sample_failures: Vec<String>,
    metrics: String,
}
