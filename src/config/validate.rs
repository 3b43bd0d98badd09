//! Validation: the rules a typed [`Config`] must pass before the sidecar starts.
//! Invariant: every rule is checked in one pass and each failure becomes one
//! [`ConfigProblem`]. TLS and principal-source rules live in `security.rs`; nothing a
//! configuration asks for is silently ignored, because running without a protection
//! the operator asked for is worse than not starting.

use std::collections::HashSet;

use super::hosts::{parse_hosts, parse_nets};
use super::{Config, ConfigProblem, SingleUseStore};

/// The largest `limits.max_state_bytes` accepted: 16 MiB.
const MAX_STATE_BYTES: usize = 16 * 1024 * 1024;

impl Config {
    /// Every problem with this configuration; empty when it is fit to run. Each section
    /// below adds its own, in this order, in one pass.
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut problem = |key: &str, message: String| {
            problems.push(ConfigProblem::new(key, message));
        };
        self.validate_addresses(&mut problem);
        self.validate_state(&mut problem);
        self.validate_principal(&mut problem);
        self.validate_single_use(&mut problem);
        self.validate_limits(&mut problem);
        self.validate_operations(&mut problem);
        self.validate_shares(&mut problem);

        if self.log.level.trim().is_empty() {
            problem("log.level", "must not be empty".to_owned());
        } else if let Err(err) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            problem(
                "log.level",
                format!("is not a valid filter directive: {err}"),
            );
        }

        problems.extend(super::security::validate(self));
        super::stdio::validate(self, &mut problems);
        super::tools::validate(&self.handles, &self.idempotency, &mut problems);
        problems
    }

    /// The listeners, the upstream, the paths and hosts served.
    fn validate_addresses(&self, problem: &mut impl FnMut(&str, String)) {
        if !self.is_stdio()
            && let Err(message) = parse_upstream(&self.upstream)
        {
            problem("upstream", format!("{message}, or \"stdio\""));
        }
        if self.listen == self.admin_listen && self.listen.port() != 0 {
            problem("admin_listen", "must differ from listen".to_owned());
        }
        if self.is_stdio() && !self.passthrough_paths.is_empty() {
            // The child serves MCP on every path: an untouched path would be a raw
            // channel to it (plaintext states out, forged states in, no principal).
            problem(
                "passthrough_paths",
                "must be empty when upstream is \"stdio\": the child answers MCP on every \
                 path, so a passthrough path would reach it without the gate (its states \
                 unsealed, a forged state trusted)"
                    .to_owned(),
            );
        }
        let mut seen = HashSet::new();
        for path in &self.passthrough_paths {
            if let Err(message) = check_passthrough_path(path) {
                problem("passthrough_paths", format!("entry {path:?} {message}"));
            } else if !seen.insert(path) {
                problem(
                    "passthrough_paths",
                    format!("entry {path:?} is listed twice"),
                );
            }
        }

        if let Some(Err(message)) = self.allowed_hosts.as_deref().map(parse_hosts) {
            problem("allowed_hosts", message.to_string());
        }
        if self.allowed_hosts.as_ref().is_some_and(Vec::is_empty) {
            problem(
                "allowed_hosts",
                "must not be empty (use [\"*\"] to accept any host)".to_owned(),
            );
        }
    }

    /// How tokens are keyed and timed.
    fn validate_state(&self, problem: &mut impl FnMut(&str, String)) {
        let state = &self.state;
        match (&state.audience, &state.keys_file) {
            (Some(audience), _) if audience.trim().is_empty() => {
                problem("state.audience", "must not be empty".to_owned());
            }
            (None, Some(_)) => problem(
                "state.audience",
                "required when state.keys_file is set".to_owned(),
            ),
            _ => {}
        }
        if state
            .keys_file
            .as_ref()
            .is_some_and(|path| path.as_os_str().is_empty())
        {
            problem("state.keys_file", "must not be empty".to_owned());
        }
        if !(1..=86_400).contains(&state.ttl_seconds) {
            problem(
                "state.ttl_seconds",
                "must be between 1 and 86400".to_owned(),
            );
        }
        if state.reload_interval_ms < 100 {
            problem(
                "state.reload_interval_ms",
                "must be at least 100".to_owned(),
            );
        }
    }

    /// Who may name the caller.
    fn validate_principal(&self, problem: &mut impl FnMut(&str, String)) {
        let principal = &self.principal;
        if let Err(message) = parse_nets(&principal.trusted_proxies) {
            problem("principal.trusted_proxies", message.to_string());
        }
        if let Err(invalid) = principal.header_name() {
            problem(&invalid.key, invalid.message);
        }
    }

    /// The single-use store and its lists.
    fn validate_single_use(&self, problem: &mut impl FnMut(&str, String)) {
        let single_use = &self.single_use;
        match (single_use.store, &single_use.redis_url) {
            (SingleUseStore::Redis, None) => problem(
                "single_use.redis_url",
                "required with single_use.store = \"redis\"".to_owned(),
            ),
            // The value is never echoed: it may carry a password.
            (SingleUseStore::Redis, Some(url)) => {
                if let Err(message) = super::redis_url::parse_url(url) {
                    problem("single_use.redis_url", message.to_owned());
                }
            }
            (SingleUseStore::Memory, Some(_)) => problem(
                "single_use.redis_url",
                "only allowed with single_use.store = \"redis\"".to_owned(),
            ),
            (SingleUseStore::Memory, None) => {}
        }
        for (key, list) in [
            ("single_use.tools", &single_use.tools),
            ("single_use.prompts", &single_use.prompts),
            ("single_use.resources", &single_use.resources),
        ] {
            if list.iter().any(String::is_empty) {
                problem(key, "entries must not be empty".to_owned());
            }
        }
        if single_use.memory_max_entries == 0 {
            problem(
                "single_use.memory_max_entries",
                "must be at least 1".to_owned(),
            );
        }
        if single_use.redis_key_prefix.is_empty() {
            problem(
                "single_use.redis_key_prefix",
                "must not be empty (the keys would collide with everything else in the database)"
                    .to_owned(),
            );
        }
        if single_use.redis_timeout_ms == 0 {
            problem(
                "single_use.redis_timeout_ms",
                "must be at least 1".to_owned(),
            );
        }
        // `WAIT n 0` would block forever; a minute is longer than any client waits.
        if !(1..=60_000).contains(&single_use.redis_wait_ms) {
            problem(
                "single_use.redis_wait_ms",
                "must be between 1 and 60000".to_owned(),
            );
        }
        if let super::WaitReplicas::Count(count) = single_use.redis_wait_replicas
            && count > 16
        {
            problem(
                "single_use.redis_wait_replicas",
                "must be \"auto\" or a number from 0 to 16".to_owned(),
            );
        }
    }

    /// Flow limits, sizes and deadlines.
    fn validate_limits(&self, problem: &mut impl FnMut(&str, String)) {
        if self.mrtr.max_rounds == 0 {
            problem("mrtr.max_rounds", "must be at least 1".to_owned());
        }
        if self.mrtr.max_flow_seconds == 0 {
            problem("mrtr.max_flow_seconds", "must be at least 1".to_owned());
        }
        for (key, value, min) in [
            ("limits.max_body_bytes", self.limits.max_body_bytes, 1024),
            ("limits.max_event_bytes", self.limits.max_event_bytes, 1024),
            ("limits.max_state_bytes", self.limits.max_state_bytes, 64),
            ("limits.max_json_values", self.limits.max_json_values, 64),
        ] {
            if value < min {
                problem(key, format!("must be at least {min}"));
            }
        }
        if self.limits.max_state_bytes > MAX_STATE_BYTES {
            problem(
                "limits.max_state_bytes",
                format!("must be at most {MAX_STATE_BYTES} (a state travels in every retry)"),
            );
        }
        if self.limits.max_buffered_bytes < self.limits.max_body_bytes {
            problem(
                "limits.max_buffered_bytes",
                "must be at least limits.max_body_bytes (no request could be read)".to_owned(),
            );
        }
        for (key, value) in [
            ("timeouts.connect_ms", self.timeouts.connect_ms),
            ("timeouts.response_head_ms", self.timeouts.response_head_ms),
            ("timeouts.header_read_ms", self.timeouts.header_read_ms),
            ("timeouts.body_read_ms", self.timeouts.body_read_ms),
        ] {
            if value < 1 {
                problem(key, "must be at least 1".to_owned());
            }
        }
    }
}

