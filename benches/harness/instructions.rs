//! Instructions per request, counted by callgrind (`-- --instructions`): the sidecar (B)
//! and the bare hyper proxy (D) each run under `valgrind --tool=callgrind` on the server
//! core with one runtime worker (`TOKIO_WORKER_THREADS=1`, as under `taskset`), the
//! upstream natively beside them. For each answer and phase, on one keep-alive
//! connection: a warm-up of sequential exchanges (pools filled, code paths translated),
//! then the counters are zeroed (`callgrind_control --zero`), the measured exchanges
//! sent, and the counters dumped (`callgrind_control --dump`). Instructions per request
//! are the dump's total (every thread of the proxy) over the exchanges, all answered and
//! checked like every other row's (through the sidecar, no plaintext state).
//!
//! The stdio sidecar (E, `stdio.rs`) is counted the same way for the JSON workload; its
//! child runs natively (callgrind does not follow children), so E's count is the
//! sidecar's own work for a line out and a line in, beside B's for an HTTP hop.
//!
//! The single-use sidecar (memory store) is counted on the JSON retry alone, each retry
//! with a token of its own minted through it before the counters are zeroed (a token
//! spends once): what single use adds to a retry, beside B's.
//!
//! The JWT principal's sidecar (`jwt.rs`) is counted last, on the JSON workload, once
//! every request carries the access token; D is counted again on the same requests, as
//! the full run's JWT row compares them. The rows above carry no token, as before.
//!
//! Unlike throughput and latency, an instruction count does not move with what else the
//! machine runs, so it compares across runs and builds: issue 22's target is B ≤ 1.4× D,
//! first call and retry.

use crate::generator::{self, Target};
use crate::procs::{self, Children};
use crate::{
    PLAINTEXT_MARK, Phase, SINGLE_USE_MEMORY, WORKLOADS, loopback, request_body, state_of, upstream,
};
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Sequential exchanges before the counters are zeroed, and between zero and dump.
pub struct Counts {
    pub warmup: usize,
    pub measured: usize,
}

/// A proxy running under callgrind.
struct Proxy {
    name: &'static str,
    addr: SocketAddr,
    pid: u32,
    /// `--callgrind-out-file`: dump `n` is written to `out.n`.
    out: PathBuf,
    dumps: u32,
}

impl Proxy {
    /// Start `program args` under callgrind on the server core, with one runtime worker.
    fn start(
        children: &mut Children,
        dir: &Path,
        name: &'static str,
        addr: SocketAddr,
        program: &Path,
        args: &[&str],
    ) -> Result<Self, String> {
        let out = dir.join(format!("callgrind.{name}.out"));
        let mut valgrind_args = vec![
            "--tool=callgrind".to_owned(),
            format!("--callgrind-out-file={}", out.display()),
            // Totals are all this reads: no per-instruction detail to write at each dump.
            "--dump-instr=no".to_owned(),
            program.display().to_string(),
        ];
        valgrind_args.extend(args.iter().map(|a| (*a).to_owned()));
        let valgrind = procs::which("valgrind").ok_or("valgrind not found")?;
        let pid = children.spawn_with_env(
            name,
            &valgrind,
            &valgrind_args.iter().map(String::as_str).collect::<Vec<_>>(),
            // taskset alone already gives tokio one worker (it sizes its pool from the
            // affinity mask); said explicitly, so the count does not hang on that.
            &[("TOKIO_WORKER_THREADS", "1")],
            &dir.join(format!("{name}.log")),
        )?;
        Ok(Proxy {
            name,
            addr,
            pid,
            out,
            dumps: 0,
        })
    }

