//! How long an idempotency key is held, and where: a record expires after
//! `ttl_seconds`; a call longer than its lease keeps its key (memory and Redis); a
//! reservation Redis applied after its deadline is deleted by its owner, and one that
//! had not landed when it was withdrawn cannot land after; the memory
//! store's records are bounded per caller and in bytes without evicting one.

use super::{append, append_slow, idempotent_config, replayed, result_of, rows, settled};
use super::{start_import, start_upstream};
use crate::cases::handles::structured;
use crate::support::legacy::Mode;
use crate::support::redis::RedisServer;
use crate::support::sidecar::Sidecar;
use mcp_state_guard::facade::config::SingleUseStore;
use mcp_state_guard::facade::store::{Store, StoreError};
use mcp_state_guard::facade::tools::IdempotencyResult;
use serde_json::json;
use std::time::Duration;

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

/// A call longer than its lease keeps its key: the forwarding sidecar renews the
/// reservation while the answer streams, so every repeat meanwhile is told to wait,
/// the write is applied once, and its answer is recorded and replayed.
async fn a_long_call_outlives_its_lease(redis: Option<&RedisServer>) {
    let upstream = start_upstream(Mode::Sse);
    let mut config = idempotent_config(&upstream.base_url());
    config.idempotency.lease_ms = 1000;
    if let Some(redis) = redis {
        config.single_use.store = SingleUseStore::Redis;
        config.single_use.redis_url = Some(redis.url());
    }
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    let slow = {
        let (url, import) = (url.clone(), import.clone());
        tokio::spawn(
            async move { append_slow(&url, "alice", &import, json!([1]), "long", 3500).await },
        )
    };
    // Three leases long: without renewal the key would be free again after the first.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waiting = append_slow(&url, "alice", &import, json!([1]), "long", 3500).await;
        assert_eq!(waiting.status, 409, "{}", waiting.text());
        assert_eq!(
            waiting.json()["error"]["data"]["type"],
            json!("idempotency_key_in_progress")
        );
    }
    let first = slow.await.unwrap();
    assert_eq!(structured(&first)["total"], json!(1));
    let again = settled(|| append_slow(&url, "alice", &import, json!([1]), "long", 3500)).await;
    assert!(replayed(&again), "{}", again.text());
    assert_eq!(result_of(&again), result_of(&first));
    assert_eq!(rows(&upstream, &import), (json!(1), json!(1)));
    let metrics = sidecar.metrics();
    assert_eq!(
        metrics
            .tools
            .idempotency_count(IdempotencyResult::LeaseLost),
        0
    );
    assert_eq!(
        metrics.tools.idempotency_count(IdempotencyResult::Recorded),
        1
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_long_call_outlives_its_lease_memory() {
    a_long_call_outlives_its_lease(None).await;
}

#[tokio::test]
async fn a_long_call_outlives_its_lease_redis() {
    let redis = RedisServer::start();
    a_long_call_outlives_its_lease(Some(&redis)).await;
}

/// Redis paused past the store deadline while a key is reserved: the call is refused
/// (nothing forwarded), and the reservation Redis applies once it resumes is deleted
/// by its owner, so a retry is applied at once instead of waiting out the lease.
#[tokio::test]
async fn a_reservation_that_timed_out_is_deleted_when_redis_resumes() {
    let redis = RedisServer::start();
    let upstream = start_upstream(Mode::Json);
    let mut config = idempotent_config(&upstream.base_url());
    config.single_use.store = SingleUseStore::Redis;
    config.single_use.redis_url = Some(redis.url());
    config.single_use.redis_timeout_ms = 300;
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    assert_eq!(
        redis.command("CLIENT PAUSE 1500 ALL").as_deref(),
        Some("+OK")
    );
    let paused = std::time::Instant::now();
    let refused = append(&url, "alice", &import, json!([1]), "paused").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(
        sidecar
            .metrics()
            .tools
            .idempotency_count(IdempotencyResult::ReserveUnconfirmed),
        1
    );
    tokio::time::sleep(Duration::from_millis(1700).saturating_sub(paused.elapsed())).await;
    // The lease (30 s by default) would hold the key far longer than `settled` waits.
    let retry = settled(|| append(&url, "alice", &import, json!([1]), "paused")).await;
    assert_eq!(structured(&retry)["total"], json!(1), "{}", retry.text());
    assert!(!replayed(&retry));
    assert_eq!(rows(&upstream, &import), (json!(1), json!(1)));
    sidecar.stop().await;
}

/// A reservation whose reply never came is withdrawn, and the withdrawal may reach Redis
/// first (the reservation waits behind a paused server, or travels on another of the
/// pool's connections): it then leaves a fence, so the reservation that lands late makes
/// nothing and the key is free at once, instead of held for a lease by nobody. Another
/// value's reservation replaces a fence; a reservation that landed is replaced by its
/// fence (a copy of it sent twice lands on it too); another value's is not touched; a
/// fence lasts a lease.
#[tokio::test]
async fn a_withdrawn_reservation_cannot_land_after_its_withdrawal() {
    let redis = RedisServer::start();
    let mut config = idempotent_config("http://127.0.0.1:9");
    config.single_use.store = SingleUseStore::Redis;
    config.single_use.redis_url = Some(redis.url());
    // Every command answered, however loaded the machine: this test is about order.
    config.single_use.redis_timeout_ms = 5000;
    let Ok(Store::Redis(store)) = Store::from_config(&config) else {
        panic!("a Redis store");
    };
    let lease = Duration::from_secs(30);

    assert_eq!(
        store.withdraw_record("k1", "p:late", lease).await,
        Ok(false)
    );
    assert_eq!(
        store.reserve_record("k1", "p:late", lease).await,
        Err(StoreError::Unavailable),
        "the late reservation meets its fence"
    );
    assert_eq!(
        store.reserve_record("k1", "p:next", lease).await,
        Ok(None),
        "the key is free at once"
    );

    assert_eq!(store.withdraw_record("k2", "p:a", lease).await, Ok(false));
    assert_eq!(store.reserve_record("k2", "p:b", lease).await, Ok(None));
    assert_eq!(
        store.reserve_record("k2", "p:a", lease).await,
        Ok(Some("p:b".to_owned()))
    );

    assert_eq!(store.reserve_record("k3", "p:c", lease).await, Ok(None));
    assert_eq!(store.withdraw_record("k3", "p:c", lease).await, Ok(true));
    assert_eq!(
        store.reserve_record("k3", "p:c", lease).await,
        Err(StoreError::Unavailable),
        "the same reservation sent twice lands on its fence too"
    );
    assert_eq!(store.reserve_record("k3", "p:d", lease).await, Ok(None));
    assert_eq!(store.withdraw_record("k3", "p:c", lease).await, Ok(false));
    assert_eq!(
        store.reserve_record("k3", "p:e", lease).await,
        Ok(Some("p:d".to_owned()))
    );

    let short = Duration::from_millis(200);
    assert_eq!(store.withdraw_record("k4", "p:f", short).await, Ok(false));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.reserve_record("k4", "p:f", lease).await, Ok(None));
}

