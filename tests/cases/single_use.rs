//! Single-use states: a listed tool's, prompt's or resource's state is consumed once, on
//! any replica sharing the store (a real `redis-server`), exactly one of many concurrent
//! presentations wins, a store outage fails closed (or open, when told) and heals without
//! a restart, the memory store refuses rather than forgets, policy changes apply live
//! (with the sealed `su` claim closing the window in both directions), and a retry that
//! provably never reached the upstream can be tried again.

use crate::support::fake::{FakeUpstream, Recorded, Reply, Step, complete, input_required, sealed};
use crate::support::http::{Reply as ClientReply, mcp_headers, meta, send};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::process::Process;
use crate::support::python::client_flows;
use crate::support::redis::{RedisCluster, RedisServer};
use crate::support::sidecar::{Sidecar, config};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::facade::config::reload::ReloadOutcome;
use mcp_state_guard::facade::config::{Config, OnStoreError, SingleUseStore};
use mcp_state_guard::facade::policy::Consumption;
use mcp_state_guard::facade::store::StoreKind;
use serde_json::{Value, json};
use std::time::Duration;

const KEY: &str = "5e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f";
const T: Duration = Duration::from_secs(20);

/// First calls are asked a question with a plaintext state; retries complete with it.
pub(super) fn asking(request: &Recorded) -> Reply {
    let message = request.json();
    let id = message["id"].clone();
    let answer = match message["params"]["requestState"].as_str() {
        None => input_required(id, json!("PLAIN")),
        Some(state) => complete(id, &format!("done with {state}")),
    };
    Reply::json(answer.to_string())
}

