//! Reloads that say what they did (security review, finding 7): a changed live key is
//! applied (`passthrough_paths`, `single_use.on_store_error`); a changed key that needs a
//! restart is logged at warn by name and counted `restart_required`, never `ok`; and the
//! admin token file is watched like the key file: a new secret is accepted at once and
//! the old one refused, a bad file keeps the secret in use. The checks read `/metrics`
//! and the HTTP answers only, so they mean the same against any build.

use crate::support::fake::{
    FakeUpstream, Recorded, Reply, complete, input_required, pairs, sealed,
};
use crate::support::http::{Reply as ClientReply, mcp_headers, meta, send};
use crate::support::process::Process;
use crate::support::redis::RedisServer;
use crate::support::sidecar::{Sidecar, config};
use http::Method;
use mcp_state_guard::facade::app::Running;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

/// The top-level keys of a watched test configuration (tables follow).
fn top(upstream: &str) -> String {
    format!("upstream = {upstream:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n")
}

/// Write `text` beside `path` and rename it over, as an editor or kubelet does: a poll
/// never reads half a file.
fn replace(path: &Path, text: impl AsRef<[u8]>) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Start from the configuration file `text`, watched; the file and its directory.
async fn start_watched(text: &str) -> (Running, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, text).unwrap();
    let (loaded, source) = mcp_state_guard::facade::config::reload::ConfigSource::load(
        file.clone(),
        Default::default(),
    )
    .unwrap();
    let running = mcp_state_guard::facade::app::start_from(&loaded, Some(source))
        .await
        .unwrap();
    (running, file, dir)
}

