//! The peer identity at the TLS edge: which identity a verified client certificate
//! stands for, its first URI subject alternative name (a SPIFFE ID) or its subject
//! distinguished name in RFC 4514 form.
//!
//! Invariant: an identity is read only from a certificate the TLS handshake already
//! verified (chain, validity, extended key usage), and only if that certificate may sign
//! (a `keyUsage` extension without `digitalSignature` is refused) and names the identity
//! the configuration asks for; a certificate that does not is refused at the handshake,
//! so a connection that reaches the proxy always has its identity. The subject is
//! written the way Python's `cryptography` writes `Name.rfc4514_string()`, so an operator
//! can compute the principal of a certificate with the reference tooling.

use crate::config::MtlsIdentity;
use std::sync::Arc;
use x509_parser::der_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// The verified identity of a TLS peer, put in each request's extensions by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerIdentity(pub(crate) Arc<str>);

/// Why a verified certificate cannot be used as a client identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IdentityError {
    #[error("certificate does not parse")]
    Unparseable,
    #[error("certificate key usage does not allow digital signatures")]
    KeyUsage,
    #[error("certificate has no URI subject alternative name")]
    NoUriSan,
    #[error("certificate has an empty subject")]
    EmptySubject,
}

/// The certificate may be used to authenticate a TLS client: when it restricts its key
/// usage, `digitalSignature` is among them (the handshake signature is one).
pub(crate) fn check_usage(der: &[u8]) -> Result<(), IdentityError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|_| IdentityError::Unparseable)?;
    match cert.key_usage() {
        Ok(None) => Ok(()),
        Ok(Some(usage)) if usage.value.digital_signature() => Ok(()),
        Ok(Some(_)) => Err(IdentityError::KeyUsage),
        Err(_) => Err(IdentityError::Unparseable),
    }
}

/// The identity `kind` names in the certificate `der`.
pub(crate) fn identity(der: &[u8], kind: MtlsIdentity) -> Result<String, IdentityError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|_| IdentityError::Unparseable)?;
    match kind {
        MtlsIdentity::UriSan => {
            let san = cert
                .subject_alternative_name()
                .map_err(|_| IdentityError::Unparseable)?
                .ok_or(IdentityError::NoUriSan)?;
            san.value
                .general_names
                .iter()
                .find_map(|name| match name {
                    GeneralName::URI(uri) if !uri.is_empty() => Some((*uri).to_owned()),
                    _ => None,
                })
                .ok_or(IdentityError::NoUriSan)
        }
        MtlsIdentity::Subject => {
            let dn = rfc4514(cert.subject());
            if dn.is_empty() {
                return Err(IdentityError::EmptySubject);
            }
            Ok(dn)
        }
    }
}

/// RFC 4514: RDNs last to first, `,` between them, `+` inside a multi-valued one, known
/// attribute types by their short name, others by dotted OID; values that are not
/// strings as `#` and the hex of their DER encoding.
pub(crate) fn rfc4514(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter_rdn().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attribute.attr_type().to_id_string();
            out.push_str(short_name(&oid).unwrap_or(&oid));
            out.push('=');
            match text(attribute.attr_value()) {
                Some(value) => escape_into(&value, &mut out),
                None => {
                    out.push('#');
                    out.push_str(&hex::encode(der_of(attribute.attr_value())));
                }
            }
        }
    }
    out
}

/// The short names `cryptography` (and RFC 4514 §3) use.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// A directory string's text; `None` for any other type.
fn text(value: &Any<'_>) -> Option<String> {
    let data = value.data;
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::VisibleString => std::str::from_utf8(data).ok().map(str::to_owned),
        // T.61 as ISO 8859-1, as `cryptography` reads it.
        Tag::T61String => Some(data.iter().map(|&b| char::from(b)).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            data.len()
                .is_multiple_of(2)
                .then(|| String::from_utf16(&units).ok())
                .flatten()
        }
        Tag::UniversalString => data
            .len()
            .is_multiple_of(4)
            .then(|| {
                data.chunks_exact(4)
                    .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                    .collect::<Option<String>>()
            })
            .flatten(),
        _ => None,
    }
}

