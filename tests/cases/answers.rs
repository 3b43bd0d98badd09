//! Answers go only to the questions a verified round asked. The rules a legacy server
//! should enforce on a multi-round flow and mostly does not, enforced for it: client
//! capabilities (`-32021` listing what is missing), answers checked against the questions
//! asked (named key and rule, nothing forwarded), unasked `inputResponses` dropped (rounds
//! without an upstream state included), and round and flow limits.

use crate::support::fake::{
    FakeUpstream, Recorded, Reply, Step, complete, input_required, sealed, tools_call,
};
use crate::support::flow::{NOBODY, PROVISIONED, mint, region, retry, text};
use crate::support::http::{Reply as ClientReply, mcp_headers, post_mcp, post_mcp_with, send};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::{Sidecar, config};
use bytes::Bytes;
use http::Method;
use mcp_state_guard::facade::policy::MrtrRefusal;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

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
pub(super) fn asking(request: &Recorded) -> Reply {
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

pub(super) fn call(caps: Value, state: Option<&str>, responses: Value) -> Value {
    let mut params = json!({"name": "provision", "arguments": {},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] = responses;
    }
    json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
}

pub(super) async fn post(url: &str, message: &Value, extra: &[(&str, &str)]) -> ClientReply {
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
    assert_eq!(
        sidecar.metrics().path.sealed_count(),
        0,
        "nothing was sealed"
    );
    assert_eq!(
        sidecar
            .metrics()
            .policy
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
    // An unasked answer beside a bad one: refused, and the unasked one counted as dropped
    // all the same.
    let dropped = sidecar.metrics().path.input_responses_dropped_count();
    let mut responses = accept(json!({"region": 7}));
    responses["tier"] = json!({"action": "accept", "content": {"tier": "enterprise"}});
    let reply = post(&url, &call(caps.clone(), Some(&token), responses), &[]).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        sidecar.metrics().path.input_responses_dropped_count(),
        dropped + 1
    );
    assert_eq!(fake.count(), forwarded, "a bad answer reached the upstream");
    // The answer that fits goes through, with its meaning intact.
    let good = accept(json!({"region": "eu", "email": "a@b.co"}));
    let reply = post(&url, &call(caps, Some(&token), good.clone()), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(fake.last().json()["params"]["inputResponses"], good);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unasked_input_responses_are_dropped() {
    let upstream = LegacyServer::start(Mode::Json);
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let token = mint(&sidecar.mcp_url(), NOBODY).await;
    upstream.reset();
    let mut message = retry(2, &token);
    let tier = json!({"action": "accept", "content": {"tier": "enterprise"}});
    message["params"]["inputResponses"]["tier"] = tier;
    let reply = post_mcp_with(&sidecar.mcp_url(), &message, NOBODY).await;
    assert_eq!(text(&reply.json()), PROVISIONED);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["inputResponses"], json!(["region"]));
    let state = r#"{"k":"provision","name":"web-1","r":1,"tier":"free"}"#;
    assert_eq!(seen[0]["requestState"], state);
    // Byte-level too: the forwarded body holds the asked key only.
    let body = upstream.http_log()[0]["body"].as_str().unwrap().to_owned();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["params"]["inputResponses"], region());
    assert_eq!(sidecar.metrics().path.input_responses_dropped_count(), 1);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rounds_without_upstream_state_bind_their_input_responses() {
    // The upstream asks but keeps no state (legal: inputRequests alone). The sidecar
    // still hands out a token, so the answers of the retry are checked against what was
    // asked, and the upstream gets its round back without a state it never sent.
    let fake = FakeUpstream::start(|request| {
        let params = &request.json()["params"];
        let answer = if params.get("inputResponses").is_some() {
            json!({"jsonrpc": "2.0", "id": request.json()["id"], "result": {"content": []}})
        } else {
            let mut asked = input_required(request.json()["id"].clone(), Value::Null);
            asked["result"]
                .as_object_mut()
                .unwrap()
                .remove("requestState");
            asked
        };
        Reply::json(answer.to_string())
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let first = post_mcp(&sidecar.mcp_url(), &tools_call(1, None))
        .await
        .json();
    let token = sealed(&first["result"]);

    // Answers without any token were asked by no verified round: all dropped.
    let mut forged = tools_call(2, None);
    forged["params"]["inputResponses"] = json!({"region": {"action": "accept"}});
    post_mcp(&sidecar.mcp_url(), &forged).await;
    assert!(fake.last().json()["params"].get("inputResponses").is_some());
    assert_eq!(fake.last().json()["params"]["inputResponses"], json!({}));

    // With the token: the asked key passes, the unasked one is dropped, and no state
    // reaches the upstream.
    let mut retry = tools_call(3, Some(json!(token)));
    retry["params"]["inputResponses"]["tier"] =
        json!({"action": "accept", "content": {"tier": "enterprise"}});
    let reply = post_mcp(&sidecar.mcp_url(), &retry).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = fake.last().json();
    assert_eq!(seen["params"].get("requestState"), None, "{seen}");
    let keys: Vec<&String> = seen["params"]["inputResponses"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["region"]);
    assert_eq!(sidecar.metrics().path.input_responses_dropped_count(), 2);
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
            .policy
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
    assert_eq!(sidecar.metrics().path.verified_count("expired"), 1);
    assert_eq!(
        sidecar
            .metrics()
            .policy
            .mrtr_refusal_count(MrtrRefusal::FlowLimit),
        1
    );
    sidecar.stop().await;
}
