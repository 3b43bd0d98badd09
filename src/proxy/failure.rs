//! A failure on the data path: the refusal or upstream error, with the id of the
//! request it answers when known and the upstream's head when it replaces an upstream
//! body. Every phase returns one; [`super::Proxy`] turns it into the response in one
//! place.

use crate::error::ProxyError;
use crate::jsonrpc::Id;

/// A failure with the id of the request it answers, when known.
pub(crate) struct Failure {
    pub(crate) id: Option<Id>,
    pub(crate) error: ProxyError,
    /// The upstream's response head, when the failure replaces its body: an error
    /// status and its headers are kept.
    pub(crate) upstream_head: Option<http::response::Parts>,
}

impl From<ProxyError> for Failure {
    fn from(error: ProxyError) -> Self {
        Self {
            id: None,
            error,
            upstream_head: None,
        }
    }
}
