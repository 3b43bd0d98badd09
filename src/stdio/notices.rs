//! The notifications waiting for one caller's event stream: each held in the memory
//! budget from the moment the child's reader hands it over until the stream takes it.
//!
//! Invariant: at most [`NOTICES_BUFFERED`] notifications wait per caller, and the bytes of
//! every waiting one are reserved; a caller past either bound is cut off ([`Notices::cut`]
//! drops what waited and gives its bytes back at once, without waiting for the stream to
//! be polled, since a caller that never reads never polls it).

use super::metrics::CutOff;
use crate::budget::{MemoryBudget, Reservation};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Notifications one caller may have waiting; one more cuts it off.
pub(crate) const NOTICES_BUFFERED: usize = 64;

/// One caller's waiting notifications, shared by its route (which pushes) and its
/// stream (which takes).
pub(crate) struct Notices {
    state: Mutex<NoticeState>,
}

struct NoticeState {
    queue: VecDeque<Bytes>,
    /// The bytes of `queue`, reserved.
    held: Reservation,
    waker: Option<Waker>,
    /// No more will come (the route closed, or the caller was cut off).
    closed: bool,
}

impl Notices {
    pub(crate) fn new(budget: &Arc<MemoryBudget>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(NoticeState {
                queue: VecDeque::new(),
                held: budget.reservation(),
                waker: None,
                closed: false,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, NoticeState> {
        // Each change is a few field updates that cannot panic half-way.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hand a notification to the stream, or say why the caller must be cut off.
    pub(crate) fn push(&self, notice: Bytes) -> Result<(), CutOff> {
        let mut state = self.state();
        if state.queue.len() >= NOTICES_BUFFERED {
            return Err(CutOff::SlowReader);
        }
        state
            .held
            .grow(notice.len())
            .map_err(|_| CutOff::OverBudget)?;
        state.queue.push_back(notice);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    /// No more will come: the stream ends after what waits.
    pub(crate) fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// The caller is cut off: what waited is dropped and its bytes given back now.
    pub(crate) fn cut(&self) {
        let mut state = self.state();
        state.queue.clear();
        let _ = state.held.resize_to(0);
        state.closed = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// The next notification; `None` once closed and empty.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut state = self.state();
        if let Some(notice) = take(&mut state) {
            return Poll::Ready(Some(notice));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether no more will come (closed, or the caller cut off).
    pub(crate) fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// The next notification if one waits now.
    pub(crate) fn try_next(&self) -> Option<Bytes> {
        take(&mut self.state())
    }

    pub(crate) async fn next(&self) -> Option<Bytes> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

fn take(state: &mut NoticeState) -> Option<Bytes> {
    let notice = state.queue.pop_front()?;
    let left = state.held.bytes().saturating_sub(notice.len());
    let _ = state.held.resize_to(left);
    Some(notice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::IntGauge;

    #[tokio::test]
    async fn waiting_notices_are_bounded_held_and_given_back() {
        let budget = MemoryBudget::new(1000, IntGauge::new("b", "b").unwrap());
        let notices = Notices::new(&budget);
        notices.push(Bytes::from(vec![b'a'; 600])).unwrap();
        assert_eq!(budget.used(), 600);
        assert_eq!(
            notices.push(Bytes::from(vec![b'b'; 600])),
            Err(CutOff::OverBudget)
        );
        assert_eq!(notices.next().await.unwrap().len(), 600);
        assert_eq!(budget.used(), 0, "taken: given back");
        for _ in 0..NOTICES_BUFFERED {
            notices.push(Bytes::from_static(b"n")).unwrap();
        }
        assert_eq!(
            notices.push(Bytes::from_static(b"n")),
            Err(CutOff::SlowReader)
        );
        assert_eq!(budget.used(), NOTICES_BUFFERED);
        notices.cut();
        assert_eq!(budget.used(), 0, "cut: given back without a read");
        assert_eq!(notices.next().await, None);
        let closed = Notices::new(&budget);
        closed.push(Bytes::from_static(b"last")).unwrap();
        closed.close();
        assert_eq!(closed.try_next().as_deref(), Some(&b"last"[..]));
        assert_eq!(closed.next().await, None);
        assert_eq!(budget.used(), 0);
    }
}