/// Parses an upstream base URL: absolute `http://` or `https://`, with a host, an
/// optional port and base path, and no query, fragment or userinfo. The error never
/// echoes the URL (a userinfo part would hold a password).
pub(crate) fn parse_upstream(url: &str) -> Result<UpstreamUrl, &'static str> {
    const NOT_HTTP: &str =
        "must be an absolute http:// or https:// URL such as http://127.0.0.1:3000";
    // `http::Uri` drops a fragment silently; refuse it before parsing.
    if url.contains('#') {
        return Err("must not have a fragment (#...)");
    }
    let uri: http::Uri = url.parse().map_err(|_| NOT_HTTP)?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(NOT_HTTP);
    }
    let authority = uri.authority().ok_or(NOT_HTTP)?.clone();
    if authority.as_str().contains('@') {
        return Err("must not contain userinfo (user:password@)");
    }
    let host = authority.host();
    if host.is_empty() {
        return Err("must have a host");
    }
    // `http::Uri` accepts `host:` and `host:99999` and reports no port for them.
    let port = &authority.as_str()[host.len()..];
    if let Some(port) = port.strip_prefix(':')
        && !matches!(port.parse::<u16>(), Ok(p) if p != 0)
    {
        return Err("has an invalid port");
    }
    if uri.query().is_some() || url.contains('?') {
        return Err("must not have a query (?...)");
    }
    Ok(UpstreamUrl { uri, authority })
}

