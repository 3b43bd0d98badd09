//! The official conformance suite's full server requirement sets, each run three ways
//! against our conformance server on the Python SDK (`tests/py/conformance_server.py`):
//! directly over HTTP, through the sidecar over HTTP, and with the sidecar running the
//! same server as its stdio child. Through the sidecar, every scenario that passes
//! directly must pass, both ways: over HTTP the sidecar is transparent, and in front of
//! a stdio child it is the HTTP transport (its status map, its header rules).

use crate::cases::stdio_upstream::{stdio_config, up};
use crate::support::conformance::{SuiteRun, run_requirements};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::{interpreter, repo_path};
use crate::support::sidecar::Sidecar;

const SERVER: &str = "tests/py/conformance_server.py";

/// The three legs' runs of one requirement set.
struct Legs {
    direct: SuiteRun,
    http: SuiteRun,
    stdio: SuiteRun,
}

impl Legs {
    async fn run(revision: &str) -> Self {
        let upstream = LegacyServer::start_script(SERVER, Mode::Sse);
        let http = Sidecar::in_front_of(&upstream.base_url()).await;
        let argv = vec![
            interpreter().display().to_string(),
            repo_path(SERVER).display().to_string(),
            "--stdio".into(),
        ];
        let stdio = Sidecar::start(stdio_config(argv)).await;
        up(&stdio).await;
        let urls = [upstream.mcp_url(), http.mcp_url(), stdio.mcp_url()];
        let (direct, through_http, through_stdio) = tokio::join!(
            run_requirements(&urls[0], revision),
            run_requirements(&urls[1], revision),
            run_requirements(&urls[2], revision),
        );
        http.stop().await;
        stdio.stop().await;
        Self {
            direct,
            http: through_http,
            stdio: through_stdio,
        }
    }

    /// The scenarios that pass directly but fail through `leg`.
    fn lost<'a>(&'a self, leg: &'a SuiteRun) -> Vec<&'a str> {
        let passed = |run: &SuiteRun, name: &str| run.scenarios.get(name) == Some(&true);
        let direct = self.direct.scenarios.keys();
        direct
            .filter(|name| passed(&self.direct, name) && !passed(leg, name))
            .map(String::as_str)
            .collect()
    }

    /// One line a leg: passed of run, for the report.
    fn counts(&self) -> String {
        let count = |run: &SuiteRun| {
            let passed = run.scenarios.values().filter(|p| **p).count();
            format!("{passed}/{}", run.scenarios.len())
        };
        format!(
            "direct {}, through the sidecar over HTTP {}, over stdio {}",
            count(&self.direct),
            count(&self.http),
            count(&self.stdio)
        )
    }
}

/// 2026-07-28: the stateless era. Directly, only `input-required-result-tampered-state`
/// fails (the server's state is plaintext); through the sidecar it passes both ways.
#[tokio::test(flavor = "multi_thread")]
async fn the_2026_07_28_requirement_set_passes_through_the_sidecar_both_ways() {
    let legs = Legs::run("2026-07-28").await;
    let counts = legs.counts();
    println!("2026-07-28: {counts}");
    assert!(
        legs.direct.scenarios.len() >= 40,
        "{counts}\n{}",
        legs.direct.report
    );
    let failed_directly = legs.direct.failed();
    assert_eq!(
        failed_directly,
        ["input-required-result-tampered-state"],
        "{}",
        legs.direct.report
    );
    for (name, leg) in [("HTTP", &legs.http), ("stdio", &legs.stdio)] {
        assert_eq!(
            leg.scenarios.keys().collect::<Vec<_>>(),
            legs.direct.scenarios.keys().collect::<Vec<_>>(),
            "{name}: {counts}"
        );
        assert!(
            legs.lost(leg).is_empty(),
            "passed directly, not through the sidecar over {name}: {:?}\n{}",
            legs.lost(leg),
            leg.report
        );
        assert_eq!(
            leg.scenarios.get("input-required-result-tampered-state"),
            Some(&true),
            "{name}"
        );
    }
}

/// 2025-11-25: the session era. Every scenario passes directly, and through the sidecar
/// both ways: over stdio each session gets a child of its own.
#[tokio::test(flavor = "multi_thread")]
async fn the_2025_11_25_requirement_set_passes_through_the_sidecar_both_ways() {
    let legs = Legs::run("2025-11-25").await;
    let counts = legs.counts();
    println!("2025-11-25: {counts}");
    assert!(
        legs.direct.scenarios.len() >= 30,
        "{counts}\n{}",
        legs.direct.report
    );
    assert!(legs.direct.failed().is_empty(), "{}", legs.direct.report);
    for (name, leg) in [("HTTP", &legs.http), ("stdio", &legs.stdio)] {
        assert!(
            legs.lost(leg).is_empty(),
            "passed directly, not through the sidecar over {name}: {:?}\n{}",
            legs.lost(leg),
            leg.report
        );
    }
}

/// The `Mcp-Param-*` rule follows the child's tools: a tool it adds (and says so) is
/// checked from then on, its header required and compared.
#[tokio::test(flavor = "multi_thread")]
async fn mcp_param_headers_follow_the_childs_tool_changes() {
    use crate::cases::stdio_upstream::child;
    use crate::support::flow::{text, tool_call};
    use crate::support::http::post_mcp_with;
    let sidecar = Sidecar::start(stdio_config(child(&[]))).await;
    up(&sidecar).await;
    let url = sidecar.mcp_url();
    let deploy = || tool_call(2, "deploy", serde_json::json!({"region": "eu-west"}));
    // Not announced yet: nothing to mirror, the call passes without the header.
    assert_eq!(
        text(&post_mcp_with(&url, &deploy(), &[]).await.message()),
        "deployed eu-west"
    );
    let announce = tool_call(1, "announce_region", serde_json::json!({}));
    assert_eq!(
        text(&post_mcp_with(&url, &announce, &[]).await.message()),
        "announced"
    );
    // Listed again: without its header, or with another value, the call is refused;
    // with it, it passes.
    let mut refused = None;
    for _ in 0..200 {
        let reply = post_mcp_with(&url, &deploy(), &[]).await;
        if reply.status == 400 {
            refused = Some(reply);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let refused = refused.expect("the new annotation is checked within 5 s");
    assert_eq!(refused.json()["error"]["code"], -32020);
    let other = post_mcp_with(&url, &deploy(), &[("mcp-param-region", "us-east")]).await;
    assert_eq!(other.status, 400);
    let mirrored = post_mcp_with(&url, &deploy(), &[("Mcp-Param-Region", "eu-west")]).await;
    assert_eq!(text(&mirrored.message()), "deployed eu-west");
    sidecar.stop().await;
}
