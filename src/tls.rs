//! TLS on both legs, with rustls on the aws-lc-rs provider: the listener's server
//! configuration (certificate and key, and for mTLS the client CA), re-read when its
//! files change, and the client configurations for an `https://` upstream and a JWKS URL.
//!
//! Invariant: a configuration in use was built from files that parsed, whose key matches
//! the certificate and whose certificate had not expired when read; a change on disk
//! replaces it only if the new files pass the same checks (a broken set keeps the old
//! configuration, is logged once and counted), and connections already open keep the
//! session they negotiated. Only TLS 1.2 and 1.3 are spoken. A listener with a client CA
//! refuses every handshake that does not present a certificate chaining to it, valid
//! now, allowed for client authentication (`extendedKeyUsage`, `keyUsage`) and, with
//! `principal.source = "mtls"`, naming the configured identity.
//!
//! Roots for outbound TLS without a configured CA file are `webpki-roots` (the Mozilla
//! root set compiled in), not the platform verifier: the sidecar runs in minimal
//! container images that often ship no CA bundle, and compiled-in roots make the same
//! binary trust the same issuers everywhere. Private CAs (the usual case for an
//! in-cluster upstream) go in `upstream_tls.ca_file` / `principal.jwt.jwks_ca_file`.

mod metrics;
pub(crate) mod peer;

pub use metrics::TlsMetrics;

use crate::config::{ConfigProblem, MtlsIdentity, TlsConfig, env_var_for};
use crate::file_watch::{FilePoll, Seen};
use arc_swap::ArcSwap;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use peer::PeerIdentity;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore,
    ServerConfig, SignatureScheme,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use zeroize::Zeroizing;

/// TLS 1.3 and 1.2, nothing older.
const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The one crypto provider of every TLS configuration.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A file setting that cannot be used: names the key, its environment variable and the
/// file, never the file's content.
#[derive(Debug, thiserror::Error)]
#[error("{key} ({env}): {path}: {problem}", env = env_var_for(key), path = path.display())]
pub struct FileError {
    pub(crate) key: &'static str,
    pub(crate) path: PathBuf,
    pub(crate) problem: FileProblem,
}

impl FileError {
    fn new(key: &'static str, path: &Path, problem: FileProblem) -> Self {
        Self {
            key,
            path: path.to_owned(),
            problem,
        }
    }

    /// As a `check-config` problem.
    pub(crate) fn to_problem(&self) -> ConfigProblem {
        ConfigProblem::new(
            self.key,
            format!("{}: {}", self.path.display(), self.problem),
        )
    }
}

/// What is wrong with a PEM file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileProblem {
    #[error("cannot read: {0}")]
    Unreadable(String),
    #[error("no PEM certificate in the file")]
    NoCertificate,
    #[error("PEM does not parse: {0}")]
    Pem(String),
    #[error("no PEM private key in the file")]
    NoPrivateKey,
    #[error("certificate does not parse as X.509")]
    BadCertificate,
    #[error("certificate expired on {0}")]
    Expired(String),
    #[error("private key is not usable: {0}")]
    BadKey(String),
    #[error("private key does not match the certificate in {0}")]
    KeyMismatch(String),
    #[error("not a usable CA certificate: {0}")]
    BadCa(String),
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, FileError> {
    std::fs::read(path).map_err(|e| {
        FileError::new(
            key,
            path,
            FileProblem::Unreadable(e.to_string().to_lowercase()),
        )
    })
}

/// A PEM file's bytes, read now or already read (the watch applies exactly the bytes it
/// hashed), with what names the file in an error: its configuration key and path.
#[derive(Clone, Copy)]
struct Pem<'a> {
    key: &'static str,
    path: &'a Path,
    bytes: &'a [u8],
}

impl Pem<'_> {
    fn error(&self, problem: FileProblem) -> FileError {
        FileError::new(self.key, self.path, problem)
    }
}

