//! Single use: which targets' states may be consumed only once, and the consumption of
//! a verified retry's token in the shared [`Store`].
//!
//! Invariant: a retry is forwarded only after its token's consumption was recorded as
//! fresh when the token says so (`su`, sealed at mint time) **or** the current policy
//! says so, so a policy rollout never opens a window in either direction. A replay gets
//! the frozen error; a store that cannot answer refuses (or, with
//! `on_store_error = "allow"`, lets through, counted and logged); a store that is full,
//! or a caller holding its whole share of it, is refused whatever the failure policy
//! (letting a full store's retries through would let whoever fills it replay at will),
//! and the state is not spent. A consumption no replica confirmed (Redis `WAIT`, see
//! [`crate::store::redis`]) is released by the store and the retry refused with 503
//! (under `on_store_error = "allow"` it goes through unrecorded, counted and logged, as
//! when the store cannot answer). A consumption is released only when the upstream
//! provably never received the request, and only by the holder of its random mark. The
//! policy and `on_store_error` are live: a reload replaces them for the next request.

use super::metrics::{Consumption, PolicyMetrics};
use crate::config::{OnStoreError, SingleUseConfig};
use crate::store::{Consumed, ConsumptionId, Mark, Owner, Store, StoreError, StoreKind};
use crate::token::{FUTURE_SKEW_SECONDS, Opened, Reject};
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which targets are single-use: names and URIs with `*` matching any run of characters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SingleUsePolicy {
    tools: Vec<String>,
    prompts: Vec<String>,
    resources: Vec<String>,
    default: bool,
}

impl SingleUsePolicy {
    pub(crate) fn from_config(config: &SingleUseConfig) -> Self {
        Self {
            tools: config.tools.clone(),
            prompts: config.prompts.clone(),
            resources: config.resources.clone(),
            default: config.default,
        }
    }

    /// Whether states of `target` under `method` are single-use. Methods without a
    /// target list (`tools/list`, say) follow `default`.
    pub(crate) fn applies(&self, method: &str, target: &str) -> bool {
        let list = match method {
            "tools/call" => &self.tools,
            "prompts/get" => &self.prompts,
            "resources/read" => &self.resources,
            _ => return self.default,
        };
        self.default || list.iter().any(|pattern| glob_match(pattern, target))
    }
}

use crate::glob::glob_match;

/// Why a verified retry's consumption was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotConsumed {
    /// The frozen state error with this reason (a replay, a store that cannot answer).
    Refused(Reject),
    /// The caller holds its share of consumed ids (`max_entries_per_principal`).
    Share,
    /// The store is full (`memory_max_entries`, or Redis out of memory).
    Full,
    /// No replica confirmed the consumption in time: released, the state unspent.
    Unconfirmed,
}

/// A recorded consumption, released if the upstream never saw the request.
pub(crate) struct Claim {
    id: ConsumptionId,
    /// The random value recorded with it: only this claim releases it.
    mark: Mark,
}

/// The single-use phase: the live policy, the store, and what to do when it fails.
pub(crate) struct SingleUse {
    policy: ArcSwap<SingleUsePolicy>,
    store: Arc<Store>,
    /// `on_store_error = "allow"`; replaced by a reload.
    fails_open: AtomicBool,
    metrics: Arc<PolicyMetrics>,
    /// When a full memory store was last logged (ms since `started`), to log once a minute.
    full_logged_ms: AtomicU64,
    started: Instant,
}

impl SingleUse {
    pub(crate) fn new(
        config: &SingleUseConfig,
        store: Arc<Store>,
        metrics: Arc<PolicyMetrics>,
    ) -> Self {
        Self {
            policy: ArcSwap::from_pointee(SingleUsePolicy::from_config(config)),
            store,
            fails_open: AtomicBool::new(config.on_store_error == OnStoreError::Allow),
            metrics,
            full_logged_ms: AtomicU64::new(u64::MAX),
            started: Instant::now(),
        }
    }

    /// The policy now (sealing asks it when minting).
    pub(crate) fn policy(&self) -> Arc<SingleUsePolicy> {
        self.policy.load_full()
    }

    /// Apply a new policy without a restart.
    pub(crate) fn replace_policy(&self, policy: SingleUsePolicy) {
        self.policy.store(Arc::new(policy));
    }

