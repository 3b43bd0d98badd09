//! Loading: layers defaults, the TOML file, the environment and the command line with
//! figment, and turns every extraction failure into a [`ConfigProblem`] that names the
//! key, its environment variable and where the bad value came from. [`LEAVES`] is the one
//! list of keys, and says of each whether a reload applies it live or it needs a restart.
//! Invariant: no value of `single_use.redis_url` (it may carry a password) appears in a
//! message.

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use zeroize::Zeroizing;

use super::{Config, ConfigErrors, ConfigProblem, ENV_PREFIX, Overrides};

/// Name of the provider for command-line flags, so messages can say "set by --listen".
const FLAGS_PROVIDER: &str = "command-line flags";

/// Keys whose values must never be echoed.
const SECRET_KEYS: &[&str] = &["single_use.redis_url"];

// Boxed: `figment::Error` is over 200 bytes and these run once per key.
type Assign = fn(&Figment, &str, &mut Config) -> Result<(), Box<figment::Error>>;

/// When a change of a configuration key takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reload {
    /// A reload applies it.
    Live,
    /// The running process keeps the old value until it is restarted.
    Restart,
}

/// One leaf key: its name, when a change of it takes effect, and how to read, compare
/// and copy its field.
pub(super) struct Leaf {
    pub(crate) key: &'static str,
    pub(crate) reload: Reload,
    /// Extract the value at `key` alone and store it in its field.
    pub(crate) assign: Assign,
    /// Whether two configurations hold different values here.
    pub(crate) differs: fn(&Config, &Config) -> bool,
    /// Copy this value from the second configuration into the first.
    pub(crate) adopt: fn(&mut Config, &Config),
}

/// `leaf!(Live | Restart, "key" => field.path)`.
macro_rules! leaf {
    ($reload:ident, $key:literal => $($field:ident).+) => {
        Leaf {
            key: $key,
            reload: Reload::$reload,
            assign: |figment: &Figment, key: &str, config: &mut Config| {
                config.$($field).+ = figment.extract_inner(key).map_err(Box::new)?;
                Ok(())
            },
            differs: |a: &Config, b: &Config| a.$($field).+ != b.$($field).+,
            adopt: |to: &mut Config, from: &Config| to.$($field).+ = from.$($field).+.clone(),
        }
    };
}

