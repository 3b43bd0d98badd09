//! Validation of the operational settings: connection limits, HTTP/2 limits, the
//! upstream pool and readiness checks. Invariant: like every rule in `validate.rs`, each
//! failure is one [`ConfigProblem`](super::ConfigProblem) naming its key, and every rule runs in the same pass.

use super::Config;

/// The largest `limits.max_connections` accepted.
const MAX_CONNECTIONS: usize = 1 << 20;

impl Config {
    /// Connection limits, pool and readiness settings.
    pub(super) fn validate_operations(&self, problem: &mut impl FnMut(&str, String)) {
        let limits = &self.limits;
        for (key, value, min) in [
            ("limits.max_connections", limits.max_connections as u64, 1),
            (
                "limits.http2_max_concurrent_streams",
                u64::from(limits.http2_max_concurrent_streams),
                1,
            ),
            (
                "limits.http2_max_header_list_bytes",
                u64::from(limits.http2_max_header_list_bytes),
                1024,
            ),
            ("timeouts.client_idle_ms", self.timeouts.client_idle_ms, 1),
            (
                "timeouts.upstream_idle_ms",
                self.timeouts.upstream_idle_ms,
                1,
            ),
            (
                "readyz.upstream_timeout_ms",
                self.readyz.upstream_timeout_ms,
                1,
            ),
        ] {
            if value < min {
                problem(key, format!("must be at least {min}"));
            }
        }
        // Permits of a semaphore; far beyond any file descriptor limit anyway.
        if limits.max_connections > MAX_CONNECTIONS {
            problem(
                "limits.max_connections",
                format!("must be at most {MAX_CONNECTIONS}"),
            );
        }
        let age = self.readyz.max_key_age_seconds;
        // The age grows between two polls of a healthy file: a bound under two polls
        // would flap.
        let floor = (2 * self.state.reload_interval_ms).div_ceil(1000);
        if age != 0 && age < floor {
            problem(
                "readyz.max_key_age_seconds",
                format!(
                    "must be 0 (no check) or at least {floor} (twice state.reload_interval_ms)"
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::validate::tests::{assert_only, invalid};

    /// A key, what its problem says, and the change that causes it.
    type Case = (&'static str, &'static str, fn(&mut Config));

    #[test]
    fn operations_rules() {
        let cases: [Case; 8] = [
            ("limits.max_connections", "at least 1", |c| {
                c.limits.max_connections = 0
            }),
            ("limits.max_connections", "at most", |c| {
                c.limits.max_connections = usize::MAX
            }),
            ("limits.http2_max_concurrent_streams", "at least 1", |c| {
                c.limits.http2_max_concurrent_streams = 0
            }),
            ("limits.http2_max_header_list_bytes", "at least 1024", |c| {
                c.limits.http2_max_header_list_bytes = 1023
            }),
            ("timeouts.client_idle_ms", "at least 1", |c| {
                c.timeouts.client_idle_ms = 0
            }),
            ("timeouts.upstream_idle_ms", "at least 1", |c| {
                c.timeouts.upstream_idle_ms = 0
            }),
            ("readyz.upstream_timeout_ms", "at least 1", |c| {
                c.readyz.upstream_timeout_ms = 0
            }),
            ("readyz.max_key_age_seconds", "at least 4", |c| {
                c.readyz.max_key_age_seconds = 3
            }),
        ];
        for (key, needle, change) in cases {
            assert_only(&invalid(change), key, needle);
        }
        assert!(invalid(|c| c.readyz.max_key_age_seconds = 0).is_empty());
        assert!(invalid(|c| c.readyz.max_key_age_seconds = 4).is_empty());
        assert!(invalid(|c| c.limits.upstream_max_idle_per_host = 0).is_empty());
        // The floor follows the poll interval.
        let slow = invalid(|c| {
            c.state.reload_interval_ms = 30_000;
            c.readyz.max_key_age_seconds = 59;
        });
        assert_only(&slow, "readyz.max_key_age_seconds", "at least 60");
    }
}
