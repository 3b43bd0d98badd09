//! Fair shares (the second outside review, findings 4, 5, 6 and 9): one caller cannot
//! fill the single-use store, spend the idempotency budget or hold every connection
//! slot for the others; a full store is refused under `on_store_error = "allow"` too
//! (a real `redis-server` out of memory included) and shows in `/readyz`'s body without
//! failing readiness; revocations of two services sharing a Redis stay their own.
//! Each refusal is a 429 with `Retry-After` naming the share, and nothing of it reaches
//! the upstream.

use super::operations::{exchange, upstream};
use super::single_use::asking;
use crate::support::fake::{FakeUpstream, sealed};
use crate::support::http::{Reply as ClientReply, mcp_headers, meta, send};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::redis::RedisServer;
use crate::support::sidecar::{Sidecar, config};
use http::Method;
use mcp_state_guard::facade::config::{Config, OnStoreError, PrincipalSource, SingleUseStore};
use mcp_state_guard::facade::error::{Resource, Share};
use mcp_state_guard::facade::policy::Consumption;
use mcp_state_guard::facade::server::Listener;
use mcp_state_guard::facade::store::StoreKind;
use mcp_state_guard::facade::tools::IdempotencyResult;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "5e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f";
const T: Duration = Duration::from_secs(20);
pub(super) const TOOL: &str = "approve_payment";

/// A single-use tool, callers told apart by the identity header.
pub(super) fn single_use(upstream: &str) -> Config {
    let mut c = config(upstream);
    c.principal.source = PrincipalSource::Header;
    c.single_use.tools = vec![TOOL.into()];
    c
}

/// A call of the single-use tool by `who`, a retry with `token` when given.
async fn call(url: &str, who: &str, token: Option<&str>) -> ClientReply {
    call_with(url, ("x-forwarded-user", who), token).await
}

/// A call of the single-use tool, a retry of `token` when given.
pub(super) fn call_message(token: Option<&str>) -> Value {
    let mut params = json!({"name": TOOL, "_meta": meta()});
    if let Some(token) = token {
        params["requestState"] = json!(token);
        params["inputResponses"] =
            json!({"region": {"action": "accept", "content": {"region": "eu"}}});
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
}

/// A call of the single-use tool with one more header (who calls, or for whom).
async fn call_with(url: &str, (name, value): (&str, &str), token: Option<&str>) -> ClientReply {
    let message = call_message(token);
    let mut headers = mcp_headers("tools/call", Some(TOOL));
    headers.push((name.into(), value.into()));
    send(
        Method::POST,
        url,
        &headers,
        serde_json::to_vec(&message).unwrap(),
        T,
    )
    .await
}

async fn mint(url: &str, who: &str) -> String {
    let reply = call(url, who, None).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    sealed(&reply.json()["result"])
}

/// A 429 for `share`, with its `Retry-After`.
pub(super) fn assert_over_share(reply: &ClientReply, share: Share, retry_after: &str) {
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert_eq!(reply.headers["retry-after"], retry_after);
    assert_eq!(reply.json()["error"]["data"]["share"], share.as_str());
}

async fn admin_get(sidecar: &Sidecar, path: &str) -> ClientReply {
    let url = format!("http://{}{path}", sidecar.admin_addr);
    send(Method::GET, &url, &[], "", T).await
}

/// A call of the single-use tool relayed by a trusted front proxy for the clients of
/// `chain` (its `X-Forwarded-For`), no principal source.
async fn relayed(url: &str, chain: &str, token: Option<&str>) -> ClientReply {
    call_with(url, ("x-forwarded-for", chain), token).await
}

/// Third review, finding 5: without a principal the shares were keyed on the TCP peer,
/// so behind an ingress every client was one caller and one client's retries gave
/// everyone 429. Behind a trusted proxy the owner is the client its chain reports (the
/// first untrusted address from the right); what a client writes further left is not
/// believed, so it cannot take another client's share either.
#[tokio::test(flavor = "multi_thread")]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_share() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = config(&fake.base_url());
    c.single_use.tools = vec![TOOL.into()];
    c.single_use.memory_max_entries = 8;
    c.single_use.max_entries_per_principal = Some(2);
    c.principal.trusted_proxies = vec!["127.0.0.1/32".into()];
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let mint_for = |chain: &'static str| {
        let url = url.clone();
        async move {
            let reply = relayed(&url, chain, None).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            sealed(&reply.json()["result"])
        }
    };
    let (a, b) = ("203.0.113.5", "198.51.100.7");
    for _ in 0..2 {
        let token = mint_for(a).await;
        assert_eq!(relayed(&url, a, Some(&token)).await.status, 200);
    }
    let token = mint_for(a).await;
    let over = relayed(&url, a, Some(&token)).await;
    assert_over_share(&over, Share::SingleUseEntries, "60");
    // A spoofed address left of the real one changes nothing: still A's share.
    let token = mint_for("198.51.100.7, 203.0.113.5").await;
    let spoofed = relayed(&url, "198.51.100.7, 203.0.113.5", Some(&token)).await;
    assert_over_share(&spoofed, Share::SingleUseEntries, "60");
    // Another client behind the same proxy spends its own share.
    let token = mint_for(b).await;
    let reply = relayed(&url, b, Some(&token)).await;
    assert_eq!(reply.status, 200, "B is unaffected: {}", reply.text());
    sidecar.stop().await;
}

