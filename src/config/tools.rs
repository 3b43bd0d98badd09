//! Settings of the tool-level features: `[[handles]]` kinds and `idempotency.*`, with
//! their validation. Invariant: a validated handle kind has a non-empty, unique name,
//! at least one issuing and one accepting tool, JSON pointers that parse, and a TTL in
//! range; every problem names its key (`handles[i].field`) and environment variable.

use serde::{Deserialize, Serialize};

use super::ConfigProblem;

/// One handle kind: which tools issue it where, and which accept it where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleConfig {
    /// A name for the kind (`import`); a handle of one kind never opens as another.
    pub kind: String,
    /// Tools (globs, `*` only) whose results carry the handle.
    pub issued_by: Vec<String>,
    /// RFC 6901 pointer into the tool result (`/structuredContent/importId`).
    pub result_pointer: String,
    /// Tools (globs) that take the handle as an argument.
    pub accepted_by: Vec<String>,
    /// RFC 6901 pointer into `params.arguments` (`/importId`).
    pub argument_pointer: String,
    /// Lifetime of a sealed handle, 1..=31536000 (a year).
    #[serde(default = "default_handle_ttl")]
    pub ttl_seconds: u64,
}

fn default_handle_ttl() -> u64 {
    3600
}

/// Writes applied once: which tools, how long records live, what is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdempotencyConfig {
    /// Tools (globs) whose calls carrying a key are applied once.
    pub tools: Vec<String>,
    /// Tools (globs) that must carry a key (they are idempotent too).
    pub require_key: Vec<String>,
    /// How long a completed record is replayed, 1..=2592000 (30 days).
    pub ttl_seconds: u64,
    /// Largest result stored; a larger one is passed on but not recorded (the key is
    /// released, so a repeat is applied again: logged and counted).
    pub max_result_bytes: usize,
    /// Remove `params.idempotencyKey` and the `Idempotency-Key` header before forwarding.
    pub(crate) strip_key: bool,
    /// How long a reservation holds without renewal, 1000..=600000 ms: the replica
    /// forwarding the call renews it every third of this while the answer is in
    /// progress, so it bounds how long a key stays reserved after that replica dies.
    pub lease_ms: u64,
    /// Memory store only: bytes all idempotency records and reservations together may
    /// be charged (a reservation is charged `max_result_bytes` ahead, so a completed
    /// write always fits); past it new keys are refused, none is evicted.
    pub memory_max_bytes: u64,
    /// Memory store only: records and reservations one caller may hold at once.
    pub max_records_per_principal: usize,
    /// Memory store only: bytes one caller's records and reservations may be charged
    /// together (its share of `memory_max_bytes`); past it 429. Unset: an eighth of
    /// `memory_max_bytes`, and at least room for two writes.
    pub max_bytes_per_principal: Option<u64>,
    /// Idempotent calls one caller may have in flight at once on one replica (each
    /// holds a reservation charged `max_result_bytes` ahead); past it 429.
    pub max_in_flight_per_principal: usize,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            require_key: Vec::new(),
            ttl_seconds: 86_400,
            max_result_bytes: 1_048_576,
            strip_key: false,
            lease_ms: 30_000,
            memory_max_bytes: 268_435_456,
            max_records_per_principal: 10_000,
            max_bytes_per_principal: None,
            max_in_flight_per_principal: 16,
        }
    }
}

const MAX_HANDLE_TTL: u64 = 365 * 86_400;
const MAX_IDEMPOTENCY_TTL: u64 = 30 * 86_400;

/// Whether `pointer` is an RFC 6901 JSON pointer naming something below the root.
fn pointer_ok(pointer: &str) -> bool {
    pointer.starts_with('/') && {
        // `~` must be followed by 0 or 1.
        let bytes = pointer.as_bytes();
        bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b != b'~' || matches!(bytes.get(i + 1), Some(b'0' | b'1')))
    }
}