/// The memory store's records are bounded per caller and in bytes: past either bound a
/// new key is refused with its own error (nothing forwarded), and no record is evicted
/// to make room (every earlier one still replays).
#[tokio::test]
async fn memory_records_are_bounded_without_evicting_one() {
    let upstream = start_upstream(Mode::Json);
    let mut config = idempotent_config(&upstream.base_url());
    config.idempotency.max_records_per_principal = 2;
    config.idempotency.max_result_bytes = 1000;
    config.idempotency.memory_max_bytes = 6000;
    let sidecar = Sidecar::start(config).await;
    let url = sidecar.mcp_url();
    let import = start_import(&url, "alice").await;
    for key in ["q1", "q2"] {
        assert!(!replayed(
            &append(&url, "alice", &import, json!([1]), key).await
        ));
    }
    let over = append(&url, "alice", &import, json!([1]), "q3").await;
    assert_eq!(over.status, 429, "{}", over.text());
    assert_eq!(
        over.json()["error"]["data"]["type"],
        json!("idempotency_quota_exceeded")
    );
    assert_eq!(over.headers["retry-after"], "60");
    assert_eq!(rows(&upstream, &import), (json!(2), json!(2)));
    // Other callers fill the byte budget; one is refused, none is evicted.
    let mut written = vec![("alice", "q1"), ("alice", "q2")];
    let full = loop {
        let who = ["bob", "carol", "dave", "erin", "frank", "grace", "heidi"][written.len() - 2];
        let reply = append(&url, who, &import, json!([1]), "b").await;
        if reply.status != 200 {
            break reply;
        }
        written.push((who, "b"));
        assert!(written.len() < 8, "the byte budget was never reached");
    };
    assert_eq!(full.status, 503, "{}", full.text());
    assert_eq!(
        full.json()["error"]["data"]["type"],
        json!("idempotency_store_full")
    );
    let applied = written.len();
    assert_eq!(
        rows(&upstream, &import).1,
        json!(applied),
        "nothing forwarded"
    );
    for (who, key) in written {
        let again = append(&url, who, &import, json!([1]), key).await;
        assert!(replayed(&again), "{who}/{key} evicted: {}", again.text());
    }
    let metrics = sidecar.metrics();
    assert_eq!(metrics.tools.idempotency_count(IdempotencyResult::Quota), 1);
    assert_eq!(metrics.tools.idempotency_count(IdempotencyResult::Full), 1);
    sidecar.stop().await;
}
