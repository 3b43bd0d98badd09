//! Faults (issue 15): under each one the sidecar serves what it can, refuses what it
//! must (a clear error, counted), recovers without a restart once the fault ends, and
//! gives every request it accepted exactly one answer (each request here has a bounded
//! deadline, and answers are counted against requests sent).
//!
//! Faults proved elsewhere, not repeated here:
//! - upstream refusing connections, or not sending a head in time →
//!   `upstream_faults::upstream_failures_become_gateway_errors_with_the_request_id`;
//!   readiness while it is down → `operations::readyz_fails_while_the_upstream_is_unreachable`;
//! - upstream cutting (FIN or reset) one SSE stream →
//!   `upstream_faults::a_connection_cut_mid_stream_ends_with_an_error_event`;
//! - upstream stalling after the head (JSON and SSE) →
//!   `upstream_faults::an_upstream_stalling_after_the_head_gets_a_gateway_error_in_time`;
//!   answering byte by byte →
//!   `upstream_faults::a_byte_by_byte_upstream_is_sealed_in_time_and_cut_beyond_it`;
//!   resetting mid-stream under concurrent load →
//!   `upstream_faults::upstream_resets_mid_stream_under_load_end_every_stream_once`;
//! - Redis down and back (fails closed, readiness off, the refused token still works
//!   once after) → `single_use::a_redis_outage_fails_closed_and_heals_without_a_restart`;
//! - JWKS endpoint down (last good keys kept, refreshed when it answers) →
//!   `jwt::jwks_url_rotates_on_an_unknown_kid_and_survives_an_outage`;
//! - a key file staying broken turns readiness off and says why →
//!   `operations::readyz_fails_while_the_key_file_stays_broken_and_says_so`;
//! - TLS certificate rotated under open connections, a broken certificate refused once →
//!   `tls::the_listener_speaks_h2_and_http1_and_rotates_certificates_under_open_connections`.
//!
//! Here: Redis slow; the key file emptied, corrupted and removed while traffic flows; TLS
//! files replaced with garbage and removed; SIGTERM to the real binary under load; a
//! client going away mid-stream. Fakes only where a real peer cannot be made to misbehave
//! on demand.

use crate::support::fake::{
    FakeBody, FakeUpstream, Reply, Step, complete, event, input_required, next_data, open,
    plaintext, progress, sealed, tools_call, wait_until,
};
use crate::support::http::{Reply as ClientReply, mcp_headers, meta, post_mcp, send};
use crate::support::load::{held, post_mcp_owned, until_idle};
use crate::support::pki::{Ca, Files, client_config};
use crate::support::process::Process;
use crate::support::redis::RedisServer;
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::config::{Config, SingleUseStore};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const KEY_A: &str = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0";
const KEY_B: &str = "d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeeff0";

/// First calls are asked a question with a plaintext state; retries complete with it.
fn asking(message: &Value) -> Reply {
    let id = message["id"].clone();
    let answer = match message["params"]["requestState"].as_str() {
        None => input_required(id, json!(plaintext())),
        Some(state) => complete(id, &format!("done with {state}")),
    };
    Reply::json(answer.to_string())
}

/// A `tools/call` of `tool`, retrying with `token` when given.
async fn call(url: &str, id: u64, tool: &str, token: Option<&str>) -> ClientReply {
    let mut params = json!({"name": tool, "arguments": {}, "_meta": meta()});
    if let Some(token) = token {
        params["requestState"] = json!(token);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu"}}});
    }
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let body = serde_json::to_vec(&message).unwrap();
    send(
        Method::POST,
        url,
        &mcp_headers("tools/call", Some(tool)),
        body,
        T,
    )
    .await
}

