//! Who a request is from once proxies are counted in: the client whose shares it spends
//! and whom the audit record names.
//!
//! Invariant: only a peer in `principal.trusted_proxies` is believed about anyone else,
//! and of its `X-Forwarded-For` chain only what trusted hops vouch for: the first
//! untrusted address from the right. An IPv6 client is then grouped by its /64 by
//! [`crate::store::Owner`], as a peer is.

use super::{Peer, TrustedProxies, X_FORWARDED_FOR};
use http::HeaderMap;
use std::net::IpAddr;

impl TrustedProxies {
    /// The client a request is from: the peer, or for a trusted peer the first address
    /// of its `X-Forwarded-For` chain (every line, read from the right) that is not a
    /// trusted proxy: each trusted hop appended the address it saw, so entries left of
    /// the first untrusted one are whatever that client wrote and are never believed.
    /// An entry that is not an address ends the walk at the hop after it (the nearest
    /// proxy vouched for nothing further); a chain of trusted proxies only names its
    /// leftmost.
    pub(crate) fn client(&self, headers: &HeaderMap, peer: Option<Peer>) -> Option<IpAddr> {
        let Peer(addr) = peer?;
        let mut client = addr.ip().to_canonical();
        if !self.trusts(peer) {
            return Some(client);
        }
        let lines = headers.get_all(X_FORWARDED_FOR).iter().rev();
        let entries = lines
            .map(|v| v.to_str().unwrap_or(""))
            .flat_map(|line| line.rsplit(','));
        for entry in entries {
            let Some(ip) = forwarded_address(entry.trim()) else {
                break;
            };
            client = ip;
            if !self.nets.iter().any(|net| net.contains(&ip)) {
                break;
            }
        }
        Some(client)
    }
}

/// One `X-Forwarded-For` entry as proxies write it: an address, a bracketed IPv6
/// address, either with a port.
fn forwarded_address(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok
            .then(|| ip.parse::<std::net::Ipv6Addr>().ok())
            .flatten()
            .map(|ip| IpAddr::V6(ip).to_canonical());
    }
    let (ip, port) = entry.rsplit_once(':')?;
    let ip = ip.parse::<std::net::Ipv4Addr>().ok()?;
    is_port(port).then_some(IpAddr::V4(ip))
}

fn is_port(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn chain(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(X_FORWARDED_FOR, HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    fn client(proxies: &TrustedProxies, lines: &[&str], peer: &str) -> IpAddr {
        proxies
            .client(&chain(lines), Some(Peer(peer.parse().unwrap())))
            .unwrap()
    }

    #[test]
    fn behind_a_trusted_proxy_the_client_is_the_first_untrusted_hop_from_the_right() {
        let proxies = TrustedProxies::new(&["10.0.0.0/8".into(), "192.0.2.7".into()]).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // The ingress appended the address it saw; what the client wrote before it is
        // never believed.
        assert_eq!(
            client(&proxies, &["6.6.6.6, 203.0.113.5"], "10.0.0.2:1"),
            ip("203.0.113.5")
        );
        // Two trusted hops, on two lines (HAProxy adds a line), then the client.
        assert_eq!(
            client(
                &proxies,
                &["6.6.6.6, 203.0.113.5", "192.0.2.7"],
                "10.0.0.2:1"
            ),
            ip("203.0.113.5")
        );
        // Ports and brackets as some proxies write them.
        assert_eq!(
            client(&proxies, &["203.0.113.5:4711"], "10.0.0.2:1"),
            ip("203.0.113.5")
        );
        assert_eq!(
            client(&proxies, &["[2001:db8::1]:443"], "10.0.0.2:1"),
            ip("2001:db8::1")
        );
        assert_eq!(
            client(&proxies, &["::ffff:203.0.113.5"], "10.0.0.2:1"),
            ip("203.0.113.5")
        );
        // An untrusted peer's chain is not read at all.
        assert_eq!(
            client(&proxies, &["10.9.9.9"], "198.51.100.1:1"),
            ip("198.51.100.1")
        );
        // No chain, or garbage right after the trusted hop: the nearest proxy vouched
        // for nothing further, so the request is its own.
        assert_eq!(client(&proxies, &[], "10.0.0.2:1"), ip("10.0.0.2"));
        assert_eq!(
            client(&proxies, &["203.0.113.5, unknown"], "10.0.0.2:1"),
            ip("10.0.0.2")
        );
        assert_eq!(
            client(
                &proxies,
                &["203.0.113.5, 10.0.0.3, bogus:99999"],
                "10.0.0.2:1"
            ),
            ip("10.0.0.2")
        );
        // Only trusted hops: the leftmost is the origin.
        assert_eq!(
            client(&proxies, &["10.0.0.4, 10.0.0.3"], "10.0.0.2:1"),
            ip("10.0.0.4")
        );
        assert_eq!(TrustedProxies::default().client(&chain(&[]), None), None);
    }
}
