//! A reservation's lease in the store: renewed while its call is in progress, and
//! released when reserving it timed out but the store may have applied it all the same.
//! Only the value this replica reserved (its random nonce) is ever renewed or deleted.

use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Keep a reservation while its answer is in progress: every third of the lease, extend
/// it to a whole lease from now, only while it still holds our value. Runs until
/// aborted (the ticket finished or was dropped) or the reservation is no longer ours.
pub(super) async fn renew(store: Arc<Store>, record: String, reserved: String, lease: Duration) {
    let period = lease / 3;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.renew_record(&record, &reserved, lease).await {
            Ok(true) => {}
            Ok(false) => {
                // Counted as `lease_lost` when the answer comes and cannot be recorded.
                tracing::warn!(
                    "idempotency reservation gone while its call is in progress (its lease \
                     ended before a renewal reached the store): a repeat may be applied"
                );
                return;
            }
            // The next period tries again; two more failures in a row lose the lease.
            Err(error) => tracing::warn!(
                store = store.kind().as_str(),
                error = %error,
                "idempotency reservation could not be renewed"
            ),
        }
    }
}

/// After a reservation timed out: delete it if the store applied it after all (only
/// while it holds our value), trying until the store answers or the lease would have
/// freed the key anyway. A delete that itself timed out may still be applied (Redis
/// runs one connection's commands in order), so `removed = false` at the end can also
/// mean an earlier attempt removed it.
pub(super) async fn release_phantom(
    store: Arc<Store>,
    record: String,
    reserved: String,
    lease: Duration,
) {
    let give_up = tokio::time::Instant::now() + lease;
    while tokio::time::Instant::now() < give_up {
        match store.swap_record(&record, &reserved, None, lease).await {
            Ok(removed) => {
                tracing::info!(
                    removed,
                    "idempotency reservation that timed out cleaned up (removed: the store had applied it)"
                );
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    tracing::warn!(
        "idempotency reservation that timed out could not be cleaned up: it ends with its lease"
    );
}
