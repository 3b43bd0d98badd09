//! Throughput at a fixed concurrency: wrk (one thread, 64 connections) on the generator
//! core, driven by a Lua script that sends the harness's request.

use crate::generator::{PRINCIPAL, PRINCIPAL_HEADER, Target};
use crate::procs::GENERATOR_CORE;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub const CONNECTIONS: u32 = 64;

/// What one wrk run measured.
pub struct Throughput {
    pub rps: f64,
    pub requests: u64,
    /// Non-2xx answers, socket errors and timeouts.
    pub errors: u64,
}

/// The request body for wrk: one file sent every time, or (`each`) a file of one body a
/// line, each sent once in turn (single-use tokens).
pub enum WrkBody<'a> {
    Same(&'a Path),
    Each(&'a Path),
}

/// Run wrk against `target` for `duration`; `script` is where its Lua script is written.
pub fn run(
    target: &Target,
    body: WrkBody<'_>,
    duration: Duration,
    script: &Path,
) -> Result<Throughput, String> {
    let mut lua = format!(
        "wrk.method = \"POST\"\n\
         wrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"Accept\"] = \"application/json, text/event-stream\"\n\
         wrk.headers[\"Mcp-Protocol-Version\"] = \"2026-07-28\"\n\
         wrk.headers[\"Mcp-Method\"] = \"tools/call\"\n\
         wrk.headers[\"Mcp-Name\"] = \"provision\"\n\
         wrk.headers[\"{PRINCIPAL_HEADER}\"] = \"{PRINCIPAL}\"\n"
    );
    if let Some(bearer) = crate::generator::AUTHORIZATION.get() {
        lua.push_str(&format!("wrk.headers[\"Authorization\"] = \"{bearer}\"\n"));
    }
    match body {
        WrkBody::Same(file) => lua.push_str(&format!(
            "local f = assert(io.open(\"{}\", \"rb\"))\nwrk.body = f:read(\"*a\")\nf:close()\n",
            file.display()
        )),
        WrkBody::Each(file) => lua.push_str(&format!(
            "local bodies = {{}}\n\
             for line in io.lines(\"{}\") do bodies[#bodies + 1] = line end\n\
             local i = 0\n\
             request = function()\n  i = i + 1\n  \
             return wrk.format(nil, nil, nil, bodies[i] or \"\")\nend\n",
            file.display()
        )),
    }
    std::fs::write(script, lua).map_err(|e| format!("wrk script: {e}"))?;
    let out = Command::new("taskset")
        .args(["-c", GENERATOR_CORE, "wrk", "-t1"])
        .arg(format!("-c{CONNECTIONS}"))
        .arg(format!("-d{}s", duration.as_secs()))
        .arg("-s")
        .arg(script)
        .arg(format!("http://{}{}", target.addr, target.path))
        .output()
        .map_err(|e| format!("wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "wrk failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let rps = field("Requests/sec:")
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| format!("no Requests/sec in wrk's output: {text}"))?;
    let requests = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let non_2xx = field("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    // "Socket errors: connect 0, read 0, write 0, timeout 0"
    let socket: u64 = field("Socket errors:")
        .map(|v| {
            v.split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Ok(Throughput {
        rps,
        requests,
        errors: non_2xx + socket,
    })
}
