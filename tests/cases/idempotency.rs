//! Idempotent writes in front of a legacy import server (`tests/py/import_server.py`)
//! that applies every `append_rows` it is sent: through the sidecar, a write repeated
//! under one idempotency key (sequentially, twenty at once, or across two sidecars
//! sharing a real `redis-server`) is applied exactly once and every repeat gets the
//! identical stored answer; other arguments under the key conflict, another caller's
//! key is independent, a repeat during the first is told to wait, a required key must
//! be present and well-formed, and a record expires after `ttl_seconds`.

use super::handles::{AUDIENCE, KEY, call_with, structured};
use crate::support::http::Reply;
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::client_flows;
use crate::support::redis::RedisServer;
use crate::support::sidecar::{Sidecar, config};
use mcp_state_guard::config::{Config, PrincipalSource, SingleUseStore};
use mcp_state_guard::metrics::IdempotencyResult;
use serde_json::{Value, json};
use std::time::Duration;

fn idempotent_config(upstream: &str) -> Config {
    let mut config = config(upstream);
    config.principal.source = PrincipalSource::Header;
    config.idempotency.tools = vec!["append_*".into()];
    config.idempotency.require_key = vec!["commit_import".into()];
    config
}

fn start_upstream(mode: Mode) -> LegacyServer {
    LegacyServer::start_script("tests/py/import_server.py", mode)
}

async fn start_import(url: &str, who: &str) -> String {
    let reply = call_with(url, Some(who), "start_import", json!({}), json!({}), &[]).await;
    structured(&reply)["importId"].as_str().unwrap().to_owned()
}

async fn append(url: &str, who: &str, import: &str, rows: Value, key: &str) -> Reply {
    append_slow(url, who, import, rows, key, 0).await
}

async fn append_slow(
    url: &str,
    who: &str,
    import: &str,
    rows: Value,
    key: &str,
    delay_ms: u64,
) -> Reply {
    let mut arguments = json!({"importId": import, "rows": rows});
    if delay_ms > 0 {
        arguments["delay_ms"] = json!(delay_ms);
    }
    call_with(
        url,
        Some(who),
        "append_rows",
        arguments,
        json!({"idempotencyKey": key}),
        &[],
    )
    .await
}

