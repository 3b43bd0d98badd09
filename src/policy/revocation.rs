//! Revocation: every flow of one caller stopped now, not at token expiry.
//!
//! Invariant: a revocation records "not before now" for a digest of the principal (the
//! string a token binds) in the shared store, kept for as long as any token minted
//! before it could still open (a `requestState` or a sealed handle, whichever lives
//! longer); from then on, a retry bound to that principal whose token was minted before
//! the record is refused (`state_verified_total{result="revoked"}`), and so is a sealed
//! handle of that principal issued before it (`handles_total{result="revoked"}`).
//! The store holds digests, never principals.

use crate::store::{Store, StoreError};
use crate::token::FUTURE_SKEW_SECONDS;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Records and checks revocations in the shared store.
pub struct Revocations {
    store: Arc<Store>,
    /// How long a record must outlive the tokens it refuses.
    keep: Duration,
}

impl Revocations {
    /// `ttl_seconds`: the longest a token lives ([`crate::config::Config::longest_token_seconds`]).
    pub fn new(store: Arc<Store>, ttl_seconds: u64) -> Self {
        Self {
            store,
            keep: Duration::from_secs_f64(ttl_seconds as f64 + 2.0 * FUTURE_SKEW_SECONDS),
        }
    }

    /// Refuse every token of `principal` minted before now. Returns the record's time.
    pub async fn revoke(&self, principal: &str) -> Result<f64, StoreError> {
        let now = crate::token::now();
        self.store
            .revoke(&digest(principal), now, self.keep)
            .await?;
        Ok(now)
    }

    /// Whether a token of `principal` minted at `issued_at` was revoked since.
    pub async fn revoked(&self, principal: &str, issued_at: f64) -> Result<bool, StoreError> {
        Ok(self
            .store
            .revoked_since(&digest(principal))
            .await?
            .is_some_and(|not_before| issued_at < not_before))
    }
}

/// The name a principal's revocation is recorded under.
fn digest(principal: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"mcp-state-guard/revoked/v1:")
        .chain_update(principal.as_bytes())
        .finalize();
    hex::encode(&digest[..16])
}
