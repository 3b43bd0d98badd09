//! Rules a legacy server should enforce on a multi-round flow and mostly does not, enforced
//! for it: client capabilities (`-32021` listing what is missing), answers checked against
//! the questions asked (named key and rule, nothing forwarded), round and flow limits, and
//! revocation of one caller's flows across replicas.

use crate::support::fake::{FakeUpstream, Recorded, Reply, Step, complete, sealed};
use crate::support::http::{Reply as ClientReply, mcp_headers, send};
use crate::support::redis::RedisServer;
use crate::support::sidecar::{Sidecar, config};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::config::{Config, PrincipalSource, SingleUseStore};
use mcp_state_guard::metrics::MrtrRefusal;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
const KEY: &str = "7e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f";

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "region": {"type": "string", "enum": ["eu", "us"]},
        "email": {"type": "string", "format": "email"},
        "name": {"type": "string", "maxLength": 8}
    }, "required": ["region"]})
}

/// The input requests the fake asks, by the `x-ask` header of the request.
fn asks(kind: &str) -> Value {
    let form = json!({"method": "elicitation/create", "params": {"mode": "form",
        "message": "Which region?", "requestedSchema": schema()}});
    match kind {
        "url" => json!({"login": {"method": "elicitation/create", "params": {"mode": "url",
            "message": "Sign in", "url": "https://idp.example/x", "elicitationId": "e1"}}}),
        "sampling-tools" => json!({"llm": {"method": "sampling/createMessage", "params": {
            "messages": [], "maxTokens": 5, "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}}}),
        "roots" => json!({"dirs": {"method": "roots/list"}}),
        "all" => json!({"form": form, "dirs": {"method": "roots/list"},
            "llm": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5,
                "toolChoice": {"mode": "auto"}}}}),
        _ => json!({"form": form}),
    }
}

/// Asks (with a plaintext state counting rounds) until a retry carries `done`.
fn asking(request: &Recorded) -> Reply {
    let message = request.json();
    let id = message["id"].clone();
    let kind = request.header("x-ask").unwrap_or("form");
    let round = message["params"]["requestState"]
        .as_str()
        .map_or(0, |s| s.parse::<u32>().unwrap());
    let answer = if request.header("x-forever").is_none() && round > 0 {
        complete(id, &format!("done after {round}"))
    } else {
        json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "input_required",
            "inputRequests": asks(kind), "requestState": (round + 1).to_string()}})
    };
    let body = answer.to_string();
    if request.header("x-sse").is_some() {
        Reply::sse(vec![Step::Data(Bytes::from(format!(
            "event: message\ndata: {body}\n\n"
        )))])
    } else {
        Reply::json(body)
    }
}

fn call(caps: Value, state: Option<&str>, responses: Value) -> Value {
    let mut params = json!({"name": "provision", "arguments": {},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] = responses;
    }
    json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
}

