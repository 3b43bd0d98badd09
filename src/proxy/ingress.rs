//! The first phase, before anything is read from the body: is this request addressed to
//! us (`allowed_hosts`), is its HTTP/1.1 framing unambiguous, and which forwarding
//! headers may the upstream see.
//!
//! Invariant: a request whose `Host` / `:authority` is not allowed is refused with 421
//! before any other work (the upstream's own DNS-rebinding check is defeated once the
//! sidecar rewrites `Host`, so the sidecar must do it); a request whose head named both
//! `Content-Length` and `Transfer-Encoding`, a transfer coding other than one `chunked`,
//! an `_` spelling of a header the sidecar reads (`Transfer_Encoding`, `Mcp_Name`) or a target that is not a path is
//! refused with 400 before its body is read; `Forwarded`, `X-Forwarded-*`
//! and `X-Real-IP` reach the upstream only from a peer in `principal.trusted_proxies`,
//! and `X-Forwarded-For` / `X-Forwarded-Proto` always say what the sidecar itself saw.
//! A client's `Connection` header is honoured here, before the sidecar adds anything,
//! and cannot name away the [`protected_headers`] (what the sidecar sets or vouches for).

use crate::auth::header::{spelled_as, spelled_with_prefix};
use crate::config::hosts::{EntryError, HostPattern, host_pattern, split_authority};
use crate::error::ProxyError;
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;
use std::net::SocketAddr;
use std::sync::Arc;

mod client;
mod framing;
pub(crate) use framing::check_framing;

use crate::server::{ConnectionFacts, Peer};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Which `Host` values are accepted.
#[derive(Debug)]
pub(crate) struct HostPolicy {
    /// `None`: any host.
    patterns: Option<Vec<HostPattern>>,
    /// Any IP-literal host is accepted too (the admin listener: see
    /// [`HostPolicy::for_admin`]).
    ip_literals: bool,
    /// The last authority this policy accepted, compared byte for byte before any parse:
    /// a deployment's clients name the sidecar one way, so nearly every request's `Host`
    /// is the one before's (parsing it costs an allocation and a thousand instructions).
    /// Only an accepted value is kept, and a reloaded `allowed_hosts` is a new policy,
    /// which starts without one. A client alternating names costs a copy per request.
    accepted: ArcSwapOption<Box<[u8]>>,
}

/// The names a loopback listener answers to, as the MCP SDKs allow them by default.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl HostPolicy {
    /// From `allowed_hosts`, or its default for `listen`: loopback names on a loopback
    /// address, any host otherwise.
    pub(crate) fn new(allowed: Option<&[String]>, listen: SocketAddr) -> Result<Self, EntryError> {
        let entries: Vec<&str> = match allowed {
            Some(list) => list.iter().map(String::as_str).collect(),
            None if listen.ip().is_loopback() => LOOPBACK_HOSTS.to_vec(),
            None => return Ok(Self::any()),
        };
        Self::of(&entries, false)
    }

    /// The admin listener's (`/metrics`, `/healthz`, `/readyz`, `/admin/revoke`), for its
    /// own address `admin_listen`: any IP literal and `localhost`, plus the names
    /// `allowed_hosts` lists; unset, no other name on a loopback address and any name
    /// otherwise, as [`HostPolicy::new`] does for `listen`.
    ///
    /// DNS rebinding needs a name the attacker controls: a `Host` that is an IP literal
    /// (or `localhost`) cannot have been rebound, so accepting every one costs nothing,
    /// and it is what the callers of an admin port send: kubelet probes
    /// (`Host: <pod IP>:9090`) and Prometheus scraping the endpoints a ServiceMonitor or
    /// PodMonitor discovers (pod IPs). A scrape by a name (a Compose service name, say)
    /// works while `allowed_hosts` is unset on a non-loopback address, or when the name
    /// is listed.
    pub(crate) fn for_admin(
        allowed: Option<&[String]>,
        admin_listen: SocketAddr,
    ) -> Result<Self, EntryError> {
        let mut entries: Vec<&str> = match allowed {
            Some(list) => list.iter().map(String::as_str).collect(),
            None if admin_listen.ip().is_loopback() => Vec::new(),
            None => return Ok(Self::any()),
        };
        entries.push("localhost");
        Self::of(&entries, true)
    }

    fn any() -> Self {
        Self {
            patterns: None,
            ip_literals: false,
            accepted: ArcSwapOption::empty(),
        }
    }

    fn of(entries: &[&str], ip_literals: bool) -> Result<Self, EntryError> {
        let patterns = entries
            .iter()
            .map(|entry| host_pattern(entry))
            .collect::<Result<Vec<_>, _>>()?;
        if patterns.contains(&HostPattern::Any) {
            return Ok(Self::any());
        }
        Ok(Self {
            patterns: Some(patterns),
            ip_literals,
            accepted: ArcSwapOption::empty(),
        })
    }

    /// Every authority the request names (the target's, and each `Host` header) must be
    /// allowed, and there must be one.
    pub(crate) fn check(&self, parts: &http::request::Parts) -> Result<(), ProxyError> {
        self.check_head(&parts.uri, &parts.headers)
    }

    /// [`HostPolicy::check`] of a request head's target and headers.
    pub(crate) fn check_head(
        &self,
        uri: &http::Uri,
        headers: &HeaderMap,
    ) -> Result<(), ProxyError> {
        let Some(patterns) = &self.patterns else {
            return Ok(());
        };
        let hosts = headers.get_all(header::HOST).iter();
        let mut named = 0;
        let uri_authority = uri.authority().map(|a| a.as_str().as_bytes());
        for value in uri_authority
            .into_iter()
            .chain(hosts.map(HeaderValue::as_bytes))
        {
            named += 1;
            if (self.accepted.load().as_deref()).is_some_and(|accepted| **accepted == *value) {
                continue;
            }
            let (host, port) = std::str::from_utf8(value)
                .ok()
                .and_then(split_authority)
                .ok_or(ProxyError::MisdirectedRequest)?;
            let ip_literal = self.ip_literals && is_ip_literal(host);
            if !ip_literal && !patterns.iter().any(|p| p.matches(host, port)) {
                return Err(ProxyError::MisdirectedRequest);
            }
            self.accepted.store(Some(Arc::new(value.into())));
        }
        if named == 0 {
            return Err(ProxyError::MisdirectedRequest);
        }
        Ok(())
    }
}

