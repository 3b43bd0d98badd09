//! One caller's share of each bounded shared resource: consumed single-use ids, the
//! idempotency records' bytes and their calls in flight, client connections, and the
//! requests at a stdio upstream's child.
//!
//! Invariant: every share is at least 1 (or, for bytes, room for one write) and at most
//! the bound it is a share of, whether it was set or derived; an unset share is a fixed
//! fraction of its bound, so raising the bound raises the share with it.

use super::{Config, SingleUseConfig};

/// An unset `single_use.max_entries_per_principal` is this fraction of the bound.
const ENTRIES_SHARE_DIVISOR: usize = 10;
/// An unset `idempotency.max_bytes_per_principal` is this fraction of the budget.
const BYTES_SHARE_DIVISOR: u64 = 8;
/// An unset `limits.max_connections_per_peer` is this fraction of the limit.
const CONNECTIONS_SHARE_DIVISOR: usize = 4;
/// An unset `upstream_command.queue_max_per_principal` is this fraction of `queue_max`.
const QUEUE_SHARE_DIVISOR: usize = 4;
/// An unset `upstream_command.max_sessions_per_principal` is this fraction of
/// `max_sessions`.
const SESSION_SHARE_DIVISOR: usize = 4;
/// What a reservation is charged beyond `max_result_bytes`: the store's per-record
/// overhead (768 bytes, measured by `cargo bench --bench store`) and a key and value of
/// a few hundred bytes, rounded up.
const RESERVATION_SLACK_BYTES: u64 = 2048;

impl SingleUseConfig {
    /// Consumed ids one caller may hold in the memory store.
    pub(crate) fn entries_share(&self) -> usize {
        self.max_entries_per_principal
            .unwrap_or(self.memory_max_entries / ENTRIES_SHARE_DIVISOR)
            .clamp(1, self.memory_max_entries.max(1))
    }
}

impl Config {
    /// Bytes one caller's idempotency records may be charged in the memory store.
    pub(crate) fn idempotency_bytes_share(&self) -> u64 {
        let idempotency = &self.idempotency;
        let one_write = idempotency.max_result_bytes as u64 + RESERVATION_SLACK_BYTES;
        let budget = idempotency.memory_max_bytes;
        match idempotency.max_bytes_per_principal {
            Some(share) => share.min(budget),
            None => (budget / BYTES_SHARE_DIVISOR)
                .max(2 * one_write)
                .min(budget),
        }
    }

    /// Connections one client address may hold open.
    pub(crate) fn connections_share(&self) -> usize {
        let limit = self.limits.max_connections;
        self.limits
            .max_connections_per_peer
            .unwrap_or(limit / CONNECTIONS_SHARE_DIVISOR)
            .clamp(1, limit.max(1))
    }

    /// 2025-era sessions one caller may have open with a stdio upstream.
    pub(crate) fn upstream_command_session_share(&self) -> usize {
        let limit = self.upstream_command.max_sessions;
        self.upstream_command
            .max_sessions_per_principal
            .unwrap_or(limit / SESSION_SHARE_DIVISOR)
            .clamp(1, limit.max(1))
    }

    /// Requests one caller may have at a stdio upstream's child.
    pub(crate) fn upstream_command_queue_share(&self) -> usize {
        let limit = self.upstream_command.queue_max;
        self.upstream_command
            .queue_max_per_principal
            .unwrap_or(limit / QUEUE_SHARE_DIVISOR)
            .clamp(1, limit.max(1))
    }