    /// `callgrind_control action pid`; it exits 0 even when the pid is not found, so its
    /// answer is read.
    fn control(&self, action: &str) -> Result<(), String> {
        let out = Command::new("callgrind_control")
            .arg(action)
            .arg(self.pid.to_string())
            .output()
            .map_err(|e| format!("callgrind_control: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && text.contains("OK.") {
            Ok(())
        } else {
            Err(format!(
                "callgrind_control {action} {} ({}): {text}{}",
                self.name,
                self.pid,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Instructions since the last zero: dump the counters and read the dump's total.
    fn dump(&mut self) -> Result<u64, String> {
        self.control("--dump")?;
        self.dumps += 1;
        let file = PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        // The dump is written before callgrind_control answers; waiting a little costs
        // nothing if a slow file system ever says otherwise.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let totals = std::fs::read_to_string(&file).ok().and_then(|text| {
                let line = text.lines().find_map(|l| l.strip_prefix("totals:"))?;
                line.split_whitespace().next()?.parse::<u64>().ok()
            });
            match totals {
                Some(ir) => return Ok(ir),
                None if Instant::now() > deadline => {
                    return Err(format!("no totals in {}", file.display()));
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

/// B and D (and E) under callgrind, then the table of instructions per request, and
/// this build's allocations per request (`allocs.rs`).
pub fn run(counts: &Counts) -> Result<String, String> {
    procs::ensure_valgrind()?;
    procs::pin_self()?;
    procs::in_temp_dir(|dir| run_in(dir, counts))
}

fn run_in(dir: &Path, counts: &Counts) -> Result<String, String> {
    let mut children = Children::default();
    let upstream_port = children.upstream_and_keys(dir)?;
    let config = |extra: &'static str| {
        move |port, admin| crate::sidecar_config(dir, port, admin, upstream_port, extra)
    };
    let (sidecar, admin) = start_sidecar(&mut children, dir, "sidecar", config(""))?;
    let me = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let (stdio, stdio_admin) = start_sidecar(&mut children, dir, "sidecar-stdio", |p, a| {
        crate::stdio::config(&config("")(p, a), &me)
    })?;
    let (memory, memory_admin) = start_sidecar(
        &mut children,
        dir,
        "sidecar-memory",
        config(SINGLE_USE_MEMORY),
    )?;
    // Its token is carried only once the rows above are counted: they stay as they were.
    let (jwt_principal, bearer) = crate::jwt::mint(dir)?;
    let (jwt, jwt_admin) = start_sidecar(&mut children, dir, "sidecar-jwt", |p, a| {
        crate::sidecar_config(dir, p, a, upstream_port, &jwt_principal)
            .replace(&crate::setup::header_principal(), "")
    })?;
    let bare_port = procs::free_port();
    let mut bare = Proxy::start(
        &mut children,
        dir,
        "bare-proxy",
        loopback(bare_port),
        &procs::bare_bin()?,
        &[
            "--role-bare-proxy",
            &bare_port.to_string(),
            &upstream_port.to_string(),
        ],
    )?;
    // Both start at once; under valgrind that takes seconds, not milliseconds.
    let slow = Duration::from_secs(120);
    procs::wait_ready_within(&mut children, loopback(upstream_port), "/", slow)?;
    procs::wait_ready_within(&mut children, admin, "/readyz", slow)?;
    procs::wait_ready_within(&mut children, bare.addr, "/", slow)?;
    procs::wait_ready_within(&mut children, stdio_admin, "/readyz", slow)?;
    procs::wait_ready_within(&mut children, memory_admin, "/readyz", slow)?;
    procs::wait_ready_within(&mut children, jwt_admin, "/readyz", slow)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut table = runtime.block_on(measure(counts, sidecar, &mut bare, stdio, memory))?;
    crate::jwt::carry(bearer)?;
    table.push_str(&runtime.block_on(with_bearer(counts, jwt, &mut bare))?);
    children.check_alive()?;
    keep_dumps(dir)?;
    // This build's allocations beside its instructions (counted in this process, on the
    // harness's allocator): the two figures the per-request work is judged by.
    let allocations = runtime.block_on(crate::allocs::per_request(dir))?;
    Ok(format!("{table}\n{allocations}"))
}

/// A sidecar of this build (or `HARNESS_SIDECAR_BIN`) under callgrind as `name`, on the
/// configuration `config` writes for its port and admin port; and its admin address.
fn start_sidecar(
    children: &mut Children,
    dir: &Path,
    name: &'static str,
    config: impl FnOnce(u16, u16) -> String,
) -> Result<(Proxy, SocketAddr), String> {
    let (port, admin) = (procs::free_port(), procs::free_port());
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, config(port, admin)).map_err(|e| format!("{name} config: {e}"))?;
    let proxy = Proxy::start(
        children,
        dir,
        name,
        loopback(port),
        &procs::sidecar_bin("HARNESS_SIDECAR_BIN"),
        &["run", "--config", file.to_str().expect("a UTF-8 temp path")],
    )?;
    Ok((proxy, loopback(admin)))
}

/// With `HARNESS_CALLGRIND_KEEP=DIR`, the dumps (`callgrind.sidecar.out.N`,
/// `callgrind.bare-proxy.out.N`, one per workload and phase in table order, D's last two
/// with the bearer token) are copied
/// there for `callgrind_annotate`, to see where a request's instructions go.
fn keep_dumps(dir: &std::path::Path) -> Result<(), String> {
    let Some(keep) = std::env::var_os("HARNESS_CALLGRIND_KEEP") else {
        return Ok(());
    };
    std::fs::create_dir_all(&keep).map_err(|e| format!("HARNESS_CALLGRIND_KEEP: {e}"))?;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("temp dir: {e}"))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("callgrind.") {
            std::fs::copy(entry.path(), std::path::Path::new(&keep).join(&name))
                .map_err(|e| format!("copying {}: {e}", name.to_string_lossy()))?;
        }
    }
    Ok(())
}

async fn measure(
    counts: &Counts,
    mut sidecar: Proxy,
    bare: &mut Proxy,
    mut stdio: Proxy,
    mut memory: Proxy,
) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Instructions per request (callgrind, one worker thread; {} sequential \
         exchanges on one connection, after {})\n",
        counts.measured, counts.warmup
    );
    let _ = writeln!(
        out,
        "| answer | phase | B sidecar instructions/request | D hyper floor instructions/request | B/D | B−D |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: |");
    // B's JSON counts, first call and retry, for E's table.
    let mut json_b = Vec::new();
    for (workload, path) in WORKLOADS {
        for phase in [Phase::First, Phase::Retry] {
            let (b, d) = beside(counts, (&mut sidecar, bare), (workload, path), phase).await?;
            if path == WORKLOADS[0].1 {
                json_b.push(b);
            }
            let _ = writeln!(
                out,
                "| {workload} | {} | {:.1} k | {:.1} k | {:.2} | {:.1} k |",
                phase.label(),
                b / 1000.0,
                d / 1000.0,
                b / d,
                (b - d) / 1000.0
            );
        }
    }
    let _ = writeln!(
        out,
        "\n| answer | phase | E stdio sidecar instructions/request | B sidecar instructions/request | E/B |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: |");
    let (workload, path) = WORKLOADS[0];
    let json_retry = json_b[1];
    for (phase, b) in [Phase::First, Phase::Retry].into_iter().zip(json_b) {
        let e = per_request(counts, &mut stdio, path, phase).await;
        let e = e.map_err(|e| format!("{workload} {} stdio sidecar: {e}", phase.label()))?;
        let _ = writeln!(
            out,
            "| {workload} | {} | {:.1} k | {:.1} k | {:.2} |",
            phase.label(),
            e / 1000.0,
            b / 1000.0,
            e / b
        );
    }
    let single = spent_once(counts, &mut memory, path).await;
    let single = single.map_err(|e| format!("{workload} single-use retry: {e}"))?;
    let _ = writeln!(
        out,
        "\n| answer | phase | B single use (memory) instructions/request | B instructions/request | ratio |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: |");
    let _ = writeln!(
        out,
        "| {workload} | {} | {:.1} k | {:.1} k | {:.2} |",
        Phase::Retry.label(),
        single / 1000.0,
        json_retry / 1000.0,
        single / json_retry
    );
    Ok(out)
}

/// The JWT principal's table: the sidecar that reads its caller from the access token
/// every request now carries, beside D forwarding the same requests; the JSON workload,
/// first call and retry.
async fn with_bearer(counts: &Counts, mut jwt: Proxy, bare: &mut Proxy) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| answer | phase | B JWT principal instructions/request | D (the same bearer) instructions/request | B/D |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: |");
    let (workload, path) = WORKLOADS[0];
    for phase in [Phase::First, Phase::Retry] {
        let (b, d) = beside(counts, (&mut jwt, bare), (workload, path), phase).await?;
        let _ = writeln!(
            out,
            "| {workload} | {} | {:.1} k | {:.1} k | {:.2} |",
            phase.label(),
            b / 1000.0,
            d / 1000.0,
            b / d
        );
    }
    Ok(out)
}

