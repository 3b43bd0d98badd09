//! `--train SIDECAR [--requests N] [--profiles DIR]`: the workload a profile-guided build of the sidecar
//! learns from. `.ci/build-release.sh` builds the sidecar instrumented
//! (`-Cprofile-generate`), runs this against that binary, and builds it again with the
//! merged profile (`-Cprofile-use`): the shipped binary's code is laid out, inlined and
//! its branches ordered for what this workload runs.
//!
//! The workload is the harness's own rows, N requests each (10 000 by default) over a
//! few connections, through sidecars configured as the harness configures them: the
//! JSON and SSE first calls and retries (a header principal); the retry with single use
//! on the memory store, a fresh token each; the first call and the retry with a JWT
//! principal, and through the stdio upstream (unpinned: a build machine's CPUs are its
//! own, and nothing is measured). Every answer is checked as the harness
//! checks it (the plaintext state never comes back). Then each sidecar is stopped with
//! SIGTERM and waited for: it drains and exits 0, and only then does an instrumented
//! binary write its profile: into `DIR` with `--profiles` (`LLVM_PROFILE_FILE` set for
//! the sidecars alone, one file each), else where the caller's `LLVM_PROFILE_FILE` says.
//!
//! It needs nothing but this executable and the binary: no wrk, nginx or Redis, so the
//! Dockerfile's build stage runs it too. Redis's paths stay untrained (a round trip to
//! Redis dwarfs the code around it).

use crate::generator::{self, Target};
use crate::procs::{self, Children};
use crate::{
    PLAINTEXT_MARK, Phase, SINGLE_USE_MEMORY, WORKLOADS, loopback, minted_retry, request_body,
};
use crate::{sidecar_config, spawn_sidecar, state_of};
use bytes::Bytes;
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Requests of each workload unless `--requests` says otherwise.
pub const REQUESTS: usize = 10_000;
/// Connections each workload is sent over.
const CONNECTIONS: usize = 8;
/// How long a sidecar may take to drain and exit after SIGTERM.
const EXIT_WITHIN: Duration = Duration::from_secs(20);
/// How long one sidecar's (or the floor's) workload may take: a server that stops
/// answering fails the build instead of hanging it.
const WORKLOAD_WITHIN: Duration = Duration::from_secs(300);

/// When `args` ask for training (`--train SIDECAR` or `--train-floor`, with
/// `--requests N` and `--profiles DIR`), run it and say how it went; `None` otherwise.
pub fn run_if_asked(args: &[String]) -> Option<ExitCode> {
    let value = |flag: &str| {
        let i = args.iter().position(|a| a == flag)?;
        Some(args.get(i + 1).map(String::as_str))
    };
    let requests = value("--requests")
        .flatten()
        .and_then(|n| n.parse().ok())
        .unwrap_or(REQUESTS);
    let profiles = value("--profiles").flatten().map(Path::new);
    let trained = match (value("--train"), args.iter().any(|a| a == "--train-floor")) {
        (Some(Some(binary)), _) => run(Path::new(binary), requests, profiles),
        (Some(None), _) => Err("--train needs the path of the sidecar binary to train".into()),
        (None, true) => floor(requests, profiles),
        (None, false) => return None,
    };
    Some(match trained {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::FAILURE
        }
    })
}

/// Run the workload through the sidecar `binary`, `requests` requests each, its profiles
/// written into `profiles` when given; what was sent, as lines of text.
pub fn run(binary: &Path, requests: usize, profiles: Option<&Path>) -> Result<String, String> {
    procs::in_temp_dir(|dir| run_in(dir, binary, requests, profiles))
}

