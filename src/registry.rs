//! The metrics' ground floor: a Prometheus registry of our own (names prefixed
//! `mcp_state_guard_`, text format 0.0.4), and families whose label values come from
//! closed sets. Each component registers and owns its families ([`crate::proxy`]'s,
//! [`crate::tools`]'s, ...); only the process's wiring holds them all.
//!
//! Invariant: a label value is only ever the `as_str` of a [`Label`], and every value of
//! every label is created at zero when its family is registered, so a wrong label cannot
//! compile, cardinality is fixed at start and dashboards and alerts see each series from
//! the first scrape. The one open label, `kid`, is bounded by the key ring; its owner
//! ([`crate::token::KeyMetrics`]) creates and removes those series with the ring.

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, TextEncoder,
};
use std::marker::PhantomData;
use std::sync::Mutex;

/// A closed set of label values: every value, and its spelling on the wire.
pub(crate) trait Label: Copy + Send + Sync + 'static {
    /// Every value the label can take.
    fn all() -> impl Iterator<Item = Self>;
    /// The label value as exposed.
    fn as_str(self) -> &'static str;
    /// Where the value stands in [`Label::all`].
    fn index(self) -> usize;
}

/// A closed label set from one list: `labels!(pub(crate) Kind { A => "a", B => "b" })`
/// gives the enum `Kind` (declared beside it, with its docs, at that visibility) its `ALL`
/// array, its `as_str` and
/// [`Label`], all from the same arms. A variant left out of the list is a
/// non-exhaustive `as_str` and does not compile, so every variant's series is created.
macro_rules! labels {
    ($vis:vis $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            /// Every value, in the order the list declares them.
            $vis const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The label value as exposed.
            $vis fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl $crate::registry::Label for $name {
            fn all() -> impl Iterator<Item = Self> {
                <$name>::ALL.into_iter()
            }
            fn as_str(self) -> &'static str {
                <$name>::as_str(self)
            }
            fn index(self) -> usize {
                let mut index = 0;
                $(
                    if matches!(self, $name::$variant) {
                        return index;
                    }
                    index += 1;
                )+
                unreachable!("{index} variants, each matched above")
            }
        }
    };
}
pub(crate) use labels;

/// Implement [`Label`] for enums that have an inherent `ALL` array and `as_str` of their
/// own (the refusal table's [`crate::error::ErrorKind`]).
macro_rules! closed_label {
    ($($label:ty),+ $(,)?) => {$(
        impl $crate::registry::Label for $label {
            fn all() -> impl Iterator<Item = Self> {
                <$label>::ALL.into_iter()
            }
            fn as_str(self) -> &'static str {
                <$label>::as_str(self)
            }
            fn index(self) -> usize {
                <$label>::ALL
                    .iter()
                    .position(|value| *value == self)
                    .expect("ALL holds every value")
            }
        }
    )+};
}
pub(crate) use closed_label;

/// Whether reading a source (a key file, certificates, a key set, a token file) gave
/// something usable (`result` label: `ok`, or `error` and the previous value stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadResult {
    Ok,
    Error,
}

impl ReadResult {
    pub(crate) fn of(ok: bool) -> Self {
        if ok {
            ReadResult::Ok
        } else {
            ReadResult::Error
        }
    }
}

labels!(pub(crate) ReadResult {
    Ok => "ok",
    Error => "error",
});

/// A family with one closed label. Each series is resolved once, when the family is
/// registered: counting is an index and an atomic add, with no label hashed, no lock
/// taken and no handle cloned per event.
pub(crate) struct Family<V: MetricVecKind, L> {
    series: Box<[V::Series]>,
    label: PhantomData<fn(L)>,
}

impl<V: MetricVecKind, L: Label> Family<V, L> {
    /// The series of `value`.
    pub(crate) fn at(&self, value: L) -> &V::Series {
        &self.series[value.index()]
    }
}