/// `192.0.2.1` or `[2001:db8::1]`, as an authority's host spells an address.
fn is_ip_literal(host: &str) -> bool {
    host.parse::<std::net::Ipv4Addr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
}

/// The headers a client's `Connection` cannot name away: the forwarding headers the
/// sidecar sets, `Authorization` (a credential it verifies and may forward) and `also`
/// (the identity header it reads and may forward, the `Idempotency-Key` it reserves the
/// call under). RFC 9110 lets a sender mark any field hop-by-hop, but these describe the
/// request to the upstream, and honouring a client's `Connection: X-Forwarded-For` after
/// the rewrite deleted the sidecar's own value (security review, finding 3).
pub(crate) fn protected_headers(also: impl IntoIterator<Item = HeaderName>) -> Vec<HeaderName> {
    let mut names = vec![X_FORWARDED_FOR, X_FORWARDED_PROTO, header::AUTHORIZATION];
    names.extend(also);
    names
}

/// Which peers' forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrustedProxies {
    pub(super) nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// From `principal.trusted_proxies`: CIDRs or single addresses.
    pub(crate) fn new(entries: &[String]) -> Result<Self, EntryError> {
        Ok(Self {
            nets: crate::config::hosts::parse_nets(entries)?,
        })
    }

    /// No peer is trusted (the identity header is then taken from anyone).
    pub(crate) fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    pub(crate) fn trusts(&self, peer: Option<Peer>) -> bool {
        peer.is_some_and(|Peer(addr)| {
            let ip = addr.ip().to_canonical();
            self.nets.iter().any(|net| net.contains(&ip))
        })
    }

    /// Make the forwarding headers say what the sidecar saw: kept and extended for a
    /// trusted peer, replaced for anyone else. `keep` is a header that must survive
    /// (the identity header, which has its own rules).
    pub(crate) fn rewrite(
        &self,
        headers: &mut HeaderMap,
        facts: &ConnectionFacts,
        scheme: &'static str,
        keep: Option<&HeaderName>,
    ) {
        let trusted = self.trusts(Some(facts.peer));
        let doomed: Vec<HeaderName> = headers
            .keys()
            // The first byte first: most names part there, before any comparison.
            .filter(|name| is_forwarding(name) && Some(*name) != keep)
            // WSGI and CGI servers read `X_Forwarded_For` as `X-Forwarded-For`: a
            // look-alike is never a trusted proxy's header.
            .filter(|name| !trusted || name.as_str().contains('_'))
            .cloned()
            .collect();
        for name in doomed {
            headers.remove(name);
        }
        // One lookup of each name, read and written through its entry.
        match headers.entry(X_FORWARDED_FOR) {
            Entry::Occupied(mut lines) => {
                // Every line of a trusted chain, in order: HAProxy's `option forwardfor`
                // adds a line rather than extending the last one.
                let mut chain = String::new();
                if trusted {
                    for line in lines.iter() {
                        if let Ok(line) = line.to_str() {
                            chain.push_str(line);
                            chain.push_str(", ");
                        }
                    }
                }
                let value = match (chain.is_empty(), facts.address.to_str()) {
                    (false, Ok(ip)) => {
                        chain.push_str(ip);
                        HeaderValue::from_maybe_shared(Bytes::from(chain))
                    }
                    // The peer's own, spelled when its connection was accepted.
                    _ => Ok(facts.address.clone()),
                };
                // Inserting drops every line there was; a chain that is no value drops
                // them too.
                match value {
                    Ok(value) => drop(lines.insert(value)),
                    Err(_) => drop(lines.remove_entry_mult()),
                }
            }
            Entry::Vacant(none) => drop(none.insert(facts.address.clone())),
        }
        match headers.entry(X_FORWARDED_PROTO) {
            Entry::Occupied(mut kept) if !trusted => {
                kept.insert(HeaderValue::from_static(scheme));
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(none) => drop(none.insert(HeaderValue::from_static(scheme))),
        }
    }
}

