//! `--ab OTHER [--rounds N]`: this build's sidecar (A, or `HARNESS_SIDECAR_BIN`) against
//! another build (B, the binary at OTHER) on the CPU, where callgrind cannot see the
//! runtime's scheduling meet the upstream's on a shared core (a step 2.7 k instructions
//! lighter took 15–20 % more CPU per request; docs/performance.md).
//!
//! Both sidecars run side by side, on the harness's configuration, in front of one
//! upstream, on the server core. Rounds of wrk (2 s, after a warm-up each) alternate
//! A B B A, so that a drift of the machine falls on both; each round counts the
//! requests and the CPU time the sidecar's threads spent (`/proc/PID/task/*/schedstat`,
//! in nanoseconds), for the JSON first call and the JSON retry. Single rounds on a shared
//! VM vary by 20 %: the medians of many are the figures, and their ratio the verdict.

use crate::generator::{self, Target};
use crate::procs::{self, Children};
use crate::{Phase, WORKLOADS, loopback, minted_retry, request_body, sidecar_config, wrk};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

const ROUND: Duration = Duration::from_secs(2);
const WARMUP: Duration = Duration::from_secs(1);

/// One sidecar of the two.
struct Build {
    name: &'static str,
    target: Target,
    pid: u32,
    /// Per round: requests per second, and CPU µs per request.
    rounds: Vec<(f64, f64)>,
}

/// The CPU time the threads of `pid` have spent so far, in nanoseconds (the sum of
/// their `schedstat`s: the process's own is its main thread's, which only waits).
fn cpu_ns(pid: u32) -> Result<u64, String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("threads of {pid}: {e}"))?;
    let mut total = 0;
    for task in tasks {
        let path = task.map_err(|e| format!("threads of {pid}: {e}"))?.path();
        // A thread that ended meanwhile has no file any more: its time is not counted.
        let Ok(text) = std::fs::read_to_string(path.join("schedstat")) else {
            continue;
        };
        total += text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("schedstat of {}: {text}", path.display()))?;
    }
    Ok(total)
}

/// Run the A/B, `rounds` rounds per build and phase; the report's table.
pub fn run(other: PathBuf, rounds: usize) -> Result<String, String> {
    procs::ensure_tools()?;
    procs::pin_self()?;
    procs::in_temp_dir(|dir| run_in(dir, other, rounds))
}

fn run_in(dir: &Path, other: PathBuf, rounds: usize) -> Result<String, String> {
    let mut children = Children::default();
    let upstream_port = children.upstream_and_keys(dir)?;
    let mut builds = Vec::new();
    for (name, binary) in [
        ("A", procs::sidecar_bin("HARNESS_SIDECAR_BIN")),
        ("B", other),
    ] {
        builds.push(start(&mut children, dir, upstream_port, name, &binary)?);
    }
    for build in &builds {
        procs::wait_ready(&mut children, build.target.addr, "/readyz")?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut report = format!(
        "### A/B on the CPU ({rounds} rounds of {} s per build and phase, A B B A)\n\n\
         | phase | A req/s (median) | B req/s (median) | B/A | A CPU µs/request (median) | \
         B CPU µs/request (median) | B/A |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        ROUND.as_secs()
    );
    for phase in [Phase::First, Phase::Retry] {
        let body = match phase {
            Phase::First => request_body(None),
            // Minted through A; both sidecars hold the same key and audience.
            Phase::Retry => runtime.block_on(minted_retry(&builds[0].target))?,
        };
        let file = dir.join("body.json");
        std::fs::write(&file, &body).map_err(|e| format!("body file: {e}"))?;
        for build in &mut builds {
            build.target.expect = phase.expect();
            build.rounds.clear();
            runtime.block_on(generator::closed_loop(&build.target, body.clone(), 1, 1))?;
        }
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let build = &mut builds[i];
                let script = dir.join(format!("wrk-{}.lua", build.name));
                wrk::run(&build.target, wrk::WrkBody::Same(&file), WARMUP, &script)?;
                let before = cpu_ns(build.pid)?;
                let throughput =
                    wrk::run(&build.target, wrk::WrkBody::Same(&file), ROUND, &script)?;
                let spent = cpu_ns(build.pid)? - before;
                if throughput.errors > 0 || throughput.requests == 0 {
                    return Err(format!(
                        "{} {}: {} errors in {} requests",
                        build.name,
                        phase.label(),
                        throughput.errors,
                        throughput.requests
                    ));
                }
                let per_request = spent as f64 / 1000.0 / throughput.requests as f64;
                build.rounds.push((throughput.rps, per_request));
            }
        }
        children.check_alive()?;
        let (a, b) = (medians(&builds[0]), medians(&builds[1]));
        writeln!(
            report,
            "| {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.2} |",
            phase.label(),
            a.0,
            b.0,
            b.0 / a.0,
            a.1,
            b.1,
            b.1 / a.1
        )
        .expect("a String takes writes");
    }
    Ok(report)
}

fn start(
    children: &mut Children,
    dir: &Path,
    upstream_port: u16,
    name: &'static str,
    binary: &Path,
) -> Result<Build, String> {
    let (port, admin) = (procs::free_port(), procs::free_port());
    let file = dir.join(format!("sidecar-{name}.toml"));
    std::fs::write(&file, sidecar_config(dir, port, admin, upstream_port, ""))
        .map_err(|e| format!("sidecar {name}: {e}"))?;
    let pid = children.spawn(
        name,
        binary,
        &["run", "--config", file.to_str().expect("a UTF-8 temp path")],
        &dir.join(format!("sidecar-{name}.log")),
    )?;
    Ok(Build {
        name,
        target: Target {
            addr: loopback(port),
            path: WORKLOADS[0].1,
            expect: Phase::First.expect(),
            forbid: None,
        },
        pid,
        rounds: Vec::new(),
    })
}

/// The medians of a build's rounds: requests per second, CPU µs per request.
fn medians(build: &Build) -> (f64, f64) {
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        (values[(n - 1) / 2] + values[n / 2]) / 2.0
    };
    (
        median(build.rounds.iter().map(|r| r.0).collect()),
        median(build.rounds.iter().map(|r| r.1).collect()),
    )
}
