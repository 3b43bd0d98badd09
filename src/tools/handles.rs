//! Handle ownership: an issuing tool's handle is sealed on the way out, and an accepting
//! tool's handle argument is opened (and replaced by the upstream's raw handle) on the
//! way in.
//!
//! Invariant: an accepting tool's call is forwarded only when its handle argument is
//! absent or a sealed handle of the configured kind that opens for this caller (this
//! audience, this request path, unexpired, issued after any revocation of the caller),
//! and no key beside it reads like it to a case-folding upstream (`ImportId` next to
//! `importId`: Go's `encoding/json` would take either); every refusal gets the one
//! `invalid_handle` answer, its cause in the log and in `handles_total{result}`. No raw
//! handle an issuing tool returns at its configured pointer reaches the client: in a
//! complete result, an `input_required` round, JSON or SSE, or a replayed answer (whose
//! record holds the raw handle, sealed afresh for each replay).

use crate::config::HandleConfig;
use crate::error::ProxyError;
use crate::metrics::{HandleResult, Metrics};
use crate::policy::revocation::Revocations;
use crate::policy::single_use::{SingleUse, glob_match};
use crate::token::{HandleReject, KeyId, StateSealer};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The configured kinds, and what sealing and opening them needs.
pub struct Handles {
    kinds: Vec<HandleConfig>,
    sealer: Arc<StateSealer>,
    metrics: Arc<Metrics>,
    revocations: Arc<Revocations>,
    /// Its store-failure policy (`single_use.on_store_error`) applies to revocations.
    single_use: Arc<SingleUse>,
}

/// The kinds one response must seal: computed at admission from the tool name, so the
/// response phase holds nothing of the request body.
pub struct Issue {
    /// `(kind, result pointer, ttl)` of each kind the called tool issues.
    kinds: Vec<(String, String, u64)>,
    principal: Option<String>,
    /// The request path and query the handle is issued on.
    path: String,
    sealer: Arc<StateSealer>,
    metrics: Arc<Metrics>,
}

impl Handles {
    pub fn new(
        kinds: &[HandleConfig],
        sealer: Arc<StateSealer>,
        metrics: Arc<Metrics>,
        revocations: Arc<Revocations>,
        single_use: Arc<SingleUse>,
    ) -> Self {
        Self {
            kinds: kinds.to_vec(),
            sealer,
            metrics,
            revocations,
            single_use,
        }
    }

