//! `--memory`: the memory table alone (the sidecar's idle RSS, and per idle SSE stream
//! held through B, nginx and D), and the streams' holding the full run shares.

use super::{Settings, Setup, generator, procs, report, with_servers};
use std::process::ExitCode;
use std::time::Duration;

/// The memory table only, the idle streams held through each proxy with no load before
/// them (so it reads a little higher than the full run's, whose proxies reuse what the
/// load freed): a quick way to compare two builds' cost per stream.
pub(super) fn run(settings: &Settings) -> ExitCode {
    let held = with_servers(|setup, runtime, _| {
        let streams = runtime.block_on(hold_streams(settings, setup));
        let (mut out, mut errors) = (String::new(), Vec::new());
        report::memory(&mut out, &mut errors, settings, setup, None, &streams);
        Ok((out, errors))
    });
    match held {
        Ok((table, errors)) => {
            println!("{table}");
            if errors.is_empty() {
                return ExitCode::SUCCESS;
            }
            eprintln!("harness: {}", errors.join("; "));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One proxy's memory with idle SSE streams held through it.
pub(super) struct Streams {
    pub(super) before: u64,
    pub(super) with: u64,
    pub(super) held: usize,
    pub(super) error: Option<String>,
}

/// RSS of the sidecar, of nginx and of the bare hyper proxy with `settings.streams` idle
/// SSE streams open through each, in turn (or as many as opened before a failure).
pub(super) async fn hold_streams(
    settings: &Settings,
    setup: &Setup,
) -> Result<[Streams; 3], String> {
    let measure = async |addr, pid| {
        let before = procs::rss(pid)?;
        let (held, error) = generator::hold_streams(addr, "/mcp", settings.streams).await;
        // Let the proxy settle (its buffers grown, nothing pending) before reading.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let with = procs::rss(pid)?;
        let count = held.len();
        drop(held);
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok::<_, String>(Streams {
            before,
            with,
            held: count,
            error,
        })
    };
    let sidecar = measure(setup.sidecar, setup.sidecar_pid).await?;
    let nginx = measure(setup.nginx, setup.nginx_pid).await?;
    let bare = measure(setup.bare, setup.bare_pid).await?;
    Ok([sidecar, nginx, bare])
}
