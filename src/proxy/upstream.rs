//! The upstream leg: a pooled HTTP client, the request line and headers the upstream
//! sees, and the timeouts that bound waiting for it.
//!
//! Invariant: the upstream receives the client's path and query under the configured
//! base, `Host` set to its own authority, no hop-by-hop headers, and `accept-encoding:
//! identity` (a compressed body could not be inspected and would have to be refused).
//! The headers a client's `Connection` names are dropped once, at ingress, before the
//! sidecar adds anything of its own ([`strip_hop_by_hop_keeping`]); this leg drops only
//! the fixed hop-by-hop names, so no `Connection` can name away what the sidecar set.
//! An `https://` upstream is reached only over TLS verified for its host (SNI and the
//! certificate name both from the configured URL), never in the clear. A stdio upstream
//! (`upstream = "stdio"`) is the same pool ([`super::pool`]) dialling [`crate::stdio`] in
//! memory: the requests and responses of this leg are the same for both.

use super::pool::{Limits, Pool};
use crate::config::UpstreamUrl;
use crate::error::ProxyError;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use std::time::Duration;

use crate::body::ProxyBody;
use crate::mcp::param_headers::LearnedParamHeaders;

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus those the
/// sidecar sets itself, and `Upgrade`: names as a `HeaderName` spells them (lowercase).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The configured upstream and a connection pool to it.
pub(crate) struct Upstream {
    client: Clients,
    host: HeaderValue,
    base_path: String,
    response_head_timeout: Duration,
    /// A stdio upstream's mark for the gated route ([`crate::stdio::GATED_HEADER`]).
    gated_mark: Option<HeaderValue>,
    /// A stdio upstream's `Mcp-Param-*` annotations, learned from its child's
    /// `tools/list`: the sidecar is its HTTP transport.
    param_headers: Option<LearnedParamHeaders>,
}

/// The pool of an HTTP upstream, or of a stdio upstream's in-process server
/// ([`crate::stdio`]): the same requests, the same responses.
enum Clients {
    Http(Pool<HttpsConnector<HttpConnector>>),
    Stdio(Pool<crate::stdio::Connector>),
}

impl Upstream {
    #[cfg(test)]
    /// `base` is an `http://` upstream URL (an `https://` one is verified against the
    /// compiled-in roots: see [`Upstream::with_tls`]); the pool keeps the default sizes.
    pub(crate) fn new(
        base: &UpstreamUrl,
        connect_timeout: Duration,
        response_head_timeout: Duration,
    ) -> Self {
        let tls = crate::tls::client_config(None, None).expect("no files to read");
        Self::with_tls(
            base,
            tls,
            connect_timeout,
            response_head_timeout,
            Limits::of(&crate::config::Config::default()),
        )
    }

    /// `base` is an `http://` or `https://` upstream URL; `tls` is used for an
    /// `https://` one (which is then never spoken to in the clear).
    pub(crate) fn with_tls(
        base: &UpstreamUrl,
        tls: rustls::ClientConfig,
        connect_timeout: Duration,
        response_head_timeout: Duration,
        limits: Limits,
    ) -> Self {
        let https_only = base.is_https();
        let connector = crate::tls::https_connector(tls, connect_timeout, https_only);
        let authority = base.authority().clone();
        let host = HeaderValue::from_str(authority.as_str())
            .expect("an authority is a valid header value");
        let target = Uri::builder()
            .scheme(base.uri().scheme_str().unwrap_or("http"))
            .authority(authority)
            .path_and_query("/")
            .build()
            .expect("a configured upstream's scheme and authority form a URI");
        Self {
            client: Clients::Http(Pool::new(connector, target, limits)),
            host,
            base_path: base.uri().path().trim_end_matches('/').to_owned(),
            response_head_timeout,
            gated_mark: None,
            param_headers: None,
        }
    }

