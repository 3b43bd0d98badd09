//! The child's life: start it, ask it `server/discover` before calling it up, feed it
//! the queue, read its stdout and stderr, and when it exits fail what was open and
//! start it again after a delay that doubles (from `restart_min_ms` to
//! `restart_max_ms`) while it keeps exiting quickly. Stopping closes its stdin and sends
//! SIGTERM, then SIGKILL at the deadline.

use super::ask::ask;
use super::ids;
use super::lines::{Line, Lines};
use super::metrics::Unmatched;
use super::route::{self, Delivery, NoAnswer};
use super::tools;
use super::{BridgeShared, Outgoing, Queued};
use crate::config::Config;
use crate::text::Clipped;
use bytes::Bytes;
use serde_json::{Map, json};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;

/// The environment a child gets without `inherit_env` (each only when set).
const MINIMAL_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];
/// A child that ran this long before exiting starts again after the shortest delay.
/// How long the child has to answer each page of a `tools/list` of the bridge's own.
const LISTING_TIMEOUT: Duration = Duration::from_secs(10);
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// Lines of stderr logged per second; the rest are counted.
const STDERR_LINES_PER_SECOND: u64 = 100;
/// The longest stderr line read whole (longer ones are logged clipped all the same).
const STDERR_LINE_BYTES: usize = 8 * 1024;

/// How to run the child.
#[derive(Clone)]
pub(super) struct Spec {
    argv: Vec<String>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    restart_min: Duration,
    restart_max: Duration,
    max_line: usize,
    /// How long the child has to answer `server/discover` after it starts.
    probe_timeout: Duration,
    /// A 2025-era session's child: its era is its client's (set by the `initialize` the
    /// client sends first, so it is not probed), and it is not restarted (a new child
    /// would not know the session): when it exits, the session ends.
    session: bool,
}

impl Spec {
    pub(super) fn from_config(config: &Config) -> Self {
        let command = &config.upstream_command;
        let mut env: Vec<(OsString, OsString)> = if command.inherit_env {
            std::env::vars_os().collect()
        } else {
            MINIMAL_ENV
                .iter()
                .filter_map(|name| std::env::var_os(name).map(|v| (OsString::from(name), v)))
                .collect()
        };
        env.extend(command.env.iter().map(|(k, v)| (k.into(), v.into())));
        Self {
            argv: command.argv.clone(),
            env,
            cwd: command.cwd.clone(),
            restart_min: Duration::from_millis(command.restart_min_ms),
            restart_max: Duration::from_millis(command.restart_max_ms),
            max_line: config.limits.max_event_bytes,
            probe_timeout: Duration::from_millis(config.timeouts.response_head_ms)
                .max(Duration::from_secs(10)),
            session: false,
        }
    }

    /// The same command, for a 2025-era session's child.
    pub(super) fn for_session(&self) -> Self {
        Self {
            session: true,
            ..self.clone()
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal reaches the sidecar, which
            // drains first and then stops the child, not both at once.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        command
    }
}

/// How one run of the child ended.
enum Ended {
    Exited,
    Stopped,
}

/// Run the child until stopped, restarting it whenever it exits.
pub(super) async fn supervise(
    shared: Arc<BridgeShared>,
    spec: Spec,
    queued: Queued,
    mut stop: watch::Receiver<Option<Instant>>,
) {
    let queued = Arc::new(Mutex::new(queued));
    let mut delay = spec.restart_min;
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            shared.metrics.restarted();
        }
        let started = Instant::now();
        let ended = run(&shared, &spec, &queued, &mut stop).await;
        shared.set_up(false);
        let failed = shared.routes().fail_all();
        if failed > 0 {
            tracing::warn!(
                failed,
                "stdio upstream gone: its open requests were answered with an error"
            );
        }
        if let Ended::Stopped = ended {
            return;
        }
        if spec.session {
            // The session ends with its child; its client finds it gone (404).
            shared.stopped();
            return;
        }
        if started.elapsed() >= STABLE_AFTER {
            delay = spec.restart_min;
        }
        tracing::warn!(
            delay_ms = delay.as_millis() as u64,
            "stdio upstream exited; restarting"
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopping(&mut stop) => return,
        }
        delay = (delay * 2).min(spec.restart_max);
    }
}