/// Instructions per request of a sidecar and of D, one after the other, for one
/// workload's phase.
async fn beside(
    counts: &Counts,
    (sidecar, bare): (&mut Proxy, &mut Proxy),
    (workload, path): (&str, &'static str),
    phase: Phase,
) -> Result<(f64, f64), String> {
    let b = per_request(counts, sidecar, path, phase).await;
    let b = b.map_err(|e| format!("{workload} {} {}: {e}", phase.label(), sidecar.name))?;
    let d = per_request(counts, bare, path, phase).await;
    let d = d.map_err(|e| format!("{workload} {} hyper floor: {e}", phase.label()))?;
    Ok((b, d))
}

/// A single-use sidecar's instructions per retry of `counts.measured`, after
/// `counts.warmup`, each retry with a token of its own minted on the same connection
/// before the counters are zeroed.
async fn spent_once(counts: &Counts, proxy: &mut Proxy, path: &'static str) -> Result<f64, String> {
    let first = Target {
        addr: proxy.addr,
        path,
        expect: Phase::First.expect(),
        forbid: Some(PLAINTEXT_MARK),
    };
    let retry = Target {
        expect: Phase::Retry.expect(),
        ..first.clone()
    };
    let mut send = generator::connect(proxy.addr).await?;
    let mut bodies = Vec::with_capacity(counts.warmup + counts.measured);
    for _ in 0..counts.warmup + counts.measured {
        let answer = generator::exchange(&mut send, &first, request_body(None)).await?;
        bodies.push(request_body(Some(&state_of(&answer)?)));
    }
    let (warmup, measured) = bodies.split_at(counts.warmup);
    for body in warmup {
        generator::exchange(&mut send, &retry, body.clone()).await?;
    }
    proxy.control("--zero")?;
    for body in measured {
        generator::exchange(&mut send, &retry, body.clone()).await?;
    }
    let instructions = proxy.dump()?;
    Ok(instructions as f64 / counts.measured as f64)
}

/// One proxy's instructions per exchange of `counts.measured`, after `counts.warmup`.
async fn per_request(
    counts: &Counts,
    proxy: &mut Proxy,
    path: &'static str,
    phase: Phase,
) -> Result<f64, String> {
    let through_sidecar = proxy.name != "bare-proxy";
    let target = Target {
        addr: proxy.addr,
        path,
        expect: phase.expect(),
        // Neither answer through the sidecar may carry the upstream's plaintext state.
        forbid: through_sidecar.then_some(PLAINTEXT_MARK),
    };
    let mut send = generator::connect(proxy.addr).await?;
    let body = match phase {
        Phase::First => request_body(None),
        // The sidecar needs its own token; D forwards the upstream's plaintext.
        Phase::Retry if through_sidecar => {
            let first = Target {
                expect: Phase::First.expect(),
                ..target.clone()
            };
            let answer = generator::exchange(&mut send, &first, request_body(None)).await?;
            request_body(Some(&state_of(&answer)?))
        }
        Phase::Retry => request_body(Some(upstream::STATE)),
    };
    for _ in 0..counts.warmup {
        generator::exchange(&mut send, &target, body.clone()).await?;
    }
    proxy.control("--zero")?;
    for _ in 0..counts.measured {
        generator::exchange(&mut send, &target, body.clone()).await?;
    }
    let instructions = proxy.dump()?;
    Ok(instructions as f64 / counts.measured as f64)
}
