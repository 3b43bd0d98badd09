//! The soak's mix: flows of dependent requests (a first call, then its retry with the
//! token the answer carried, ...), each request with the one outcome it must have,
//! checked on every answer. New flows start in a fixed rotation; a flow's next requests
//! wait in a queue that the next free slot serves first, so flows finish while new ones
//! start at the schedule's rate.

use crate::admin;
use crate::generator::{self, PRINCIPAL, Sender};
use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The upstream's plaintext state holds this; no answer through the sidecar may. The
/// quote is part of it: every letter of `team-a` is in base64url's alphabet, so a token
/// carries the word by chance about once in 10^8 (a soak mints a million), and no token
/// carries a quote, while the state in the clear has one before the word however it is
/// written.
pub const PLAINTEXT_MARK: &str = "\"team-a";
/// A revocation flow replaces every this-many-th new flow.
const REVOKE_EVERY: u64 = 1000;
/// Unexpected answers quoted in the report.
const EXAMPLES: usize = 5;

/// What one request is, and so what its answer must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    First,
    Retry,
    SseFirst,
    SseRetry,
    Tampered,
    SingleUseFirst,
    SingleUseRetry,
    Replayed,
    HandleIssued,
    HandleUsed,
    HandleTampered,
    Write,
    WriteRepeated,
    RevokeeFirst,
    RevokeeIssued,
    Revoked,
    RevokedHandle,
}

/// The answer a request must get.
enum Expect {
    /// 200, an `input_required` round whose `requestState` is sealed (`v1.`), no
    /// plaintext; the token follows.
    Sealed { sse: bool },
    /// 200, a complete result.
    Complete { sse: bool },
    /// HTTP 400, `-32602`, the frozen `requestState` error.
    Frozen,
    /// 200, a complete result holding a sealed handle (`h1.`); the handle follows.
    HandleSealed,
    /// 200, the upstream received its raw import id.
    HandleRaw,
    /// HTTP 400, `-32602`, `invalid_handle`.
    HandleRefused,
    /// 200, applied once; `replayed`: answered from the record (`Idempotent-Replayed`).
    AppliedOnce { replayed: bool },
}

impl Class {
    pub fn label(self) -> &'static str {
        match self {
            Class::First => "first call, JSON: sealed input_required",
            Class::Retry => "retry, JSON: verified, complete",
            Class::SseFirst => "first call, SSE: sealed in the stream",
            Class::SseRetry => "retry, SSE: verified, complete",
            Class::Tampered => "tampered token: frozen error",
            Class::SingleUseFirst => "single-use first call: sealed",
            Class::SingleUseRetry => "single-use retry: consumed, complete",
            Class::Replayed => "single-use replay: frozen error",
            Class::HandleIssued => "handle issued: sealed h1.",
            Class::HandleUsed => "handle used: upstream got its raw id",
            Class::HandleTampered => "tampered handle: invalid_handle",
            Class::Write => "idempotent write: applied once",
            Class::WriteRepeated => "idempotent repeat: replayed, not applied",
            Class::RevokeeFirst => "revoked caller's first call: sealed",
            Class::RevokeeIssued => "revoked caller's handle issued",
            Class::Revoked => "retry after revocation: frozen error",
            Class::RevokedHandle => "handle after revocation: invalid_handle",
        }
    }

    fn expect(self) -> Expect {
        match self {
            Class::First | Class::SingleUseFirst | Class::RevokeeFirst => {
                Expect::Sealed { sse: false }
            }
            Class::SseFirst => Expect::Sealed { sse: true },
            Class::Retry | Class::SingleUseRetry => Expect::Complete { sse: false },
            Class::SseRetry => Expect::Complete { sse: true },
            Class::Tampered | Class::Replayed | Class::Revoked => Expect::Frozen,
            Class::HandleIssued | Class::RevokeeIssued => Expect::HandleSealed,
            Class::HandleUsed => Expect::HandleRaw,
            Class::HandleTampered | Class::RevokedHandle => Expect::HandleRefused,
            Class::Write => Expect::AppliedOnce { replayed: false },
            Class::WriteRepeated => Expect::AppliedOnce { replayed: true },
        }
    }
}

