//! One keep-alive connection carrying several callers, as a front proxy's pooled
//! connection does: what a connection recalls of its last caller (the owner its shares
//! are charged to, its bearer token's digest) is only ever used for the same caller.
//! Each request is bound to, and charged to, its own caller, whichever caller the
//! request before it on the connection was.

use super::fairness::{TOOL, assert_over_share, call_message, single_use};
use super::jwt::{KEY, asking_upstream, bearer, jwt_config};
use super::single_use::asking;
use crate::support::fake::{FakeUpstream, sealed, tools_call};
use crate::support::http::{Connection, Reply as ClientReply};
use crate::support::pki::{Files, Signer, claims, jwks};
use crate::support::sidecar::{Sidecar, config};
use mcp_state_guard::facade::error::Share;
use serde_json::json;

/// A connection whose requests carry two callers' tokens in turn (as a front proxy's
/// pooled connection does): each request is its own token's caller, whichever caller the
/// request before it on the connection was.
#[tokio::test]
async fn a_connection_carrying_two_callers_binds_each_request_to_its_own() {
    use mcp_state_guard::facade::auth::Verification;
    let files = Files::new();
    let signer = Signer::rsa("k1");
    let up = asking_upstream().await;
    let config = jwt_config(&up.base_url(), files.put("jwks.json", &jwks(&[&signer])));
    let sidecar = Sidecar::with_keys(config, &[KEY], "svc").await;
    let alice = bearer(&signer.sign(&claims("client-1", "alice")));
    let bob = bearer(&signer.sign(&claims("client-1", "bob")));
    let mut connection = Connection::open(&sidecar.mcp_url()).await;
    let mut states = Vec::new();
    for who in [&alice, &bob] {
        let message = tools_call(1, None);
        let reply = connection
            .post_mcp_with(&message, &[("authorization", who)])
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        states.push(sealed(&reply.json()["result"]));
    }
    let (alices, bobs) = (&states[0], &states[1]);
    // Each retry right after the other caller's request, or after its own.
    for (who, state, status) in [
        (&alice, bobs, 400),
        (&alice, alices, 200),
        (&bob, alices, 400),
        (&bob, bobs, 200),
        (&bob, bobs, 200),
        (&alice, alices, 200),
    ] {
        let retry = tools_call(2, Some(json!(state)));
        let reply = connection
            .post_mcp_with(&retry, &[("authorization", who)])
            .await;
        assert_eq!(reply.status, status, "{}", reply.text());
    }
    // Each token's signature was checked once, and its verification found again for
    // every other request.
    let metrics = sidecar.metrics();
    assert_eq!(metrics.auth.jwt_accepted_count(Verification::Signature), 2);
    assert_eq!(metrics.auth.jwt_accepted_count(Verification::Cache), 6);
    assert_eq!(metrics.path.verified_count("principal"), 2);
    sidecar.stop().await;
}

/// [`call_with`] on `connection`: the one connection a front proxy sends its callers on.
async fn call_on(
    connection: &mut Connection,
    who: (&str, &str),
    token: Option<&str>,
) -> ClientReply {
    connection.post_mcp_with(&call_message(token), &[who]).await
}

/// A front proxy sends many callers' requests on one pooled connection: each is charged
/// to its own share, whichever caller the request before it on the connection was (the
/// connection remembers its last caller's owner, and must not charge it to the next).
#[tokio::test(flavor = "multi_thread")]
async fn callers_on_one_connection_each_spend_their_own_share() {
    let fake = FakeUpstream::start(asking).await;
    // Told apart by the identity header, then (no principal) by the forwarded client.
    for relayed in [false, true] {
        let mut c = if relayed {
            config(&fake.base_url())
        } else {
            single_use(&fake.base_url())
        };
        c.single_use.tools = vec![TOOL.into()];
        c.single_use.max_entries_per_principal = Some(1);
        c.principal.trusted_proxies = vec!["127.0.0.1/32".into()];
        let sidecar = Sidecar::start(c).await;
        let mut connection = Connection::open(&sidecar.mcp_url()).await;
        let (mallory, alice) = if relayed {
            (
                ("x-forwarded-for", "203.0.113.5"),
                ("x-forwarded-for", "198.51.100.7"),
            )
        } else {
            (
                ("x-forwarded-user", "mallory"),
                ("x-forwarded-user", "alice"),
            )
        };
        let mut tokens = Vec::new();
        for who in [mallory, mallory, alice] {
            let reply = call_on(&mut connection, who, None).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            tokens.push(sealed(&reply.json()["result"]));
        }
        let reply = call_on(&mut connection, mallory, Some(&tokens[0])).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        // Right after Mallory's share filled, on the same connection: Alice's own share.
        let reply = call_on(&mut connection, alice, Some(&tokens[2])).await;
        assert_eq!(reply.status, 200, "relayed: {relayed}: {}", reply.text());
        // Right after Alice's: Mallory's share, full.
        let over = call_on(&mut connection, mallory, Some(&tokens[1])).await;
        assert_over_share(&over, Share::SingleUseEntries, "60");
        sidecar.stop().await;
    }
}
