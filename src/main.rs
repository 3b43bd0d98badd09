//! Command line of `mcp-state-guard`; everything else lives in the library.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use mcp_state_guard::facade::config::SingleUseStore;
use mcp_state_guard::facade::config::reload::ConfigSource;
use mcp_state_guard::facade::config::{Config, ConfigErrors, LogFormat, Overrides};
use mcp_state_guard::facade::policy::revocation::Revocations;
use mcp_state_guard::facade::store::Store;
use mcp_state_guard::facade::{app, token, version};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// jemalloc rather than the system allocator: 16 % fewer instructions per request, at
/// the same idle RSS (`cargo bench --bench harness`; docs/performance.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "mcp-state-guard", version = version::LONG, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar.
    ///
    /// Settings come from the built-in defaults, then the TOML file, then
    /// `MCP_STATE_GUARD_*` environment variables, then these flags. Stops on SIGTERM or
    /// Ctrl-C after draining; re-reads the file on change or SIGHUP.
    Run {
        /// TOML configuration file (every key: config/mcp-state-guard.toml). Watched:
        /// single-use policy changes apply without a restart.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Client-facing address (IP:PORT); overrides `listen`.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Base URL of the MCP server (http://host[:port][/base]); overrides `upstream`.
        #[arg(long, value_name = "URL", conflicts_with = "upstream_command")]
        upstream: Option<String>,
        /// Run a stdio MCP server as the sidecar's child and serve it over HTTP: the
        /// program and its arguments follow `--` (no shell), e.g.
        /// `run --upstream-command -- python server.py`. Sets `upstream = "stdio"` and
        /// `upstream_command.argv`.
        #[arg(long, requires = "argv")]
        upstream_command: bool,
        /// The stdio server's program and arguments (after `--`, with `--upstream-command`).
        #[arg(last = true, value_name = "ARGV", requires = "upstream_command")]
        argv: Vec<String>,
    },
    /// Validate the configuration (and the files it names); list every problem.
    ///
    /// Exits 0 when the sidecar would start with it, 1 with every problem listed (each
    /// names its file key and its environment variable). Reads the same sources as `run`.
    CheckConfig {
        /// TOML configuration file to check (without it: defaults and environment).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print one new key line (64 random hex characters) for `state.keys_file`.
    Keygen,
    /// Refuse every token of one principal minted before now, on every replica sharing
    /// the Redis single-use store (with the memory store, use `POST /admin/revoke` on
    /// each replica instead).
    Revoke {
        /// TOML configuration file naming the store (`single_use.redis_url`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The principal string tokens bind: the identity header's value, the mTLS
        /// identity, or for `jwt` the compact JSON `[client_id,iss,sub]`.
        #[arg(long)]
        principal: String,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Keygen => {
            println!("{}", *token::generate_secret());
            ExitCode::SUCCESS
        }
        Command::CheckConfig { config } => check_config(config),
        Command::Revoke { config, principal } => revoke(config, &principal),
        Command::Run {
            config,
            listen,
            upstream,
            upstream_command,
            argv,
        } => run(
            config,
            Overrides {
                listen,
                upstream,
                upstream_command: upstream_command.then_some(argv),
            },
        ),
    }
}

fn load(file: Option<&PathBuf>, overrides: &Overrides) -> Result<Config, Vec<String>> {
    let config = Config::load(file.map(PathBuf::as_path), overrides).map_err(listed)?;
    files_checked(config)
}

/// The configuration `run` starts with, and where it came from for the watch.
fn load_watched(
    file: Option<PathBuf>,
    overrides: Overrides,
) -> Result<(Config, Option<ConfigSource>), Vec<String>> {
    let Some(file) = file else {
        return Ok((load(None, &overrides)?, None));
    };
    let (config, source) = ConfigSource::load(file, overrides).map_err(listed)?;
    Ok((files_checked(config)?, Some(source)))
}

fn listed(errors: ConfigErrors) -> Vec<String> {
    errors.0.iter().map(ToString::to_string).collect()
}

/// `config`, once the files it names (keys, certificates and keys, CA bundles, a JWKS
/// file) are usable too, or every problem with them.
fn files_checked(config: Config) -> Result<Config, Vec<String>> {
    let problems = mcp_state_guard::facade::app::files::check_files(&config);
    if !problems.is_empty() {
        return Err(problems.iter().map(ToString::to_string).collect());
    }
    Ok(config)
}

fn revoke(file: Option<PathBuf>, principal: &str) -> ExitCode {
    let config = match load(file.as_ref(), &Overrides::default()) {
        Ok(config) => config,
        Err(problems) => {
            for problem in problems {
                eprintln!("configuration error: {problem}");
            }
            return ExitCode::FAILURE;
        }
    };
    if principal.is_empty() {
        eprintln!("--principal must not be empty");
        return ExitCode::FAILURE;
    }
    if config.single_use.store != SingleUseStore::Redis {
        eprintln!(
            "single_use.store is \"memory\": each replica keeps its own revocations; \
             use POST /admin/revoke on every replica (or configure the redis store)"
        );
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build the tokio runtime");
    runtime.block_on(async {
        let store = match Store::from_config(&config) {
            Ok(store) => Arc::new(store),
            Err(e) => {
                eprintln!("single_use: {e}");
                return ExitCode::FAILURE;
            }
        };
        let revocations = Revocations::new(
            store,
            config.longest_token_seconds(),
            config.state.audience.clone(),
        );
        match revocations.revoke(principal).await {
            Ok(at) => {
                // A revocation holds for one audience: say which, so a config file that
                // lacks the sidecars' `state.audience` is noticed, not silently useless.
                match &config.state.audience {
                    Some(audience) => println!(
                        "revoked for audience {}: tokens of this principal minted before \
                         {at:.3} are refused",
                        mcp_state_guard::facade::text::Clipped(audience)
                    ),
                    None => println!(
                        "revoked for sidecars without state.audience: tokens of this \
                         principal minted before {at:.3} are refused (sidecars with an \
                         audience need the same state.audience here)"
                    ),
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("not revoked: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn check_config(file: Option<PathBuf>) -> ExitCode {
    match load(file.as_ref(), &Overrides::default()) {
        Ok(_) => {
            println!("configuration is valid");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for problem in problems {
                eprintln!("{problem}");
            }
            ExitCode::FAILURE
        }
    }
}

fn run(file: Option<PathBuf>, overrides: Overrides) -> ExitCode {
    let (config, source) = match load_watched(file, overrides) {
        Ok(loaded) => loaded,
        Err(problems) => {
            for problem in problems {
                eprintln!("configuration error: {problem}");
            }
            return ExitCode::FAILURE;
        }
    };
    init_tracing(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let running = match app::start_from(&config, source).await {
            Ok(running) => running,
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                return ExitCode::FAILURE;
            }
        };
        wait_for_signal().await;
        // Give load balancers a moment to see /readyz fail before the listener closes.
        let grace = Duration::from_millis(config.timeouts.drain_ms / 6).min(Duration::from_secs(5));
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "shutting down: readiness off, then draining"
        );
        running.shutdown(grace).await;
        ExitCode::SUCCESS
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn init_tracing(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log.format.unwrap_or_else(LogFormat::detect) {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