/// One request to send, and what comes of its answer.
#[derive(Clone)]
pub struct Step {
    class: Class,
    /// The flow's number in the rotation.
    flow: u64,
    path: &'static str,
    tool: &'static str,
    principal: String,
    id: Value,
    arguments: Value,
    extra: Value,
    /// For a revocation flow: the first call's token, carried to the handle's issue.
    token: Option<String>,
}

impl Step {
    fn new(class: Class, path: &'static str, tool: &'static str, arguments: Value) -> Self {
        Step {
            class,
            flow: 0,
            path,
            tool,
            principal: PRINCIPAL.into(),
            // The upstream's MRTR answers always carry id 1; the soak tools echo theirs.
            id: json!(1),
            arguments,
            extra: json!({}),
            token: None,
        }
    }

    fn body(&self) -> Bytes {
        generator::call_body(
            &self.id,
            self.tool,
            self.arguments.clone(),
            self.extra.clone(),
        )
    }

    /// The same call again, answering with `state`.
    fn retry(&self, class: Class, state: &str) -> Self {
        Step {
            class,
            extra: generator::retry_params(state),
            token: None,
            ..self.clone()
        }
    }

    /// Every other flow of a kind also sends a tampered copy.
    fn tampers(&self) -> bool {
        (self.flow / 5).is_multiple_of(2)
    }
}

/// Counts of every outcome, by class.
#[derive(Default)]
pub struct Tally {
    pub expected: BTreeMap<Class, u64>,
    pub unexpected: BTreeMap<Class, u64>,
    pub examples: Vec<String>,
    /// `POST /admin/revoke` calls that did not succeed.
    pub revoke_failures: u64,
    pub revocations: u64,
}

/// The mix in motion: flows started, follow-ups waiting, outcomes counted.
pub struct Mix {
    /// Names this run's idempotency keys and revoked callers apart from another's.
    run: &'static str,
    addr: SocketAddr,
    admin: SocketAddr,
    admin_token: String,
    /// Callers the flows are spread over, as a deployment's clients are.
    tenants: u64,
    flows: AtomicU64,
    ids: AtomicU64,
    pending: Mutex<VecDeque<Step>>,
    pub tally: Mutex<Tally>,
    /// Requests answered so far.
    done: Arc<AtomicU64>,
}

impl Mix {
    pub fn new(
        run: &'static str,
        addr: SocketAddr,
        admin: SocketAddr,
        admin_token: String,
        tenants: u64,
        done: Arc<AtomicU64>,
    ) -> Self {
        Mix {
            run,
            addr,
            admin,
            admin_token,
            tenants,
            flows: AtomicU64::new(0),
            ids: AtomicU64::new(1),
            pending: Mutex::default(),
            tally: Mutex::default(),
            done,
        }
    }

    /// Follow-ups still waiting when the schedule ended.
    pub fn left_over(&self) -> usize {
        self.pending.lock().expect("not poisoned").len()
    }

