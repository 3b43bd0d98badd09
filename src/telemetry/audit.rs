//! One record per request, written once, when the response body is dropped (after its
//! last byte, or when the client went away): a refusal is an audit line at `info` under
//! the target `mcp_state_guard::audit` (one per refusal, with its category and closed
//! reason); any other request is an access line at `debug` under the same target.
//!
//! Invariant: a record holds no token, state, key, secret or header value. Client text
//! (method, target, JSON-RPC id) goes through [`printable`]; the caller appears only as
//! a digest; the trace id only as the 32 hex digits a valid `traceparent` carries; a
//! presented token only as the key id it names.
//!
//! What only the written line needs (the caller's digest, the client address as text,
//! the key id in hex) is computed when the line is written, and not at all when the log
//! level leaves it out: most requests' access lines are at `debug`. With `info` off for
//! the target, no line is written at all, and what only a line shows (the call's target
//! and key id, the trace id) is not even read ([`written`]; the level is set at start).

use crate::error::{Category, ProxyError};
use crate::jsonrpc::{Params, ParamsField};
use crate::mcp::MethodClass;
use crate::text::{MAX_LOGGED_BYTES, printable};
use crate::token::{KeyId, Reject};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

/// The target every record is written under, so a log pipeline can route the audit
/// stream (`RUST_LOG`-style: `log.level = "info,mcp_state_guard::audit=info"`).
pub(crate) const TARGET: &str = "mcp_state_guard::audit";

impl Category {
    /// The category and closed reason of a refusal; `None` for an upstream failure,
    /// which is not the client's refusal.
    pub(crate) fn of(error: &ProxyError) -> Option<(Category, &'static str)> {
        let kind = error.kind();
        // The kind's row: `None` for an upstream failure.
        let category = kind.row().category?;
        Some(match error {
            // A replay, or a consumption the store could not record or check.
            ProxyError::InvalidState {
                reason: reason @ (Reject::Replayed | Reject::StoreUnavailable | Reject::Revoked),
                ..
            } => (Category::Store, reason.as_str()),
            ProxyError::InvalidState { reason, .. } => (category, reason.as_str()),
            ProxyError::Unauthorized { reason, .. } => (category, reason.as_str()),
            // The cause of a refused handle, which the client is not told.
            ProxyError::InvalidHandle(reason) => (category, reason.as_str()),
            // A share used up or a store full: what the shared store could not take.
            ProxyError::Quota(share) => (category, share.as_str()),
            ProxyError::StoreFull(resource) => (category, resource.as_str()),
            _ => (category, kind.as_str()),
        })
    }
}

/// A refusal, as recorded.
#[derive(Debug, Clone, Copy)]
struct RecordedRefusal {
    category: Category,
    reason: &'static str,
    /// A fixed text safe to log (the token layer's detail), when there is one.
    detail: Option<&'static str>,
}

/// What is known about one request; written when dropped.
#[derive(Debug)]
pub(crate) struct Record {
    started: Instant,
    class: MethodClass,
    /// Shared with the response phase's log lines ([`crate::proxy`]'s exchange).
    method: Option<Arc<str>>,
    target: Option<String>,
    /// Shared with the exchange; written ([`id_text`]) only when the record is.
    request_id: Option<Arc<serde_json::Value>>,
    kid: Option<KeyId>,
    /// The caller as identified; written only as its [`principal_digest`].
    principal: Option<Arc<str>>,
    client: Option<SocketAddr>,
    /// Behind a trusted proxy, the client its forwarding chain names (whose shares the
    /// request spends), when it is not the peer.
    forwarded_client: Option<IpAddr>,
    trace_id: Option<String>,
    upstream_wait: Duration,
    upstream_status: Option<u16>,
    outcome: Outcome,
    status: Option<u16>,
    refusal: Option<RecordedRefusal>,
}

impl Record {
    /// A record for a request that arrived now, from `client`, with these headers.
    pub(crate) fn begin(client: Option<SocketAddr>, headers: &HeaderMap) -> Self {
        Self {
            started: Instant::now(),
            class: MethodClass::Passthrough,
            method: None,
            target: None,
            request_id: None,
            kid: None,
            principal: None,
            client,
            forwarded_client: None,
            trace_id: written().then(|| trace_id(headers)).flatten(),
            upstream_wait: Duration::ZERO,
            upstream_status: None,
            outcome: Outcome::Ok,
            status: None,
            refusal: None,
        }
    }

    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    pub(crate) fn class(&self) -> MethodClass {
        self.class
    }

    pub(crate) fn set_class(&mut self, class: MethodClass) {
        self.class = class;
    }