fn certificates_in(pem: Pem<'_>) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let certs = CertificateDer::pem_slice_iter(pem.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem.error(FileProblem::Pem(e.to_string())))?;
    if certs.is_empty() {
        return Err(pem.error(FileProblem::NoCertificate));
    }
    Ok(certs)
}

/// A certificate chain and the private key of its leaf, checked to match and the leaf
/// checked not to have expired.
pub(crate) fn identity_pair(
    cert_key: &'static str,
    cert_path: &Path,
    key_key: &'static str,
    key_path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), FileError> {
    let cert_bytes = read(cert_key, cert_path)?;
    let key_bytes = Zeroizing::new(read(key_key, key_path)?);
    identity_pair_in(
        Pem {
            key: cert_key,
            path: cert_path,
            bytes: &cert_bytes,
        },
        Pem {
            key: key_key,
            path: key_path,
            bytes: &key_bytes,
        },
    )
}

fn identity_pair_in(
    cert: Pem<'_>,
    key: Pem<'_>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), FileError> {
    let chain = certificates_in(cert)?;
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0])
        .map_err(|_| cert.error(FileProblem::BadCertificate))?;
    let not_after = leaf.validity().not_after;
    if not_after.timestamp() < UnixTime::now().as_secs() as i64 {
        return Err(cert.error(FileProblem::Expired(not_after.to_string())));
    }
    let private = PrivateKeyDer::from_pem_slice(key.bytes).map_err(|e| {
        key.error(match e {
            pem::Error::NoItemsFound => FileProblem::NoPrivateKey,
            e => FileProblem::Pem(e.to_string()),
        })
    })?;
    match CertifiedKey::from_der(chain.clone(), private.clone_key(), &provider()) {
        Ok(_) => Ok((chain, private)),
        Err(rustls::Error::InconsistentKeys(_)) => {
            Err(key.error(FileProblem::KeyMismatch(cert.path.display().to_string())))
        }
        Err(e) => Err(key.error(FileProblem::BadKey(e.to_string()))),
    }
}

/// A CA bundle as trust anchors.
pub(crate) fn roots(key: &'static str, path: &Path) -> Result<RootCertStore, FileError> {
    let bytes = read(key, path)?;
    roots_in(Pem {
        key,
        path,
        bytes: &bytes,
    })
}

fn roots_in(pem: Pem<'_>) -> Result<RootCertStore, FileError> {
    let mut store = RootCertStore::empty();
    for cert in certificates_in(pem)? {
        store
            .add(cert)
            .map_err(|e| pem.error(FileProblem::BadCa(e.to_string())))?;
    }
    Ok(store)
}

/// The listener's files.
#[derive(Debug, Clone)]
struct ListenerFiles {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
}

impl ListenerFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        self.named().map(|(_, path)| path)
    }

    /// Each file with its configuration key: the certificate, the key, the client CA.
    fn named(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        [
            Some(("tls.cert_file", &self.cert)),
            Some(("tls.key_file", &self.key)),
            self.client_ca.as_ref().map(|ca| ("tls.client_ca_file", ca)),
        ]
        .into_iter()
        .flatten()
        .map(|(key, path)| (key, path.as_path()))
    }
}

/// The listener's TLS: the configuration in use, swapped when the files change.
pub(crate) struct ServerTls {
    files: ListenerFiles,
    identity: Option<MtlsIdentity>,
    current: ArcSwap<ServerConfig>,
    handshake_timeout: Duration,
    metrics: Arc<TlsMetrics>,
}