    /// A stdio upstream: the bridge's in-process server, reached in memory
    /// ([`crate::stdio::Connector`]); requests name the authority `stdio`.
    pub(crate) fn stdio(
        connector: crate::stdio::Connector,
        response_head_timeout: Duration,
        limits: Limits,
    ) -> Self {
        let gated_mark = Some(connector.mark());
        let param_headers = Some(connector.param_headers());
        let target = Uri::from_static("http://stdio/");
        Self {
            client: Clients::Stdio(Pool::new(connector, target, limits)),
            host: HeaderValue::from_static("stdio"),
            base_path: String::new(),
            response_head_timeout,
            gated_mark,
            param_headers,
        }
    }

    /// Remove a client's copies of the headers by which the gated route speaks to a
    /// stdio upstream (on every route, before the sidecar sets anything).
    pub(crate) fn strip_internal(&self, headers: &mut HeaderMap) {
        if self.gated_mark.is_some() {
            headers.remove(crate::stdio::GATED_HEADER);
            headers.remove(crate::stdio::OWNER_HEADER);
        }
    }

    /// Mark a request of the gated route for a stdio upstream, which answers nothing
    /// else (never a passthrough request), with whose share it spends. No-op for an
    /// HTTP upstream.
    pub(crate) fn mark_gated(&self, headers: &mut HeaderMap, caller: &crate::auth::Caller) {
        if let Some(mark) = &self.gated_mark {
            // The owner's digest only where it is sent (a stdio child's bridge).
            let owner = caller.owner();
            headers.insert(crate::stdio::GATED_HEADER, mark.clone());
            headers.insert(
                crate::stdio::OWNER_HEADER,
                HeaderValue::from_str(owner.as_str()).expect("an owner is a hex digest"),
            );
        }
    }

    /// The upstream's request target for a client's, in origin form (the connection
    /// is the upstream's own): base path ‖ path, query kept.
    pub(crate) fn uri_for(&self, client_uri: &Uri) -> Uri {
        let client = client_uri.path_and_query();
        let path_and_query = if self.base_path.is_empty() {
            // Shared, not copied: the client's target as it was parsed.
            client
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"))
        } else {
            let client = client.map_or("/", PathAndQuery::as_str);
            let mut joined = String::with_capacity(self.base_path.len() + client.len());
            joined.push_str(&self.base_path);
            joined.push_str(client);
            PathAndQuery::try_from(joined).expect("a base path and a client target join validly")
        };
        Uri::from(path_and_query)
    }

    /// Rewrite a client request head for the upstream hop (in place): target URI,
    /// headers, and HTTP/1.1 whatever the client spoke (h2c clients included; the pool
    /// speaks HTTP/1.1 to the upstream, as MCP servers generally only do).
    pub(crate) fn prepare(&self, parts: &mut http::request::Parts) {
        parts.uri = self.uri_for(&parts.uri);
        parts.version = http::Version::HTTP_11;
        self.prepare_headers(&mut parts.headers);
    }

    /// Rewrite client headers for the upstream hop (in place). The client's `Connection`
    /// set was dropped at ingress; by now the sidecar has added forwarding, identity and
    /// idempotency headers, so a `Connection` header is not honoured here, only removed.
    pub(crate) fn prepare_headers(&self, headers: &mut HeaderMap) {
        strip_fixed_hop_by_hop(headers);
        // The sidecar holds the whole body before it forwards: a client's expectation
        // (`100-continue`) was met or ignored at this hop, as Envoy does by default.
        headers.remove(header::EXPECT);
        headers.insert(header::HOST, self.host.clone());
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }

