//! The key ring's families: tokens and sealed handles minted and opened per key id, the
//! minting key (`key_ring_minting{kid}`), the key file's reloads and age.
//!
//! Invariant: `kid` is the one label not from a closed enum; it comes only from the key
//! ring in use: a series exists for each key of the ring (created at zero when the ring
//! is loaded) and is removed when a reload drops the key, so the number of series is
//! bounded by the ring and a retired key's series ends.

use super::KeyId;
use crate::registry::{Family, ReadResult, Registry};
use prometheus::{Gauge, IntCounter, IntCounterVec, IntGaugeVec, Opts};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Per-key counts, the minting key, key file reloads and age.
pub struct KeyMetrics {
    /// The per-kid counter families, in [`PerKid`]'s order.
    per_kid: [IntCounterVec; 4],
    minting: IntGaugeVec,
    reloads: Family<IntCounterVec, ReadResult>,
    /// The ring's key ids, minting key first, each with its series of the per-kid
    /// families resolved when the ring was loaded (so an increment is an atomic add,
    /// not a label lookup). Read-locked around every per-kid increment and write-locked
    /// around a ring change, so an increment racing a reload can never count into the
    /// series of a key the reload removed.
    kids: RwLock<Vec<KidSeries>>,
    /// When the key file was last read back valid; `None` without a key file.
    confirmed: Arc<Mutex<Option<Instant>>>,
}

impl KeyMetrics {
    pub(crate) fn register(registry: &Registry) -> Self {
        let per_kid = |name: &str, help: &str| {
            registry.register(
                IntCounterVec::new(Opts::new(name, help), &["kid"]).expect("a valid counter"),
            )
        };
        let confirmed = Arc::new(Mutex::new(None::<Instant>));
        let age = registry.float_gauge(
            "key_ring_age_seconds",
            "Seconds since the key file was last read back valid (grows only while it is unreadable or invalid; 0 without a key file).",
        );
        registry.on_scrape({
            let confirmed = confirmed.clone();
            move || set_age(&age, &confirmed)
        });
        Self {
            per_kid: [
                per_kid(
                    "tokens_minted_total",
                    "Tokens minted, by the key id (8 hex digits) of the ring's minting key.",
                ),
                per_kid(
                    "tokens_opened_total",
                    "Tokens that verified, by the key id that opened them; zero for an old key means it can be retired.",
                ),
                per_kid(
                    "handles_minted_total",
                    "Sealed handles minted, by the key id of the ring's minting key.",
                ),
                per_kid(
                    "handles_opened_total",
                    "Sealed handles that opened for their caller, by the key id that opened them; with tokens_opened_total, zero for an old key means it can be retired.",
                ),
            ],
            minting: registry.register(
                IntGaugeVec::new(
                    Opts::new(
                        "key_ring_minting",
                        "1 for the ring's minting key, 0 for the keys that only open, by key id.",
                    ),
                    &["kid"],
                )
                .expect("a valid gauge"),
            ),
            reloads: registry.counters(
                "key_reloads_total",
                "Key file changes seen, by result (error keeps the previous keys).",
                "result",
            ),
            kids: RwLock::new(Vec::new()),
            confirmed,
        }
    }

    pub(crate) fn key_reload(&self, ok: bool) {
        self.reloads.at(ReadResult::of(ok)).inc();
    }

    pub fn key_reload_count(&self, ok: bool) -> u64 {
        self.reloads.at(ReadResult::of(ok)).get()
    }

    /// A token was minted under `kid` (counted only while `kid` is in the ring).
    pub(crate) fn token_minted(&self, kid: KeyId) {
        self.per_kid(PerKid::Minted, kid);
    }

    /// A token opened and verified under `kid`.
    pub(crate) fn token_opened(&self, kid: KeyId) {
        self.per_kid(PerKid::Opened, kid);
    }

    /// A sealed handle was minted under `kid`.
    pub(crate) fn handle_minted(&self, kid: KeyId) {
        self.per_kid(PerKid::HandlesMinted, kid);
    }

    /// A sealed handle opened under `kid`.
    pub(crate) fn handle_opened(&self, kid: KeyId) {
        self.per_kid(PerKid::HandlesOpened, kid);
    }

    fn per_kid(&self, family: PerKid, kid: KeyId) {
        let kids = self.kids.read().expect("not poisoned");
        if let Some(series) = kids.iter().find(|series| series.kid == kid) {
            series.counters[family as usize].inc();
        }
    }

    /// A key ring is in use: a series per key (new keys start at zero), the series of
    /// keys it no longer holds removed, the minting key marked. `from_file`: it was read
    /// from the key file, whose age the ring age gauge now counts from.
    pub(crate) fn key_ring_loaded(&self, ring: &[KeyId], from_file: bool) {
        let mut kids = self.kids.write().expect("not poisoned");
        for gone in kids.iter().filter(|series| !ring.contains(&series.kid)) {
            let label = gone.kid.hex();
            for family in &self.per_kid {
                let _ = family.remove_label_values(&[label.as_str()]);
            }
            let _ = self.minting.remove_label_values(&[label.as_str()]);
        }
        let mut series = Vec::with_capacity(ring.len());
        for (position, &kid) in ring.iter().enumerate() {
            let label = kid.hex();
            series.push(KidSeries {
                kid,
                counters: (self.per_kid.each_ref())
                    .map(|family| family.with_label_values(&[label.as_str()])),
            });
            self.minting
                .with_label_values(&[label.as_str()])
                .set(i64::from(position == 0));
        }
        *kids = series;
        if from_file {
            self.key_file_confirmed();
        }
    }