impl ServerTls {
    /// From `tls`, with the watch of its files for [`ServerTls::watch`]; `None` when the
    /// listener speaks plain HTTP. `identity`: the identity every client certificate
    /// must name (`principal.source = "mtls"`).
    pub(crate) fn load(
        tls: &TlsConfig,
        identity: Option<MtlsIdentity>,
        handshake_timeout: Duration,
        metrics: Arc<TlsMetrics>,
    ) -> Result<Option<(Self, FilePoll)>, FileError> {
        let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) else {
            return Ok(None);
        };
        let files = ListenerFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: tls.client_ca_file.clone(),
        };
        // One read for the configuration and the watch's baseline: a change landing
        // after it is seen at the first poll instead of being taken for the baseline.
        let contents = read_all(&files)?;
        let config = build_from(&files, identity, &contents)?;
        let loaded: Vec<&[u8]> = contents.iter().map(|bytes| &bytes[..]).collect();
        let poll = FilePoll::loaded(files.paths().map(Path::to_owned).collect(), &loaded);
        let tls = Self {
            files,
            identity,
            current: ArcSwap::from_pointee(config),
            handshake_timeout,
            metrics,
        };
        Ok(Some((tls, poll)))
    }

    /// Complete a handshake (bounded by the handshake timeout) with the configuration in
    /// use now, and read the client's identity when one is required.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<(TlsStream<TcpStream>, Option<PeerIdentity>)> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.current.load_full());
        let handshake = tokio::time::timeout(self.handshake_timeout, acceptor.accept(stream));
        let stream = match handshake.await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                self.metrics.tls_handshake_failed();
                return Err(e);
            }
            Err(_) => {
                self.metrics.tls_handshake_failed();
                return Err(std::io::ErrorKind::TimedOut.into());
            }
        };
        let identity = self.identity.and_then(|kind| {
            let leaf = stream.get_ref().1.peer_certificates()?.first()?;
            peer::identity(leaf, kind)
                .ok()
                .map(|id| PeerIdentity(id.into()))
        });
        Ok((stream, identity))
    }

    /// Swap in a new configuration whenever `poll` (from [`ServerTls::load`]) sees the
    /// files change, until `stop`. A cert/key pair caught half-written simply fails and
    /// is retried when the other half lands (the content changes again).
    pub(crate) async fn watch(
        self: Arc<Self>,
        poll: FilePoll,
        interval: Duration,
        stop: watch::Receiver<bool>,
    ) {
        poll.run(interval, None, stop, |seen| match seen {
            Seen::Unchanged => {}
            Seen::Unreadable { path, error } => {
                tracing::error!(path = %path.display(), %error, "TLS file unreadable; keeping the current certificate");
                self.metrics.tls_reload(false);
            }
            Seen::Changed(contents) => match build_from(&self.files, self.identity, &contents) {
                Ok(config) => {
                    self.current.store(Arc::new(config));
                    tracing::info!(cert = %self.files.cert.display(), "TLS files changed; new certificate in use");
                    self.metrics.tls_reload(true);
                }
                Err(e) => {
                    tracing::error!(error = %e, "TLS files changed but are not usable; keeping the current certificate");
                    self.metrics.tls_reload(false);
                }
            },
        })
        .await
    }
}

/// A server configuration from the listener's files.
/// The listener's files as they are now, in the order [`ListenerFiles::paths`] gives.
fn read_all(files: &ListenerFiles) -> Result<Vec<Zeroizing<Vec<u8>>>, FileError> {
    files
        .named()
        .map(|(key, path)| read(key, path).map(Zeroizing::new))
        .collect()
}

