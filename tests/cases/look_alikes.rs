//! Look-alike names, end to end (findings 1 and 2 of the outside security review, and the
//! rule behind them): every name the sidecar reads, at every level of its path, refuses a
//! sibling that folds to it (case, `_`/`-`, Unicode folding), and a folded spelling where
//! the exact one is absent is refused, not skipped. For each case below the client gets
//! the stated error and the fake upstream (which records every request) receives nothing;
//! a well-formed request beside each proves the setup forwards what it should.

use crate::support::fake::{FakeUpstream, Recorded, Reply, complete, sealed};
use crate::support::http::{Reply as ClientReply, post_mcp_with};
use crate::support::sidecar::{Sidecar, config};
use mcp_state_guard::facade::config::{HandleConfig, PrincipalSource};
use serde_json::{Value, json};

const KEY: &str = "5c4b3a29180f6e5d4c3b2a1908f7e6d5c4b3a29180f6e5d4c3b2a1908f7e6d5c";
const AUDIENCE: &str = "look-alikes";

/// A handle kind issued by `start` (at `structuredContent.importId`) and accepted by
/// `accepted_by` at `argument_pointer`.
fn kind(kind: &str, start: &str, accepted_by: &str, argument_pointer: &str) -> HandleConfig {
    HandleConfig {
        kind: kind.into(),
        issued_by: vec![start.into()],
        result_pointer: "/structuredContent/importId".into(),
        accepted_by: vec![accepted_by.into()],
        argument_pointer: argument_pointer.into(),
        ttl_seconds: 60,
    }
}

/// An upstream that trusts any import id: `start_*` issues `imp-9`, any other tool echoes
/// the arguments it received.
fn imports(request: &Recorded) -> Reply {
    let message = request.json();
    let id = message["id"].clone();
    let params = &message["params"];
    let result = if params["name"].as_str().unwrap_or("").starts_with("start_") {
        json!({"resultType": "complete", "content": [{"type": "text", "text": "started"}],
            "structuredContent": {"importId": "imp-9"}, "isError": false})
    } else {
        json!({"resultType": "complete", "content": [{"type": "text", "text": "done"}],
            "structuredContent": {"received": params["arguments"]}, "isError": false})
    };
    Reply::json(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
}

async fn call_tool(url: &str, tool: &str, arguments: Value) -> ClientReply {
    let message = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": crate::support::http::meta()}});
    post_mcp_with(url, &message, &[("x-forwarded-user", "alice")]).await
}

/// The one `invalid_handle` answer, under HTTP 400, to request 41.
fn assert_invalid_handle(reply: &ClientReply, what: &str) {
    assert_eq!(reply.status, 400, "{what}: {}", reply.text());
    assert_eq!(
        reply.json(),
        json!({"jsonrpc": "2.0", "id": 41, "error": {"code": -32602,
            "message": "Invalid or expired handle", "data": {"reason": "invalid_handle"}}}),
        "{what}"
    );
}

/// Finding 1: with `argument_pointer = "/import/id"`, another tenant's raw id under a
/// look-alike parent (`Import`) was forwarded, and so was one's own sealed handle beside
/// such a parent (Go's `encoding/json` folds case and the later key wins); with
/// `/importRef/id`, `import_ref` (which a pydantic model with camel-case aliases and
/// `populate_by_name` reads as `importRef`) was forwarded too.
#[tokio::test(flavor = "multi_thread")]
async fn a_look_alike_of_a_handles_parent_is_refused_and_nothing_is_forwarded() {
    let fake = FakeUpstream::start(imports).await;
    let mut config = config(&fake.base_url());
    config.principal.source = PrincipalSource::Header;
    config.handles = vec![
        kind("import", "start_import", "append_rows", "/import/id"),
        kind("import_ref", "start_ref", "commit_import", "/importRef/id"),
    ];
    let sidecar = Sidecar::with_keys(config, &[KEY], AUDIENCE).await;
    let url = sidecar.mcp_url();
    let mut own = Vec::new();
    for start in ["start_import", "start_ref"] {
        let started = call_tool(&url, start, json!({})).await;
        let handle = started.json()["result"]["structuredContent"]["importId"].clone();
        assert!(
            handle.as_str().unwrap().starts_with("h1."),
            "sealed: {handle}"
        );
        own.push(handle);
    }
    let (import, import_ref) = (&own[0], &own[1]);

    let forwarded = fake.count();
    let cases = [
        (
            "append_rows",
            json!({"Import": {"id": "imp-1"}, "rows": [1]}),
            "another tenant's raw id under a look-alike parent",
        ),
        (
            "append_rows",
            json!({"import": {"id": import}, "Import": {"id": "imp-1"}, "rows": [1]}),
            "own handle at the exact path, a raw id under a later look-alike parent",
        ),
        (
            "append_rows",
            json!({"IMPORT": {"id": "imp-1"}, "import": {"id": import}, "rows": [1]}),
            "a look-alike parent before the exact one",
        ),
        (
            "append_rows",
            json!({"import": {"id": import, "ID": "imp-1"}, "rows": [1]}),
            "a look-alike of the last step",
        ),
        (
            "commit_import",
            json!({"import_ref": {"id": "imp-1"}}),
            "the snake-case alias of a camel-case parent",
        ),
        (
            "commit_import",
            json!({"importRef": {"id": import_ref}, "import_ref": {"id": "imp-1"}}),
            "own handle beside the snake-case alias",
        ),
    ];
    for (tool, arguments, what) in cases {
        let reply = call_tool(&url, tool, arguments).await;
        assert_invalid_handle(&reply, what);
    }
    assert_eq!(
        fake.count(),
        forwarded,
        "a refused call reached the upstream"
    );

    // The same handles at their exact paths alone open, and the upstream gets its raw id.
    for (tool, arguments) in [
        (
            "append_rows",
            json!({"import": {"id": import}, "rows": [1]}),
        ),
        ("commit_import", json!({"importRef": {"id": import_ref}})),
    ] {
        let reply = call_tool(&url, tool, arguments).await;
        assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
        let received = &fake.last().json()["params"]["arguments"];
        let raw = received
            .pointer("/import/id")
            .or(received.pointer("/importRef/id"));
        assert_eq!(raw, Some(&json!("imp-9")), "{tool}: {received}");
    }
    sidecar.stop().await;
}

/// An upstream asking one question of each kind until a retry carries a state.
fn asking(request: &Recorded) -> Reply {
    let message = request.json();
    let id = message["id"].clone();
    let answer = match message["params"]["requestState"] {
        Value::Null => json!({"jsonrpc": "2.0", "id": id, "result": {
            "resultType": "input_required", "requestState": "round-1", "inputRequests": {
                "region": {"method": "elicitation/create", "params": {"mode": "form",
                    "message": "Which region?", "requestedSchema": {"type": "object",
                        "properties": {"region": {"type": "string", "enum": ["eu", "us"]}},
                        "required": ["region"]}}},
                "llm": {"method": "sampling/createMessage",
                    "params": {"messages": [], "maxTokens": 5}},
                "dirs": {"method": "roots/list"}}}}),
        _ => complete(id, "provisioned"),
    };
    Reply::json(answer.to_string())
}

fn provision(state: Option<&str>, responses: Value) -> Value {
    let caps = json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}});
    let mut params = json!({"name": "provision", "arguments": {},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] = responses;
    }
    json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": params})
}