/// A family with two closed labels, resolved as [`Family`] is.
pub(crate) struct Family2<V: MetricVecKind, A, C> {
    series: Box<[V::Series]>,
    /// How many values the second label has: the row length of `series`.
    width: usize,
    labels: PhantomData<fn(A, C)>,
}

impl<V: MetricVecKind, A: Label, C: Label> Family2<V, A, C> {
    /// The series of `(first, second)`.
    pub(crate) fn at(&self, first: A, second: C) -> &V::Series {
        &self.series[first.index() * self.width + second.index()]
    }
}

/// A label's `index` is its place in `all`, or events would count on another series:
/// checked once per family, when it is registered.
fn in_order<L: Label>() {
    for (place, value) in L::all().enumerate() {
        assert_eq!(value.index(), place, "{} is out of place", value.as_str());
    }
}

/// A labelled metric vector and the type of its series.
pub(crate) trait MetricVecKind {
    type Series;
}

impl<B: MetricVecBuilder> MetricVecKind for MetricVec<B> {
    type Series = B::M;
}

/// One unit of a gauge, given back when dropped (an open connection, an open stream).
#[derive(Debug)]
pub(crate) struct Held(IntGauge);

impl Held {
    pub(crate) fn take(gauge: &IntGauge) -> Self {
        gauge.inc();
        Held(gauge.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

type Refresh = Box<dyn Fn() + Send + Sync>;

/// The sidecar's registry.
pub struct Registry {
    inner: prometheus::Registry,
    /// Gauges brought up to date before each exposition (ages, task counts).
    on_scrape: Mutex<Vec<Refresh>>,
}

impl Registry {
    pub fn new() -> Self {
        Self {
            inner: prometheus::Registry::new_custom(Some("mcp_state_guard".into()), None)
                .expect("a static prefix is valid"),
            on_scrape: Mutex::new(Vec::new()),
        }
    }

    /// Register a family whose labels its owner manages (`kid`, `build_info`).
    pub(crate) fn register<C: Collector + Clone + 'static>(&self, collector: C) -> C {
        self.inner
            .register(Box::new(collector.clone()))
            .expect("metric names are unique and valid");
        collector
    }

    pub(crate) fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).expect("a valid counter"))
    }

    pub(crate) fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("a valid gauge"))
    }

    pub(crate) fn float_gauge(&self, name: &str, help: &str) -> Gauge {
        self.register(Gauge::new(name, help).expect("a valid gauge"))
    }

    pub(crate) fn counters<L: Label>(
        &self,
        name: &str,
        help: &str,
        label: &str,
    ) -> Family<IntCounterVec, L> {
        self.family(IntCounterVec::new(Opts::new(name, help), &[label]).expect("a valid counter"))
    }

    pub(crate) fn gauges<L: Label>(
        &self,
        name: &str,
        help: &str,
        label: &str,
    ) -> Family<IntGaugeVec, L> {
        self.family(IntGaugeVec::new(Opts::new(name, help), &[label]).expect("a valid gauge"))
    }

    pub(crate) fn float_gauges<L: Label>(
        &self,
        name: &str,
        help: &str,
        label: &str,
    ) -> Family<GaugeVec, L> {
        self.family(GaugeVec::new(Opts::new(name, help), &[label]).expect("a valid gauge"))
    }

    pub(crate) fn histograms<L: Label>(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
        label: &str,
    ) -> Family<HistogramVec, L> {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.family(HistogramVec::new(opts, &[label]).expect("a valid histogram"))
    }

    pub(crate) fn counters2<A: Label, C: Label>(
        &self,
        name: &str,
        help: &str,
        labels: [&str; 2],
    ) -> Family2<IntCounterVec, A, C> {
        self.family2(IntCounterVec::new(Opts::new(name, help), &labels).expect("a valid counter"))
    }

    pub(crate) fn histograms2<A: Label, C: Label>(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
        labels: [&str; 2],
    ) -> Family2<HistogramVec, A, C> {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.family2(HistogramVec::new(opts, &labels).expect("a valid histogram"))
    }

    fn family<B, L>(&self, vec: MetricVec<B>) -> Family<MetricVec<B>, L>
    where
        B: MetricVecBuilder + 'static,
        L: Label,
    {
        let series = L::all()
            .map(|value| vec.with_label_values(&[value.as_str()]))
            .collect();
        in_order::<L>();
        self.register(vec);
        Family {
            series,
            label: PhantomData,
        }
    }

    fn family2<B, A, C>(&self, vec: MetricVec<B>) -> Family2<MetricVec<B>, A, C>
    where
        B: MetricVecBuilder + 'static,
        A: Label,
        C: Label,
    {
        let series = A::all()
            .flat_map(|first| C::all().map(move |second| (first, second)))
            .map(|(first, second)| vec.with_label_values(&[first.as_str(), second.as_str()]))
            .collect();
        in_order::<A>();
        in_order::<C>();
        self.register(vec);
        Family2 {
            series,
            width: C::all().count(),
            labels: PhantomData,
        }
    }

    /// Run `refresh` before every exposition (a gauge computed from a clock or the
    /// runtime rather than counted).
    pub(crate) fn on_scrape(&self, refresh: impl Fn() + Send + Sync + 'static) {
        self.on_scrape
            .lock()
            .expect("not poisoned")
            .push(Box::new(refresh));
    }

    /// Text exposition format 0.0.4.
    pub(crate) fn render(&self) -> String {
        for refresh in self.on_scrape.lock().expect("not poisoned").iter() {
            refresh();
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.inner.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Colour {
        Red,
        Blue,
    }

    impl Colour {
        const ALL: [Colour; 2] = [Colour::Red, Colour::Blue];

        fn as_str(self) -> &'static str {
            match self {
                Colour::Red => "red",
                Colour::Blue => "blue",
            }
        }
    }

    closed_label!(Colour);

    #[test]
    fn every_label_value_exists_at_zero_and_counts_apart() {
        let registry = Registry::new();
        let one = registry.counters::<Colour>("paints_total", "Paints.", "colour");
        let two =
            registry.counters2::<Colour, ReadResult>("reads_total", "Reads.", ["colour", "result"]);
        one.at(Colour::Blue).inc();
        two.at(Colour::Red, ReadResult::Error).inc_by(2);
        let text = registry.render();
        assert!(text.contains("mcp_state_guard_paints_total{colour=\"red\"} 0"));
        assert!(text.contains("mcp_state_guard_paints_total{colour=\"blue\"} 1"));
        assert!(text.contains("mcp_state_guard_reads_total{colour=\"blue\",result=\"ok\"} 0"));
        assert!(text.contains("mcp_state_guard_reads_total{colour=\"red\",result=\"error\"} 2"));
    }

    #[test]
    fn scrape_hooks_run_before_each_exposition() {
        let registry = Registry::new();
        let gauge = registry.gauge("scrapes", "Scrapes.");
        let seen = gauge.clone();
        registry.on_scrape(move || seen.inc());
        assert!(registry.render().contains("mcp_state_guard_scrapes 1"));
        assert!(registry.render().contains("mcp_state_guard_scrapes 2"));
    }

    #[test]
    #[should_panic(expected = "blue is out of place")]
    fn a_label_whose_index_is_not_its_place_is_a_bug() {
        #[derive(Clone, Copy)]
        struct Misplaced(Colour);
        impl Label for Misplaced {
            fn all() -> impl Iterator<Item = Self> {
                Colour::ALL.into_iter().map(Misplaced)
            }
            fn as_str(self) -> &'static str {
                self.0.as_str()
            }
            fn index(self) -> usize {
                0
            }
        }
        Registry::new().counters::<Misplaced>("misplaced_total", "Misplaced.", "colour");
    }

    #[test]
    #[should_panic(expected = "unique")]
    fn a_name_registered_twice_is_a_bug() {
        let registry = Registry::new();
        registry.counter("twice_total", "Once.");
        registry.counter("twice_total", "Twice.");
    }
}