/// Headers through which frameworks learn the client's address, host or original URL
/// from a proxy (Go chi's `RealIP` reads `True-Client-IP`, Rails `Client-IP`, IIS and
/// Symfony route by `X-Original-URL`), beyond `Forwarded` and `X-Forwarded-*`.
const FORWARDING: [&str; 15] = [
    "forwarded",
    "forwarded-for",
    "x-forwarded",
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-cluster-client-ip",
    "x-proxyuser-ip",
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-rewrite-url",
];

/// The prefixes that make any name a forwarding header.
const FORWARDING_PREFIXES: [&str; 2] = ["x-forwarded-", "x-original-"];

/// Bit `b`: some name of [`FORWARDING`] or [`FORWARDING_PREFIXES`] starts with the
/// byte `b` (a letter each, which no `_`/`-` spelling changes).
const FORWARDING_FIRST_BYTES: u128 = {
    let mut bits = 0u128;
    let mut i = 0;
    while i < FORWARDING.len() {
        bits |= 1 << FORWARDING[i].as_bytes()[0];
        i += 1;
    }
    let mut i = 0;
    while i < FORWARDING_PREFIXES.len() {
        bits |= 1 << FORWARDING_PREFIXES[i].as_bytes()[0];
        i += 1;
    }
    bits
};

