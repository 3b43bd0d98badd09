//! Writes applied once: a `tools/call` of an idempotent tool carrying an idempotency key
//! is recorded in the shared [`Store`] under (caller, audience, tool, key) with its
//! argument digest; a repeat is answered from the record instead of reaching the upstream.
//!
//! Invariant: of any number of calls with one record key, on any replica sharing the
//! store, exactly one is forwarded until its reservation is released (an `input_required`
//! round, an HTTP failure of the upstream, a body that is no complete answer, an answer
//! that could not be made safe or stored) or its record expires; every other call gets
//! the stored answer (same arguments, completed), `idempotency_key_in_progress` (still in
//! flight) or `idempotency_key_conflict` (other arguments). A reservation no replica of
//! the store confirmed is given back and the call refused with 503; an answer no replica
//! confirmed is written again until one does (see [`crate::store::redis`]). A
//! reservation is owned (a
//! random nonce in its value: only its owner renews, records or deletes it) and renewed
//! every third of `idempotency.lease_ms` while its answer is in progress, so it outlives
//! a long stream but not the replica that held it. A store that cannot answer refuses
//! the call: a write is never forwarded unrecorded.
//!
//! Fairness: one caller (a [`crate::store::Owner`]) has at most
//! `idempotency.max_in_flight_per_principal` reservations in flight on this replica and,
//! in the memory store, at most its share of the records and of their bytes; past any
//! share it gets 429 and `Retry-After`, and nothing is forwarded or reserved.
//!
//! A record holds the upstream's answer as the client got it except for the handles an
//! issuing tool returns, which it holds raw: each replay seals them afresh for the
//! replaying caller (the same principal, by the record's key), so a replay never hands
//! out a handle that expired while the record lived.

use super::metrics::{IdempotencyResult, ToolMetrics};
use crate::auth::Caller;
use crate::config::IdempotencyConfig;
use crate::error::RefusalMetrics;
use crate::error::{ProxyError, Resource, Share};
use crate::glob::glob_match;
use crate::jsonrpc::{Params, ParamsField};
use crate::store::{Owner, Store, StoreError};
use crate::token::RequestBinding;
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::AtomicU16;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::AbortHandle;

mod lease;
mod ticket;

use lease::{renew, withdraw};

/// The header a client may carry the key in instead of `params.idempotencyKey`.
pub(crate) const HEADER: &str = "idempotency-key";
/// The header on a replayed answer.
pub(crate) const REPLAYED_HEADER: &str = "idempotent-replayed";
const MAX_KEY_CHARS: usize = 255;

/// The idempotency phase.
pub(crate) struct Idempotency {
    config: IdempotencyConfig,
    audience: Option<String>,
    store: Arc<Store>,
    metrics: Arc<ToolMetrics>,
    /// Where a caller over its share is counted.
    refusals: Arc<RefusalMetrics>,
    /// How long a reservation holds unless renewed (`idempotency.lease_ms`).
    lease: Duration,
    /// Reservations in flight on this replica, per owner.
    in_flight: Arc<Mutex<HashMap<Owner, usize>>>,
}

/// One reservation in flight of its owner, given back when dropped (the ticket finished
/// or was dropped, or the key turned out to be held already).
struct InFlight {
    owners: Arc<Mutex<HashMap<Owner, usize>>>,
    owner: Owner,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut owners = self.owners.lock().expect("not poisoned");
        if let Some(held) = owners.get_mut(&self.owner) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                owners.remove(&self.owner);
            }
        }
    }
}

/// What admission decided.
pub(crate) enum Admission {
    /// Not an idempotent call (no key, or a tool not listed): forward as is.
    Untracked,
    /// Reserved: forward, then record what comes back through the ticket.
    Reserved(Ticket),
    /// Completed before with the same arguments: the stored answer.
    Replay(Replay),
}

/// A recorded answer, replayed.
pub(crate) struct Replay {
    /// The upstream's HTTP status when it answered.
    pub(crate) status: StatusCode,
    /// The stored `result` or `error` member.
    pub(crate) answer: Map<String, Value>,
    /// Whether the issuing tool's handles in it are raw (sealed at replay), as this
    /// version records them; a record of an older version holds them sealed already.
    pub(crate) raw_handles: bool,
}