/// One whole flow: asked, then answered with the sealed state. Panics unless both
/// legs succeed and the upstream got its own plaintext back.
async fn flow(url: &str, id: u64) {
    let first = call(url, id, "provision", None).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let token = sealed(&first.json()["result"]);
    let second = call(url, id, "provision", Some(&token)).await;
    assert_eq!(second.status, 200, "{}", second.text());
    let text = second.json()["result"]["content"][0]["text"].clone();
    assert_eq!(text, json!(format!("done with {}", plaintext())));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_redis_fails_closed_within_the_store_timeout_and_heals() {
    let redis = RedisServer::start();
    let fake = FakeUpstream::start(|r| asking(&r.json())).await;
    let mut config = sidecar::config(&fake.base_url());
    config.single_use.store = SingleUseStore::Redis;
    config.single_use.redis_url = Some(redis.url());
    config.single_use.redis_timeout_ms = 200;
    config.single_use.tools = vec!["approve_*".into()];
    let sidecar = Sidecar::with_keys(config, &[KEY_A], "svc").await;
    let url = sidecar.mcp_url();
    let first = call(&url, 1, "approve_payment", None).await;
    let token = sealed(&first.json()["result"]);

    // Every command waits 1.5 s: longer than the store timeout.
    assert_eq!(
        redis.command("CLIENT PAUSE 1500 ALL").as_deref(),
        Some("+OK")
    );
    let forwarded = fake.count();
    let started = Instant::now();
    let refused = call(&url, 2, "approve_payment", Some(&token)).await;
    let took = started.elapsed();
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json()["error"]["message"],
        "Invalid or expired requestState"
    );
    assert!(
        took < Duration::from_millis(1_200),
        "waited {took:?} for a slow store"
    );
    assert_eq!(
        fake.count(),
        forwarded,
        "forwarded without a recorded consumption"
    );
    assert_eq!(
        sidecar.metrics().path.verified_count("store_unavailable"),
        1
    );
    // What needs no store is still served.
    flow(&url, 3).await;

    // Redis answers again: single-use flows work without a restart, once each.
    let deadline = Instant::now() + T;
    loop {
        let first = call(&url, 4, "approve_payment", None).await;
        let token = sealed(&first.json()["result"]);
        let retry = call(&url, 4, "approve_payment", Some(&token)).await;
        if retry.status == 200 {
            let again = call(&url, 4, "approve_payment", Some(&token)).await;
            assert_eq!(
                again.status,
                400,
                "a replay after the heal: {}",
                again.text()
            );
            break;
        }
        assert!(Instant::now() < deadline, "not healed: {}", retry.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The consumption that timed out was queued, and Redis applied it once it woke: a
    // write's outcome is unknown after a timeout, so the paused token is spent (refused
    // as a replay, never forwarded); the client starts that flow again.
    let forwarded = fake.count();
    let replays = sidecar.metrics().path.verified_count("replayed");
    let late = call(&url, 5, "approve_payment", Some(&token)).await;
    assert_eq!(late.status, 400, "{}", late.text());
    assert_eq!(
        sidecar.metrics().path.verified_count("replayed"),
        replays + 1
    );
    assert_eq!(fake.count(), forwarded);
    sidecar.stop().await;
}

/// Flows run back to back until `stop`; returns (flows, failures as text).
fn traffic(url: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    tokio::spawn(async move {
        let (mut done, mut failures) = (0, Vec::new());
        let mut id = 100;
        while !stop.load(Ordering::SeqCst) {
            id += 1;
            let first = call(&url, id, "provision", None).await;
            if first.status != 200 {
                failures.push(first.text());
                continue;
            }
            let token = sealed(&first.json()["result"]);
            let second = call(&url, id, "provision", Some(&token)).await;
            if second.status != 200 {
                failures.push(second.text());
            }
            done += 1;
        }
        (done, failures)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_file_emptied_corrupted_or_removed_under_traffic_keeps_the_last_good_ring() {
    let fake = FakeUpstream::start(|r| asking(&r.json())).await;
    let mut config = sidecar::config(&fake.base_url());
    config.state.reload_interval_ms = 100;
    let sidecar = Sidecar::with_keys(config, &[KEY_A], "svc").await;
    let url = sidecar.mcp_url();
    let dir = sidecar.keys_dir.as_ref().unwrap().path().to_owned();
    let path = dir.join("keys");
    let minted_before = {
        let first = call(&url, 1, "provision", None).await;
        sealed(&first.json()["result"])
    };
    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(url.clone(), stop.clone());
    let metrics = sidecar.metrics();
    let bad: [(&str, Option<&str>); 3] = [
        ("emptied", Some("")),
        ("corrupted", Some("not-hex-at-all\n")),
        ("removed", None),
    ];
    for (n, (what, content)) in bad.into_iter().enumerate() {
        match content {
            Some(content) => std::fs::write(&path, content).unwrap(),
            None => std::fs::remove_file(&path).unwrap(),
        }
        wait_until(
            || metrics.keys.key_reload_count(false) == n as u64 + 1,
            &format!("the {what} key file is refused"),
        )
        .await;
        // Restored between faults, so that each is a change of its own.
        std::fs::write(&path, format!("{KEY_A}\n")).unwrap();
        wait_until(
            || metrics.keys.key_reload_count(true) == n as u64 + 1,
            "the good file is taken back",
        )
        .await;
    }
    // Logged and counted once each, not at every poll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(metrics.keys.key_reload_count(false), 3);
    // A new good ring is picked up while traffic flows: B mints, A still opens.
    let tmp = dir.join("keys.next");
    std::fs::write(&tmp, format!("{KEY_B}\n{KEY_A}\n")).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    wait_until(|| metrics.keys.key_reload_count(true) == 4, "the new ring").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    let (done, failures) = tokio::time::timeout(T, load).await.unwrap().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(done > 0);
    let retry = call(&url, 1, "provision", Some(&minted_before)).await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    flow(&url, 2).await;
    sidecar.stop().await;
}

/// A `tools/call` over HTTPS trusting `ca`: its status, or why it failed.
async fn shown(url: &str, ca: &Ca) -> Result<http::StatusCode, String> {
    let body = serde_json::to_vec(&tools_call(1, None)).unwrap();
    let headers = mcp_headers("tools/call", Some("provision"));
    let config = client_config(ca, None);
    let reply = crate::support::tls::send(config, false, Method::POST, url, &headers, body);
    reply.await.map(|r| r.status)
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_files_replaced_with_garbage_keep_the_last_good_certificate() {
    let ca = Ca::new("faults");
    let files = Files::new();
    let leaf = ca.server();
    let cert = files.put("tls.crt", &leaf.cert_pem);
    let key = files.put("tls.key", &leaf.key_pem);
    let fake = FakeUpstream::start(|r| asking(&r.json())).await;
    let mut config = sidecar::config(&fake.base_url());
    config.tls.cert_file = Some(cert.clone());
    config.tls.key_file = Some(key.clone());
    config.tls.reload_interval_ms = 100;
    let sidecar = Sidecar::start(config).await;
    let url = format!("https://127.0.0.1:{}/mcp", sidecar.addr.port());
    assert_eq!(shown(&url, &ca).await.unwrap(), 200);
    let metrics = sidecar.metrics();
    let garbage: [(&str, Option<&str>, Option<&str>); 3] = [
        (
            "garbage pair",
            Some("\u{0}\u{1}garbage"),
            Some("more garbage"),
        ),
        (
            "key of another certificate",
            None,
            Some(&ca.server().key_pem),
        ),
        ("files removed", None, None),
    ];
    for (n, (what, cert_text, key_text)) in garbage.into_iter().enumerate() {
        match (cert_text, key_text) {
            (None, None) => {
                std::fs::remove_file(&cert).unwrap();
                std::fs::remove_file(&key).unwrap();
            }
            _ => {
                if let Some(text) = cert_text {
                    std::fs::write(&cert, text).unwrap();
                }
                if let Some(text) = key_text {
                    std::fs::write(&key, text).unwrap();
                }
            }
        }
        wait_until(
            || metrics.tls.tls_reload_count(false) == n as u64 + 1,
            &format!("the {what} is refused"),
        )
        .await;
        assert_eq!(
            shown(&url, &ca).await.unwrap(),
            200,
            "{what}: the last good certificate serves"
        );
    }
    // A good pair again (another one): in use without a restart.
    let other = Ca::new("renewed");
    let renewed = other.server();
    std::fs::write(&key, &renewed.key_pem).unwrap();
    std::fs::write(&cert, &renewed.cert_pem).unwrap();
    wait_until(
        || metrics.tls.tls_reload_count(true) >= 1,
        "the renewed pair",
    )
    .await;
    assert_eq!(shown(&url, &other).await.unwrap(), 200);
    assert!(
        shown(&url, &ca).await.is_err(),
        "the old certificate is no longer shown"
    );
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_under_load_answers_every_accepted_request_then_exits_zero() {
    // Each answer takes 2.5 s: SIGTERM lands while all of them are in flight.
    let fake = FakeUpstream::start(|r| {
        let id = r.json()["id"].clone();
        Reply::json(complete(id, "finished").to_string()).delayed(Duration::from_millis(2_500))
    })
    .await;
    let mut process = Process::start(
        &[],
        &[
            ("MCP_STATE_GUARD_UPSTREAM", &fake.base_url()),
            // Readiness grace: drain_ms / 6 = 1 s.
            ("MCP_STATE_GUARD_TIMEOUTS__DRAIN_MS", "6000"),
        ],
    );
    let url = format!("http://{}/mcp", process.addr);
    const N: u64 = 16;
    let answered = Arc::new(AtomicUsize::new(0));
    let requests: Vec<_> = (1..=N)
        .map(|id| {
            let (url, answered) = (url.clone(), answered.clone());
            tokio::spawn(async move {
                let reply = post_mcp(&url, &tools_call(id, None)).await;
                // Counted when the whole answer is in.
                answered.fetch_add(1, Ordering::SeqCst);
                reply
            })
        })
        .collect();
    wait_until(
        || fake.count() as u64 == N,
        "every request reaches the upstream",
    )
    .await;
    let signalled = Instant::now();
    process.signal("TERM");
    tokio::task::block_in_place(|| process.wait_for_log("shutting down"));
    // Within the readiness grace the listener still accepts: that request is served too.
    let late = tokio::spawn(post_mcp_owned(url.clone(), N + 1));
    // Past the readiness grace, before the answers: no new connection is accepted.
    tokio::time::sleep(Duration::from_millis(1_500).saturating_sub(signalled.elapsed())).await;
    assert_eq!(
        answered.load(Ordering::SeqCst),
        0,
        "answered before the upstream did"
    );
    let addr: SocketAddr = process.addr.parse().unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "a new connection was accepted while draining"
    );
    for (id, request) in (1..=N).zip(requests) {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["id"], json!(id));
        assert_eq!(reply.json()["result"]["content"][0]["text"], "finished");
    }
    assert_eq!(answered.load(Ordering::SeqCst) as u64, N);
    let late = late.await.unwrap();
    assert_eq!(late.status, 200, "{}", late.text());
    assert_eq!(late.json()["id"], json!(N + 1));
    assert_eq!(fake.count() as u64, N + 1, "nothing retried or duplicated");
    let status = tokio::task::block_in_place(|| process.wait_exit(Duration::from_secs(6)));
    let status = status.expect("exits within the drain deadline");
    assert_eq!(status.code(), Some(0));
    assert!(process.log().contains("drained"), "{}", process.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_mid_stream_leaves_no_task_stream_or_upstream_behind() {
    // SSE: a notification, then a keep-alive comment every 100 ms for 30 s; JSON: the
    // start of a body, then a space every 100 ms. (Each write after the sidecar let go
    // fails, which is how the fake sees that its connection was closed.)
    let fake = FakeUpstream::start(|request| {
        let trickle = |byte: &'static str| {
            (0..300).flat_map(move |_| {
                [
                    Step::Sleep(Duration::from_millis(100)),
                    Step::Data(byte.into()),
                ]
            })
        };
        match request.header("x-case") {
            Some("sse") => {
                let mut steps = vec![Step::Data(event("\n", &progress(1)).into())];
                steps.extend(trickle(": ping\n\n"));
                Reply::sse(steps)
            }
            Some("json") => {
                let mut steps = vec![Step::Data("{\"jsonrpc\":\"2.0\",\"id\":1,".into())];
                steps.extend(trickle(" "));
                Reply::new(200, FakeBody::steps(steps)).header("content-type", "application/json")
            }
            _ => Reply::json(complete(json!(1), "warm").to_string()),
        }
    })
    .await;
    let mut config: Config = sidecar::config(&fake.base_url());
    config.timeouts.response_head_ms = 30_000;
    // The warm-up's pooled upstream connection (and its task) goes before the baseline.
    config.timeouts.upstream_idle_ms = 100;
    let sidecar = Sidecar::start(config).await;
    // A first exchange so that lazily started parts are already running.
    let warm = post_mcp(&sidecar.mcp_url(), &tools_call(1, None)).await;
    assert_eq!(warm.status, 200, "{}", warm.text());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = held(sidecar.admin_addr).await;
    assert_eq!(&idle[..3], &[0.0, 0.0, 0.0]);
    // (A whole body whose connection the pool closed counts here too.)
    let abandoned = fake.unfinished();

    let url = sidecar.mcp_url();
    for (n, case) in ["sse", "json"].into_iter().enumerate() {
        let mut headers = mcp_headers("tools/call", Some("provision"));
        headers.push(("x-case".into(), case.into()));
        let body = serde_json::to_vec(&tools_call(1, None)).unwrap();
        let request = open(Method::POST, &url, &headers, FakeBody::whole(body), false);
        match case {
            "sse" => {
                let mut response = request.await;
                let first = next_data(response.body_mut(), T).await.unwrap();
                assert_eq!(&first[..], event("\n", &progress(1)).as_bytes());
                let busy = held(sidecar.admin_addr).await;
                assert_eq!(busy[1], 1.0, "one stream open");
                drop(response);
            }
            _ => {
                // The sidecar is reading the trickle: the client gives up before a head.
                let gave_up = tokio::time::timeout(Duration::from_millis(500), request).await;
                assert!(gave_up.is_err());
            }
        }
        wait_until(
            || fake.unfinished() == abandoned + n + 1,
            &format!("{case}: the upstream request closed"),
        )
        .await;
        until_idle(sidecar.admin_addr, &idle).await;
    }
    sidecar.stop().await;
}
