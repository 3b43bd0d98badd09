//! The memory the data path may hold at once (`limits.max_buffered_bytes`): one budget
//! for every byte a request holds from the client's socket until the upstream has taken
//! it, and back: request bodies while they are read and until the upstream answers (an
//! upstream that never reads holds them), whole JSON responses while they are sealed and
//! sent, the incomplete event of every SSE stream while it waits for its blank line, and
//! with a stdio upstream what the bridge holds ([`crate::stdio`]: a request's line until
//! the child's stdin took it, notifications waiting for a slow reader).
//!
//! Invariant: bytes are reserved before they are buffered, and a [`Reservation`] gives
//! them back when it is dropped, whatever path the request took (refused, forwarded, the
//! client gone mid-body). Over the budget a request is refused with 503 and counted, and
//! a stream ends with an error event (`seal_failures_total{reason="over_budget"}`);
//! nothing waits, so a flood of large bodies cannot queue up memory either.
//!
//! Bytes are reserved as they arrive, never on a declared `Content-Length` (a client
//! that announces megabytes and sends nothing must not hold the budget). On the ground
//! floor: the data path and the stdio bridge hold one instance, made by the wiring.
//!
//! What a parse of those bytes allocates on top is bounded per client body by
//! `limits.max_json_values`. The gate's parsed form ends before the upstream is called;
//! what a retry's opening holds across the store's round trips (the request's arena:
//! the arguments, the claims' copy, the questions and the answers read into it, and the
//! upstream's state) is reserved here too, before each wait ([`crate::proxy`]'s
//! `StateOpener::open`).

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;
use prometheus::IntGauge;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The shared budget, in bytes.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    /// `buffered_bytes`, kept equal to `used`.
    gauge: IntGauge,
}

/// The budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget;

impl MemoryBudget {
    pub(crate) fn new(limit: usize, gauge: IntGauge) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            gauge,
        })
    }

    #[cfg(test)]
    /// Bytes reserved right now (for the metric).
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation that can grow.
    pub(crate) fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            self.gauge.sub(bytes as i64);
        }
    }

    fn take(&self, bytes: usize) -> Result<(), OverBudget> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .map(|_| self.gauge.add(bytes as i64))
            .map_err(|_| OverBudget)
    }
}

/// Bytes held against the budget until dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Reservation {
    /// Hold `more` bytes, or fail without holding any of them.
    pub(crate) fn grow(&mut self, more: usize) -> Result<(), OverBudget> {
        self.budget.take(more)?;
        self.bytes += more;
        Ok(())
    }

    /// Hold at least `total` bytes in all.
    pub(crate) fn grow_to(&mut self, total: usize) -> Result<(), OverBudget> {
        self.grow(total.saturating_sub(self.bytes))
    }

    /// Hold exactly `total` bytes in all: more (or fail without holding any of them), or
    /// give the rest back.
    pub(crate) fn resize_to(&mut self, total: usize) -> Result<(), OverBudget> {
        if total == self.bytes {
            return Ok(());
        }
        if total > self.bytes {
            return self.grow(total - self.bytes);
        }
        self.budget.give_back(self.bytes - total);
        self.bytes = total;
        Ok(())
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// An empty reservation against the same budget, for what a request holds beside
    /// its body.
    pub(crate) fn beside(&self) -> Reservation {
        self.budget.reservation()
    }

    /// A whole body keeping these bytes reserved until it has been sent or dropped.
    pub(crate) fn hold_full(self, body: Bytes) -> crate::body::ProxyBody {
        crate::body::full_holding(body, self)
    }
}

/// Why a body could not be collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollectError {
    /// More than the per-body limit.
    TooLarge,
    /// The shared budget is spent.
    OverBudget,
    /// The body itself failed (the peer reset, a malformed chunk).
    Body,
}