    /// How long a response head (and a whole JSON body) may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.response_head_timeout
    }

    /// For a stdio upstream, whose HTTP transport the sidecar is: the `Mcp-Param-*`
    /// annotations its child's tools declare (`None`: an HTTP upstream checks its own).
    pub(crate) fn transport_rules(&self) -> Option<LearnedParamHeaders> {
        self.param_headers.clone()
    }

    /// Send a request and wait for the response head, bounded by the configured timeout.
    pub(crate) async fn send(
        &self,
        request: http::Request<ProxyBody>,
    ) -> Result<http::Response<Incoming>, ProxyError> {
        let response = match &self.client {
            Clients::Http(pool) => futures_util::future::Either::Left(pool.send(request)),
            Clients::Stdio(pool) => futures_util::future::Either::Right(pool.send(request)),
        };
        match tokio::time::timeout(self.response_head_timeout, response).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(ProxyError::UpstreamUnavailable(e)),
            Err(_) => Err(ProxyError::UpstreamTimeout(
                self.response_head_timeout.as_millis() as u64,
            )),
        }
    }
}

/// Remove hop-by-hop headers, including those the `Connection` header names (the
/// upstream's response head on its way to the client).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip_hop_by_hop_keeping(headers, &[]);
}

/// Remove hop-by-hop headers, including those the `Connection` header names, except the
/// names in `keep`: a client may not use `Connection` to delete what the sidecar sets or
/// vouches for (forwarding, identity, credentials, idempotency key).
pub(crate) fn strip_hop_by_hop_keeping(headers: &mut HeaderMap, keep: &[HeaderName]) {
    // `Connection` is one of the fixed names: a message that carries none of them (most
    // do) names nothing else either.
    if !carries_fixed_hop_by_hop(headers) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        // A peer may not use `Connection` to delete what the message means: the framing,
        // its type, or the MCP routing headers the gate checked against the body.
        .filter(|name| !is_end_to_end(name) && !keep.contains(name))
        .collect();
    for name in named {
        headers.remove(name);
    }
    remove_fixed_hop_by_hop(headers);
}

/// Remove the fixed hop-by-hop names (`Connection` itself among them), honouring nothing
/// a `Connection` header names.
fn strip_fixed_hop_by_hop(headers: &mut HeaderMap) {
    if carries_fixed_hop_by_hop(headers) {
        remove_fixed_hop_by_hop(headers);
    }
}

/// Whether any name the map holds is one of [`HOP_BY_HOP`]. Most messages carry none:
/// one look at each name the map holds (a comparison of known names) costs less than a
/// hashed lookup of every fixed one.
fn carries_fixed_hop_by_hop(headers: &HeaderMap) -> bool {
    headers.keys().any(is_fixed_hop_by_hop)
}

fn remove_fixed_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Whether `name` is one of [`HOP_BY_HOP`]: its text compared, no `HeaderName` built.
/// Most names a message carries have a length none of them has (`Host`, `Accept`,
/// `Content-Type`), and are passed on that alone.
pub(crate) fn is_fixed_hop_by_hop(name: &HeaderName) -> bool {
    let name = name.as_str();
    HOP_BY_HOP_LENGTHS & 1u32.checked_shl(name.len() as u32).unwrap_or(0) != 0
        && HOP_BY_HOP.contains(&name)
}

/// Bit `n`: some name of [`HOP_BY_HOP`] is `n` bytes long.
const HOP_BY_HOP_LENGTHS: u32 = {
    let mut bits = 0u32;
    let mut i = 0;
    while i < HOP_BY_HOP.len() {
        bits |= 1 << HOP_BY_HOP[i].len();
        i += 1;
    }
    bits
};

