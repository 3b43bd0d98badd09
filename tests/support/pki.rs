//! What the authentication tests make for themselves: a certificate authority and the
//! server and client certificates it issues (rcgen), JWT signing keys (RSA, EC, Ed25519)
//! with their JWKS, and files swapped on disk the way Kubernetes swaps Secret files.

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A certificate authority of the tests.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate with its private key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Leaf {
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap()
    }

    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap()
    }
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate for `build`'s parameters, signed by this CA.
    pub fn issue(&self, build: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        build(&mut params);
        let key = KeyPair::generate().unwrap();
        Leaf {
            cert_pem: params.signed_by(&key, &self.issuer).unwrap().pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Leaf {
        self.issue(|p| {
            p.subject_alt_names = vec![
                SanType::IpAddress([127, 0, 0, 1].into()),
                SanType::DnsName("localhost".try_into().unwrap()),
            ];
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        })
    }

    /// A client certificate naming `spiffe_id` (a URI SAN) and `cn` (the subject).
    pub fn client(&self, spiffe_id: &str, cn: &str) -> Leaf {
        self.issue(|p| client_params(p, spiffe_id, cn))
    }

    /// Like [`Ca::client`], but expired a year ago.
    pub fn expired_client(&self, spiffe_id: &str) -> Leaf {
        self.issue(|p| {
            client_params(p, spiffe_id, "expired");
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }
}

pub fn client_params(p: &mut CertificateParams, spiffe_id: &str, cn: &str) {
    p.distinguished_name
        .push(DnType::OrganizationName, "Example");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.subject_alt_names = vec![SanType::URI(spiffe_id.try_into().unwrap())];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
}

/// A directory of files the sidecar reads, replaced atomically (write + rename, as a
/// Secret volume's symlink swap looks to a reader).
pub struct Files(pub tempfile::TempDir);

impl Files {
    pub fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    pub fn put(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path(name);
        let next = self.path(&format!(".{name}.next"));
        std::fs::write(&next, content).unwrap();
        std::fs::rename(&next, &path).unwrap();
        path
    }

    pub fn dir(&self) -> &Path {
        self.0.path()
    }
}

/// A rustls client trusting `ca`, presenting `identity` when given.
pub fn client_config(ca: &Ca, identity: Option<&Leaf>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::aws_lc_rs::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    match identity {
        Some(leaf) => builder
            .with_client_auth_cert(leaf.chain(), leaf.key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    }
}

/// A rustls server configuration for `leaf`, requiring client certificates from
/// `clients` when given.
pub fn server_config(leaf: &Leaf, clients: Option<&Ca>) -> rustls::ServerConfig {
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(leaf.chain(), leaf.key()).unwrap()
}

// ---- JWTs ------------------------------------------------------------------------------

pub const ISSUER: &str = "https://issuer.example";
pub const AUDIENCE: &str = "https://mcp.example";

/// A signing key of the tests and its public JWK.
pub struct Signer {
    pub kid: String,
    pub alg: Algorithm,
    key: EncodingKey,
    pub jwk: Value,
    /// The public key as PEM (SubjectPublicKeyInfo), as a verifier might hold it.
    pub public_pem: String,
}

impl Signer {
    fn new(kid: &str, alg: Algorithm, rcgen_alg: &'static rcgen::SignatureAlgorithm) -> Self {
        let pair = match rcgen_alg {
            a if a == &rcgen::PKCS_RSA_SHA256 => {
                KeyPair::generate_rsa_for(a, rcgen::RsaKeySize::_2048).unwrap()
            }
            a => KeyPair::generate_for(a).unwrap(),
        };
        let pem = pair.serialize_pem();
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(pem.as_bytes()),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
            _ => EncodingKey::from_ec_pem(pem.as_bytes()),
        }
        .unwrap();
        let b64 = |bytes: &[u8]| base64_simd::URL_SAFE_NO_PAD.encode_to_string(bytes);
        let raw = pair.public_key_raw();
        let jwk = match alg {
            // An RSA key may sign with any RSA algorithm we accept; the others name theirs.
            Algorithm::RS256 => {
                let mut jwk = Jwk::from_encoding_key(&key, alg).unwrap();
                jwk.common.key_algorithm = None;
                jwk.common.key_id = Some(kid.to_owned());
                serde_json::to_value(jwk).unwrap()
            }
            Algorithm::EdDSA => {
                json!({"kty": "OKP", "crv": "Ed25519", "x": b64(raw), "alg": "EdDSA", "kid": kid})
            }
            _ => {
                // An uncompressed point: 0x04 || x || y.
                let half = (raw.len() - 1) / 2;
                let crv = if half == 32 { "P-256" } else { "P-384" };
                json!({"kty": "EC", "crv": crv, "x": b64(&raw[1..=half]), "y": b64(&raw[half + 1..]),
                       "alg": format!("{alg:?}"), "kid": kid})
            }
        };
        Self {
            kid: kid.to_owned(),
            alg,
            key,
            jwk,
            public_pem: pair.public_key_pem(),
        }
    }

    pub fn rsa(kid: &str) -> Self {
        Self::new(kid, Algorithm::RS256, &rcgen::PKCS_RSA_SHA256)
    }

    pub fn p256(kid: &str) -> Self {
        Self::new(kid, Algorithm::ES256, &rcgen::PKCS_ECDSA_P256_SHA256)
    }

    pub fn p384(kid: &str) -> Self {
        Self::new(kid, Algorithm::ES384, &rcgen::PKCS_ECDSA_P384_SHA384)
    }

    pub fn ed25519(kid: &str) -> Self {
        Self::new(kid, Algorithm::EdDSA, &rcgen::PKCS_ED25519)
    }

    /// A token for `claims` under this key's algorithm and kid.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_as(self.alg, Some(&self.kid), claims)
    }

    /// A token with another algorithm or key id in its header.
    pub fn sign_as(&self, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

/// A JWKS document holding `signers`' public keys.
pub fn jwks(signers: &[&Signer]) -> String {
    json!({"keys": signers.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Valid access token claims for `sub` of OAuth client `client_id`.
pub fn claims(client_id: &str, sub: &str) -> Value {
    let now = now();
    json!({"iss": ISSUER, "aud": [AUDIENCE, "https://other.example"], "sub": sub,
           "client_id": client_id, "iat": now, "nbf": now, "exp": now + 300})
}

/// A compact JWS signed with an HMAC key: `alg` HS256, the `secret` as key.
pub fn hmac_token(secret: &[u8], kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret).unwrap()).unwrap()
}

/// A token whose header says `none`, with an empty signature.
pub fn unsigned_token(kid: &str, claims: &Value) -> String {
    let b64 = |v: &Value| base64_simd::URL_SAFE_NO_PAD.encode_to_string(v.to_string());
    format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "kid": kid})),
        b64(claims)
    )
}