    /// The JSON-RPC call: its method (which also sets the class) as sent and as logs
    /// show it (escaped and bounded: [`logged_method`]), its id and target, and the key id
    /// its token names (the target and the key id only when a line can be written:
    /// [`written`]).
    pub(crate) fn set_call(
        &mut self,
        method: &str,
        logged: Arc<str>,
        id: Option<Arc<serde_json::Value>>,
        params: &Params<'_>,
    ) {
        self.class = MethodClass::of_method(method);
        self.method = Some(logged);
        self.request_id = id;
        if !written() {
            return;
        }
        self.target = params
            .get_str(ParamsField::target(method))
            .map(|t| printable(&t, MAX_LOGGED_BYTES));
        self.kid = params
            .get_str(ParamsField::RequestState)
            .and_then(|token| KeyId::of_token(&token));
    }

    /// The caller, written only as [`principal_digest`].
    pub(crate) fn set_principal(&mut self, principal: Option<Arc<str>>) {
        self.principal = principal;
    }

    /// The client a trusted proxy reports, when it is not the peer.
    pub(crate) fn set_forwarded_client(&mut self, client: IpAddr) {
        self.forwarded_client = Some(client);
    }

    /// Time spent waiting for the upstream's response head, and its status.
    pub(crate) fn upstream_answered(&mut self, waited: Duration, status: Option<http::StatusCode>) {
        self.upstream_wait += waited;
        self.upstream_status = status.map(|s| s.as_u16()).or(self.upstream_status);
    }

    pub(crate) fn upstream_wait(&self) -> Duration {
        self.upstream_wait
    }

    /// The request failed with `error`: refused by a check, or an upstream failure.
    pub(crate) fn failed(&mut self, error: &ProxyError) {
        match Category::of(error) {
            Some((category, reason)) => {
                self.outcome = Outcome::Refused;
                let detail = match error {
                    ProxyError::InvalidState { detail, .. } => Some(*detail),
                    ProxyError::PrincipalHeader(detail) => Some(*detail),
                    ProxyError::IdempotencyKey(detail) => Some(*detail),
                    _ => None,
                };
                self.refusal = Some(RecordedRefusal {
                    category,
                    reason,
                    detail,
                });
            }
            None => self.outcome = Outcome::UpstreamError,
        }
    }

    pub(crate) fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The status the client is answered with.
    pub(crate) fn set_status(&mut self, status: http::StatusCode) {
        self.status = Some(status.as_u16());
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let written = match self.refusal {
            Some(_) => tracing::enabled!(target: TARGET, tracing::Level::INFO),
            None => tracing::enabled!(target: TARGET, tracing::Level::DEBUG),
        };
        if !written {
            return;
        }
        let elapsed_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let kid = self.kid.map(KeyId::hex);
        let kid = kid.as_ref().map(|k| k.as_str());
        let client = self.client.map(|c| c.to_string());
        let forwarded_client = self.forwarded_client.map(|c| c.to_string());
        let principal = self.principal.as_deref().map(principal_digest);
        let request_id = self.request_id.as_deref().map(id_text);
        match self.refusal {
            Some(refusal) => tracing::info!(
                target: TARGET,
                category = refusal.category.as_str(),
                reason = refusal.reason,
                detail = refusal.detail,
                status = self.status,
                class = self.class.as_str(),
                method = self.method.as_deref(),
                target = self.target.as_deref(),
                request_id = request_id.as_deref(),
                kid,
                principal = principal.as_deref(),
                client = client.as_deref(),
                forwarded_client = forwarded_client.as_deref(),
                trace_id = self.trace_id.as_deref(),
                elapsed_ms,
                "request refused"
            ),
            None => tracing::debug!(
                target: TARGET,
                outcome = self.outcome.as_str(),
                status = self.status,
                upstream_status = self.upstream_status,
                class = self.class.as_str(),
                method = self.method.as_deref(),
                target = self.target.as_deref(),
                request_id = request_id.as_deref(),
                kid,
                principal = principal.as_deref(),
                client = client.as_deref(),
                forwarded_client = forwarded_client.as_deref(),
                trace_id = self.trace_id.as_deref(),
                upstream_wait_ms = self.upstream_wait.as_secs_f64() * 1000.0,
                elapsed_ms,
                "request served"
            ),
        }
    }
}

/// Whether a record can be written at the log level in force: a refusal's line is at
/// `info`, an access line at `debug`. Both are asked, so that a filter of the embedding
/// program's own that lets `debug` through and not `info` still gets whole access lines
/// (the binary's `EnvFilter` nests levels: the second question is then never reached).
fn written() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
        || tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

/// A method as every log line shows it: escaped and bounded ([`printable`]).
pub(crate) fn logged_method(method: &str) -> Arc<str> {
    // The methods of MCP, printable as they are, are shared rather than copied.
    static KNOWN: LazyLock<Vec<Arc<str>>> = LazyLock::new(|| {
        (MCP_METHODS.iter())
            .map(|&method| Arc::from(method))
            .collect()
    });
    match KNOWN.iter().find(|known| ***known == *method) {
        Some(known) => Arc::clone(known),
        None => printable(method, MAX_LOGGED_BYTES).into(),
    }
}