/// A reservation in flight, completed by the response phase or released when dropped.
pub(crate) struct Ticket {
    pending: Mutex<Option<Pending>>,
    outcome: Mutex<Option<AnswerOutcome>>,
    /// The upstream's HTTP status (0 until its response head came).
    status: AtomicU16,
}

struct Pending {
    store: Arc<Store>,
    metrics: Arc<ToolMetrics>,
    record: String,
    /// The exact value reserved (its nonce makes it ours): only it is renewed,
    /// replaced or deleted.
    reserved: String,
    digest: String,
    ttl: Duration,
    /// The reservation's lease: how long an unconfirmed record is written again.
    lease: Duration,
    max_result_bytes: usize,
    /// The task renewing the lease; stopped when the ticket finishes or is dropped.
    _renewal: Renewal,
    /// The owner's share of reservations in flight, held until then too.
    _in_flight: InFlight,
}

/// Aborts the renewal task when dropped.
struct Renewal(AbortHandle);

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum AnswerOutcome {
    /// The stored JSON of a complete answer (`{"result":…}` or `{"error":…}`) and the
    /// HTTP status it came with.
    Record(StatusCode, String),
    /// Give the key back.
    Release(IdempotencyResult),
}

/// The value prefixes: a reservation, a record of this version, one of the previous
/// (its handles sealed, its status 200).
const RESERVED: &str = "p:";
const ANSWERED: &str = "a:";
const ANSWERED_V1: &str = "d:";

impl Idempotency {
    pub(crate) fn new(
        config: &IdempotencyConfig,
        audience: Option<String>,
        store: Arc<Store>,
        metrics: Arc<ToolMetrics>,
        refusals: Arc<RefusalMetrics>,
    ) -> Self {
        Self {
            config: config.clone(),
            audience,
            store,
            metrics,
            refusals,
            lease: Duration::from_millis(config.lease_ms),
            in_flight: Arc::default(),
        }
    }

    /// Take one of `owner`'s reservations in flight, or `None` at its share.
    fn take_in_flight(&self, owner: &Owner) -> Option<InFlight> {
        let mut owners = self.in_flight.lock().expect("not poisoned");
        let held = owners.entry(owner.clone()).or_insert(0);
        if *held >= self.config.max_in_flight_per_principal {
            return None;
        }
        *held += 1;
        Some(InFlight {
            owners: self.in_flight.clone(),
            owner: owner.clone(),
        })
    }

    fn refuse(&self, detail: &'static str) -> ProxyError {
        self.metrics.idempotency(IdempotencyResult::Invalid);
        ProxyError::IdempotencyKey(detail)
    }

    /// Read, check and reserve the key of a call of `tool` (arguments as the upstream
    /// will receive them; `bound`: the request's binding when it was computed over these
    /// very arguments, whose digest is then taken), or answer it from the store.
    pub(crate) async fn admit(
        &self,
        tool: &str,
        params: &mut Params<'_>,
        headers: &mut HeaderMap,
        caller: &Caller,
        bound: Option<&RequestBinding>,
    ) -> Result<Admission, ProxyError> {
        let (path, principal) = (caller.path(), caller.principal());
        let Some(key) = self.read_key(tool, params, headers)? else {
            return Ok(Admission::Untracked);
        };
        let owner = caller.owner();
        if self.config.strip_key {
            params.remove(ParamsField::IdempotencyKey);
            headers.remove(HEADER);
        }
        let arguments = params.get(ParamsField::Arguments);
        let digest = match bound.and_then(|b| b.digest_of_arguments(arguments)) {
            Some(digest) => digest.to_owned(),
            None => crate::token::args_digest(arguments)
                .map_err(|_| ProxyError::Parse(crate::jsonrpc::ParseError::Params))?,
        };
        let record = self.record_name(principal, path, tool, &key);
        // Before the store is asked: a caller at its share of calls in flight holds
        // nothing more (its own repeats included: they would wait on its own calls).
        let Some(in_flight) = self.take_in_flight(owner) else {
            return Err(self.over_share(Share::IdempotencyInFlight));
        };
        let reserved = format!(
            "{RESERVED}{digest}:{}",
            crate::text::hex_lower(&crate::token::keyring::fast_random_bytes::<16>())
        );
        let Some(held) = self.reserve(&record, &reserved, owner).await? else {
            self.metrics.idempotency(IdempotencyResult::Reserved);
            let ticket = self.ticket(record, reserved, digest, in_flight);
            return Ok(Admission::Reserved(ticket));
        };
        self.answer_held(&held, &digest)
    }

