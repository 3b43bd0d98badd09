//! A store failover spends nothing twice: on a Redis Cluster of three primaries with a
//! replica each and on a Sentinel-managed primary with one replica, replication is
//! stalled and the primary killed while eight clients run flows through one sidecar;
//! afterwards no state that sidecar answered as consumed can be replayed through
//! another, the retries it refused for want of a replica (503) complete when retried,
//! each idempotent write is applied once, and a revocation made before the failover
//! still holds. A third sidecar that does not wait for replicas
//! (`redis_wait_replicas = 0`) runs beside them and its states *are* replayed: the
//! failover really lost writes (a marker key written last is missing too). And a single
//! Redis without replicas works with the defaults.

use crate::support::fake::{FakeUpstream, Recorded, Reply, complete, sealed};
use crate::support::http::{Reply as ClientReply, mcp_headers, meta, send};
use crate::support::redis::RedisServer;
use crate::support::redis_ha::{
    ReplicatedCluster, SentinelGroup, holds, kill_and_resume, replica_ports, stall,
};
use crate::support::sidecar::{Sidecar, config};
use http::Method;
use mcp_state_guard::facade::config::{Config, PrincipalSource, SingleUseStore, WaitReplicas};
use mcp_state_guard::facade::policy::Consumption;
use mcp_state_guard::facade::store::StoreKind;
use mcp_state_guard::facade::tools::IdempotencyResult;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f";
const ADMIN: &str = "failover-admin-secret-0123";
const T: Duration = Duration::from_secs(30);
const CLIENTS: usize = 8;

/// Single-use `approve_payment` flows; `book_order` writes, counted per idempotency key.
fn upstream(applied: Arc<Mutex<HashMap<String, usize>>>) -> impl Fn(&Recorded) -> Reply {
    move |request| {
        let message = request.json();
        let id = message["id"].clone();
        let params = &message["params"];
        if params["name"] == "book_order" {
            let key = params["idempotencyKey"].as_str().unwrap_or_default();
            *applied.lock().unwrap().entry(key.to_owned()).or_default() += 1;
            return Reply::json(complete(id, "booked").to_string());
        }
        let answer = match params["requestState"].as_str() {
            None => crate::support::fake::input_required(id, json!("PLAIN")),
            Some(state) => complete(id, &format!("done with {state}")),
        };
        Reply::json(answer.to_string())
    }
}

fn sidecar_config(fake: &FakeUpstream, url: &str, admin: &std::path::Path) -> Config {
    let mut c = config(&fake.base_url());
    c.single_use.store = SingleUseStore::Redis;
    c.single_use.redis_url = Some(url.to_owned());
    c.single_use.tools = vec!["approve_*".into()];
    c.idempotency.tools = vec!["book_*".into()];
    c.principal.source = PrincipalSource::Header;
    c.admin.token_file = Some(admin.to_owned());
    c
}

async fn post(url: &str, user: &str, name: &str, params: Value) -> ClientReply {
    let mut params = params;
    params["name"] = json!(name);
    params["_meta"] = meta();
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let mut headers = mcp_headers("tools/call", Some(name));
    headers.push(("x-forwarded-user".into(), user.into()));
    let body = serde_json::to_vec(&message).unwrap();
    send(Method::POST, url, &headers, body, T).await
}

async fn mint(url: &str, user: &str) -> Option<String> {
    let reply = post(url, user, "approve_payment", json!({})).await;
    (reply.status == 200).then(|| sealed(&reply.json()["result"]))
}

async fn retry(url: &str, user: &str, token: &str) -> ClientReply {
    let answers = json!({"region": {"action": "accept", "content": {"region": "eu"}}});
    let params = json!({"requestState": token, "inputResponses": answers});
    post(url, user, "approve_payment", params).await
}

async fn book(url: &str, user: &str, key: &str) -> ClientReply {
    post(url, user, "book_order", json!({"idempotencyKey": key})).await
}