    /// Replace each accepted handle argument of a `tools/call` by the upstream's raw
    /// handle, or refuse the call.
    pub async fn unwrap(
        &self,
        tool: &str,
        path: &str,
        params: &mut Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<(), ProxyError> {
        for kind in &self.kinds {
            if !kind.accepted_by.iter().any(|g| glob_match(g, tool)) {
                continue;
            }
            if let Some(arguments) = params.get("arguments")
                && let Err(reason) = no_look_alike(arguments, &kind.argument_pointer)
            {
                return Err(self.refuse(&kind.kind, reason));
            }
            let Some(argument) = params
                .get_mut("arguments")
                .and_then(|a| a.pointer_mut(&kind.argument_pointer))
            else {
                // No handle given (and nothing that reads like one): nothing to check,
                // nothing the upstream could misuse.
                continue;
            };
            let opened = match argument {
                Value::String(token) => self
                    .sealer
                    .open_handle_on(path, token, &kind.kind, principal)
                    .map(|opened| (opened, KeyId::of_handle(token))),
                _ => Err(HandleReject::Malformed),
            };
            let (opened, kid) = match opened {
                Ok(opened) => opened,
                Err(reason) => return Err(self.refuse(&kind.kind, reason)),
            };
            if let Err(reason) = self.not_revoked(principal, opened.issued_at).await {
                return Err(self.refuse(&kind.kind, reason));
            }
            *argument = opened.raw;
            self.metrics.handle(HandleResult::Ok);
            if let Some(kid) = kid {
                self.metrics.handle_opened(kid);
            }
        }
        Ok(())
    }

    /// A handle of a revoked principal issued before the revocation is refused, as a
    /// `requestState` is; a store that cannot say follows `single_use.on_store_error`.
    async fn not_revoked(
        &self,
        principal: Option<&str>,
        issued_at: f64,
    ) -> Result<(), HandleReject> {
        let Some(principal) = principal else {
            return Ok(());
        };
        match self.revocations.revoked(principal, issued_at).await {
            Ok(false) => Ok(()),
            Ok(true) => Err(HandleReject::Revoked),
            Err(error) if self.single_use.fails_open() => {
                tracing::warn!(error = %error, "revocations could not be checked for a handle; let through (on_store_error = allow)");
                Ok(())
            }
            Err(error) => {
                tracing::error!(error = %error, "revocations could not be checked for a handle");
                Err(HandleReject::StoreUnavailable)
            }
        }
    }

    fn refuse(&self, kind: &str, reason: HandleReject) -> ProxyError {
        self.metrics.handle(HandleResult::Refused(reason));
        tracing::warn!(
            kind = %crate::telemetry::Clipped(kind),
            reason = reason.as_str(),
            "handle refused"
        );
        ProxyError::InvalidHandle(reason)
    }

    /// What the response to a call of `tool` on `path` must seal, if anything.
    pub fn issue(&self, tool: &str, path: &str, principal: Option<&str>) -> Option<Issue> {
        let kinds: Vec<_> = self
            .kinds
            .iter()
            .filter(|k| k.issued_by.iter().any(|g| glob_match(g, tool)))
            .map(|k| (k.kind.clone(), k.result_pointer.clone(), k.ttl_seconds))
            .collect();
        (!kinds.is_empty()).then(|| Issue {
            kinds,
            principal: principal.map(str::to_owned),
            path: path.to_owned(),
            sealer: self.sealer.clone(),
            metrics: self.metrics.clone(),
        })
    }
}

/// Refuse arguments in which the handle's place is ambiguous to a lenient upstream: a
/// step of the pointer that exists but is not an object or array, or a key beside the
/// handle's that differs from it only in case, `_`/`-` or Unicode case folding.
fn no_look_alike(arguments: &Value, pointer: &str) -> Result<(), HandleReject> {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return Ok(());
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    let parent = if parent.is_empty() {
        Some(arguments)
    } else {
        arguments.pointer(parent)
    };
    match parent {
        None | Some(Value::Array(_)) => Ok(()),
        Some(Value::Object(siblings)) => {
            let folded = crate::jsonrpc::fold(&last);
            let ambiguous = siblings
                .keys()
                .any(|key| *key != last && crate::jsonrpc::fold(key) == folded);
            if ambiguous {
                Err(HandleReject::Malformed)
            } else {
                Ok(())
            }
        }
        Some(_) => Err(HandleReject::Malformed),
    }
}

impl Issue {
    /// Seal the handle at each configured pointer of a tool `result` (complete or an
    /// `input_required` round, from the upstream or replayed from a record). A result
    /// without one (a tool error, say) passes, counted as `missing`.
    pub fn seal(&self, result: &mut Map<String, Value>) {
        for (kind, pointer, ttl) in &self.kinds {
            // The pointer is into the result object; a `Value` view of it is needed for
            // `pointer_mut`, so the object is moved in and back out.
            let mut value = Value::Object(std::mem::take(result));
            match value.pointer_mut(pointer) {
                Some(raw) if !raw.is_null() => {
                    let sealed = self.sealer.seal_handle_on(
                        &self.path,
                        kind,
                        raw,
                        self.principal.as_deref(),
                        *ttl,
                    );
                    if let Some(kid) = KeyId::of_handle(&sealed) {
                        self.metrics.handle_minted(kid);
                    }
                    *raw = Value::String(sealed);
                    self.metrics.handle(HandleResult::Sealed);
                }
                _ => self.metrics.handle(HandleResult::Missing),
            }
            if let Value::Object(map) = value {
                *result = map;
            }
        }
    }
}