/// `method` on `target` (name or URI), optionally retrying with `token`.
fn message(id: u64, method: &str, target: &str, token: Option<&str>) -> Value {
    let field = if method == "resources/read" {
        "uri"
    } else {
        "name"
    };
    // A 2026 client declares what it can answer; this one answers forms.
    let mut params = json!({ field: target, "_meta": meta() });
    if let Some(token) = token {
        params["requestState"] = json!(token);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu"}}});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

async fn call(url: &str, method: &str, target: &str, token: Option<&str>) -> ClientReply {
    let body = serde_json::to_vec(&message(1, method, target, token)).unwrap();
    send(
        Method::POST,
        url,
        &mcp_headers(method, Some(target)),
        body,
        T,
    )
    .await
}

async fn mint(url: &str, method: &str, target: &str) -> String {
    let reply = call(url, method, target, None).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    sealed(&reply.json()["result"])
}

fn assert_replayed(reply: &ClientReply) {
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        reply.json()["error"]["message"],
        "Invalid or expired requestState"
    );
}

fn policy(c: &mut Config) {
    c.single_use.tools = vec!["approve_*".into()];
    c.single_use.prompts = vec!["confirm".into()];
    c.single_use.resources = vec!["file:///once/*".into()];
}

async fn with_redis(
    fake: &FakeUpstream,
    redis: &RedisServer,
    tweak: impl Fn(&mut Config),
) -> Sidecar {
    let mut c = config(&fake.base_url());
    c.single_use.store = SingleUseStore::Redis;
    c.single_use.redis_url = Some(redis.url());
    tweak(&mut c);
    Sidecar::with_keys(c, &[KEY], "svc").await
}

#[tokio::test(flavor = "multi_thread")]
async fn listed_targets_are_consumed_once_and_others_are_not() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = config(&fake.base_url());
    policy(&mut c);
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    for (method, target) in [
        ("tools/call", "approve_payment"),
        ("prompts/get", "confirm"),
        ("resources/read", "file:///once/a.txt"),
    ] {
        let token = mint(&url, method, target).await;
        let first = call(&url, method, target, Some(&token)).await;
        assert_eq!(first.status, 200, "{target}: {}", first.text());
        let forwarded = fake.count();
        assert_replayed(&call(&url, method, target, Some(&token)).await);
        assert_eq!(
            fake.count(),
            forwarded,
            "{target}: a replay reached the upstream"
        );
    }
    assert_eq!(sidecar.metrics().path.verified_count("replayed"), 3);
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Consumed),
        3
    );
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Replayed),
        3
    );
    // Unlisted targets (and a listed name under another method) are not single-use.
    for (method, target) in [("tools/call", "search"), ("prompts/get", "approve_payment")] {
        let token = mint(&url, method, target).await;
        for _ in 0..2 {
            let again = call(&url, method, target, Some(&token)).await;
            assert_eq!(again.status, 200, "{target}: {}", again.text());
        }
    }
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_sharing_redis_refuse_each_others_replays() {
    let redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let a = with_redis(&fake, &redis, policy).await;
    let b = with_redis(&fake, &redis, policy).await;
    let token = mint(&a.mcp_url(), "tools/call", "approve_payment").await;
    let first = call(&b.mcp_url(), "tools/call", "approve_payment", Some(&token)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_replayed(&call(&a.mcp_url(), "tools/call", "approve_payment", Some(&token)).await);
    assert_replayed(&call(&b.mcp_url(), "tools/call", "approve_payment", Some(&token)).await);
    // One key, under the prefix, named by a digest (not the token or its nonce).
    assert_eq!(redis.command("DBSIZE").as_deref(), Some(":1"));
    let keys = redis.command("KEYS mcp-state-guard:c:*").unwrap();
    assert_eq!(keys, "*1");
    a.stop().await;
    b.stop().await;
}

/// 50 presentations of one token at once: exactly one reaches the upstream.
async fn race(urls: &[String], fake: &FakeUpstream) {
    let token = mint(&urls[0], "tools/call", "approve_payment").await;
    let before = fake.count();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (url, token) = (urls[i % urls.len()].clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            call(&url, "tools/call", "approve_payment", Some(&token))
                .await
                .status
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 400).count(),
        49,
        "{statuses:?}"
    );
    assert_eq!(fake.count(), before + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_one_of_fifty_concurrent_presentations_wins() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = config(&fake.base_url());
    policy(&mut c);
    let memory = Sidecar::with_keys(c, &[KEY], "svc").await;
    race(&[memory.mcp_url()], &fake).await;
    memory.stop().await;

    let redis = RedisServer::start();
    let a = with_redis(&fake, &redis, policy).await;
    let b = with_redis(&fake, &redis, policy).await;
    race(&[a.mcp_url()], &fake).await;
    race(&[a.mcp_url(), b.mcp_url()], &fake).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_outage_fails_closed_and_heals_without_a_restart() {
    let mut redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let sidecar = with_redis(&fake, &redis, policy).await;
    let url = sidecar.mcp_url();
    let token = mint(&url, "tools/call", "approve_payment").await;
    redis.stop();
    let forwarded = fake.count();
    assert_replayed(&call(&url, "tools/call", "approve_payment", Some(&token)).await);
    assert_eq!(
        fake.count(),
        forwarded,
        "forwarded without a recorded consumption"
    );
    assert_eq!(
        sidecar.metrics().path.verified_count("store_unavailable"),
        1
    );
    let readiness = sidecar.running().readiness().clone();
    crate::support::fake::wait_until(|| !readiness.get(), "readiness fails").await;
    assert!(
        readiness
            .failing()
            .contains(&"single_use store unavailable")
    );
    // Tokens of targets that are not single-use do not need the store.
    let free = mint(&url, "tools/call", "search").await;
    assert_eq!(
        call(&url, "tools/call", "search", Some(&free)).await.status,
        200
    );

    redis.restart();
    crate::support::fake::wait_until(|| readiness.get(), "readiness recovers").await;
    // The refused token was never consumed: it still works, once.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let reply = loop {
        let reply = call(&url, "tools/call", "approve_payment", Some(&token)).await;
        if reply.status == 200 || std::time::Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_replayed(&call(&url, "tools/call", "approve_payment", Some(&token)).await);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_store_error_allow_lets_retries_through_and_counts_them() {
    let mut redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let sidecar = with_redis(&fake, &redis, |c| {
        policy(c);
        c.single_use.on_store_error = OnStoreError::Allow;
    })
    .await;
    let url = sidecar.mcp_url();
    let token = mint(&url, "tools/call", "approve_payment").await;
    redis.stop();
    let reply = call(&url, "tools/call", "approve_payment", Some(&token)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Redis, Consumption::StoreUnavailable),
        1
    );
    assert!(
        sidecar.running().readiness().get(),
        "allow keeps the sidecar ready"
    );
    sidecar.stop().await;
}

/// Full, the memory store refuses a new consumption (503, `Retry-After`, the state not
/// spent) instead of forgetting one it holds: what it holds is still refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_memory_store_refuses_instead_of_forgetting() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = config(&fake.base_url());
    policy(&mut c);
    c.single_use.memory_max_entries = 2;
    // One caller (no principal, one address) may fill it here.
    c.single_use.max_entries_per_principal = Some(2);
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let tokens: Vec<String> = {
        let mut tokens = Vec::new();
        for _ in 0..3 {
            tokens.push(mint(&url, "tools/call", "approve_payment").await);
        }
        tokens
    };
    for token in &tokens[..2] {
        let reply = call(&url, "tools/call", "approve_payment", Some(token)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let forwarded = fake.count();
    let full = call(&url, "tools/call", "approve_payment", Some(&tokens[2])).await;
    assert_eq!(full.status, 503, "{}", full.text());
    assert_eq!(full.headers["retry-after"], "60");
    assert_eq!(fake.count(), forwarded);
    assert_eq!(
        sidecar
            .metrics()
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Full),
        1
    );
    // What it holds is still refused.
    assert_replayed(&call(&url, "tools/call", "approve_payment", Some(&tokens[0])).await);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_changes_apply_live_and_the_sealed_claim_closes_the_window() {
    let fake = FakeUpstream::start(asking).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let write = |tools: &str| {
        let text = format!(
            "upstream = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [state]\nreload_interval_ms = 100\n[single_use]\ntools = [{tools}]\n",
            fake.base_url()
        );
        std::fs::write(&file, text).unwrap();
    };
    write("");
    let overrides = Default::default();
    let (loaded, source) =
        mcp_state_guard::facade::config::reload::ConfigSource::load(file.clone(), overrides)
            .unwrap();
    let running = mcp_state_guard::facade::app::start_from(&loaded, Some(source))
        .await
        .unwrap();
    let url = format!("http://{}/mcp", running.addr());
    let reloads = |ok: bool| {
        running.metrics().process.config_reload_count(if ok {
            ReloadOutcome::Ok
        } else {
            ReloadOutcome::Error
        })
    };
    let wait_reload = |before: u64, ok: bool| async move {
        crate::support::fake::wait_until(|| reloads(ok) > before, "the configuration is reloaded")
            .await;
    };

    // Minted while `provision` was not single-use, presented after it became so.
    let before_change = mint(&url, "tools/call", "provision").await;
    let n = reloads(true);
    write("\"provision\"");
    wait_reload(n, true).await;
    assert_eq!(
        call(&url, "tools/call", "provision", Some(&before_change))
            .await
            .status,
        200
    );
    assert_replayed(&call(&url, "tools/call", "provision", Some(&before_change)).await);

    // Minted single-use (`su` sealed in), presented after the policy dropped it.
    let sealed_single = mint(&url, "tools/call", "provision").await;
    let n = reloads(true);
    write("");
    wait_reload(n, true).await;
    assert_eq!(
        call(&url, "tools/call", "provision", Some(&sealed_single))
            .await
            .status,
        200
    );
    assert_replayed(&call(&url, "tools/call", "provision", Some(&sealed_single)).await);

    // A broken file keeps the policy in force and counts.
    let n = reloads(false);
    std::fs::write(&file, "[single_use]\ntools = 7\n").unwrap();
    wait_reload(n, false).await;
    let free = mint(&url, "tools/call", "provision").await;
    for _ in 0..2 {
        assert_eq!(
            call(&url, "tools/call", "provision", Some(&free))
                .await
                .status,
            200
        );
    }
    running.shutdown(Duration::ZERO).await;
}

/// A retry refused after its state was spent, by a later phase (here idempotency: the
/// tool requires a key the retry lacks), never reached the upstream: the state is given
/// back, and the corrected retry goes through with the same token.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_refused_after_its_state_was_spent_gives_it_back() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = config(&fake.base_url());
    policy(&mut c);
    c.idempotency.require_key = vec!["approve_payment".into()];
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let token = {
        let body = serde_json::to_vec(&message(1, "tools/call", "approve_payment", None)).unwrap();
        let mut headers = mcp_headers("tools/call", Some("approve_payment"));
        headers.push(("idempotency-key".into(), "first".into()));
        let reply = send(Method::POST, &url, &headers, body, T).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        sealed(&reply.json()["result"])
    };
    let forwarded = fake.count();
    let refused = call(&url, "tools/call", "approve_payment", Some(&token)).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(fake.count(), forwarded, "nothing reached the upstream");
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Released),
        1
    );
    let body =
        serde_json::to_vec(&message(1, "tools/call", "approve_payment", Some(&token))).unwrap();
    let mut headers = mcp_headers("tools/call", Some("approve_payment"));
    headers.push(("idempotency-key".into(), "retry".into()));
    let retried = send(Method::POST, &url, &headers, body, T).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_replayed(&call(&url, "tools/call", "approve_payment", Some(&token)).await);
}

