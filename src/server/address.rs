//! A peer's address as text: written once per connection ([`super::ConnectionFacts`]), what
//! `X-Forwarded-For` says of the peer on every request of it.

use http::HeaderValue;
use std::net::IpAddr;

/// `ip` (an IPv4-mapped address as the IPv4 address it is) as a header value.
pub(crate) fn header_value(ip: IpAddr) -> HeaderValue {
    let mut text = AddressText::new();
    HeaderValue::from_str(text.of(ip.to_canonical())).expect("digits, dots and colons")
}

/// An address written as `Display` writes it, into a buffer of its own: an IPv4
/// address (nearly every peer) octet by octet (`itoa`), without the formatting
/// machinery.
pub(crate) struct AddressText {
    buffer: [u8; 48],
}

impl AddressText {
    pub(crate) fn new() -> Self {
        Self { buffer: [0; 48] }
    }

    pub(crate) fn of(&mut self, ip: IpAddr) -> &str {
        let written = match ip {
            IpAddr::V4(v4) => {
                let mut at = 0;
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        self.buffer[at] = b'.';
                        at += 1;
                    }
                    let mut digits = itoa::Buffer::new();
                    let digits = digits.format(octet).as_bytes();
                    self.buffer[at..at + digits.len()].copy_from_slice(digits);
                    at += digits.len();
                }
                at
            }
            IpAddr::V6(v6) => {
                let mut cursor = std::io::Cursor::new(&mut self.buffer[..]);
                std::io::Write::write_fmt(&mut cursor, format_args!("{v6}"))
                    .expect("an IPv6 address is at most 45 characters");
                cursor.position() as usize
            }
        };
        std::str::from_utf8(&self.buffer[..written]).expect("digits, dots and colons")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut text = AddressText::new();
        let mut checked = 0;
        for a in [0u8, 1, 9, 10, 99, 100, 199, 255] {
            for b in [0u8, 7, 80, 255] {
                let ip = IpAddr::from([a, b, 255 - b, a ^ b]);
                assert_eq!(text.of(ip), ip.to_string());
                checked += 1;
            }
        }
        for ip in [
            "::",
            "::1",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:255.255.255.255",
            "2001:db8::8a2e:370:7334",
            "fe80::1:2:3:4",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(text.of(ip), ip.to_string());
            checked += 1;
        }
        assert_eq!(checked, 38);
    }

    #[test]
    fn a_mapped_address_is_written_as_its_ipv4_address() {
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(header_value(mapped), "192.0.2.7");
        assert_eq!(header_value("2001:db8::1".parse().unwrap()), "2001:db8::1");
    }
}
