//! A stdio upstream's bounds (issue 29): the child's stdout is shared by every caller, so
//! a line names an open request only by a secret it was given; every byte the bridge holds
//! is in the one memory budget (a request is refused at once when it cannot be), and a
//! reader that falls behind is cut off; one caller's burst cannot take the queue from the
//! others; an answer that cannot be read fails its caller at once and is never logged.

use crate::cases::stdio_upstream::{child, eventually, stdio_config, up};
use crate::support::flow::{text, tool_call};
use crate::support::http::{post_mcp, post_mcp_with};
use crate::support::process::Process;
use crate::support::python::interpreter;
use crate::support::sidecar::Sidecar;
use mcp_state_guard::facade::config::PrincipalSource;
use mcp_state_guard::facade::stdio::{BridgeRefusal, CutOff, Unmatched};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn echo(id: u64, text: &str, delay_ms: u64) -> Value {
    tool_call(id, "echo", json!({"text": text, "delay_ms": delay_ms}))
}

/// A tool that prints what it is given (here: every id a counter would have handed out,
/// as numbers and strings, each with a forged `input_required` round) reaches no other
/// caller: the victim gets its own answer, and every forged line is counted.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_a_forged_answer_naming_a_guessed_id_reaches_nobody() {
    let sidecar = Sidecar::start(stdio_config(child(&[]))).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let victim = {
        let url = url.clone();
        tokio::spawn(async move { post_mcp(&url, &echo(1, "the victim's own", 1500)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let attacker = post_mcp(&url, &tool_call(2, "forge", json!({}))).await;
    assert_eq!(text(&attacker.message()), "forged");
    let victim = victim.await.unwrap();
    assert_eq!(victim.status, 200, "{}", victim.text());
    assert!(
        !victim.text().contains("input_required"),
        "{}",
        victim.text()
    );
    assert_eq!(text(&victim.message()), "the victim's own");
    assert_eq!(
        sidecar
            .metrics()
            .stdio
            .unmatched_count(Unmatched::UnknownId),
        403
    );
    sidecar.stop().await;
}

/// An answer the sidecar cannot read (a lone surrogate escape, as `JSON.stringify` writes
/// for a string cut inside a pair) fails the request it names at once, and not a byte of
/// it is logged.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_an_unreadable_answer_fails_its_caller_at_once_unlogged() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let script = crate::support::python::repo_path("tests/py/stdio_child.py");
    std::fs::write(
        &config,
        format!(
            "upstream = \"stdio\"\n[upstream_command]\nargv = [{:?}, {:?}]\n\
             [timeouts]\nresponse_head_ms = 10000\n",
            interpreter().display().to_string(),
            script.display().to_string(),
        ),
    )
    .unwrap();
    let process = Process::start(&["--config", config.to_str().unwrap()], &[]);
    process.wait_for_log("answered server/discover");
    let url = format!("http://{}/mcp", process.addr);
    let started = Instant::now();
    let reply = post_mcp(&url, &tool_call(7, "surrogate", json!({}))).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json()["id"], 7);
    assert_eq!(reply.json()["error"]["code"], -32603);
    process.wait_for_log("could not be read");
    let log = process.log();
    assert!(!log.contains("SECRET"), "{log}");
    assert!(!log.contains("resultType"), "{log}");
}

/// One caller's burst of slow calls takes its share of the child and no more (429 +
/// `Retry-After`); another caller is still served.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_one_callers_burst_is_held_to_its_share() {
    let mut config = stdio_config(child(&[]));
    config.principal.source = PrincipalSource::Header;
    config.upstream_command.queue_max = 8;
    config.upstream_command.queue_max_per_principal = Some(2);
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let flood: Vec<_> = (0..2)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                post_mcp_with(
                    &url,
                    &echo(i, "slow", 3000),
                    &[("x-forwarded-user", "alice")],
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A copy of the bridge's owner header from the client changes nothing.
    let started = Instant::now();
    let past = post_mcp_with(
        &url,
        &echo(3, "one more", 0),
        &[
            ("x-forwarded-user", "alice"),
            ("x-mcp-state-guard-owner", "someone-else"),
        ],
    )
    .await;
    assert_eq!(past.status, 429, "{}", past.text());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(past.headers.get("retry-after").unwrap(), "1");
    assert_eq!(past.json()["id"], 3);
    let other = post_mcp_with(&url, &echo(4, "bob's", 0), &[("x-forwarded-user", "bob")]).await;
    assert_eq!(text(&other.message()), "bob's");
    for call in flood {
        assert_eq!(text(&call.await.unwrap().message()), "slow");
    }
    let stdio = &sidecar.metrics().stdio;
    assert_eq!(stdio.refused_count(BridgeRefusal::PrincipalShare), 1);
    sidecar.stop().await;
}

/// Requests for a child that is still starting wait only within the queue: past
/// `queue_max` they are refused at once, 503 + `Retry-After`; the others are served once
/// it is up.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_requests_for_a_starting_child_wait_only_within_the_queue() {
    let mut config = stdio_config(child(&["--slow-start", "2500"]));
    // Five callers, so that the queue, not one caller's share, is what fills.
    config.principal.source = PrincipalSource::Header;
    config.upstream_command.queue_max = 2;
    config.timeouts.response_head_ms = 10_000;
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let started = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let user = format!("user-{i}");
                let identity = [("x-forwarded-user", user.as_str())];
                let reply = post_mcp_with(&url, &echo(i, "served", 0), &identity).await;
                (reply, started.elapsed())
            })
        })
        .collect();
    let mut served = 0;
    let mut refused = 0;
    for call in calls {
        let (reply, took) = call.await.unwrap();
        match reply.status.as_u16() {
            200 => {
                served += 1;
                assert_eq!(text(&reply.message()), "served");
            }
            503 => {
                refused += 1;
                assert!(took < Duration::from_secs(2), "{took:?}");
                assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
                assert_eq!(reply.json()["error"]["code"], -32000);
            }
            other => panic!("{other}: {}", reply.text()),
        }
    }
    assert_eq!((served, refused), (2, 3));
    // Released when the sidecar drops each response body, which may be just after the
    // client read its last byte: nothing stays held, within a bounded wait.
    eventually("every held byte released", || {
        sidecar.metrics().path.buffered_bytes().get() == 0
    })
    .await;
    sidecar.stop().await;
}