/// A plaintext legacy answer for every request; the fake is restarted on its port.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_the_upstream_never_received_can_be_tried_again() {
    let fake = FakeUpstream::start(asking).await;
    let port = fake.port;
    let mut c = config(&fake.base_url());
    policy(&mut c);
    c.timeouts.connect_ms = 500;
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let token = mint(&url, "tools/call", "approve_payment").await;
    drop(fake);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let down = call(&url, "tools/call", "approve_payment", Some(&token)).await;
    assert_eq!(down.status, 502, "{}", down.text());
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Released),
        1
    );
    let fake = FakeUpstream::start_at(port, asking).await;
    let back = call(&url, "tools/call", "approve_payment", Some(&token)).await;
    assert_eq!(back.status, 200, "{}", back.text());
    drop(fake);

    // The upstream read the retry, then reset: the state is spent.
    let token = {
        let fake = FakeUpstream::start_at(port, asking).await;
        let token = mint(&url, "tools/call", "approve_payment").await;
        drop(fake);
        token
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reset = FakeUpstream::raw_at(port, vec![Step::Data(Bytes::new())], true).await;
    let cut = call(&url, "tools/call", "approve_payment", Some(&token)).await;
    assert_eq!(cut.status, 502, "{}", cut.text());
    assert_eq!(reset.count(), 1, "the upstream received the retry");
    drop(reset);
    let fake = FakeUpstream::start_at(port, asking).await;
    assert_replayed(&call(&url, "tools/call", "approve_payment", Some(&token)).await);
    assert_eq!(fake.count(), 0);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_completes_a_single_use_flow_and_its_replay_fails() {
    let upstream = LegacyServer::start(Mode::Json);
    let mut c = config(&upstream.base_url());
    c.single_use.tools = vec!["provision".into()];
    let sidecar = Sidecar::start(c).await;
    let auto = client_flows(&sidecar.mcp_url(), &["auto-provision"]).await;
    assert_eq!(auto["text"], "Provisioned web-1 (tier=free) in eu-west-1");
    let replay = client_flows(&sidecar.mcp_url(), &["replay"]).await;
    assert_eq!(
        replay["first"]["text"],
        "Provisioned web-1 (tier=free) in eu-west-1"
    );
    assert_eq!(replay["second"]["error"]["code"], -32602, "{replay}");
    assert_eq!(sidecar.metrics().path.verified_count("replayed"), 1);
    sidecar.stop().await;
}

/// `SIGHUP` applies a changed policy at once (the file poll is set to ten minutes here).
#[test]
fn sighup_reloads_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let write = |tools: &str| {
        let text = format!(
            "admin_listen = \"127.0.0.1:0\"\n[state]\nreload_interval_ms = 600000\n\
             [single_use]\ntools = [{tools}]\n"
        );
        std::fs::write(&file, text).unwrap();
    };
    write("");
    let config = file.to_str().unwrap();
    let process = Process::start(&["--config", config], &[]);
    write("\"approve_*\"");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &process.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    process.wait_for_log("configuration key changed; applied without a restart");
    process.wait_for_log(r#""key":"single_use.tools""#);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_cluster_serves_as_the_shared_store() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let fake = FakeUpstream::start(asking).await;
    let mut c = config(&fake.base_url());
    policy(&mut c);
    c.single_use.store = SingleUseStore::Redis;
    c.single_use.redis_url = Some(cluster.url());
    let a = Sidecar::with_keys(c.clone(), &[KEY], "svc").await;
    let b = Sidecar::with_keys(c, &[KEY], "svc").await;
    // Several tokens, so the keys land in different slots (on different primaries).
    for _ in 0..6 {
        let token = mint(&a.mcp_url(), "tools/call", "approve_payment").await;
        let first = call(&b.mcp_url(), "tools/call", "approve_payment", Some(&token)).await;
        assert_eq!(first.status, 200, "{}", first.text());
        assert_replayed(&call(&a.mcp_url(), "tools/call", "approve_payment", Some(&token)).await);
    }
    race(&[a.mcp_url(), b.mcp_url()], &fake).await;
    let stored: usize = cluster
        .nodes
        .iter()
        .map(|n| {
            let size = n.command("DBSIZE").unwrap();
            size.trim_start_matches(':').parse::<usize>().unwrap()
        })
        .sum();
    assert_eq!(stored, 7);
    a.stop().await;
    b.stop().await;
}