/// The listener's configuration from `contents`: the bytes of the files, in the order
/// [`ListenerFiles::paths`] gives them.
fn build_from(
    files: &ListenerFiles,
    identity: Option<MtlsIdentity>,
    contents: &[Zeroizing<Vec<u8>>],
) -> Result<ServerConfig, FileError> {
    let mut pems = files
        .named()
        .zip(contents)
        .map(|((key, path), bytes)| Pem { key, path, bytes });
    let (Some(cert), Some(key)) = (pems.next(), pems.next()) else {
        unreachable!("a listener's files are a certificate and a key at least");
    };
    let client_ca = pems.next();
    let (chain, private) = identity_pair_in(cert, key)?;
    let certified = CertifiedKey::from_der(chain, private, &provider())
        .map_err(|e| key.error(FileProblem::BadKey(e.to_string())))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .expect("aws-lc-rs supports TLS 1.2 and 1.3");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(roots_in(ca)?);
            let inner = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| ca.error(FileProblem::BadCa(e.to_string())))?;
            builder.with_client_cert_verifier(Arc::new(ClientCertificates { inner, identity }))
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(OneCertificate(Arc::new(certified))));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The listener's one certificate, whatever the client asks for.
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// WebPKI client verification (chain to the CA, validity, `extendedKeyUsage`
/// clientAuth when present), plus what WebPKI leaves out: `keyUsage` must allow
/// signatures, and the certificate must name the identity the principal is read from.
#[derive(Debug)]
struct ClientCertificates {
    inner: Arc<dyn ClientCertVerifier>,
    identity: Option<MtlsIdentity>,
}

impl ClientCertVerifier for ClientCertificates {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        peer::check_usage(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::InvalidPurpose))?;
        if let Some(kind) = self.identity {
            peer::identity(end_entity, kind).map_err(|_| {
                rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
            })?;
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A client configuration: trust `ca` (key and file) or the compiled-in Mozilla roots,
/// and present `identity` (cert and key settings) when given.
pub(crate) fn client_config(
    ca: Option<(&'static str, &Path)>,
    identity: Option<[(&'static str, &Path); 2]>,
) -> Result<ClientConfig, FileError> {
    let roots = match ca {
        Some((key, path)) => roots(key, path)?,
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .expect("aws-lc-rs supports TLS 1.2 and 1.3")
        .with_root_certificates(roots);
    Ok(match identity {
        None => builder.with_no_client_auth(),
        Some([(cert_key, cert_path), (key_key, key_path)]) => {
            let (chain, key) = identity_pair(cert_key, cert_path, key_key, key_path)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                FileError::new(key_key, key_path, FileProblem::BadKey(e.to_string()))
            })?
        }
    })
}

/// A connector speaking HTTP/1.1 over TLS with `config` (SNI and verification from the
/// request's host), or plain HTTP too unless `https_only`.
pub(crate) fn https_connector(
    config: ClientConfig,
    connect_timeout: Duration,
    https_only: bool,
) -> HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config);
    let builder = if https_only {
        builder.https_only()
    } else {
        builder.https_or_http()
    };
    builder.enable_http1().wrap_connector(http)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    /// The watch applies the bytes it hashed, not a second read of the files: a file
    /// rewritten in place after the poll (truncated, then written again with the same
    /// content) cannot make it fail and then take the restored content for the baseline.
    #[test]
    fn a_change_is_built_from_the_bytes_the_watch_read() {
        let dir = tempfile::tempdir().unwrap();
        let files = ListenerFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
            client_ca: None,
        };
        // On disk right now: a file being rewritten in place.
        std::fs::write(&files.cert, "").unwrap();
        std::fs::write(&files.key, "").unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let read = [
            Zeroizing::new(cert.pem().into_bytes()),
            Zeroizing::new(key.serialize_pem().into_bytes()),
        ];

        let on_disk = read_all(&files).unwrap();
        let error = build_from(&files, None, &on_disk).expect_err("the files on disk are empty");
        assert_eq!(error.key, "tls.cert_file");
        build_from(&files, None, &read).expect("the bytes the watch read are a usable pair");

        let other = KeyPair::generate().unwrap();
        let mismatched = [
            read[0].clone(),
            Zeroizing::new(other.serialize_pem().into_bytes()),
        ];
        let error = build_from(&files, None, &mismatched).expect_err("another key");
        assert_eq!(error.key, "tls.key_file");
        assert!(matches!(error.problem, FileProblem::KeyMismatch(_)));
    }
}
