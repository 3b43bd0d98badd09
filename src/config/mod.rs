//! Configuration: the typed settings, their defaults, and how they are loaded
//! (defaults < TOML file < `MCP_STATE_GUARD_*` environment < command-line flags) and
//! validated. Invariant: a [`Config`] returned by [`Config::load`] has passed every check
//! in [`Config::validate`]; anything unknown, out of range or not supported by this
//! version refuses to start, and every problem names both its file key and its
//! environment variable. `app::files::check_files` then reads every file the
//! configuration names (keys, certificates, JWKS) and reports what is wrong with each.
//!
//! The shipped `config/mcp-state-guard.toml` lists every key with its default and is
//! tested to parse to exactly [`Config::default`].

pub(crate) mod admin_token;
mod fairness;
pub(crate) mod hosts;
pub(crate) mod redis_url;

pub use redis_url::WaitReplicas;

mod load;
#[cfg(test)]
pub(crate) use load::Reload;
mod operations;

pub(crate) mod reload;
mod security;
mod stdio;
mod tools;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

pub use security::JwtConfig;
pub use security::MtlsConfig;
pub use security::MtlsIdentity;
pub use security::TlsConfig;
pub use security::UpstreamTlsConfig;
pub(crate) use security::{JwksKeys, JwtSettings};
pub(crate) use stdio::STDIO;
pub use stdio::UpstreamCommandConfig;
pub use tools::HandleConfig;
pub use tools::IdempotencyConfig;
pub(crate) use validate::{UpstreamUrl, parse_upstream};

/// Prefix of every environment variable the configuration reads.
pub(crate) const ENV_PREFIX: &str = "MCP_STATE_GUARD_";

/// Everything the sidecar can be told. See `config/mcp-state-guard.toml` for the
/// operator-facing description of each key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Client-facing address.
    pub listen: SocketAddr,
    /// Base URL of the MCP server (`http(s)://host[:port][/base]`); request paths are kept
    /// and appended to the base path. Checked by [`parse_upstream`]. Or `"stdio"`: the
    /// server is the child process `upstream_command` describes.
    pub upstream: String,
    /// What to run when `upstream = "stdio"`.
    pub upstream_command: UpstreamCommandConfig,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub admin_listen: SocketAddr,
    /// Exact request paths whose POST bodies are forwarded untouched (a legacy OAuth
    /// token endpoint, say). Empty by default: every path is inspected.
    pub passthrough_paths: Vec<String>,
    /// `Host` / `:authority` values accepted; others get 421 (a DNS-rebinding defence
    /// the upstream loses once the sidecar rewrites `Host`). Entries are `host` (any
    /// port), `host:port`, `host:*` or `*` (any host). Unset: loopback names when
    /// `listen` is a loopback address, any host otherwise.
    pub allowed_hosts: Option<Vec<String>>,
    pub state: StateConfig,
    pub principal: PrincipalConfig,
    pub tls: TlsConfig,
    pub upstream_tls: UpstreamTlsConfig,
    pub single_use: SingleUseConfig,
    pub mrtr: MrtrConfig,
    pub admin: AdminConfig,
    pub limits: LimitsConfig,
    pub timeouts: TimeoutsConfig,
    pub log: LogConfig,
    pub readyz: ReadyzConfig,
    /// Handle kinds the sidecar seals on the way out and checks on the way in.
    pub handles: Vec<HandleConfig>,
    pub idempotency: IdempotencyConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            upstream: "http://127.0.0.1:3000".to_owned(),
            upstream_command: UpstreamCommandConfig::default(),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            passthrough_paths: Vec::new(),
            allowed_hosts: None,
            state: StateConfig::default(),
            principal: PrincipalConfig::default(),
            tls: TlsConfig::default(),
            upstream_tls: UpstreamTlsConfig::default(),
            single_use: SingleUseConfig::default(),
            mrtr: MrtrConfig::default(),
            admin: AdminConfig::default(),
            limits: LimitsConfig::default(),
            timeouts: TimeoutsConfig::default(),
            log: LogConfig::default(),
            readyz: ReadyzConfig::default(),
            handles: Vec::new(),
            idempotency: IdempotencyConfig::default(),
        }
    }
}

