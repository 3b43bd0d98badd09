//! The body type every response and forwarded request carries, and its error, on the
//! ground floor: the listeners, the admin port, the JWKS fetcher and the data path all
//! speak it, and it imports nothing of the crate.
//!
//! Invariant: a [`holding`] body keeps what it holds alive exactly as long as hyper
//! keeps the body (after its last byte, or until the peer went away), and changes
//! nothing of the body's length or end.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every body the sidecar sends, to either side.
pub(crate) type ProxyBody = BoxBody<Bytes, BoxError>;

/// A whole body from bytes.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// `body`, keeping `held` alive until hyper drops it: after its last byte is written, or
/// when the peer went away. Length and end-of-stream are the body's own, so a whole
/// body still goes out with `content-length`.
pub(crate) fn holding<T: Send + Sync + Unpin + 'static>(body: ProxyBody, held: T) -> ProxyBody {
    Holding { body, _held: held }.boxed()
}

/// A whole body from `bytes` [`holding`] `held`: one box, where `holding(full(..))` makes
/// two.
pub(crate) fn full_holding<T: Send + Sync + Unpin + 'static>(bytes: Bytes, held: T) -> ProxyBody {
    Holding {
        body: http_body_util::Full::new(bytes),
        _held: held,
    }
    .boxed()
}

struct Holding<B, T> {
    body: B,
    _held: T,
}

impl<B, T> http_body::Body for Holding<B, T>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    T: Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.body)
            .poll_frame(cx)
            .map(|frame| frame.map(|frame| frame.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether one value of a coding list (`Content-Encoding`, `Transfer-Encoding`) lists
/// `coding` only, in any case: a message's coding is that one when every value does
/// (clients merge repeated headers and decode every coding they list).
pub(crate) fn lists_only(value: &http::HeaderValue, coding: &str) -> bool {
    value.to_str().is_ok_and(|v| {
        v.split(',')
            .all(|listed| listed.trim().eq_ignore_ascii_case(coding))
    })
}
