//! Revocation: every flow of one caller stopped now, not at token expiry.
//!
//! Invariant: a revocation records "not before now" for a digest of the principal (the
//! string a token binds) in the shared store, kept for as long as any token minted
//! before it could still open (a `requestState` or a sealed handle, whichever lives
//! longer); from then on, a retry bound to that principal whose token was minted before
//! the record is refused (`state_verified_total{result="revoked"}`), and so is a sealed
//! handle of that principal issued before it (`handles_total{result="revoked"}`).
//! The store holds digests, never principals. A record is scoped by audience
//! (`state.audience`): two services sharing a store and its prefix never revoke each
//! other's callers.
//!
//! Compatibility: versions before the audience scoping recorded a digest of the
//! principal alone. Such a record is still honoured when read (it lives no longer than
//! the longest token, so it leaves the store on its own), so a revocation made just
//! before an upgrade keeps refusing on the upgraded replicas; nothing writes one any
//! more.

use crate::store::{Store, StoreError};
use crate::token::FUTURE_SKEW_SECONDS;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Why [`Revocations::check`] did not clear a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotCleared {
    /// Its principal was revoked after it was minted.
    Revoked,
    /// The store could not say, and the failure policy refuses.
    StoreUnavailable,
}

/// Records and checks revocations in the shared store.
pub struct Revocations {
    store: Arc<Store>,
    /// How long a record must outlive the tokens it refuses.
    keep: Duration,
    /// The audience every record is scoped by.
    audience: Option<String>,
    /// The names of the principals checked lately: two SHA-256 digests are most of a
    /// check's work and depend on the principal only (and the audience, fixed here).
    names: moka::sync::Cache<Arc<str>, Arc<Names>>,
}

/// The names a principal's revocation may be recorded under.
struct Names {
    /// This version's, scoped by audience ([`Revocations::digest`]).
    scoped: String,
    /// The previous version's ([`legacy_digest`]).
    legacy: String,
}

/// Principals whose names are kept, and for how long one unused is.
const NAMES_KEPT: u64 = 4096;
const NAMES_IDLE: Duration = Duration::from_secs(600);

impl Revocations {
    /// `ttl_seconds`: the longest a token lives
    /// ([`crate::config::Config::longest_token_seconds`]); `audience`: `state.audience`.
    pub fn new(store: Arc<Store>, ttl_seconds: u64, audience: Option<String>) -> Self {
        Self {
            store,
            keep: Duration::from_secs_f64(ttl_seconds as f64 + 2.0 * FUTURE_SKEW_SECONDS),
            audience,
            names: moka::sync::Cache::builder()
                .max_capacity(NAMES_KEPT)
                .time_to_idle(NAMES_IDLE)
                .build(),
        }
    }

    /// Refuse every token of `principal` minted before now. Returns the record's time.
    pub async fn revoke(&self, principal: &str) -> Result<f64, StoreError> {
        let now = crate::token::now();
        self.store
            .revoke(&self.digest(principal), now, self.keep)
            .await?;
        Ok(now)
    }

    /// The one revocation check of a token (a `requestState` or a sealed handle, named
    /// by `what` in the log) minted at `issued_at` for `principal`: nothing to check
    /// without a principal; a store that cannot say follows the store's failure policy
    /// (`fails_open`: `single_use.on_store_error = "allow"`), as consumptions do.
    pub(crate) async fn check(
        &self,
        principal: Option<&str>,
        issued_at: f64,
        fails_open: bool,
        what: &'static str,
    ) -> Result<(), NotCleared> {
        let Some(principal) = principal else {
            return Ok(());
        };
        if !self.store.may_hold_revocations() {
            return Ok(());
        }
        match self.revoked(principal, issued_at).await {
            Ok(false) => Ok(()),
            Ok(true) => Err(NotCleared::Revoked),
            Err(error) if fails_open => {
                tracing::warn!(error = %error, what, "revocations could not be checked; let through (on_store_error = allow)");
                Ok(())
            }
            Err(error) => {
                tracing::error!(error = %error, what, "revocations could not be checked");
                Err(NotCleared::StoreUnavailable)
            }
        }
    }

