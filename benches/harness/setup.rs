//! Starting what a full run measures: the fast upstream (A), the sidecars (B, and the
//! single-use, stdio and JWT ones), nginx (C) and the floor (D), each on a free
//! loopback port and ready before the run begins; and the sidecar's configuration as a
//! deployment would write it.

use crate::procs::{self, Children};
use crate::{SINGLE_USE_MEMORY, generator, jwt, stdio};
use std::net::SocketAddr;
use std::path::Path;

/// The three ways to the upstream, plus the single-use sidecars.
pub struct Setup {
    pub direct: SocketAddr,
    pub sidecar: SocketAddr,
    pub sidecar_pid: u32,
    pub memory: SocketAddr,
    pub redis: SocketAddr,
    /// Single use on a Redis primary with a replica: each consumption waits for it.
    pub redis_replicated: SocketAddr,
    pub nginx: SocketAddr,
    pub nginx_pid: u32,
    pub bare: SocketAddr,
    pub bare_pid: u32,
    /// The sidecar in front of the fast upstream in stdio mode (`stdio.rs`).
    pub stdio: SocketAddr,
    /// The sidecar with a JWT principal (`jwt.rs`).
    pub jwt: SocketAddr,
    pub idle_rss: u64,
}

pub fn start(children: &mut Children, dir: &Path) -> Result<Setup, String> {
    let sidecar_bin = procs::sidecar_bin("HARNESS_SIDECAR_BIN");
    let upstream_port = children.upstream_and_keys(dir)?;
    let redis_port = children.spawn_redis(dir, None)?;
    let primary_port = children.spawn_redis(dir, None)?;
    children.spawn_redis(dir, Some(primary_port))?;
    let jwt_principal = jwt::setup(dir)?;
    let mut start_sidecar = |name: &'static str, extra: &str| {
        let (port, admin) = (procs::free_port(), procs::free_port());
        let config = sidecar_config(dir, port, admin, upstream_port, extra);
        let pid = spawn_sidecar(children, dir, &sidecar_bin, name, config, &[])?;
        Ok::<_, String>((loopback(port), loopback(admin), pid))
    };
    let (sidecar, sidecar_admin, sidecar_pid) = start_sidecar("sidecar", "")?;
    let (memory, memory_admin, _) = start_sidecar("sidecar-memory", SINGLE_USE_MEMORY)?;
    let (redis, redis_admin, _) = start_sidecar("sidecar-redis", &single_use_redis(redis_port))?;
    // The defaults (`redis_wait_replicas = "auto"`): the primary reports its replica,
    // so every consumption waits for it.
    let (redis_replicated, replicated_admin, _) =
        start_sidecar("sidecar-redis-replicated", &single_use_redis(primary_port))?;
    let (stdio, stdio_admin, _) = start_sidecar("sidecar-stdio", "")?;
    let (jwt, jwt_admin, _) = start_sidecar("sidecar-jwt", &jwt_principal)?;
    let nginx_port = procs::free_port();
    std::fs::write(
        dir.join("nginx.conf"),
        procs::nginx_config(dir, nginx_port, upstream_port),
    )
    .map_err(|e| format!("nginx.conf: {e}"))?;
    let nginx_bin = procs::which("nginx").ok_or("nginx not found")?;
    let conf = dir.join("nginx.conf");
    let nginx_pid = children.spawn(
        "nginx",
        &nginx_bin,
        &[
            "-c",
            conf.to_str().expect("a UTF-8 temp path"),
            "-p",
            dir.to_str().expect("a UTF-8 temp path"),
            "-e",
            "stderr",
        ],
        &dir.join("nginx.log"),
    )?;
    let bare_port = procs::free_port();
    let bare_pid = children.spawn(
        "bare-proxy",
        &procs::bare_bin()?,
        &[
            "--role-bare-proxy",
            &bare_port.to_string(),
            &upstream_port.to_string(),
        ],
        &dir.join("bare.log"),
    )?;
    procs::wait_ready(children, loopback(upstream_port), "/")?;
    for admin in [
        sidecar_admin,
        memory_admin,
        redis_admin,
        replicated_admin,
        stdio_admin,
        jwt_admin,
    ] {
        procs::wait_ready(children, admin, "/readyz")?;
    }
    procs::wait_ready(children, loopback(nginx_port), "/")?;
    procs::wait_ready(children, loopback(bare_port), "/")?;
    let idle_rss = procs::rss(sidecar_pid)?;
    Ok(Setup {
        direct: loopback(upstream_port),
        sidecar,
        sidecar_pid,
        memory,
        redis,
        redis_replicated,
        nginx: loopback(nginx_port),
        nginx_pid,
        bare: loopback(bare_port),
        bare_pid,
        stdio,
        jwt,
        idle_rss,
    })
}

/// The `[single_use]` section of a sidecar whose store is the Redis server at `port`.
fn single_use_redis(port: u16) -> String {
    format!(
        "[single_use]\ntools = [\"provision\"]\nstore = \"redis\"\n\
         redis_url = \"redis://127.0.0.1:{port}\"\n"
    )
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Start the sidecar `binary` as `name` on `config` (written to `dir/<name>.toml`, its
/// log to `dir/<name>.log`), adjusted by name: `sidecar-jwt` reads its caller from the
/// access token instead of the header, `sidecar-stdio` runs the stdio upstream; `env`
/// added to its environment; its pid.
pub fn spawn_sidecar(
    children: &mut Children,
    dir: &Path,
    binary: &Path,
    name: &'static str,
    mut config: String,
    env: &[(&str, &str)],
) -> Result<u32, String> {
    if name == "sidecar-jwt" {
        config = config.replace(&header_principal(), "");
    }
    if name == "sidecar-stdio" {
        let me = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
        config = stdio::config(&config, &me);
    }
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, config).map_err(|e| format!("{name}: {e}"))?;
    children.spawn_with_env(
        name,
        binary,
        &["run", "--config", file.to_str().expect("a UTF-8 temp path")],
        env,
        &dir.join(format!("{name}.log")),
    )
}

/// A sidecar as a deployment would run it: keys, an audience, a header principal from
/// a trusted front proxy, warnings only in the log.
pub fn sidecar_config(dir: &Path, port: u16, admin: u16, upstream: u16, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         upstream = \"http://127.0.0.1:{upstream}\"\n\
         [state]\nkeys_file = \"{}\"\naudience = \"bench.example\"\n{}\
         [limits]\nmax_connections = 30000\n[log]\nlevel = \"warn\"\n{extra}",
        dir.join("keys").display(),
        header_principal(),
    )
}

/// The `[principal]` section of a header principal from a trusted front proxy.
pub fn header_principal() -> String {
    format!(
        "[principal]\nsource = \"header\"\nheader = \"{}\"\n\
         trusted_proxies = [\"127.0.0.1/32\"]\n",
        generator::PRINCIPAL_HEADER,
    )
}