fn is_end_to_end(name: &HeaderName) -> bool {
    name == header::CONTENT_LENGTH
        || name == header::CONTENT_TYPE
        || name == header::CONTENT_ENCODING
        || name == header::HOST
        || name.as_str().starts_with("mcp-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(base: &str) -> Upstream {
        Upstream::new(
            &crate::config::parse_upstream(base).unwrap(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
    }

    #[tokio::test]
    async fn paths_and_queries_are_kept_under_the_base() {
        let u = upstream("http://127.0.0.1:3000");
        assert_eq!(
            u.uri_for(&"/mcp?x=1".parse().unwrap()).to_string(),
            "/mcp?x=1"
        );
        assert_eq!(
            u.uri_for(&"http://front:8080//MCP/".parse().unwrap())
                .to_string(),
            "//MCP/"
        );
        let u = upstream("http://127.0.0.1:3000/base/");
        assert_eq!(u.uri_for(&"/mcp".parse().unwrap()).to_string(), "/base/mcp");
    }

    #[tokio::test]
    async fn headers_for_the_upstream_hop() {
        let u = upstream("http://127.0.0.1:3000");
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("public.example"));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop, mcp-method, content-type"),
        );
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, br"),
        );
        h.insert("mcp-method", HeaderValue::from_static("tools/call"));
        strip_hop_by_hop_keeping(&mut h, &[]);
        u.prepare_headers(&mut h);
        assert_eq!(h.get(header::HOST).unwrap(), "127.0.0.1:3000");
        assert_eq!(h.get(header::ACCEPT_ENCODING).unwrap(), "identity");
        assert!(h.get("x-secret-hop").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert!(h.get(header::TRANSFER_ENCODING).is_none());
        assert_eq!(h.get("mcp-method").unwrap(), "tools/call");
        assert_eq!(h.get(header::CONTENT_TYPE).unwrap(), "application/json");
    }

    /// Each fixed hop-by-hop name is removed when it is the only one a message carries
    /// (the pass that skips messages without any must see every one), in any case.
    #[test]
    fn every_fixed_hop_by_hop_name_alone_is_removed() {
        for other in [
            "tee",
            "trailers",
            "content-length",
            "x-connection",
            "upgrade-insecure",
        ] {
            assert!(
                !is_fixed_hop_by_hop(&HeaderName::from_static(other)),
                "{other}"
            );
        }
        for name in HOP_BY_HOP.map(HeaderName::from_static) {
            assert!(is_fixed_hop_by_hop(&name), "{name}");
            for spelling in [name.as_str().to_owned(), name.as_str().to_uppercase()] {
                let mut h = HeaderMap::new();
                h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
                h.append(
                    HeaderName::from_bytes(spelling.as_bytes()).unwrap(),
                    HeaderValue::from_static("x"),
                );
                strip_fixed_hop_by_hop(&mut h);
                assert!(h.get(&name).is_none(), "{spelling}");
                assert_eq!(h.len(), 1, "{spelling}");
            }
        }
    }

    /// Finding 3 of the security review: a client's `Connection` naming the headers the
    /// sidecar sets deleted them on the upstream leg, because the leg honoured
    /// `Connection` after the sidecar's rewrite.
    #[tokio::test]
    async fn a_connection_header_cannot_name_away_what_the_sidecar_set() {
        let u = upstream("http://127.0.0.1:3000");
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static(
                "X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-User, Idempotency-Key, x-hop",
            ),
        );
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("x-forwarded-user", HeaderValue::from_static("alice"));
        h.insert("idempotency-key", HeaderValue::from_static("k1"));
        // Ingress: the client's set goes first, keeping what the sidecar vouches for.
        let keep = [
            HeaderName::from_static("x-forwarded-user"),
            HeaderName::from_static("idempotency-key"),
        ];
        strip_hop_by_hop_keeping(&mut h, &keep);
        assert!(h.get("x-hop").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        // Then the sidecar's own values, then the upstream leg.
        h.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        // Even a `Connection` that reappeared is not honoured on this leg.
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("x-forwarded-for, x-forwarded-proto, x-forwarded-user"),
        );
        u.prepare_headers(&mut h);
        assert_eq!(h.get("x-forwarded-for").unwrap(), "192.0.2.1");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "http");
        assert_eq!(h.get("x-forwarded-user").unwrap(), "alice");
        assert_eq!(h.get("idempotency-key").unwrap(), "k1");
        assert!(h.get(header::CONNECTION).is_none());
    }
}