/// Finding 4: once `memory_max_entries` was reached by one caller, every tenant's
/// single-use retry was refused. Each caller now holds at most its share: past it only
/// that caller gets 429 (its state not spent, nothing forwarded), and another caller's
/// retry goes through.
#[tokio::test(flavor = "multi_thread")]
async fn one_caller_cannot_fill_the_single_use_store_for_another() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = single_use(&fake.base_url());
    c.single_use.memory_max_entries = 4;
    c.single_use.max_entries_per_principal = Some(2);
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        tokens.push(mint(&url, "mallory").await);
    }
    for token in &tokens[..2] {
        assert_eq!(call(&url, "mallory", Some(token)).await.status, 200);
    }
    let forwarded = fake.count();
    let over = call(&url, "mallory", Some(&tokens[2])).await;
    assert_over_share(&over, Share::SingleUseEntries, "60");
    assert_eq!(
        over.json()["error"]["data"]["type"],
        "single_use_quota_exceeded"
    );
    assert_eq!(fake.count(), forwarded, "nothing of it was forwarded");
    let alice = mint(&url, "alice").await;
    let reply = call(&url, "alice", Some(&alice)).await;
    assert_eq!(reply.status, 200, "alice is unaffected: {}", reply.text());
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .refusals
            .quota_refusal_count(Share::SingleUseEntries),
        1
    );
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Quota),
        1
    );
    sidecar.stop().await;
}

/// Finding 4, its second half: under `on_store_error = "allow"` a full store let
/// single-use states be replayed at will, and `/readyz` said nothing. A full store is
/// now refused whatever the failure policy (503, `Retry-After`, the state unspent), is
/// named in `/readyz`'s body and `store_fill_ratio`, and readiness stays green.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_store_is_refused_under_allow_and_named_by_readyz_without_failing_it() {
    let fake = FakeUpstream::start(asking).await;
    let mut c = single_use(&fake.base_url());
    c.single_use.memory_max_entries = 2;
    c.single_use.max_entries_per_principal = Some(1);
    c.single_use.on_store_error = OnStoreError::Allow;
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    for who in ["mallory", "trudy"] {
        let token = mint(&url, who).await;
        assert_eq!(call(&url, who, Some(&token)).await.status, 200);
    }
    let carol = mint(&url, "carol").await;
    let forwarded = fake.count();
    for _ in 0..2 {
        let full = call(&url, "carol", Some(&carol)).await;
        assert_eq!(full.status, 503, "{}", full.text());
        assert_eq!(full.headers["retry-after"], "60");
        assert_eq!(
            full.json()["error"]["data"]["type"],
            "single_use_store_full"
        );
    }
    assert_eq!(fake.count(), forwarded, "not let through, not replayable");
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .policy
            .consumption_count(StoreKind::Memory, Consumption::Full),
        2
    );
    let ready = admin_get(&sidecar, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert!(
        ready
            .text()
            .contains("memory store full: single_use entries"),
        "{}",
        ready.text()
    );
    assert!(sidecar.running().readiness().get());
    let scraped = admin_get(&sidecar, "/metrics").await.text();
    assert!(
        scraped.contains("mcp_state_guard_store_fill_ratio{resource=\"single_use\"} 1"),
        "{scraped}"
    );
    assert_eq!(metrics.refusals.store_fill_ratio(Resource::SingleUse), 1.0);
    sidecar.stop().await;
}