/// Every leaf key, extracted on its own, with its reload class. When the whole [`Config`]
/// does not extract, serde stops at the first error; going leaf by leaf reports every bad
/// value and still yields a configuration (defaults standing in for bad values) whose
/// rules can be checked in the same pass. Tests keep this table equal to the fields of
/// [`Config`], and the table of keys in docs/configuration.md equal to its reload classes.
///
/// `Live`: a reload applies it (the watch in `app` has an applier for each, which a test
/// checks). `Restart`: a change is logged by name and counted `restart_required`. Files a
/// key names (the key file, TLS files, the admin token file) are watched on their own:
/// their *contents* change live whatever the class of the key holding their path.
pub(super) const LEAVES: &[Leaf] = &[
    leaf!(Restart, "listen" => listen),
    leaf!(Restart, "upstream" => upstream),
    leaf!(Restart, "upstream_command.argv" => upstream_command.argv),
    leaf!(Restart, "upstream_command.env" => upstream_command.env),
    leaf!(Restart, "upstream_command.cwd" => upstream_command.cwd),
    leaf!(Restart, "upstream_command.inherit_env" => upstream_command.inherit_env),
    leaf!(Restart, "upstream_command.restart_min_ms" => upstream_command.restart_min_ms),
    leaf!(Restart, "upstream_command.restart_max_ms" => upstream_command.restart_max_ms),
    leaf!(Restart, "upstream_command.queue_max" => upstream_command.queue_max),
    leaf!(
        Restart,
        "upstream_command.queue_max_per_principal" => upstream_command.queue_max_per_principal
    ),
    leaf!(Restart, "upstream_command.max_sessions" => upstream_command.max_sessions),
    leaf!(
        Restart,
        "upstream_command.max_sessions_per_principal" => upstream_command.max_sessions_per_principal
    ),
    leaf!(Restart, "upstream_command.session_idle_ms" => upstream_command.session_idle_ms),
    leaf!(Restart, "admin_listen" => admin_listen),
    leaf!(Live, "passthrough_paths" => passthrough_paths),
    leaf!(Live, "allowed_hosts" => allowed_hosts),
    leaf!(Restart, "state.audience" => state.audience),
    leaf!(Restart, "state.keys_file" => state.keys_file),
    leaf!(Restart, "state.ttl_seconds" => state.ttl_seconds),
    leaf!(Restart, "state.reload_interval_ms" => state.reload_interval_ms),
    leaf!(Restart, "principal.source" => principal.source),
    leaf!(Restart, "principal.header" => principal.header),
    leaf!(Restart, "principal.forward_header" => principal.forward_header),
    leaf!(Restart, "principal.trusted_proxies" => principal.trusted_proxies),
    leaf!(Restart, "principal.mtls.identity" => principal.mtls.identity),
    leaf!(Restart, "principal.jwt.issuer" => principal.jwt.issuer),
    leaf!(Restart, "principal.jwt.audience" => principal.jwt.audience),
    leaf!(Restart, "principal.jwt.jwks_file" => principal.jwt.jwks_file),
    leaf!(Restart, "principal.jwt.jwks_url" => principal.jwt.jwks_url),
    leaf!(Restart, "principal.jwt.jwks_ca_file" => principal.jwt.jwks_ca_file),
    leaf!(Restart, "principal.jwt.leeway_seconds" => principal.jwt.leeway_seconds),
    leaf!(Restart, "principal.jwt.resource_metadata" => principal.jwt.resource_metadata),
    leaf!(Restart, "principal.jwt.forward_authorization" => principal.jwt.forward_authorization),
    leaf!(Restart, "principal.jwt.jwks_refresh_seconds" => principal.jwt.jwks_refresh_seconds),
    leaf!(Restart, "principal.jwt.jwks_cooldown_seconds" => principal.jwt.jwks_cooldown_seconds),
    leaf!(Restart, "principal.jwt.verified_tokens" => principal.jwt.verified_tokens),
    leaf!(Restart, "tls.cert_file" => tls.cert_file),
    leaf!(Restart, "tls.key_file" => tls.key_file),
    leaf!(Restart, "tls.client_ca_file" => tls.client_ca_file),
    leaf!(Restart, "tls.reload_interval_ms" => tls.reload_interval_ms),
    leaf!(Restart, "upstream_tls.ca_file" => upstream_tls.ca_file),
    leaf!(Restart, "upstream_tls.cert_file" => upstream_tls.cert_file),
    leaf!(Restart, "upstream_tls.key_file" => upstream_tls.key_file),
    leaf!(Restart, "single_use.store" => single_use.store),
    leaf!(Restart, "single_use.redis_url" => single_use.redis_url),
    leaf!(Live, "single_use.tools" => single_use.tools),
    leaf!(Live, "single_use.prompts" => single_use.prompts),
    leaf!(Live, "single_use.resources" => single_use.resources),
    leaf!(Live, "single_use.default" => single_use.default),
    leaf!(Live, "single_use.on_store_error" => single_use.on_store_error),
    leaf!(Restart, "single_use.memory_max_entries" => single_use.memory_max_entries),
    leaf!(Restart, "single_use.max_entries_per_principal" => single_use.max_entries_per_principal),
    leaf!(Restart, "single_use.redis_key_prefix" => single_use.redis_key_prefix),
    leaf!(Restart, "single_use.redis_timeout_ms" => single_use.redis_timeout_ms),
    leaf!(Restart, "single_use.redis_wait_replicas" => single_use.redis_wait_replicas),
    leaf!(Restart, "single_use.redis_wait_ms" => single_use.redis_wait_ms),
    leaf!(Restart, "mrtr.max_rounds" => mrtr.max_rounds),
    leaf!(Restart, "mrtr.max_flow_seconds" => mrtr.max_flow_seconds),
    leaf!(Restart, "admin.token_file" => admin.token_file),
    leaf!(Restart, "limits.max_body_bytes" => limits.max_body_bytes),
    leaf!(Restart, "limits.max_event_bytes" => limits.max_event_bytes),
    leaf!(Restart, "limits.max_state_bytes" => limits.max_state_bytes),
    leaf!(Restart, "limits.max_json_values" => limits.max_json_values),
    leaf!(Restart, "limits.max_buffered_bytes" => limits.max_buffered_bytes),
    leaf!(Restart, "limits.max_connections" => limits.max_connections),
    leaf!(Restart, "limits.max_connections_per_peer" => limits.max_connections_per_peer),
    leaf!(Restart, "limits.http2_max_concurrent_streams" => limits.http2_max_concurrent_streams),
    leaf!(Restart, "limits.http2_max_header_list_bytes" => limits.http2_max_header_list_bytes),
    leaf!(Restart, "limits.upstream_max_idle_per_host" => limits.upstream_max_idle_per_host),
    leaf!(Restart, "timeouts.connect_ms" => timeouts.connect_ms),
    leaf!(Restart, "timeouts.response_head_ms" => timeouts.response_head_ms),
    leaf!(Restart, "timeouts.drain_ms" => timeouts.drain_ms),
    leaf!(Restart, "timeouts.header_read_ms" => timeouts.header_read_ms),
    leaf!(Restart, "timeouts.body_read_ms" => timeouts.body_read_ms),
    leaf!(Restart, "timeouts.client_idle_ms" => timeouts.client_idle_ms),
    leaf!(Restart, "timeouts.upstream_idle_ms" => timeouts.upstream_idle_ms),
    leaf!(Restart, "log.format" => log.format),
    leaf!(Restart, "log.level" => log.level),
    leaf!(Restart, "readyz.check_upstream" => readyz.check_upstream),
    leaf!(Restart, "readyz.upstream_timeout_ms" => readyz.upstream_timeout_ms),
    leaf!(Restart, "readyz.max_key_age_seconds" => readyz.max_key_age_seconds),
    // An array of tables: one leaf, extracted whole.
    leaf!(Restart, "handles" => handles),
    leaf!(Restart, "idempotency.tools" => idempotency.tools),
    leaf!(Restart, "idempotency.require_key" => idempotency.require_key),
    leaf!(Restart, "idempotency.ttl_seconds" => idempotency.ttl_seconds),
    leaf!(Restart, "idempotency.max_result_bytes" => idempotency.max_result_bytes),
    leaf!(Restart, "idempotency.strip_key" => idempotency.strip_key),
    leaf!(Restart, "idempotency.lease_ms" => idempotency.lease_ms),
    leaf!(Restart, "idempotency.memory_max_bytes" => idempotency.memory_max_bytes),
    leaf!(Restart, "idempotency.max_records_per_principal" => idempotency.max_records_per_principal),
    leaf!(Restart, "idempotency.max_bytes_per_principal" => idempotency.max_bytes_per_principal),
    leaf!(Restart, "idempotency.max_in_flight_per_principal" => idempotency.max_in_flight_per_principal),
];

