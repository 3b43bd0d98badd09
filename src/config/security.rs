//! The settings that decide who may talk to whom: the TLS listener and its client
//! certificates (`tls`), the upstream leg's TLS (`upstream_tls`), and how a JWT or mTLS
//! principal is read (`principal.jwt`, `principal.mtls`), with their rules.
//!
//! Invariant: a configuration that passes [`validate`] names every file and URL a
//! principal source or a TLS side needs, and nothing that only another source would use
//! (a stray setting is a problem, not silently ignored). Whether the files themselves are
//! usable is checked by `files.rs`, which reads them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Config, ConfigProblem, PrincipalSource};

/// The client-facing listener's TLS. Unset `cert_file` / `key_file`: plain HTTP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key_file: Option<PathBuf>,
    /// PEM CA bundle: every client must present a certificate chaining to it (mTLS).
    pub client_ca_file: Option<PathBuf>,
    /// How often the three files' content hash is polled, at least 100.
    pub reload_interval_ms: u64,
}

impl TlsConfig {
    /// Whether the client-facing listener speaks TLS: both files are set.
    pub(crate) fn enabled(&self) -> bool {
        self.cert_file.is_some() && self.key_file.is_some()
    }
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            reload_interval_ms: 2000,
        }
    }
}

/// Trust and client certificate for an `https://` upstream.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// PEM CA bundle the upstream's certificate must chain to. Unset: the Mozilla root
    /// set compiled into the binary (`webpki-roots`).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain presented to the upstream (mTLS to the upstream).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// Which identity a verified client certificate stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MtlsIdentity {
    /// The first URI subject alternative name (a SPIFFE ID such as
    /// `spiffe://cluster.local/ns/a/sa/b`).
    #[default]
    UriSan,
    /// The subject distinguished name in RFC 4514 form (`CN=svc,O=Example`).
    Subject,
}

/// `principal.source = "mtls"`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MtlsConfig {
    pub identity: MtlsIdentity,
}

/// `principal.source = "jwt"`: OAuth access tokens in `Authorization: Bearer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    /// The exact `iss` every token must carry.
    pub issuer: Option<String>,
    /// A value the token's `aud` must contain (this resource server).
    pub audience: Option<String>,
    /// A JWKS document on disk (re-read when it changes).
    pub jwks_file: Option<PathBuf>,
    /// An `https://` URL serving the JWKS (fetched, cached, refreshed).
    pub jwks_url: Option<String>,
    /// PEM CA bundle for `jwks_url`. Unset: the compiled-in Mozilla roots.
    pub jwks_ca_file: Option<PathBuf>,
    /// Clock skew tolerated on `exp`, `nbf` and `iat`, at most 600.
    pub leeway_seconds: u64,
    /// URL of the protected resource metadata (RFC 9728), sent in `WWW-Authenticate`.
    pub resource_metadata: Option<String>,
    /// Keep `Authorization` on the forwarded request.
    pub forward_authorization: bool,
    /// How often the JWKS (URL or file) is refreshed in the background, 1..=86400.
    pub jwks_refresh_seconds: u64,
    /// The least time between two fetches of `jwks_url` triggered by an unknown `kid`,
    /// 1..=3600: a client inventing key ids cannot make the sidecar hammer the issuer.
    pub jwks_cooldown_seconds: u64,
    /// Access tokens whose verification is kept until they expire, 0..=1000000 (`0`:
    /// every request's signature is checked). A client sends the same token on each
    /// request; a kept one is still refused once expired or once its key leaves the set.
    pub verified_tokens: u64,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            issuer: None,
            audience: None,
            jwks_file: None,
            jwks_url: None,
            jwks_ca_file: None,
            leeway_seconds: 60,
            resource_metadata: None,
            forward_authorization: true,
            jwks_refresh_seconds: 300,
            jwks_cooldown_seconds: 10,
            verified_tokens: 10_000,
        }
    }
}