/// How `requestState` tokens are keyed, bound and timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// Audience claim; required (non-empty) when `keys_file` is set.
    pub audience: Option<String>,
    /// One secret per line, `#` comments, first line mints. Unset: a process-local
    /// random key (state does not survive a restart or reach another replica).
    /// A relative path is resolved against the working directory.
    pub keys_file: Option<PathBuf>,
    /// Token lifetime per round, 1..=86400.
    pub ttl_seconds: u64,
    /// How often the key file's content hash is polled, at least 100.
    pub reload_interval_ms: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            audience: None,
            keys_file: None,
            ttl_seconds: 600,
            reload_interval_ms: 2000,
        }
    }
}

/// Where the caller's identity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrincipalSource {
    /// Tokens are not bound to a caller.
    #[default]
    None,
    /// A header set by a trusted front proxy (`principal.header`).
    Header,
    /// A verified JWT access token (`principal.jwt`).
    Jwt,
    /// The verified client certificate (`principal.mtls`, `tls.client_ca_file`).
    Mtls,
}

impl PrincipalSource {}

/// Who is calling, so tokens can be bound to the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrincipalConfig {
    pub source: PrincipalSource,
    /// Header holding the identity, stored lowercase (HTTP header names are
    /// case-insensitive; the lowercase form is what `http::HeaderName` compares).
    #[serde(deserialize_with = "lowercase")]
    pub header: String,
    /// Keep the identity header on the forwarded request. Default false: the upstream
    /// never sees it.
    pub forward_header: bool,
    /// CIDRs (or single addresses) of front proxies whose `Forwarded` / `X-Forwarded-*` /
    /// `X-Real-IP` headers are kept, and which alone may send the identity header when
    /// the list is not empty. Empty: forwarding headers from no peer are kept, and the
    /// identity header is taken from any peer (with a startup warning).
    pub trusted_proxies: Vec<String>,
    pub mtls: MtlsConfig,
    pub jwt: JwtConfig,
}

impl Default for PrincipalConfig {
    fn default() -> Self {
        PrincipalConfig {
            source: PrincipalSource::None,
            header: "x-forwarded-user".to_owned(),
            forward_header: false,
            trusted_proxies: Vec::new(),
            mtls: MtlsConfig::default(),
            jwt: JwtConfig::default(),
        }
    }
}

impl PrincipalConfig {
    /// `header` as the header name it must be (checked by [`Config::validate`] too).
    pub(crate) fn header_name(&self) -> Result<http::HeaderName, ConfigProblem> {
        http::HeaderName::from_bytes(self.header.as_bytes())
            .map_err(|_| ConfigProblem::new("principal.header", "must be a valid HTTP header name"))
    }
}

/// Where consumed single-use states are remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SingleUseStore {
    #[default]
    Memory,
    Redis,
}

/// What a single-use retry gets when its consumption cannot be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// The frozen error (`state_verified_total{result="store_unavailable"}`).
    #[default]
    Reject,
    /// Forwarded anyway, counted and logged: availability over at-most-once.
    Allow,
}

/// Single-use enforcement: which targets' states may be consumed once, and where
/// consumptions are recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SingleUseConfig {
    pub store: SingleUseStore,
    /// Redis URL for `store = "redis"`: `redis://`, `rediss://` (TLS),
    /// `redis+cluster://host1:port,host2:port` (`rediss+cluster://`) for Redis Cluster, or
    /// `redis+sentinel://s1:26379,s2:26379/<primary name>` (`rediss+sentinel://`) for a
    /// Sentinel-managed primary. May carry a password: never echoed in messages.
    pub redis_url: Option<String>,
    /// Tool names (glob `*` allowed) whose states are single-use.
    pub tools: Vec<String>,
    /// Prompt names (glob `*` allowed) whose states are single-use.
    pub prompts: Vec<String>,
    /// Resource URIs (glob `*` allowed) whose states are single-use.
    pub resources: Vec<String>,
    /// Single-use for targets no list names.
    pub(crate) default: bool,
    /// What happens when the store cannot record a consumption.
    pub on_store_error: OnStoreError,
    /// Most consumed ids the memory store holds (about 100 bytes each resident, `cargo
    /// bench --bench store`); full, it refuses new single-use retries rather than
    /// forget one.
    pub memory_max_entries: usize,
    /// Memory store only: consumed ids one caller (its principal, else its address)
    /// may hold at once; past it that caller's single-use retries get 429 until its
    /// ids expire. Unset: a tenth of `memory_max_entries`.
    pub max_entries_per_principal: Option<usize>,
    /// Prefix of every Redis key the store writes (`<prefix>c:<id>` for consumptions,
    /// `<prefix>r:<digest>` for revocations).
    pub(crate) redis_key_prefix: String,
    /// Deadline of one Redis command, in milliseconds.
    pub redis_timeout_ms: u64,
    /// Replicas that must confirm a write (`WAIT`) before it counts: `"auto"` (one
    /// whenever the primary reports a connected replica) or a number (0: never wait).
    pub redis_wait_replicas: WaitReplicas,
    /// How long a write waits for its replicas, in milliseconds; unconfirmed by then, it
    /// is released and the request refused with 503.
    pub(crate) redis_wait_ms: u64,
}