impl Config {
    #[cfg(test)]
    /// The layered sources: defaults < `file` < `MCP_STATE_GUARD_*` environment (nesting
    /// with `__`) < `overrides`. A given file is read exactly where it is (no search of
    /// parent directories); a missing or unparseable file makes extraction fail.
    pub(crate) fn figment(file: Option<&Path>, overrides: &Overrides) -> Figment {
        // `Toml::file` would search parent directories and silently skip a missing file;
        // `file_exact` reads this path or fails.
        Self::layered(file.map(Toml::file_exact), overrides)
    }

    fn layered(file: Option<impl Provider>, overrides: &Overrides) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(file);
        }
        figment
            .merge(Env::prefixed(ENV_PREFIX).split("__"))
            .merge(overrides.clone())
    }

    /// Loads, extracts and validates, reporting every problem found in one pass.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigErrors> {
        match file {
            Some(path) => Self::load_read(path, &read_file(path)?, overrides),
            None => Self::extract(&Self::layered(None::<FileText>, overrides)),
        }
    }

    /// As [`Config::load`], with the file's `contents` as already read (what the watch
    /// hashed is what it loads; problems still name the file at `path`).
    pub(crate) fn load_read(
        path: &Path,
        contents: &[u8],
        overrides: &Overrides,
    ) -> Result<Config, ConfigErrors> {
        let Ok(text) = std::str::from_utf8(contents) else {
            return Err(ConfigErrors(vec![ConfigProblem::new(
                "",
                format!("config file {}: not UTF-8", path.display()),
            )]));
        };
        Self::extract(&Self::layered(Some(FileText { path, text }), overrides))
    }

    fn extract(figment: &Figment) -> Result<Config, ConfigErrors> {
        let (config, mut problems) = match figment.extract::<Config>() {
            Ok(config) => (config, Vec::new()),
            Err(err) => assemble(figment, err)?,
        };
        // A bad value was replaced by its default in `config`: judging the stand-in
        // would only add a misleading second problem for the same key.
        for problem in config.validate() {
            if !problems.iter().any(|p| p.key == problem.key) {
                problems.push(with_source(figment, &problem.key, problem.message));
            }
        }
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(problems))
        }
    }
}