/// Where the keys that verify a JWT come from (`principal.jwt.jwks_file` or
/// `principal.jwt.jwks_url`: exactly one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JwksKeys {
    File(PathBuf),
    Url {
        uri: http::Uri,
        /// PEM CA bundle for the URL. Unset: the compiled-in Mozilla roots.
        ca_file: Option<PathBuf>,
    },
}

/// A `principal.jwt` section that passed its rules, its values typed: what a verifier
/// needs, nothing left to unwrap.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JwtSettings {
    pub(crate) issuer: String,
    pub(crate) audience: String,
    pub(crate) keys: JwksKeys,
    pub(crate) leeway_seconds: u64,
    /// Safe inside a quoted string of `WWW-Authenticate`.
    pub(crate) resource_metadata: Option<String>,
    pub(crate) forward_authorization: bool,
    pub(crate) jwks_cooldown_seconds: u64,
    pub(crate) verified_tokens: u64,
}

impl JwtConfig {
    /// This section as `principal.source = "jwt"` uses it, or every problem its rules
    /// find (the same ones [`Config::validate`] lists for it).
    pub(crate) fn settings(&self) -> Result<JwtSettings, Vec<ConfigProblem>> {
        let mut problems = Vec::new();
        let settings = jwt_source(self, &mut |key: &str, message: String| {
            problems.push(ConfigProblem::new(key, message));
        });
        settings.ok_or(problems)
    }
}

/// The most clock skew a JWT may be granted.
const MAX_LEEWAY_SECONDS: u64 = 600;
/// The most verified tokens kept (about 200 bytes each).
const MAX_VERIFIED_TOKENS: u64 = 1_000_000;

/// Every rule of the TLS and principal-source settings.
pub(super) fn validate(config: &Config) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, message: String| problems.push(ConfigProblem::new(key, message));
    empty_paths(config, &mut problem);
    listener_tls(&config.tls, &mut problem);
    upstream_tls(config, &mut problem);
    let principal = &config.principal;
    if principal.source == PrincipalSource::Mtls && config.tls.client_ca_file.is_none() {
        problem(
            "tls.client_ca_file",
            "required when principal.source = \"mtls\"".to_owned(),
        );
    }
    if principal.source == PrincipalSource::Jwt {
        jwt_source(&principal.jwt, &mut problem);
    } else {
        jwt_unused(&principal.jwt, &mut problem);
    }
    problems
}

/// A file setting, if set, names a file: an empty path is a problem.
fn empty_paths(config: &Config, problem: &mut impl FnMut(&str, String)) {
    for (key, path) in [
        ("tls.cert_file", &config.tls.cert_file),
        ("tls.key_file", &config.tls.key_file),
        ("tls.client_ca_file", &config.tls.client_ca_file),
        ("upstream_tls.ca_file", &config.upstream_tls.ca_file),
        ("upstream_tls.cert_file", &config.upstream_tls.cert_file),
        ("upstream_tls.key_file", &config.upstream_tls.key_file),
        ("principal.jwt.jwks_file", &config.principal.jwt.jwks_file),
        (
            "principal.jwt.jwks_ca_file",
            &config.principal.jwt.jwks_ca_file,
        ),
    ] {
        if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            problem(key, "must not be empty".to_owned());
        }
    }
}

/// The listener's certificate and key come together, client certificates need them.
fn listener_tls(tls: &TlsConfig, problem: &mut impl FnMut(&str, String)) {
    pair(&mut *problem, "tls", &tls.cert_file, &tls.key_file);
    if tls.client_ca_file.is_some() && tls.cert_file.is_none() {
        problem(
            "tls.client_ca_file",
            "requires tls.cert_file and tls.key_file (client certificates need a TLS listener)"
                .to_owned(),
        );
    }
    if tls.reload_interval_ms < 100 {
        problem("tls.reload_interval_ms", "must be at least 100".to_owned());
    }
}