/// Every problem with the handle kinds and the idempotency settings.
pub(super) fn validate(
    handles: &[HandleConfig],
    idempotency: &IdempotencyConfig,
    problems: &mut Vec<ConfigProblem>,
) {
    let mut kinds = std::collections::HashSet::new();
    for (i, handle) in handles.iter().enumerate() {
        // The whole array is one key (`handles`, `MCP_STATE_GUARD_HANDLES`); the message
        // names the entry and its field.
        let mut problem = |field: &str, message: &str| {
            problems.push(ConfigProblem::new(
                "handles",
                format!("entry {i} ({field}): {message}"),
            ));
        };
        if handle.kind.trim().is_empty() || handle.kind.len() > 64 {
            problem("kind", "must be 1 to 64 characters");
        } else if !kinds.insert(handle.kind.as_str()) {
            problem("kind", "the same kind is configured twice");
        }
        for (field, list) in [
            ("issued_by", &handle.issued_by),
            ("accepted_by", &handle.accepted_by),
        ] {
            if list.is_empty() || list.iter().any(|g| g.is_empty()) {
                problem(
                    field,
                    "must list at least one tool name or glob, none empty",
                );
            }
        }
        for (field, pointer) in [
            ("result_pointer", &handle.result_pointer),
            ("argument_pointer", &handle.argument_pointer),
        ] {
            if !pointer_ok(pointer) {
                problem(
                    field,
                    "must be a JSON pointer below the root, such as \"/importId\"",
                );
            }
        }
        if !(1..=MAX_HANDLE_TTL).contains(&handle.ttl_seconds) {
            problem("ttl_seconds", &format!("must be 1 to {MAX_HANDLE_TTL}"));
        }
    }
    for (field, list) in [
        ("idempotency.tools", &idempotency.tools),
        ("idempotency.require_key", &idempotency.require_key),
    ] {
        if list.iter().any(|g| g.is_empty()) {
            problems.push(ConfigProblem::new(field, "entries must not be empty"));
        }
    }
    if !(1..=MAX_IDEMPOTENCY_TTL).contains(&idempotency.ttl_seconds) {
        problems.push(ConfigProblem::new(
            "idempotency.ttl_seconds",
            format!("must be 1 to {MAX_IDEMPOTENCY_TTL}"),
        ));
    }
    if !(1..=64 * 1024 * 1024).contains(&idempotency.max_result_bytes) {
        problems.push(ConfigProblem::new(
            "idempotency.max_result_bytes",
            "must be 1 to 67108864",
        ));
    }
    if !(1_000..=600_000).contains(&idempotency.lease_ms) {
        problems.push(ConfigProblem::new(
            "idempotency.lease_ms",
            "must be 1000 to 600000",
        ));
    }
    // Room for at least a few writes in flight, each charged a whole answer ahead.
    let least = 4 * idempotency.max_result_bytes as u64;
    if !(least..=1 << 40).contains(&idempotency.memory_max_bytes) {
        problems.push(ConfigProblem::new(
            "idempotency.memory_max_bytes",
            format!("must be 4 times idempotency.max_result_bytes ({least}) to 1099511627776"),
        ));
    }
    if !(1..=10_000_000).contains(&idempotency.max_records_per_principal) {
        problems.push(ConfigProblem::new(
            "idempotency.max_records_per_principal",
            "must be 1 to 10000000",
        ));
    }
}

impl super::Config {
    /// The longest any token of this sidecar can stay valid: a `requestState`
    /// (`state.ttl_seconds`) or a sealed handle (the longest `[[handles]] ttl_seconds`).
    /// A revocation must be kept, and a retired key stay in the ring, at least this long.
    pub fn longest_token_seconds(&self) -> u64 {
        self.handles
            .iter()
            .map(|h| h.ttl_seconds)
            .fold(self.state.ttl_seconds, u64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind() -> HandleConfig {
        HandleConfig {
            kind: "import".into(),
            issued_by: vec!["start_import".into()],
            result_pointer: "/structuredContent/importId".into(),
            accepted_by: vec!["append_rows".into()],
            argument_pointer: "/importId".into(),
            ttl_seconds: 60,
        }
    }

    #[test]
    fn problems_name_the_entry_and_field() {
        let mut problems = Vec::new();
        validate(
            &[
                kind(),
                HandleConfig {
                    result_pointer: "importId".into(),
                    accepted_by: vec![],
                    ttl_seconds: 0,
                    ..kind()
                },
            ],
            &IdempotencyConfig {
                ttl_seconds: 0,
                ..IdempotencyConfig::default()
            },
            &mut problems,
        );
        let shown: Vec<_> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "handles (MCP_STATE_GUARD_HANDLES): entry 1 (kind): the same kind is configured twice",
                "handles (MCP_STATE_GUARD_HANDLES): entry 1 (accepted_by): must list at least one tool name or glob, none empty",
                "handles (MCP_STATE_GUARD_HANDLES): entry 1 (result_pointer): must be a JSON pointer below the root, such as \"/importId\"",
                "handles (MCP_STATE_GUARD_HANDLES): entry 1 (ttl_seconds): must be 1 to 31536000",
                "idempotency.ttl_seconds (MCP_STATE_GUARD_IDEMPOTENCY__TTL_SECONDS): must be 1 to 2592000",
            ]
        );
        let mut none = Vec::new();
        validate(&[kind()], &IdempotencyConfig::default(), &mut none);
        assert!(none.is_empty(), "{none:?}");
        assert!(pointer_ok("/a~1b/~0"));
        assert!(!pointer_ok("/a~2"));
    }
}