impl Provider for Overrides {
    fn metadata(&self) -> Metadata {
        Metadata::named(FLAGS_PROVIDER)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        if let Some(listen) = self.listen {
            dict.insert("listen".into(), Value::from(listen.to_string()));
        }
        if let Some(upstream) = &self.upstream {
            dict.insert("upstream".into(), Value::from(upstream.clone()));
        }
        if let Some(argv) = &self.upstream_command {
            dict.insert("upstream".into(), Value::from(super::STDIO));
            let mut command = Dict::new();
            command.insert("argv".into(), Value::from(argv.clone()));
            dict.insert("upstream_command".into(), Value::from(command));
        }
        Ok(Profile::Default.collect(dict))
    }
}

/// A configuration file's text as already read, named by its path like `Toml::file_exact`
/// names it, so a problem says which file it is in.
struct FileText<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Provider for FileText<'_> {
    fn metadata(&self) -> Metadata {
        Metadata::from("TOML file", self.path)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(self.text).data()
    }
}

/// A named configuration file's bytes. It must exist and be a regular file: refusing
/// beats running on defaults because of a typo in `--config`.
pub(super) fn read_file(path: &Path) -> Result<Zeroizing<Vec<u8>>, ConfigErrors> {
    let problem = |message: String| {
        ConfigErrors(vec![ConfigProblem::new(
            "",
            format!("config file {}: {message}", path.display()),
        )])
    };
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => return Err(problem("is not a regular file".to_owned())),
        Err(err) => return Err(problem(err.to_string().to_lowercase())),
    }
    std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|err| problem(err.to_string().to_lowercase()))
}

/// After `first` (the whole-config extraction) failed: one pass over the merged values
/// that finds unknown keys, sections that are not tables and every bad leaf, and builds
/// the configuration from the good leaves (defaults elsewhere). Fails outright when there
/// are no values to look at (a file that cannot be read or parsed).
pub(super) fn assemble(
    figment: &Figment,
    first: figment::Error,
) -> Result<(Config, Vec<ConfigProblem>), ConfigErrors> {
    let root = figment
        .find_value("")
        .map_err(|err| ConfigErrors(map_errors(figment, err)))?;
    let mut problems = Vec::new();
    let mut broken_sections = Vec::new();
    walk(figment, "", &root, &mut problems, &mut broken_sections);
    let mut config = Config::default();
    for Leaf { key, assign, .. } in LEAVES {
        let parent = parent_of(key);
        if broken_sections.iter().any(|section| section == parent) {
            continue;
        }
        if let Err(err) = assign(figment, key, &mut config) {
            for err in *err {
                problems.push(problem_from(figment, key, err));
            }
        }
    }
    // `extract_inner` of a plain `String` bypasses the field's `deserialize_with`.
    config.principal.header.make_ascii_lowercase();
    if problems.is_empty() {
        // Should not happen (the sweep mirrors the struct), but never lose an error.
        problems = map_errors(figment, first);
    }
    Ok((config, problems))
}