/// The upstream leg's client certificate and key come together, and its TLS settings
/// are only for an `https://` upstream.
fn upstream_tls(config: &Config, problem: &mut impl FnMut(&str, String)) {
    let upstream_tls = &config.upstream_tls;
    pair(
        &mut *problem,
        "upstream_tls",
        &upstream_tls.cert_file,
        &upstream_tls.key_file,
    );
    let https_upstream = super::parse_upstream(&config.upstream).is_ok_and(|url| url.is_https());
    if !https_upstream {
        for (key, value) in [
            ("upstream_tls.ca_file", &upstream_tls.ca_file),
            ("upstream_tls.cert_file", &upstream_tls.cert_file),
            ("upstream_tls.key_file", &upstream_tls.key_file),
        ] {
            if value.is_some() {
                problem(key, "only allowed with an https:// upstream".to_owned());
            }
        }
    }
}

/// `principal.source = "jwt"`: who issues the tokens, for whom, where their keys are, and
/// the bounds of the timings. The typed section if no rule failed.
fn jwt_source(jwt: &JwtConfig, report: &mut impl FnMut(&str, String)) -> Option<JwtSettings> {
    let mut passed = true;
    let mut problem = |key: &str, message: String| {
        passed = false;
        report(key, message);
    };
    let issuer = required(&mut problem, "principal.jwt.issuer", &jwt.issuer);
    let audience = required(&mut problem, "principal.jwt.audience", &jwt.audience);
    match (&jwt.jwks_file, &jwt.jwks_url) {
        (None, None) => problem(
            "principal.jwt.jwks_file",
            "one of principal.jwt.jwks_file or principal.jwt.jwks_url is required when \
             principal.source = \"jwt\""
                .to_owned(),
        ),
        (Some(_), Some(_)) => problem(
            "principal.jwt.jwks_url",
            "set either principal.jwt.jwks_file or principal.jwt.jwks_url, not both".to_owned(),
        ),
        _ => {}
    }
    let jwks_uri = match jwt.jwks_url.as_deref().map(check_https_url) {
        Some(Err(message)) => {
            problem("principal.jwt.jwks_url", message.to_owned());
            None
        }
        Some(Ok(uri)) => Some(uri),
        None => None,
    };
    if jwt.jwks_ca_file.is_some() && jwt.jwks_url.is_none() {
        problem(
            "principal.jwt.jwks_ca_file",
            "only allowed with principal.jwt.jwks_url".to_owned(),
        );
    }
    if let Some(url) = &jwt.resource_metadata
        && let Err(message) = check_resource_metadata(url)
    {
        problem("principal.jwt.resource_metadata", message.to_owned());
    }
    if jwt.leeway_seconds > MAX_LEEWAY_SECONDS {
        problem(
            "principal.jwt.leeway_seconds",
            format!("must be at most {MAX_LEEWAY_SECONDS}"),
        );
    }
    if !(1..=86_400).contains(&jwt.jwks_refresh_seconds) {
        problem(
            "principal.jwt.jwks_refresh_seconds",
            "must be between 1 and 86400".to_owned(),
        );
    }
    if !(1..=3600).contains(&jwt.jwks_cooldown_seconds) {
        problem(
            "principal.jwt.jwks_cooldown_seconds",
            "must be between 1 and 3600".to_owned(),
        );
    }
    if jwt.verified_tokens > MAX_VERIFIED_TOKENS {
        problem(
            "principal.jwt.verified_tokens",
            format!("must be at most {MAX_VERIFIED_TOKENS}"),
        );
    }
    if !passed {
        return None;
    }
    // Every rule passed: exactly one key source, and each value below is present.
    let keys = match (&jwt.jwks_file, jwks_uri) {
        (Some(path), None) => JwksKeys::File(path.clone()),
        (None, Some(uri)) => JwksKeys::Url {
            uri,
            ca_file: jwt.jwks_ca_file.clone(),
        },
        _ => return None,
    };
    Some(JwtSettings {
        issuer: issuer?,
        audience: audience?,
        keys,
        leeway_seconds: jwt.leeway_seconds,
        resource_metadata: jwt.resource_metadata.clone(),
        forward_authorization: jwt.forward_authorization,
        jwks_cooldown_seconds: jwt.jwks_cooldown_seconds,
        verified_tokens: jwt.verified_tokens,
    })
}

