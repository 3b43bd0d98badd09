//! The image as the chart runs it: `check-config` on the chart's configuration, mounted
//! where the chart mounts it, passes and names a broken key file; the entrypoint with the
//! chart's args serves the README's round trip as the image's user and drains on SIGTERM.

use super::{
    CONFIG_DIR, KEYS_DIR, NONROOT, Started, chart_defaults, chart_volumes, entrypoint_with,
    round_trip, signal, strs, until_ok,
};
use crate::support::http::send;
use crate::support::image::{Container, descendant, free_port, inspect, sidecar_image, uids};
use crate::support::legacy::{LegacyServer, Mode};
use http::Method;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn check_config_in_the_image_passes_the_charts_config_and_names_a_broken_key_file() {
    let image = sidecar_image();
    let inspected = inspect(&image.name);
    let config_file = format!("{CONFIG_DIR}/mcp-state-guard.toml");
    let check = entrypoint_with(&inspected, &["check-config", "--config", &config_file]);
    let container = Container::of(&image.name);

    let rendered_key = std::fs::read_to_string(
        Path::new(chart_defaults()["root"].as_str().unwrap()).join("etc/mcp-state-guard/keys/keys"),
    )
    .unwrap();
    let (volumes, _dir) = chart_volumes(&rendered_key);
    let (ok, said) = container.run(&volumes, &strs(&check));
    assert!(
        ok,
        "check-config refused the chart's configuration:\n{said}"
    );
    assert_eq!(said.trim(), "configuration is valid");

    let (volumes, _dir) = chart_volumes("too-short\n");
    let (ok, said) = container.run(&volumes, &strs(&check));
    assert!(!ok, "a 9-byte key was accepted");
    assert!(said.contains("state.keys_file"), "{said}");
    assert!(said.contains(&format!("{KEYS_DIR}/keys")), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sidecar_in_the_image_serves_the_round_trip_and_drains_on_sigterm() {
    let image = sidecar_image();
    let inspected = inspect(&image.name);
    let upstream = LegacyServer::start(Mode::Json);
    let key = "0123456789abcdef0123456789abcdef-image-round-trip";
    let (mut options, _dir) = chart_volumes(&format!("{key}\n"));
    let (port, admin) = (free_port(), free_port());
    const DRAIN_MS: u64 = 3000;
    // The chart's configuration, with what the pod's network gives it replaced: loopback
    // ports on this machine, and the legacy server as the upstream.
    for (name, value) in [
        ("LISTEN", format!("127.0.0.1:{port}")),
        ("ADMIN_LISTEN", format!("127.0.0.1:{admin}")),
        ("UPSTREAM", upstream.base_url()),
        ("TIMEOUTS__DRAIN_MS", DRAIN_MS.to_string()),
    ] {
        options.push(format!("--env=MCP_STATE_GUARD_{name}={value}"));
    }
    // What Kubernetes runs: the entrypoint with the chart's args.
    let pod = &chart_defaults()["pod"];
    let args: Vec<&str> = pod["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let argv = entrypoint_with(&inspected, &args);
    let container = Container::of(&image.name);
    let mut started = Started::spawn(container.command(&options, &strs(&argv)));
    let admin_url = format!("http://127.0.0.1:{admin}");
    until_ok(&format!("{admin_url}/readyz"), &mut started).await;
    let health = send(
        Method::GET,
        &format!("{admin_url}/healthz"),
        &[],
        "",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(health.status, 200);

    // The sidecar runs as the image's user, in the host's network namespace.
    let pid = descendant(started.child.id(), "mcp-state-guard");
    assert_eq!(uids(pid), [NONROOT; 4]);

    let mcp = format!("http://127.0.0.1:{port}/mcp");
    upstream.reset();
    round_trip(&mcp).await;
    let seen = upstream.seen();
    assert_eq!(
        seen.len(),
        2,
        "only the first call and its retry arrived: {seen:?}"
    );
    assert_eq!(
        seen[1]["requestState"], r#"{"k":"provision","name":"web-1","r":1,"tier":"free"}"#,
        "the upstream got its own plaintext back"
    );

    // SIGTERM with a request in flight (the upstream sleeps 3 x 20 s): readiness fails,
    // the drain waits for the request up to its deadline, then the process exits.
    let slow = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "progress_ask", "arguments": {"delay_ms": 20000},
                   "_meta": crate::support::http::meta()}});
    let in_flight = tokio::spawn({
        let mcp = mcp.clone();
        async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            let mut request = http::Request::post(&mcp)
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    slow.to_string(),
                )))
                .unwrap();
            for (name, value) in
                crate::support::http::mcp_headers("tools/call", Some("progress_ask"))
            {
                request.headers_mut().insert(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            let _ = client.request(request).await;
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !upstream.seen().iter().any(|s| s["name"] == "progress_ask") {
        assert!(
            Instant::now() < deadline,
            "the slow request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopping = Instant::now();
    signal(pid, "TERM");
    let grace = Duration::from_millis(DRAIN_MS / 6);
    let bound = grace + Duration::from_millis(DRAIN_MS) + Duration::from_secs(5);
    let status = started.wait(bound).await;
    let took = stopping.elapsed();
    in_flight.abort();
    let status = status
        .unwrap_or_else(|| panic!("still running {bound:?} after SIGTERM:\n{}", started.log()));
    assert!(status.success(), "{status}:\n{}", started.log());
    assert!(
        took >= Duration::from_millis(DRAIN_MS),
        "exited after {took:?}: the in-flight request was not given the drain"
    );
    eprintln!("SIGTERM to exit with a request in flight: {took:?} (drain {DRAIN_MS} ms)");
}