    /// The share keys' rules: set, each is at least 1 (bytes: one write) and at most its
    /// bound.
    pub(super) fn validate_shares(&self, problem: &mut impl FnMut(&str, String)) {
        if let Some(share) = self.single_use.max_entries_per_principal
            && !(1..=self.single_use.memory_max_entries).contains(&share)
        {
            problem(
                "single_use.max_entries_per_principal",
                format!(
                    "must be 1 to single_use.memory_max_entries ({})",
                    self.single_use.memory_max_entries
                ),
            );
        }
        let idempotency = &self.idempotency;
        if let Some(share) = idempotency.max_bytes_per_principal {
            let least = idempotency.max_result_bytes as u64 + RESERVATION_SLACK_BYTES;
            if !(least..=idempotency.memory_max_bytes).contains(&share) {
                problem(
                    "idempotency.max_bytes_per_principal",
                    format!(
                        "must be idempotency.max_result_bytes + {RESERVATION_SLACK_BYTES} \
                         ({least}, one write) to idempotency.memory_max_bytes ({})",
                        idempotency.memory_max_bytes
                    ),
                );
            }
        }
        if !(1..=100_000).contains(&idempotency.max_in_flight_per_principal) {
            problem(
                "idempotency.max_in_flight_per_principal",
                "must be 1 to 100000".to_owned(),
            );
        }
        if let Some(share) = self.limits.max_connections_per_peer
            && !(1..=self.limits.max_connections).contains(&share)
        {
            problem(
                "limits.max_connections_per_peer",
                format!(
                    "must be 1 to limits.max_connections ({})",
                    self.limits.max_connections
                ),
            );
        }
        if let Some(share) = self.upstream_command.queue_max_per_principal
            && !(1..=self.upstream_command.queue_max).contains(&share)
        {
            problem(
                "upstream_command.queue_max_per_principal",
                format!(
                    "must be 1 to upstream_command.queue_max ({})",
                    self.upstream_command.queue_max
                ),
            );
        }
        if let Some(share) = self.upstream_command.max_sessions_per_principal
            && !(1..=self.upstream_command.max_sessions).contains(&share)
        {
            problem(
                "upstream_command.max_sessions_per_principal",
                format!(
                    "must be 1 to upstream_command.max_sessions ({})",
                    self.upstream_command.max_sessions
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::validate::tests::{assert_only, invalid};

    #[test]
    fn unset_shares_are_fractions_of_their_bounds() {
        let config = Config::default();
        assert_eq!(config.single_use.entries_share(), 10_000);
        assert_eq!(config.idempotency_bytes_share(), 32 * 1024 * 1024);
        assert_eq!(config.connections_share(), 256);
        assert_eq!(config.upstream_command_queue_share(), 64);
        assert_eq!(config.idempotency.max_in_flight_per_principal, 16);
        let mut small = Config::default();
        small.single_use.memory_max_entries = 3;
        small.limits.max_connections = 2;
        small.upstream_command.queue_max = 3;
        small.idempotency.max_result_bytes = 1000;
        small.idempotency.memory_max_bytes = 6000;
        assert_eq!(small.single_use.entries_share(), 1, "never zero");
        assert_eq!(small.connections_share(), 1);
        assert_eq!(small.upstream_command_queue_share(), 1);
        assert_eq!(small.idempotency_bytes_share(), 6000, "room for two writes");
        small.idempotency.memory_max_bytes = 1 << 30;
        assert_eq!(small.idempotency_bytes_share(), 1 << 27);
    }

    #[test]
    fn set_shares_are_kept_within_their_bounds() {
        let mut config = Config::default();
        config.single_use.max_entries_per_principal = Some(7);
        config.idempotency.max_bytes_per_principal = Some(5 << 20);
        config.limits.max_connections_per_peer = Some(1024);
        config.upstream_command.queue_max_per_principal = Some(256);
        assert_eq!(config.single_use.entries_share(), 7);
        assert_eq!(config.upstream_command_queue_share(), 256);
        assert_eq!(config.idempotency_bytes_share(), 5 << 20);
        assert_eq!(config.connections_share(), 1024);
        assert!(config.validate().is_empty(), "{:?}", config.validate());
    }

    #[test]
    fn share_rules_name_their_key() {
        assert_only(
            &invalid(|c| c.single_use.max_entries_per_principal = Some(0)),
            "single_use.max_entries_per_principal",
            "must be 1 to",
        );
        assert_only(
            &invalid(|c| c.single_use.max_entries_per_principal = Some(100_001)),
            "single_use.max_entries_per_principal",
            "must be 1 to",
        );
        assert_only(
            &invalid(|c| c.idempotency.max_bytes_per_principal = Some(1000)),
            "idempotency.max_bytes_per_principal",
            "one write",
        );
        assert_only(
            &invalid(|c| c.idempotency.max_in_flight_per_principal = 0),
            "idempotency.max_in_flight_per_principal",
            "must be 1 to",
        );
        assert_only(
            &invalid(|c| c.limits.max_connections_per_peer = Some(1025)),
            "limits.max_connections_per_peer",
            "must be 1 to",
        );
        for share in [0, 257] {
            assert_only(
                &invalid(|c| c.upstream_command.queue_max_per_principal = Some(share)),
                "upstream_command.queue_max_per_principal",
                "must be 1 to upstream_command.queue_max",
            );
        }
    }
}