/// RFC 4514 §2.4 escaping, exactly as `cryptography`'s `_escape_dn_value`.
fn escape_into(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '\\' | '"' | '+' | ',' | ';' | '<' | '>' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => out.push_str("\\00"),
            '#' | ' ' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            c => out.push(c),
        }
    }
}

/// The DER encoding (tag, length, content) of a value read as `ANY`.
fn der_of(value: &Any<'_>) -> Vec<u8> {
    let class = match value.class() {
        Class::Universal => 0x00,
        Class::Application => 0x40,
        Class::ContextSpecific => 0x80,
        Class::Private => 0xc0,
    };
    let constructed = if value.header.is_constructed() {
        0x20
    } else {
        0
    };
    let tag = value.tag().0;
    let mut out = Vec::with_capacity(value.data.len() + 8);
    if tag < 31 {
        out.push(class | constructed | tag as u8);
    } else {
        out.push(class | constructed | 0x1f);
        let mut groups = Vec::new();
        let mut rest = tag;
        loop {
            groups.push((rest & 0x7f) as u8);
            rest >>= 7;
            if rest == 0 {
                break;
            }
        }
        for (i, group) in groups.iter().enumerate().rev() {
            out.push(if i > 0 { group | 0x80 } else { *group });
        }
    }
    let len = value.data.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(value.data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, DnValue, KeyPair, KeyUsagePurpose, SanType,
    };

    fn cert(build: impl FnOnce(&mut CertificateParams)) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        build(&mut params);
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn first_uri_san_is_the_identity() {
        let der = cert(|p| {
            p.subject_alt_names = vec![
                SanType::DnsName("svc.example".try_into().unwrap()),
                SanType::URI("spiffe://cluster.local/ns/a/sa/b".try_into().unwrap()),
                SanType::URI("spiffe://cluster.local/ns/a/sa/c".try_into().unwrap()),
            ];
        });
        assert_eq!(
            identity(&der, MtlsIdentity::UriSan).unwrap(),
            "spiffe://cluster.local/ns/a/sa/b"
        );
        let none = cert(|p| p.subject_alt_names = vec![SanType::DnsName("x".try_into().unwrap())]);
        assert_eq!(
            identity(&none, MtlsIdentity::UriSan),
            Err(IdentityError::NoUriSan)
        );
        assert_eq!(
            identity(&none, MtlsIdentity::Subject),
            Err(IdentityError::EmptySubject)
        );
        assert_eq!(
            identity(b"junk", MtlsIdentity::UriSan),
            Err(IdentityError::Unparseable)
        );
    }

    #[test]
    fn subject_in_rfc4514_order_and_escaping() {
        let der = cert(|p| {
            p.distinguished_name.push(DnType::CountryName, "DE");
            p.distinguished_name
                .push(DnType::OrganizationName, "Example, Inc.");
            p.distinguished_name.push(
                DnType::OrganizationalUnitName,
                DnValue::BmpString("Zoë+Ops".try_into().unwrap()),
            );
            p.distinguished_name.push(DnType::CommonName, "#svc ");
        });
        assert_eq!(
            identity(&der, MtlsIdentity::Subject).unwrap(),
            "CN=\\#svc\\ ,OU=Zoë\\+Ops,O=Example\\, Inc.,C=DE"
        );
    }

    #[test]
    fn key_usage_must_allow_signatures() {
        let signing = cert(|p| p.key_usages = vec![KeyUsagePurpose::DigitalSignature]);
        assert!(check_usage(&signing).is_ok());
        assert!(check_usage(&cert(|_| {})).is_ok());
        let encipher = cert(|p| p.key_usages = vec![KeyUsagePurpose::KeyEncipherment]);
        assert_eq!(check_usage(&encipher), Err(IdentityError::KeyUsage));
    }
}
