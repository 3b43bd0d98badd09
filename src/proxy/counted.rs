//! Counting what a rewriter does with a stream: each event sealed, passed or withheld
//! (`sse_events_total`), and the stream itself while it is open (`sse_streams_open`).
//!
//! Invariant: [`Counted`] changes no byte: it forwards every call to the rewriter it
//! wraps and returns its answer unchanged; the open-stream count is given back when the
//! stream's body is dropped (its end, or the client going away).

use super::metrics::{PathMetrics, SseEvent};
use crate::registry::Held;
use crate::sse::{EventRewriter, Rewrite, StreamFailure};
use bytes::Bytes;
use std::sync::Arc;

/// A rewriter whose decisions are counted.
pub(crate) struct Counted<R> {
    inner: R,
    metrics: Arc<PathMetrics>,
    _open: Held,
}

impl<R: EventRewriter> Counted<R> {
    /// Wrap `inner`; the stream counts as open from now until this is dropped.
    pub(crate) fn new(inner: R, metrics: &Arc<PathMetrics>) -> Self {
        Self {
            inner,
            _open: metrics.sse_stream(),
            metrics: metrics.clone(),
        }
    }

    fn count(&self, rewrite: &Rewrite) {
        self.metrics.sse_event(match rewrite {
            Rewrite::Keep => SseEvent::Passed,
            Rewrite::Replace(_) => SseEvent::Sealed,
            Rewrite::ReplaceAndEnd(_) => SseEvent::Withheld,
        });
    }
}

impl<R: EventRewriter> EventRewriter for Counted<R> {
    fn rewrite(&mut self, event: &[u8]) -> Rewrite {
        let rewrite = self.inner.rewrite(event);
        self.count(&rewrite);
        rewrite
    }

    fn fail(&mut self, failure: StreamFailure) -> Bytes {
        self.metrics.sse_event(SseEvent::Withheld);
        self.inner.fail(failure)
    }

    fn finish(&mut self, leftover: &[u8]) -> Rewrite {
        let rewrite = self.inner.finish(leftover);
        self.count(&rewrite);
        rewrite
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seals events that say `state`, withholds those that say `bad`, passes the rest.
    struct Judge;

    impl EventRewriter for Judge {
        fn rewrite(&mut self, event: &[u8]) -> Rewrite {
            if event.starts_with(b"state") {
                Rewrite::Replace(Bytes::from_static(b"sealed\n\n"))
            } else if event.starts_with(b"bad") {
                Rewrite::ReplaceAndEnd(Bytes::from_static(b"error\n\n"))
            } else {
                Rewrite::Keep
            }
        }

        fn fail(&mut self, _: StreamFailure) -> Bytes {
            Bytes::from_static(b"failed\n\n")
        }

        fn finish(&mut self, leftover: &[u8]) -> Rewrite {
            self.rewrite(leftover)
        }
    }

    #[test]
    fn every_decision_is_counted_and_the_stream_while_open() {
        let metrics = Arc::new(PathMetrics::register(&crate::registry::Registry::new()));
        let mut counted = Counted::new(Judge, &metrics);
        assert_eq!(metrics.sse_streams_open(), 1);
        assert!(matches!(counted.rewrite(b": ping\n\n"), Rewrite::Keep));
        assert!(
            matches!(counted.rewrite(b"state\n\n"), Rewrite::Replace(b) if &b[..] == b"sealed\n\n")
        );
        assert!(matches!(counted.finish(b"bad"), Rewrite::ReplaceAndEnd(_)));
        assert_eq!(
            &counted.fail(StreamFailure::UpstreamError)[..],
            b"failed\n\n"
        );
        assert_eq!(metrics.sse_event_count(SseEvent::Passed), 1);
        assert_eq!(metrics.sse_event_count(SseEvent::Sealed), 1);
        assert_eq!(metrics.sse_event_count(SseEvent::Withheld), 2);
        drop(counted);
        assert_eq!(metrics.sse_streams_open(), 0);
    }
}
