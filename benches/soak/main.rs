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
//! the 90 s a consumed single-use id is kept: its token's life plus 60 s of skew) ends
//! when the stores are full to their steady state. After it, the sidecar must hold its
//! resident memory within 10 %; idle before and after the load (client connections
//! closed, the upstream pool's idle connections expired) its open files and alive tasks
//! must be the same, with nothing in flight; and no answer may differ from what its
//! request expects. Prints a Markdown report; exits non-zero when a criterion fails.
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
mod samples;

use flows::Mix;
use generator::Schedule;
use procs::Children;
use samples::{Sample, Sampler};
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// Keep-alive connections of the open loop.
const CONNECTIONS: usize = 32;
/// The sidecar's token and handle lifetime, and its idempotency records'.
const TOKEN_SECONDS: u64 = 10;
const RECORD_SECONDS: u64 = 30;
/// How long a consumed single-use id is kept: its token's life plus the skew allowed.
const STEADY_AFTER: Duration = Duration::from_secs(TOKEN_SECONDS + 60 + 20);
/// Idle pooled upstream connections close after this (`timeouts.upstream_idle_ms`).
const UPSTREAM_IDLE: Duration = Duration::from_secs(2);
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The most resident memory may vary after the warm-up.
const RSS_BAND: f64 = 0.10;
const MIB: f64 = 1024.0 * 1024.0;

struct Settings {
    requests: usize,
    rate: u32,
    redis: bool,
    warmup: usize,
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
        warmup: (requests / 10).max(steady).min(requests / 2),
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--role-upstream") {
        let port = args
            .get(i + 1)
            .and_then(|p| p.parse().ok())
            .expect("a port");
        upstream::run(port);
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
    let report = runtime.block_on(soak(settings, &sidecar));
    children.check_alive()?;
    let log = std::fs::metadata(dir.path().join("sidecar.log")).map_or(0, |m| m.len());
    report.map(|(text, passed)| (format!("{text}\nsidecar log: {log} bytes\n"), passed))
}