/// The requests of MCP a client sends (what [`logged_method`] shares).
const MCP_METHODS: &[&str] = &[
    "tools/call",
    "prompts/get",
    "resources/read",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "completion/complete",
    "logging/setLevel",
    "initialize",
    "ping",
    "notifications/initialized",
    "notifications/cancelled",
];

/// A pseudonym for a caller: 16 hex digits of SHA-256 over a fixed label and the
/// principal string. Stable across replicas and restarts, so an operator can find one
/// caller's records (`printf 'mcp-state-guard/audit/principal:%s' "$P" | sha256sum`)
/// without the log holding the identity. It is not a secret: someone who can guess a
/// principal can confirm the guess.
pub(crate) fn principal_digest(principal: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"mcp-state-guard/audit/principal:")
        .chain_update(principal.as_bytes())
        .finalize();
    crate::text::hex_lower(&digest[..8])
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), when there is
/// exactly one well-formed header; nothing else of it is kept.
pub(crate) fn trace_id(headers: &HeaderMap) -> Option<String> {
    // A name built once: a `&str` would be parsed and checked on every request.
    const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
    let mut values = headers.get_all(TRACEPARENT).iter();
    let (value, None) = (values.next()?, values.next()) else {
        return None;
    };
    let mut parts = value.to_str().ok()?.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    // Version 00 has exactly four fields; later versions may append more.
    let more = parts.next().is_some();
    let valid = hex(version, 2)
        && version != "ff"
        && !(version == "00" && more)
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then(|| trace.to_owned())
}

/// A JSON-RPC id as logged: a string escaped and cut, a number as written (cut too: it
/// may be any length), `null` as such.
fn id_text(id: &serde_json::Value) -> String {
    const MAX_ID_BYTES: usize = 64;
    match id {
        serde_json::Value::String(s) => printable(s, MAX_ID_BYTES),
        // The literal as serde_json keeps it (`arbitrary_precision`), as it was written
        // before: `to_string` wrote the same text through a copy.
        serde_json::Value::Number(n) => printable(n.as_str(), MAX_ID_BYTES),
        other => printable(&other.to_string(), MAX_ID_BYTES),
    }
}

/// How a request ended, as far as the response head (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream's answer (any status) reached the client.
    Ok,
    /// The sidecar refused the request (the client's fault, or a check it failed).
    Refused,
    /// The upstream was unreachable, too slow, or answered what cannot be made safe.
    UpstreamError,
}

