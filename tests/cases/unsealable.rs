//! Response-side edges from a security review: headers that make a client decode a body
//! differently from the sealer, states hidden in errors, and rounds without upstream
//! state. Each case fails if its guard is removed.

use crate::support::fake::{
    FakeBody, FakeUpstream, Reply, SECRET, assert_internal_error, contains, event, input_required,
    plaintext, sealed, tools_call,
};
use crate::support::http::post_mcp;
use crate::support::sidecar::Sidecar;
use serde_json::{Value, json};

/// Raw response headers of a fake upstream.
type RawHeaders = Vec<(&'static str, Vec<u8>)>;

/// What a client receives when the upstream answers `body` under `headers`.
async fn through(headers: RawHeaders, body: Vec<u8>) -> bytes::Bytes {
    let fake = FakeUpstream::always(move || {
        let mut reply = Reply::new(200, FakeBody::whole(body.clone()));
        for (name, value) in &headers {
            reply = reply.raw_header(name, value);
        }
        reply
    })
    .await;
    let sidecar = Sidecar::in_front_of(&fake.base_url()).await;
    let reply = post_mcp(&sidecar.mcp_url(), &tools_call(7, None)).await;
    sidecar.stop().await;
    reply.body
}

fn utf16(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_a_client_decodes_differently_are_refused() {
    let message = input_required(json!(7), json!(plaintext()));
    let sse = event("\r\n", &message);
    let ct = |v: &str| ("content-type", v.as_bytes().to_vec());
    let ce = |v: &str| ("content-encoding", v.as_bytes().to_vec());
    let cases: Vec<(&str, RawHeaders, Vec<u8>)> = vec![
        // A client honours the charset; the sealer reads bytes as UTF-8.
        (
            "utf-16 events",
            vec![ct("text/event-stream; charset=utf-16")],
            utf16(&sse),
        ),
        (
            "utf-16 json",
            vec![ct("application/json; charset=UTF-16LE")],
            utf16(&message.to_string()),
        ),
        // Clients merge repeated headers: `identity, gzip` is decoded as gzip.
        (
            "two encodings",
            vec![ct("text/event-stream"), ce("identity"), ce("gzip")],
            gzip(sse.as_bytes()),
        ),
        // Latin-1 bytes in the type: clients still see `application/json`.
        (
            "non-ascii type",
            vec![("content-type", b"application/json; x=\xe9".to_vec())],
            message.to_string().into_bytes(),
        ),
        // Two types: some clients take the last, some search for `json`.
        (
            "two types",
            vec![ct("text/plain"), ct("application/json")],
            message.to_string().into_bytes(),
        ),
    ];
    for (what, headers, body) in cases {
        let received = through(headers, body).await;
        assert!(!contains(&received, SECRET), "{what}: plaintext leaked");
        assert_internal_error(&received, 7, what);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_in_an_error_is_refused() {
    let error = json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": "retry",
        "data": {"requestState": plaintext()}}});
    let ct = ("content-type", b"application/json".to_vec());
    let received = through(vec![ct], error.to_string().into_bytes()).await;
    assert_internal_error(&received, 7, "error.data.requestState");
}

#[tokio::test(flavor = "multi_thread")]
async fn non_json_sse_data_passes_as_it_carries_no_message() {
    // The 2024 HTTP+SSE transport announces its POST endpoint as a plain URL.
    let body = "event: endpoint\r\ndata: /messages?session_id=abc\r\n\r\n";
    let ct = ("content-type", b"text/event-stream".to_vec());
    let received = through(vec![ct], body.as_bytes().to_vec()).await;
    assert_eq!(&received[..], body.as_bytes());
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
    assert_eq!(sidecar.metrics().input_responses_dropped_count(), 2);
    sidecar.stop().await;
}