    /// One slot of the schedule: the oldest follow-up, or the next new flow's first call.
    pub async fn serve(&self, send: &mut Sender) -> Result<(), String> {
        let next = self.pending.lock().expect("not poisoned").pop_front();
        let step = next.unwrap_or_else(|| self.start_flow());
        let request = generator::request_as(
            self.addr,
            step.path,
            step.tool,
            http::HeaderValue::from_str(&step.principal).expect("a header value"),
            step.body(),
        );
        let result = async {
            let (head, body) = generator::send(send, request).await?;
            let found = check(&step, &head, &body)?;
            self.follow(&step, found).await;
            Ok::<_, String>(())
        }
        .await;
        self.done.fetch_add(1, Ordering::Relaxed);
        let mut tally = self.tally.lock().expect("not poisoned");
        match result {
            Ok(()) => *tally.expected.entry(step.class).or_default() += 1,
            Err(e) => {
                *tally.unexpected.entry(step.class).or_default() += 1;
                let e = format!("{}: {e}", step.class.label());
                if tally.examples.len() < EXAMPLES {
                    tally.examples.push(e.clone());
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn next_id(&self) -> Value {
        json!(self.ids.fetch_add(1, Ordering::Relaxed))
    }

    /// The first request of the next flow in the rotation.
    fn start_flow(&self) -> Step {
        let n = self.flows.fetch_add(1, Ordering::Relaxed);
        Step {
            flow: n,
            ..self.first_of(n)
        }
    }

    fn first_of(&self, n: u64) -> Step {
        let provision = json!({"name": "web-1"});
        if n % REVOKE_EVERY == REVOKE_EVERY - 1 {
            let mut step = Step::new(Class::RevokeeFirst, "/mcp", "provision", provision);
            step.principal = format!("revokee-{}-{n}@example.com", self.run);
            return step;
        }
        // Flows of one kind go round the tenants (a flow's follow-ups keep its tenant).
        Step {
            principal: format!("tenant-{}@example.com", (n / 5) % self.tenants),
            ..self.kind_of(n, provision)
        }
    }

    /// The first request of a flow of kind `n % 5`.
    fn kind_of(&self, n: u64, provision: Value) -> Step {
        match n % 5 {
            0 => Step::new(Class::First, "/mcp", "provision", provision),
            1 => Step::new(Class::SseFirst, "/mcp/sse", "provision", provision),
            2 => Step::new(Class::SingleUseFirst, "/mcp", "approve", provision),
            3 => Step {
                id: self.next_id(),
                ..Step::new(
                    Class::HandleIssued,
                    "/mcp",
                    "start_import",
                    json!({"name": format!("batch-{n}")}),
                )
            },
            _ => Step {
                id: self.next_id(),
                extra: json!({"idempotencyKey": format!("{}-{n}", self.run)}),
                ..Step::new(Class::Write, "/mcp", "record", json!({"item": n}))
            },
        }
    }

    /// Queue what follows `step`, given what its answer carried (a token or a handle).
    async fn follow(&self, step: &Step, found: Option<String>) {
        let mut next = Vec::new();
        match (step.class, found) {
            (Class::First, Some(token)) => {
                next.push(step.retry(Class::Retry, &token));
                if step.tampers() {
                    next.push(step.retry(Class::Tampered, &tamper(&token)));
                }
            }
            (Class::SseFirst, Some(token)) => next.push(step.retry(Class::SseRetry, &token)),
            (Class::SingleUseFirst, Some(token)) => {
                next.push(step.retry(Class::SingleUseRetry, &token));
            }
            // The same token again, once its first presentation was answered.
            (Class::SingleUseRetry, _) => next.push(Step {
                class: Class::Replayed,
                ..step.clone()
            }),
            (Class::HandleIssued, Some(handle)) => {
                next.push(self.use_handle(step, Class::HandleUsed, &handle));
                if step.tampers() {
                    next.push(self.use_handle(step, Class::HandleTampered, &tamper(&handle)));
                }
            }
            // The same write under a new request id, once the first was answered.
            (Class::Write, _) => next.push(Step {
                class: Class::WriteRepeated,
                id: self.next_id(),
                ..step.clone()
            }),
            (Class::RevokeeFirst, Some(token)) => next.push(Step {
                class: Class::RevokeeIssued,
                id: self.next_id(),
                tool: "start_import",
                arguments: json!({"name": "revoked"}),
                token: Some(token),
                ..step.clone()
            }),
            // The caller now holds a state and a handle: revoke it, then present both.
            (Class::RevokeeIssued, Some(handle)) => {
                self.revoke(&step.principal).await;
                let first = Step {
                    id: json!(1),
                    tool: "provision",
                    arguments: json!({"name": "web-1"}),
                    ..step.clone()
                };
                let token = step.token.as_deref().unwrap_or_default();
                next.push(first.retry(Class::Revoked, token));
                next.push(self.use_handle(step, Class::RevokedHandle, &handle));
            }
            _ => {}
        }
        self.pending.lock().expect("not poisoned").extend(next);
    }

    /// `append_rows` on the import `handle` names, by the caller it was issued to.
    fn use_handle(&self, issue: &Step, class: Class, handle: &str) -> Step {
        Step {
            class,
            id: self.next_id(),
            tool: "append_rows",
            arguments: json!({"importId": handle, "rows": [1, 2, 3]}),
            extra: json!({}),
            token: None,
            ..issue.clone()
        }
    }

    /// Revoke `principal` over the admin endpoint (every token and handle minted before).
    async fn revoke(&self, principal: &str) {
        let (admin, bearer) = (self.admin, format!("Bearer {}", self.admin_token));
        let body = json!({"principal": principal}).to_string();
        let answer = tokio::task::spawn_blocking(move || {
            admin::request(
                admin,
                "POST",
                "/admin/revoke",
                &[
                    ("authorization", &bearer),
                    ("content-type", "application/json"),
                ],
                &body,
            )
        })
        .await;
        let mut tally = self.tally.lock().expect("not poisoned");
        match answer {
            Ok(Ok((200, _))) => tally.revocations += 1,
            other => {
                tally.revoke_failures += 1;
                if tally.examples.len() < EXAMPLES {
                    tally
                        .examples
                        .push(format!("POST /admin/revoke: {other:?}"));
                }
            }
        }
    }
}

/// `token` with one character in its middle changed (still canonical base64url).
fn tamper(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ASCII")
}

/// Check `step`'s answer against its class: `Err` with an excerpt when it is not the
/// one expected; the token or handle it carries when it is.
fn check(step: &Step, head: &http::response::Parts, body: &[u8]) -> Result<Option<String>, String> {
    let excerpt = || {
        let text = String::from_utf8_lossy(body);
        format!(
            "HTTP {}: {}",
            head.status,
            text.chars().take(300).collect::<String>()
        )
    };
    let fail = |what: &str| format!("{what}; {}", excerpt());
    let message = generator::message_of(body).map_err(|e| fail(&e))?;
    if message["id"] != step.id {
        return Err(fail("the answer's id is not the request's"));
    }
    let content_type = head
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let result = &message["result"];
    let structured = &result["structuredContent"];
    let status_ok = head.status == StatusCode::OK;
    // The sidecar's refusal: HTTP 400, `-32602`, its fixed message and reason.
    let refused = |text: &str, reason: &str| {
        let error = &message["error"];
        if head.status != StatusCode::BAD_REQUEST
            || error["code"] != -32602
            || error["message"] != text
            || error["data"]["reason"] != reason
        {
            return Err(fail(&format!("not the {reason} refusal")));
        }
        Ok(None)
    };
    match step.class.expect() {
        Expect::Sealed { sse } | Expect::Complete { sse }
            if sse != content_type.starts_with("text/event-stream") =>
        {
            Err(fail("wrong content type"))
        }
        Expect::Sealed { .. } => {
            let state = result["requestState"].as_str().unwrap_or_default();
            if !status_ok || result["resultType"] != "input_required" || !state.starts_with("v1.") {
                return Err(fail("not a sealed input_required"));
            }
            if String::from_utf8_lossy(body).contains(PLAINTEXT_MARK) {
                return Err(fail("plaintext state leaked"));
            }
            Ok(Some(state.to_owned()))
        }
        Expect::Complete { .. } => {
            if !status_ok || result["resultType"] != "complete" || result["isError"] != false {
                return Err(fail("not a complete result"));
            }
            Ok(None)
        }
        Expect::Frozen => refused("Invalid or expired requestState", "invalid_request_state"),
        Expect::HandleSealed => {
            let handle = structured["importId"].as_str().unwrap_or_default();
            if !status_ok || !handle.starts_with("h1.") {
                return Err(fail("no sealed handle"));
            }
            Ok(Some(handle.to_owned()))
        }
        Expect::HandleRaw => {
            let raw = structured["importId"].as_str().unwrap_or_default();
            if !status_ok || !raw.starts_with("imp-") {
                return Err(fail("the upstream did not receive its raw handle"));
            }
            Ok(None)
        }
        Expect::HandleRefused => refused("Invalid or expired handle", "invalid_handle"),
        Expect::AppliedOnce { replayed } => {
            let header = head
                .headers
                .get("idempotent-replayed")
                .is_some_and(|v| v == "true");
            if !status_ok || structured["applied"] != 1 {
                return Err(fail("not applied exactly once"));
            }
            if header != replayed {
                return Err(fail(if replayed {
                    "a repeat not answered from the record"
                } else {
                    "a first write answered as a replay"
                }));
            }
            Ok(None)
        }
    }
}