/// Read a whole body of at most `limit` bytes, each byte held in `reservation` before it
/// is buffered.
pub(crate) async fn collect<B>(
    mut body: B,
    limit: usize,
    reservation: &mut Reservation,
) -> Result<Bytes, CollectError>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut buffer = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| CollectError::Body)?.into_data() else {
            continue;
        };
        let total = buffer.len() + data.len();
        if total > limit {
            return Err(CollectError::TooLarge);
        }
        reservation
            .grow_to(total)
            .map_err(|_| CollectError::OverBudget)?;
        if buffer.is_empty() && body.is_end_stream() {
            // The whole body in one chunk, as nearly every message comes: copied once, to
            // its size (a buffer grown to fit and frozen allocates again to share itself).
            return Ok(Bytes::copy_from_slice(&data));
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that comes in the given chunks.
    struct Chunks(std::collections::VecDeque<&'static [u8]>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            let chunk = self.0.pop_front();
            std::task::Poll::Ready(chunk.map(|c| Ok(http_body::Frame::data(Bytes::from(c)))))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    #[tokio::test]
    async fn a_body_is_collected_whole_from_one_chunk_or_many() {
        let budget = MemoryBudget::new(100, IntGauge::new("c", "c").unwrap());
        let collect = async |chunks: &[&'static [u8]], limit| {
            let mut reservation = budget.reservation();
            let read = collect(
                Chunks(chunks.iter().copied().collect()),
                limit,
                &mut reservation,
            );
            (read.await, reservation.bytes())
        };
        let (one, reserved) = collect(&[b"{\"a\":1}"], 50).await;
        assert_eq!(one.unwrap(), &b"{\"a\":1}"[..]);
        assert_eq!(reserved, 7);
        let (many, reserved) = collect(&[b"{\"a\"", b"", b":1", b"}"], 50).await;
        assert_eq!(many.unwrap(), &b"{\"a\":1}"[..]);
        assert_eq!(reserved, 7);
        let (empty, reserved) = collect(&[], 50).await;
        assert_eq!((empty.unwrap().len(), reserved), (0, 0));
        let (long, _) = collect(&[b"0123", b"4567"], 6).await;
        assert!(matches!(long, Err(CollectError::TooLarge)));
        let (whole_but_long, _) = collect(&[b"01234567"], 6).await;
        assert!(matches!(whole_but_long, Err(CollectError::TooLarge)));
        let (over_budget, _) = collect(&[&[b'x'; 60], &[b'x'; 60]], 200).await;
        assert!(matches!(over_budget, Err(CollectError::OverBudget)));
        assert_eq!(budget.used(), 0, "every reservation given back");
    }

    #[test]
    fn reservations_are_bounded_and_returned_on_drop() {
        let gauge = IntGauge::new("b", "b").unwrap();
        let budget = MemoryBudget::new(100, gauge.clone());
        let mut a = budget.reservation();
        a.grow(60).unwrap();
        let mut b = budget.reservation();
        assert_eq!(b.grow(41), Err(OverBudget));
        assert_eq!(budget.used(), 60, "a failed grow holds nothing");
        b.grow(40).unwrap();
        assert_eq!(budget.used(), 100);
        assert_eq!(gauge.get(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        b.grow_to(90).unwrap();
        assert_eq!(b.bytes(), 90);
        b.grow_to(10).unwrap();
        assert_eq!(b.bytes(), 90, "grow_to never shrinks");
        drop(b);
        assert_eq!(budget.used(), 0);
        assert_eq!(gauge.get(), 0);
        assert_eq!(
            budget.reservation().grow(usize::MAX),
            Err(OverBudget),
            "no overflow"
        );
    }

    #[test]
    fn a_resize_holds_what_is_buffered_now_and_gives_the_rest_back() {
        let gauge = IntGauge::new("b", "b").unwrap();
        let budget = MemoryBudget::new(100, gauge.clone());
        let mut other = budget.reservation();
        other.grow(30).unwrap();
        let mut stream = budget.reservation();
        assert!(stream.resize_to(60).is_ok());
        assert!(stream.resize_to(20).is_ok(), "an event went out");
        assert_eq!((budget.used(), gauge.get()), (50, 50));
        assert_eq!(
            stream.resize_to(71),
            Err(OverBudget),
            "30 + 71 is over the budget"
        );
        assert_eq!(stream.bytes(), 20, "a refused resize holds what it held");
        assert!(stream.resize_to(70).is_ok());
        assert!(stream.resize_to(0).is_ok());
        assert_eq!((budget.used(), gauge.get()), (30, 30));
        drop(other);
        drop(stream);
        assert_eq!((budget.used(), gauge.get()), (0, 0));
    }
}