/// A value `principal.source = "jwt"` requires, not blank.
fn required(
    problem: &mut impl FnMut(&str, String),
    key: &str,
    value: &Option<String>,
) -> Option<String> {
    match value {
        None => problem(key, "required when principal.source = \"jwt\"".to_owned()),
        Some(v) if v.trim().is_empty() => problem(key, "must not be empty".to_owned()),
        Some(v) => return Some(v.clone()),
    }
    None
}

/// Settings of a source that is not in use are problems: most likely a forgotten
/// `source`.
fn jwt_unused(jwt: &JwtConfig, problem: &mut impl FnMut(&str, String)) {
    for (key, set) in [
        ("principal.jwt.issuer", jwt.issuer.is_some()),
        ("principal.jwt.audience", jwt.audience.is_some()),
        ("principal.jwt.jwks_file", jwt.jwks_file.is_some()),
        ("principal.jwt.jwks_url", jwt.jwks_url.is_some()),
        ("principal.jwt.jwks_ca_file", jwt.jwks_ca_file.is_some()),
        (
            "principal.jwt.resource_metadata",
            jwt.resource_metadata.is_some(),
        ),
    ] {
        if set {
            problem(
                key,
                "only allowed with principal.source = \"jwt\"".to_owned(),
            );
        }
    }
}

/// `{section}.cert_file` and `{section}.key_file` come together.
fn pair(
    problem: &mut impl FnMut(&str, String),
    section: &str,
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
) {
    match (cert, key) {
        (Some(_), None) => problem(
            &format!("{section}.key_file"),
            format!("required when {section}.cert_file is set"),
        ),
        (None, Some(_)) => problem(
            &format!("{section}.cert_file"),
            format!("required when {section}.key_file is set"),
        ),
        _ => {}
    }
}

/// An absolute `https://` URL with a host and no userinfo or fragment.
fn check_https_url(url: &str) -> Result<http::Uri, &'static str> {
    const NOT_HTTPS: &str = "must be an absolute https:// URL";
    if url.contains('#') {
        return Err("must not have a fragment (#...)");
    }
    let uri: http::Uri = url.parse().map_err(|_| NOT_HTTPS)?;
    if uri.scheme_str() != Some("https") {
        return Err(NOT_HTTPS);
    }
    let authority = uri.authority().ok_or(NOT_HTTPS)?;
    if authority.as_str().contains('@') {
        return Err("must not contain userinfo (user:password@)");
    }
    if authority.host().is_empty() {
        return Err("must have a host");
    }
    Ok(uri)
}