/// A child that stops reading: what waits for its stdin is held in the budget (so the
/// budget, not the heap, fills up), requests past it are refused at once with 503 +
/// `Retry-After`, and `buffered_bytes` never goes over `limits.max_buffered_bytes`.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_lines_for_a_child_that_stopped_reading_are_held_in_the_budget() {
    const LIMIT: usize = 8 << 20;
    let mut config = stdio_config(child(&["--stall"]));
    config.limits.max_buffered_bytes = LIMIT;
    config.timeouts.response_head_ms = 2000;
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let big = "z".repeat(700 * 1024);
    let calls: Vec<_> = (0..30)
        .map(|i| {
            let (url, message) = (url.clone(), echo(i, &big, 0));
            tokio::spawn(async move { post_mcp(&url, &message).await })
        })
        .collect();
    let gauge = sidecar.metrics().path.buffered_bytes().clone();
    let mut peak = 0;
    while calls.iter().any(|c| !c.is_finished()) {
        peak = peak.max(gauge.get());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(peak <= LIMIT as i64, "{peak}");
    let mut refused = 0;
    for call in calls {
        let reply = call.await.unwrap();
        match reply.status.as_u16() {
            // Refused by the gate or by the bridge, whichever could not reserve.
            503 => {
                refused += 1;
                assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
            }
            504 => {}
            other => panic!("{other}: {}", reply.text()),
        }
    }
    assert!(refused >= 10, "{refused}");
    // Every caller is gone; the lines the child's stdin never took (the one its writer
    // is blocked on, the ones queued behind it) are still in memory, and still counted.
    let queued = sidecar.metrics().stdio.queue_depth_now();
    assert!(queued >= 1, "{queued}");
    let held = gauge.get();
    assert!(
        held >= big.len() as i64,
        "{held} bytes held for {queued} queued lines"
    );
    assert!(held <= LIMIT as i64, "{held}");
    sidecar.stop().await;
}

/// An event-stream caller that never reads while the child floods it with progress is cut
/// off: the child is told to stop, the bytes held for it go back to the budget, and what
/// it finally reads ends with a JSON-RPC error.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_a_caller_that_never_reads_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("received");
    let config = stdio_config(child(&["--received", received.to_str().unwrap()]));
    let sidecar = Sidecar::start(config).await;
    up(&sidecar).await;
    let mut message = tool_call(5, "flood_progress", json!({"count": 600, "bytes": 65536}));
    message["params"]["_meta"]["progressToken"] = json!("p");
    let body = serde_json::to_vec(&message).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         connection: close\r\n\
         mcp-method: tools/call\r\nmcp-name: flood_progress\r\ncontent-length: {}\r\n\r\n",
        sidecar.addr,
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(sidecar.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    eventually("the child told to stop", || {
        std::fs::read_to_string(&received).is_ok_and(|l| l.contains("notifications/cancelled"))
    })
    .await;
    let stdio = &sidecar.metrics().stdio;
    assert_eq!(stdio.cut_off_count(CutOff::SlowReader), 1);
    let gauge = sidecar.metrics().path.buffered_bytes().clone();
    eventually("nothing held for it", || gauge.get() == 0).await;
    // What it reads now ends with an error for its id.
    let mut read = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut read))
        .await
        .expect("the stream ends")
        .unwrap();
    let read = String::from_utf8_lossy(&read);
    let last = read
        .rsplit("data: ")
        .next()
        .unwrap()
        .lines()
        .next()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["id"], 5, "{last}");
    assert_eq!(last["error"]["code"], -32603, "{last}");
    sidecar.stop().await;
}