    /// Apply a new `on_store_error` without a restart.
    pub(crate) fn replace_on_store_error(&self, on_store_error: OnStoreError) {
        self.fails_open
            .store(on_store_error == OnStoreError::Allow, Ordering::Relaxed);
    }

    fn on_store_error(&self) -> OnStoreError {
        if self.fails_open.load(Ordering::Relaxed) {
            OnStoreError::Allow
        } else {
            OnStoreError::Reject
        }
    }

    /// Whether a store failure lets requests through (`on_store_error = "allow"`).
    pub(crate) fn fails_open(&self) -> bool {
        self.on_store_error() == OnStoreError::Allow
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The shared store itself, for the other features that record in it.
    pub(crate) fn shared_store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// Whether a fail-closed store is the reason the sidecar cannot serve single-use
    /// retries now (readiness): it does not answer, or its writes have kept going
    /// unconfirmed by replicas.
    pub(crate) async fn blocking_outage(&self) -> bool {
        self.on_store_error() == OnStoreError::Reject && self.store.ping().await.is_err()
    }

    /// Consume `opened` if it is single-use, held by `owner`. `Ok(None)`: nothing to
    /// consume (or the store could not be reached under `allow`); `Err`: refuse the
    /// retry.
    /// `owner`: whose share the consumption is charged to, asked only when a state is
    /// consumed.
    pub(crate) async fn consume<'o>(
        &self,
        opened: &Opened<'_>,
        method: &str,
        target: &str,
        owner: impl FnOnce() -> &'o Owner,
    ) -> Result<Option<Claim>, NotConsumed> {
        if !opened.single_use && !self.policy.load().applies(method, target) {
            return Ok(None);
        }
        let id = ConsumptionId(match self.store.kind() {
            // Every replica and version names it alike.
            StoreKind::Redis => opened.consumption_id(),
            // Only this process reads it: the key id and nonce as the token carries them.
            StoreKind::Memory => opened.id,
        });
        // Remembered while the token could still open anywhere: its expiry, as a replica
        // whose clock runs behind ours by the tolerated skew sees it.
        let remaining = opened.expires_at - crate::token::now() + FUTURE_SKEW_SECONDS;
        let ttl = Duration::from_secs_f64(remaining.clamp(1.0, 86_400.0 * 2.0));
        // Names this consumption so that only its owner releases it: unguessable, not a
        // key, so the thread-local CSPRNG (no system call per retry).
        let mark = Mark(crate::token::keyring::fast_random_bytes::<16>());
        let started = Instant::now();
        let result = self.store.consume(id, mark, ttl, owner()).await;
        self.metrics
            .observe_store(self.store.kind(), started.elapsed().as_secs_f64());
        let kind = self.store.kind();
        match result {
            Ok(Consumed::Fresh) => {
                self.metrics.consumption(kind, Consumption::Consumed);
                Ok(Some(Claim { id, mark }))
            }
            Ok(Consumed::Replayed) => {
                self.metrics.consumption(kind, Consumption::Replayed);
                Err(NotConsumed::Refused(Reject::Replayed))
            }
            Err(StoreError::OwnerFull | StoreError::OwnerBytesFull) => {
                self.metrics.consumption(kind, Consumption::Quota);
                tracing::warn!(
                    store = kind.as_str(),
                    "single-use retry refused: the caller holds single_use.max_entries_per_principal consumed states"
                );
                Err(NotConsumed::Share)
            }
            Err(StoreError::Full) => {
                // Never let through, whatever `on_store_error` says: that policy is for a
                // store that cannot be reached, and a full one is filled by callers.
                self.metrics.consumption(kind, Consumption::Full);
                self.log_failure(StoreError::Full);
                Err(NotConsumed::Full)
            }
            Err(StoreError::Unconfirmed) => {
                self.metrics.consumption(kind, Consumption::Unconfirmed);
                match self.on_store_error() {
                    OnStoreError::Reject => {
                        tracing::warn!(
                            store = kind.as_str(),
                            "single-use retry refused: no replica confirmed its consumption in \
                             time (single_use.redis_wait_ms); released, the state stays spendable"
                        );
                        Err(NotConsumed::Unconfirmed)
                    }
                    OnStoreError::Allow => {
                        tracing::warn!(
                            store = kind.as_str(),
                            "single-use state let through unconfirmed by a replica (on_store_error = allow)"
                        );
                        Ok(None)
                    }
                }
            }
            Err(error) => {
                self.metrics
                    .consumption(kind, Consumption::StoreUnavailable);
                self.log_failure(error);
                match self.on_store_error() {
                    OnStoreError::Reject => Err(NotConsumed::Refused(Reject::StoreUnavailable)),
                    OnStoreError::Allow => {
                        tracing::warn!(
                            store = kind.as_str(),
                            error = %error,
                            "single-use state let through unrecorded (on_store_error = allow)"
                        );
                        Ok(None)
                    }
                }
            }
        }
    }

