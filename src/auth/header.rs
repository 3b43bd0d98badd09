//! The `header` source: the identity a trusted front proxy put in a request header.
//!
//! Invariant: an identity is taken only from the configured header and is unambiguous
//! (one header value, valid UTF-8, non-empty); a request whose identity cannot be read
//! is refused, never treated as anonymous. The identity header is removed before
//! forwarding unless configured otherwise, and its `_` look-alikes always are, so the
//! upstream cannot be confused by a value this sidecar did not vouch for.

use crate::error::ProxyError;
use http::{HeaderMap, HeaderName};
use std::sync::Arc;

/// The principal string of this request (design §3: the header value exactly as
/// received), or `None` when the request carries no identity. `from_trusted_peer`: the
/// peer may set the identity header (`principal.trusted_proxies` is empty or holds it);
/// an identity from any other peer is refused, not ignored.
pub(crate) fn identify(
    name: &HeaderName,
    headers: &HeaderMap,
    from_trusted_peer: bool,
) -> Result<Option<Arc<str>>, ProxyError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if !from_trusted_peer {
        return Err(ProxyError::PrincipalHeader(
            "identity header from a peer not in principal.trusted_proxies",
        ));
    }
    if values.next().is_some() {
        return Err(ProxyError::PrincipalHeader("identity header repeated"));
    }
    // Visible ASCII, as identities are, is passed on a glance; UTF-8 beyond it is
    // checked as such.
    let text = (value.to_str().ok())
        .or_else(|| crate::text::utf8(value.as_bytes()))
        .ok_or(ProxyError::PrincipalHeader("identity header is not UTF-8"))?;
    if text.is_empty() {
        return Err(ProxyError::PrincipalHeader("identity header is empty"));
    }
    Ok(Some(Arc::from(text)))
}

/// Remove what the upstream must not see: the identity header unless it is to be
/// forwarded, and always its look-alikes (`x_forwarded_user`): WSGI and CGI servers map
/// `_` and `-` to the same variable, so a client could smuggle an identity the front
/// proxy never vouched for.
pub(crate) fn strip(name: &HeaderName, forward: bool, headers: &mut HeaderMap) {
    let look_alikes: Vec<HeaderName> = headers
        .keys()
        // The name itself is passed first (one comparison, where `spelled_as` would map
        // every byte of it), then the lengths (most names part there).
        .filter(|k| *k != name && spelled_as(k.as_str(), name.as_str()))
        .cloned()
        .collect();
    for k in look_alikes {
        headers.remove(k);
    }
    if !forward {
        headers.remove(name);
    }
}

/// Whether header names `a` and `b` (lower-case, as `http` keeps them) are one name
/// once `_` is read as `-`, the way WSGI and CGI servers read them. Compared in place:
/// every request's every header goes through this, so neither name is copied.
pub(crate) fn spelled_as(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| dash(x) == dash(y))
}

/// Whether header name `name`, with `_` read as `-`, starts with `prefix`.
pub(crate) fn spelled_with_prefix(name: &str, prefix: &str) -> bool {
    name.len() >= prefix.len()
        && name
            .bytes()
            .zip(prefix.bytes())
            .all(|(x, y)| dash(x) == dash(y))
}

fn dash(byte: u8) -> u8 {
    if byte == b'_' { b'-' } else { byte }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// The header source as configured, `forward` or not.
    struct HeaderSource(bool);

    const NAME: HeaderName = HeaderName::from_static("x-forwarded-user");

    impl HeaderSource {
        fn identify(&self, h: &HeaderMap, trusted: bool) -> Result<Option<Arc<str>>, ProxyError> {
            identify(&NAME, h, trusted)
        }

        fn strip(&self, h: &mut HeaderMap) {
            strip(&NAME, self.0, h)
        }
    }

    fn source() -> HeaderSource {
        HeaderSource(false)
    }

    #[test]
    fn header_identity_is_taken_verbatim() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-user",
            HeaderValue::from_static(" Alice@Example.com"),
        );
        assert_eq!(
            source().identify(&h, true).unwrap().as_deref(),
            Some(" Alice@Example.com")
        );
        let utf8 = HeaderValue::from_bytes("zoë".as_bytes()).unwrap();
        h.insert("x-forwarded-user", utf8);
        assert_eq!(source().identify(&h, true).unwrap().as_deref(), Some("zoë"));
        assert_eq!(source().identify(&HeaderMap::new(), true).unwrap(), None);
    }

    #[test]
    fn ambiguous_identities_are_refused() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-user", HeaderValue::from_static("alice"));
        h.append("x-forwarded-user", HeaderValue::from_static("bob"));
        assert!(matches!(
            source().identify(&h, true),
            Err(ProxyError::PrincipalHeader(_))
        ));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-user", HeaderValue::from_static(""));
        assert!(source().identify(&h, true).is_err());
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-user",
            HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert!(source().identify(&h, true).is_err());
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-user", HeaderValue::from_static("admin"));
        assert!(matches!(
            source().identify(&h, false),
            Err(ProxyError::PrincipalHeader(_))
        ));
        assert_eq!(source().identify(&HeaderMap::new(), false).unwrap(), None);
    }

    #[test]
    fn strip_respects_forwarding() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-user", HeaderValue::from_static("alice"));
        source().strip(&mut h);
        assert!(h.is_empty());
        h.insert("x-forwarded-user", HeaderValue::from_static("alice"));
        HeaderSource(true).strip(&mut h);
        assert_eq!(h.len(), 1);
        // Look-alikes never pass, forwarded or not.
        h.insert("x_forwarded_user", HeaderValue::from_static("admin"));
        HeaderSource(true).strip(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h.get("x-forwarded-user").unwrap(), "alice");
        h.insert("x_forwarded_user", HeaderValue::from_static("admin"));
        source().strip(&mut h);
        assert!(h.is_empty());
        // Other headers, even ones one character off, stay.
        h.insert("x-forwarded-users", HeaderValue::from_static("a"));
        h.insert("x-forwarded-usex", HeaderValue::from_static("b"));
        source().strip(&mut h);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn spellings_read_underscore_as_dash_and_nothing_else() {
        assert!(spelled_as("x_forwarded_user", "x-forwarded-user"));
        assert!(spelled_as("x-forwarded_user", "x_forwarded-user"));
        assert!(spelled_as("mcp-name", "mcp-name"));
        assert!(!spelled_as("x-forwarded-use", "x-forwarded-user"));
        assert!(!spelled_as("x.forwarded.user", "x-forwarded-user"));
        assert!(!spelled_as("mcp-namf", "mcp-name"));
        assert!(spelled_with_prefix("x_forwarded_for", "x-forwarded-"));
        assert!(spelled_with_prefix("x-forwarded-", "x-forwarded-"));
        assert!(!spelled_with_prefix("x-forwarded", "x-forwarded-"));
        assert!(!spelled_with_prefix("x+forwarded-for", "x-forwarded-"));
    }
}