/// One run of the child: until it exits, or until stopped.
async fn run(
    shared: &Arc<BridgeShared>,
    spec: &Spec,
    queued: &Arc<Mutex<Queued>>,
    stop: &mut watch::Receiver<Option<Instant>>,
) -> Ended {
    let mut child = match spec.command().spawn() {
        Ok(child) => child,
        Err(error) => {
            tracing::error!(%error, program = %Clipped(&spec.argv[0]), "cannot start the stdio upstream");
            return Ended::Exited;
        }
    };
    let pid = child.id();
    tracing::info!(pid, program = %Clipped(&spec.argv[0]), "stdio upstream started");
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Ended::Exited;
    };
    let mut reader = Aborted(tokio::spawn(read(shared.clone(), stdout, spec.max_line)));
    let _logger = Aborted(tokio::spawn(log_stderr(shared.clone(), stderr, pid)));
    let writer = Aborted(tokio::spawn(write(shared.clone(), queued.clone(), stdin)));
    let probe = probe(shared.clone(), spec.probe_timeout);
    tokio::pin!(probe);
    // A session's child is called up at once: its client's `initialize` comes first.
    let mut probing = !spec.session;
    if spec.session {
        shared.set_up(true);
    }
    loop {
        tokio::select! {
            status = child.wait() => {
                match status {
                    Ok(status) => tracing::warn!(pid, %status, "stdio upstream exited"),
                    Err(error) => tracing::warn!(pid, %error, "stdio upstream lost"),
                }
                // What it wrote before exiting is still answered (bounded: a grandchild
                // may hold stdout open).
                let _ = tokio::time::timeout(Duration::from_secs(1), reader.wait()).await;
                return Ended::Exited;
            }
            answered = &mut probe, if probing => {
                probing = false;
                if answered {
                    tracing::info!(pid, "stdio upstream answered server/discover: ready");
                    shared.set_up(true);
                    tokio::spawn(tools::learn(shared.clone(), LISTING_TIMEOUT));
                    tokio::spawn(tools::watch(shared.clone()));
                } else {
                    tracing::error!(pid, timeout_ms = spec.probe_timeout.as_millis() as u64, "stdio upstream did not answer server/discover in time; restarting it");
                    let _ = child.start_kill();
                }
            }
            deadline = stopping(stop) => {
                shared.set_up(false);
                drop(writer);
                terminate(&mut child, pid, deadline).await;
                return Ended::Stopped;
            }
        }
    }
}

/// Resolves with the deadline once stopping (now, if the bridge is gone). The guard
/// `wait_for` returns is not `Send`: it is dropped here, not held across a `select!`.
async fn stopping(stop: &mut watch::Receiver<Option<Instant>>) -> Instant {
    let deadline = stop.wait_for(Option::is_some).await.ok().and_then(|d| *d);
    deadline.unwrap_or_else(Instant::now)
}

/// Ask the child `server/discover` (as a 2026-07-28 client would, which also settles
/// the era of an SDK server that decides it by the first request); true once it
/// answered, with a result or an error.
async fn probe(shared: Arc<BridgeShared>, timeout: Duration) -> bool {
    let Some(answer) = ask(&shared, "server/discover", Map::new(), timeout).await else {
        return false;
    };
    if answer.get("error").is_some() {
        tracing::warn!(
            "stdio upstream answered server/discover with an error (a 2025-era server?); serving it anyway"
        );
    }
    true
}

/// Stop the child: stdin closed (the writer is gone), SIGTERM, SIGKILL at `deadline`.
async fn terminate(child: &mut Child, pid: Option<u32>, deadline: Instant) {
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(_) => tracing::info!(pid, "stdio upstream stopped"),
        Err(_) => {
            tracing::warn!(
                pid,
                "stdio upstream still running at the drain deadline: killed"
            );
            let _ = child.kill().await;
        }
    }
}

/// Write queued lines to the child's stdin until it closes (a request's line only while
/// its caller still waits).
async fn write(shared: Arc<BridgeShared>, queued: Arc<Mutex<Queued>>, mut stdin: ChildStdin) {
    let mut queued = queued.lock().await;
    let Queued { own, callers } = &mut *queued;
    loop {
        let Outgoing { id, line, held } = tokio::select! {
            biased;
            Some(line) = own.recv() => line,
            Some(line) = callers.recv() => line,
            else => return,
        };
        shared.metrics.queue_depth(shared.queued());
        if id.is_some_and(|id| !shared.routes().is_open(&id)) {
            continue;
        }
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            // The child is exiting; its supervisor sees it and fails what was open.
            return;
        }
        // The child's stdin took it: its bytes go back to the budget.
        drop(held);
    }
}