/// The value of the series `series` (name and labels) on the admin listener's `/metrics`.
async fn scraped(admin: SocketAddr, series: &str) -> u64 {
    let text = send(Method::GET, &format!("http://{admin}/metrics"), &[], "", T)
        .await
        .text();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

fn reloads(result: &str) -> String {
    format!("mcp_state_guard_config_reloads_total{{result=\"{result}\"}} ")
}

/// Wait (up to 10 s) until `series` is above `before`.
async fn wait_above(admin: SocketAddr, series: &str, before: u64) {
    let deadline = Instant::now() + T;
    while scraped(admin, series).await <= before {
        assert!(Instant::now() < deadline, "{series} stayed at {before}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_removed_from_passthrough_paths_is_gated_after_the_reload() {
    let fake = FakeUpstream::always(|| Reply::json(r#"{"access_token":"t"}"#)).await;
    let settings = |paths: &str| {
        format!(
            "{}passthrough_paths = [{paths}]\n[state]\nreload_interval_ms = 100\n",
            top(&fake.base_url())
        )
    };
    let (running, file, _dir) = start_watched(&settings("\"/oauth/token\"")).await;
    let admin = running.admin_addr();
    let url = format!("http://{}/oauth/token", running.addr());
    let form = pairs(&[("content-type", "application/x-www-form-urlencoded")]);
    let token = || {
        send(
            Method::POST,
            &url,
            &form,
            "grant_type=client_credentials",
            T,
        )
    };
    assert_eq!(token().await.status, 200);
    assert_eq!(fake.count(), 1);

    let before = scraped(admin, &reloads("ok")).await;
    replace(&file, settings(""));
    wait_above(admin, &reloads("ok"), before).await;
    let reply = token().await;
    assert!(
        reply.status.is_client_error(),
        "{}: {}",
        reply.status,
        reply.text()
    );
    assert_eq!(fake.count(), 1, "forwarded untouched after it was removed");

    // And back: live both ways.
    let before = scraped(admin, &reloads("ok")).await;
    replace(&file, settings("\"/oauth/token\""));
    wait_above(admin, &reloads("ok"), before).await;
    assert_eq!(token().await.status, 200);
    assert_eq!(fake.count(), 2);
    running.shutdown(Duration::ZERO).await;
}

/// An upstream that asks once, then completes the retry.
fn asking(request: &Recorded) -> Reply {
    let message = request.json();
    let id = message["id"].clone();
    let answer = match message["params"]["requestState"].as_str() {
        None => input_required(id, json!("PLAIN")),
        Some(_) => complete(id, "paid"),
    };
    Reply::json(answer.to_string())
}

/// A `tools/call` of `pay`, retrying with `token` when given.
async fn pay(url: &str, token: Option<&str>) -> ClientReply {
    let mut params = json!({"name": "pay", "_meta": meta()});
    if let Some(token) = token {
        params["requestState"] = json!(token);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu"}}});
    }
    let message: Value =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let body = serde_json::to_vec(&message).unwrap();
    send(
        Method::POST,
        url,
        &mcp_headers("tools/call", Some("pay")),
        body,
        T,
    )
    .await
}

/// `/readyz`'s status.
async fn ready(admin: SocketAddr) -> u16 {
    let url = format!("http://{admin}/readyz");
    send(Method::GET, &url, &[], "", T).await.status.as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_on_store_error_takes_effect() {
    let mut redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let redis_url = redis.url();
    let settings = |on: &str| {
        format!(
            "{}[state]\nreload_interval_ms = 100\n[single_use]\ntools = [\"pay\"]\n\
             store = \"redis\"\nredis_url = {redis_url:?}\non_store_error = {on:?}\n",
            top(&fake.base_url()),
        )
    };
    let (running, file, _dir) = start_watched(&settings("reject")).await;
    let admin = running.admin_addr();
    let url = format!("http://{}/mcp", running.addr());
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let reply = pay(&url, None).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        tokens.push(sealed(&reply.json()["result"]));
    }
    redis.stop();
    let refused = pay(&url, Some(&tokens[0])).await;
    assert_eq!(
        refused.status,
        400,
        "store down, reject: {}",
        refused.text()
    );

    let before = scraped(admin, &reloads("ok")).await;
    replace(&file, settings("allow"));
    wait_above(admin, &reloads("ok"), before).await;
    let let_through = pay(&url, Some(&tokens[0])).await;
    assert_eq!(
        let_through.status,
        200,
        "store down, allow: {}",
        let_through.text()
    );
    // A fail-open store no longer keeps the sidecar out of rotation.
    let deadline = Instant::now() + T;
    while ready(admin).await != 200 {
        assert!(Instant::now() < deadline, "/readyz still fails under allow");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let before = scraped(admin, &reloads("ok")).await;
    replace(&file, settings("reject"));
    wait_above(admin, &reloads("ok"), before).await;
    assert_eq!(pay(&url, Some(&tokens[1])).await.status, 400);
    running.shutdown(Duration::ZERO).await;
}

/// The address a real process's admin listener bound, from its ready line.
fn admin_of(process: &Process) -> SocketAddr {
    let log = process.log();
    let ready = log
        .lines()
        .find(|line| line.contains("mcp-state-guard ready"))
        .expect("a ready line");
    let record: Value = serde_json::from_str(ready).unwrap();
    record["fields"]["admin_addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_restart_key_is_logged_by_name_and_not_counted_ok() {
    let fake =
        FakeUpstream::always(|| Reply::json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let settings = |max: u32, paths: &str| {
        format!(
            "upstream = {:?}\npassthrough_paths = [{paths}]\n[state]\nreload_interval_ms = 100\n\
             [limits]\nmax_connections = {max}\n",
            fake.base_url()
        )
    };
    replace(&file, settings(100, ""));
    let process = Process::start(&["--config", file.to_str().unwrap()], &[]);
    let admin = admin_of(&process);

    // A restart-class key and a live one in one edit: the live one is applied, and the
    // reload still says it is not all in force.
    replace(&file, settings(50, "\"/oauth/token\""));
    wait_above(admin, &reloads("restart_required"), 0).await;
    process.wait_for_log("limits.max_connections");
    let line = process
        .log()
        .lines()
        .find(|line| line.contains("limits.max_connections"))
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .unwrap();
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["fields"]["key"], "limits.max_connections", "{line}");
    assert!(
        line["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("takes effect on restart"),
        "{line}"
    );
    assert_eq!(scraped(admin, &reloads("ok")).await, 0);
    assert_eq!(scraped(admin, &reloads("restart_required")).await, 1);
    let url = format!("http://{}/oauth/token", process.addr);
    let reply = send(Method::POST, &url, &[], "grant_type=x", T).await;
    assert_eq!(
        reply.status,
        200,
        "the live key was applied: {}",
        reply.text()
    );

    // Put back: nothing differs from what runs, so the reload is `ok` again.
    replace(&file, settings(100, "\"/oauth/token\""));
    wait_above(admin, &reloads("ok"), 0).await;
    assert_eq!(scraped(admin, &reloads("restart_required")).await, 1);
}

/// Third review, finding 6: a file that no longer mentions live keys reverts them to
/// their defaults. Applied (the file is what it asks for), but when that takes
/// protection away the log says so at warn, naming each key and what it lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_removes_protection_is_logged_at_warn_by_key() {
    let fake =
        FakeUpstream::always(|| Reply::json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let head = format!(
        "upstream = {:?}\n[state]\nreload_interval_ms = 100\n",
        fake.base_url()
    );
    replace(
        &file,
        format!("{head}[single_use]\ntools = [\"approve\", \"wire\"]\nprompts = [\"confirm\"]\n"),
    );
    let process = Process::start(&["--config", file.to_str().unwrap()], &[]);
    let admin = admin_of(&process);
    // The edit lost the prompts and one tool (as a file cut short would).
    replace(
        &file,
        format!("{head}[single_use]\ntools = [\"approve\"]\n"),
    );
    wait_above(admin, &reloads("ok"), 0).await;
    process.wait_for_log("removes protection");
    let warned: Vec<Value> = process
        .log()
        .lines()
        .filter(|line| line.contains("removes protection"))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let keys: Vec<&str> = warned
        .iter()
        .map(|line| line["fields"]["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["single_use.tools", "single_use.prompts"],
        "{warned:?}"
    );
    assert!(warned.iter().all(|line| line["level"] == "WARN"));
    let change = warned[0]["fields"]["change"].as_str().unwrap();
    assert!(
        change.contains("wire") && !change.contains("approve"),
        "{change}"
    );
}

/// `POST /admin/revoke` with `secret` as the bearer token; the status.
async fn revoke(admin: SocketAddr, secret: &str) -> u16 {
    let url = format!("http://{admin}/admin/revoke");
    let bearer = format!("Bearer {secret}");
    let headers = pairs(&[("authorization", bearer.as_str())]);
    send(Method::POST, &url, &headers, r#"{"principal":"alice"}"#, T)
        .await
        .status
        .as_u16()
}

fn write_token(path: &Path, secret: &str) {
    replace(path, format!("{secret}\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_admin_token_is_accepted_and_the_old_one_refused() {
    const OLD: &str = "old-admin-token-0123456789";
    const NEW: &str = "new-admin-token-9876543210";
    let fake = FakeUpstream::always(|| Reply::json("{}")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin-token");
    write_token(&path, OLD);
    let mut c = config(&fake.base_url());
    c.admin.token_file = Some(path.clone());
    c.state.reload_interval_ms = 100;
    let sidecar = Sidecar::start(c).await;
    let admin = sidecar.admin_addr;
    assert_eq!(revoke(admin, OLD).await, 200);
    assert_eq!(revoke(admin, NEW).await, 401);

    write_token(&path, NEW);
    let deadline = Instant::now() + T;
    while revoke(admin, NEW).await != 200 {
        assert!(
            Instant::now() < deadline,
            "the new admin token was never accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        revoke(admin, OLD).await,
        401,
        "the old admin token still works"
    );

    // A file that holds no valid secret keeps the one in use, and counts.
    let errors = "mcp_state_guard_admin_token_reloads_total{result=\"error\"} ";
    write_token(&path, "");
    wait_above(admin, errors, 0).await;
    assert_eq!(revoke(admin, NEW).await, 200);
    assert_eq!(revoke(admin, "").await, 401);
    std::fs::remove_file(&path).unwrap();
    wait_above(admin, errors, 1).await;
    assert_eq!(revoke(admin, NEW).await, 200);
    assert_eq!(
        scraped(admin, errors).await,
        2,
        "each outage is counted once"
    );
    sidecar.stop().await;
}