    /// The key file was read again and still holds the ring in use.
    pub(crate) fn key_file_confirmed(&self) {
        *self.confirmed.lock().expect("not poisoned") = Some(Instant::now());
    }

    /// How long since the key file was last read back valid (`None`: no key file).
    pub fn key_ring_age(&self) -> Option<Duration> {
        let confirmed = *self.confirmed.lock().expect("not poisoned");
        confirmed.map(|at| at.elapsed())
    }

    /// Read a per-kid handle counter back (tests).
    pub fn handles_count(&self, minted: bool, kid: KeyId) -> Option<u64> {
        let family = if minted {
            PerKid::HandlesMinted
        } else {
            PerKid::HandlesOpened
        };
        self.per_kid_count(family, kid)
    }

    /// Read a per-kid token counter back (tests, the runbook's arithmetic).
    pub fn tokens_count(&self, minted: bool, kid: KeyId) -> Option<u64> {
        let family = if minted {
            PerKid::Minted
        } else {
            PerKid::Opened
        };
        self.per_kid_count(family, kid)
    }

    fn per_kid_count(&self, family: PerKid, kid: KeyId) -> Option<u64> {
        let kids = self.kids.read().expect("not poisoned");
        let series = kids.iter().find(|series| series.kid == kid)?;
        Some(series.counters[family as usize].get())
    }
}

/// The per-kid families: their place in `KeyMetrics::per_kid` and in a key's series.
#[derive(Debug, Clone, Copy)]
enum PerKid {
    Minted,
    Opened,
    HandlesMinted,
    HandlesOpened,
}

/// One key of the ring in use and its series of the per-kid families (the same counters
/// the families expose, resolved once), in [`PerKid`]'s order.
struct KidSeries {
    kid: KeyId,
    counters: [IntCounter; 4],
}

/// Bring the age gauge up to date (before every exposition).
fn set_age(age: &Gauge, confirmed: &Mutex<Option<Instant>>) {
    let confirmed = *confirmed.lock().expect("not poisoned");
    age.set(confirmed.map_or(0.0, |at| at.elapsed().as_secs_f64()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::KeyRing;

    fn kids(secrets: &[&str]) -> Vec<KeyId> {
        KeyId::of_ring(&KeyRing::from_secrets(secrets, "t").unwrap())
    }

    const A: &str = "0123456789abcdef0123456789abcdef-ops-metrics-a";
    const B: &str = "0123456789abcdef0123456789abcdef-ops-metrics-b";

    #[test]
    fn kid_series_follow_the_ring() {
        let registry = Registry::new();
        let m = KeyMetrics::register(&registry);
        let (a, b) = (kids(&[A])[0], kids(&[B])[0]);
        m.key_ring_loaded(&[a], true);
        m.token_minted(a);
        m.token_opened(a);
        // A key not in the ring gets no series, whatever asks.
        m.token_opened(b);
        let text = registry.render();
        assert!(text.contains(&format!("tokens_minted_total{{kid=\"{a}\"}} 1")));
        assert!(text.contains(&format!("key_ring_minting{{kid=\"{a}\"}} 1")));
        assert!(!text.contains(&b.to_string()), "{text}");
        // Rotation phase 1 then 2: [a, b] -> [b, a]; then b alone: a's series end.
        m.key_ring_loaded(&[a, b], true);
        m.key_ring_loaded(&[b, a], true);
        m.token_opened(a);
        let text = registry.render();
        assert!(text.contains(&format!("tokens_opened_total{{kid=\"{a}\"}} 2")));
        assert!(text.contains(&format!("tokens_minted_total{{kid=\"{b}\"}} 0")));
        assert!(text.contains(&format!("key_ring_minting{{kid=\"{a}\"}} 0")));
        assert!(text.contains(&format!("key_ring_minting{{kid=\"{b}\"}} 1")));
        m.key_ring_loaded(&[b], true);
        let text = registry.render();
        assert!(!text.contains(&a.to_string()), "{text}");
        assert_eq!(m.tokens_count(false, a), None);
        assert_eq!(m.tokens_count(false, b), Some(0));
        // A retired key counts nowhere; brought back, its series starts again at zero,
        // and each family's resolved series is the one the exposition shows.
        m.token_opened(a);
        m.handle_minted(b);
        m.handle_opened(b);
        m.handle_opened(b);
        assert!(!registry.render().contains(&a.to_string()));
        m.key_ring_loaded(&[b, a], true);
        m.token_minted(b);
        let text = registry.render();
        assert!(text.contains(&format!("tokens_opened_total{{kid=\"{a}\"}} 0")));
        assert!(text.contains(&format!("tokens_minted_total{{kid=\"{b}\"}} 1")));
        assert!(text.contains(&format!("handles_minted_total{{kid=\"{b}\"}} 1")));
        assert!(text.contains(&format!("handles_opened_total{{kid=\"{b}\"}} 2")));
        assert_eq!(m.handles_count(false, b), Some(2));
        assert_eq!(m.tokens_count(true, b), Some(1));
    }

    #[test]
    fn key_age_counts_from_the_last_confirmation() {
        let registry = Registry::new();
        let m = KeyMetrics::register(&registry);
        assert!(
            registry
                .render()
                .contains("mcp_state_guard_key_ring_age_seconds 0\n")
        );
        assert_eq!(m.key_ring_age(), None);
        m.key_file_confirmed();
        assert!(m.key_ring_age().unwrap() < Duration::from_secs(5));
        assert!(
            !registry
                .render()
                .contains("mcp_state_guard_key_ring_age_seconds 0\n")
        );
    }
}
