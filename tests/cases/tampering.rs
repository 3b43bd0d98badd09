//! The product in one test: the tamper attack that works against the legacy server
//! directly fails through the sidecar.

use crate::support::http::{meta, post_mcp};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::sidecar::Sidecar;
use serde_json::{Value, json};

fn provision(id: u64, state: Option<&str>) -> Value {
    let mut params = json!({"name": "provision", "arguments": {"name": "web-1"}, "_meta": meta()});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu-west-1"}}});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

#[tokio::test(flavor = "multi_thread")]
async fn tampering_works_directly_and_fails_through_the_sidecar() {
    let upstream = LegacyServer::start(Mode::Json);
    // Directly: the plaintext state is trusted.
    let first = post_mcp(&upstream.mcp_url(), &provision(1, None))
        .await
        .json();
    let plain = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert!(plain.contains("\"tier\":\"free\""), "{plain}");
    let forged = plain.replace("free", "enterprise");
    let direct = post_mcp(&upstream.mcp_url(), &provision(2, Some(&forged)))
        .await
        .json();
    assert!(
        direct["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("tier=enterprise")
    );

    // Through the sidecar: the client only sees a token, and an edited one is refused.
    let sidecar = Sidecar::in_front_of(&upstream.base_url()).await;
    let first = post_mcp(&sidecar.mcp_url(), &provision(3, None))
        .await
        .json();
    let token = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert!(
        token.starts_with("v1.") && !token.contains("tier"),
        "{token}"
    );
    upstream.reset();
    let refused = post_mcp(&sidecar.mcp_url(), &provision(4, Some(&forged))).await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json()["error"]["message"],
        "Invalid or expired requestState"
    );
    assert!(
        upstream.seen().is_empty(),
        "the forged state reached the upstream: {:?}",
        upstream.seen()
    );
    let ok = post_mcp(&sidecar.mcp_url(), &provision(5, Some(&token)))
        .await
        .json();
    assert_eq!(
        ok["result"]["content"][0]["text"],
        "Provisioned web-1 (tier=free) in eu-west-1"
    );
    assert_eq!(sidecar.metrics().verified_count("malformed"), 1);
    assert_eq!(sidecar.metrics().verified_count("ok"), 1);
    sidecar.stop().await;
}
