//! The tool features' families: handles sealed and presented (`handles_total{result}`)
//! and idempotency-key outcomes (`idempotency_total{result}`).
//!
//! Invariant: as for every family, labels come from closed sets ([`HandleResult`],
//! [`IdempotencyResult`]) and every series exists at zero from the first scrape.

use crate::registry::{Family, Label, Registry};
use crate::token::HandleReject;
use prometheus::IntCounterVec;

/// What happened to a handle (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleResult {
    /// An upstream handle was sealed on the way out.
    Sealed,
    /// A sealed handle opened for its caller and was unwrapped.
    Ok,
    /// A presented handle was refused, and why.
    Refused(HandleReject),
    /// An issuing tool's result had no handle at the pointer, or not one that could be
    /// sealed: the result is withheld.
    Missing,
}

impl Label for HandleResult {
    fn all() -> impl Iterator<Item = HandleResult> {
        [
            HandleResult::Sealed,
            HandleResult::Ok,
            HandleResult::Missing,
        ]
        .into_iter()
        .chain(HandleReject::ALL.into_iter().map(HandleResult::Refused))
    }

    fn as_str(self) -> &'static str {
        match self {
            HandleResult::Sealed => "sealed",
            HandleResult::Ok => "ok",
            HandleResult::Missing => "missing",
            HandleResult::Refused(reason) => reason.as_str(),
        }
    }

    fn index(self) -> usize {
        match self {
            HandleResult::Sealed => 0,
            HandleResult::Ok => 1,
            HandleResult::Missing => 2,
            HandleResult::Refused(reason) => 3 + Label::index(reason),
        }
    }
}

/// What an idempotency key met (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencyResult {
    /// First use: reserved and forwarded.
    Reserved,
    /// The call's result (or JSON-RPC error) was recorded.
    Recorded,
    /// A repeat after completion: the stored answer was replayed.
    Replayed,
    /// A repeat while the first was in flight.
    InProgress,
    /// The key was reused with other arguments.
    Conflict,
    /// The reservation was given back (an `input_required` round, a transport failure,
    /// an answer that could not be made safe).
    Released,
    /// The result was larger than `max_result_bytes`: delivered, not recorded.
    TooLarge,
    /// A key that is missing where required, malformed, or disagreeing with the header.
    Invalid,
    /// The store could not answer: the call was refused.
    StoreUnavailable,
    /// The reservation was gone when the answer came (its lease ended during a long
    /// call, its renewals failing): nothing recorded, and a repeat may have been
    /// applied meanwhile.
    LeaseLost,
    /// The upstream answered with an HTTP failure (a status other than 2xx): the key
    /// was released, nothing recorded.
    UpstreamFailed,
    /// The memory store's byte budget for records was spent: the call was refused.
    Full,
    /// The caller held `max_records_per_principal` records: the call was refused.
    Quota,
    /// Reserving failed after the command may have reached the store (a timeout, a
    /// broken connection: Redis may have applied it all the same): the call was
    /// refused and the reservation it may have left deleted, best effort, by a
    /// conditional delete retried until the store answers (its outcome is logged).
    ReserveUnconfirmed,
    /// The reservation was made but no replica of the store confirmed it in time
    /// (`single_use.redis_wait_ms`): given back, the call refused with 503.
    Unreplicated,
    /// The answer was recorded but no replica confirmed it in time: written again until
    /// one does (or the lease would have ended), so a failover does not lose it.
    RecordUnreplicated,
}

crate::registry::labels!(pub IdempotencyResult {
    Reserved => "reserved",
    Recorded => "recorded",
    Replayed => "replayed",
    InProgress => "in_progress",
    Conflict => "conflict",
    Released => "released",
    TooLarge => "too_large",
    Invalid => "invalid",
    StoreUnavailable => "store_unavailable",
    LeaseLost => "lease_lost",
    UpstreamFailed => "upstream_failed",
    Full => "full",
    Quota => "quota",
    ReserveUnconfirmed => "reserve_unconfirmed",
    Unreplicated => "unreplicated",
    RecordUnreplicated => "record_unreplicated",
});

/// The tool features' families; registered once, shared by [`super::Handles`] and
/// [`super::Idempotency`].
pub struct ToolMetrics {
    handles: Family<IntCounterVec, HandleResult>,
    idempotency: Family<IntCounterVec, IdempotencyResult>,
}

impl ToolMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            handles: registry.counters(
                "handles_total",
                "Handles sealed on the way out and presented on the way in, by result (refusals by reason).",
                "result",
            ),
            idempotency: registry.counters(
                "idempotency_total",
                "Idempotency-key outcomes of tools/call, by result.",
                "result",
            ),
        }
    }

    pub(crate) fn handle(&self, result: HandleResult) {
        self.handles.at(result).inc();
    }

    pub fn handle_count(&self, result: HandleResult) -> u64 {
        self.handles.at(result).get()
    }

    pub(crate) fn idempotency(&self, result: IdempotencyResult) {
        self.idempotency.at(result).inc();
    }

    pub fn idempotency_count(&self, result: IdempotencyResult) -> u64 {
        self.idempotency.at(result).get()
    }
}
