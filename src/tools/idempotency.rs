//! Writes applied once: a `tools/call` of an idempotent tool carrying an idempotency key
//! is recorded in the shared [`Store`] under (caller, audience, tool, key) with its
//! argument digest; a repeat is answered from the record instead of reaching the upstream.
//!
//! Invariant: of any number of calls with one record key, on any replica sharing the
//! store, exactly one is forwarded until its reservation is released (an `input_required`
//! round, a transport failure, an answer that could not be made safe or stored) or its
//! record expires; every other call gets the stored answer (same arguments, completed),
//! `idempotency_key_in_progress` (still in flight) or `idempotency_key_conflict` (other
//! arguments). A store that cannot answer refuses the call: a write is never forwarded
//! unrecorded.

use crate::config::IdempotencyConfig;
use crate::error::ProxyError;
use crate::metrics::{IdempotencyResult, Metrics};
use crate::policy::single_use::glob_match;
use crate::store::{Store, StoreError};
use http::HeaderMap;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The header a client may carry the key in instead of `params.idempotencyKey`.
pub const HEADER: &str = "idempotency-key";
/// The header on a replayed answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
const MAX_KEY_CHARS: usize = 255;

/// The idempotency phase.
pub struct Idempotency {
    config: IdempotencyConfig,
    audience: Option<String>,
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    /// How long a reservation holds when nobody completes or releases it (a replica
    /// that died mid-call): the upstream's answer deadline plus five minutes.
    lease: Duration,
}

/// What admission decided.
pub enum Admitted {
    /// Not an idempotent call (no key, or a tool not listed): forward as is.
    Untracked,
    /// Reserved: forward, then record what comes back through the ticket.
    Reserved(Arc<Ticket>),
    /// Completed before with the same arguments: the stored `result` or `error` member.
    Replay(Map<String, Value>),
}

/// A reservation in flight, completed by the response phase or released when dropped.
pub struct Ticket {
    pending: Mutex<Option<Pending>>,
    outcome: Mutex<Option<Outcome>>,
}

struct Pending {
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    record: String,
    /// The exact value reserved: only it is replaced or deleted.
    reserved: String,
    digest: String,
    ttl: Duration,
    max_result_bytes: usize,
}

enum Outcome {
    /// The stored JSON of a complete answer (`{"result":…}` or `{"error":…}`).
    Record(String),
    /// Give the key back.
    Release(IdempotencyResult),
}

impl Idempotency {
    pub fn new(
        config: &IdempotencyConfig,
        audience: Option<String>,
        store: Arc<Store>,
        metrics: Arc<Metrics>,
        answer_deadline: Duration,
    ) -> Self {
        Self {
            config: config.clone(),
            audience,
            store,
            metrics,
            lease: answer_deadline + Duration::from_secs(300),
        }
    }

    fn refuse(&self, detail: &'static str) -> ProxyError {
        self.metrics.idempotency(IdempotencyResult::Invalid);
        ProxyError::IdempotencyKey(detail)
    }