/// OpenRoute every line of the child's stdout until it closes.
async fn read(shared: Arc<BridgeShared>, stdout: ChildStdout, max_line: usize) {
    let mut lines = Lines::new(BufReader::new(stdout), max_line);
    while let Ok(Some(line)) = lines.next().await {
        match line {
            Line::Whole(line) => {
                let (delivery, tools_changed) = {
                    let mut routes = shared.routes();
                    let delivery = routes.deliver(&line, &shared.metrics);
                    (delivery, routes.take_tools_changed())
                };
                delivered(&shared, delivery, &line);
                // Its tools changed: listed again for the gate (a session's child is of
                // the 2025 era, whose requests carry no such headers).
                if tools_changed && shared.session.is_none() {
                    tokio::spawn(tools::learn(shared.clone(), LISTING_TIMEOUT));
                }
            }
            Line::Overlong {
                prefix,
                tail,
                length,
            } => {
                shared.metrics.overlong();
                let failed = ids::named_in(&prefix, &tail)
                    .is_some_and(|id| shared.routes().fail(&id, NoAnswer::Overlong));
                tracing::warn!(
                    bytes = length,
                    max = max_line,
                    request_failed = failed,
                    "stdio upstream wrote a line over limits.max_event_bytes; discarded"
                );
            }
        }
    }
}

/// Count and log what reached nobody (by kind and length, never its content: an answer
/// to a caller that left may carry a state, and a stray print may carry anything); cut
/// off a caller that fell behind; refuse the child's requests to the client.
fn delivered(shared: &Arc<BridgeShared>, delivery: Delivery, line: &[u8]) {
    match delivery {
        Delivery::Delivered | Delivery::Blank => {}
        // A session has one client: what names no request of it is its client's.
        Delivery::Unmatched(Unmatched::Notification, _) | Delivery::ServerRequest(..)
            if let Some(outbox) = &shared.session =>
        {
            let in_progress = shared.routes().streaming();
            outbox.send(
                Bytes::copy_from_slice(line.trim_ascii()),
                in_progress,
                &shared.metrics,
            );
        }
        Delivery::Unmatched(reason, method) => {
            shared.metrics.unmatched(reason);
            tracing::warn!(
                reason = reason.as_str(),
                method = method.as_deref().map(Clipped).map(tracing::field::display),
                bytes = line.len(),
                "stdio upstream wrote a line that belongs to no open request; dropped"
            );
        }
        Delivery::Unreadable { failed } => {
            shared.metrics.unreadable();
            tracing::warn!(
                bytes = line.len(),
                request_failed = failed,
                "stdio upstream wrote an answer that could not be read (not JSON); its request failed"
            );
        }
        Delivery::CutOff(id, reason) => {
            shared.metrics.cut_off(reason);
            tracing::warn!(
                reason = reason.as_str(),
                "stdio caller cut off: what came for it could not be held"
            );
            if let Some(id) = id {
                let cancel = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "the client fell behind"},
                });
                if shared.enqueue_own(route::line(&cancel)).is_ok() {
                    shared.metrics.cancelled();
                }
            }
        }
        Delivery::ServerRequest(id, method) => {
            shared.metrics.server_request_refused();
            tracing::warn!(method = %Clipped(&method), "stdio upstream sent a request to the client; refused (2026-07-28 has none: ask through input_required)");
            let refusal = json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": -32601, "message": "server-to-client requests are not available through mcp-state-guard (2026-07-28): use input_required"},
            });
            let _ = shared.enqueue_own(route::line(&refusal));
        }
    }
}

/// Log the child's stderr line by line, clipped and escaped, at most
/// [`STDERR_LINES_PER_SECOND`] a second (the rest counted).
async fn log_stderr(
    shared: Arc<BridgeShared>,
    stderr: tokio::process::ChildStderr,
    pid: Option<u32>,
) {
    let mut lines = Lines::new(BufReader::new(stderr), STDERR_LINE_BYTES);
    let mut window = Instant::now();
    let mut logged = 0u64;
    let mut dropped = 0u64;
    while let Ok(Some(line)) = lines.next().await {
        if window.elapsed() >= Duration::from_secs(1) {
            if dropped > 0 {
                tracing::warn!(
                    pid,
                    lines = dropped,
                    "stdio upstream stderr: lines not logged (over the rate)"
                );
            }
            window = Instant::now();
            logged = 0;
            dropped = 0;
        }
        if logged >= STDERR_LINES_PER_SECOND {
            dropped += 1;
            shared.metrics.stderr_dropped(1);
            continue;
        }
        logged += 1;
        let (Line::Whole(text) | Line::Overlong { prefix: text, .. }) = &line;
        tracing::info!(pid, line = %Clipped(&String::from_utf8_lossy(text)), "stdio upstream stderr");
    }
}

/// A task aborted when this is dropped.
struct Aborted(tokio::task::JoinHandle<()>);

impl Aborted {
    async fn wait(&mut self) {
        let _ = (&mut self.0).await;
    }
}

impl Drop for Aborted {
    fn drop(&mut self) {
        self.0.abort();
    }
}
