//! A failure on the data path: the refusal or upstream error, with the upstream's head
//! when it replaces an upstream body. Every phase returns one; [`super::Proxy`] turns it
//! into the response in one place, answering the request's id as the exchange knows it.

use crate::error::ProxyError;

/// A failure, and what of the upstream's answer it keeps.
pub(crate) struct Failure {
    pub(crate) error: ProxyError,
    /// The upstream's response head, when the failure replaces its body: an error
    /// status and its headers are kept.
    pub(crate) upstream_head: Option<http::response::Parts>,
}

impl From<ProxyError> for Failure {
    fn from(error: ProxyError) -> Self {
        Self {
            error,
            upstream_head: None,
        }
    }
}
