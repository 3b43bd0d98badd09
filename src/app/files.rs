//! The files a configuration names, read and checked the way the sidecar will use them
//! (the key file, PEM certificates and keys: parse, key matches certificate, not
//! expired; CA bundles; the admin secret; a JWKS file): start-up's business, so the configuration itself
//! does no I/O and imports nothing above its floor.
//!
//! Invariant: every file is checked in the same pass and each failure becomes one
//! [`ConfigProblem`] naming its key (hence its environment variable) and the file, never
//! its content.

use crate::auth::jwks::KeySet;
use crate::config::{Config, ConfigProblem};
use crate::tls;
use std::path::Path;
use zeroize::Zeroizing;

/// Every problem with the files a (validated) configuration names.
pub fn check_files(config: &Config) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    if let Some(path) = &config.state.keys_file
        && let Err(e) = crate::token::KeyRing::load(path)
    {
        problems.push(ConfigProblem::new("state.keys_file", e.to_string()));
    }
    let mut check = |result: Result<(), tls::FileError>| {
        if let Err(e) = result {
            problems.push(e.to_problem());
        }
    };
    let tls = &config.tls;
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        check(tls::identity_pair("tls.cert_file", cert, "tls.key_file", key).map(drop));
    }
    if let Some(ca) = &tls.client_ca_file {
        check(tls::roots("tls.client_ca_file", ca).map(drop));
    }
    let upstream = &config.upstream_tls;
    if let Some(ca) = &upstream.ca_file {
        check(tls::roots("upstream_tls.ca_file", ca).map(drop));
    }
    if let (Some(cert), Some(key)) = (&upstream.cert_file, &upstream.key_file) {
        let pair = tls::identity_pair("upstream_tls.cert_file", cert, "upstream_tls.key_file", key);
        check(pair.map(drop));
    }
    let jwt = &config.principal.jwt;
    if let Some(ca) = &jwt.jwks_ca_file {
        check(tls::roots("principal.jwt.jwks_ca_file", ca).map(drop));
    }
    if let Some(path) = &config.admin.token_file
        && let Err(message) = read_admin_token(path)
    {
        problems.push(ConfigProblem::new("admin.token_file", message));
    }
    if let Some(path) = &jwt.jwks_file {
        let outcome = std::fs::read(path)
            .map_err(|e| format!("cannot read: {}", e.to_string().to_lowercase()))
            .and_then(|bytes| KeySet::parse(&bytes).map_err(|e| e.to_string()));
        if let Err(message) = outcome {
            let message = format!("{}: {message}", path.display());
            problems.push(ConfigProblem::new("principal.jwt.jwks_file", message));
        }
    }
    problems
}

/// Read `admin.token_file`: one secret, surrounding whitespace trimmed. The message
/// never contains the secret.
fn read_admin_token(path: &Path) -> Result<Zeroizing<String>, String> {
    let bytes = std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    crate::config::admin_token::parse_token(&bytes, path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};
    use std::path::PathBuf;

    fn write(dir: &std::path::Path, name: &str, content: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn every_file_problem_in_one_pass() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let key = KeyPair::generate().unwrap();
        let other = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let mut expired = CertificateParams::new(vec!["localhost".into()]).unwrap();
        expired.not_before = rcgen::date_time_ymd(2020, 1, 1);
        expired.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let expired = expired.self_signed(&key).unwrap();
        let mut config = Config {
            upstream: "https://mcp.internal".into(),
            ..Config::default()
        };
        config.tls.cert_file = Some(write(d, "cert.pem", &cert.pem()));
        // Another key than the certificate's.
        config.tls.key_file = Some(write(d, "key.pem", &other.serialize_pem()));
        config.tls.client_ca_file = Some(write(d, "ca.pem", "not pem at all"));
        config.upstream_tls.ca_file = Some(d.join("missing.pem"));
        config.upstream_tls.cert_file = Some(write(d, "old.pem", &expired.pem()));
        config.upstream_tls.key_file = Some(write(d, "ok-key.pem", &key.serialize_pem()));
        config.state.keys_file = Some(write(d, "keys", "short\n"));
        config.principal.jwt.jwks_file = Some(write(
            d,
            "jwks.json",
            r#"{"keys":[{"kty":"oct","k":"AA"}]}"#,
        ));
        let problems = check_files(&config);
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "state.keys_file",
                "tls.key_file",
                "tls.client_ca_file",
                "upstream_tls.ca_file",
                "upstream_tls.cert_file",
                "principal.jwt.jwks_file",
            ],
            "{problems:#?}"
        );
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(
            text[1].contains("does not match the certificate in"),
            "{}",
            text[1]
        );
        assert!(text[1].starts_with("tls.key_file (MCP_STATE_GUARD_TLS__KEY_FILE): "));
        assert!(text[2].contains("no PEM certificate"), "{}", text[2]);
        assert!(text[3].contains("missing.pem: cannot read"), "{}", text[3]);
        assert!(text[4].contains("expired on"), "{}", text[4]);
        assert!(text[5].contains("no usable signature key"), "{}", text[5]);
        assert!(!text.iter().any(|t| t.contains("short")), "a secret leaked");

        config.tls.key_file = Some(d.join("ok-key.pem"));
        config.tls.client_ca_file = Some(d.join("cert.pem"));
        assert!(
            !check_files(&config)
                .iter()
                .any(|p| p.key.starts_with("tls."))
        );
    }

    /// The admin secret's file: read here, at start-up and by `check-config`, not by the
    /// configuration's validation.
    #[test]
    fn the_admin_token_file_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        let mut config = Config::default();
        config.admin.token_file = Some(token.clone());
        let only = |config: &Config, needle: &str| {
            let problems = check_files(config);
            assert_eq!(problems.len(), 1, "{problems:#?}");
            assert_eq!(problems[0].key, "admin.token_file");
            assert!(problems[0].message.contains(needle), "{}", problems[0]);
        };
        only(&config, "cannot be read");
        std::fs::write(&token, " \n").unwrap();
        only(&config, "at least 16");
        std::fs::write(&token, "0123456789abcdef0123\n").unwrap();
        assert!(check_files(&config).is_empty());
    }
}