/// A forwarding header, in any `_`/`-` spelling: one of [`FORWARDING`], any
/// `X-Forwarded-*` or `X-Original-*`. Every name of a request goes through this: most
/// (`Host`, `Accept`, `Mcp-*`) start with a byte none of those does, and are passed on
/// that alone.
fn is_forwarding(name: &HeaderName) -> bool {
    let name = name.as_str();
    let first = name.as_bytes().first().map_or(0, |&b| b);
    first < 128
        && FORWARDING_FIRST_BYTES & 1 << first != 0
        && (FORWARDING.iter().any(|f| spelled_as(name, f))
            || FORWARDING_PREFIXES
                .iter()
                .any(|prefix| spelled_with_prefix(name, prefix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, hosts: &[&str]) -> http::request::Parts {
        let mut builder = http::Request::builder().uri(uri);
        for host in hosts {
            builder = builder.header(header::HOST, *host);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn loopback() -> HostPolicy {
        HostPolicy::new(None, "127.0.0.1:8080".parse().unwrap()).unwrap()
    }

    #[test]
    fn loopback_listeners_accept_only_loopback_names() {
        let policy = loopback();
        for ok in ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:9"] {
            assert!(policy.check(&request("/mcp", &[ok])).is_ok(), "{ok}");
        }
        for bad in [
            "rebind.attacker.example",
            "127.0.0.1.attacker.example:8080",
            "user@127.0.0.1",
            "",
            "localhost:99999",
        ] {
            assert!(policy.check(&request("/mcp", &[bad])).is_err(), "{bad:?}");
        }
        // No host at all, two hosts of which one is foreign, a foreign absolute target.
        assert!(policy.check(&request("/mcp", &[])).is_err());
        assert!(
            policy
                .check(&request("/mcp", &["localhost", "evil.example"]))
                .is_err()
        );
        assert!(
            policy
                .check(&request("http://evil.example/mcp", &["localhost"]))
                .is_err()
        );
        assert!(
            policy
                .check(&request("http://localhost:8080/mcp", &[]))
                .is_ok()
        );
    }

    #[test]
    fn the_remembered_host_passes_alone_and_a_refused_one_is_never_remembered() {
        let policy = loopback();
        let remembered =
            |policy: &HostPolicy| policy.accepted.load().as_deref().map(|b| b.to_vec());
        assert_eq!(remembered(&policy), None);
        for _ in 0..2 {
            assert!(policy.check(&request("/mcp", &["localhost:8080"])).is_ok());
            assert_eq!(remembered(&policy).as_deref(), Some(&b"localhost:8080"[..]));
            // Refused after the memo as before it, and the memo stays the accepted one.
            for bad in [
                "evil.example",
                "localhost:8080.evil.example",
                "localhost:8080 ",
            ] {
                let refused = policy.check(&request("/mcp", &[bad]));
                assert!(
                    matches!(refused, Err(ProxyError::MisdirectedRequest)),
                    "{bad:?}"
                );
            }
            assert_eq!(remembered(&policy).as_deref(), Some(&b"localhost:8080"[..]));
            // Every value is looked at: the remembered one beside a foreign one is refused.
            let both = request("/mcp", &["localhost:8080", "evil.example"]);
            assert!(policy.check(&both).is_err());
            let target = request("http://evil.example/mcp", &["localhost:8080"]);
            assert!(policy.check(&target).is_err());
        }
        // Another accepted name takes the memo's place; the first still passes, parsed.
        assert!(policy.check(&request("/mcp", &["127.0.0.1:8080"])).is_ok());
        assert_eq!(remembered(&policy).as_deref(), Some(&b"127.0.0.1:8080"[..]));
        assert!(policy.check(&request("/mcp", &["localhost:8080"])).is_ok());
    }

    #[test]
    fn configured_patterns() {
        let any = HostPolicy::new(None, "0.0.0.0:8080".parse().unwrap()).unwrap();
        assert!(any.check(&request("/", &["whatever.example"])).is_ok());
        let list = |entries: &[&str]| {
            let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
            HostPolicy::new(Some(&entries), "0.0.0.0:8080".parse().unwrap())
        };
        let policy = list(&["mcp.example.com", "api.example.com:8443", "x.example:*"]).unwrap();
        assert!(policy.check(&request("/", &["MCP.example.com:1"])).is_ok());
        assert!(
            policy
                .check(&request("/", &["api.example.com:8443"]))
                .is_ok()
        );
        assert!(policy.check(&request("/", &["api.example.com"])).is_err());
        assert!(policy.check(&request("/", &["x.example:5"])).is_ok());
        assert!(policy.check(&request("/", &["y.example"])).is_err());
        assert!(
            list(&["*"])
                .unwrap()
                .check(&request("/", &["y.example"]))
                .is_ok()
        );
        for bad in ["", "a b", "u@h", "h/p", "*.example.com", "h:99999"] {
            assert!(list(&[bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_admin_listener_takes_ip_literals_localhost_and_listed_names() {
        let admin = |allowed: Option<&[&str]>, listen: &str| {
            let allowed: Option<Vec<String>> =
                allowed.map(|a| a.iter().map(|e| e.to_string()).collect());
            HostPolicy::for_admin(allowed.as_deref(), listen.parse().unwrap()).unwrap()
        };
        let local = admin(None, "127.0.0.1:9090");
        for ok in [
            "127.0.0.1:9090",
            "localhost:9090",
            "[::1]:9090",
            "10.1.2.3:9090",
            "[2001:db8::1]",
        ] {
            assert!(local.check(&request("/metrics", &[ok])).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9090",
            "127.0.0.1.nip.io",
            "10.1.2",
        ] {
            assert!(local.check(&request("/metrics", &[bad])).is_err(), "{bad}");
        }
        // A non-loopback admin address answers any name, unless names are listed.
        let open = admin(None, "0.0.0.0:9090");
        assert!(open.check(&request("/metrics", &["sidecar:9090"])).is_ok());
        let listed = admin(Some(&["mcp.example.com"]), "0.0.0.0:9090");
        for ok in ["mcp.example.com", "10.1.2.3:9090", "localhost"] {
            assert!(listed.check(&request("/metrics", &[ok])).is_ok(), "{ok}");
        }
        assert!(
            listed
                .check(&request("/metrics", &["sidecar:9090"]))
                .is_err()
        );
        // The proxy's own policy does not take IP literals it was not given.
        assert!(
            loopback()
                .check(&request("/mcp", &["10.1.2.3:8080"]))
                .is_err()
        );
    }

    fn peer(addr: &str) -> Option<Peer> {
        Some(Peer(addr.parse().unwrap()))
    }

    fn facts(addr: &str) -> ConnectionFacts {
        let framing = crate::server::framing::MixedFraming::default();
        ConnectionFacts::new(addr.parse().unwrap(), framing, None)
    }

    #[test]
    fn every_forwarding_name_is_one_in_any_spelling_and_no_other_name_is() {
        let named = FORWARDING.iter().map(|name| name.to_string()).chain(
            FORWARDING_PREFIXES
                .iter()
                .map(|prefix| format!("{prefix}host")),
        );
        for name in named {
            for spelled in [name.clone(), name.replace('-', "_")] {
                let header = HeaderName::from_bytes(spelled.as_bytes()).unwrap();
                assert!(is_forwarding(&header), "{spelled}");
            }
        }
        for other in [
            "host",
            "accept",
            "content-type",
            "content-length",
            "mcp-protocol-version",
            "x-forwarded",
            "x-forwardedx",
            "x-forward",
            "forwarded-fo",
            "client-ips",
            "fastly-client-i",
            "x-originalhost",
            "~",
        ] {
            let header = HeaderName::from_bytes(other.as_bytes()).unwrap();
            assert_eq!(is_forwarding(&header), other == "x-forwarded", "{other}");
        }
    }

    #[test]
    fn forwarding_headers_from_untrusted_peers_are_replaced() {
        let proxies = TrustedProxies::new(&["10.0.0.0/8".into(), "192.0.2.7".into()]).unwrap();
        let spoofed = || {
            let mut h = HeaderMap::new();
            for (name, value) in [
                ("forwarded", "for=1.2.3.4;proto=https"),
                ("x-forwarded-for", "1.2.3.4"),
                ("x-forwarded-host", "admin.internal"),
                ("x-forwarded-proto", "https"),
                ("x-real-ip", "1.2.3.4"),
                ("x_forwarded_for", "5.6.7.8"),
                ("x-forwarded-user", "alice"),
                ("true-client-ip", "1.2.3.4"),
                ("x-original-url", "/admin"),
            ] {
                h.insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                );
            }
            h
        };
        let keep = HeaderName::from_static("x-forwarded-user");
        let mut h = spoofed();
        proxies.rewrite(&mut h, &facts("203.0.113.9:5000"), "http", Some(&keep));
        assert_eq!(h.get("x-forwarded-for").unwrap(), "203.0.113.9");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "http");
        assert_eq!(h.get("x-forwarded-user").unwrap(), "alice");
        for gone in [
            "forwarded",
            "x-forwarded-host",
            "x-real-ip",
            "x_forwarded_for",
        ] {
            assert!(h.get(gone).is_none(), "{gone}");
        }
        let mut h = spoofed();
        h.append("x-forwarded-for", HeaderValue::from_static("203.0.113.7"));
        // A line that is no text is left out of the chain.
        h.append("x-forwarded-for", HeaderValue::from_bytes(b"\xff").unwrap());
        proxies.rewrite(&mut h, &facts("10.1.2.3:5000"), "http", None);
        assert_eq!(
            h.get("x-forwarded-for").unwrap(),
            "1.2.3.4, 203.0.113.7, 10.1.2.3"
        );
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1, "one line");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");
        assert_eq!(h.get("x-forwarded-host").unwrap(), "admin.internal");
        assert!(h.get("x_forwarded_for").is_none());
        // A trusted peer that sent neither: the sidecar's own of both.
        let mut h = HeaderMap::new();
        proxies.rewrite(&mut h, &facts("10.1.2.3:5000"), "https", None);
        assert_eq!(h.get("x-forwarded-for").unwrap(), "10.1.2.3");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");
        assert_eq!(h.len(), 2);
        // An IPv4 peer reached over a dual-stack socket is still that IPv4 peer.
        assert!(proxies.trusts(peer("[::ffff:192.0.2.7]:1")));
        assert!(!TrustedProxies::default().trusts(peer("10.1.2.3:1")));
        assert!(TrustedProxies::new(&["10.0.0.0/33".into()]).is_err());
    }
}