    /// Whether any tool is listed (`tools` or `require_key`).
    pub(crate) fn configured(&self) -> bool {
        !(self.config.tools.is_empty() && self.config.require_key.is_empty())
    }

    /// The call's idempotency key, checked: `None` if the call is not tracked (a tool
    /// not listed, or no key where none is required). The key may come in the header or
    /// in `params.idempotencyKey`, or in both if they agree.
    fn read_key(
        &self,
        tool: &str,
        params: &Params<'_>,
        headers: &HeaderMap,
    ) -> Result<Option<String>, ProxyError> {
        let required = self.config.require_key.iter().any(|g| glob_match(g, tool));
        let listed = required || self.config.tools.iter().any(|g| glob_match(g, tool));
        if !listed {
            return Ok(None);
        }
        let mut from_header = headers.get_all(HEADER).iter();
        let header = match (from_header.next(), from_header.next()) {
            (None, _) => None,
            (Some(value), None) => Some(
                value
                    .to_str()
                    .map_err(|_| self.refuse("header not visible ASCII"))?
                    .to_owned(),
            ),
            (Some(_), Some(_)) => return Err(self.refuse("header repeated")),
        };
        let param = match params.get(ParamsField::IdempotencyKey) {
            None | Some(Value::Null) => None,
            Some(Value::String(key)) => Some(key.clone()),
            Some(_) => return Err(self.refuse("params key not a string")),
        };
        let key = match (param, header) {
            (Some(a), Some(b)) if a != b => return Err(self.refuse("header and params differ")),
            (Some(key), _) | (None, Some(key)) => key,
            (None, None) if required => return Err(self.refuse("key required")),
            (None, None) => return Ok(None),
        };
        let chars = key.chars().count();
        if !(1..=MAX_KEY_CHARS).contains(&chars) || key.chars().any(char::is_control) {
            return Err(self.refuse("not 1 to 255 printable characters"));
        }
        Ok(Some(key))
    }

    /// Reserve `record` with the value `reserved` unless it is held: `None` when it is
    /// now ours, the value held otherwise. A store that cannot answer, or is full, or
    /// holds the owner's share already, refuses the call.
    async fn reserve(
        &self,
        record: &str,
        reserved: &str,
        owner: &Owner,
    ) -> Result<Option<String>, ProxyError> {
        match self
            .store
            .reserve_record(
                record,
                reserved,
                self.lease,
                owner,
                self.config.max_result_bytes as u64,
            )
            .await
        {
            Ok(held) => Ok(held),
            Err(error @ (StoreError::Timeout | StoreError::Unavailable)) => {
                // The command may have reached Redis and been applied all the same, or
                // still be on its way: a key reserved by nobody until its lease ends.
                // Withdrawn (ours is the only value it can hold).
                self.metrics
                    .idempotency(IdempotencyResult::ReserveUnconfirmed);
                tokio::spawn(withdraw(
                    self.store.clone(),
                    record.to_owned(),
                    reserved.to_owned(),
                    self.lease,
                ));
                Err(self.unavailable(error))
            }
            Err(StoreError::Unconfirmed) => {
                // The store gave the reservation back: nothing is held, nothing forwarded.
                self.metrics.idempotency(IdempotencyResult::Unreplicated);
                tracing::warn!(
                    "idempotent call refused: no replica confirmed its reservation in time \
                     (single_use.redis_wait_ms); released"
                );
                Err(ProxyError::StoreUnconfirmed(Resource::Idempotency))
            }
            Err(StoreError::Full) => Err(self.full()),
            Err(StoreError::OwnerFull) => Err(self.over_share(Share::IdempotencyRecords)),
            Err(StoreError::OwnerBytesFull) => Err(self.over_share(Share::IdempotencyBytes)),
        }
    }