fn walk(
    figment: &Figment,
    prefix: &str,
    value: &Value,
    problems: &mut Vec<ConfigProblem>,
    broken_sections: &mut Vec<String>,
) {
    let Some(dict) = value.as_dict() else {
        let message = format!("must be a table of {}", one_of(&children_of(prefix)));
        problems.push(with_source(figment, prefix, message));
        broken_sections.push(prefix.to_owned());
        return;
    };
    for (name, child) in dict {
        let key = join(prefix, name);
        if is_leaf(&key) {
            continue;
        }
        if is_section(&key) {
            walk(figment, &key, child, problems, broken_sections);
            continue;
        }
        let message = format!(
            "unknown key; expected one of {}",
            one_of(&children_of(prefix))
        );
        problems.push(with_source(figment, &key, message));
    }
}

fn is_leaf(key: &str) -> bool {
    LEAVES.iter().any(|leaf| leaf.key == key)
}

fn is_section(key: &str) -> bool {
    LEAVES.iter().any(|leaf| {
        leaf.key
            .strip_prefix(key)
            .is_some_and(|rest| rest.starts_with('.'))
    })
}

fn parent_of(key: &str) -> &str {
    key.rsplit_once('.').map_or("", |(parent, _)| parent)
}

/// The names directly under `section` ("" for the top level), in declaration order.
fn children_of(section: &str) -> Vec<&'static str> {
    let mut children: Vec<&'static str> = Vec::new();
    for Leaf { key: leaf, .. } in LEAVES {
        let rest = if section.is_empty() {
            Some(*leaf)
        } else {
            leaf.strip_prefix(section)
                .and_then(|rest| rest.strip_prefix('.'))
        };
        if let Some(rest) = rest {
            let name = rest.split('.').next().unwrap_or(rest);
            if !children.contains(&name) {
                children.push(name);
            }
        }
    }
    children
}