/// An upstream base URL that [`parse_upstream`] accepted: its authority is there (a
/// host, a valid port if any, no userinfo), so users need not unwrap it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpstreamUrl {
    uri: http::Uri,
    authority: http::uri::Authority,
}

impl UpstreamUrl {
    /// The whole URL.
    pub(crate) fn uri(&self) -> &http::Uri {
        &self.uri
    }

    /// `host[:port]`.
    pub(crate) fn authority(&self) -> &http::uri::Authority {
        &self.authority
    }

    /// `http` or `https`.
    pub(crate) fn is_https(&self) -> bool {
        self.uri.scheme() == Some(&http::uri::Scheme::HTTPS)
    }
}

/// A passthrough entry is compared byte for byte with the request path, so it must be a
/// plain absolute path. Entries with dot segments, empty segments, `%` escapes or `\`
/// are refused: upstreams normalise those differently, so they could alias another path.
fn check_passthrough_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("must start with '/'");
    }
    if path.contains('?') {
        return Err("must not contain '?' (entries match the path without a query)");
    }
    if path.contains('#') {
        return Err("must not contain '#'");
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace or control characters");
    }
    let aliasing = path.contains(['%', '\\'])
        || path.contains("//")
        || path.split('/').any(|segment| matches!(segment, "." | ".."));
    if aliasing {
        return Err("must be a plain path: no '.', '..' or empty segments, '%' escapes or '\\'");
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::SocketAddr;
    use std::path::PathBuf;

    use super::parse_upstream;
    use crate::config::{Config, ConfigProblem, PrincipalSource, SingleUseStore};

    /// The problems of the defaults changed by `change`.
    pub(crate) fn invalid(change: impl FnOnce(&mut Config)) -> Vec<ConfigProblem> {
        let mut config = Config::default();
        change(&mut config);
        config.validate()
    }

    pub(crate) fn assert_only(problems: &[ConfigProblem], key: &str, needle: &str) {
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].key, key);
        assert!(
            problems[0].message.contains(needle),
            "{:?} lacks {needle:?}",
            problems[0].message
        );
    }

    #[test]
    fn upstream_rules() {
        for good in [
            "http://127.0.0.1:3000",
            "http://mcp",
            "http://[::1]:8000/base/",
            "http://h/a/b",
            "https://mcp.internal:8443/base",
        ] {
            assert!(parse_upstream(good).is_ok(), "{good}");
        }
        let cases = [
            ("ftp://mcp", "absolute http:// or https:// URL"),
            ("mcp:3000", "absolute http:// or https:// URL"),
            ("/mcp", "absolute http:// or https:// URL"),
            ("https://u:hunter2@mcp/", "userinfo"),
            ("http://:80/", "must have a host"),
            ("http://u:hunter2@mcp/", "userinfo"),
            ("http://mcp/?a=1", "query"),
            ("http://mcp/?", "query"),
            ("http://mcp/#top", "fragment"),
            ("http://mcp:99999/", "invalid port"),
            ("http://mcp:/", "invalid port"),
            ("http://mcp:0/", "invalid port"),
            ("", "absolute http:// or https:// URL"),
        ];
        for (url, needle) in cases {
            let problems = invalid(|c| c.upstream = url.to_owned());
            assert_only(&problems, "upstream", needle);
            assert!(!problems[0].message.contains("hunter2"));
        }
    }

    #[test]
    fn passthrough_rules() {
        assert!(
            invalid(|c| c.passthrough_paths = vec!["/oauth/token".into(), "/".into()]).is_empty()
        );
        let cases = [
            ("oauth", "must start with '/'"),
            ("/oauth?x=1", "'?'"),
            ("/oauth#x", "'#'"),
            ("/o auth", "whitespace"),
            ("/a/../mcp", "plain path"),
            ("/a/./b", "plain path"),
            ("//oauth", "plain path"),
            ("/%6dcp", "plain path"),
            ("/a\\b", "plain path"),
        ];
        for (path, needle) in cases {
            assert_only(
                &invalid(|c| c.passthrough_paths = vec![path.into()]),
                "passthrough_paths",
                needle,
            );
        }
        let twice = invalid(|c| c.passthrough_paths = vec!["/t".into(), "/t".into()]);
        assert_only(&twice, "passthrough_paths", "listed twice");
        // A stdio child answers MCP on every path: no path of it may skip the gate.
        let stdio = invalid(|c| {
            c.upstream = "stdio".into();
            c.upstream_command.argv = vec!["server".into()];
            c.passthrough_paths = vec!["/oauth/token".into()];
        });
        assert_only(
            &stdio,
            "passthrough_paths",
            "must be empty when upstream is \"stdio\"",
        );
    }

    #[test]
    fn ingress_rules() {
        let hosts = |list: &[&str]| Some(list.iter().map(|h| h.to_string()).collect());
        assert!(invalid(|c| c.allowed_hosts = hosts(&["mcp.example.com", "*"])).is_empty());
        let bad = invalid(|c| c.allowed_hosts = hosts(&["mcp.example.com", "a b"]));
        assert_only(&bad, "allowed_hosts", "entry \"a b\"");
        let empty = invalid(|c| c.allowed_hosts = hosts(&[]));
        assert_only(&empty, "allowed_hosts", "must not be empty");
        let proxies = |list: &[&str]| list.iter().map(|h| h.to_string()).collect();
        assert!(
            invalid(|c| c.principal.trusted_proxies = proxies(&["10.0.0.0/8", "::1"])).is_empty()
        );
        let bad = invalid(|c| c.principal.trusted_proxies = proxies(&["10.0.0.0/40"]));
        assert_only(&bad, "principal.trusted_proxies", "not an address or CIDR");
    }

    #[test]
    fn state_rules() {
        let keys = Some(PathBuf::from("/k"));
        let no_audience = invalid(|c| c.state.keys_file = keys.clone());
        assert_only(
            &no_audience,
            "state.audience",
            "required when state.keys_file is set",
        );
        let empty = invalid(|c| {
            c.state.keys_file = keys.clone();
            c.state.audience = Some(String::new());
        });
        assert_only(&empty, "state.audience", "must not be empty");
        assert_only(
            &invalid(|c| c.state.audience = Some("".into())),
            "state.audience",
            "must not be empty",
        );
        let empty_path = invalid(|c| {
            c.state.keys_file = Some(PathBuf::new());
            c.state.audience = Some("a".into());
        });
        assert_only(&empty_path, "state.keys_file", "must not be empty");
        assert!(
            invalid(|c| {
                c.state.keys_file = keys.clone();
                c.state.audience = Some("a".into());
            })
            .is_empty()
        );
        assert_only(
            &invalid(|c| c.state.ttl_seconds = 0),
            "state.ttl_seconds",
            "between 1 and 86400",
        );
        let day_and_one = invalid(|c| c.state.ttl_seconds = 86_401);
        assert_only(&day_and_one, "state.ttl_seconds", "between 1 and 86400");
        assert!(invalid(|c| c.state.ttl_seconds = 86_400).is_empty());
        let fast = invalid(|c| c.state.reload_interval_ms = 99);
        assert_only(&fast, "state.reload_interval_ms", "at least 100");
    }

    #[test]
    fn principal_rules() {
        assert!(invalid(|c| c.principal.source = PrincipalSource::Header).is_empty());
        for bad in ["", "x user", "x:user", "é"] {
            let problems = invalid(|c| c.principal.header = bad.into());
            assert_only(&problems, "principal.header", "valid HTTP header name");
        }
    }

    #[test]
    fn single_use_rules() {
        let redis = |url: &str| {
            invalid(|c| {
                c.single_use.store = SingleUseStore::Redis;
                c.single_use.redis_url = Some(url.into());
            })
        };
        for good in [
            "redis://r",
            "rediss://u:p@r:6380/2",
            "redis+cluster://a:7000,b:7001",
            "rediss+cluster://a:7000",
        ] {
            assert!(redis(good).is_empty(), "{good}");
        }
        for bad in ["http://r", "redis+cluster://", "rediss://:hunter2@", "r"] {
            let problems = redis(bad);
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert_eq!(problems[0].key, "single_use.redis_url");
            assert!(!problems[0].to_string().contains("hunter2"));
        }
        let missing = invalid(|c| c.single_use.store = SingleUseStore::Redis);
        assert_only(&missing, "single_use.redis_url", "required");
        assert!(
            invalid(|c| c.single_use.tools = vec!["pay".into(), "approve_*".into()]).is_empty()
        );
        let empty = invalid(|c| c.single_use.prompts = vec![String::new()]);
        assert_only(&empty, "single_use.prompts", "must not be empty");
        let stray = invalid(|c| c.single_use.redis_url = Some("redis://:hunter2@r".into()));
        assert_only(
            &stray,
            "single_use.redis_url",
            "only allowed with single_use.store = \"redis\"",
        );
        assert!(!stray[0].to_string().contains("hunter2"));
        let rounds = invalid(|c| c.mrtr.max_rounds = 0);
        assert_only(&rounds, "mrtr.max_rounds", "at least 1");
        let age = invalid(|c| c.mrtr.max_flow_seconds = 0);
        assert_only(&age, "mrtr.max_flow_seconds", "at least 1");
        // The admin secret's file is read at start-up (`app::files`), not here.
        let unread = std::path::PathBuf::from("/nonexistent/admin-token");
        assert!(invalid(|c| c.admin.token_file = Some(unread)).is_empty());
        let zero = invalid(|c| c.single_use.memory_max_entries = 0);
        assert_only(&zero, "single_use.memory_max_entries", "at least 1");
        let prefix = invalid(|c| c.single_use.redis_key_prefix = String::new());
        assert_only(&prefix, "single_use.redis_key_prefix", "must not be empty");
        let timeout = invalid(|c| c.single_use.redis_timeout_ms = 0);
        assert_only(&timeout, "single_use.redis_timeout_ms", "at least 1");
    }

    #[test]
    fn limit_timeout_log_and_address_rules() {
        let small = invalid(|c| c.limits.max_body_bytes = 1023);
        assert_only(&small, "limits.max_body_bytes", "at least 1024");
        let small = invalid(|c| c.limits.max_event_bytes = 1023);
        assert_only(&small, "limits.max_event_bytes", "at least 1024");
        let small = invalid(|c| c.limits.max_state_bytes = 63);
        assert_only(&small, "limits.max_state_bytes", "at least 64");
        assert!(invalid(|c| c.limits.max_state_bytes = 64).is_empty());
        let huge = invalid(|c| c.limits.max_state_bytes = usize::MAX / 2);
        assert_only(&huge, "limits.max_state_bytes", "at most 16777216");
        assert_only(
            &invalid(|c| c.timeouts.connect_ms = 0),
            "timeouts.connect_ms",
            "at least 1",
        );
        let head = invalid(|c| c.timeouts.response_head_ms = 0);
        assert_only(&head, "timeouts.response_head_ms", "at least 1");
        assert!(invalid(|c| c.timeouts.drain_ms = 0).is_empty());
        assert_only(
            &invalid(|c| c.log.level = "".into()),
            "log.level",
            "must not be empty",
        );
        let bad = invalid(|c| c.log.level = "hyper=loud".into());
        assert_only(&bad, "log.level", "not a valid filter directive");
        let small = invalid(|c| c.limits.max_json_values = 63);
        assert_only(&small, "limits.max_json_values", "at least 64");
        let small = invalid(|c| c.limits.max_buffered_bytes = c.limits.max_body_bytes - 1);
        assert_only(
            &small,
            "limits.max_buffered_bytes",
            "at least limits.max_body_bytes",
        );
        for key in ["header_read_ms", "body_read_ms"] {
            let zero = invalid(|c| match key {
                "header_read_ms" => c.timeouts.header_read_ms = 0,
                _ => c.timeouts.body_read_ms = 0,
            });
            assert_only(&zero, &format!("timeouts.{key}"), "at least 1");
        }
        let same = invalid(|c| c.admin_listen = c.listen);
        assert_only(&same, "admin_listen", "must differ from listen");
        let ephemeral: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert!(invalid(|c| (c.listen, c.admin_listen) = (ephemeral, ephemeral)).is_empty());
    }
}