/// Finding 2: `inputResponses` whose answers hold look-alike members (`ACTION` beside
/// `action`, `Content` for `content`, ...) or members their result type does not define
/// were forwarded byte for byte: only the exact `action` / `content` (sampling: `role`,
/// `model`, `content`; roots: `roots`, each root's `uri`) were read.
#[tokio::test(flavor = "multi_thread")]
async fn look_alike_and_unknown_answer_members_are_refused_and_nothing_is_forwarded() {
    let fake = FakeUpstream::start(asking).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let url = sidecar.mcp_url();
    let first = post_mcp_with(&url, &provision(None, Value::Null), &[]).await;
    let token = sealed(&first.json()["result"]);
    let forwarded = fake.count();

    let look_alike = |kind: &str, name: &str| {
        format!("must be {kind} (another key reads like its member \"{name}\")")
    };
    let cases = [
        (
            json!({"region": {"action": "decline", "ACTION": "accept",
                "Content": {"region": "ap-evil-1", "admin": true}}}),
            "region",
            look_alike("an elicitation result", "action"),
        ),
        (
            json!({"region": {"action": "accept", "content": {"region": "eu"},
                "Content": {"region": "ap-evil-1"}}}),
            "region",
            look_alike("an elicitation result", "content"),
        ),
        (
            json!({"region": {"action": "decline", "admin": true}}),
            "region",
            "must be an elicitation result (no member but action, content, _meta)".to_owned(),
        ),
        (
            json!({"llm": {"role": "assistant", "Role": "user", "model": "m",
                "content": {"type": "text", "text": "ap-evil-1"}}}),
            "llm",
            look_alike("a sampling result", "role"),
        ),
        (
            json!({"llm": {"role": "assistant", "model": "m", "MODEL": "ap-evil-1",
                "content": {"type": "text", "text": "hi"}}}),
            "llm",
            look_alike("a sampling result", "model"),
        ),
        (
            json!({"dirs": {"roots": [], "Roots": [{"uri": "file:///ap-evil-1"}]}}),
            "dirs",
            look_alike("a roots result", "roots"),
        ),
        (
            json!({"dirs": {"roots": [{"uri": "file:///home", "URI": "file:///ap-evil-1"}]}}),
            "dirs",
            look_alike("a roots result of Root objects", "uri"),
        ),
    ];
    for (responses, key, rule) in cases {
        let reply = post_mcp_with(&url, &provision(Some(&token), responses.clone()), &[]).await;
        assert_eq!(reply.status, 400, "{responses}: {}", reply.text());
        assert_eq!(
            reply.json(),
            json!({"jsonrpc": "2.0", "id": 42, "error": {"code": -32602,
                "message": format!("Invalid inputResponses[\"{key}\"]: {rule}"),
                "data": {"reason": "invalid_input_response", "key": key}}}),
            "{responses}"
        );
        assert!(!reply.text().contains("ap-evil-1"), "an answer echoed");
    }
    assert_eq!(
        fake.count(),
        forwarded,
        "a refused answer reached the upstream"
    );

    // Answers that are exactly their result types pass, their meaning intact.
    let good = json!({
        "region": {"action": "accept", "content": {"region": "eu"}, "_meta": {}},
        "llm": {"role": "assistant", "model": "m", "stopReason": "endTurn",
            "content": {"type": "text", "text": "hi"}},
        "dirs": {"roots": [{"uri": "file:///home", "name": "home"}]}
    });
    let reply = post_mcp_with(&url, &provision(Some(&token), good.clone()), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(fake.last().json()["params"]["inputResponses"], good);
    sidecar.stop().await;
}

/// The declared client capabilities decide whether a round may be sealed: a look-alike of
/// the capabilities key or of a capability below it (beside the exact one or alone) is
/// refused at the gate (-32600), before anything is forwarded.
#[tokio::test(flavor = "multi_thread")]
async fn look_alike_capability_keys_are_refused_at_the_gate_and_nothing_is_forwarded() {
    let fake = FakeUpstream::start(asking).await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let url = sidecar.mcp_url();
    let with_meta = |meta: Value| {
        json!({"jsonrpc": "2.0", "id": 43, "method": "tools/call",
            "params": {"name": "provision", "arguments": {}, "_meta": meta}})
    };
    const CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
    for meta in [
        json!({CAPS: {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/ClientCapabilities": {"elicitation": {"url": {}}}}),
        json!({"io.modelcontextprotocol/client_capabilities": {"roots": {}}}),
        json!({CAPS: {"elicitation": {"form": {}}, "Elicitation": {"url": {}}}}),
        json!({CAPS: {"elicitation": {"URL": {}}}}),
        json!({CAPS: {"sampling": {"Tools": {}}}}),
        json!({CAPS: {"ROOTS": {}}}),
    ] {
        let reply = post_mcp_with(&url, &with_meta(meta.clone()), &[]).await;
        assert_eq!(reply.status, 400, "{meta}: {}", reply.text());
        assert_eq!(
            reply.json(),
            json!({"jsonrpc": "2.0", "id": 43,
                "error": {"code": -32600, "message": "Invalid request"}}),
            "{meta}"
        );
    }
    assert_eq!(fake.count(), 0, "a refused request reached the upstream");
    let reply = post_mcp_with(&url, &with_meta(json!({CAPS: {"roots": {}}})), &[]).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        reply.json()["error"]["code"],
        json!(-32021),
        "exact names are read: roots only, the round also asks a form and sampling"
    );
    assert_eq!(fake.count(), 1);
    sidecar.stop().await;
}

/// Header names are names the sidecar reads too: a WSGI or CGI upstream reads
/// `Mcp_Name`, `Idempotency_Key` or `Content_Type` as the real header (both spellings
/// become `HTTP_MCP_NAME`), so an `_` spelling of a header the sidecar checks is refused
/// before anything is forwarded, and the `-` spelling still passes.
#[tokio::test(flavor = "multi_thread")]
async fn an_underscore_spelling_of_a_header_the_sidecar_reads_is_refused() {
    let fake = FakeUpstream::start(imports).await;
    let sidecar = Sidecar::start(config(&fake.base_url())).await;
    let url = sidecar.mcp_url();
    let message = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "append_rows", "arguments": {}, "_meta": crate::support::http::meta()}});
    for (name, value) in [
        ("mcp_name", "other_tool"),
        ("mcp_method", "tools/list"),
        ("idempotency_key", "k1"),
        ("content_type", "text/plain"),
    ] {
        let reply = post_mcp_with(&url, &message, &[(name, value)]).await;
        assert_eq!(reply.status, 400, "{name}: {}", reply.text());
        assert_eq!(
            reply.json()["error"]["message"],
            "Invalid request framing",
            "{name}"
        );
    }
    assert_eq!(fake.count(), 0, "nothing was forwarded");
    let reply = post_mcp_with(&url, &message, &[("idempotency-key", "k1")]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(fake.count(), 1);
    sidecar.stop().await;
}
