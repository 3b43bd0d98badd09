//! Revocation: a revoked caller's flows stop on every replica sharing the store, whether
//! revoked through `/admin/revoke` or the `revoke` command; a revocation check the store
//! cannot answer follows `on_store_error`; the endpoint refuses what it cannot read. (A
//! revoked caller's handles: `handles`; another service's revocation: `fairness`.)

use super::answers::{asking, call, post};
use crate::support::fake::{FakeUpstream, sealed};
use crate::support::http::{Reply as ClientReply, send};
use crate::support::redis::RedisServer;
use crate::support::sidecar::{Sidecar, config};
use http::Method;
use mcp_state_guard::facade::config::{Config, PrincipalSource, SingleUseStore};
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

const KEY: &str = "7e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f";

fn replica(fake: &FakeUpstream, redis: &RedisServer, token_file: &std::path::Path) -> Config {
    let mut c = config(&fake.base_url());
    c.principal.source = PrincipalSource::Header;
    c.single_use.store = SingleUseStore::Redis;
    c.single_use.redis_url = Some(redis.url());
    c.admin.token_file = Some(token_file.to_owned());
    c
}

async fn admin_revoke(sidecar: &Sidecar, bearer: Option<&str>, principal: &str) -> ClientReply {
    let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    if let Some(bearer) = bearer {
        headers.push(("authorization".into(), format!("Bearer {bearer}")));
    }
    let url = format!("http://{}/admin/revoke", sidecar.admin_addr);
    let body = serde_json::to_vec(&json!({"principal": principal})).unwrap();
    send(Method::POST, &url, &headers, body, T).await
}

#[tokio::test(flavor = "multi_thread")]
async fn revoking_a_caller_stops_its_flows_on_every_replica() {
    const SECRET: &str = "admin-secret-0123456789";
    let redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("  {SECRET}\n")).unwrap();
    let a = Sidecar::with_keys(replica(&fake, &redis, &token_file), &[KEY], "svc").await;
    let b = Sidecar::with_keys(replica(&fake, &redis, &token_file), &[KEY], "svc").await;
    let caps = json!({"elicitation": {}});
    let answer = json!({"form": {"action": "accept", "content": {"region": "eu"}}});
    let mint = |user: &'static str| {
        let url = a.mcp_url();
        let caps = caps.clone();
        async move {
            let reply = post(
                &url,
                &call(caps, None, Value::Null),
                &[("x-forwarded-user", user)],
            )
            .await;
            sealed(&reply.json()["result"])
        }
    };
    let alice = mint("alice").await;
    let bob = mint("bob").await;

    assert_eq!(admin_revoke(&a, None, "alice").await.status, 401);
    assert_eq!(
        admin_revoke(&a, Some("wrong-secret-000000"), "alice")
            .await
            .status,
        401
    );
    let done = admin_revoke(&a, Some(SECRET), "alice").await;
    assert_eq!(done.status, 200, "{}", done.text());

    let forwarded = fake.count();
    for replica in [&a, &b] {
        let retry = call(caps.clone(), Some(&alice), answer.clone());
        let reply = post(&replica.mcp_url(), &retry, &[("x-forwarded-user", "alice")]).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert_eq!(
            reply.json()["error"]["message"],
            "Invalid or expired requestState"
        );
        assert_eq!(replica.metrics().path.verified_count("revoked"), 1);
    }
    assert_eq!(
        fake.count(),
        forwarded,
        "a revoked retry reached the upstream"
    );
    let retry = call(caps.clone(), Some(&bob), answer.clone());
    let reply = post(&b.mcp_url(), &retry, &[("x-forwarded-user", "bob")]).await;
    assert_eq!(reply.status, 200, "bob is unaffected: {}", reply.text());
    // A flow alice starts after the revocation works (a second later: iat is whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = mint("alice").await;
    let retry = call(caps.clone(), Some(&fresh), answer.clone());
    let reply = post(&b.mcp_url(), &retry, &[("x-forwarded-user", "alice")]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    a.stop().await;
    b.stop().await;

    // No admin.token_file: the endpoint is refused.
    let c = config(&fake.base_url());
    let plain = Sidecar::start(c).await;
    assert_eq!(
        admin_revoke(&plain, Some(SECRET), "alice").await.status,
        403
    );
    plain.stop().await;
}

