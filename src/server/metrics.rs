//! The connection families: client connections open (`client_connections_open{listener}`)
//! and times a listener stopped accepting at its limit
//! (`connection_limit_waits_total{listener}`).
//!
//! Invariant: as for every family, labels come from a closed set ([`Listener`]) and
//! every series exists at zero from the first scrape; an open connection is counted by a
//! [`Held`] guard, so it is given back however the connection ends.

use crate::registry::{Family, Held, Registry};
use prometheus::{IntCounterVec, IntGaugeVec};

/// Which listener a connection came in on (`listener` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Proxy,
    Admin,
}

crate::registry::labels!(pub Listener {
    Proxy => "proxy",
    Admin => "admin",
});

/// Open connections and limit waits, per listener.
pub struct ConnectionMetrics {
    open: Family<IntGaugeVec, Listener>,
    limit_waits: Family<IntCounterVec, Listener>,
}

impl ConnectionMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        Self {
            open: registry.gauges(
                "client_connections_open",
                "Client connections open now, by listener.",
                "listener",
            ),
            limit_waits: registry.counters(
                "connection_limit_waits_total",
                "Times a listener stopped accepting because limits.max_connections (admin: a fixed allowance) were open.",
                "listener",
            ),
        }
    }

    /// Count a client connection as open until the guard is dropped.
    pub(crate) fn connection(&self, listener: Listener) -> Held {
        Held::take(self.open.at(listener))
    }

    pub(crate) fn connection_limit_reached(&self, listener: Listener) {
        self.limit_waits.at(listener).inc();
    }

    pub fn connections_open(&self, listener: Listener) -> i64 {
        self.open.at(listener).get()
    }

    pub fn connection_limit_count(&self, listener: Listener) -> u64 {
        self.limit_waits.at(listener).get()
    }
}