    /// Whether a token of `principal` minted at `issued_at` was revoked since.
    pub(crate) async fn revoked(
        &self,
        principal: &str,
        issued_at: f64,
    ) -> Result<bool, StoreError> {
        let since = |not_before: Option<f64>| not_before.is_some_and(|at| issued_at < at);
        let names = self.names_of(principal);
        // Both names at once: the previous version's record costs no second round trip.
        let (scoped, legacy) = tokio::try_join!(
            self.store.revoked_since(&names.scoped),
            self.store.revoked_since(&names.legacy)
        )?;
        Ok(since(scoped) || since(legacy))
    }

    /// `principal`'s names, computed once while it keeps calling.
    fn names_of(&self, principal: &str) -> Arc<Names> {
        if let Some(names) = self.names.get(principal) {
            return names;
        }
        let names = Arc::new(Names {
            scoped: self.digest(principal),
            legacy: legacy_digest(principal),
        });
        self.names.insert(Arc::from(principal), names.clone());
        names
    }

    /// The name a principal's revocation is recorded under: length-prefixed parts, an
    /// absent audience distinct from an empty one.
    fn digest(&self, principal: &str) -> String {
        let mut hash = Sha256::new().chain_update(b"mcp-state-guard/revoked/v2:");
        match &self.audience {
            Some(audience) => {
                hash.update([1]);
                hash.update((audience.len() as u64).to_be_bytes());
                hash.update(audience.as_bytes());
            }
            None => hash.update([0]),
        }
        hash.update(principal.as_bytes());
        crate::text::hex_lower(&hash.finalize()[..16])
    }
}

/// What versions without the audience scoping recorded (read, never written).
fn legacy_digest(principal: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"mcp-state-guard/revoked/v1:")
        .chain_update(principal.as_bytes())
        .finalize();
    crate::text::hex_lower(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    /// Finding 6 of the second review: two services sharing a store and its prefix
    /// revoked each other's callers. A record now names its audience.
    #[tokio::test]
    async fn a_revocation_holds_only_for_its_own_audience() {
        let store = Arc::new(Store::Memory(MemoryStore::new(10)));
        let billing = Revocations::new(store.clone(), 600, Some("billing".into()));
        let search = Revocations::new(store.clone(), 600, Some("search".into()));
        let unscoped = Revocations::new(store.clone(), 600, None);
        let before = crate::token::now() - 1.0;
        billing.revoke("alice").await.unwrap();
        assert!(billing.revoked("alice", before).await.unwrap());
        assert!(!billing.revoked("bob", before).await.unwrap());
        assert!(!search.revoked("alice", before).await.unwrap());
        assert!(!unscoped.revoked("alice", before).await.unwrap());
        // Minted after the revocation: accepted.
        let after = crate::token::now() + 1.0;
        assert!(!billing.revoked("alice", after).await.unwrap());
    }

    /// A record written by a version before the scoping still refuses (until it
    /// expires), so an upgrade never reopens a revoked caller's flows.
    #[tokio::test]
    async fn a_record_of_the_previous_version_is_still_honoured() {
        let store = Arc::new(Store::Memory(MemoryStore::new(10)));
        let now = crate::token::now();
        store
            .revoke(&legacy_digest("alice"), now, Duration::from_secs(60))
            .await
            .unwrap();
        let scoped = Revocations::new(store, 600, Some("billing".into()));
        assert!(scoped.revoked("alice", now - 1.0).await.unwrap());
        assert!(!scoped.revoked("alice", now + 1.0).await.unwrap());
    }

    /// The names kept per principal are that principal's: a revocation made after a
    /// principal's names were kept refuses it, and only it, on the next check.
    #[tokio::test]
    async fn kept_names_are_each_principals_own() {
        let store = Arc::new(Store::Memory(MemoryStore::new(10)));
        let revocations = Revocations::new(store, 600, Some("billing".into()));
        let before = crate::token::now() - 1.0;
        for principal in ["alice", "bob", "alic", "alicee"] {
            assert!(!revocations.revoked(principal, before).await.unwrap());
        }
        revocations.revoke("alice").await.unwrap();
        assert!(revocations.revoked("alice", before).await.unwrap());
        for principal in ["bob", "alic", "alicee"] {
            assert!(
                !revocations.revoked(principal, before).await.unwrap(),
                "{principal}"
            );
        }
        let names = revocations.names_of("alice");
        assert_eq!(names.scoped, revocations.digest("alice"));
        assert_eq!(names.legacy, legacy_digest("alice"));
    }
}