fn run_in(
    dir: &Path,
    binary: &Path,
    requests: usize,
    profiles: Option<&Path>,
) -> Result<String, String> {
    let mut children = Children::unpinned();
    let upstream_port = children.upstream_and_keys(dir)?;
    procs::wait_ready(&mut children, loopback(upstream_port), "/")?;
    let jwt_principal = crate::jwt::setup(dir)?;
    // The access token rides on every request; only `sidecar-jwt` reads it.
    let drain = "[timeouts]\ndrain_ms = 2000\n";
    let profile_file = profile_file(profiles, "sidecar");
    let env: Vec<_> = profile_file
        .iter()
        .map(|f| ("LLVM_PROFILE_FILE", f.as_str()))
        .collect();
    let mut sidecars = Vec::new();
    for (name, extra) in [
        ("sidecar", String::new()),
        ("sidecar-memory", SINGLE_USE_MEMORY.to_owned()),
        ("sidecar-jwt", jwt_principal),
        ("sidecar-stdio", String::new()),
    ] {
        let (port, admin) = (procs::free_port(), procs::free_port());
        let config = sidecar_config(dir, port, admin, upstream_port, &(extra + drain));
        let pid = spawn_sidecar(&mut children, dir, binary, name, config, &env)?;
        sidecars.push((name, loopback(port), loopback(admin), pid));
    }
    for &(_, _, admin, _) in &sidecars {
        procs::wait_ready(&mut children, admin, "/readyz")?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut report = String::new();
    for &(name, addr, _, _) in &sidecars {
        let started = Instant::now();
        let sent = runtime
            .block_on(within(workload(name, addr, requests)))
            .map_err(|e| format!("{name}: {e}"))?;
        writeln!(
            report,
            "{name}: {sent} requests in {:.1} s",
            started.elapsed().as_secs_f64()
        )
        .expect("a String takes writes");
    }
    children.check_alive()?;
    for (name, _, _, pid) in sidecars {
        let status = children.terminate(pid, EXIT_WITHIN)?;
        if !status.success() {
            return Err(format!("{name} exited with {status}: no profile written"));
        }
    }
    Ok(report)
}

/// Where an instrumented `who` writes its profile (`LLVM_PROFILE_FILE`): one file per
/// process and binary in `profiles`, if profiles are written.
fn profile_file(profiles: Option<&Path>, who: &str) -> Option<String> {
    profiles.map(|dir| {
        let file = dir.join(format!("{who}-%p-%m.profraw"));
        file.to_str().expect("a UTF-8 path").to_owned()
    })
}

/// `--train-floor`: the floor (D, this executable as `--role-bare-proxy`) trained the
/// same way, so that it can be built as the shipped sidecar is and B/D stays a ratio of
/// like builds (`benches/harness/floor-pgo.sh`): the JSON and SSE first calls and
/// retries, `requests` each, the upstream's own plaintext state in the retry (as the
/// harness sends it through D); then SIGTERM, and its profile written into `profiles`.
pub fn floor(requests: usize, profiles: Option<&Path>) -> Result<String, String> {
    procs::in_temp_dir(|dir| floor_in(dir, requests, profiles))
}

fn floor_in(dir: &Path, requests: usize, profiles: Option<&Path>) -> Result<String, String> {
    let mut children = Children::unpinned();
    let upstream_port = children.spawn_upstream(dir)?;
    procs::wait_ready(&mut children, loopback(upstream_port), "/")?;
    let profile_file = profile_file(profiles, "floor");
    let env: Vec<_> = profile_file
        .iter()
        .map(|f| ("LLVM_PROFILE_FILE", f.as_str()))
        .collect();
    let port = procs::free_port();
    let pid = children.spawn_with_env(
        "bare-proxy",
        &std::env::current_exe().map_err(|e| format!("own path: {e}"))?,
        &[
            "--role-bare-proxy",
            &port.to_string(),
            &upstream_port.to_string(),
        ],
        &env,
        &dir.join("bare.log"),
    )?;
    procs::wait_ready(&mut children, loopback(port), "/")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let started = Instant::now();
    runtime.block_on(within(async {
        for (_, path) in WORKLOADS {
            for (phase, body) in [
                (Phase::First, request_body(None)),
                (Phase::Retry, request_body(Some(crate::upstream::STATE))),
            ] {
                let target = Target {
                    addr: loopback(port),
                    path,
                    expect: phase.expect(),
                    forbid: None,
                };
                generator::closed_loop(&target, body, requests, CONNECTIONS).await?;
            }
        }
        Ok::<_, String>(())
    }))?;
    let elapsed = started.elapsed().as_secs_f64();
    let status = children.terminate(pid, EXIT_WITHIN)?;
    if !status.success() {
        return Err(format!(
            "the floor exited with {status}: no profile written"
        ));
    }
    Ok(format!(
        "bare-proxy: {} requests in {elapsed:.1} s\n",
        4 * requests
    ))
}

/// The requests `name` gets; how many were sent.
async fn workload(name: &str, addr: SocketAddr, requests: usize) -> Result<usize, String> {
    let target = |path, phase: Phase| Target {
        addr,
        path,
        expect: phase.expect(),
        forbid: (phase == Phase::First).then_some(PLAINTEXT_MARK),
    };
    let json = WORKLOADS[0].1;
    let paths: &[&'static str] = match name {
        "sidecar" => &[WORKLOADS[0].1, WORKLOADS[1].1],
        "sidecar-memory" => {
            // Each retry spends its own token.
            let first = target(json, Phase::First);
            let answers =
                generator::closed_loop(&first, request_body(None), requests, CONNECTIONS).await?;
            let bodies = answers
                .iter()
                .map(|a| Ok(request_body(Some(&state_of(a)?))))
                .collect::<Result<Vec<_>, String>>()?;
            each_once(&target(json, Phase::Retry), bodies).await?;
            return Ok(2 * requests);
        }
        _ => &[json],
    };
    for &path in paths {
        let first = target(path, Phase::First);
        generator::closed_loop(&first, request_body(None), requests, CONNECTIONS).await?;
        let retry = target(path, Phase::Retry);
        let body = minted_retry(&retry).await?;
        generator::closed_loop(&retry, body, requests, CONNECTIONS).await?;
    }
    Ok(2 * requests * paths.len())
}

/// `work`, failed after [`WORKLOAD_WITHIN`].
async fn within<T>(work: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::time::timeout(WORKLOAD_WITHIN, work)
        .await
        .map_err(|_| format!("no end within {WORKLOAD_WITHIN:?}"))?
}

/// Send each of `bodies` once to `target`, over [`CONNECTIONS`] connections.
async fn each_once(target: &Target, bodies: Vec<Bytes>) -> Result<(), String> {
    let (bodies, next) = (Arc::new(bodies), Arc::new(AtomicUsize::new(0)));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let mut send = generator::connect(target.addr).await?;
        let (bodies, next, target) = (bodies.clone(), next.clone(), target.clone());
        workers.spawn(async move {
            while let Some(body) = bodies.get(next.fetch_add(1, Ordering::Relaxed)) {
                generator::exchange(&mut send, &target, body.clone()).await?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done.map_err(|e| format!("worker: {e}"))??;
    }
    Ok(())
}
