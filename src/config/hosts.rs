//! Host patterns (`allowed_hosts`) and peer networks (`principal.trusted_proxies`),
//! parsed once into typed values: the configuration checks them, and the ingress phase
//! and the admin listener use what was parsed.
//!
//! Invariant: a pattern or network that parses here is one the listeners apply exactly
//! as written; one that does not is a configuration problem naming its entry.

use ipnet::IpNet;
use std::net::IpAddr;

/// One `allowed_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// `*`: any host.
    Any,
    /// `host` or `host:*`: this host on any port (or none).
    Host(String),
    /// `host:port`.
    HostPort(String, u16),
}

impl HostPattern {
    pub(crate) fn parse(entry: &str) -> Result<Self, &'static str> {
        if entry == "*" {
            return Ok(HostPattern::Any);
        }
        const SHAPE: &str = "is not a host[:port], host:* or *";
        let (host, port) = match entry.strip_suffix(":*") {
            Some(host) => (split_authority(host).ok_or(SHAPE)?.0, None),
            None => split_authority(entry).ok_or(SHAPE)?,
        };
        if host.contains('*') {
            return Err(SHAPE);
        }
        let host = host.to_ascii_lowercase();
        Ok(match port {
            Some(port) => HostPattern::HostPort(host, port),
            None => HostPattern::Host(host),
        })
    }

    pub(crate) fn matches(&self, host: &str, port: Option<u16>) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Host(h) => h.eq_ignore_ascii_case(host),
            HostPattern::HostPort(h, p) => h.eq_ignore_ascii_case(host) && port == Some(*p),
        }
    }
}

/// `host[:port]` with a non-empty host, no userinfo, and a port that is a port.
pub(crate) fn split_authority(text: &str) -> Option<(&str, Option<u16>)> {
    let authority: http::uri::Authority = text.parse().ok()?;
    let host = authority.host();
    if host.is_empty() || text.contains('@') {
        return None;
    }
    let port = match &authority.as_str()[host.len()..] {
        "" => None,
        rest => Some(rest.strip_prefix(':')?.parse::<u16>().ok()?),
    };
    // The authority keeps the text as given, so its host is the text's prefix.
    Some((&text[..host.len()], port))
}

/// An entry of `allowed_hosts` or `principal.trusted_proxies` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EntryError {
    /// Not an IP address or CIDR (`principal.trusted_proxies`).
    #[error("entry {0:?} is not an address or CIDR")]
    NotANet(String),
    /// Not a host pattern (`allowed_hosts`); `shape` says what it should be.
    #[error("entry {entry:?} {shape}")]
    NotAHost { entry: String, shape: &'static str },
}

/// `principal.trusted_proxies`: CIDRs or single addresses.
pub(crate) fn parse_nets(entries: &[String]) -> Result<Vec<IpNet>, EntryError> {
    entries
        .iter()
        .map(|entry| {
            entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| EntryError::NotANet(entry.clone()))
        })
        .collect()
}

/// `allowed_hosts`: every entry a pattern.
pub(crate) fn parse_hosts(entries: &[String]) -> Result<Vec<HostPattern>, EntryError> {
    entries.iter().map(|entry| host_pattern(entry)).collect()
}

/// One `allowed_hosts` entry.
pub(crate) fn host_pattern(entry: &str) -> Result<HostPattern, EntryError> {
    HostPattern::parse(entry).map_err(|shape| EntryError::NotAHost {
        entry: entry.to_owned(),
        shape,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authority_splits_into_its_own_host_text_and_port() {
        for (text, split) in [
            ("example.com", Some(("example.com", None))),
            ("Example.COM:8080", Some(("Example.COM", Some(8080)))),
            ("[::1]:80", Some(("[::1]", Some(80)))),
            ("[::1]", Some(("[::1]", None))),
            ("127.0.0.1:0", Some(("127.0.0.1", Some(0)))),
            ("user@host", None),
            (":80", None),
            ("host:99999", None),
            ("host:", None),
            ("host:8x", None),
            ("", None),
        ] {
            assert_eq!(split_authority(text), split, "{text:?}");
        }
    }
}
