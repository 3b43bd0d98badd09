//! A reservation's end: the response phase tells its [`Ticket`] what the answer was, and
//! the ticket records it (a complete answer of a 2xx response) or gives the key back
//! (anything else), once, whether it finishes in the request or when it is dropped.

use super::lease::{confirm_record, report_finished};
use super::{ANSWERED, AnswerOutcome, Completed, IdempotencyResult, Pending, Ticket};
use crate::store::StoreError;
use http::StatusCode;
use std::sync::atomic::Ordering;

impl Ticket {
    /// The upstream's response head came with `status`: only a 2xx answer is recorded.
    pub(crate) fn upstream_status(&self, status: StatusCode) {
        self.status.store(status.as_u16(), Ordering::Release);
    }

    /// The response phase saw the answer to the call, its states sealed and its issued
    /// handles still raw: a complete result or a JSON-RPC error in a 2xx response is
    /// kept for recording; an `input_required` round, or any answer of an HTTP failure
    /// (5xx, 429, any status but 2xx), releases the key.
    pub(crate) fn complete(&self, answer: Completed<'_>) {
        let status = StatusCode::from_u16(self.status.load(Ordering::Acquire)).ok();
        let outcome = match answer {
            _ if !status.is_some_and(|s| s.is_success()) => {
                tracing::info!(
                    status = status.map_or(0, |s| s.as_u16()),
                    "idempotent call answered with an HTTP failure: key released, not recorded"
                );
                AnswerOutcome::Release(IdempotencyResult::UpstreamFailed)
            }
            // A round that asks (by `resultType` or by `inputRequests`, as the sealer
            // decides) is no final answer.
            Completed::Result {
                asks_for_input: true,
                ..
            } => AnswerOutcome::Release(IdempotencyResult::Released),
            Completed::Result { text, .. } => Self::stored(status, "result", text),
            Completed::Error(text) => Self::stored(status, "error", text),
        };
        *self.outcome.lock().expect("not poisoned") = Some(outcome);
    }

    /// The stored answer: the member's JSON text as the client got it, under its name.
    fn stored(status: Option<StatusCode>, member: &str, text: &str) -> AnswerOutcome {
        AnswerOutcome::Record(
            status.unwrap_or(StatusCode::OK),
            format!("{{\"{member}\":{text}}}"),
        )
    }

    /// Record (or release) now, when the answer is known; `false` while it is not (a
    /// stream still flowing: the ticket finishes when it is dropped).
    pub(crate) async fn finish_if_complete(&self) -> bool {
        let outcome = self.outcome.lock().expect("not poisoned").take();
        let Some(outcome) = outcome else {
            return false;
        };
        let pending = self.pending.lock().expect("not poisoned").take();
        if let Some(pending) = pending {
            // A task of its own: if the caller's future is dropped while the store is
            // written (the client went away), the record is still written, not stranded
            // as a reservation until its lease ends.
            let _ = tokio::spawn(pending.finish(Some(outcome))).await;
        }
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let pending = self.pending.get_mut().expect("not poisoned").take();
        let outcome = self.outcome.get_mut().expect("not poisoned").take();
        if let Some(pending) = pending
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(pending.finish(outcome));
        }
    }
}

impl Pending {
    /// Store the answer for `ttl`, or give the key back (no answer: the upstream was
    /// unreachable, timed out, the stream broke, or the answer was withheld).
    async fn finish(self, outcome: Option<AnswerOutcome>) {
        let Pending {
            store,
            metrics,
            record,
            reserved,
            digest,
            ttl,
            lease,
            max_result_bytes,
            _renewal,
            _in_flight,
        } = self;
        // No renewal may land after the record (it would not: it is conditional on
        // the reservation), nor keep running after a release.
        drop(_renewal);
        let outcome = match outcome {
            Some(AnswerOutcome::Record(_, answer)) if answer.len() > max_result_bytes => {
                tracing::warn!(
                    bytes = answer.len(),
                    "idempotent result larger than idempotency.max_result_bytes: not recorded, \
                     a repeat will be applied again"
                );
                AnswerOutcome::Release(IdempotencyResult::TooLarge)
            }
            Some(outcome) => outcome,
            None => AnswerOutcome::Release(IdempotencyResult::Released),
        };
        let (value, result) = match &outcome {
            AnswerOutcome::Record(status, answer) => (
                Some(format!("{ANSWERED}{digest}:{}:{answer}", status.as_u16())),
                IdempotencyResult::Recorded,
            ),
            AnswerOutcome::Release(result) => (None, *result),
        };
        let written = store
            .swap_record(&record, &reserved, value.as_deref(), ttl)
            .await;
        match (written, value) {
            // Written on the primary, not yet on a replica: written again in the
            // background (the client has its answer; a repeat meanwhile is in progress).
            (Err(StoreError::Unconfirmed), Some(value)) => {
                metrics.idempotency(IdempotencyResult::RecordUnreplicated);
                tokio::spawn(async move {
                    let written =
                        confirm_record(&store, &record, &reserved, &value, ttl, lease).await;
                    report_finished(&metrics, result, written);
                });
            }
            (written, _) => report_finished(&metrics, result, written),
        }
    }
}