    /// Read, check and reserve the key of a call of `tool` (arguments as the upstream
    /// will receive them), or answer it from the store.
    pub async fn admit(
        &self,
        tool: &str,
        path: &str,
        params: &mut Map<String, Value>,
        headers: &mut HeaderMap,
        principal: Option<&str>,
    ) -> Result<Admitted, ProxyError> {
        let required = self.config.require_key.iter().any(|g| glob_match(g, tool));
        let listed = required || self.config.tools.iter().any(|g| glob_match(g, tool));
        if !listed {
            return Ok(Admitted::Untracked);
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
        let param = match params.get("idempotencyKey") {
            None | Some(Value::Null) => None,
            Some(Value::String(key)) => Some(key.clone()),
            Some(_) => return Err(self.refuse("params key not a string")),
        };
        let key = match (param, header) {
            (Some(a), Some(b)) if a != b => return Err(self.refuse("header and params differ")),
            (Some(key), _) | (None, Some(key)) => key,
            (None, None) if required => return Err(self.refuse("key required")),
            (None, None) => return Ok(Admitted::Untracked),
        };
        let chars = key.chars().count();
        if !(1..=MAX_KEY_CHARS).contains(&chars) || key.chars().any(char::is_control) {
            return Err(self.refuse("not 1 to 255 printable characters"));
        }
        if self.config.strip_key {
            params.remove("idempotencyKey");
            headers.remove(HEADER);
        }
        let digest = crate::token::args_digest(params.get("arguments"))
            .map_err(|_| ProxyError::Parse(crate::jsonrpc::ParseError::Params))?;
        let record = self.record_name(principal, path, tool, &key);
        let reserved = format!(
            "p:{digest}:{}",
            hex::encode(crate::token::keyring::random_bytes::<8>())
        );
        let held = self
            .store
            .reserve_record(&record, &reserved, self.lease)
            .await
            .map_err(|error| self.unavailable(error))?;
        let Some(held) = held else {
            self.metrics.idempotency(IdempotencyResult::Reserved);
            return Ok(Admitted::Reserved(Arc::new(Ticket {
                pending: Mutex::new(Some(Pending {
                    store: self.store.clone(),
                    metrics: self.metrics.clone(),
                    record,
                    reserved,
                    digest,
                    ttl: Duration::from_secs(self.config.ttl_seconds),
                    max_result_bytes: self.config.max_result_bytes,
                })),
                outcome: Mutex::new(None),
            })));
        };
        // A value of another program under a shared prefix must not panic the parse.
        let (state, rest) = match (held.strip_prefix("p:"), held.strip_prefix("d:")) {
            (Some(rest), _) => ("p:", rest),
            (_, Some(rest)) => ("d:", rest),
            _ => ("", held.as_str()),
        };
        let (held_digest, stored) = rest.split_once(':').unwrap_or((rest, ""));
        if held_digest != digest {
            self.metrics.idempotency(IdempotencyResult::Conflict);
            return Err(ProxyError::IdempotencyConflict);
        }
        match state {
            "p:" => {
                self.metrics.idempotency(IdempotencyResult::InProgress);
                Err(ProxyError::IdempotencyInProgress)
            }
            "d:" => match serde_json::from_str::<Map<String, Value>>(stored) {
                Ok(answer) => {
                    self.metrics.idempotency(IdempotencyResult::Replayed);
                    Ok(Admitted::Replay(answer))
                }
                Err(_) => Err(self.unavailable(StoreError::Unavailable)),
            },
            _ => Err(self.unavailable(StoreError::Unavailable)),
        }
    }

    fn unavailable(&self, error: StoreError) -> ProxyError {
        self.metrics
            .idempotency(IdempotencyResult::StoreUnavailable);
        tracing::error!(store = self.store.kind().as_str(), error = %error, "idempotency store failed");
        ProxyError::IdempotencyUnavailable
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
        hex::encode(&hash.finalize()[..16])
    }
}

impl Ticket {
    /// The response phase saw the answer to the call: a complete result or a JSON-RPC
    /// error is kept for recording; an `input_required` round releases the key.
    pub fn complete(&self, message: &Map<String, Value>) {
        let outcome = match (message.get("result"), message.get("error")) {
            // A round that asks (by `resultType` or by `inputRequests`, as the sealer
            // decides) is no final answer.
            (Some(Value::Object(result)), _) if crate::proxy::response::asks_for_input(result) => {
                Outcome::Release(IdempotencyResult::Released)
            }
            (Some(result), _) => Self::stored("result", result),
            (None, Some(error)) => Self::stored("error", error),
            (None, None) => return,
        };
        *self.outcome.lock().expect("not poisoned") = Some(outcome);
    }

    fn stored(member: &str, value: &Value) -> Outcome {
        let mut answer = Map::new();
        answer.insert(member.into(), value.clone());
        Outcome::Record(serde_json::to_string(&answer).expect("a JSON value serialises"))
    }

    /// Record (or release) now, when the answer is known; `false` while it is not (a
    /// stream still flowing: the ticket finishes when it is dropped).
    pub async fn finish_if_complete(&self) -> bool {
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
    /// unreachable, the stream broke, or the answer was withheld).
    async fn finish(self, outcome: Option<Outcome>) {
        let outcome = match outcome {
            Some(Outcome::Record(answer)) if answer.len() > self.max_result_bytes => {
                tracing::warn!(
                    bytes = answer.len(),
                    "idempotent result larger than idempotency.max_result_bytes: not recorded, \
                     a repeat will be applied again"
                );
                Outcome::Release(IdempotencyResult::TooLarge)
            }
            Some(outcome) => outcome,
            None => Outcome::Release(IdempotencyResult::Released),
        };
        let (value, result) = match &outcome {
            Outcome::Record(answer) => (
                Some(format!("d:{}:{answer}", self.digest)),
                IdempotencyResult::Recorded,
            ),
            Outcome::Release(result) => (None, *result),
        };
        match self
            .store
            .swap_record(&self.record, &self.reserved, value.as_deref(), self.ttl)
            .await
        {
            Ok(true) => self.metrics.idempotency(result),
            Ok(false) => {
                self.metrics.idempotency(IdempotencyResult::LeaseLost);
                tracing::warn!(
                    "idempotency reservation lost before the answer came (its lease ended): \
                     not recorded; a repeat may have been applied meanwhile"
                );
            }
            Err(error) => {
                self.metrics
                    .idempotency(IdempotencyResult::StoreUnavailable);
                tracing::error!(
                    error = %error,
                    "idempotency record could not be written; the key stays reserved until its lease ends"
                );
            }
        }
    }
}