    /// The ticket of a reservation just made: its lease renewed from now until the
    /// ticket finishes or is dropped, the owner's share in flight held as long.
    fn ticket(
        &self,
        record: String,
        reserved: String,
        digest: String,
        in_flight: InFlight,
    ) -> Ticket {
        let renewal = tokio::spawn(renew(
            self.store.clone(),
            record.clone(),
            reserved.clone(),
            self.lease,
        ));
        Ticket {
            pending: Mutex::new(Some(Pending {
                store: self.store.clone(),
                metrics: self.metrics.clone(),
                record,
                reserved,
                digest,
                ttl: Duration::from_secs(self.config.ttl_seconds),
                lease: self.lease,
                max_result_bytes: self.config.max_result_bytes,
                _renewal: Renewal(renewal.abort_handle()),
                _in_flight: in_flight,
            })),
            outcome: Mutex::new(None),
            status: AtomicU16::new(0),
        }
    }

    /// The answer to a call whose record is held already: a conflict if its arguments
    /// differ, in progress if it is still reserved, else the stored answer replayed.
    fn answer_held(&self, held: &str, digest: &str) -> Result<Admission, ProxyError> {
        // A value of another program under a shared prefix must not panic the parse.
        let (state, rest) = [RESERVED, ANSWERED, ANSWERED_V1]
            .into_iter()
            .find_map(|prefix| held.strip_prefix(prefix).map(|rest| (prefix, rest)))
            .unwrap_or(("", held));
        let (held_digest, stored) = rest.split_once(':').unwrap_or((rest, ""));
        if held_digest != digest {
            self.metrics.idempotency(IdempotencyResult::Conflict);
            return Err(ProxyError::IdempotencyConflict);
        }
        let replay = match state {
            RESERVED => {
                self.metrics.idempotency(IdempotencyResult::InProgress);
                return Err(ProxyError::IdempotencyInProgress);
            }
            ANSWERED => stored.split_once(':').and_then(|(status, answer)| {
                Some(Replay {
                    status: status
                        .parse::<u16>()
                        .ok()
                        .and_then(|s| StatusCode::from_u16(s).ok())?,
                    answer: serde_json::from_str(answer).ok()?,
                    raw_handles: true,
                })
            }),
            ANSWERED_V1 => serde_json::from_str(stored).ok().map(|answer| Replay {
                status: StatusCode::OK,
                answer,
                raw_handles: false,
            }),
            _ => None,
        };
        match replay {
            Some(replay) => {
                self.metrics.idempotency(IdempotencyResult::Replayed);
                Ok(Admission::Replay(replay))
            }
            None => Err(self.unavailable(StoreError::Unavailable)),
        }
    }

    fn unavailable(&self, error: StoreError) -> ProxyError {
        self.metrics
            .idempotency(IdempotencyResult::StoreUnavailable);
        tracing::error!(store = self.store.kind().as_str(), error = %error, "idempotency store failed");
        ProxyError::IdempotencyUnavailable
    }

    fn over_share(&self, share: Share) -> ProxyError {
        self.metrics.idempotency(IdempotencyResult::Quota);
        self.refusals.quota_refused(share);
        tracing::warn!(
            share = share.as_str(),
            key = share.key(),
            "idempotent call refused: the caller's share is used up"
        );
        ProxyError::Quota(share)
    }

    fn full(&self) -> ProxyError {
        self.metrics.idempotency(IdempotencyResult::Full);
        tracing::error!(
            limit = self.config.memory_max_bytes,
            "idempotent call refused: the memory store's records use idempotency.memory_max_bytes"
        );
        ProxyError::StoreFull(Resource::Idempotency)
    }

    /// The record's name: a digest of who, for which audience, on which path (tenant),
    /// which tool, which key, so the store holds none of them.
    fn record_name(&self, principal: Option<&str>, path: &str, tool: &str, key: &str) -> String {
        let mut hash = Sha256::new().chain_update(b"mcp-state-guard/idempotency/v1:");
        let parts = [
            principal,
            self.audience.as_deref(),
            Some(path),
            Some(tool),
            Some(key),
        ];
        for part in parts {
            match part {
                // Length-prefixed, and absent distinct from empty.
                Some(part) => {
                    hash.update([1]);
                    hash.update((part.len() as u64).to_be_bytes());
                    hash.update(part.as_bytes());
                }
                None => hash.update([0]),
            }
        }
        crate::text::hex_lower(&hash.finalize()[..16])
    }
}

/// An answer to a recorded call, as the response phase read it from the upstream's
/// bytes: the text of its `result` (states sealed, handles raw) or of its `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completed<'a> {
    Result { text: &'a str, asks_for_input: bool },
    Error(&'a str),
}