/// A Redis out of memory (`maxmemory`, `noeviction`) answered `OOM`, which was taken
/// for an unreachable store: `allow` let the retry through unrecorded. It is full.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_out_of_memory_is_full_not_unreachable() {
    let redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let mut c = single_use(&fake.base_url());
    c.single_use.store = SingleUseStore::Redis;
    c.single_use.redis_url = Some(redis.url());
    c.single_use.on_store_error = OnStoreError::Allow;
    let sidecar = Sidecar::with_keys(c, &[KEY], "svc").await;
    let url = sidecar.mcp_url();
    let token = mint(&url, "alice").await;
    assert_eq!(
        redis
            .command("CONFIG SET maxmemory-policy noeviction")
            .as_deref(),
        Some("+OK")
    );
    // Below what an empty server already uses: every write is refused with OOM.
    assert_eq!(
        redis.command("CONFIG SET maxmemory 1").as_deref(),
        Some("+OK")
    );
    let forwarded = fake.count();
    let full = call(&url, "alice", Some(&token)).await;
    assert_eq!(full.status, 503, "{}", full.text());
    assert_eq!(
        full.json()["error"]["data"]["type"],
        "single_use_store_full"
    );
    assert_eq!(fake.count(), forwarded);
    assert_eq!(
        sidecar
            .metrics()
            .policy
            .consumption_count(StoreKind::Redis, Consumption::Full),
        1
    );
    // Room again: the same state is still good, once.
    assert_eq!(
        redis.command("CONFIG SET maxmemory 0").as_deref(),
        Some("+OK")
    );
    assert_eq!(call(&url, "alice", Some(&token)).await.status, 200);
    assert_eq!(call(&url, "alice", Some(&token)).await.status, 400);
    sidecar.stop().await;
}

fn import_server() -> LegacyServer {
    LegacyServer::start_script("tests/py/import_server.py", Mode::Json)
}

fn idempotent(upstream: &str) -> Config {
    let mut c = config(upstream);
    c.principal.source = PrincipalSource::Header;
    c.idempotency.tools = vec!["append_*".into()];
    c
}