/// The `revoke` command writes the same record, from outside the sidecars.
#[tokio::test(flavor = "multi_thread")]
async fn the_revoke_command_reaches_every_replica_through_redis() {
    let redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "admin-secret-0123456789").unwrap();
    let sidecar = Sidecar::with_keys(replica(&fake, &redis, &token_file), &[KEY], "svc").await;
    let caps = json!({"elicitation": {}});
    let first = post(
        &sidecar.mcp_url(),
        &call(caps.clone(), None, Value::Null),
        &[("x-forwarded-user", "carol")],
    )
    .await;
    let token = sealed(&first.json()["result"]);
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        format!(
            // The sidecars' own audience: a revocation holds for one service.
            "[state]\naudience = \"svc\"\n[single_use]\nstore = \"redis\"\nredis_url = \"{}\"\n",
            redis.url()
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-state-guard"))
        .args(["revoke", "--config"])
        .arg(&file)
        .args(["--principal", "carol"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("revoked for audience svc:"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let answer = json!({"form": {"action": "accept", "content": {"region": "eu"}}});
    let reply = post(
        &sidecar.mcp_url(),
        &call(caps, Some(&token), answer),
        &[("x-forwarded-user", "carol")],
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(sidecar.metrics().path.verified_count("revoked"), 1);
    sidecar.stop().await;
}

/// A revocation check the store cannot answer follows `single_use.on_store_error`.
#[tokio::test(flavor = "multi_thread")]
async fn an_unanswerable_revocation_check_follows_the_store_error_policy() {
    let mut redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "admin-secret-0123456789").unwrap();
    let strict = Sidecar::with_keys(replica(&fake, &redis, &token_file), &[KEY], "svc").await;
    let mut lenient = replica(&fake, &redis, &token_file);
    lenient.single_use.on_store_error = mcp_state_guard::facade::config::OnStoreError::Allow;
    let lenient = Sidecar::with_keys(lenient, &[KEY], "svc").await;
    let caps = json!({"elicitation": {}});
    let answer = json!({"form": {"action": "accept", "content": {"region": "eu"}}});
    let dave = [("x-forwarded-user", "dave")];
    let first = post(
        &strict.mcp_url(),
        &call(caps.clone(), None, Value::Null),
        &dave,
    )
    .await;
    let token = sealed(&first.json()["result"]);
    redis.stop();
    let retry = call(caps, Some(&token), answer);
    let refused = post(&strict.mcp_url(), &retry, &dave).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(strict.metrics().path.verified_count("store_unavailable"), 1);
    let allowed = post(&lenient.mcp_url(), &retry, &dave).await;
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    strict.stop().await;
    lenient.stop().await;
}

/// `POST /admin/revoke` with the right secret but a body it cannot read: refused, and no
/// revocation recorded.
#[tokio::test(flavor = "multi_thread")]
async fn the_revoke_endpoint_refuses_what_it_cannot_read() {
    const SECRET: &str = "admin-secret-0123456789";
    let fake = FakeUpstream::start(asking).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, SECRET).unwrap();
    let mut c = config(&fake.base_url());
    c.principal.source = PrincipalSource::Header;
    c.admin.token_file = Some(token_file);
    let sidecar = Sidecar::with_keys(c, &[KEY], "svc").await;
    let caps = json!({"elicitation": {}});
    let erin = [("x-forwarded-user", "erin")];
    let first = post(
        &sidecar.mcp_url(),
        &call(caps.clone(), None, Value::Null),
        &erin,
    )
    .await;
    let token = sealed(&first.json()["result"]);
    let url = format!("http://{}/admin/revoke", sidecar.admin_addr);
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("authorization".to_owned(), format!("Bearer {SECRET}")),
    ];
    let oversized = format!(r#"{{"principal":"{}"}}"#, "e".repeat(70 * 1024));
    for body in [
        "not json".to_owned(),
        r#"{"principal":""}"#.to_owned(),
        r#"{"principal":5}"#.to_owned(),
        r#"{"who":"erin"}"#.to_owned(),
        oversized,
    ] {
        let reply = send(Method::POST, &url, &headers, body.clone(), T).await;
        assert_eq!(reply.status, 400, "{}", &body[..body.len().min(40)]);
    }
    let get = send(Method::GET, &url, &headers, "", T).await;
    assert_eq!(get.status, 405);
    // Nothing was revoked: erin's flow goes on.
    let answer = json!({"form": {"action": "accept", "content": {"region": "eu"}}});
    let reply = post(&sidecar.mcp_url(), &call(caps, Some(&token), answer), &erin).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    sidecar.stop().await;
}
