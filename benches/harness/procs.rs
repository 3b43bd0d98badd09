//! The processes a run starts (upstream, sidecars, nginx, redis-server), each pinned to
//! the server core with `taskset` and allowed many open files with `prlimit` (both exec
//! the program, so the child's pid is the server's own). [`Children`] kills and reaps
//! every one of them when dropped: at the end of a run, on an error, or on a panic.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The core the load generator (this process, and wrk) runs on.
pub const GENERATOR_CORE: &str = "0";
/// The core every server shares: upstream, sidecar or nginx, and redis.
pub const SERVER_CORE: &str = "1";
/// Open files every process may hold: as many as the hard limit allows (raising it needs
/// `CAP_SYS_RESOURCE`, which a container may not have). Each held stream costs a proxy
/// two: the client's connection and the upstream's.
pub fn nofile() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            let hard = line.split_whitespace().nth(4)?;
            hard.parse().ok()
        })
        .unwrap_or(1024)
}

/// Every process started so far; killed and reaped on drop.
#[derive(Default)]
pub struct Children {
    children: Vec<(&'static str, Child)>,
    /// Not pinned to [`SERVER_CORE`] (training, on a builder whose CPUs are its own).
    unpinned: bool,
}

impl Children {
    /// Children that run wherever the scheduler puts them: a training run measures
    /// nothing, and a build machine's allowed CPUs need not include [`SERVER_CORE`].
    pub fn unpinned() -> Self {
        Self {
            children: Vec::new(),
            unpinned: true,
        }
    }

    /// Start `program args` on the server core; `log` receives its stderr.
    pub fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: &[&str],
        log: &Path,
    ) -> Result<u32, String> {
        self.spawn_with_env(name, program, args, &[], log)
    }

    /// [`Children::spawn`] with `env` added to the child's environment.
    pub fn spawn_with_env(
        &mut self,
        name: &'static str,
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<u32, String> {
        let log = std::fs::File::create(log).map_err(|e| format!("{name}: log file: {e}"))?;
        let mut command = Command::new("prlimit");
        command.arg(format!("--nofile={0}:{0}", nofile()));
        if !self.unpinned {
            command.args(["taskset", "-c", SERVER_CORE]);
        }
        let child = command
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{name}: cannot start {}: {e}", program.display()))?;
        let pid = child.id();
        self.children.push((name, child));
        Ok(pid)
    }

    /// The harness's upstream (`upstream.rs`): this executable again, with
    /// `--role-upstream`, on a free loopback port, returned.
    pub fn spawn_upstream(&mut self, dir: &Path) -> Result<u16, String> {
        let me = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
        let port = free_port();
        self.spawn(
            "upstream",
            &me,
            &["--role-upstream", &port.to_string()],
            &dir.join("upstream.log"),
        )?;
        Ok(port)
    }

    /// The harness's upstream ([`Children::spawn_upstream`]) and the sidecars' key file
    /// (`dir/keys`) beside it.
    pub fn upstream_and_keys(&mut self, dir: &Path) -> Result<u16, String> {
        let port = self.spawn_upstream(dir)?;
        std::fs::write(dir.join("keys"), format!("{}\n", "5e".repeat(32)))
            .map_err(|e| format!("keys: {e}"))?;
        Ok(port)
    }

    /// A throwaway `redis-server` (nothing saved) on a free loopback port, returned;
    /// with `replica_of`, a replica of the server on that port.
    pub fn spawn_redis(&mut self, dir: &Path, replica_of: Option<u16>) -> Result<u16, String> {
        let port = free_port();
        let redis = which("redis-server").ok_or("redis-server not found")?;
        let (port_arg, primary) = (port.to_string(), replica_of.map(|p| p.to_string()));
        // Its files (a replica's copy of the primary's data) stay in the run's temp dir.
        let dir_arg = dir.to_string_lossy().into_owned();
        let mut args = vec![
            "--dir",
            &dir_arg,
            "--port",
            &port_arg,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxclients",
            "1000",
        ];
        if let Some(primary) = &primary {
            args.extend(["--replicaof", "127.0.0.1", primary]);
        }
        self.spawn(
            "redis-server",
            &redis,
            &args,
            &dir.join(format!("redis-{port}.log")),
        )?;
        Ok(port)
    }

    /// Stop the child `pid` with SIGTERM and wait for it to exit, within `within` (else
    /// it is killed and that is the error): a sidecar drains and exits 0, and only then
    /// does an instrumented build write its profile.
    pub fn terminate(&mut self, pid: u32, within: Duration) -> Result<ExitStatus, String> {
        let i = (self.children.iter())
            .position(|(_, child)| child.id() == pid)
            .ok_or_else(|| format!("no child {pid}"))?;
        let (name, mut child) = self.children.remove(i);
        let exited = stop(&mut child, within).map_err(|e| format!("{name}: {e}"));
        if exited.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        exited
    }

    /// Fail when one of them already exited (a port taken, a bad config).
    pub fn check_alive(&mut self) -> Result<(), String> {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("{name} exited early: {status}"));
            }
        }
        Ok(())
    }
}