    /// The upstream provably never received the request: the user may try again.
    pub(crate) async fn release(&self, claim: Claim) {
        let kind = self.store.kind();
        match self.store.release(claim.id, claim.mark).await {
            Ok(()) => {
                self.metrics.consumption(kind, Consumption::Released);
                tracing::info!(
                    store = kind.as_str(),
                    "single-use state released: the upstream never received the retry"
                );
            }
            Err(error) => tracing::warn!(
                store = kind.as_str(),
                error = %error,
                "single-use state could not be released; it stays consumed"
            ),
        }
    }

    fn log_failure(&self, error: StoreError) {
        if error != StoreError::Full {
            tracing::error!(store = self.store.kind().as_str(), error = %error, "single-use store failed");
            return;
        }
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.full_logged_ms.load(Ordering::Relaxed);
        if (last == u64::MAX || now.saturating_sub(last) >= 60_000)
            && self
                .full_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            match self.store.kind() {
                StoreKind::Memory => tracing::error!(
                    "single-use memory store full (single_use.memory_max_entries): refusing new \
                     single-use retries until ids expire; raise the bound or use redis"
                ),
                crate::store::StoreKind::Redis => tracing::error!(
                    "single-use Redis store out of memory (maxmemory, noeviction): refusing new \
                     single-use retries until keys expire; raise maxmemory"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{KeyRing, RequestBinding, SealOptions, StateSealer};

    /// The memory store, which only this process reads, records a consumption under the
    /// token's key id and nonce: no digest per retry (Redis is given the digest every
    /// replica computes, `token::tests::consumption`).
    #[tokio::test]
    async fn the_memory_store_records_a_consumption_under_the_tokens_own_id() {
        let store = Arc::new(Store::Memory(crate::store::memory::MemoryStore::new(100)));
        let config = SingleUseConfig {
            tools: vec!["provision".into()],
            ..SingleUseConfig::default()
        };
        let registry = crate::registry::Registry::new();
        let metrics = Arc::new(PolicyMetrics::register(&registry));
        let single_use = SingleUse::new(&config, store.clone(), metrics);
        let ring = KeyRing::from_secrets(&["0123456789abcdef0123456789abcdef-test"], "t").unwrap();
        let sealer = StateSealer::new(ring, None, 600);
        let params = serde_json::json!({"name": "provision", "arguments": {}});
        let binding = RequestBinding::of("tools/call", params.as_object()).unwrap();
        let token = sealer.seal_at(crate::token::now(), "st", &binding, &SealOptions::default());
        let opened = sealer.open(&token, &binding, None).unwrap();
        let owner = Owner::of(Some("alice"), None);
        let claim = single_use
            .consume(&opened, "tools/call", "provision", || &owner)
            .await;
        assert!(matches!(claim, Ok(Some(_))));
        let Store::Memory(memory) = &*store else {
            unreachable!()
        };
        let again = memory.consume(ConsumptionId(opened.id), Duration::from_secs(60), "bob");
        assert!(matches!(again, Ok(Consumed::Replayed)), "{again:?}");
    }

    #[test]
    fn policy_by_method_and_default() {
        let policy = SingleUsePolicy {
            tools: vec!["approve_*".into()],
            prompts: vec!["confirm".into()],
            resources: vec!["file:///once/*".into()],
            default: false,
        };
        assert!(policy.applies("tools/call", "approve_payment"));
        assert!(!policy.applies("tools/call", "search"));
        assert!(!policy.applies("prompts/get", "approve_payment"));
        assert!(policy.applies("prompts/get", "confirm"));
        assert!(policy.applies("resources/read", "file:///once/a"));
        assert!(!policy.applies("tools/list", ""));
        let all = SingleUsePolicy {
            default: true,
            ..policy
        };
        assert!(all.applies("tools/call", "search"));
        assert!(all.applies("tools/list", ""));
    }
}