/// Send until the answer is not "in progress" (a stream's record lands when it ends).
async fn settled(send: impl AsyncFn() -> Reply) -> Reply {
    for _ in 0..100 {
        let reply = send().await;
        if reply.status != 409 {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("still in progress after 5 s");
}

/// The same append by alice to each of `urls`, all at once.
async fn race(
    urls: impl Iterator<Item = String>,
    import: &str,
    rows: Value,
    key: &str,
) -> Vec<Reply> {
    let tasks: Vec<_> = urls
        .map(|url| {
            let (import, rows, key) = (import.to_owned(), rows.clone(), key.to_owned());
            tokio::spawn(async move { append(&url, "alice", &import, rows, &key).await })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    replies
}

fn rows(upstream: &LegacyServer, import: &str) -> (Value, Value) {
    let counts = upstream.debug_json("GET", "/debug/counts");
    (
        counts[import]["rows"].clone(),
        counts[import]["appends"].clone(),
    )
}

fn result_of(reply: &Reply) -> Value {
    reply.message()["result"].clone()
}

fn replayed(reply: &Reply) -> bool {
    reply
        .headers
        .get("idempotent-replayed")
        .map(|v| v.as_bytes())
        == Some(b"true")
}

async fn applied_once(mode: Mode) {
    let upstream = start_upstream(mode);
    let sidecar = Sidecar::start(idempotent_config(&upstream.base_url())).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;

    // Sequential repeats: one write, the same answer under each new id.
    let first = append(&url, "alice", &import, json!([1, 2, 3]), "seq").await;
    assert_eq!(structured(&first)["total"], json!(3));
    assert!(!replayed(&first));
    for _ in 0..3 {
        let again = settled(|| append(&url, "alice", &import, json!([1, 2, 3]), "seq")).await;
        assert_eq!(again.status, 200, "{}", again.text());
        assert!(replayed(&again), "marked as a replay");
        assert_eq!(
            result_of(&again),
            result_of(&first),
            "identical stored result"
        );
        assert_ne!(
            again.message()["id"],
            first.message()["id"],
            "under its own id"
        );
    }
    assert_eq!(rows(&upstream, &import), (json!(3), json!(1)));

    // Twenty at once: exactly one applied; every other one is told to wait or replayed.
    let replies = race((0..20).map(|_| url.clone()), &import, json!([7]), "race").await;
    let mut results = Vec::new();
    for reply in &replies {
        match reply.status.as_u16() {
            200 => results.push(result_of(reply)),
            409 => {
                assert_eq!(
                    reply.json()["error"]["data"]["type"],
                    json!("idempotency_key_in_progress")
                );
                assert!(reply.headers.contains_key("retry-after"));
            }
            other => panic!("unexpected {other}: {}", reply.text()),
        }
    }
    let after = settled(|| append(&url, "alice", &import, json!([7]), "race")).await;
    results.push(result_of(&after));
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
    assert_eq!(rows(&upstream, &import), (json!(4), json!(2)));

    // Other arguments under a used key: a conflict, nothing applied.
    let conflict = append(&url, "alice", &import, json!([1, 2]), "seq").await;
    assert_eq!(conflict.status, 422, "{}", conflict.text());
    assert_eq!(
        conflict.json()["error"]["data"]["type"],
        json!("idempotency_key_conflict")
    );
    // The same key from another caller is another write.
    let bobs = append(&url, "bob", &import, json!([1, 2, 3]), "seq").await;
    assert!(!replayed(&bobs));
    assert_eq!(structured(&bobs)["total"], json!(7));
    assert_eq!(rows(&upstream, &import), (json!(7), json!(3)));
    let metrics = sidecar.metrics();
    assert!(metrics.idempotency_count(IdempotencyResult::Replayed) >= 4);
    assert_eq!(metrics.idempotency_count(IdempotencyResult::Conflict), 1);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_repeated_write_is_applied_once_json() {
    applied_once(Mode::Json).await;
}

#[tokio::test]
async fn a_repeated_write_is_applied_once_sse() {
    applied_once(Mode::Sse).await;
}

#[tokio::test]
async fn a_repeat_during_a_slow_first_call_is_told_to_wait() {
    let upstream = start_upstream(Mode::Json);
    let sidecar = Sidecar::start(idempotent_config(&upstream.base_url())).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    let slow = {
        let (url, import) = (url.clone(), import.clone());
        tokio::spawn(
            async move { append_slow(&url, "alice", &import, json!([1]), "slow", 1500).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let waiting = append_slow(&url, "alice", &import, json!([1]), "slow", 1500).await;
    assert_eq!(waiting.status, 409, "{}", waiting.text());
    assert_eq!(waiting.headers["retry-after"], "1");
    assert_eq!(waiting.content_type(), "application/json");
    let body = waiting.json();
    assert_eq!(
        body["error"]["data"]["type"],
        json!("idempotency_key_in_progress")
    );
    let first = slow.await.unwrap();
    let again = append_slow(&url, "alice", &import, json!([1]), "slow", 1500).await;
    assert!(replayed(&again));
    assert_eq!(result_of(&again), result_of(&first));
    assert_eq!(rows(&upstream, &import), (json!(1), json!(1)));
    sidecar.stop().await;
}

#[tokio::test]
async fn keys_are_required_well_formed_and_consistent() {
    let upstream = start_upstream(Mode::Json);
    let sidecar = Sidecar::start(idempotent_config(&upstream.base_url())).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    let long = "k".repeat(256);
    type Case<'a> = (&'a str, Value, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        ("missing", json!({}), vec![]),
        ("empty", json!({"idempotencyKey": ""}), vec![]),
        ("too long", json!({"idempotencyKey": long}), vec![]),
        ("control", json!({"idempotencyKey": "a\u{7}b"}), vec![]),
        ("not a string", json!({"idempotencyKey": 5}), vec![]),
        (
            "header and params differ",
            json!({"idempotencyKey": "a"}),
            vec![("idempotency-key", "b")],
        ),
    ];
    for (what, params, headers) in cases {
        let reply = call_with(
            &url,
            Some("alice"),
            "commit_import",
            json!({"importId": import}),
            params,
            &headers,
        )
        .await;
        assert_eq!(reply.status, 400, "{what}: {}", reply.text());
        assert_eq!(reply.json()["error"]["code"], json!(-32602), "{what}");
    }
    // A look-alike of `idempotencyKey` is refused by the gate, not passed on unrecorded.
    let lookalike = call_with(
        &url,
        Some("alice"),
        "append_rows",
        json!({"importId": import, "rows": [1]}),
        json!({"IdempotencyKey": "x"}),
        &[],
    )
    .await;
    assert_eq!(lookalike.status, 400, "{}", lookalike.text());
    let counts = upstream.debug_json("GET", "/debug/counts");
    assert_eq!(
        counts[&import],
        json!({"rows": 0, "appends": 0, "committed": false, "name": ""})
    );
    // In the header alone, it works; a second commit is a replay.
    for expect_replay in [false, true] {
        let reply = call_with(
            &url,
            Some("alice"),
            "commit_import",
            json!({"importId": import}),
            json!({}),
            &[("idempotency-key", "commit-1")],
        )
        .await;
        assert_eq!(structured(&reply)["committed"], json!(true));
        assert_eq!(replayed(&reply), expect_replay);
    }
    assert_eq!(
        upstream
            .debug_json("GET", "/debug/calls")
            .as_array()
            .unwrap()
            .len(),
        2,
        "start_import and one commit"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_record_expires_after_its_ttl() {
    let upstream = start_upstream(Mode::Json);
    let mut config = idempotent_config(&upstream.base_url());
    config.idempotency.ttl_seconds = 1;
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    append(&url, "alice", &import, json!([1]), "ttl").await;
    assert!(replayed(
        &append(&url, "alice", &import, json!([1]), "ttl").await
    ));
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let later = append(&url, "alice", &import, json!([1]), "ttl").await;
    assert!(!replayed(&later));
    assert_eq!(rows(&upstream, &import), (json!(2), json!(2)));
    sidecar.stop().await;
}

#[tokio::test]
async fn two_sidecars_sharing_redis_apply_a_write_once() {
    let redis = RedisServer::start();
    let upstream = start_upstream(Mode::Json);
    let mut config = idempotent_config(&upstream.base_url());
    config.single_use.store = SingleUseStore::Redis;
    config.single_use.redis_url = Some(redis.url());
    let a = Sidecar::with_keys(config.clone(), &[KEY], AUDIENCE).await;
    let b = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let (url_a, url_b) = (a.mcp_url(), b.mcp_url());
    let import = start_import(&url_a, "alice").await;
    let first = append(&url_a, "alice", &import, json!([1, 2]), "shared").await;
    let second = append(&url_b, "alice", &import, json!([1, 2]), "shared").await;
    assert!(replayed(&second), "{}", second.text());
    assert_eq!(result_of(&second), result_of(&first));
    let urls = (0..20).map(|i| {
        if i % 2 == 0 {
            url_a.clone()
        } else {
            url_b.clone()
        }
    });
    let replies = race(urls, &import, json!([5]), "shared-race").await;
    assert!(replies.iter().all(|r| r.status == 200 || r.status == 409));
    let settled_reply =
        settled(|| append(&url_b, "alice", &import, json!([5]), "shared-race")).await;
    for reply in replies.iter().filter(|r| r.status == 200) {
        assert_eq!(result_of(reply), result_of(&settled_reply));
    }
    assert_eq!(rows(&upstream, &import), (json!(3), json!(2)));
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn the_python_sdk_client_drives_the_import_flow() {
    let upstream = start_upstream(Mode::Sse);
    let mut config = idempotent_config(&upstream.base_url());
    // The SDK client sends no identity header: unbound handles, one caller.
    config.principal.source = PrincipalSource::None;
    config.handles = vec![super::handles::import_kind(60)];
    // `Client.call_tool` has no key parameter: the commit goes without one.
    config.idempotency.require_key = Vec::new();
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let out = client_flows(&sidecar.mcp_url(), &["--mode", "2026-07-28", "import-flow"]).await;
    let handle = out["handle"].as_str().unwrap_or_else(|| panic!("{out}"));
    assert!(handle.starts_with("h1."), "{out}");
    assert_eq!(
        out["appends"][0], out["appends"][1],
        "the repeat got the stored result"
    );
    assert_eq!(out["appends"][0]["total"], json!(3));
    assert_eq!(out["commit"]["committed"], json!(true));
    assert_eq!(rows(&upstream, "imp-1"), (json!(3), json!(1)));
    sidecar.stop().await;
}