/// SIGTERM to `child`, and its exit status once it exited, within `within`.
fn stop(child: &mut Child, within: Duration) -> Result<ExitStatus, String> {
    let pid = i32::try_from(child.id()).map_err(|_| "a pid out of range".to_owned())?;
    let target = rustix::process::Pid::from_raw(pid).ok_or("pid 0")?;
    rustix::process::kill_process(target, rustix::process::Signal::TERM)
        .map_err(|e| format!("SIGTERM: {e}"))?;
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            return Err(format!("did not exit within {within:?} of SIGTERM"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
        }
        for (_, child) in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// The sidecar binary to run: this build's, or the one the environment variable `var`
/// names (another build measured in its place: an allocator A/B, a branch).
pub fn sidecar_bin(var: &str) -> std::path::PathBuf {
    std::env::var_os(var).map_or_else(
        || std::path::PathBuf::from(env!("CARGO_BIN_EXE_mcp-state-guard")),
        std::path::PathBuf::from,
    )
}

/// The floor's binary (D, `--role-bare-proxy`): this executable, or the one
/// `HARNESS_BARE_BIN` names (the harness built another way: profile-guided, as the
/// shipped sidecar is, `benches/harness/floor-pgo.sh`).
pub fn bare_bin() -> Result<std::path::PathBuf, String> {
    match std::env::var_os("HARNESS_BARE_BIN") {
        Some(path) => Ok(path.into()),
        None => std::env::current_exe().map_err(|e| format!("own path: {e}")),
    }
}

/// `work` run in a fresh temporary directory, removed when it succeeds and kept when it
/// fails ([`kept_on_failure`]); whatever `work` started has stopped by then (its
/// children are its own locals), so their logs are whole when they are read.
pub fn in_temp_dir<T>(work: impl FnOnce(&Path) -> Result<T, String>) -> Result<T, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    work(dir.path()).map_err(|e| kept_on_failure(dir, e))
}

/// A failed run's `error`, with its temporary directory kept (the children's logs and
/// configs stay for a look) and each log's last warning or error lines appended: a
/// sidecar logs why it refused (a refusal's reason and detail, never the token), and that
/// reason is what a failure report must carry.
fn kept_on_failure(dir: tempfile::TempDir, error: String) -> String {
    let dir = dir.keep();
    let mut report = format!(
        "{error}
  (the run's files are kept in {})",
        dir.display()
    );
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // Any case: the sidecar's JSON lines say `WARN`, nginx's `[warn]`.
        let flagged: Vec<&str> = (text.lines())
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("warn") || l.contains("error")
            })
            .collect();
        let name = log.file_name().unwrap_or_default().to_string_lossy();
        for line in &flagged[flagged.len().saturating_sub(3)..] {
            report.push_str(&format!("\n  {name}: {line}"));
        }
    }
    report
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Wait until `addr` answers `GET path` with a 2xx (any 2xx: a readiness probe or an
/// upstream's stream head), or fail after 15 s.
pub fn wait_ready(children: &mut Children, addr: SocketAddr, path: &str) -> Result<(), String> {
    wait_ready_within(children, addr, path, Duration::from_secs(15))
}

/// [`wait_ready`], failing after `limit` (a server under valgrind starts in seconds).
pub fn wait_ready_within(
    children: &mut Children,
    addr: SocketAddr,
    path: &str,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        children.check_alive()?;
        if http_get_ok(addr, path) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{addr}{path} not ready after {} s",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn http_get_ok(addr: SocketAddr, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 2")
}

/// Resident memory of a process (`VmRSS`), in bytes.
pub fn rss(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| format!("no VmRSS for {pid}"))
}

/// Pin this process (every thread it has and will have) to the generator core and let it
/// hold as many sockets as the servers.
pub fn pin_self() -> Result<(), String> {
    let pid = std::process::id().to_string();
    run("taskset", &["-a", "-p", "-c", GENERATOR_CORE, &pid])?;
    run(
        "prlimit",
        &["--pid", &pid, &format!("--nofile={0}:{0}", nofile())],
    )
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `nginx`, `wrk` and `redis-server`, installed with apt when one is missing.
pub fn ensure_tools() -> Result<(), String> {
    install_missing(&[
        ("nginx", "nginx-light"),
        ("wrk", "wrk"),
        ("redis-server", "redis-server"),
    ])
}

/// `valgrind` and its `callgrind_control` (one package), installed with apt when missing.
pub fn ensure_valgrind() -> Result<(), String> {
    install_missing(&[("valgrind", "valgrind"), ("callgrind_control", "valgrind")])
}

/// Install with apt the package of every `(tool, package)` whose tool is not on the path.
fn install_missing(tools: &[(&str, &'static str)]) -> Result<(), String> {
    let mut missing: Vec<&str> = tools
        .iter()
        .filter(|(tool, _)| which(tool).is_none())
        .map(|&(_, package)| package)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("installing with apt: {}", missing.join(" "));
    run("apt-get", &["update", "-qq"])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(&missing);
    run("apt-get", &args)
}

pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(tool))
        .find(|p| p.is_file())
}

/// nginx as a plain reverse proxy: one worker, keep-alive to the upstream, no log.
pub fn nginx_config(dir: &Path, port: u16, upstream_port: u16) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/nginx.error.log warn;\nworker_rlimit_nofile {};\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
         upstream mcp {{ server 127.0.0.1:{upstream_port}; keepalive 128; }}\n  \
         server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      \
         proxy_pass http://mcp;\n      proxy_http_version 1.1;\n      \
         proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n",
        nofile()
    )
}