async fn start_import(url: &str, who: &str) -> String {
    let reply =
        super::handles::call_with(url, Some(who), "start_import", json!({}), json!({}), &[]).await;
    super::handles::structured(&reply)["importId"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn append(url: &str, who: &str, import: &str, key: &str, delay_ms: u64) -> ClientReply {
    super::idempotency::append_slow(url, who, import, json!([1]), key, delay_ms).await
}

fn appends(upstream: &LegacyServer, import: &str) -> Value {
    upstream.debug_json("GET", "/debug/counts")[import]["appends"].clone()
}

/// Finding 5, first half: 260 slow concurrent calls of one caller (each reservation
/// charged `max_result_bytes`) spent the global budget. A caller has at most
/// `max_in_flight_per_principal` calls in flight; past it 429 (`Retry-After: 1`), and
/// another caller's write goes through meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn one_callers_slow_calls_do_not_starve_another_callers_writes() {
    let upstream = import_server();
    let mut c = idempotent(&upstream.base_url());
    c.idempotency.max_in_flight_per_principal = 4;
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "mallory").await;
    // Four writes that take 8 s each at the upstream: all four reserved means all four
    // in flight, for seconds to come.
    let slow: Vec<_> = (0..4)
        .map(|n| {
            let (url, import) = (url.clone(), import.clone());
            tokio::spawn(async move {
                append(&url, "mallory", &import, &format!("slow-{n}"), 8000).await
            })
        })
        .collect();
    let metrics = sidecar.metrics().clone();
    let deadline = Instant::now() + Duration::from_secs(6);
    while metrics.tools.idempotency_count(IdempotencyResult::Reserved) < 4 {
        assert!(
            Instant::now() < deadline,
            "the four writes were not all reserved"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let forwarded = appends(&upstream, &import);
    let over = append(&url, "mallory", &import, "one-more", 0).await;
    assert_eq!(appends(&upstream, &import), forwarded, "nothing forwarded");
    assert_over_share(&over, Share::IdempotencyInFlight, "1");
    let alices = start_import(&url, "alice").await;
    let started = Instant::now();
    let reply = append(&url, "alice", &alices, "a1", 0).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not held behind mallory's calls"
    );
    for call in slow {
        assert_eq!(call.await.unwrap().status, 200);
    }
    assert_eq!(appends(&upstream, &alices), json!(1));
    assert!(
        sidecar
            .metrics()
            .refusals
            .quota_refusal_count(Share::IdempotencyInFlight)
            >= 1
    );
    sidecar.stop().await;
}

/// Finding 5, second half: about 300 large recorded answers of one caller, kept for
/// 24 h, made every other caller's writes answer 503. A caller's records are charged
/// against its own byte share: past it 429, and the budget left serves the others.
#[tokio::test(flavor = "multi_thread")]
async fn one_callers_stored_answers_do_not_spend_another_callers_budget() {
    let upstream = import_server();
    let mut c = idempotent(&upstream.base_url());
    c.idempotency.max_result_bytes = 1000;
    c.idempotency.memory_max_bytes = 24_000;
    c.idempotency.max_bytes_per_principal = Some(6000);
    let sidecar = Sidecar::start(c).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "mallory").await;
    let mut written = 0;
    let over = loop {
        let reply = append(&url, "mallory", &import, &format!("k{written}"), 0).await;
        if reply.status != 200 {
            break reply;
        }
        written += 1;
        assert!(written < 30, "mallory was never refused");
    };
    assert_over_share(&over, Share::IdempotencyBytes, "60");
    assert_eq!(
        appends(&upstream, &import),
        json!(written),
        "nothing forwarded"
    );
    for who in ["alice", "bob"] {
        let theirs = start_import(&url, who).await;
        let reply = append(&url, who, &theirs, "k0", 0).await;
        assert_eq!(reply.status, 200, "{who}: {}", reply.text());
    }
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .quota_refusal_count(Share::IdempotencyBytes),
        1
    );
    sidecar.stop().await;
}

/// Finding 6: two services sharing a Redis and its key prefix revoked each other's
/// callers. A revocation names its audience.
#[tokio::test(flavor = "multi_thread")]
async fn a_revocation_stops_only_its_own_services_flows() {
    const SECRET: &str = "admin-secret-0123456789";
    let redis = RedisServer::start();
    let fake = FakeUpstream::start(asking).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, SECRET).unwrap();
    let service = |audience: &'static str| {
        let mut c = single_use(&fake.base_url());
        c.single_use.store = SingleUseStore::Redis;
        c.single_use.redis_url = Some(redis.url());
        c.admin.token_file = Some(token_file.clone());
        async move { Sidecar::with_keys(c, &[KEY], audience).await }
    };
    let billing = service("billing").await;
    let search = service("search").await;
    let at_billing = mint(&billing.mcp_url(), "alice").await;
    let at_search = mint(&search.mcp_url(), "alice").await;
    let revoked = send(
        Method::POST,
        &format!("http://{}/admin/revoke", billing.admin_addr),
        &[
            ("authorization".into(), format!("Bearer {SECRET}")),
            ("content-type".into(), "application/json".into()),
        ],
        r#"{"principal":"alice"}"#,
        T,
    )
    .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());
    assert_eq!(
        call(&billing.mcp_url(), "alice", Some(&at_billing))
            .await
            .status,
        400
    );
    assert_eq!(billing.metrics().path.verified_count("revoked"), 1);
    let reply = call(&search.mcp_url(), "alice", Some(&at_search)).await;
    assert_eq!(
        reply.status,
        200,
        "search's alice is not revoked: {}",
        reply.text()
    );
    assert_eq!(search.metrics().path.verified_count("revoked"), 0);
    billing.stop().await;
    search.stop().await;
}