crate::registry::labels!(pub Outcome {
    Ok => "ok",
    Refused => "refused",
    UpstreamError => "upstream_error",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::error::tests::samples;
    use http::HeaderValue;

    /// MCP's own methods are shared, not copied, and read as [`printable`] writes them;
    /// any other method is escaped and bounded.
    #[test]
    fn logged_methods_are_printable_and_mcps_are_shared() {
        for method in MCP_METHODS {
            assert_eq!(printable(method, MAX_LOGGED_BYTES), *method);
            assert!(Arc::ptr_eq(&logged_method(method), &logged_method(method)));
        }
        let escaped = logged_method("tools/call\n");
        assert!(!escaped.contains('\n') && escaped.starts_with("tools/call"));
        assert_eq!(
            &*logged_method("x\u{1b}[31m"),
            &*printable("x\u{1b}[31m", MAX_LOGGED_BYTES)
        );
        assert_ne!(&*logged_method("x\u{1b}[31m"), "x\u{1b}[31m");
        let long = "m".repeat(10 * MAX_LOGGED_BYTES);
        assert!(logged_method(&long).len() < long.len());
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("traceparent", HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    /// What only a written line shows is read only when a line can be written: with no
    /// subscriber (or `info` off for the target) the record keeps no trace id, target
    /// or key id; with `info` on it keeps all three.
    #[test]
    fn what_only_a_line_shows_is_read_only_when_lines_are_written() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        // Only its head is read: the key id in its first six bytes.
        let token = "v1.AQIDBAUGsealed-bytes-that-are-never-opened";
        let mut body = crate::jsonrpc::ScannedBody::call(
            "tools/call",
            &serde_json::json!({"name": "provision", "requestState": token}),
        )
        .unwrap();
        let mut record = || {
            // The callsites' interest is cached per process: asked afresh under each
            // subscriber.
            tracing::callsite::rebuild_interest_cache();
            let mut record = Record::begin(None, &headers(&[good]));
            let (method, params) = body.call_mut().unwrap();
            record.set_call(method, logged_method(method), None, &params);
            (record.trace_id.clone(), record.target.clone(), record.kid)
        };
        let quiet = || {
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::WARN)
                .finish()
        };
        let (trace, target, kid) = tracing::subscriber::with_default(quiet(), &mut record);
        assert_eq!(
            (trace, target, kid),
            (None, None, None),
            "nothing read at warn"
        );
        let audit = || {
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::INFO)
                .finish()
        };
        let (trace, target, kid) = tracing::subscriber::with_default(audit(), &mut record);
        assert_eq!(trace.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert_eq!(target.as_deref(), Some("provision"));
        assert_eq!(kid, KeyId::of_token(token), "the key id its token names");
        assert!(kid.is_some());
        // A filter that lets `debug` through and not `info` still gets whole access lines.
        use tracing_subscriber::Layer;
        use tracing_subscriber::layer::SubscriberExt;
        let only_debug = || {
            let debug = |meta: &tracing::Metadata<'_>| *meta.level() == tracing::Level::DEBUG;
            let layer = tracing_subscriber::fmt::layer()
                .with_filter(tracing_subscriber::filter::filter_fn(debug));
            tracing_subscriber::registry().with(layer)
        };
        let (_, target, _) = tracing::subscriber::with_default(only_debug(), &mut record);
        assert_eq!(
            target.as_deref(),
            Some("provision"),
            "read for a debug-only filter"
        );
    }

    #[test]
    fn trace_ids_only_from_valid_traceparents() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            trace_id(&headers(&[good])).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let future = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert!(trace_id(&headers(&[future])).is_some());
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-secret\"injected-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(&headers(&[bad])), None, "{bad:?}");
        }
        assert_eq!(trace_id(&headers(&[good, good])), None, "repeated");
        assert_eq!(trace_id(&HeaderMap::new()), None);
    }

    #[test]
    fn principals_are_pseudonyms() {
        let digest = principal_digest("alice@example.com");
        assert_eq!(digest.len(), 16);
        assert!(!digest.contains("alice"));
        assert_eq!(digest, principal_digest("alice@example.com"));
        assert_ne!(digest, principal_digest("bob@example.com"));
    }

    #[test]
    fn refusals_have_a_category_and_a_closed_reason() {
        let state = |reason| ProxyError::InvalidState {
            reason,
            detail: "d",
        };
        assert_eq!(
            Category::of(&state(Reject::Expired)),
            Some((Category::State, "expired"))
        );
        assert_eq!(
            Category::of(&state(Reject::Replayed)),
            Some((Category::Store, "replayed"))
        );
        assert_eq!(
            Category::of(&ProxyError::PrincipalHeader("repeated")),
            Some((Category::Auth, "principal_header"))
        );
        assert_eq!(
            Category::of(&ProxyError::ContentType),
            Some((Category::Gate, "content_type"))
        );
        assert_eq!(Category::of(&ProxyError::UpstreamTimeout(5)), None);
    }

    #[test]
    fn every_refusal_is_audited_in_its_rows_category() {
        for kind in ErrorKind::ALL {
            for error in samples(kind) {
                let audited = Category::of(&error);
                let Some(category) = kind.row().category else {
                    assert_eq!(audited, None, "{error}: an upstream failure is no refusal");
                    continue;
                };
                let (got, reason) = audited.unwrap_or_else(|| panic!("{error}: no category"));
                // The one payload that moves a kind out of its row's category.
                let store = matches!(
                    error,
                    ProxyError::InvalidState {
                        reason: Reject::Replayed | Reject::StoreUnavailable | Reject::Revoked,
                        ..
                    }
                );
                let want = if store { Category::Store } else { category };
                assert_eq!(got, want, "{error}");
                // The reason is the kind's label unless the payload names a closer one.
                let payload_reason = match &error {
                    ProxyError::InvalidState { reason, .. } => Some(reason.as_str()),
                    ProxyError::Unauthorized { reason, .. } => Some(reason.as_str()),
                    ProxyError::InvalidHandle(reason) => Some(reason.as_str()),
                    ProxyError::Quota(share) => Some(share.as_str()),
                    ProxyError::StoreFull(resource) => Some(resource.as_str()),
                    _ => None,
                };
                assert_eq!(reason, payload_reason.unwrap_or(kind.as_str()), "{error}");
            }
        }
    }

    #[test]
    fn ids_are_escaped_and_bounded() {
        assert_eq!(id_text(&serde_json::json!(7)), "7");
        // A number as serde_json keeps it (`arbitrary_precision`), not re-formatted.
        let number: serde_json::Value = serde_json::from_str("-1.50e3").unwrap();
        assert_eq!(id_text(&number), number.to_string());
        assert!(id_text(&number).starts_with("-1.50e"));
        assert_eq!(id_text(&serde_json::json!("a\nb")), "a\\u{a}b");
        assert!(id_text(&serde_json::json!("x".repeat(10_000))).len() < 80);
    }
}
