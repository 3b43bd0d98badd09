//! Idempotent writes in front of a legacy import server (`tests/py/import_server.py`)
//! that applies every `append_rows` it is sent: through the sidecar, a write repeated
//! under one idempotency key (sequentially, twenty at once, or across two sidecars
//! sharing a real `redis-server`) is applied exactly once and every repeat gets the
//! identical stored answer; other arguments under the key conflict, another caller's
//! key is independent, a repeat during the first is told to wait, and a required key must
//! be present and well-formed. Only a complete 2xx answer is recorded; anything else
//! releases the key. How long a key is held and where (a record's TTL, a reservation's
//! lease, a reservation Redis applies late, the memory store's bounds): `store`.

use super::handles::{AUDIENCE, KEY, call_with, structured};
use crate::support::http::Reply;
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::client_flows;
use crate::support::redis::RedisServer;
use crate::support::sidecar::{Sidecar, config};
use mcp_state_guard::facade::config::{Config, PrincipalSource, SingleUseStore};
use mcp_state_guard::facade::tools::IdempotencyResult;
use serde_json::{Value, json};
use std::time::Duration;

mod store;

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

pub(super) async fn append_slow(
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
    assert!(metrics.tools.idempotency_count(IdempotencyResult::Replayed) >= 4);
    assert_eq!(
        metrics.tools.idempotency_count(IdempotencyResult::Conflict),
        1
    );
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

/// What is recorded: a complete answer (a result, or a JSON-RPC error) in a 2xx
/// response, replayed with its status. What releases the key: an HTTP failure (a 5xx
/// or 429 status, whatever its body), a body that is no answer, a stream that ends
/// without one, a timeout; the repeat is forwarded again. A fake upstream, because a
/// real server cannot be made to fail this way on demand.
#[tokio::test]
async fn only_a_complete_2xx_answer_is_recorded() {
    use crate::support::fake::{FakeUpstream, Reply as FakeReply, Step, event};
    use crate::support::http::post_mcp_with;
    let fake = FakeUpstream::start(|request| {
        let message = request.json();
        let id = message["id"].clone();
        let error = json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32000, "message": "busy"}});
        let result = json!({"jsonrpc": "2.0", "id": id,
            "result": {"content": [{"type": "text", "text": "done"}], "isError": false}});
        let json = |status: u16, body: &Value| {
            FakeReply::new(
                status,
                crate::support::fake::FakeBody::whole(body.to_string()),
            )
            .header("content-type", "application/json")
        };
        match request.header("x-case").unwrap_or_default() {
            "unavailable" => json(503, &error),
            "limited" => json(429, &error).header("retry-after", "3"),
            "no-answer" => json(200, &json!({"jsonrpc": "2.0", "id": id})),
            "cut-stream" => FakeReply::sse(vec![Step::Data(
                event(
                    "\r\n",
                    &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": 1, "progress": 1}}),
                )
                .into(),
            )]),
            "hang" => FakeReply::hang(),
            "error" => json(200, &error),
            "accepted" => json(202, &result),
            "streamed" => FakeReply::sse(vec![Step::Data(event("\r\n", &result).into())]),
            other => panic!("unknown case {other}"),
        }
    })
    .await;
    let mut config = crate::support::sidecar::config(&fake.base_url());
    config.idempotency.tools = vec!["*".into()];
    config.timeouts.response_head_ms = 500;
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let send = |case: &'static str| {
        let url = url.clone();
        async move {
            let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "write", "arguments": {"case": case},
                    "idempotencyKey": format!("key-{case}"),
                    "_meta": crate::support::http::meta()}});
            post_mcp_with(&url, &message, &[("x-case", case)]).await
        }
    };
    for (case, status) in [
        ("unavailable", 503),
        ("limited", 429),
        ("no-answer", 200),
        ("cut-stream", 200),
        ("hang", 504),
    ] {
        let before = fake.count();
        // A stream's key is released when it ends, just after the client has it.
        for reply in [send(case).await, settled(|| send(case)).await] {
            assert_eq!(reply.status, status, "{case}: {}", reply.text());
            assert!(!replayed(&reply), "{case} was recorded");
        }
        assert_eq!(fake.count(), before + 2, "{case}: the repeat was forwarded");
    }
    for (case, status) in [("error", 200), ("accepted", 202), ("streamed", 200)] {
        let before = fake.count();
        let first = send(case).await;
        assert_eq!(first.status, status, "{case}: {}", first.text());
        let again = settled(|| send(case)).await;
        assert!(replayed(&again), "{case}: {}", again.text());
        assert_eq!(again.status, status, "{case}: the original status");
        assert_eq!(again.json()["result"], first.message()["result"], "{case}");
        assert_eq!(again.json()["error"], first.message()["error"], "{case}");
        assert_eq!(fake.count(), before + 1, "{case}: replayed, not forwarded");
    }
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .tools
            .idempotency_count(IdempotencyResult::UpstreamFailed),
        4
    );
    assert_eq!(
        metrics.tools.idempotency_count(IdempotencyResult::Recorded),
        3
    );
    sidecar.stop().await;
}

/// The limit docs/security-model.md states: a client that leaves an SSE stream before its answer
/// releases the key (there is no answer to record), so a repeat is forwarded again. The
/// sidecar closes the upstream stream with the client's, which the Python SDK takes as a
/// cancellation: here the abandoned write never ran. An upstream that finishes the work
/// of a closed stream anyway applies it twice.
#[tokio::test]
async fn a_client_leaving_a_stream_mid_call_releases_the_key() {
    let upstream = start_upstream(Mode::Sse);
    let sidecar = Sidecar::start(idempotent_config(&upstream.base_url())).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    let left = tokio::time::timeout(
        Duration::from_millis(400),
        append_slow(&url, "alice", &import, json!([1]), "left", 1500),
    )
    .await;
    assert!(left.is_err(), "the client left before the answer");
    let metrics = sidecar.metrics();
    for _ in 0..100 {
        if metrics.tools.idempotency_count(IdempotencyResult::Released) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metrics.tools.idempotency_count(IdempotencyResult::Released),
        1
    );
    assert_eq!(
        metrics.tools.idempotency_count(IdempotencyResult::Recorded),
        0
    );
    let repeat = append(&url, "alice", &import, json!([1]), "left").await;
    assert_eq!(repeat.status, 200, "{}", repeat.text());
    assert!(!replayed(&repeat), "nothing was recorded to replay");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        rows(&upstream, &import),
        (json!(1), json!(1)),
        "the abandoned call was cancelled upstream, the repeat applied"
    );
    sidecar.stop().await;
}
