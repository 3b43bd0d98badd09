//! A reservation's lease in the store: renewed while its call is in progress, and
//! withdrawn when reserving it timed out but the store may apply it all the same.
//! Only the value this replica reserved (its random nonce) is ever renewed or deleted.

use crate::store::{Store, StoreError};
use crate::tools::metrics::{IdempotencyResult, ToolMetrics};
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

/// After a reservation timed out: withdraw it ([`Store::withdraw_record`]: removed if
/// the store applied it after all, and fenced either way, so that it cannot land later,
/// on another connection than this command's, and hold the key for a lease with nobody
/// to release it), trying until the store answers or the lease would have freed the key
/// anyway. Only our value (its random nonce) is deleted or fenced. A withdrawal that
/// itself timed out may still be applied, so `removed = false` at the end can also mean
/// an earlier attempt removed it.
pub(super) async fn withdraw(store: Arc<Store>, record: String, reserved: String, lease: Duration) {
    let give_up = tokio::time::Instant::now() + lease;
    while tokio::time::Instant::now() < give_up {
        match store.withdraw_record(&record, &reserved, lease).await {
            Ok(removed) => {
                tracing::info!(
                    removed,
                    "idempotency reservation that timed out withdrawn (removed: the store had applied it)"
                );
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    tracing::warn!(
        "idempotency reservation that timed out could not be withdrawn: if the store applies it, it ends with its lease"
    );
}

/// An answer recorded on the primary that no replica confirmed: write it again (the
/// store accepts the same answer over itself) until a replica confirms it, the
/// reservation is gone, or a lease has passed (after which the reservation it replaced
/// would have ended anyway). A failover in between leaves the reservation on the
/// promoted replica, which the next attempt turns into the answer.
pub(super) async fn confirm_record(
    store: &Store,
    record: &str,
    reserved: &str,
    value: &str,
    ttl: Duration,
    lease: Duration,
) -> Result<bool, StoreError> {
    let give_up = tokio::time::Instant::now() + lease;
    let mut last = Err(StoreError::Unconfirmed);
    while tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(250)).await;
        last = store.swap_record(record, reserved, Some(value), ttl).await;
        match last {
            Ok(_) => return last,
            Err(_) => continue,
        }
    }
    tracing::error!(
        "idempotency record not confirmed by a replica within a lease: a failover may lose \
         it, and a repeat be applied again"
    );
    last
}

/// Count (and log) how writing a finished call's record or release went.
pub(super) fn report_finished(
    metrics: &ToolMetrics,
    result: IdempotencyResult,
    written: Result<bool, StoreError>,
) {
    match written {
        Ok(true) => metrics.idempotency(result),
        Ok(false) => {
            metrics.idempotency(IdempotencyResult::LeaseLost);
            tracing::warn!(
                "idempotency reservation lost before the answer came (its lease ended): \
                 not recorded; a repeat may have been applied meanwhile"
            );
        }
        Err(error) => {
            metrics.idempotency(IdempotencyResult::StoreUnavailable);
            tracing::error!(
                error = %error,
                "idempotency record could not be written; the key stays reserved until its lease ends"
            );
        }
    }
}