fn start(children: &mut Children, dir: &Path, redis: bool) -> Result<Sidecar, String> {
    let me = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let sidecar_bin = std::env::var_os("SOAK_SIDECAR_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_mcp-state-guard")),
        PathBuf::from,
    );
    let upstream_port = procs::free_port();
    children.spawn(
        "upstream",
        &me,
        &["--role-upstream", &upstream_port.to_string()],
        &dir.join("upstream.log"),
    )?;
    let store = if redis {
        let port = procs::free_port();
        let redis = procs::which("redis-server")
            .ok_or("redis-server not found (apt-get install redis-server)")?;
        children.spawn(
            "redis-server",
            &redis,
            &[
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            &dir.join("redis.log"),
        )?;
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
         [idempotency]\ntools = [\"record\"]\nttl_seconds = {RECORD_SECONDS}\n\
         [admin]\ntoken_file = \"{token}\"\n\
         [timeouts]\nupstream_idle_ms = {idle}\n\
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
struct Run {
    mix: Arc<Mix>,
    outcome: generator::Outcome,
}

/// The sidecar idle: client connections closed, the upstream pool's expired.
async fn idle(sidecar: &Sidecar) -> Result<Sample, String> {
    tokio::time::sleep(UPSTREAM_IDLE * 2 + Duration::from_secs(1)).await;
    samples::take(sidecar.pid, sidecar.admin, 0.0, 0)
}

async fn soak(settings: &Settings, sidecar: &Sidecar) -> Result<(String, bool), String> {
    let mix = |run, done| {
        let token = sidecar.admin_token.clone();
        Mix::new(run, sidecar.addr, sidecar.admin, token, done)
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
    Ok(report(
        settings,
        &Observed {
            priming,
            soak,
            wall,
            start,
            before,
            after,
            samples,
            sample_failures,
            metrics,
        },
    ))
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
struct Observed {
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

fn report(settings: &Settings, o: &Observed) -> (String, bool) {
    let mut out = String::new();
    let mut verdict: Vec<(String, bool)> = Vec::new();
    let tally = o.soak.mix.tally.lock().expect("not poisoned");
    let priming = o.priming.mix.tally.lock().expect("not poisoned");
    let answered: u64 = tally
        .expected
        .values()
        .chain(tally.unexpected.values())
        .sum();
    let unexpected: u64 = tally.unexpected.values().sum::<u64>()
        + priming.unexpected.values().sum::<u64>()
        + tally.revoke_failures
        + priming.revoke_failures;
    let _ = writeln!(
        out,
        "### Soak ({} requests at {} req/s, {} connections, {} store)\n",
        settings.requests,
        settings.rate,
        CONNECTIONS,
        if settings.redis { "Redis" } else { "memory" }
    );
    let _ = writeln!(out, "| outcome | expected | unexpected |");
    let _ = writeln!(out, "| --- | ---: | ---: |");
    let mut classes: Vec<_> = tally
        .expected
        .keys()
        .chain(tally.unexpected.keys())
        .collect();
    classes.sort();
    classes.dedup();
    for class in classes {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            class.label(),
            tally.expected.get(class).copied().unwrap_or(0),
            tally.unexpected.get(class).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(
        out,
        "| all | {} | {} |\n\nrevocations over the admin endpoint: {} (failed: {}); \
         follow-ups unsent when the schedule ended: {}",
        answered - tally.unexpected.values().sum::<u64>(),
        tally.unexpected.values().sum::<u64>(),
        tally.revocations,
        tally.revoke_failures,
        o.soak.mix.left_over()
    );
    for e in tally.examples.iter().chain(&priming.examples) {
        let _ = writeln!(out, "- unexpected: {e}");
    }
    let mut outcome = generator::Outcome {
        latencies: o.soak.outcome.latencies.clone(),
        ..Default::default()
    };
    let rate = answered as f64 / o.soak.outcome.elapsed.as_secs_f64();
    let _ = writeln!(
        out,
        "\nduration {:.0} s (wall {:.0} s), achieved {:.0} req/s; latency after the warm-up \
         (µs from the intended send) p50 {:.0} / p99 {:.0} / p99.9 {:.0} / max {:.0}\n",
        o.soak.outcome.elapsed.as_secs_f64(),
        o.wall.as_secs_f64(),
        rate,
        outcome.quantile_us(0.50),
        outcome.quantile_us(0.99),
        outcome.quantile_us(0.999),
        outcome.quantile_us(1.0),
    );
    verdict.push((
        format!(
            "{answered} of {} requests answered, every one as expected (unexpected: {unexpected}, \
             priming included; transport errors: {})",
            settings.requests, o.soak.outcome.errors
        ),
        answered == settings.requests as u64 && unexpected == 0 && o.soak.outcome.errors == 0,
    ));

    // The samples: the warm-up's last, and everything after it.
    let warm_at = settings.warmup as u64;
    let (warm, after): (Vec<&Sample>, Vec<&Sample>) =
        o.samples.iter().partition(|s| s.done < warm_at);
    let _ = writeln!(
        out,
        "| sidecar | RSS MiB | open fds | alive tasks | in flight |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
    let row = |out: &mut String, name: &str, s: &Sample| {
        let _ = writeln!(
            out,
            "| {name} | {:.1} | {} | {} | {} |",
            s.rss as f64 / MIB,
            s.fds,
            s.tasks,
            s.in_flight
        );
    };
    row(&mut out, "after priming (3 s of the mix)", &o.start);
    row(&mut out, "idle, before the soak", &o.before);
    if let Some(s) = warm.last() {
        row(&mut out, &format!("end of warm-up ({:.0} s)", s.at), s);
    }
    let max_by = |f: fn(&Sample) -> u64| after.iter().map(|s| f(s)).max().unwrap_or(0);
    let min_by = |f: fn(&Sample) -> u64| after.iter().map(|s| f(s)).min().unwrap_or(0);
    if let Some(last) = after.last() {
        let _ = writeln!(
            out,
            "| after warm-up: min / max | {:.1} / {:.1} | {} / {} | {} / {} | {} / {} |",
            min_by(|s| s.rss) as f64 / MIB,
            max_by(|s| s.rss) as f64 / MIB,
            min_by(|s| s.fds),
            max_by(|s| s.fds),
            after.iter().map(|s| s.tasks).min().unwrap_or(0),
            after.iter().map(|s| s.tasks).max().unwrap_or(0),
            after.iter().map(|s| s.in_flight).min().unwrap_or(0),
            after.iter().map(|s| s.in_flight).max().unwrap_or(0),
        );
        row(
            &mut out,
            &format!("last under load ({:.0} s)", last.at),
            last,
        );
    }
    row(&mut out, "idle, after the soak", &o.after);
    let _ = writeln!(
        out,
        "\n{} samples every {} s ({} after the warm-up of {} requests){}",
        o.samples.len(),
        SAMPLE_EVERY.as_secs(),
        after.len(),
        settings.warmup,
        if o.sample_failures.is_empty() {
            String::new()
        } else {
            format!(
                "; sampling failed {} times: {}",
                o.sample_failures.len(),
                o.sample_failures[0]
            )
        }
    );
    let (rss_min, rss_max) = (min_by(|s| s.rss), max_by(|s| s.rss));
    verdict.push((
        format!(
            "RSS after the warm-up within {:.0} %: {:.1} to {:.1} MiB (+{:.1} %)",
            RSS_BAND * 100.0,
            rss_min as f64 / MIB,
            rss_max as f64 / MIB,
            (rss_max as f64 / rss_min.max(1) as f64 - 1.0) * 100.0
        ),
        after.len() >= 3 && rss_max as f64 <= rss_min as f64 * (1.0 + RSS_BAND),
    ));
    // Under load the sidecar holds, beyond its idle self, a socket and a task per client
    // connection and at most one more per pooled upstream connection (the pool opens one
    // only when every other is busy, so never more than the client connections), plus
    // the sampler's scrape and a revocation on the admin port; and each request in
    // flight may run two tasks of its own (an idempotency lease's renewal, the recording
    // of its answer). Checked on every sample after the warm-up.
    let connections = 2 * CONNECTIONS as i64 + 2;
    let fd_bound = o.before.fds as i64 + connections;
    let task_bound = |s: &Sample| o.before.tasks + connections + 2 * s.in_flight;
    let fds_max = after.iter().map(|s| s.fds as i64).max().unwrap_or(0);
    let closest = after
        .iter()
        .map(|s| task_bound(s) - s.tasks)
        .min()
        .unwrap_or(0);
    verdict.push((
        format!(
            "under load, within the connections' bound: fds at most {fds_max} (bound \
             {fd_bound}); tasks at least {closest} under their bound ({} + {connections} + 2 \
             per request in flight) on every sample",
            o.before.tasks
        ),
        fds_max <= fd_bound && closest >= 0,
    ));
    verdict.push((
        format!(
            "no file-descriptor growth: idle {} before, {} after",
            o.before.fds, o.after.fds
        ),
        o.after.fds <= o.before.fds,
    ));
    verdict.push((
        format!(
            "no task growth: idle {} alive tasks before, {} after; {} in flight after",
            o.before.tasks, o.after.tasks, o.after.in_flight
        ),
        o.after.tasks <= o.before.tasks && o.after.in_flight == 0,
    ));
    verdict.push(("every sample taken".into(), o.sample_failures.is_empty()));
    let (agree, table) = cross_check(&[&tally, &priming], &o.metrics);
    let _ = writeln!(out, "\n{table}");
    verdict.push((
        "the sidecar's own counters agree with every expected refusal, and it refused nothing \
         else"
            .into(),
        agree,
    ));
    let passed = verdict.iter().all(|(_, ok)| *ok);
    let _ = writeln!(out, "\nVerdict: {}\n", if passed { "PASS" } else { "FAIL" });
    for (what, ok) in &verdict {
        let _ = writeln!(out, "- {} {what}", if *ok { "pass" } else { "FAIL" });
    }
    (out, passed)
}

/// The sidecar's counters beside the soak's own counts (priming included, as the
/// counters are): each expected refusal and record counted under its cause, and no
/// refusal of another kind. A Markdown table, and whether every row agrees.
fn cross_check(tallies: &[&flows::Tally], metrics: &str) -> (bool, String) {
    use flows::Class::*;
    let rows: [(&str, &[flows::Class]); 9] = [
        ("state_verified_total{result=\"malformed\"}", &[Tampered]),
        ("state_verified_total{result=\"replayed\"}", &[Replayed]),
        ("state_verified_total{result=\"revoked\"}", &[Revoked]),
        ("handles_total{result=\"malformed\"}", &[HandleTampered]),
        ("handles_total{result=\"revoked\"}", &[RevokedHandle]),
        ("idempotency_total{result=\"recorded\"}", &[Write]),
        ("idempotency_total{result=\"replayed\"}", &[WriteRepeated]),
        (
            "requests_refused_total{reason=\"invalid_state\"}",
            &[Tampered, Replayed, Revoked],
        ),
        (
            "requests_refused_total{reason=\"invalid_handle\"}",
            &[HandleTampered, RevokedHandle],
        ),
    ];
    let counter = |name: &str| -> u64 {
        let name = format!("mcp_state_guard_{name} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut out =
        String::from("| sidecar counter | its value | the soak's count |\n| --- | ---: | ---: |\n");
    let mut agree = true;
    for (name, classes) in rows {
        let ours: u64 = tallies
            .iter()
            .flat_map(|t| {
                classes
                    .iter()
                    .map(|c| t.expected.get(c).copied().unwrap_or(0))
            })
            .sum();
        let theirs = counter(name);
        agree &= ours == theirs;
        let _ = writeln!(out, "| `{name}` | {theirs} | {ours} |");
    }
    let others: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("mcp_state_guard_requests_refused_total{"))
        .filter(|l| !l.contains("\"invalid_state\"") && !l.contains("\"invalid_handle\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    agree &= others == 0;
    let _ = writeln!(
        out,
        "| `requests_refused_total`, every other reason | {others} | 0 |"
    );
    (agree, out)
}