fn unconfirmed(reply: &ClientReply) -> bool {
    reply.status == 503
        && reply.headers.contains_key("retry-after")
        && reply.json()["error"]["data"]["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("_store_unconfirmed"))
}

/// What the clients of one sidecar saw.
#[derive(Default)]
struct Tally {
    /// (user, token) of retries answered 200: consumed.
    consumed: Vec<(String, String)>,
    /// (user, token) of retries refused with 503 for want of a replica.
    refused: Vec<(String, String)>,
    /// Retries refused otherwise (a store too slow to answer during the stall).
    other: usize,
    /// Idempotency keys with what their first call got.
    writes: Vec<(String, String, u16)>,
}

/// `clients` clients running flows (and every third round an idempotent write) through
/// `url` until `stop`.
async fn load(url: String, clients: usize, name: String, stop: Arc<AtomicBool>) -> Tally {
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (url, stop, name) = (url.clone(), stop.clone(), name.clone());
            tokio::spawn(async move {
                let user = format!("{name}-{client}");
                let mut tally = Tally::default();
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    if round % 3 == 0 {
                        let key = format!("{user}-{round}");
                        let status = book(&url, &user, &key).await.status.as_u16();
                        tally.writes.push((user.clone(), key, status));
                        continue;
                    }
                    let Some(token) = mint(&url, &user).await else {
                        tally.other += 1;
                        continue;
                    };
                    let reply = retry(&url, &user, &token).await;
                    match reply.status.as_u16() {
                        200 => tally.consumed.push((user.clone(), token)),
                        _ if unconfirmed(&reply) => tally.refused.push((user.clone(), token)),
                        _ => tally.other += 1,
                    }
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

impl Tally {
    fn extend(&mut self, other: Tally) {
        self.consumed.extend(other.consumed);
        self.refused.extend(other.refused);
        self.other += other.other;
        self.writes.extend(other.writes);
    }
}

/// How many of `states` complete when presented again through `url` (eight at once).
async fn replays_completed(url: &str, states: &[(String, String)]) -> usize {
    let chunks: Vec<Vec<(String, String)>> = states
        .chunks(states.len().div_ceil(CLIENTS).max(1))
        .map(<[_]>::to_vec)
        .collect();
    let tasks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let url = url.to_owned();
            tokio::spawn(async move {
                let mut completed = 0;
                for (user, token) in chunk {
                    // A 503 (a write no replica confirmed: a sidecar that has not yet
                    // asked the promoted primary how many replicas it has) is tried again.
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let mut reply = retry(&url, &user, &token).await;
                    while unconfirmed(&reply) && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        reply = retry(&url, &user, &token).await;
                    }
                    if reply.status == 200 {
                        completed += 1;
                    } else {
                        assert_eq!(reply.status, 400, "{}", reply.text());
                    }
                }
                completed
            })
        })
        .collect();
    let mut completed = 0;
    for task in tasks {
        completed += task.await.unwrap();
    }
    completed
}

/// Send until the answer is not a 503 (or 409: a write still recorded), honouring
/// `Retry-After`, for at most 20 s.
async fn settled(send: impl AsyncFn() -> ClientReply) -> ClientReply {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = send().await;
        if !matches!(reply.status.as_u16(), 503 | 409) || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn admin_revoke(sidecar: &Sidecar, principal: &str) -> ClientReply {
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("authorization".to_owned(), format!("Bearer {ADMIN}")),
    ];
    let url = format!("http://{}/admin/revoke", sidecar.admin_addr);
    let body = serde_json::to_vec(&json!({"principal": principal})).unwrap();
    send(Method::POST, &url, &headers, body, T).await
}

async fn ready(sidecar: &Sidecar) -> bool {
    let url = format!("http://{}/readyz", sidecar.admin_addr);
    send(Method::GET, &url, &[], Vec::new(), T).await.status == 200
}

/// The store under test: how to stall the primary holding the revocation, and to fail
/// it over.
trait Failover: Send + Sync + 'static {
    fn url(&self) -> String;
    /// Stop replication of the primary holding the revocation behind a filler; the
    /// marker key written last.
    fn stall(&mut self) -> String;
    /// Kill that primary, resume its replica, wait until it is promoted; whether the
    /// promoted replica holds `marker`.
    fn fail_over(&mut self, marker: &str) -> bool;
}

struct Cluster {
    nodes: ReplicatedCluster,
    /// The primary stalled and killed: the one holding the revocation.
    primary: usize,
}

impl Failover for Cluster {
    fn url(&self) -> String {
        self.nodes.url()
    }

    fn stall(&mut self) -> String {
        self.primary = self
            .nodes
            .primaries()
            .into_iter()
            .find(|&p| {
                let keys: Vec<String> = self.nodes.nodes[p]
                    .query(redis::cmd("KEYS").arg("mcp-state-guard:r:*"))
                    .unwrap();
                !keys.is_empty()
            })
            .expect("a primary holds the revocation");
        let replica = self.nodes.replica_of(self.primary);
        let tag = self.nodes.tag_on(self.primary);
        stall(
            &self.nodes.nodes[self.primary],
            &self.nodes.nodes[replica],
            &tag,
        )
    }