fn one_of(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Maps every error figment chained together (`figment::Error` iterates all of them).
fn map_errors(figment: &Figment, err: figment::Error) -> Vec<ConfigProblem> {
    err.into_iter()
        .map(|err| {
            let key = err.path.join(".");
            problem_from(figment, &key, err)
        })
        .collect()
}

fn problem_from(figment: &Figment, key: &str, err: figment::Error) -> ConfigProblem {
    use figment::error::Kind;
    let (key, message) = match &err.kind {
        Kind::UnknownField(field, expected) => (
            join(key, field),
            format!("unknown key; expected one of {}", one_of(expected)),
        ),
        _ if SECRET_KEYS.contains(&key) => (
            key.to_owned(),
            "invalid value (not shown: it may carry a password); expected a string".to_owned(),
        ),
        Kind::UnknownVariant(found, expected) => (
            key.to_owned(),
            format!(
                "unknown value `{found}`; expected one of {}",
                one_of(expected)
            ),
        ),
        // std's `SocketAddr` parser says only "invalid socket address syntax".
        Kind::Message(message) if message == "invalid socket address syntax" => (
            key.to_owned(),
            "invalid address; expected an IP address and port such as 127.0.0.1:8080 or \
             [::]:8080 (not a host name)"
                .to_owned(),
        ),
        Kind::Message(message) => (key.to_owned(), scrub(message)),
        kind => (key.to_owned(), kind.to_string()),
    };
    let metadata = err
        .metadata
        .as_ref()
        .or_else(|| figment.find_metadata(&key));
    attributed(metadata, key, message)
}

/// A problem for `key`, saying where its value came from.
fn with_source(figment: &Figment, key: &str, message: String) -> ConfigProblem {
    attributed(figment.find_metadata(key), key.to_owned(), message)
}

fn attributed(metadata: Option<&Metadata>, key: String, message: String) -> ConfigProblem {
    let message = match metadata.and_then(|metadata| describe_source(metadata, &key)) {
        // A problem with the file itself (it does not parse) has no key.
        Some(source) if key.is_empty() => format!("{message} (in {source})"),
        Some(source) => format!("{message} (set by {source})"),
        None => message,
    };
    ConfigProblem::new(key, message)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Where a value came from, in operator words; `None` for the built-in defaults.
fn describe_source(metadata: &Metadata, key: &str) -> Option<String> {
    if let Some(path) = metadata.source.as_ref().and_then(|s| s.file_path()) {
        return Some(format!("{} {}", metadata.name, path.display()));
    }
    if metadata.name.contains("environment variable") {
        return Some(format!("environment variable {}", super::env_var_for(key)));
    }
    if metadata.name == FLAGS_PROVIDER {
        return Some(format!("command-line flag --{}", key.replace('_', "-")));
    }
    None
}

/// A TOML parse error quotes the offending line, which could be a `redis_url` with its
/// password: keep the position and the description, drop the quoted source.
fn scrub(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !is_source_quote(line))
        .collect();
    kept.join(": ")
}

/// Lines like `|`, `3 | redis_url = "..."` and `|     ^`.
fn is_source_quote(line: &str) -> bool {
    let after_number = line.trim_start_matches(|c: char| c.is_ascii_digit());
    after_number.trim_start().starts_with('|')
}

#[cfg(test)]
#[allow(
    clippy::result_large_err,
    reason = "figment::Jail closures must return figment::Error"
)]
mod tests {
    use super::*;
    use figment::Jail;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/mcp-state-guard.toml");

    /// Loading reads the file once and parses those bytes (`load_read`, as the watch does);
    /// that must mean exactly what figment reading the file itself (`Toml::file_exact`)
    /// means: the same configuration, or the same problems naming the same file.
    #[test]
    fn loading_read_bytes_is_loading_the_file() {
        Jail::expect_with(|jail| {
            let cases = [
                std::fs::read_to_string(SHIPPED).unwrap(),
                "upstream = \"http://127.0.0.1:9\"\n[single_use]\ntools = [\"deploy\"]\n".into(),
                "upstream = \"http://127.0.0.1:9\"\n[state]\nttl_seconds = 0\n[single_use]\n\
                 store = \"redis\"\nredis_url = 7\n"
                    .into(),
                "upstream = \"http://127.0.0.1:9\"\n[state\nredis_url = \"redis://:hunter2@x\"\n"
                    .into(),
                "[mystery]\nkey = 1\n".into(),
            ];
            for (n, text) in cases.iter().enumerate() {
                let name = format!("case-{n}.toml");
                jail.create_file(&name, text)?;
                let path = jail.directory().join(&name);
                let overrides = Overrides::default();
                let from_file = Config::extract(&Config::figment(Some(&path), &overrides));
                let from_bytes = Config::load_read(&path, text.as_bytes(), &overrides);
                match (from_file, from_bytes) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
                    (Err(a), Err(b)) => {
                        assert_eq!(a.to_string(), b.to_string(), "{name}");
                        assert!(!b.to_string().contains("hunter2"), "{b}");
                    }
                    (a, b) => panic!("{name}: the file gives {a:?}, its bytes {b:?}"),
                }
            }
            let path = jail.directory().join("case-0.toml");
            let problems = load_read_err(&path, b"upstream = \"\xff\"\n");
            assert_eq!(
                problems[0].to_string(),
                format!("config file {}: not UTF-8", path.display())
            );
            Ok(())
        });
    }

    fn load_read_err(path: &Path, contents: &[u8]) -> Vec<ConfigProblem> {
        Config::load_read(path, contents, &Overrides::default())
            .expect_err("invalid")
            .0
    }
}