impl Default for SingleUseConfig {
    fn default() -> Self {
        SingleUseConfig {
            store: SingleUseStore::Memory,
            redis_url: None,
            tools: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            default: false,
            on_store_error: OnStoreError::Reject,
            memory_max_entries: 100_000,
            max_entries_per_principal: None,
            redis_key_prefix: "mcp-state-guard:".to_owned(),
            redis_timeout_ms: 250,
            redis_wait_replicas: WaitReplicas::Auto,
            redis_wait_ms: 100,
        }
    }
}

/// Limits per multi-round flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MrtrConfig {
    /// Most `input_required` rounds one flow may have (above the SDK clients' own cap
    /// of 10); at least 1.
    pub(crate) max_rounds: u32,
    /// Oldest a flow may get, from its first round, in seconds; at least 1.
    pub max_flow_seconds: u64,
}

impl Default for MrtrConfig {
    fn default() -> Self {
        MrtrConfig {
            max_rounds: 16,
            max_flow_seconds: 3600,
        }
    }
}

/// The admin listener's mutating endpoints.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// File holding the bearer secret of `POST /admin/revoke` (surrounding whitespace
    /// trimmed). Unset: the endpoint is refused.
    pub token_file: Option<PathBuf>,
}

/// Sizes the sidecar buffers, in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request or JSON response body read whole; at least 1024.
    pub max_body_bytes: usize,
    /// Largest single SSE event buffered; at least 1024.
    pub max_event_bytes: usize,
    /// Largest plaintext `requestState` sealed / token accepted; at least 64.
    pub max_state_bytes: usize,
    /// Most JSON values (scalars, arrays, objects) one client body may hold; at least
    /// 64. Bounds the memory a parse can take (a 4 MiB array of zeros is two million
    /// values). Upstream bodies are bounded by size only.
    pub(crate) max_json_values: usize,
    /// Budget for the bodies buffered by all requests in flight together (request
    /// bodies, whole JSON responses, SSE streams' incomplete events); over it, requests
    /// are refused with 503 and a stream ends with an error event. At least
    /// `max_body_bytes`.
    pub max_buffered_bytes: usize,
    /// Client connections served at once (both protocols); at least 1. At the limit,
    /// an idle keep-alive connection is closed to make room; without one, further
    /// connections wait in the kernel's accept backlog until one closes.
    pub max_connections: usize,
    /// Connections one client address (an IPv6 client by its /64) may hold open; past
    /// it a new one is answered 429 and closed (after closing one of that address's
    /// idle connections, if it has one). `principal.trusted_proxies` are exempt: a
    /// front proxy carries many clients. Unset: a quarter of `max_connections`.
    pub max_connections_per_peer: Option<usize>,
    /// Streams one HTTP/2 client connection may have open at once; at least 1.
    pub http2_max_concurrent_streams: u32,
    /// Largest header list (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`) a client may send,
    /// in bytes; at least 1024.
    pub http2_max_header_list_bytes: u32,
    /// Idle connections kept open to the upstream, for reuse. As many as the requests a
    /// burst has in flight: a pool smaller than that closes the rest after each answer
    /// and dials again for the next request. `timeouts.upstream_idle_ms` closes them
    /// once idle.
    pub(crate) upstream_max_idle_per_host: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            // The Python SDK's own request body limit.
            max_body_bytes: 4 * 1024 * 1024,
            max_event_bytes: 1024 * 1024,
            max_state_bytes: 64 * 1024,
            max_json_values: 100_000,
            max_buffered_bytes: 256 * 1024 * 1024,
            // A sidecar serves one pod's traffic; the memory budget, not this, bounds
            // what the connections may buffer.
            max_connections: 1024,
            max_connections_per_peer: None,
            http2_max_concurrent_streams: 100,
            http2_max_header_list_bytes: 16 * 1024,
            // 32 cost a connect per request past the 32nd in flight: under 64
            // concurrent callers the sidecar did half its throughput (docs/performance.md).
            upstream_max_idle_per_host: 256,
        }
    }
}

