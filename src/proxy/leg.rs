//! Step 7, the upstream leg: the request goes to the upstream (its wait timed, its
//! status counted, its body's bytes held against the budget until the answer's head) and
//! the answer to step 8 ([`super::outbound`]); a configured passthrough goes untouched.
//! The request is handed over here ([`super::exchange::Exchange::handed_over`]).

use super::Proxy;
use super::exchange::Exchange;
use super::failure::Failure;
use super::upstream;
use crate::body::{BoxError, ProxyBody};
use crate::budget::Reservation;
use crate::error::ProxyError;
use crate::telemetry::audit::Record;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::time::Instant;

impl Proxy {
    /// Send to the upstream, timing the wait for its response head (the part of a
    /// request's latency that is not the sidecar's) and counting its status class.
    pub(super) async fn send(
        &self,
        request: Request<ProxyBody>,
        record: &mut Record,
    ) -> Result<Response<Incoming>, ProxyError> {
        let started = Instant::now();
        let result = self.upstream.send(request).await;
        let status = result.as_ref().ok().map(Response::status);
        record.upstream_answered(started.elapsed(), status);
        if let Some(status) = status {
            self.metrics.path.upstream_response(status);
        }
        result
    }

    /// Forward a configured passthrough request and its response without inspection.
    pub(super) async fn send_untouched(
        &self,
        mut parts: http::request::Parts,
        body: ProxyBody,
        exchange: &mut Exchange,
    ) -> Result<Response<ProxyBody>, Failure> {
        self.upstream.prepare(&mut parts);
        let request = Request::from_parts(parts, body);
        let response = self.send(request, &mut exchange.record).await?;
        let (mut parts, body) = response.into_parts();
        upstream::strip_hop_by_hop(&mut parts.headers);
        parts.version = http::Version::default();
        Ok(Response::from_parts(
            parts,
            body.map_err(BoxError::from).boxed(),
        ))
    }

    /// Send to the upstream and make its response safe for the client, with what the
    /// exchange holds for it. The body's bytes stay reserved in the memory budget until
    /// the upstream's response head came (or sending failed): hyper drops a body once its
    /// last frame is in its write buffer, and an upstream that never reads would
    /// otherwise hold every byte of it outside the budget.
    pub(super) async fn round_trip(
        &self,
        mut parts: http::request::Parts,
        (body, reservation): (ProxyBody, Option<Reservation>),
        exchange: &mut Exchange,
    ) -> Result<Response<ProxyBody>, Failure> {
        // Taken now: the upstream may take long, an answer stream longer still.
        let context = exchange.for_response();
        self.upstream.prepare(&mut parts);
        exchange.handed_over = true;
        let request = Request::from_parts(parts, body);
        let sent = self.send(request, &mut exchange.record).await;
        drop(reservation);
        self.outbound.respond(sent?, context, exchange.asked).await
    }
}