/// The URL goes into a quoted-string of `WWW-Authenticate`: an http(s) URL with nothing
/// that could end the string or the header.
fn check_resource_metadata(url: &str) -> Result<(), &'static str> {
    if url
        .bytes()
        .any(|b| b == b'"' || b == b'\\' || !(0x21..0x7f).contains(&b))
    {
        return Err("must be printable ASCII without '\"', '\\' or spaces");
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|_| "must be an absolute http:// or https:// URL")?;
    match (uri.scheme_str(), uri.host()) {
        (Some("https" | "http"), Some(host)) if !host.is_empty() => Ok(()),
        _ => Err("must be an absolute http:// or https:// URL"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate::tests::{assert_only, invalid};
    use super::*;

    fn jwt(c: &mut Config) {
        c.principal.source = PrincipalSource::Jwt;
        c.principal.jwt.issuer = Some("https://issuer.example".into());
        c.principal.jwt.audience = Some("https://mcp.example".into());
        c.principal.jwt.jwks_url = Some("https://issuer.example/jwks".into());
    }

    #[test]
    fn tls_rules() {
        let path = || Some(PathBuf::from("/p"));
        assert!(
            invalid(|c| {
                c.tls.cert_file = path();
                c.tls.key_file = path();
                c.tls.client_ca_file = path();
            })
            .is_empty()
        );
        let half = invalid(|c| c.tls.cert_file = path());
        assert_only(&half, "tls.key_file", "required when tls.cert_file is set");
        let half = invalid(|c| c.tls.key_file = path());
        assert_only(&half, "tls.cert_file", "required when tls.key_file is set");
        let ca = invalid(|c| c.tls.client_ca_file = path());
        assert_only(&ca, "tls.client_ca_file", "requires tls.cert_file");
        let mtls = invalid(|c| {
            c.principal.source = PrincipalSource::Mtls;
            c.tls.cert_file = path();
            c.tls.key_file = path();
        });
        assert_only(
            &mtls,
            "tls.client_ca_file",
            "required when principal.source = \"mtls\"",
        );
        let empty = invalid(|c| c.upstream_tls.ca_file = Some(PathBuf::new()));
        assert_eq!(empty[0].key, "upstream_tls.ca_file");
        assert!(empty[0].message.contains("must not be empty"));
        let plain = invalid(|c| c.upstream_tls.ca_file = path());
        assert_only(
            &plain,
            "upstream_tls.ca_file",
            "only allowed with an https:// upstream",
        );
        assert!(
            invalid(|c| {
                c.upstream = "https://mcp.internal:8443".into();
                c.upstream_tls.ca_file = path();
                c.upstream_tls.cert_file = path();
                c.upstream_tls.key_file = path();
            })
            .is_empty()
        );
        let fast = invalid(|c| c.tls.reload_interval_ms = 10);
        assert_only(&fast, "tls.reload_interval_ms", "at least 100");
    }

    #[test]
    fn jwt_rules() {
        assert!(invalid(jwt).is_empty());
        let bare = invalid(|c| c.principal.source = PrincipalSource::Jwt);
        let keys: Vec<&str> = bare.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "principal.jwt.issuer",
                "principal.jwt.audience",
                "principal.jwt.jwks_file"
            ]
        );
        let both = invalid(|c| {
            jwt(c);
            c.principal.jwt.jwks_file = Some("/j".into());
        });
        assert_only(&both, "principal.jwt.jwks_url", "not both");
        for (url, needle) in [
            ("http://issuer.example/jwks", "https://"),
            ("https://u:p@issuer.example/jwks", "userinfo"),
            ("https://issuer.example/jwks#x", "fragment"),
            ("jwks.json", "https://"),
        ] {
            let bad = invalid(|c| {
                jwt(c);
                c.principal.jwt.jwks_url = Some(url.into());
            });
            assert_only(&bad, "principal.jwt.jwks_url", needle);
        }
        for bad in ["https://x/\"", "https://x/ y", "ftp://x", "/relative"] {
            let problems = invalid(|c| {
                jwt(c);
                c.principal.jwt.resource_metadata = Some(bad.into());
            });
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert_eq!(problems[0].key, "principal.jwt.resource_metadata");
        }
        let slow = invalid(|c| {
            jwt(c);
            c.principal.jwt.leeway_seconds = 601;
        });
        assert_only(&slow, "principal.jwt.leeway_seconds", "at most 600");
        let eager = invalid(|c| {
            jwt(c);
            c.principal.jwt.jwks_cooldown_seconds = 0;
        });
        assert_only(
            &eager,
            "principal.jwt.jwks_cooldown_seconds",
            "between 1 and 3600",
        );
        let hoarding = invalid(|c| {
            jwt(c);
            c.principal.jwt.verified_tokens = 1_000_001;
        });
        assert_only(
            &hoarding,
            "principal.jwt.verified_tokens",
            "at most 1000000",
        );
        let stray = invalid(|c| c.principal.jwt.issuer = Some("https://i".into()));
        assert_only(
            &stray,
            "principal.jwt.issuer",
            "only allowed with principal.source",
        );
        let ca = invalid(|c| {
            jwt(c);
            c.principal.jwt.jwks_url = None;
            c.principal.jwt.jwks_file = Some("/j".into());
            c.principal.jwt.jwks_ca_file = Some("/ca".into());
        });
        assert_only(
            &ca,
            "principal.jwt.jwks_ca_file",
            "only allowed with principal.jwt.jwks_url",
        );
    }
}