/// Finding 9: idle keep-alive connections held every `max_connections` slot for
/// `client_idle_ms` (75 s). At the limit, the connection idle the longest is closed to
/// make room, and a new one is served at once.
#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_give_their_slots_to_new_ones() {
    let fake = upstream().await;
    let mut c = config(&fake.base_url());
    c.limits.max_connections = 2;
    c.limits.max_connections_per_peer = Some(2);
    let sidecar = Sidecar::start(c).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
        assert!(
            exchange(&mut stream, sidecar.addr)
                .await
                .starts_with("HTTP/1.1 200")
        );
        idle.push(stream);
    }
    let started = Instant::now();
    let mut third = TcpStream::connect(sidecar.addr).await.unwrap();
    assert!(
        exchange(&mut third, sidecar.addr)
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "waited {:?} for an idle slot",
        started.elapsed()
    );
    // The first (idle the longest) was the one closed.
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), idle[0].read(&mut buffer)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert!(
        sidecar
            .metrics()
            .connections
            .connections_open(Listener::Proxy)
            <= 2
    );
    sidecar.stop().await;
}

/// Finding 9, per address: one address holds at most `max_connections_per_peer`
/// connections; past it (nothing of its own idle) a new one is answered 429 and closed,
/// while another address is still served, and a trusted front proxy is exempt.
#[tokio::test(flavor = "multi_thread")]
async fn one_address_holds_at_most_its_share_of_connections() {
    let fake = upstream().await;
    let mut c = config(&fake.base_url());
    c.limits.max_connections = 8;
    c.limits.max_connections_per_peer = Some(2);
    let sidecar = Sidecar::start(c).await;
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
        // A request head on its way: busy, not idle.
        stream.write_all(b"POST /mcp HTTP/1.1\r\n").await.unwrap();
        busy.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = TcpStream::connect(sidecar.addr).await.unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\n\r\n",
        sidecar.addr
    );
    over.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), over.read_to_end(&mut answer))
        .await
        .expect("answered and closed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("connection_quota_exceeded"), "{answer}");
    assert_eq!(
        sidecar
            .metrics()
            .refusals
            .quota_refusal_count(Share::Connections),
        1
    );
    assert_eq!(
        sidecar
            .metrics()
            .connections
            .connections_open(Listener::Proxy),
        2
    );
    drop(busy);
    sidecar.stop().await;

    // The same from a trusted front proxy: it carries many clients, so no share.
    let mut c = config(&fake.base_url());
    c.limits.max_connections = 8;
    c.limits.max_connections_per_peer = Some(1);
    c.principal.trusted_proxies = vec!["127.0.0.1".into()];
    let sidecar = Sidecar::start(c).await;
    let mut first = TcpStream::connect(sidecar.addr).await.unwrap();
    first.write_all(b"POST /mcp HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut second = TcpStream::connect(sidecar.addr).await.unwrap();
    assert!(
        exchange(&mut second, sidecar.addr)
            .await
            .starts_with("HTTP/1.1 200")
    );
    drop(first);
    sidecar.stop().await;
}