async fn post(url: &str, message: &Value, extra: &[(&str, &str)]) -> ClientReply {
    let mut headers = mcp_headers("tools/call", Some("provision"));
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    send(
        Method::POST,
        url,
        &headers,
        serde_json::to_vec(message).unwrap(),
        T,
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn rounds_the_client_cannot_answer_get_32021_listing_every_missing_capability() {
    let fake = FakeUpstream::start(asking).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let url = sidecar.mcp_url();
    let cases = [
        ("form", json!({}), json!({"elicitation": {"form": {}}})),
        (
            "url",
            json!({"elicitation": {"form": {}}}),
            json!({"elicitation": {"url": {}}}),
        ),
        (
            "sampling-tools",
            json!({"sampling": {}}),
            json!({"sampling": {"tools": {}}}),
        ),
        ("roots", json!({"elicitation": {}}), json!({"roots": {}})),
        (
            "all",
            json!({"sampling": {}}),
            json!({"elicitation": {"form": {}}, "roots": {}, "sampling": {"tools": {}}}),
        ),
    ];
    for sse in [false, true] {
        for (kind, caps, required) in &cases {
            let mut extra = vec![("x-ask", *kind)];
            if sse {
                extra.push(("x-sse", "1"));
            }
            let reply = post(&url, &call(caps.clone(), None, Value::Null), &extra).await;
            let error = if sse {
                assert_eq!(reply.status, 200, "{kind}");
                crate::support::fake::last_data(&reply.body)
            } else {
                assert_eq!(reply.status, 400, "{kind}: {}", reply.text());
                reply.json()
            };
            assert_eq!(error["error"]["code"], -32021, "{kind}: {error}");
            assert_eq!(
                error["error"]["data"]["requiredCapabilities"], *required,
                "{kind}"
            );
            assert_eq!(error["id"], 5);
        }
    }
    assert_eq!(sidecar.metrics().sealed_count(), 0, "nothing was sealed");
    assert_eq!(
        sidecar
            .metrics()
            .mrtr_refusal_count(MrtrRefusal::MissingCapability),
        10
    );
    // A client that declared all of them gets its token.
    let caps =
        json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}});
    let reply = post(&url, &call(caps, None, Value::Null), &[("x-ask", "all")]).await;
    sealed(&reply.json()["result"]);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_must_answer_the_question_asked() {
    let fake = FakeUpstream::start(asking).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let url = sidecar.mcp_url();
    let caps = json!({"elicitation": {}});
    let first = post(&url, &call(caps.clone(), None, Value::Null), &[]).await;
    let token = sealed(&first.json()["result"]);
    let forwarded = fake.count();
    let accept = |content: Value| json!({"form": {"action": "accept", "content": content}});
    let cases = [
        (accept(json!({"region": 7})), "must be a string"),
        (accept(json!({"region": "mars"})), "values the schema lists"),
        (
            accept(json!({"email": "a@b.co"})),
            "required field \"region\"",
        ),
        (
            accept(json!({"region": "eu", "name": "much too long"})),
            "maxLength 8",
        ),
        (
            accept(json!({"region": "eu", "email": "not-an-email"})),
            "email",
        ),
        (
            json!({"form": {"action": "decline", "content": {"region": "eu"}}}),
            "only when the action is accept",
        ),
        (
            json!({"form": {"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "eu"}}}),
            "elicitation result",
        ),
    ];
    for (responses, rule) in cases {
        let reply = post(
            &url,
            &call(caps.clone(), Some(&token), responses.clone()),
            &[],
        )
        .await;
        assert_eq!(reply.status, 400, "{responses}");
        let error = reply.json();
        assert_eq!(error["error"]["code"], -32602, "{responses}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Invalid inputResponses[\"form\"]") && message.contains(rule),
            "{responses}: {message}"
        );
        assert_eq!(error["error"]["data"]["key"], "form");
    }
    assert_eq!(fake.count(), forwarded, "a bad answer reached the upstream");
    // The answer that fits goes through, with its meaning intact.
    let good = accept(json!({"region": "eu", "email": "a@b.co"}));
    let reply = post(&url, &call(caps, Some(&token), good.clone()), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(fake.last().json()["params"]["inputResponses"], good);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn flows_end_after_max_rounds_and_max_flow_seconds() {
    let fake = FakeUpstream::start(asking).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let url = sidecar.mcp_url();
    let caps = json!({"elicitation": {}});
    let answer = json!({"form": {"action": "accept", "content": {"region": "eu"}}});
    let forever = [("x-forever", "1")];
    let mut reply = post(&url, &call(caps.clone(), None, Value::Null), &forever).await;
    for round in 2..=16 {
        let token = sealed(&reply.json()["result"]);
        reply = post(
            &url,
            &call(caps.clone(), Some(&token), answer.clone()),
            &forever,
        )
        .await;
        assert_eq!(reply.status, 200, "round {round}: {}", reply.text());
        assert_eq!(
            reply.json()["result"]["resultType"],
            "input_required",
            "round {round}"
        );
    }
    // Round 17: the upstream asks again, and the flow ends instead.
    let token = sealed(&reply.json()["result"]);
    let reply = post(
        &url,
        &call(caps.clone(), Some(&token), answer.clone()),
        &forever,
    )
    .await;
    let error = reply.json();
    assert_eq!(error["error"]["code"], -32603, "{error}");
    assert_eq!(error["error"]["data"]["reason"], "round_limit");
    assert_eq!(
        sidecar
            .metrics()
            .mrtr_refusal_count(MrtrRefusal::RoundLimit),
        1
    );
    sidecar.stop().await;

    let mut c = config(&fake.base_url());
    c.mrtr.max_flow_seconds = 1;
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let first = post(&url, &call(caps.clone(), None, Value::Null), &forever).await;
    let token = sealed(&first.json()["result"]);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let forwarded = fake.count();
    let reply = post(&url, &call(caps, Some(&token), answer), &forever).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json()["error"]["message"],
        "Invalid or expired requestState"
    );
    assert_eq!(fake.count(), forwarded);
    assert_eq!(sidecar.metrics().verified_count("expired"), 1);
    assert_eq!(
        sidecar.metrics().mrtr_refusal_count(MrtrRefusal::FlowLimit),
        1
    );
    sidecar.stop().await;
}

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
        assert_eq!(replica.metrics().verified_count("revoked"), 1);
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
    assert_eq!(sidecar.metrics().verified_count("revoked"), 1);
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
    lenient.single_use.on_store_error = mcp_state_guard::config::OnStoreError::Allow;
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
    assert_eq!(strict.metrics().verified_count("store_unavailable"), 1);
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