    fn fail_over(&mut self, marker: &str) -> bool {
        let replica = self.nodes.replica_of(self.primary);
        self.nodes.nodes[self.primary].stop();
        self.nodes.nodes[replica].signal("CONT");
        self.nodes.wait_promoted(replica, self.primary);
        holds(&self.nodes.nodes[replica], marker)
    }
}

struct Sentinels(SentinelGroup);

impl Failover for Sentinels {
    fn url(&self) -> String {
        self.0.url()
    }

    fn stall(&mut self) -> String {
        stall(&self.0.primary, &self.0.replica, "s")
    }

    fn fail_over(&mut self, marker: &str) -> bool {
        let SentinelGroup {
            primary, replica, ..
        } = &mut self.0;
        kill_and_resume(primary, replica);
        self.0.wait_promoted();
        holds(&self.0.replica, marker)
    }
}

/// The whole run: flows before, during and after a stalled replication and the kill of
/// its primary, then every check; the counts go to stderr for the record.
async fn failover_loses_nothing(store: impl Failover, setup: &str) {
    let store = Arc::new(Mutex::new(store));
    let url = store.lock().unwrap().url();
    let applied = Arc::new(Mutex::new(HashMap::new()));
    let fake = FakeUpstream::start(upstream(applied.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin-token");
    std::fs::write(&admin, format!("{ADMIN}\n")).unwrap();
    let a = Sidecar::with_keys(sidecar_config(&fake, &url, &admin), &[KEY], "svc").await;
    let b = Sidecar::with_keys(sidecar_config(&fake, &url, &admin), &[KEY], "svc").await;
    let mut unsafe_config = sidecar_config(&fake, &url, &admin);
    unsafe_config.single_use.redis_wait_replicas = WaitReplicas::Count(0);
    let control = Sidecar::with_keys(unsafe_config, &[KEY], "svc").await;

    // A revocation made (and confirmed) before anything goes wrong.
    let mallory = mint(&a.mcp_url(), "mallory").await.unwrap();
    let revoked = admin_revoke(&a, "mallory").await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());

    // Two seconds of load on a healthy store, then (the clients paused, so every write
    // of theirs lands behind the filler) the replica stalled, then three seconds more;
    // the sidecar stops being ready meanwhile.
    let mut tally = Tally::default();
    let mut control_tally = Tally::default();
    let mut seen_not_ready = false;
    let mut marker = String::new();
    for (phase, seconds) in [("before", 2), ("stalled", 3)] {
        if phase == "stalled" {
            let stalled = store.clone();
            marker = tokio::task::spawn_blocking(move || stalled.lock().unwrap().stall())
                .await
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let loads = (
            tokio::spawn(load(a.mcp_url(), CLIENTS, phase.to_owned(), stop.clone())),
            tokio::spawn(load(
                control.mcp_url(),
                2,
                format!("control-{phase}"),
                stop.clone(),
            )),
        );
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(seconds) {
            seen_not_ready |= !ready(&a).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        stop.store(true, Ordering::Relaxed);
        tally.extend(loads.0.await.unwrap());
        control_tally.extend(loads.1.await.unwrap());
    }
    let failed = store.clone();
    let marker_survived =
        tokio::task::spawn_blocking(move || failed.lock().unwrap().fail_over(&marker))
            .await
            .unwrap();
    assert!(
        !marker_survived,
        "{setup}: the promoted replica must lack the last writes"
    );
    assert!(
        seen_not_ready,
        "{setup}: /readyz must fail while writes go unconfirmed"
    );

    // No state the first sidecar answered as consumed completes again.
    let replayed = replays_completed(&b.mcp_url(), &tally.consumed).await;
    // The control sidecar's do: the failover lost consumptions that were not waited for.
    let control_replayed = replays_completed(&b.mcp_url(), &control_tally.consumed).await;
    // Each retry refused for want of a replica completes now (once).
    for (user, token) in &tally.refused {
        let reply = settled(async || retry(&b.mcp_url(), user, token).await).await;
        assert_eq!(reply.status, 200, "{setup}: {}", reply.text());
    }
    // Every write is applied exactly once, repeats answered from the record.
    for (user, key, _) in &tally.writes {
        let reply = settled(async || book(&b.mcp_url(), user, key).await).await;
        assert_eq!(reply.status, 200, "{setup}: {}", reply.text());
    }
    let applied = applied.lock().unwrap().clone();
    let twice: Vec<_> = tally
        .writes
        .iter()
        .filter(|(_, key, _)| applied.get(key) != Some(&1))
        .collect();
    // The revocation holds on the promoted replica.
    let refused_before = b.metrics().path.verified_count("revoked");
    let reply = retry(&b.mcp_url(), "mallory", &mallory).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        b.metrics().path.verified_count("revoked"),
        refused_before + 1
    );

    let metrics = &a.metrics().policy;
    let writes_refused = tally.writes.iter().filter(|w| w.2 == 503).count();
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for (_, _, status) in &tally.writes {
        *statuses.entry(*status).or_default() += 1;
    }
    eprintln!("{setup}: idempotent writes by first status: {statuses:?}");
    eprintln!(
        "{setup} failover: {} consumed (each confirmed by a replica), {} refused for want of a \
         replica ({} unconfirmed in the metrics), {} other refusals, replays completed: {} of {}; \
         without waiting: {} of {} replays completed; {} idempotent writes ({} refused 503), \
         applied more than once: {}",
        tally.consumed.len(),
        tally.refused.len(),
        metrics.consumption_count(StoreKind::Redis, Consumption::Unconfirmed),
        tally.other,
        replayed,
        tally.consumed.len(),
        control_replayed,
        control_tally.consumed.len(),
        tally.writes.len(),
        writes_refused,
        twice.len(),
    );
    assert_eq!(replayed, 0, "{setup}: a consumed state was spent twice");
    assert!(
        control_replayed > 0,
        "{setup}: the failover lost no consumption: a vacuous run"
    );
    assert!(
        !tally.refused.is_empty(),
        "{setup}: no retry waited on the stalled replica"
    );
    assert!(
        tally.consumed.len() > 20,
        "{setup}: too little load to say anything"
    );
    assert!(
        twice.is_empty(),
        "{setup}: writes applied other than once: {twice:?}"
    );
    assert!(
        a.metrics()
            .tools
            .idempotency_count(IdempotencyResult::Recorded)
            > 0
    );
    for sidecar in [a, b, control] {
        sidecar.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_failover_spends_no_state_twice() {
    let nodes = tokio::task::spawn_blocking(ReplicatedCluster::start)
        .await
        .unwrap();
    failover_loses_nothing(Cluster { nodes, primary: 0 }, "cluster").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_failover_spends_no_state_twice() {
    let group = tokio::task::spawn_blocking(SentinelGroup::start)
        .await
        .unwrap();
    assert_eq!(replica_ports(&group.primary).unwrap(), [group.replica.port]);
    failover_loses_nothing(Sentinels(group), "sentinel").await;
}

/// The defaults on a Redis without replicas: nothing waits, everything works.
#[tokio::test(flavor = "multi_thread")]
async fn a_single_redis_without_replicas_works_with_the_defaults() {
    let redis = RedisServer::start();
    let applied = Arc::new(Mutex::new(HashMap::new()));
    let fake = FakeUpstream::start(upstream(applied.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin-token");
    std::fs::write(&admin, format!("{ADMIN}\n")).unwrap();
    let c = sidecar_config(&fake, &redis.url(), &admin);
    assert_eq!(c.single_use.redis_wait_replicas, WaitReplicas::Auto);
    let sidecar = Sidecar::with_keys(c, &[KEY], "svc").await;
    let started = Instant::now();
    for _ in 0..20 {
        let token = mint(&sidecar.mcp_url(), "alice").await.unwrap();
        assert_eq!(retry(&sidecar.mcp_url(), "alice", &token).await.status, 200);
        assert_eq!(retry(&sidecar.mcp_url(), "alice", &token).await.status, 400);
    }
    // Nothing waited for a replica that is not there (`redis_wait_ms` is 100 ms).
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(book(&sidecar.mcp_url(), "alice", "k1").await.status, 200);
    assert_eq!(book(&sidecar.mcp_url(), "alice", "k1").await.status, 200);
    assert_eq!(applied.lock().unwrap()["k1"], 1);
    assert_eq!(admin_revoke(&sidecar, "bob").await.status, 200);
    assert!(ready(&sidecar).await);
    let policy = &sidecar.metrics().policy;
    assert_eq!(
        policy.consumption_count(StoreKind::Redis, Consumption::Consumed),
        20
    );
    assert_eq!(
        policy.consumption_count(StoreKind::Redis, Consumption::Unconfirmed),
        0
    );
    sidecar.stop().await;
}