/// Deadlines, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsConfig {
    /// Connecting to the upstream; at least 1.
    pub connect_ms: u64,
    /// From sending the request to the upstream's response head (and again for reading a
    /// whole JSON body); at least 1.
    pub response_head_ms: u64,
    /// Graceful shutdown deadline for in-flight requests and SSE streams.
    pub drain_ms: u64,
    /// A client's request head (HTTP/1.1) must arrive within this; at least 1.
    pub header_read_ms: u64,
    /// A gated request's whole body must arrive within this; at least 1.
    pub body_read_ms: u64,
    /// A client connection with no request in progress is closed after this; at least 1.
    pub client_idle_ms: u64,
    /// An idle pooled upstream connection is closed after this; at least 1.
    pub upstream_idle_ms: u64,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        TimeoutsConfig {
            connect_ms: 5000,
            response_head_ms: 60_000,
            drain_ms: 30_000,
            header_read_ms: 10_000,
            body_read_ms: 30_000,
            // Longer than the 60 s idle timeout of common front proxies and load
            // balancers, so they close first: a connection they reuse is still open here.
            client_idle_ms: 75_000,
            // Shorter than the 5 s keep-alive of uvicorn and Node's http server, so the
            // pool drops a connection before the upstream does, not while a request is
            // being written to it.
            upstream_idle_ms: 4_000,
        }
    }
}

/// Log line encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// The format for an unset `log.format`: text for a person at a terminal, JSON for
    /// a log collector (stdout or stderr is not a terminal).
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
            LogFormat::Text
        } else {
            LogFormat::Json
        }
    }
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Unset: [`LogFormat::detect`].
    pub format: Option<LogFormat>,
    /// A `tracing_subscriber::EnvFilter` directive string, e.g. `info,hyper=warn`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: None,
            level: "info".to_owned(),
        }
    }
}

/// What `/readyz` checks besides the sidecar's own state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadyzConfig {
    /// Not ready while a TCP connection to the upstream cannot be opened.
    pub check_upstream: bool,
    /// Deadline of that connection attempt, in milliseconds; at least 1.
    pub(crate) upstream_timeout_ms: u64,
    /// Not ready while the key file has not been read back valid for this long (it
    /// became unreadable or invalid and the previous keys are still in use), in
    /// seconds; 0 disables the check.
    pub max_key_age_seconds: u64,
}

impl Default for ReadyzConfig {
    fn default() -> Self {
        ReadyzConfig {
            check_upstream: true,
            // Under the 1 s default probe timeout of Kubernetes.
            upstream_timeout_ms: 500,
            max_key_age_seconds: 3600,
        }
    }
}

/// Values given on the command line; they beat every other source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `--listen`
    pub listen: Option<SocketAddr>,
    /// `--upstream`
    pub upstream: Option<String>,
    /// `--upstream-command -- ARGV...`: sets `upstream = "stdio"` and
    /// `upstream_command.argv`.
    pub upstream_command: Option<Vec<String>>,
}

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Dotted file key (`state.ttl_seconds`); empty for a problem with the file itself.
    pub key: String,
    /// Lowercase, no trailing period, never a secret value.
    pub(crate) message: String,
}

impl ConfigProblem {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigProblem {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The environment variable that sets this problem's key.
    pub(crate) fn env_var(&self) -> String {
        env_var_for(&self.key)
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{} ({}): {}", self.key, self.env_var(), self.message)
        }
    }
}

/// Every problem found in one pass; never empty when returned by [`Config::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigProblem>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The environment variable for a dotted key: `state.keys_file` →
/// `MCP_STATE_GUARD_STATE__KEYS_FILE`.
pub fn env_var_for(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        key.to_ascii_uppercase().replace('.', "__")
    )
}

fn lowercase<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    String::deserialize(deserializer).map(|s| s.to_ascii_lowercase())
}
