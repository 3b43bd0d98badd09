//! Allocations per request in the sidecar, counted by the harness's global allocator:
//! the upstream and a sidecar (the harness's configuration) run in this process, and the
//! same sequential exchanges are counted direct and through the sidecar; the difference
//! is what the sidecar allocates per request.

use crate::generator::{self, Target};
use crate::{ALLOCATOR, Phase, WORKLOADS, request_body, state_of, upstream};
use mcp_state_guard::facade::config::{self, Config};
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::Path;

const WARMUP: usize = 200;
const COUNTED: usize = 2000;

/// Allocations (count and bytes) per exchange of `COUNTED` sequential ones.
async fn count(target: &Target, body: &bytes::Bytes) -> Result<(f64, f64), String> {
    generator::closed_loop(target, body.clone(), WARMUP, 1).await?;
    let region = stats_alloc::Region::new(&ALLOCATOR);
    generator::closed_loop(target, body.clone(), COUNTED, 1).await?;
    let stats = region.change();
    Ok((
        stats.allocations as f64 / COUNTED as f64,
        stats.bytes_allocated as f64 / COUNTED as f64,
    ))
}

pub async fn per_request(dir: &Path) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("upstream: {e}"))?;
    let direct = listener.local_addr().map_err(|e| e.to_string())?;
    let upstream_task = tokio::spawn(upstream::serve(listener));
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = Config {
        listen: loopback,
        admin_listen: loopback,
        upstream: format!("http://{direct}"),
        ..Config::default()
    };
    config.state.keys_file = Some(dir.join("keys"));
    config.state.audience = Some("bench.example".into());
    config.principal.source = config::PrincipalSource::Header;
    config.principal.header = generator::PRINCIPAL_HEADER.into();
    config.principal.trusted_proxies = vec!["127.0.0.1/32".into()];
    config.timeouts.drain_ms = 1000;
    let sidecar = mcp_state_guard::facade::app::start(&config)
        .await
        .map_err(|e| format!("in-process sidecar: {e}"))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Allocations per request (sequential, {COUNTED} counted; the sidecar's = via − direct)\n"
    );
    let _ = writeln!(
        out,
        "| answer | phase | direct (client + upstream) | via the sidecar | the sidecar's own |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: |");
    let result = async {
        for (workload, path) in WORKLOADS {
            for phase in [Phase::First, Phase::Retry] {
                let at = |addr| Target {
                    addr,
                    path,
                    expect: phase.expect(),
                    forbid: None,
                };
                let (direct_body, via_body) = match phase {
                    Phase::First => (request_body(None), request_body(None)),
                    Phase::Retry => {
                        let first = Target {
                            expect: Phase::First.expect(),
                            ..at(sidecar.addr())
                        };
                        let answer =
                            generator::closed_loop(&first, request_body(None), 1, 1).await?;
                        (
                            request_body(Some(upstream::STATE)),
                            request_body(Some(&state_of(&answer[0])?)),
                        )
                    }
                };
                let (a, a_bytes) = count(&at(direct), &direct_body).await?;
                let (b, b_bytes) = count(&at(sidecar.addr()), &via_body).await?;
                let _ = writeln!(
                    out,
                    "| {workload} | {} | {a:.1} ({a_bytes:.0} B) | {b:.1} ({b_bytes:.0} B) | {:.1} ({:.0} B) |",
                    phase.label(),
                    b - a,
                    b_bytes - a_bytes
                );
            }
        }
        Ok::<_, String>(())
    }
    .await;
    sidecar.shutdown(std::time::Duration::ZERO).await;
    upstream_task.abort();
    result.map(|()| out)
}
