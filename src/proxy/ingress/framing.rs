//! Part of the ingress phase: is a request's HTTP/1.1 framing one that the sidecar and
//! every parser behind it read alike. [`check_framing`] refuses what the connection's
//! [`FramingScan`](crate::server::framing::FramingScan) saw (a head naming both `Content-Length` and `Transfer-Encoding`, of
//! which hyper keeps no trace) and the ambiguous spellings hyper lets through.

use crate::auth::header::spelled_as;
use crate::error::ProxyError;
use crate::server::ConnectionFacts;
use http::header::{self, HeaderName};

/// The request's framing is one the sidecar and every parser behind it read alike: no
/// `Content-Length` beside `Transfer-Encoding` (see [`crate::server::framing::MixedFraming`]); a
/// `Transfer-Encoding`, if any, that is one field saying exactly `chunked` (hyper decodes
/// one `chunked` and keeps the codings before it, so `gzip, chunked` or `chunked, chunked`
/// would reach the gate still encoded); and no `_` spelling of a header the sidecar
/// reads ([`READ_HEADERS`]: `Transfer_Encoding`, `Mcp_Name`, `Idempotency_Key`, ...),
/// which WSGI and CGI servers read as the real field (`Transfer_Encoding` and
/// `Transfer-Encoding` both become `HTTP_TRANSFER_ENCODING`): the upstream would act on a
/// value the sidecar never checked. hyper itself refuses the
/// rest with 400: a `chunked` that is not last, differing or malformed lengths, HTTP/1.0
/// with a coding.
///
/// A target must be a path (origin- or absolute-form): the asterisk-form (`POST *`) and
/// authority-form (`CONNECT host:port`) name no resource under the upstream's base path.
/// The headers with a `-` in their name that the sidecar reads (framing, the body's
/// type and coding, the MCP routing headers it checks against the body, the idempotency
/// key). The identity header has its own rule (`auth::header`), and forwarding headers
/// theirs (`ingress`), both in every `_` spelling.
const READ_HEADERS: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "content-type",
    "content-encoding",
    "mcp-method",
    "mcp-name",
    "idempotency-key",
];

pub(crate) fn check_framing(
    parts: &http::request::Parts,
    facts: &ConnectionFacts,
) -> Result<(), ProxyError> {
    if !parts.uri.path().starts_with('/') {
        return Err(ProxyError::Framing("request target is not a path"));
    }
    if facts.framing.seen() {
        return Err(ProxyError::Framing("Content-Length with Transfer-Encoding"));
    }
    let look_alike = |name: &HeaderName| {
        let name = name.as_str();
        has_underscore(name.as_bytes()) && READ_HEADERS.iter().any(|read| spelled_as(name, read))
    };
    if parts.headers.keys().any(look_alike) {
        return Err(ProxyError::Framing(
            "an `_` spelling of a header the sidecar reads",
        ));
    }
    let mut codings = parts.headers.get_all(header::TRANSFER_ENCODING).iter();
    match (codings.next(), codings.next()) {
        (None, _) => Ok(()),
        (Some(one), None) if one.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(()),
        (Some(_), None) => Err(ProxyError::Framing("a transfer coding other than chunked")),
        (Some(_), Some(_)) => Err(ProxyError::Framing("Transfer-Encoding repeated")),
    }
}

/// Whether a header name holds `_`: eight bytes a step (a name is a few words), with no
/// searcher set up per name.
fn has_underscore(name: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let words = name.chunks_exact(8);
    let tail = words.remainder();
    let in_word = |word: u64| {
        let x = word ^ (ONES * u64::from(b'_'));
        x.wrapping_sub(ONES) & !x & HIGHS != 0
    };
    words
        .map(|w| u64::from_le_bytes(w.try_into().expect("eight bytes")))
        .any(in_word)
        || tail.contains(&b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn an_underscore_is_found_wherever_it_is_in_a_name() {
        for len in 0..40 {
            let plain = vec![b'a'; len];
            assert!(!has_underscore(&plain), "{len}");
            for at in 0..len {
                let mut name = plain.clone();
                name[at] = b'_';
                assert!(has_underscore(&name), "{len} {at}");
                // Bytes next to `_` in value (`^`, `` ` ``) are not it.
                name[at] = b'^';
                assert!(!has_underscore(&name), "{len} {at}");
                name[at] = b'`';
                assert!(!has_underscore(&name), "{len} {at}");
            }
        }
    }

    #[test]
    fn transfer_codings_other_than_one_chunked_are_refused() {
        let facts = |mixed: bool| {
            let seen = crate::server::framing::MixedFraming::default();
            if mixed {
                seen.mark();
            }
            ConnectionFacts::new("127.0.0.1:1".parse().unwrap(), seen, None)
        };
        let parts = |codings: &[&str]| {
            let mut builder = http::Request::builder().uri("/mcp");
            for coding in codings {
                builder = builder.header(header::TRANSFER_ENCODING, *coding);
            }
            builder.body(()).unwrap().into_parts().0
        };
        let (framed_once, mixed) = (facts(false), facts(true));
        let check_framing =
            |parts: &http::request::Parts| super::check_framing(parts, &framed_once);
        assert!(check_framing(&parts(&[])).is_ok());
        let mut asterisk = parts(&[]);
        asterisk.uri = http::Uri::from_static("*");
        assert!(check_framing(&asterisk).is_err());
        assert!(check_framing(&parts(&["chunked"])).is_ok());
        assert!(check_framing(&parts(&["Chunked "])).is_ok());
        for codings in [
            &["gzip, chunked"][..],
            &["chunked, chunked"],
            &["chunked", "chunked"],
        ] {
            assert!(check_framing(&parts(codings)).is_err(), "{codings:?}");
        }
        assert!(super::check_framing(&parts(&["chunked"]), &mixed).is_err());
        let mut look_alike = parts(&["chunked"]);
        look_alike
            .headers
            .insert("content_length", HeaderValue::from_static("4"));
        assert!(check_framing(&look_alike).is_err());
        // Every header the sidecar reads, in its `_` spelling, alone.
        for name in READ_HEADERS {
            let mut look_alike = parts(&[]);
            let spelled = name.replace('-', "_");
            look_alike.headers.insert(
                HeaderName::from_bytes(spelled.as_bytes()).unwrap(),
                HeaderValue::from_static("x"),
            );
            assert!(check_framing(&look_alike).is_err(), "{spelled}");
        }
        let mut unrelated = parts(&[]);
        unrelated
            .headers
            .insert("x_custom_thing", HeaderValue::from_static("x"));
        assert!(check_framing(&unrelated).is_ok());
        assert!(super::check_framing(&parts(&[]), &mixed).is_err());
    }
}
